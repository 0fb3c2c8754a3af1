//! The lifecycle of installed plugins: one [`Lifecycle`] owns what is
//! installed and enabled, the processes it started, and (without a
//! backend) the catalog built from them.
//!
//! It is in four parts:
//!
//! - this module: the types, start-up ([`Lifecycle::open`]) and what every
//!   operation shares (the runtime spec of a plugin, starting one,
//!   listing);
//! - `records`: the plugins as recorded, and the state file that is the
//!   commit point of every operation;
//! - `operations`: install, upgrade, enable, disable, remove and
//!   configuration changes, one at a time;
//! - `authority`: the embedded catalog authority, which publishes a new
//!   revision whenever the set of listable plugins changes.

use crate::files::{ArchiveLimits, StateFile, private_dir, version_dir};
use crate::settings::{self, ItemStatus, Operator, Resolved, SandboxConfig, Stored};
use arc_swap::ArcSwap;
use records::{Inner, Origin, Record, clean};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use toolhost_catalog::{Installed, Store};
use toolhost_manifest::{Manifest, check_set, expand_plugin_dirs};
use toolhost_runtime::{PluginHandle, PluginSpec, Plugins, SupervisorConfig};
use toolhost_sandbox::RuleStatus;

mod authority;
mod operations;
mod records;

/// Where things live and how plugins run.
#[derive(Debug, Clone)]
pub struct LifecycleConfig {
    /// Exposed-name prefix.
    pub prefix: String,
    /// `plugins.json`, `plugins/` (installed) and `data/` live here.
    pub state_dir: PathBuf,
    /// The configuration's plugin paths (static plugins).
    pub static_paths: Vec<PathBuf>,
    /// How plugins are supervised.
    pub supervisor: SupervisorConfig,
    /// A backend owns the catalog: lifecycle operations are refused, and no
    /// embedded snapshots are published.
    pub managed: bool,
    /// How long an upgrade waits for the old process's calls to finish.
    pub drain_timeout: Duration,
    /// Caps on what an installed archive may unpack to.
    pub archive_limits: ArchiveLimits,
    /// Per plugin id, what the operator decided: environment, values,
    /// grants, sandbox rules turned off.
    pub operators: BTreeMap<String, Operator>,
    /// The sandbox's daemon-wide settings.
    pub sandbox: SandboxConfig,
}

/// Why an operation was refused or failed. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The plugin does not validate: every problem, one per line.
    #[error("{}", problems.join("\n"))]
    Invalid {
        /// Each problem, naming its file, tool and rule.
        problems: Vec<String>,
    },
    /// The source could not be read (a missing directory, a bad archive).
    #[error("cannot read {path}: {source}")]
    Unreadable {
        /// What was to be installed.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No installed plugin by that id.
    #[error("no plugin {id:?} is installed{hint}")]
    NotFound {
        /// The id asked for.
        id: String,
        /// What to do instead (may be empty).
        hint: &'static str,
    },
    /// Managed mode: the backend owns the catalog.
    #[error(
        "toolhost is in managed mode: the backend owns the catalog, so plugins are installed and \
         switched by editing the configuration and restarting, and activated by the backend's pushes"
    )]
    Managed,
    /// The plugin comes from the configuration's `plugins` paths.
    #[error("plugin {id} comes from the configuration's plugins paths; {what} it there")]
    Static {
        /// The plugin.
        id: String,
        /// What to do there ("upgrade", "remove").
        what: &'static str,
    },
    /// Already installed (install), or already at that version (upgrade).
    #[error("plugin {id} is already {state}")]
    AlreadyThere {
        /// The plugin.
        id: String,
        /// "installed (version 1.0.0); use upgrade", "at version 1.0.0".
        state: String,
    },
    /// A required configuration value is missing: the plugin is not
    /// started until it is set.
    #[error(
        "plugin {id} needs configuration before it can start: set {} (toolhost plugins config {id} NAME=VALUE, or [plugin.\"{id}\".config] in the configuration file)",
        missing.join(", ")
    )]
    NeedsConfig {
        /// The plugin.
        id: String,
        /// The required items without a value.
        missing: Vec<String>,
    },
    /// The plugin did not become ready.
    #[error("{reason}")]
    StartFailed {
        /// The plugin.
        id: String,
        /// Why, and what still holds (the old version keeps serving, ...).
        reason: String,
    },
    /// File system trouble.
    #[error("{what} ({path}): {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One plugin, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// Id.
    pub id: String,
    /// Version.
    pub version: String,
    /// Enabled.
    pub enabled: bool,
    /// `installed` (managed by toolhost) or `static` (from the configuration).
    pub origin: &'static str,
    /// Required configuration items without a value (it is not started).
    pub needs_config: Vec<String>,
    /// Each declared configuration item's state (never a value).
    pub config: Vec<ItemStatus>,
    /// What its manifest asks for, one line each.
    pub asks: Vec<String>,
    /// Declared capabilities the operator has not granted.
    pub ungranted: Vec<String>,
    /// Each sandbox rule and whether it holds on this kernel.
    pub sandbox: Vec<RuleStatus>,
}

