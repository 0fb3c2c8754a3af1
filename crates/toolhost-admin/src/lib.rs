//! The admin API (docs/CONTRACT.md §6): how a backend drives toolhost and how
//! the operator CLI talks to a running daemon.
//!
//! `toolhost.admin.v1.Admin` is served on a Unix socket created with mode
//! 0600 (the file system is the access control; a plugin's process, which
//! runs as the daemon's user, is refused by the runtime's registry), and
//! optionally on TCP where every call must carry `authorization: Bearer
//! <token>`, compared in constant time. Both listeners are held to the
//! daemon's connection limits (`toolhost_net::limits`).
//!
//! The API pushes catalog snapshots (managed mode only), reads the catalog
//! and the daemon's status, binds and revokes HTTP session tokens, lists,
//! restarts, installs, upgrades, enables, disables and removes plugins,
//! sets their configuration (`SetPluginConfig`), and streams catalog and
//! plugin events.
//!
//! The one state this crate keeps is its socket's token ([`token`]): 128
//! random bits written beside the socket at start. Everything it serves
//! belongs to another part of the daemon, handed over as a narrow view
//! ([`AdminState`]): a push goes to the managed catalog
//! (`toolhost_managed`, which keeps the fence and the last-good
//! snapshot), a binding to the token table, a lifecycle call to the
//! lifecycle.
//!
//! What this crate must not do: bypass the managed catalog's, the store's
//! or the lifecycle's rules, or keep a state of the daemon's as its own.

#![forbid(unsafe_code)]

mod authority;
mod listing;
pub mod placement;
mod policy;
mod requests;
mod server;
mod service;
mod status;
pub mod token;

pub use authority::{MAX_HEADER_LIST, relay as relay_authority};
pub use server::{AdminError, BoundSocket, Client, connect_unix, serve_tcp, serve_unix};
pub use service::{AdminService, AdminState, NEEDS_CONFIG, OUTCOME_KEY};
pub use toolhost_proto::admin;
