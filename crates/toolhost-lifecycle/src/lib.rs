//! Installed plugins, live (docs/PROTOCOL.md §6), and the embedded catalog
//! authority (docs/CONTRACT.md §1: without a backend, toolhost builds its catalog
//! from the installed plugins).
//!
//! Every operation (install, upgrade, enable, disable, remove) ends in a new
//! catalog revision that connected agents learn through
//! `tools/list_changed`; neither toolhost nor any session restarts.
//!
//! What is installed and enabled lives in one state file,
//! `<state_dir>/plugins.json`, always written whole and renamed into place.
//! Installed plugins live in `<state_dir>/plugins/<id>@<version>/`, staged in
//! a `.staging-*` directory and renamed into place, and only then recorded in
//! the state file. The state file is the commit point: at start-up, any
//! directory it does not name (an interrupted install or upgrade) is
//! deleted, so nothing is ever half-installed.
//!
//! Plugins named by the configuration's `plugins` paths are *static*: they
//! can be enabled and disabled, but not upgraded or removed (edit the
//! configuration instead).
//!
//! The operator's side of a plugin lives here too ([`settings`]): where
//! each configuration value comes from (the admin API, the configuration
//! file's inline values, `<name>_file` and `<name>_env`, the manifest's
//! default), how values are checked and stored, and the sandbox policy that
//! follows from the declared capabilities and the operator's grants. The
//! binary only parses TOML into these types.
//!
//! What this crate must not do: bypass validation (every install and
//! upgrade is validated against everything installed, as `toolhost check`
//! does), put a configuration value into an error, a log line or a status,
//! or apply a sandbox itself (it builds the policy; `toolhost-sandbox`
//! applies it).

#![forbid(unsafe_code)]

pub mod contract;
pub mod drift;
mod files;
mod lifecycle;
pub mod settings;
mod spec;

pub use files::private_dir;
pub use lifecycle::{
    DISK_CHECK, DiskInfo, HeldInfo, Lifecycle, LifecycleConfig, LifecycleError, PlacedPlugin,
    PlacedState, Placement, PlacementStatus, PluginInfo, PulledInstall, RegistryConfig, Reviewed,
    Standing, UpgradeOptions, Upgraded,
};
pub use spec::plugin_spec;
