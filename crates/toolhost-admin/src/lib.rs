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
//! The one state this crate keeps is the catalog's epoch fence in managed
//! mode ([`fence`]): written to `<state_dir>/catalog-fence.json` after
//! every accepted push and restored at start, so a restart cannot let a
//! dead backend's delayed push take over.
//!
//! What this crate must not do: bypass the store's or the lifecycle's
//! rules. Every push goes through `Store::offer_managed`, which decides (a
//! pushed descriptor is served only if it matches the installed
//! declaration); every lifecycle call goes through `Lifecycle`.

#![forbid(unsafe_code)]

mod authority;
mod convert;
pub mod fence;
mod link;
mod server;
mod service;
pub mod token;

pub use convert::{snapshot_from_proto, snapshot_to_proto};
pub use link::{FleetLink, LinkView};
pub use server::{AdminError, BoundSocket, Client, connect_unix, serve_tcp, serve_unix};
pub use service::{
    AdminService, AdminState, NEEDS_CONFIG, OUTCOME_KEY, binding_from_proto, offer_pushed,
};
pub use toolhost_proto::admin;
