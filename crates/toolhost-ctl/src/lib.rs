//! The operator's client: every command that talks to a running daemon or
//! a fleet, and `toolhost call`, which talks to one as an agent would.
//!
//! - the admin commands (`status`, `tools`, `tasks`, `approvals`, `catalog`,
//!   `plugins`) over the admin socket ([`ops`], [`status`], [`show`],
//!   [`catalog`], [`approvals`]);
//! - the fleet's commands over NATS (`fleet status`, `fleet push`,
//!   `catalog push --nats`, `catalog build`) ([`fleet`]);
//! - `toolhost push`, a package into an OCI registry ([`publish`]);
//! - `toolhost call` over MCP with rmcp's client, following a task when
//!   the call becomes one ([`call`]).
//!
//! Everything a daemon, a plugin or the fleet says is printed through the
//! one escaping rule (`toolhost_base::term`).
//!
//! What this crate must not do: change anything but through the daemon's
//! own APIs, or print a value a daemon said without the escaping rule.

#![forbid(unsafe_code)]

pub mod approvals;
pub mod call;
mod call_client;
mod call_task;
pub mod catalog;
pub mod fleet;
pub mod ops;
pub mod placing;
pub mod publish;
mod show;
pub mod status;
mod upgrades;
