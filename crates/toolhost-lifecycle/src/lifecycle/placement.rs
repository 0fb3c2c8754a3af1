//! Placement: the plugins a backend wants this daemon to run, and the
//! daemon converging to them through the same lifecycle as the CLI.
//!
//! A placement names each plugin by id and by a registry reference pinned
//! to a digest. Converging installs what is missing, upgrades what has
//! another digest (every rule of an upgrade holds: the signer, versions
//! forward, a hold for a changed sandbox ask or, under "hold", a changed
//! contract), and removes what an earlier placement placed and this one
//! does not name. Calls are served throughout: each step is the
//! lifecycle's own, which starts a new version before it retires the old.
//! A package that cannot be pulled or verified never replaces a working
//! version: the plugin is reported failed with the reason, and what was
//! installed keeps serving.
//!
//! In managed mode the lifecycle's operations are refused to the operator
//! by hand; a placement is how they happen there (the refusal says so).
//!
//! What this module must not do: follow a tag (a placed reference names a
//! digest), install a package whose id is not the one placed, remove a
//! plugin it did not place, or hold the operations' lock between steps
//! (each step takes it, so an accept by the operator can come between).

use super::core::{Lifecycle, LifecycleError};
use super::placed::PlacementBook;
use super::placed::{PlacedPlugin, PlacedState, Placement, PlacementStatus};
use crate::contract::OnChange;
use std::collections::BTreeSet;
use toolhost_registry::Reference;

tokio::task_local! {
    /// Set while a placement converges: the lifecycle's operations, refused
    /// by hand in managed mode, are how placement works.
    pub(super) static PLACING: bool;
}

/// The digest part of a reference.
fn digest_of(reference: &str) -> &str {
    reference.rsplit_once('@').map_or("", |(_, d)| d)
}

impl Lifecycle {
    pub(super) fn placement_book(&self) -> std::sync::MutexGuard<'_, PlacementBook> {
        self.placed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The contract policy for `id`: the placement's, else the operator's.
    pub(super) fn contract_policy(&self, id: &str) -> OnChange {
        self.placement_book()
            .placement
            .plugins
            .iter()
            .find(|p| p.id == id)
            .and_then(|p| p.contract_changes)
            .unwrap_or_else(|| self.cfg.contracts.of(id))
    }

    /// Converges to `placement`; where each plugin stands after.
    /// One placement converges at a time; a stale one changes nothing.
    pub async fn apply_placement(&self, placement: Placement) -> PlacementStatus {
        let _one = self.placing.lock().await;
        if !self.cfg.managed {
            let mut status = self.placement_status();
            status.refused = "toolhost is not in managed mode: plugins are installed with `toolhost plugins install`, and a placement applies only where a backend owns the catalog".to_owned();
            return status;
        }
        let last = self.placement_book().placement.revision;
        if placement.revision <= last && last != 0 {
            let mut status = self.placement_status();
            if placement.revision < last {
                status.refused = format!(
                    "placement revision {} is older than the one applied ({last}): ignored",
                    placement.revision
                );
            }
            return status;
        }
        let before: BTreeSet<String> = self.lock().file.placed.clone();
        {
            let mut book = self.placement_book();
            book.placement = placement.clone();
            book.failed.clear();
            book.removed.clear();
            book.refused.clear();
        }
        PLACING
            .scope(true, async {
                for p in &placement.plugins {
                    if let Err(why) = self.place_one(p).await {
                        tracing::warn!(plugin = %p.id, "placement: {why}");
                        self.placement_book().failed.insert(p.id.clone(), why);
                    }
                    // The backend's catalog names the placed plugins'
                    // tools before they are here: judged again as each
                    // arrives, they are served from then on.
                    self.store.rejudge(&self.installed.load());
                }
                self.placement_book().pulling = None;
                let wanted: BTreeSet<&str> =
                    placement.plugins.iter().map(|p| p.id.as_str()).collect();
                for id in before.iter().filter(|id| !wanted.contains(id.as_str())) {
                    match self.remove(id, false).await {
                        Ok(_) | Err(LifecycleError::NotFound { .. }) => {
                            self.placement_book().removed.insert(id.clone());
                            let mut inner = self.lock();
                            inner.file.placed.remove(id);
                            let _ = self.save(&inner);
                        }
                        Err(e) => {
                            tracing::warn!(plugin = %id, "placement: cannot remove it: {e}");
                        }
                    }
                }
                self.store.rejudge(&self.installed.load());
            })
            .await;
        tracing::info!(revision = placement.revision, "placement applied");
        self.placement_status()
    }

