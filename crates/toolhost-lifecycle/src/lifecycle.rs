//! The lifecycle operations and the embedded authority.

use crate::files::{ArchiveLimits, StateFile, private_dir, stage, staging_dir, version_dir};
use crate::settings::{self, ItemStatus, Operator, Resolved, SandboxConfig, Stored};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use toolhost_catalog::{Installed, Outcome, Snapshot, Store};
use toolhost_manifest::{Manifest, check_set, expand_plugin_dirs, naming};
use toolhost_pipeline::Plugins;
use toolhost_runtime::sandbox::RuleStatus;
use toolhost_runtime::{Phase, PluginHandle, PluginSpec, SupervisorConfig, supervise};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Static,
    Installed,
}

#[derive(Debug)]
struct Record {
    manifest: Manifest,
    origin: Origin,
    enabled: bool,
    handle: Option<Arc<PluginHandle>>,
    /// Its configuration, resolved; a plugin with a required item missing
    /// is not started.
    resolved: Resolved,
    /// Its tools may be listed: it was present at start-up, or has been ready
    /// since it was installed or enabled.
    listable: bool,
}

#[derive(Debug)]
struct Inner {
    records: BTreeMap<String, Record>,
    file: StateFile,
    generation: String,
    revision: u64,
    /// (id, version) of the plugins in the last published snapshot.
    listed: Option<Vec<(String, String)>>,
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
            tokio::spawn(authority(Arc::clone(&lc), rx));
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
        toolhost_runtime::sandbox::log_kernel_gaps();
        let handle = Arc::new(supervise(
            self.spec(m, resolved),
            self.cfg.supervisor.clone(),
        ));
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

    /// Publishes a new revision if the set of listed plugins changed, and
    /// returns the current revision. Embedded mode only.
    fn publish(&self) -> u64 {
        if self.cfg.managed {
            return self.store.current().revision();
        }
        let mut inner = self.lock();
        for r in inner.records.values_mut() {
            if r.handle
                .as_ref()
                .is_some_and(|h| h.state().phase == Phase::Ready)
            {
                r.listable = true;
            }
        }
        let listed: Vec<&Manifest> = inner
            .records
            .values()
            .filter(|r| {
                r.enabled
                    && r.listable
                    && r.handle
                        .as_ref()
                        .is_some_and(|h| !matches!(h.state().phase, Phase::Failed | Phase::Stopped))
            })
            .map(|r| &r.manifest)
            .collect();
        let key: Vec<(String, String)> = listed
            .iter()
            .map(|m| (m.id.clone(), m.version.to_string()))
            .collect();
        if inner.listed.as_ref() == Some(&key) {
            return inner.revision;
        }
        let revision = inner.revision + 1;
        let snapshot =
            Snapshot::from_manifests(&self.cfg.prefix, inner.generation.clone(), revision, listed);
        let r = self.store.offer(snapshot);
        if matches!(r.outcome, Outcome::Accepted | Outcome::Unchanged) {
            tracing::info!(generation = %inner.generation, revision, plugins = key.len(), "catalog revision");
        } else {
            tracing::error!(outcome = r.outcome.as_str(), reasons = ?r.reasons, "the embedded catalog was refused");
        }
        for d in &r.defects {
            tracing::error!(tool = %d.tool, reason = %d.reason, "tool withheld");
        }
        inner.revision = revision;
        inner.listed = Some(key);
        revision
    }

    fn refuse_if_managed(&self) -> Result<(), LifecycleError> {
        if self.cfg.managed {
            return Err(LifecycleError::Managed);
        }
        Ok(())
    }

    fn save(&self, inner: &Inner) -> Result<(), LifecycleError> {
        inner
            .file
            .save(&self.state_file())
            .map_err(io("cannot write the plugin state", &self.state_file()))
    }

    fn refresh_installed(&self, inner: &Inner) {
        self.installed.store(Arc::new(Installed::from_manifests(
            inner.records.values().map(|r| &r.manifest),
        )));
    }

