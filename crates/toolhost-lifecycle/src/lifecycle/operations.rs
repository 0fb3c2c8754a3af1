//! The operations: install, upgrade, enable, disable, remove, and
//! configuration changes. One runs at a time (`Lifecycle::ops`); each ends
//! in a new catalog revision that connected agents learn through
//! `tools/list_changed`, and neither toolhost nor any session restarts.
//!
//! In managed mode every one is refused: the backend owns what is active.
//!
//! Kept in one file on purpose (about 550 lines of code, then its tests):
//! the operations share their steps (stage, validate against the set,
//! place, start, wait, switch, drain), and `upgrade` and `set_config` are
//! each one ordered sequence.

use super::core::{Lifecycle, LifecycleError, invalid, io};
use super::held::{UpgradeOptions, Upgraded, missing_config};
use super::records::{Inner, Origin, Record};
use crate::files::{stage, staging_dir, version_dir};
use crate::settings::{self, ItemStatus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toolhost_manifest::{Manifest, naming};
use toolhost_runtime::{Phase, PluginHandle};

impl Lifecycle {
    /// Whether `m` is older than the installed version of its plugin.
    pub(super) fn is_downgrade(&self, m: &Manifest) -> bool {
        self.lock()
            .records
            .get(&m.id)
            .is_some_and(|r| m.version < r.manifest.version)
    }

    pub(super) fn refuse_if_managed(&self) -> Result<(), LifecycleError> {
        let placing = super::placement::PLACING.try_with(|p| *p).unwrap_or(false);
        if self.cfg.managed && !placing {
            return Err(LifecycleError::Managed);
        }
        Ok(())
    }

    /// [`Self::stage_and_load`], with room made first when the disk holding
    /// the state is short (a plugin filled it): the plugins that write to
    /// it are held read-only, and the reserve gives back what the package
    /// needs (its size, estimated from what was given, and its files).
    pub(super) async fn stage_with_room(
        &self,
        source: &Path,
    ) -> Result<(PathBuf, Manifest), LifecycleError> {
        let given = std::fs::metadata(source).map_or(0, |m| m.len());
        // An archive unpacks to a few times its size; a directory is
        // measured as it is copied, so a generous floor covers it.
        let bytes = given
            .saturating_mul(4)
            .max(8 << 20)
            .min(self.cfg.archive_limits.max_bytes);
        self.make_room(bytes, 256).await;
        self.stage_and_load(source)
    }

    /// Stages `source` (a plugin directory or a `.tar.gz` of one), loads and
    /// validates it. The staging directory is removed on failure.
    pub(super) fn stage_and_load(
        &self,
        source: &Path,
    ) -> Result<(PathBuf, Manifest), LifecycleError> {
        let staging = staging_dir(&self.install_dir())
            .map_err(io("cannot stage the plugin", &self.install_dir()))?;
        let loaded = stage(source, &staging, self.cfg.archive_limits)
            .map_err(|e| LifecycleError::Unreadable {
                path: source.to_path_buf(),
                source: e,
            })
            .and_then(|()| {
                // An install is validated as `toolhost check` would: a
                // schema that would be withheld refuses it. Problems name
                // the files as they are in what was given, not in the
                // staging directory the operator never saw.
                let named = |problems: Vec<toolhost_manifest::Problem>| {
                    let problems: Vec<_> = problems
                        .into_iter()
                        .map(|mut p| {
                            if let Ok(rel) = p.file.strip_prefix(&staging) {
                                p.file = source.join(rel);
                            }
                            p
                        })
                        .collect();
                    invalid(&problems)
                };
                match Manifest::load(&staging) {
                    Err(problems) => Err(named(problems)),
                    Ok(m) if !m.defects.is_empty() => Err(named(m.defects)),
                    Ok(m) => self.command_of_its_own(&m).map(|()| m),
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

    /// Checks the staged package against the statement it carries, the
    /// signature beside `source` and the operator's trust, before anything
    /// is moved into place. `installed` is the signer of the version an
    /// upgrade replaces, as the state file records it (`Some(None)`: it
    /// was unsigned). Returns the trusted key that signed it, if any, as
    /// the state file records a signer: the whole public key. The staged
    /// copy is removed when the package is refused.
    pub(super) fn verify_package(
        &self,
        source: &Path,
        staging: &Path,
        m: &Manifest,
        installed: Option<Option<&str>>,
    ) -> Result<Option<String>, LifecycleError> {
        use toolhost_package::statement::Signer;
        let trust = &self.cfg.trust;
        let refused = |reason: String| {
            let _ = std::fs::remove_dir_all(staging);
            LifecycleError::Untrusted {
                id: m.id.clone(),
                reason,
            }
        };
        let signer = toolhost_package::statement::signature_beside(source)
            .and_then(|sig| {
                toolhost_package::statement::verify(staging, m, sig.as_deref(), &trust.keys)
            })
            .map_err(|e| refused(e.to_string()))?;
        if signer.trusted().is_none() && trust.require_signature {
            let why = match &signer {
                Signer::UnknownKey(k) => {
                    format!("it is signed by key {k}, which is not in [install] trusted_keys")
                }
                _ => format!(
                    "it is unsigned, and [install] require_signature is on: sign it with `toolhost pack --sign KEY` (the signature goes beside the archive as {}{})",
                    source
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default(),
                    toolhost_package::statement::SIGNATURE_SUFFIX
                ),
            };
            return Err(refused(why));
        }
        if let Signer::UnknownKey(k) = &signer {
            tracing::warn!(plugin = %m.id, key = %k, "package signed by a key that is not trusted: installed as unsigned");
        }
        if let Some(Some(before)) = installed
            && !signer.trusted().is_some_and(|k| k.is(before))
            && !trust.allow_signer_change
        {
            let now = match &signer {
                Signer::Trusted(k) => format!("signed by {}", k.describe()),
                Signer::UnknownKey(k) => {
                    format!("signed by key {k}, which is not in [install] trusted_keys")
                }
                Signer::Unsigned => "unsigned".to_owned(),
            };
            return Err(refused(format!(
                "the installed version was signed by {}, and this one is {now}; an upgrade keeps its signer unless [install] allow_signer_change = true",
                toolhost_package::statement::describe_stored(before)
            )));
        }
        Ok(signer.trusted().map(|k| k.key.clone()))
    }

    /// An installed plugin runs its own code: a command inside its own
    /// directory, or a program outside every plugin's (an interpreter). A
    /// manifest naming another plugin's launcher (by an absolute path into
    /// the install directory or a static plugin's directory) is refused:
    /// it would run that plugin's code with this one's grants.
    fn command_of_its_own(&self, m: &Manifest) -> Result<(), LifecycleError> {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let command = canonical(&m.runtime.command);
        let own = canonical(&m.dir);
        if command.starts_with(&own) {
            return Ok(());
        }
        let others: Vec<PathBuf> = std::iter::once(canonical(&self.install_dir()))
            .chain(
                self.lock()
                    .records
                    .values()
                    .map(|r| canonical(&r.manifest.dir)),
            )
            .collect();
        if others.iter().any(|d| command.starts_with(d)) {
            return Err(LifecycleError::Invalid {
                problems: vec![format!(
                    "{}: runtime.command names a program inside another plugin's directory; a plugin runs its own code (a path inside its directory) or a program outside every plugin (an interpreter) [runtime-command]",
                    m.dir.join("plugin.toml").display()
                )],
            });
        }
        Ok(())
    }

    /// What `m` would be given, with `set` (values given with an install or
    /// upgrade, checked against `m`'s items) over the stored values.
    /// Returns the values to store once the operation succeeds, if any
    /// were given.
    pub(super) fn resolve_with(
        &self,
        m: &Manifest,
        set: &BTreeMap<String, String>,
    ) -> Result<(settings::Resolved, Option<BTreeMap<String, String>>), LifecycleError> {
        if set.is_empty() {
            return Ok((self.resolve_logged(m), None));
        }
        settings::check_update(m, set, &[])
            .map_err(|problems| LifecycleError::Invalid { problems })?;
        let stored_path = self.cfg.state_dir.join("config");
        let mut values = self
            .stored
            .load(&m.id)
            .map_err(io("cannot read the stored configuration", &stored_path))?;
        values.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
        let file = self
            .cfg
            .operators
            .get(&m.id)
            .map(|o| settings::without_inline_secrets(m, &o.config))
            .unwrap_or_default();
        Ok((settings::resolve(m, &values, &file), Some(values)))
    }

    /// [`Self::resolve_with`] once `checked` passed; the staged copy is
    /// removed when either fails.
    pub(super) fn resolve_staged(
        &self,
        staging: &std::path::Path,
        checked: Result<(), LifecycleError>,
        m: &Manifest,
        set: &BTreeMap<String, String>,
    ) -> Result<(settings::Resolved, Option<BTreeMap<String, String>>), LifecycleError> {
        let resolved = checked.and_then(|()| self.resolve_with(m, set));
        if resolved.is_err() {
            let _ = std::fs::remove_dir_all(staging);
        }
        resolved
    }

    /// Exposed-name collisions between `m` and every other installed plugin.
    pub(super) fn collisions(&self, inner: &Inner, m: &Manifest) -> Result<(), LifecycleError> {
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
    pub(super) fn place(&self, staging: &Path, m: &Manifest) -> Result<Manifest, LifecycleError> {
        let target = version_dir(&self.install_dir(), &m.id, &m.version.to_string());
        if target.exists() {
            let _ = std::fs::remove_dir_all(&target);
        }
        std::fs::rename(staging, &target)
            .map_err(io("cannot move the plugin into place", &target))?;
        Manifest::load(&target).map_err(|p| invalid(&p))
    }

    pub(super) async fn wait_ready(
        &self,
        h: &PluginHandle,
        m: &Manifest,
    ) -> Result<(), LifecycleError> {
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
    /// when it is ready. Configuration values in `set` are checked against
    /// its items and stored first, so a plugin that needs them starts in
    /// the same step. Returns the catalog revision.
    ///
    /// Kept whole on purpose: staging, the checks against what is installed,
    /// the values and the commit are one transaction over the staged
    /// directory; reading them in one place shows nothing is committed
    /// before every check has passed.
    pub async fn install(
        &self,
        source: &Path,
        set: &BTreeMap<String, String>,
    ) -> Result<u64, LifecycleError> {
        self.install_from(source, set, None).await
    }

    /// [`Self::install`], recording `pulled_from` (a registry reference
    /// pinned by digest) as where the package came from.
    ///
    /// Kept whole on purpose: see [`Self::install`].
    pub(super) async fn install_from(
        &self,
        source: &Path,
        set: &BTreeMap<String, String>,
        pulled_from: Option<String>,
    ) -> Result<u64, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (staging, m) = self.stage_with_room(source).await?;
        let signer = self.verify_package(source, &staging, &m, None)?;
        let checked = {
            let inner = self.lock();
            match inner.records.get(&m.id) {
                Some(r) => Err(LifecycleError::AlreadyThere {
                    id: m.id.clone(),
                    state: format!(
                        "installed (version {}); nothing was changed{}: to set its configuration, `toolhost plugins config {} NAME=VALUE`; to move to the version given, `toolhost plugins upgrade PATH`",
                        r.manifest.version,
                        if set.is_empty() {
                            ""
                        } else {
                            " and the values given were not stored"
                        },
                        m.id
                    ),
                }),
                None => self.collisions(&inner, &m),
            }
        };
        let (resolved, values) = self.resolve_staged(&staging, checked, &m, set)?;
        if let Some(values) = &values {
            let stored_path = self.cfg.state_dir.join("config");
            if let Err(e) = self.stored.save(&m.id, values) {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(io("cannot store the configuration", &stored_path)(e));
            }
        }
        let m = self.place(&staging, &m)?;
        let handle = {
            let mut inner = self.lock();
            inner
                .file
                .installed
                .insert(m.id.clone(), m.version.to_string());
            inner.file.disabled.remove(&m.id);
            match &signer {
                Some(k) => inner.file.signers.insert(m.id.clone(), k.clone()),
                None => inner.file.signers.remove(&m.id),
            };
            match &pulled_from {
                Some(r) => inner.file.sources.insert(m.id.clone(), r.clone()),
                None => inner.file.sources.remove(&m.id),
            };
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
    /// that cannot start leaves the old one serving. Configuration values in
    /// `set` (an item the new version adds, say) are checked against the
    /// new version's items and given to it; they are stored only once it
    /// has taken over.
    ///
    /// Kept whole on purpose: the upgrade's order is its correctness (start the
    /// new version, switch the catalog, drain, stop the old); in one place it
    /// can be read and checked as one.
    pub async fn upgrade(
        &self,
        source: &Path,
        set: &BTreeMap<String, String>,
    ) -> Result<u64, LifecycleError> {
        self.upgrade_reporting(source, set, UpgradeOptions::default())
            .await
            .map(|done| done.revision)
    }

    /// [`Self::upgrade`], with what it changed in the plugin's contract and
    /// asks ([`crate::contract::changes`]); each change is logged, by name
    /// and by fingerprints. An upgrade that changes the contract of a
    /// plugin whose policy is `hold`, or changes any sandbox ask, is placed
    /// and held instead ([`Upgraded::held`]): the installed version keeps
    /// serving until [`Self::accept`]. An older version than the installed
    /// one is refused unless `options` allow it, and then audited.
    pub async fn upgrade_reporting(
        &self,
        source: &Path,
        set: &BTreeMap<String, String>,
        options: UpgradeOptions,
    ) -> Result<Upgraded, LifecycleError> {
        self.upgrade_from(source, set, options, None).await
    }

    /// [`Self::upgrade_reporting`], recording `pulled_from` (a registry
    /// reference pinned by digest) as where the new version came from.
    ///
    /// Kept whole on purpose: see [`Self::upgrade`].
    pub(super) async fn upgrade_from(
        &self,
        source: &Path,
        set: &BTreeMap<String, String>,
        options: UpgradeOptions,
        pulled_from: Option<String>,
    ) -> Result<Upgraded, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (staging, m) = self.stage_with_room(source).await?;
        let before = self.lock().file.signers.get(&m.id).cloned();
        let signer = self.verify_package(source, &staging, &m, Some(before.as_deref()))?;
        let mut changed = Vec::new();
        let checked = self
            .upgrade_changes(&m, options.allow_downgrade)
            .map(|c| changed = c);
        let (resolved, values) = self.resolve_staged(&staging, checked, &m, set)?;
        if !resolved.missing.is_empty() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(missing_config(&m, &resolved.missing, "upgrade PATH"));
        }
        let downgrade = self.is_downgrade(&m);
        if downgrade {
            let from = self
                .lock()
                .records
                .get(&m.id)
                .map(|r| r.manifest.version.to_string())
                .unwrap_or_default();
            tracing::warn!(target: "toolhost::audit", plugin = %m.id, %from, to = %m.version,
                "downgrade allowed by the operator for this upgrade (--allow-downgrade)");
        }
        if let Some(why) = self.hold_reason(&m, &changed) {
            let holding = super::held::ToHold {
                signer,
                source: pulled_from,
                changes: changed,
                why,
                downgrade,
            };
            return self.hold(&staging, &m, holding, set);
        }
        let m = self.place(&staging, &m)?;
        let provenance = super::held::Provenance {
            signer,
            source: pulled_from,
        };
        self.take_over(m, resolved, values, provenance, changed)
            .await
    }

    /// The second half of an upgrade, once the new version is placed and
    /// its configuration resolved: start it, switch the catalog to it,
    /// drain and stop the old one. A new version that cannot start is
    /// removed and the old one keeps serving.
    ///
    /// Kept whole on purpose: see [`Self::upgrade`].
    pub(super) async fn take_over(
        &self,
        m: Manifest,
        resolved: settings::Resolved,
        values: Option<BTreeMap<String, String>>,
        provenance: super::held::Provenance,
        changed: Vec<String>,
    ) -> Result<Upgraded, LifecycleError> {
        let super::held::Provenance { signer, source } = provenance;
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
        if let Some(values) = &values
            && let Err(e) = self.stored.save(&m.id, values)
        {
            new.stop().await;
            self.plugins.remove_version(&m.id, &m.version.to_string());
            let _ = std::fs::remove_dir_all(&m.dir);
            let stored_path = self.cfg.state_dir.join("config");
            return Err(io("cannot store the configuration", &stored_path)(e));
        }
        let (old_handle, old_manifest, superseded) = {
            let mut inner = self.lock();
            inner
                .file
                .installed
                .insert(m.id.clone(), m.version.to_string());
            match &signer {
                Some(k) => inner.file.signers.insert(m.id.clone(), k.clone()),
                None => inner.file.signers.remove(&m.id),
            };
            match &source {
                Some(r) => inner.file.sources.insert(m.id.clone(), r.clone()),
                None => inner.file.sources.remove(&m.id),
            };
            // This version supersedes one held for the operator, if any.
            let superseded = inner
                .file
                .held
                .remove(&m.id)
                .filter(|h| h.version != m.version.to_string());
            inner.held_values.remove(&m.id);
            self.save(&inner)?;
            let Some(r) = inner.records.get_mut(&m.id) else {
                return Err(LifecycleError::NotFound {
                    id: m.id.clone(),
                    hint: " (it was removed meanwhile)",
                });
            };
            let old_manifest = r.manifest.clone();
            r.manifest = m.clone();
            r.resolved = resolved;
            r.listable = true;
            let old = r.handle.replace(Arc::clone(&new));
            if !r.enabled {
                // Upgrading a disabled plugin installs the files only.
                r.handle = None;
            }
            self.refresh_installed(&inner);
            (old, old_manifest, superseded)
        };
        if let Some(h) = superseded {
            let _ = std::fs::remove_dir_all(version_dir(&self.install_dir(), &m.id, &h.version));
        }
        let revision = self.publish();
        let old_version = old_manifest.version.to_string();
        tracing::info!(plugin = %m.id, from = %old_version, to = %m.version, revision, "upgraded");
        self.audit_changes(&old_manifest, &m, &changed, "contract changed");
        if let Some(old) = old_handle {
            self.drain_and_stop(&old).await;
            self.plugins.remove_version(&m.id, &old_version);
        }
        if self.lock().records.get(&m.id).is_some_and(|r| !r.enabled) {
            new.stop().await;
            self.plugins.remove_version(&m.id, &m.version.to_string());
        }
        let _ = std::fs::remove_dir_all(&old_manifest.dir);
        Ok(Upgraded {
            source: None,
            id: m.id.clone(),
            revision,
            changes: changed,
            held: None,
        })
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

    pub(super) async fn disable_locked(&self, id: &str) -> Result<u64, LifecycleError> {
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
            inner.file.signers.remove(id);
            inner.file.sources.remove(id);
            inner.file.disabled.remove(id);
            let held = inner.file.held.remove(id);
            inner.held_values.remove(id);
            self.save(&inner)?;
            let dir = inner.records.remove(id).map(|r| r.manifest.dir);
            self.refresh_installed(&inner);
            (dir, held)
        };
        let (dir, held) = dir;
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(h) = held {
            let _ = std::fs::remove_dir_all(version_dir(&self.install_dir(), id, &h.version));
        }
        if purge {
            let data = self.data_root().join(id);
            let image = self.disk_image(id);
            tokio::task::spawn_blocking(move || {
                // Its own file system, if it has one, goes with its data.
                toolhost_sandbox::disk::release(&data);
                let _ = std::fs::remove_dir_all(&data);
                let _ = std::fs::remove_file(&image);
            })
            .await
            .ok();
            self.stored.remove(id);
            self.disk_book().used.remove(id);
        }
        tracing::info!(plugin = %id, purge, "removed");
        Ok(self.publish())
    }

    /// Lets the calls already on `old` finish (up to the drain timeout),
    /// then stops it. Call it after publishing the catalog that no longer
    /// names `old`.
    ///
    /// "Already on `old`" includes calls that read the catalog before that
    /// publish and have not yet taken hold of `old`'s process: the drain
    /// first waits out their grace period (each ends it once it holds the
    /// process, which then counts it busy), then waits while the process
    /// is busy. Without the first wait, a call whose thread was descheduled
    /// between reading the catalog and holding the process would be sent
    /// to a process already stopping.
    pub(super) async fn drain_and_stop(&self, old: &PluginHandle) {
        let deadline = tokio::time::Instant::now() + self.cfg.drain_timeout;
        let grace = self.store.grace();
        let before = grace.advance();
        while grace.readers_since(before) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Some(client) = old.client() {
            while client.busy() > 0 && tokio::time::Instant::now() < deadline {
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
        settings::check_update(&m, set, unset).map_err(|mut problems| {
            if set.keys().any(|n| !m.config.iter().any(|d| &d.name == n)) {
                problems.push(format!(
                    "values for items a newer version of {id} adds are given with its upgrade: toolhost plugins upgrade PATH NAME=VALUE"
                ));
            }
            LifecycleError::Invalid { problems }
        })?;
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::super::fixture::{Scratch, config, disabled_static_plugin, open, plugin};
    use super::*;

    #[tokio::test]
    async fn managed_mode_refuses_every_operation() {
        let state = Scratch::new("ops-managed");
        let mut cfg = config(&state.0);
        cfg.managed = true;
        let (lc, _, _) = open(cfg);
        let source = plugin(&state.0, "tp", "1.0.0");
        assert!(matches!(
            lc.install(&source, &BTreeMap::new()).await,
            Err(LifecycleError::Managed)
        ));
        assert!(matches!(
            lc.upgrade(&source, &BTreeMap::new()).await,
            Err(LifecycleError::Managed)
        ));
        assert!(matches!(
            lc.enable("tp").await,
            Err(LifecycleError::Managed)
        ));
        assert!(matches!(
            lc.disable("tp").await,
            Err(LifecycleError::Managed)
        ));
        assert!(matches!(
            lc.remove("tp", false).await,
            Err(LifecycleError::Managed)
        ));
    }

    #[tokio::test]
    async fn an_unknown_plugin_is_not_found_by_any_operation() {
        let state = Scratch::new("ops-unknown");
        let (lc, _, _) = open(config(&state.0));
        for r in [
            lc.enable("nope").await,
            lc.disable("nope").await,
            lc.remove("nope", true).await,
        ] {
            assert!(matches!(r, Err(LifecycleError::NotFound { ref id, .. }) if id == "nope"));
        }
    }

    #[tokio::test]
    async fn an_invalid_plugin_is_refused_whole_and_leaves_nothing_behind() {
        let state = Scratch::new("ops-invalid");
        let (lc, store, _) = open(config(&state.0));
        let source = plugin(&state.0, "tp", "1.0.0");
        std::fs::write(source.join("plugin.toml"), "id = \"tp\"\nversion = \"x\"\n").unwrap();
        let Err(LifecycleError::Invalid { problems }) = lc.install(&source, &BTreeMap::new()).await
        else {
            panic!("accepted an invalid plugin");
        };
        assert!(!problems.is_empty());
        let left: Vec<_> = std::fs::read_dir(state.0.join("plugins"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert_eq!(store.current().revision(), 1, "no revision for a refusal");
        assert!(lc.list().is_empty());
    }

    #[tokio::test]
    async fn a_static_plugin_is_neither_upgraded_nor_removed_here() {
        let state = Scratch::new("ops-static");
        let cfg = disabled_static_plugin(&state.0);
        let (lc, _, _) = open(cfg);
        let newer = plugin(&state.0, "tp", "2.0.0");
        assert!(matches!(
            lc.upgrade(&newer, &BTreeMap::new()).await,
            Err(LifecycleError::Static {
                what: "upgrade",
                ..
            })
        ));
        assert!(matches!(
            lc.remove("tp", false).await,
            Err(LifecycleError::Static {
                what: "remove (or disable)",
                ..
            })
        ));
        // Disabling an already disabled plugin changes nothing and fails nothing.
        assert!(lc.disable("tp").await.is_ok());
    }
}
