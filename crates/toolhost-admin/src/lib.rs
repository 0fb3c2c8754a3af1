//! The admin API (docs/CONTRACT.md §6): how a backend drives toolhost and how
//! the operator CLI talks to a running daemon.
//!
//! `toolhost.admin.v1.Admin` is served on a Unix socket created with mode
//! 0600 (the file system is the access control), and optionally on TCP where
//! every call must carry `authorization: Bearer <token>`, compared in
//! constant time. It pushes catalog snapshots (managed mode only), reads the
//! catalog and the daemon's status, binds and revokes HTTP session tokens,
//! lists and restarts plugins, and streams catalog and plugin events.
//!
//! What this crate must not do: hold state of its own or bypass the store's
//! rules. Every push goes through `Store::offer_managed`, which decides; a
//! pushed descriptor is served only if it matches the installed declaration.

mod convert;
pub mod fence;
mod limits;
mod server;
mod service;

pub use convert::{snapshot_from_proto, snapshot_to_proto};
pub use limits::{ConnectionLimits, Limited, PREFACE_BYTES};
pub use server::{AdminError, connect_unix, serve_tcp, serve_unix};
pub use service::{AdminService, AdminState};
pub use toolhost_proto::admin;
