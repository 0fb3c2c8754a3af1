//! The lifecycle's one object and what every part of it shares: its
//! configuration, its errors, what a listing shows, and the steps every
//! operation takes (the runtime spec of a plugin, starting one, saving the
//! state file).

use super::records::{Inner, Origin};
use crate::settings::{self, ItemStatus, Operator, Resolved, SandboxConfig, Stored};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use toolhost_catalog::{Installed, Store};
use toolhost_manifest::Manifest;
use toolhost_package::archive::ArchiveLimits;
use toolhost_runtime::{PluginHandle, PluginSpec, Plugins, SupervisorConfig};
use toolhost_sandbox::RuleStatus;

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
    /// Whose signatures are trusted, and whether one is required.
    pub trust: toolhost_package::statement::TrustPolicy,
    /// What an upgrade that changes a plugin's contract does.
    pub contracts: crate::contract::ContractPolicy,
    /// Per plugin id, what the operator decided: environment, values,
    /// grants, sandbox rules turned off.
    pub operators: BTreeMap<String, Operator>,
    /// The sandbox's daemon-wide settings.
    pub sandbox: SandboxConfig,
    /// How registries are reached, and what of them is kept.
    pub registry: crate::settings::registry::RegistryConfig,
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
    /// No upgrade of this installed plugin is held for the operator.
    #[error(
        "no upgrade of plugin {id} is held (an upgrade is held when it changes the plugin's sandbox asks, or its \
         contract under contract_changes = \"hold\"); toolhost plugins show {id} says what is installed"
    )]
    NothingHeld {
        /// The plugin.
        id: String,
    },
    /// A pushed contract is accepted in managed mode only.
    #[error(
        "toolhost is not in managed mode: no backend pushes the catalog, so no pushed contract is held; \
         an upgrade held for the operator is accepted with toolhost plugins accept ID"
    )]
    NotManaged,
    /// A package could not be pulled from a registry, or was refused
    /// there (a digest that does not match, a size past its limit).
    #[error("cannot install {reference}: {reason}; nothing was placed")]
    Registry {
        /// The reference given.
        reference: String,
        /// Why, naming what was refused.
        reason: String,
    },
    /// Managed mode: the backend owns the catalog.
    #[error(
        "toolhost is in managed mode: the backend owns the catalog and places the plugins (the fleet's \
         placement key, or the admin API's PlacePlugins), so they are not installed, upgraded or removed by \
         hand; a held upgrade is still accepted or rejected here"
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
    /// An upgrade to an older version than the installed one, without the
    /// operator's say-so for that one operation.
    #[error(
        "version {offered} of {id} is older than the installed {installed}: an upgrade only goes forward (an \
         old release stays validly signed, holes and all); to go back on purpose, upgrade again with \
         --allow-downgrade"
    )]
    Downgrade {
        /// The plugin.
        id: String,
        /// The version installed.
        installed: String,
        /// The older version offered.
        offered: String,
    },
    /// `accept` named another upgrade than the one held now.
    #[error("{reason}")]
    NotReviewed {
        /// The plugin.
        id: String,
        /// What is held now, against what the operator named.
        reason: String,
    },
    /// The plugin did not become ready.
    #[error("{reason}")]
    StartFailed {
        /// The plugin.
        id: String,
        /// Why, and what still holds (the old version keeps serving, ...).
        reason: String,
    },
    /// The package is not what was signed, or not signed as the operator
    /// requires; nothing was installed.
    #[error("plugin {id} was not installed: {reason}")]
    Untrusted {
        /// The plugin.
        id: String,
        /// What differs, or which signature is missing, never contents.
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

/// Whether one plugin may run, for counting plugins by state without
/// building each one's [`PluginInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// Id.
    pub id: String,
    /// Enabled.
    pub enabled: bool,
    /// Some required configuration is missing, so it is not started.
    pub needs_config: bool,
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
    /// What is wrong with its `[plugin.ID.config]` in the operator's file:
    /// items it does not declare, secrets given inline (which are not
    /// read).
    pub config_file_problems: Vec<String>,
    /// Its data directory's use and quota, while it runs with one.
    pub disk: Option<super::disk::DiskInfo>,
    /// Who signed it: `key ID`, `unsigned`, or for a static plugin `not a
    /// package`.
    pub signer: String,
    /// The registry reference it was pulled from, pinned by digest.
    pub source: Option<String>,
    /// An upgrade placed and held for the operator, if one is.
    pub held: Option<HeldInfo>,
}

