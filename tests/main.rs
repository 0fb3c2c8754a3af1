//! The end-to-end suites, one module per area, in one test binary: the
//! real `toolhost` binary, real plugin processes, real MCP and gRPC
//! clients (see ARCHITECTURE.md). One binary links the daemon's crates
//! once; twenty-eight did it twenty-eight times.
//!
//! `cargo test -p toolhost-e2e --test e2e -- sandbox::` runs one suite;
//! the support code they share is the `toolhost_e2e` library
//! (`support/`).

mod admin;
mod authoring;
mod chaos;
mod check;
mod config;
mod disk;
mod edge;
mod examples;
mod firsthour;
mod fleet;
mod hostile;
mod lifecycle;
mod listing;
mod mcp;
mod oauth;
mod placement;
mod policy;
mod registry;
mod rich;
mod runtime;
mod sandbox;
mod scale;
mod sdks;
mod session_calls;
mod signing;
mod stateless;
mod tasks;
mod telemetry;
mod tidy;
