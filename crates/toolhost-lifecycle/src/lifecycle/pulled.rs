//! Lifecycle operations on a registry reference: the package is pulled by
//! digest into the state's cache (`toolhost_registry`), then installed or
//! upgraded as the archive it is, every check of an archive included
//! (signature against the trusted keys, statement against what was
//! unpacked, signer kept, versions forward, holds). What was installed
//! records the reference pinned to its digest, shown by `plugins show`.
//!
//! What this module must not do: install anything the pull did not verify
//! by digest, or follow the tag again after it was resolved.

use super::core::{Lifecycle, LifecycleError};
use super::held::{UpgradeOptions, Upgraded};
use std::collections::BTreeMap;
use toolhost_registry::{Cache, Pulled, Reference};

pub use crate::settings::registry::RegistryConfig;

/// What an install from a registry did.
#[derive(Debug, Clone)]
pub struct PulledInstall {
    /// The catalog revision.
    pub revision: u64,
    /// The plugin installed.
    pub id: String,
    /// The reference, pinned to the manifest's digest.
    pub source: String,
}

/// The longest one pull may take, whatever the registry does.
const PULL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

impl Lifecycle {
    /// Pulls `reference`: the archive and signature in the cache.
    async fn pull(&self, reference: &str) -> Result<Pulled, LifecycleError> {
        let parsed = Reference::parse(reference).map_err(|e| LifecycleError::Registry {
            reference: toolhost_base::term::one_line(
                &reference.chars().take(120).collect::<String>(),
            )
            .into_owned(),
            reason: e.to_string(),
        })?;
        let cache = Cache {
            root: self.cfg.state_dir.join("registry"),
            limit_bytes: self.cfg.registry.cache_bytes,
        };
        // A registry that answers a byte at a time would otherwise hold a
        // pull (and a placement behind it) for ever: each read is bounded
        // by the client, the whole pull here.
        let pulled = tokio::time::timeout(
            PULL_DEADLINE,
            toolhost_registry::pull(
                &parsed,
                &self.cfg.registry.settings,
                &cache,
                self.cfg.archive_limits.max_bytes,
            ),
        )
        .await
        .unwrap_or_else(|_| {
            Err(toolhost_registry::RegistryError::Unreachable {
                registry: parsed.registry.clone(),
                why: format!(
                    "the pull took longer than {} s; nothing was kept",
                    PULL_DEADLINE.as_secs()
                ),
            })
        })
        .map_err(|e| LifecycleError::Registry {
            reference: parsed.to_string(),
            reason: e.to_string(),
        })?;
        tracing::info!(reference = %parsed, pinned = %pulled.pinned, cached = pulled.from_cache, signed = pulled.signed, "pulled");
        Ok(pulled)
    }

    /// Installs the package at `reference` (`REGISTRY/REPO:TAG` or
    /// `…@sha256:DIGEST`), as [`Self::install`] installs an archive.
    ///
    /// # Errors
    /// [`LifecycleError::Registry`] when it cannot be pulled or verified
    /// by digest; else what an install of the archive answers.
    pub async fn install_reference(
        &self,
        reference: &str,
        set: &BTreeMap<String, String>,
    ) -> Result<PulledInstall, LifecycleError> {
        self.refuse_if_managed()?;
        let pulled = self.pull(reference).await?;
        let source = pulled.pinned.to_string();
        let revision = self
            .install_from(&pulled.archive, set, Some(source.clone()))
            .await
            .inspect_err(|e| forget_if_refused(&pulled, e))?;
        let id = self
            .lock()
            .file
            .sources
            .iter()
            .find(|(_, s)| **s == source)
            .map(|(id, _)| id.clone())
            .unwrap_or_default();
        Ok(PulledInstall {
            revision,
            id,
            source,
        })
    }

