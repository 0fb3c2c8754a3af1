//! The lifecycle of installed plugins: one [`Lifecycle`] owns what is
//! installed and enabled, the processes it started, and (without a
//! backend) the catalog built from them.
//!
//! Its parts, each depending only on those above it:
//!
//! - `records`: the plugins as recorded, and the clean-up of what the state
//!   file (the commit point of every operation) does not name;
//! - `core`: the [`Lifecycle`] itself, its configuration and errors, and
//!   what every operation shares (the runtime spec of a plugin, starting
//!   one, saving the state file, listing);
//! - `start`: start-up ([`Lifecycle::open`]);
//! - `operations`: install, upgrade, enable, disable, remove and
//!   configuration changes, one at a time;
//! - `held`: upgrades held for the operator (`contract_changes = "hold"`,
//!   a changed sandbox ask) and their acceptance;
//! - `reload`: a plugin served from its own directory, reloaded in place
//!   (`serve --dev`);
//! - `authority`: the embedded catalog authority, which publishes a new
//!   revision whenever the set of listable plugins changes;
//! - `disk`: what is known of each plugin's disk use and quota;
//! - `quota`: the watcher that reads it, and the read-only switch where
//!   no kernel quota holds it.

mod authority;
mod core;
mod disk;
mod held;
mod operations;
mod placed;
mod placement;
mod preview;
mod pulled;
mod quota;
mod records;
mod reload;
mod start;

pub use self::core::{HeldInfo, Lifecycle, LifecycleConfig, LifecycleError, PluginInfo, Standing};
pub use self::disk::{DISK_CHECK, DiskInfo};
pub use self::held::{Reviewed, UpgradeOptions, Upgraded};
pub use self::placed::{PlacedPlugin, PlacedState, Placement, PlacementStatus};
pub use self::pulled::{PulledInstall, RegistryConfig};

#[cfg(test)]
pub(crate) mod fixture {
    //! A lifecycle on a scratch state directory, with no backend.

    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::core::*;
    use crate::settings::SandboxConfig;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;
    use toolhost_catalog::Store;
    use toolhost_runtime::{Plugins, SupervisorConfig};

    /// A scratch directory, removed when dropped.
    pub(crate) struct Scratch(pub(crate) PathBuf);

    impl Scratch {
        pub(crate) fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "toolhost-lifecycle-{tag}-{}-{}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes a valid plugin `id` (one tool, `ping`) under `parent`.
    pub(crate) fn plugin(parent: &Path, id: &str, version: &str) -> PathBuf {
        let dir = parent.join(format!("{id}-{version}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.toml"),
            format!(
                "id = \"{id}\"\nversion = \"{version}\"\nname = \"{id}\"\ndescription = \"A test plugin.\"\n\
                 [runtime]\ncommand = \"/bin/false\"\n\
                 [[tools]]\nname = \"ping\"\ndescription = \"Answers.\"\nsurfaces = [\"chat\"]\n\
                 input_schema = {{ type = \"object\" }}\n"
            ),
        )
        .unwrap();
        dir
    }

    pub(crate) fn config(state: &Path) -> LifecycleConfig {
        LifecycleConfig {
            prefix: "kandev".into(),
            state_dir: state.to_path_buf(),
            static_paths: Vec::new(),
            supervisor: SupervisorConfig::default(),
            managed: false,
            drain_timeout: Duration::from_secs(1),
            archive_limits: toolhost_package::archive::ArchiveLimits::default(),
            trust: toolhost_package::statement::TrustPolicy::default(),
            contracts: crate::contract::ContractPolicy::default(),
            operators: BTreeMap::new(),
            sandbox: SandboxConfig::default(),
            registry: super::RegistryConfig::default(),
        }
    }

    /// A configuration with one static plugin, `tp` 1.0.0, recorded as
    /// disabled (so nothing is started).
    pub(crate) fn disabled_static_plugin(state: &Path) -> LifecycleConfig {
        let dir = plugin(state, "tp", "1.0.0");
        crate::files::StateFile {
            disabled: ["tp".to_owned()].into(),
            ..crate::files::StateFile::default()
        }
        .save(&state.join("plugins.json"))
        .unwrap();
        let mut cfg = config(state);
        cfg.static_paths = vec![dir];
        cfg
    }

    /// Opens a lifecycle over `cfg`; panics on a start-up error.
    pub(crate) fn open(cfg: LifecycleConfig) -> (Arc<Lifecycle>, Arc<Store>, Vec<String>) {
        let store = Arc::new(Store::new("kandev"));
        let (lc, warnings) =
            Lifecycle::open(cfg, Arc::clone(&store), Arc::new(Plugins::new())).unwrap();
        (lc, store, warnings)
    }
}