    /// One plugin: installed, upgraded, or already there.
    async fn place_one(&self, p: &PlacedPlugin) -> Result<(), String> {
        let reference = Reference::parse(&p.reference).map_err(|e| e.to_string())?;
        let Some(desired) = reference.digest.clone() else {
            return Err(format!(
                "{} names no digest: a placement names REGISTRY/REPO@sha256:DIGEST, so every daemon runs the same bytes",
                reference
            ));
        };
        let (installed, held) = {
            let inner = self.lock();
            let installed = inner
                .file
                .sources
                .get(&p.id)
                .map(|s| digest_of(s).to_owned());
            let held = inner
                .file
                .held
                .get(&p.id)
                .and_then(|h| h.source.as_deref().map(|s| digest_of(s).to_owned()));
            (installed, held)
        };
        if installed.as_deref() == Some(desired.as_str())
            || held.as_deref() == Some(desired.as_str())
        {
            return Ok(());
        }
        self.placement_book().pulling = Some(p.id.clone());
        let pinned = reference.to_string();
        let exists = self.lock().records.contains_key(&p.id);
        let outcome = if exists {
            self.upgrade_placed(&pinned, &p.id, &p.values).await
        } else {
            self.install_placed(&pinned, &p.id, &p.values).await
        };
        outcome.map_err(|e| e.to_string())?;
        let mut inner = self.lock();
        inner.file.placed.insert(p.id.clone());
        self.save(&inner).map_err(|e| e.to_string())
    }

    /// Where the daemon stands against the last placement.
    #[must_use]
    pub fn placement_status(&self) -> PlacementStatus {
        let book = self.placement_book();
        let inner = self.lock();
        let mut plugins: Vec<PlacedState> =
            book.placement
                .plugins
                .iter()
                .map(|p| {
                    let desired = digest_of(&p.reference).to_owned();
                    let installed = inner
                        .file
                        .sources
                        .get(&p.id)
                        .map(|s| digest_of(s).to_owned())
                        .unwrap_or_default();
                    let held =
                        inner.file.held.get(&p.id).filter(|h| {
                            h.source.as_deref().map(digest_of) == Some(desired.as_str())
                        });
                    let running = inner
                        .records
                        .get(&p.id)
                        .and_then(|r| r.handle.as_ref())
                        .is_some_and(|h| h.state().phase == toolhost_runtime::Phase::Ready);
                    let (phase, reason) = if let Some(why) = book.failed.get(&p.id) {
                        ("failed", why.clone())
                    } else if book.pulling.as_deref() == Some(p.id.as_str()) {
                        ("pulling", String::new())
                    } else if let Some(h) = held {
                        ("held", h.why.clone())
                    } else if installed == desired && running {
                        ("ready", String::new())
                    } else if installed == desired {
                        ("starting", String::new())
                    } else {
                        ("pulling", String::new())
                    };
                    PlacedState {
                        id: p.id.clone(),
                        desired,
                        installed,
                        phase: phase.to_owned(),
                        reason: toolhost_base::term::one_line(&reason).into_owned(),
                    }
                })
                .collect();
        plugins.extend(book.removed.iter().map(|id| PlacedState {
            id: id.clone(),
            desired: String::new(),
            installed: String::new(),
            phase: "removed".to_owned(),
            reason: String::new(),
        }));
        PlacementStatus {
            revision: book.placement.revision,
            plugins,
            refused: book.refused.clone(),
        }
    }
}
