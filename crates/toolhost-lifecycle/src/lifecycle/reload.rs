//! Reloading a plugin served from its own directory, in place: what
//! `serve --dev` does when the author changes the plugin's code or its
//! manifest. It is an upgrade without the archive: the manifest is read
//! again from the directory and checked as install checks it, a new
//! process is started beside the running one, and only a new process that
//! became ready takes over (calls on the old one finish first). Anything
//! less leaves the last good version serving, and the error says why, the
//! new process's own stderr included.

use super::core::{Lifecycle, LifecycleError, invalid};
use super::records::Origin;
use std::sync::Arc;
use toolhost_manifest::Manifest;

impl Lifecycle {
    /// Where the running process of plugin `id` and its manifest part, as
    /// `check --start` words it; `None` until the process has said what it
    /// implements (or where shapes are not kept: only `serve --dev` keeps
    /// them). A reload refuses drift; this is for the first start, which
    /// has no last good version to keep.
    #[must_use]
    pub fn drift_of(&self, id: &str) -> Option<Vec<String>> {
        let inner = self.lock();
        let record = inner.records.get(id)?;
        let described = record.handle.as_ref()?.state().described?;
        Some(crate::drift::drift(
            &record.manifest,
            &described.shapes,
            &record.manifest.dir,
        ))
    }

    /// Reloads plugin `id`, served from a plugin path, from its directory.
    /// Returns the catalog revision its new declarations are served at.
    ///
    /// Kept whole on purpose: like `upgrade`, its order (check, start the
    /// new process beside the old, switch, drain) is its correctness.
    pub async fn reload(&self, id: &str) -> Result<u64, LifecycleError> {
        let _op = self.ops.lock().await;
        let dir = {
            let inner = self.lock();
            match inner.records.get(id) {
                None => {
                    return Err(LifecycleError::NotFound {
                        id: id.to_owned(),
                        hint: "",
                    });
                }
                Some(r) if r.origin != Origin::Static => {
                    return Err(LifecycleError::Invalid {
                        problems: vec![format!(
                            "{id} is installed, not served from its directory: upgrade it instead"
                        )],
                    });
                }
                Some(r) => r.manifest.dir.clone(),
            }
        };
        let m = match Manifest::load(&dir) {
            Err(problems) => return Err(invalid(&problems)),
            Ok(m) if !m.defects.is_empty() => return Err(invalid(&m.defects)),
            Ok(m) => m,
        };
        if m.id != id {
            return Err(LifecycleError::Invalid {
                problems: vec![format!(
                    "the manifest's id changed from {id:?} to {:?}: a plugin keeps its id (start serving it again to take the new one)",
                    m.id
                )],
            });
        }
        {
            let inner = self.lock();
            self.collisions(&inner, &m)?;
        }
        let resolved = self.resolve_logged(&m);
        if !resolved.missing.is_empty() {
            return Err(LifecycleError::StartFailed {
                id: id.to_owned(),
                reason: format!("it now needs {}", resolved.missing.join(", ")),
            });
        }
        let new = self.spawn(&m, &resolved);
        if let Err(e) = self.wait_ready(&new, &m).await {
            new.stop().await;
            return Err(e);
        }
        // Where the supervisor keeps the shapes the code states (`serve
        // --dev`), code that drifted from its manifest is refused as `check
        // --start` and `pack` refuse it: the last good version serves on.
        let drift = new
            .state()
            .described
            .as_ref()
            .map(|d| crate::drift::drift(&m, &d.shapes, &m.dir))
            .unwrap_or_default();
        if !drift.is_empty() {
            new.stop().await;
            return Err(LifecycleError::Invalid { problems: drift });
        }
        let swapped = {
            let mut inner = self.lock();
            let mut redeclared = false;
            let old = inner.records.get_mut(id).map(|r| {
                redeclared = r.manifest.tools != m.tools;
                r.manifest = m.clone();
                r.resolved = resolved;
                r.listable = true;
                r.handle.replace(Arc::clone(&new))
            });
            if old.is_some() {
                self.refresh_installed(&inner);
            }
            if redeclared {
                // The same plugins at the same versions, declaring other
                // tools: the next publish must build a new revision.
                inner.listed = None;
            }
            old
        };
        let Some(old) = swapped else {
            new.stop().await;
            return Err(LifecycleError::NotFound {
                id: id.to_owned(),
                hint: " (it was removed meanwhile)",
            });
        };
        // Replaces the old process's registration when the version is the
        // same (the usual case), so calls go to the new one from here on.
        self.plugins.insert(Arc::clone(&new));
        let revision = self.publish();
        tracing::info!(plugin = %id, version = %m.version, revision, "reloaded from its directory");
        if let Some(old) = old {
            self.drain_and_stop(&old).await;
            if old.version() != new.version() {
                self.plugins.remove_version(id, old.version());
            }
        }
        Ok(revision)
    }
}