    /// Stages `source` (a plugin directory or a `.tar.gz` of one), loads and
    /// validates it. The staging directory is removed on failure.
    fn stage_and_load(&self, source: &Path) -> Result<(PathBuf, Manifest), LifecycleError> {
        let staging = staging_dir(&self.install_dir())
            .map_err(io("cannot stage the plugin", &self.install_dir()))?;
        let loaded = stage(source, &staging, self.cfg.archive_limits)
            .map_err(|e| LifecycleError::Unreadable {
                path: source.to_path_buf(),
                source: e,
            })
            .and_then(|()| {
                // An install is validated as `toolhost check` would: a
                // schema that would be withheld refuses it.
                match Manifest::load(&staging) {
                    Err(problems) => Err(invalid(&problems)),
                    Ok(m) if !m.defects.is_empty() => Err(invalid(&m.defects)),
                    Ok(m) => Ok(m),
                }
            });
        match loaded {
            Ok(m) => Ok((staging, m)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                Err(e)
            }
        }
    }

    /// Exposed-name collisions between `m` and every other installed plugin.
    fn collisions(&self, inner: &Inner, m: &Manifest) -> Result<(), LifecycleError> {
        let mut pairs: Vec<(&str, &str)> = inner
            .records
            .values()
            .filter(|r| r.manifest.id != m.id)
            .flat_map(|r| {
                r.manifest
                    .tools
                    .iter()
                    .map(move |t| (r.manifest.id.as_str(), t.name.as_str()))
            })
            .collect();
        pairs.extend(m.tools.iter().map(|t| (m.id.as_str(), t.name.as_str())));
        let clashes: Vec<String> = naming::find_collisions(&self.cfg.prefix, pairs)
            .into_iter()
            .map(|c| {
                format!(
                    "exposed name `{}` of plugin {:?} (tool {}) collides with plugin {:?} (tool {})",
                    c.exposed, c.second.0, c.second.1, c.first.0, c.first.1
                )
            })
            .collect();
        if clashes.is_empty() {
            Ok(())
        } else {
            Err(LifecycleError::Invalid { problems: clashes })
        }
    }

    /// Moves a staged plugin into `<id>@<version>` and reloads it from there.
    fn place(&self, staging: &Path, m: &Manifest) -> Result<Manifest, LifecycleError> {
        let target = version_dir(&self.install_dir(), &m.id, &m.version.to_string());
        if target.exists() {
            let _ = std::fs::remove_dir_all(&target);
        }
        std::fs::rename(staging, &target)
            .map_err(io("cannot move the plugin into place", &target))?;
        Manifest::load(&target).map_err(|p| invalid(&p))
    }

    async fn wait_ready(&self, h: &PluginHandle, m: &Manifest) -> Result<(), LifecycleError> {
        let mut rx = h.subscribe();
        let limit = Duration::from_millis(m.runtime.startup_timeout_ms) + Duration::from_secs(2);
        let waited = tokio::time::timeout(
            limit,
            rx.wait_for(|s| matches!(s.phase, Phase::Ready | Phase::Failed | Phase::Restarting)),
        )
        .await;
        match waited {
            Ok(Ok(s)) if s.phase == Phase::Ready => Ok(()),
            _ => {
                let why = h
                    .state()
                    .last_error
                    .unwrap_or_else(|| "it did not become ready in time".to_owned());
                Err(LifecycleError::StartFailed {
                    id: m.id.clone(),
                    reason: why,
                })
            }
        }
    }

    /// Installs a plugin: validated against everything installed, moved into
    /// place in one rename, recorded, started; its tools enter the catalog
    /// when it is ready. Returns the catalog revision.
    pub async fn install(&self, source: &Path) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (staging, m) = self.stage_and_load(source)?;
        let checked = {
            let inner = self.lock();
            match inner.records.get(&m.id) {
                Some(r) => Err(LifecycleError::AlreadyThere {
                    id: m.id.clone(),
                    state: format!("installed (version {}); use upgrade", r.manifest.version),
                }),
                None => self.collisions(&inner, &m),
            }
        };
        if let Err(e) = checked {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let m = self.place(&staging, &m)?;
        let resolved = self.resolve_logged(&m);
        let handle = {
            let mut inner = self.lock();
            inner
                .file
                .installed
                .insert(m.id.clone(), m.version.to_string());
            inner.file.disabled.remove(&m.id);
            self.save(&inner)?;
            let handle = if resolved.missing.is_empty() {
                Some(self.start(&m, &resolved))
            } else {
                self.plugins.set_needs_config(&m.id, &resolved.missing);
                None
            };
            inner.records.insert(
                m.id.clone(),
                Record {
                    manifest: m.clone(),
                    origin: Origin::Installed,
                    enabled: true,
                    handle: handle.clone(),
                    resolved: resolved.clone(),
                    listable: false,
                },
            );
            self.refresh_installed(&inner);
            handle
        };
        tracing::info!(plugin = %m.id, version = %m.version, "installed");
        let Some(handle) = handle else {
            return Err(LifecycleError::NeedsConfig {
                id: m.id.clone(),
                missing: resolved.missing,
            });
        };
        let ready = self.wait_ready(&handle, &m).await;
        let revision = self.publish();
        ready
            .map(|()| revision)
            .map_err(|e| LifecycleError::StartFailed {
                id: m.id.clone(),
                reason: format!(
                    "plugin {} is installed but not ready ({e}); its tools will appear when it is",
                    m.id
                ),
            })
    }