/// An upgrade held for the operator, as listings show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldInfo {
    /// The held version.
    pub version: String,
    /// The digest of the held package's statement (`sha256:` and 64 hex
    /// digits): what `accept --statement` names.
    pub statement: String,
    /// It goes back in version (the operator allowed it).
    pub downgrade: bool,
    /// Why it is held.
    pub why: String,
    /// What it changes.
    pub changes: Vec<String>,
    /// The registry reference it was pulled from, pinned by digest.
    pub source: Option<String>,
}

/// The installed plugins and what happens to them.
#[derive(Debug)]
pub struct Lifecycle {
    pub(super) cfg: LifecycleConfig,
    pub(super) store: Arc<Store>,
    pub(super) plugins: Arc<Plugins>,
    pub(super) installed: Arc<ArcSwap<Installed>>,
    /// One operation at a time.
    pub(super) ops: tokio::sync::Mutex<()>,
    /// One publication at a time: a revision is built under `inner`'s
    /// lock and offered to the store (the costly part, compiling every
    /// tool) outside it, so listings never wait for a catalog's compile.
    pub(super) publishing: Mutex<()>,
    pub(super) inner: Mutex<Inner>,
    pub(super) recompute: mpsc::UnboundedSender<()>,
    pub(super) stored: Stored,
    /// Each plugin's disk use, and which are over quota (`disk.rs`).
    pub(super) disk: Mutex<super::disk::DiskBook>,
    /// The daemon is stopping: no more catalog revisions (a thousand
    /// plugins stopping would otherwise publish one after another, each
    /// rebuilding the catalog, and make shutdown quadratic).
    pub(super) closing: std::sync::atomic::AtomicBool,
    /// What the backend placed, and where each placed plugin stands
    /// (`placement.rs`).
    pub(super) placed: Mutex<super::placed::PlacementBook>,
    /// One placement converges at a time.
    pub(super) placing: tokio::sync::Mutex<()>,
}

/// What pushed descriptors are judged against: these manifests, and in
/// managed mode, for plugins whose contract changes are held, the
/// declared texts or the contracts the operator accepted.
pub(super) fn judged_against<'a>(
    cfg: &LifecycleConfig,
    manifests: impl IntoIterator<Item = &'a Manifest>,
    file: &crate::files::StateFile,
) -> Installed {
    let held = |id: &str| cfg.managed && cfg.contracts.of(id) == crate::contract::OnChange::Hold;
    let accepted = file
        .accepted_contracts
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Installed::holding(manifests, held, accepted)
}

/// An I/O error while doing `what` at `path`.
pub(super) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LifecycleError {
    let path = path.to_path_buf();
    move |source| LifecycleError::Io { what, path, source }
}

pub(super) fn invalid(problems: &[toolhost_manifest::Problem]) -> LifecycleError {
    LifecycleError::Invalid {
        problems: problems.iter().map(ToString::to_string).collect(),
    }
}

