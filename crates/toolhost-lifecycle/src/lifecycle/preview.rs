//! `plugins upgrade --dry-run`: what an upgrade would change, found the
//! way the upgrade finds it (staged, validated, its signature checked
//! against the operator's trust) and then thrown away. Nothing is placed,
//! started, recorded or published.

use super::core::{Lifecycle, LifecycleError};
use super::held::UpgradeOptions;
use super::held::Upgraded;
use super::records::Origin;
use std::path::Path;
use toolhost_manifest::Manifest;

impl Lifecycle {
    /// The changes an upgrade to the version in `source` would make to the
    /// installed plugin's contract and asks (see [`crate::contract`]) and
    /// whether it would be held for the operator, or why the upgrade would
    /// be refused. The revision is 0: nothing was published.
    pub async fn upgrade_preview(
        &self,
        source: &Path,
        options: UpgradeOptions,
    ) -> Result<Upgraded, LifecycleError> {
        self.refuse_if_managed()?;
        let _op = self.ops.lock().await;
        let (staging, m) = self.stage_with_room(source).await?;
        let before = self.lock().file.signers.get(&m.id).cloned();
        let verified = self.verify_package(source, &staging, &m, Some(before.as_deref()));
        let _ = std::fs::remove_dir_all(&staging);
        verified?;
        let changes = self.upgrade_changes(&m, options.allow_downgrade)?;
        Ok(Upgraded {
            source: None,
            id: m.id.clone(),
            revision: 0,
            held: self.hold_reason(&m, &changes),
            changes,
        })
    }

    /// Whether `m` can replace the installed version of its plugin (it is
    /// installed, not static, another version, colliding with nothing),
    /// and if so what it changes.
    /// An older version than the installed one is refused unless
    /// `allow_downgrade`.
    pub(super) fn upgrade_changes(
        &self,
        m: &Manifest,
        allow_downgrade: bool,
    ) -> Result<Vec<String>, LifecycleError> {
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
            Some(r) if m.version < r.manifest.version && !allow_downgrade => {
                Err(LifecycleError::Downgrade {
                    id: m.id.clone(),
                    installed: r.manifest.version.to_string(),
                    offered: m.version.to_string(),
                })
            }
            Some(r) => {
                self.collisions(&inner, m)?;
                Ok(crate::contract::changes(&r.manifest, m))
            }
        }
    }
}