    /// Upgrades to the package at `reference`, as
    /// [`Self::upgrade_reporting`] upgrades to an archive; what it
    /// answers names the digest it moves from and to.
    ///
    /// # Errors
    /// As [`Self::install_reference`].
    pub async fn upgrade_reference(
        &self,
        reference: &str,
        set: &BTreeMap<String, String>,
        options: UpgradeOptions,
        dry_run: bool,
    ) -> Result<Upgraded, LifecycleError> {
        self.refuse_if_managed()?;
        let pulled = self.pull(reference).await?;
        let pinned = pulled.pinned.to_string();
        let sources_before = self.lock().file.sources.clone();
        let mut done = if dry_run {
            self.upgrade_preview(&pulled.archive, options).await
        } else {
            self.upgrade_from(&pulled.archive, set, options, Some(pinned.clone()))
                .await
        }
        .inspect_err(|e| forget_if_refused(&pulled, e))?;
        let before = sources_before.get(&done.id).cloned();
        let digest_of = |r: &str| r.rsplit_once('@').map_or(r, |(_, d)| d).to_owned();
        let moved = match before {
            Some(b) if digest_of(&b) == digest_of(&pinned) => {
                format!("digest {} (unchanged)", digest_of(&b))
            }
            Some(b) => format!("digest {} -> {}", digest_of(&b), digest_of(&pinned)),
            None => format!("from a local package to {pinned}"),
        };
        done.changes.insert(0, moved);
        done.source = Some(pinned);
        Ok(done)
    }

    /// A placed plugin's first install: pulled, its id checked against the
    /// one placed, then installed as an archive.
    pub(super) async fn install_placed(
        &self,
        reference: &str,
        id: &str,
        set: &BTreeMap<String, String>,
    ) -> Result<(), LifecycleError> {
        let pulled = self.pull(reference).await?;
        self.check_placed_id(&pulled, reference, id)?;
        let source = pulled.pinned.to_string();
        self.install_from(&pulled.archive, set, Some(source))
            .await
            .inspect_err(|e| forget_if_refused(&pulled, e))
            .map(|_| ())
    }

    /// A placed plugin's move to another digest, as an upgrade.
    pub(super) async fn upgrade_placed(
        &self,
        reference: &str,
        id: &str,
        set: &BTreeMap<String, String>,
    ) -> Result<(), LifecycleError> {
        let pulled = self.pull(reference).await?;
        self.check_placed_id(&pulled, reference, id)?;
        let source = pulled.pinned.to_string();
        self.upgrade_from(
            &pulled.archive,
            set,
            UpgradeOptions::default(),
            Some(source),
        )
        .await
        .inspect_err(|e| forget_if_refused(&pulled, e))
        .map(|_| ())
    }

    /// The package pulled for a placed plugin carries the id placed.
    fn check_placed_id(
        &self,
        pulled: &Pulled,
        reference: &str,
        id: &str,
    ) -> Result<(), LifecycleError> {
        let text = toolhost_package::archive::read_entry(
            &pulled.archive,
            self.cfg.archive_limits,
            |p| p.file_name().is_some_and(|n| n == "plugin.toml") && p.components().count() <= 2,
            toolhost_manifest::manifest::MAX_MANIFEST_BYTES,
        )
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok());
        let carried = text
            .as_deref()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|t| t.get("id").and_then(|v| v.as_str()).map(str::to_owned));
        if carried.as_deref() == Some(id) {
            return Ok(());
        }
        Err(LifecycleError::Registry {
            reference: reference.to_owned(),
            reason: format!(
                "its package is plugin {}, not the {id} placed",
                carried.map_or_else(
                    || "with no readable id".to_owned(),
                    |c| toolhost_base::term::one_line(&c).into_owned()
                )
            ),
        })
    }

    /// Where an installed plugin was pulled from, pinned by digest.
    #[must_use]
    pub fn pulled_from(&self, id: &str) -> Option<String> {
        self.lock().file.sources.get(id).cloned()
    }
}

/// A package the lifecycle refused for what it is (its signature, its
/// statement, its manifest) is not kept: the next try pulls it again
/// rather than install what was refused from the cache.
fn forget_if_refused(pulled: &Pulled, e: &LifecycleError) {
    if matches!(
        e,
        LifecycleError::Untrusted { .. }
            | LifecycleError::Invalid { .. }
            | LifecycleError::Unreadable { .. }
    ) && let Some(entry) = pulled.archive.parent()
    {
        let _ = std::fs::remove_dir_all(entry);
    }
}