impl Lifecycle {
    pub(super) fn install_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("plugins")
    }

    pub(super) fn state_file(&self) -> PathBuf {
        self.cfg.state_dir.join("plugins.json")
    }

    pub(super) fn data_root(&self) -> PathBuf {
        self.cfg.state_dir.join("data")
    }

    /// The ext4 image that is `id`'s data directory's own file system
    /// (`[sandbox] disk_quota = "image"`).
    pub(super) fn disk_image(&self, id: &str) -> PathBuf {
        self.cfg.state_dir.join("disks").join(format!("{id}.img"))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The installed declarations (for checking pushes in managed mode).
    #[must_use]
    pub fn installed(&self) -> Arc<ArcSwap<Installed>> {
        Arc::clone(&self.installed)
    }

    pub(super) fn operator(&self, id: &str) -> Operator {
        self.cfg.operators.get(id).cloned().unwrap_or_default()
    }

    /// What the runtime runs for `m`: its environment, configuration and
    /// sandbox.
    pub(super) fn spec(&self, m: &Manifest, resolved: &Resolved) -> PluginSpec {
        let op = self.operator(&m.id);
        let mut spec = crate::spec::plugin_spec(m, &self.data_root());
        spec.pass_env = settings::pass_env(m, &op);
        if let Some(t) = &op.telemetry {
            // After the manifest's own: the operator's collector wins.
            spec.env.extend(t.env.clone());
        }
        spec.config.clone_from(&resolved.delivered);
        spec.sandbox = settings::sandbox_policy(m, &op, &self.cfg.sandbox);
        spec.audiences = settings::granted_audiences(m, &op);
        spec.data_writable = self.data_writable(&m.id);
        if self.cfg.sandbox.disk_images {
            spec.disk_image = Some(self.disk_image(&m.id));
        }
        spec
    }

    /// Starts supervising a plugin and registers it; its state changes feed
    /// the authority.
    pub(super) fn start(&self, m: &Manifest, resolved: &Resolved) -> Arc<PluginHandle> {
        let handle = self.spawn(m, resolved);
        self.plugins.set_needs_config(&m.id, &[]);
        self.plugins.insert(Arc::clone(&handle));
        handle
    }

    /// Starts supervising a plugin without registering it (a replacement
    /// that must be ready before it takes over); its state changes feed
    /// the authority.
    pub(super) fn spawn(&self, m: &Manifest, resolved: &Resolved) -> Arc<PluginHandle> {
        let spec = self.spec(m, resolved);
        toolhost_sandbox::log_kernel_gaps(&spec.sandbox);
        let handle = self.plugins.supervise(spec, self.cfg.supervisor.clone());
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
    pub(super) fn save(&self, inner: &Inner) -> Result<(), LifecycleError> {
        inner
            .file
            .save(&self.state_file())
            .map_err(io("cannot write the plugin state", &self.state_file()))
    }

    pub(super) fn refresh_installed(&self, inner: &Inner) {
        self.installed.store(Arc::new(judged_against(
            &self.cfg,
            inner.records.values().map(|r| &r.manifest),
            &inner.file,
        )));
    }

    /// Accepts, for the catalog a backend pushes, contract `contract` (a
    /// fingerprint) of the tool exposed as `tool`, where its plugin's
    /// contract changes are held: a pushed descriptor of that tool with
    /// that contract is served from now on (judged again by the caller,
    /// `Store::rejudge`). Kept in the state file, one per tool.
    ///
    /// # Errors
    /// Not in managed mode (an upgrade is accepted with [`Self::accept`]),
    /// or the state file cannot be written.
    pub fn accept_contract(&self, tool: &str, contract: &str) -> Result<(), LifecycleError> {
        if !self.cfg.managed {
            return Err(LifecycleError::NotManaged);
        }
        let mut inner = self.lock();
        let before = inner
            .file
            .accepted_contracts
            .insert(tool.to_owned(), contract.to_owned());
        if let Err(e) = self.save(&inner) {
            match before {
                Some(b) => inner.file.accepted_contracts.insert(tool.to_owned(), b),
                None => inner.file.accepted_contracts.remove(tool),
            };
            return Err(e);
        }
        self.refresh_installed(&inner);
        tracing::info!(target: "toolhost::audit", %tool, before = before.as_deref().unwrap_or("-"), after = %contract, "pushed contract accepted");
        Ok(())
    }

    pub(super) fn resolve_logged(&self, m: &Manifest) -> Resolved {
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
        self.page(None, usize::MAX)
    }

    /// At most `limit` plugins in id order, those after `after` (the last
    /// id of the page before): a page of [`Self::list`] that costs only
    /// what it holds. Keyed by id, so a plugin installed or removed between
    /// two pages neither repeats nor skips another.
    #[must_use]
    pub fn page(&self, after: Option<&str>, limit: usize) -> Vec<PluginInfo> {
        use std::ops::Bound;
        let inner = self.lock();
        let from = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_owned()));
        inner
            .records
            .range((from, Bound::Unbounded))
            .take(limit)
            .map(|(_, r)| self.info_of(&inner, r))
            .collect()
    }

    /// One plugin's record, if it is installed.
    #[must_use]
    pub fn info(&self, id: &str) -> Option<PluginInfo> {
        let inner = self.lock();
        inner.records.get(id).map(|r| self.info_of(&inner, r))
    }

    /// How many plugins are installed (enabled or not).
    #[must_use]
    pub fn count(&self) -> usize {
        self.lock().records.len()
    }

    /// Every installed plugin's id, in order; what a caller that needs no
    /// more than ids asks for, instead of [`Self::list`].
    #[must_use]
    pub fn ids(&self) -> Vec<String> {
        self.lock().records.keys().cloned().collect()
    }

    /// Whether each plugin may run, in id order: the little [`Self::list`]
    /// holds that a count by state needs.
    #[must_use]
    pub fn standings(&self) -> Vec<Standing> {
        self.lock()
            .records
            .values()
            .map(|r| Standing {
                id: r.manifest.id.clone(),
                enabled: r.enabled,
                needs_config: !r.resolved.missing.is_empty(),
            })
            .collect()
    }

    fn info_of(&self, inner: &Inner, r: &super::records::Record) -> PluginInfo {
        let op = self.operator(&r.manifest.id);
        let quota = r.handle.as_ref().and_then(|h| h.state().disk);
        let writable = r.handle.as_ref().is_some_and(|h| h.data_writable());
        let disk = quota
            .as_ref()
            .map(|q| self.disk_info(&r.manifest.id, q, writable));
        let mut sandbox = toolhost_sandbox::enforcement(&settings::sandbox_policy(
            &r.manifest,
            &op,
            &self.cfg.sandbox,
        ));
        if let Some(d) = &disk {
            super::disk::describe_rule(&mut sandbox, d);
        }
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
            config_file_problems: settings::check_file(&r.manifest, &op.config),
            sandbox,
            disk,
            signer: match (r.origin, inner.file.signers.get(&r.manifest.id)) {
                (Origin::Static, _) => "not a package (from the configuration)".to_owned(),
                (Origin::Installed, Some(k)) => toolhost_package::statement::describe_stored(k),
                (Origin::Installed, None) => "unsigned".to_owned(),
            },
            source: inner.file.sources.get(&r.manifest.id).cloned(),
            held: inner.file.held.get(&r.manifest.id).map(Into::into),
        }
    }

    /// Stops every plugin (daemon shutdown), then unmounts their data
    /// directories' own file systems.
    pub async fn shutdown(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let handles = self.plugins.all();
        futures::future::join_all(handles.iter().map(|h| h.stop())).await;
        tokio::task::spawn_blocking(toolhost_sandbox::disk::release_all)
            .await
            .ok();
    }
}