    /// Upgrades an installed plugin to the version in `source`. The new
    /// process must be ready before anything changes; then the catalog
    /// switches in one revision, calls already on the old process finish
    /// (up to the drain timeout), and the old process stops. A new version
    /// that cannot start leaves the old one serving.
    ///
    /// Kept whole on purpose: the upgrade's order is its correctness (start the
    /// new version, switch the catalog, drain, stop the old); in one place it
    /// can be read and checked as one.
    pub async fn upgrade(&self, source: &Path) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (staging, m) = self.stage_and_load(source)?;
        let checked = {
            let inner = self.lock();
            match inner.records.get(&m.id) {
                None => Err(LifecycleError::NotFound {
                    id: m.id.clone(),
                    hint: "; use install",
                }),
                Some(r) if r.origin == Origin::Static => Err(LifecycleError::Static {
                    id: m.id.clone(),
                    what: "upgrade",
                }),
                Some(r) if r.manifest.version == m.version => Err(LifecycleError::AlreadyThere {
                    id: m.id.clone(),
                    state: format!("at version {}", m.version),
                }),
                Some(_) => self.collisions(&inner, &m),
            }
        };
        if let Err(e) = checked {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        let resolved = self.resolve_logged(&m);
        if !resolved.missing.is_empty() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(LifecycleError::StartFailed {
                id: m.id.clone(),
                reason: format!(
                    "version {} of {} needs configuration the running version does not: set {} in [plugin.\"{}\".config] first; the old version keeps serving",
                    m.version,
                    m.id,
                    resolved.missing.join(", "),
                    m.id
                ),
            });
        }
        let m = self.place(&staging, &m)?;
        let new = self.start(&m, &resolved);
        if let Err(e) = self.wait_ready(&new, &m).await {
            new.stop().await;
            self.plugins.remove_version(&m.id, &m.version.to_string());
            let _ = std::fs::remove_dir_all(&m.dir);
            return Err(LifecycleError::StartFailed {
                id: m.id.clone(),
                reason: format!(
                    "version {} of {} did not start ({e}); the old version keeps serving",
                    m.version, m.id
                ),
            });
        }
        let (old_handle, old_dir, old_version) = {
            let mut inner = self.lock();
            inner
                .file
                .installed
                .insert(m.id.clone(), m.version.to_string());
            self.save(&inner)?;
            let Some(r) = inner.records.get_mut(&m.id) else {
                return Err(LifecycleError::NotFound {
                    id: m.id.clone(),
                    hint: " (it was removed meanwhile)",
                });
            };
            let old_dir = r.manifest.dir.clone();
            let old_version = r.manifest.version.to_string();
            r.manifest = m.clone();
            r.resolved = resolved;
            r.listable = true;
            let old = r.handle.replace(Arc::clone(&new));
            if !r.enabled {
                // Upgrading a disabled plugin installs the files only.
                r.handle = None;
            }
            self.refresh_installed(&inner);
            (old, old_dir, old_version)
        };
        let revision = self.publish();
        tracing::info!(plugin = %m.id, from = %old_version, to = %m.version, revision, "upgraded");
        if let Some(old) = old_handle {
            self.drain_and_stop(&old).await;
            self.plugins.remove_version(&m.id, &old_version);
        }
        if self.lock().records.get(&m.id).is_some_and(|r| !r.enabled) {
            new.stop().await;
            self.plugins.remove_version(&m.id, &m.version.to_string());
        }
        let _ = std::fs::remove_dir_all(old_dir);
        Ok(revision)
    }

    /// Enables a plugin: started, and its tools return when it is ready.
    pub async fn enable(&self, id: &str) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (handle, m) = {
            let mut inner = self.lock();
            let Some(r) = inner.records.get(id) else {
                return Err(LifecycleError::NotFound {
                    id: id.to_owned(),
                    hint: "",
                });
            };
            if r.enabled {
                drop(inner);
                return Ok(self.publish());
            }
            let m = r.manifest.clone();
            let resolved = r.resolved.clone();
            let handle = resolved
                .missing
                .is_empty()
                .then(|| self.start(&m, &resolved));
            if let Some(r) = inner.records.get_mut(id) {
                r.enabled = true;
                r.listable = false;
                r.handle.clone_from(&handle);
            }
            inner.file.disabled.remove(id);
            self.save(&inner)?;
            let Some(handle) = handle else {
                self.plugins.set_needs_config(id, &resolved.missing);
                return Err(LifecycleError::NeedsConfig {
                    id: id.to_owned(),
                    missing: resolved.missing,
                });
            };
            (handle, m)
        };
        let ready = self.wait_ready(&handle, &m).await;
        let revision = self.publish();
        ready.map(|()| revision)
    }

    /// Disables a plugin: its tools are withdrawn (a new revision), calls in
    /// flight are cancelled, and its process stops.
    pub async fn disable(&self, id: &str) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        self.disable_locked(id).await
    }

    async fn disable_locked(&self, id: &str) -> Result<u64, LifecycleError> {
        let handle = {
            let mut inner = self.lock();
            let Some(r) = inner.records.get_mut(id) else {
                return Err(LifecycleError::NotFound {
                    id: id.to_owned(),
                    hint: "",
                });
            };
            r.enabled = false;
            let handle = r.handle.take();
            self.plugins.set_needs_config(id, &[]);
            inner.file.disabled.insert(id.to_owned());
            self.save(&inner)?;
            handle
        };
        // Withdraw first, so no new call is authorized; then stop the
        // process, which fails the calls in flight at once.
        let revision = self.publish();
        if let Some(h) = handle {
            h.stop().await;
            self.plugins.remove_version(id, h.version());
        }
        Ok(revision)
    }

    /// Removes an installed plugin: disabled, its files deleted; its data
    /// directory is kept unless `purge`.
    pub async fn remove(&self, id: &str, purge: bool) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let origin = self.lock().records.get(id).map(|r| r.origin);
        match origin {
            None => {
                return Err(LifecycleError::NotFound {
                    id: id.to_owned(),
                    hint: "",
                });
            }
            Some(Origin::Static) => {
                return Err(LifecycleError::Static {
                    id: id.to_owned(),
                    what: "remove (or disable)",
                });
            }
            Some(Origin::Installed) => {}
        }
        self.disable_locked(id).await?;
        let dir = {
            let mut inner = self.lock();
            inner.file.installed.remove(id);
            inner.file.disabled.remove(id);
            self.save(&inner)?;
            let dir = inner.records.remove(id).map(|r| r.manifest.dir);
            self.refresh_installed(&inner);
            dir
        };
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if purge {
            let _ = std::fs::remove_dir_all(self.data_root().join(id));
            self.stored.remove(id);
        }
        tracing::info!(plugin = %id, purge, "removed");
        Ok(self.publish())
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

    /// Lets the calls already on `old` finish (up to the drain timeout),
    /// then stops it.
    async fn drain_and_stop(&self, old: &PluginHandle) {
        if let Some(client) = old.client() {
            let deadline = tokio::time::Instant::now() + self.cfg.drain_timeout;
            while client.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        old.stop().await;
    }

    /// Sets (and unsets) configuration values of a plugin through the admin
    /// API. Values are checked against the declared items first; nothing
    /// is stored if one is wrong. Then, if what the plugin would be given
    /// changed:
    ///
    /// - a plugin that was waiting for configuration and now has it starts,
    ///   and its tools enter the catalog when it is ready;
    /// - a running plugin is replaced the way an upgrade replaces it: a new
    ///   process with the new values must be ready before it takes over,
    ///   calls already on the old one finish, and a new process that cannot
    ///   start leaves the old one serving with the old values (nothing is
    ///   stored);
    /// - a plugin that now misses a required value stops, and its tools
    ///   are withdrawn.
    ///
    /// Returns the catalog revision and the items' states.
    ///
    /// Kept whole on purpose: like `upgrade`, its order (check, start the
    /// replacement, store, switch, drain) is its correctness.
    pub async fn set_config(
        &self,
        id: &str,
        set: &BTreeMap<String, String>,
        unset: &[String],
    ) -> Result<(u64, Vec<ItemStatus>), LifecycleError> {
        let _op = self.ops.lock().await;
        let (m, enabled, old_resolved) = {
            let inner = self.lock();
            let Some(r) = inner.records.get(id) else {
                return Err(LifecycleError::NotFound {
                    id: id.to_owned(),
                    hint: "",
                });
            };
            (r.manifest.clone(), r.enabled, r.resolved.clone())
        };
        settings::check_update(&m, set, unset)
            .map_err(|problems| LifecycleError::Invalid { problems })?;
        let stored_path = self.cfg.state_dir.join("config");
        let mut values = self
            .stored
            .load(id)
            .map_err(io("cannot read the stored configuration", &stored_path))?;
        for name in unset {
            values.remove(name);
        }
        values.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
        let file = self
            .cfg
            .operators
            .get(id)
            .map(|o| settings::without_inline_secrets(&m, &o.config))
            .unwrap_or_default();
        let resolved = settings::resolve(&m, &values, &file);
        let changed = resolved != old_resolved;
        let running = self.lock().records.get(id).and_then(|r| r.handle.clone());
        let mut replacement = None;
        if changed && enabled && resolved.missing.is_empty() && running.is_some() {
            // The replacement must be ready before anything changes.
            let new = self.spawn(&m, &resolved);
            if let Err(e) = self.wait_ready(&new, &m).await {
                new.stop().await;
                return Err(LifecycleError::StartFailed {
                    id: id.to_owned(),
                    reason: format!(
                        "{id} did not start with the new configuration ({e}); nothing was stored, and it keeps serving with the old"
                    ),
                });
            }
            replacement = Some(new);
        }
        if let Err(e) = self.stored.save(id, &values) {
            if let Some(new) = replacement {
                new.stop().await;
            }
            return Err(io("cannot store the configuration", &stored_path)(e));
        }
        let items = resolved.items.clone();
        if !changed {
            return Ok((self.publish(), items));
        }
        tracing::info!(plugin = %id, set = set.len(), unset = unset.len(), "configuration changed");
        let (old, start_now) = {
            let mut inner = self.lock();
            let Some(r) = inner.records.get_mut(id) else {
                return Err(LifecycleError::NotFound {
                    id: id.to_owned(),
                    hint: " (it was removed meanwhile)",
                });
            };
            r.resolved = resolved.clone();
            if !enabled {
                (None, false)
            } else if !resolved.missing.is_empty() {
                self.plugins.set_needs_config(id, &resolved.missing);
                (r.handle.take(), false)
            } else if let Some(new) = replacement {
                // Same id and version: the new process takes the old one's
                // place in one swap; calls already on the old finish there.
                self.plugins.insert(Arc::clone(&new));
                (r.handle.replace(new), false)
            } else {
                (None, r.handle.is_none())
            }
        };
        if start_now {
            let handle = self.start(&m, &resolved);
            if let Some(r) = self.lock().records.get_mut(id) {
                r.handle = Some(Arc::clone(&handle));
                r.listable = false;
            }
            let ready = self.wait_ready(&handle, &m).await;
            let revision = self.publish();
            return ready.map(|()| (revision, items));
        }
        let revision = self.publish();
        if let Some(old) = old {
            if resolved.missing.is_empty() {
                self.drain_and_stop(&old).await;
            } else {
                // Withdrawn: stop it now, failing what is in flight.
                old.stop().await;
                self.plugins.remove_version(id, old.version());
            }
        }
        Ok((revision, items))
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
                    asks: toolhost_manifest::grants::asks(&r.manifest),
                    ungranted: settings::ungranted(&r.manifest, &op),
                    sandbox: toolhost_runtime::sandbox::enforcement(&settings::sandbox_policy(
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

/// Removes staging directories and installed versions the state file does
/// not name: the leftovers of an interrupted install or upgrade.
fn clean(install_dir: &Path, file: &StateFile) {
    let Ok(entries) = std::fs::read_dir(install_dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let keep = name
            .split_once('@')
            .is_some_and(|(id, v)| file.installed.get(id).is_some_and(|iv| iv == v));
        if !keep {
            tracing::warn!(leftover = %name, "removing what an interrupted install or upgrade left behind");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Publishes a revision whenever a plugin's state changes in a way that
/// changes what is listed.
async fn authority(lc: Arc<Lifecycle>, mut rx: mpsc::UnboundedReceiver<()>) {
    while rx.recv().await.is_some() {
        while rx.try_recv().is_ok() {}
        lc.publish();
    }
}