/// The installed plugins and what happens to them.
#[derive(Debug)]
pub struct Lifecycle {
    cfg: LifecycleConfig,
    store: Arc<Store>,
    plugins: Arc<Plugins>,
    installed: Arc<ArcSwap<Installed>>,
    /// One operation at a time.
    ops: tokio::sync::Mutex<()>,
    inner: Mutex<Inner>,
    recompute: mpsc::UnboundedSender<()>,
    stored: Stored,
}

/// An I/O error while doing `what` at `path`.
fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LifecycleError {
    let path = path.to_path_buf();
    move |source| LifecycleError::Io { what, path, source }
}

fn invalid(problems: &[toolhost_manifest::Problem]) -> LifecycleError {
    LifecycleError::Invalid {
        problems: problems.iter().map(ToString::to_string).collect(),
    }
}

impl Lifecycle {
    fn install_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("plugins")
    }

    fn state_file(&self) -> PathBuf {
        self.cfg.state_dir.join("plugins.json")
    }

    fn data_root(&self) -> PathBuf {
        self.cfg.state_dir.join("data")
    }

    /// Loads what is installed, removes what an interrupted operation left
    /// behind, starts every enabled plugin, and (embedded mode) publishes the
    /// first catalog revision. Returns the lifecycle and the problems of
    /// plugins that were not loaded.
    ///
    /// Kept whole on purpose: start-up is one ordered sequence (read the state,
    /// clean leftovers, validate the set, start, publish), and each step
    /// feeds the next.
    pub fn open(
        cfg: LifecycleConfig,
        store: Arc<Store>,
        plugins: Arc<Plugins>,
    ) -> Result<(Arc<Self>, Vec<String>), LifecycleError> {
        // Plugin data holds agent text: nobody else may read the state.
        private_dir(&cfg.state_dir)
            .map_err(io("cannot create the state directory", &cfg.state_dir))?;
        let state_path = cfg.state_dir.join("plugins.json");
        let file = StateFile::load(&state_path)
            .map_err(io("cannot read the plugin state", &state_path))?;
        let install_dir = cfg.state_dir.join("plugins");
        clean(&install_dir, &file);

        let (static_dirs, mut problems) = expand_plugin_dirs(&cfg.static_paths);
        let installed_dirs: Vec<PathBuf> = file
            .installed
            .iter()
            .map(|(id, v)| version_dir(&install_dir, id, v))
            .collect();
        let all: Vec<PathBuf> = static_dirs
            .iter()
            .cloned()
            .chain(installed_dirs.iter().cloned())
            .collect();
        let set = check_set(&cfg.prefix, &all);
        // A configured or installed plugin with a broken schema serves its
        // other tools; the broken one is withheld by the catalog.
        for m in &set.plugins {
            for d in &m.defects {
                tracing::error!(plugin = %m.id, "tool withheld: {d}");
            }
        }
        let mut warnings: Vec<String> = problems
            .drain(..)
            .chain(set.problems)
            .map(|p| p.to_string())
            .collect();
        let mut records = BTreeMap::new();
        for m in set.plugins {
            let origin = if installed_dirs.contains(&m.dir) {
                Origin::Installed
            } else {
                Origin::Static
            };
            let enabled = !file.disabled.contains(&m.id);
            let resolved = resolve_for(&cfg, &m, &mut warnings);
            records.insert(
                m.id.clone(),
                Record {
                    manifest: m,
                    origin,
                    enabled,
                    handle: None,
                    resolved,
                    listable: true,
                },
            );
        }
        for id in file.installed.keys() {
            if !records.contains_key(id) {
                warnings.push(format!("installed plugin {id} could not be loaded"));
            }
        }
        let installed = Arc::new(ArcSwap::from_pointee(Installed::from_manifests(
            records.values().map(|r| &r.manifest),
        )));
        let (tx, rx) = mpsc::unbounded_channel();
        let lc_state_dir = cfg.state_dir.clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let lc = Arc::new(Self {
            inner: Mutex::new(Inner {
                records,
                file,
                generation: format!("embedded-{now}-{}", std::process::id()),
                revision: 0,
                listed: None,
            }),
            cfg,
            store,
            plugins,
            installed,
            ops: tokio::sync::Mutex::new(()),
            recompute: tx,
            stored: Stored::new(&lc_state_dir),
        });
        {
            let mut inner = lc.lock();
            let ids: Vec<String> = inner
                .records
                .iter()
                .filter(|(_, r)| r.enabled)
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                if let Some(r) = inner.records.get_mut(&id) {
                    if r.resolved.missing.is_empty() {
                        r.handle = Some(lc.start(&r.manifest, &r.resolved));
                    } else {
                        tracing::warn!(plugin = %id, missing = ?r.resolved.missing, "plugin not started: it needs configuration");
                        lc.plugins.set_needs_config(&id, &r.resolved.missing);
                    }
                }
            }
        }
        if !lc.cfg.managed {
            lc.publish();
            tokio::spawn(authority::run(Arc::clone(&lc), rx));
        }
        Ok((lc, warnings))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The installed declarations (for checking pushes in managed mode).
    #[must_use]
    pub fn installed(&self) -> Arc<ArcSwap<Installed>> {
        Arc::clone(&self.installed)
    }

    fn operator(&self, id: &str) -> Operator {
        self.cfg.operators.get(id).cloned().unwrap_or_default()
    }

    /// What the runtime runs for `m`: its environment, configuration and
    /// sandbox.
    fn spec(&self, m: &Manifest, resolved: &Resolved) -> PluginSpec {
        let op = self.operator(&m.id);
        let mut spec = crate::spec::plugin_spec(m, &self.data_root());
        spec.pass_env = settings::pass_env(m, &op);
        spec.config.clone_from(&resolved.delivered);
        spec.sandbox = settings::sandbox_policy(m, &op, &self.cfg.sandbox);
        spec
    }

    /// Starts supervising a plugin and registers it; its state changes feed
    /// the authority.
    fn start(&self, m: &Manifest, resolved: &Resolved) -> Arc<PluginHandle> {
        let handle = self.spawn(m, resolved);
        self.plugins.set_needs_config(&m.id, &[]);
        self.plugins.insert(Arc::clone(&handle));
        handle
    }

    /// Starts supervising a plugin without registering it (a replacement
    /// that must be ready before it takes over); its state changes feed
    /// the authority.
    fn spawn(&self, m: &Manifest, resolved: &Resolved) -> Arc<PluginHandle> {
        toolhost_sandbox::log_kernel_gaps();
        let handle = self
            .plugins
            .supervise(self.spec(m, resolved), self.cfg.supervisor.clone());
        let mut w = handle.subscribe();
        let tx = self.recompute.clone();
        tokio::spawn(async move {
            while w.changed().await.is_ok() {
                if tx.send(()).is_err() {
                    break;
                }
            }
        });
        handle
    }

    /// Resolves `m`'s configuration now, logging what is wrong with the
    /// file's values.
    fn resolve_logged(&self, m: &Manifest) -> Resolved {
        let mut warnings = Vec::new();
        let r = resolve_for(&self.cfg, m, &mut warnings);
        for w in warnings {
            tracing::warn!("{w}");
        }
        r
    }

    /// Every plugin, by id.
    #[must_use]
    pub fn list(&self) -> Vec<PluginInfo> {
        self.lock()
            .records
            .values()
            .map(|r| {
                let op = self.operator(&r.manifest.id);
                PluginInfo {
                    id: r.manifest.id.clone(),
                    version: r.manifest.version.to_string(),
                    enabled: r.enabled,
                    origin: match r.origin {
                        Origin::Static => "static",
                        Origin::Installed => "installed",
                    },
                    needs_config: r.resolved.missing.clone(),
                    config: r.resolved.items.clone(),
                    asks: r.manifest.asks(),
                    ungranted: settings::ungranted(&r.manifest, &op),
                    sandbox: toolhost_sandbox::enforcement(&settings::sandbox_policy(
                        &r.manifest,
                        &op,
                        &self.cfg.sandbox,
                    )),
                }
            })
            .collect()
    }

    /// Stops every plugin (daemon shutdown).
    pub async fn shutdown(&self) {
        let handles = self.plugins.all();
        futures::future::join_all(handles.iter().map(|h| h.stop())).await;
    }
}

/// Resolves `m`'s configuration from its stored values and the file's,
/// adding what is wrong with them to `warnings`.
fn resolve_for(cfg: &LifecycleConfig, m: &Manifest, warnings: &mut Vec<String>) -> Resolved {
    let stored = Stored::new(&cfg.state_dir).load(&m.id).unwrap_or_else(|e| {
        warnings.push(format!(
            "plugin {}: its stored configuration is unreadable and ignored: {e}",
            m.id
        ));
        BTreeMap::new()
    });
    let file = cfg
        .operators
        .get(&m.id)
        .map(|o| o.config.clone())
        .unwrap_or_default();
    warnings.extend(settings::check_file(m, &file));
    settings::resolve(m, &stored, &settings::without_inline_secrets(m, &file))
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A lifecycle on a scratch state directory, with no backend.

    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::*;

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
            archive_limits: crate::files::ArchiveLimits::default(),
            operators: BTreeMap::new(),
            sandbox: SandboxConfig::default(),
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