/// Resolves `m`'s configuration from its stored values and the file's,
/// adding what is wrong with them to `warnings`.
pub(super) fn resolve_for(
    cfg: &LifecycleConfig,
    m: &Manifest,
    warnings: &mut Vec<String>,
) -> Resolved {
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::super::fixture::{Scratch, config, disabled_static_plugin, open};

    #[tokio::test]
    async fn everything_the_lifecycle_keeps_lives_under_the_state_directory() {
        let state = Scratch::new("core-paths");
        let (lc, _, _) = open(config(&state.0));
        for path in [
            lc.install_dir(),
            lc.state_file(),
            lc.data_root(),
            lc.disk_image("notes"),
        ] {
            assert!(path.starts_with(&state.0), "{} is outside", path.display());
        }
        assert_ne!(lc.install_dir(), lc.data_root(), "code and data apart");
    }

    #[tokio::test]
    async fn a_static_plugin_is_listed_with_its_sandbox_and_its_decisions_survive_a_reopen() {
        let state = Scratch::new("core-list");
        let cfg = disabled_static_plugin(&state.0);
        let (lc, _, _) = open(cfg.clone());
        let listed = lc.list();
        let tp = listed.iter().find(|p| p.id == "tp").expect("tp is listed");
        assert_eq!(
            (tp.version.as_str(), tp.origin, tp.enabled),
            ("1.0.0", "static", false)
        );
        assert!(!tp.sandbox.is_empty(), "every plugin shows its sandbox");
        assert!(tp.needs_config.is_empty() && tp.ungranted.is_empty());
        // The declarations pushes are judged against are the installed ones.
        assert_ne!(
            *lc.installed().load_full(),
            toolhost_catalog::Installed::default()
        );
        lc.shutdown().await;
        drop(lc);

        let (again, _, _) = open(cfg);
        let tp = again
            .list()
            .into_iter()
            .find(|p| p.id == "tp")
            .expect("still listed");
        assert!(!tp.enabled, "the recorded decision holds across a restart");
        again.shutdown().await;
    }
}
