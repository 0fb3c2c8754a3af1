//! The daemon, assembled once: `toolhost serve` and `toolhost serve --dev`.
//!
//! [`config`] reads the operator's file (and only reads it: every section
//! is declared once, as the file's shape); [`settings`] resolves it, with
//! the command line's overrides, into the library crates' own types. The
//! daemon ([`serve`]) wires the crates from those: the catalog store, the
//! lifecycle and its plugins, the pipeline and the call host, what agents
//! are shown, the MCP transports, the admin API, the managed catalog and
//! the fleet link. It hands each transport a narrow view of the parts it
//! serves, and assembles `/metrics` from each part's own numbers
//! ([`metrics`]). It also decides when the process gives memory back to
//! the system ([`memory`]) and where traces go ([`telemetry`]).
//!
//! What this crate must not do: hold a rule of the product. A rule
//! enforced only here is a rule the library crates' tests cannot see; this
//! crate reads configuration, wires, and reports.

#![forbid(unsafe_code)]

pub mod config;
pub mod dev;
mod dev_watch;
mod memory;
mod metrics;
mod oauth;
mod policy;
mod registry;
mod sandboxing;
mod secret;
pub mod serve;
pub mod settings;
mod telemetry;
mod trust;

pub use config::{Config, default_state_dir, read_secret};
pub use serve::{ServeArgs, run};
