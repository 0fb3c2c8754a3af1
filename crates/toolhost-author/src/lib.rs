//! The plugin author's tools: `toolhost new` (a plugin to start from, in
//! Rust, Python or TypeScript, on the published SDKs or local artifacts),
//! `toolhost pack` (a plugin built and packed into the archive an install
//! takes, checked as an install would check it), and `toolhost check`
//! (manifests, schemas and names as one installed set, and with `--start`
//! the plugin's code against its manifest), and `toolhost schema sync` (the
//! shapes the code states in its own types, written into the manifest's
//! schema files: the code states a shape once, and the manifest still
//! carries it, checked, before install), and `toolhost harness` (the
//! call pipeline, for an SDK's test harness to run a tool in the test's own
//! process through the rules an agent's call meets). `toolhost serve --dev`, the
//! daemon for one plugin's author, is the daemon's (`toolhost-daemon`).
//!
//! What this crate must not do: accept a plugin an install would refuse,
//! or write an archive the daemon would not install.

#![forbid(unsafe_code)]

mod build;
pub mod check;
pub mod code;
pub mod harness;
pub mod new;
pub mod pack;
pub mod sign;
pub mod sync;
