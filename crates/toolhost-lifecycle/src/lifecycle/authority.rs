//! The embedded catalog authority (docs/CONTRACT.md §1): without a
//! backend, toolhost builds its catalog from the installed plugins. A
//! plugin's tools are listed while it is enabled and its process is
//! neither failed nor stopped, once it has been ready (or was present at
//! start-up); each change of that set is one new revision, offered to the
//! store like any other.

use super::core::Lifecycle;
use std::sync::Arc;
use tokio::sync::mpsc;
use toolhost_catalog::{Outcome, Snapshot};
use toolhost_manifest::Manifest;
use toolhost_runtime::Phase;

impl Lifecycle {
    /// Publishes a new revision if the set of listed plugins changed, and
    /// returns the current revision. Embedded mode only.
    pub(super) fn publish(&self) -> u64 {
        if self.cfg.managed || self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return self.store.current().revision();
        }
        let _one_at_a_time = self
            .publishing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (snapshot, key, revision, generation) = {
            let mut inner = self.lock();
            for r in inner.records.values_mut() {
                if r.handle.as_ref().is_some_and(|h| h.phase() == Phase::Ready) {
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
                            .is_some_and(|h| !matches!(h.phase(), Phase::Failed | Phase::Stopped))
                })
                .map(|r| &r.manifest)
                .collect();
            let key: Vec<(String, String)> = listed
                .iter()
                .map(|m| (m.id.clone(), m.version.to_string()))
                .collect();
            self.store
                .set_absent(absences(&self.cfg.prefix, inner.records.values(), &key));
            if inner.listed.as_ref() == Some(&key) {
                return inner.revision;
            }
            let revision = inner.revision + 1;
            let generation = inner.generation.clone();
            let snapshot =
                Snapshot::from_manifests(&self.cfg.prefix, generation.clone(), revision, listed);
            (snapshot, key, revision, generation)
        };
        // Outside the lock: `status` and `plugins list` go on answering
        // while thousands of tools compile.
        let r = self.store.offer(snapshot);
        if matches!(r.outcome, Outcome::Accepted | Outcome::Unchanged) {
            tracing::info!(generation = %generation, revision, plugins = key.len(), "catalog revision");
        } else {
            tracing::error!(outcome = r.outcome.as_str(), reasons = ?r.reasons, "the embedded catalog was refused");
        }
        for d in &r.defects {
            tracing::error!(tool = %d.tool, reason = %d.reason, "tool withheld");
        }
        let mut inner = self.lock();
        inner.revision = revision;
        inner.listed = Some(key);
        revision
    }
}

/// The tools of every plugin not listed, by exposed name, with why, in
/// words an agent can act on (ask the operator, try again soon). The
/// daemon's log and `status` have the details.
fn absences<'a>(
    prefix: &str,
    records: impl Iterator<Item = &'a super::records::Record>,
    listed: &[(String, String)],
) -> std::collections::HashMap<String, toolhost_catalog::Absence> {
    let mut out = std::collections::HashMap::new();
    for r in records {
        let m = &r.manifest;
        if listed.iter().any(|(id, _)| *id == m.id) {
            continue;
        }
        let state = r.handle.as_ref().map(|h| h.state());
        let phase = state.as_ref().map(|s| s.phase);
        let failures = state.as_ref().map_or(0, |s| s.failures);
        let why = if !r.enabled {
            format!("its plugin {} is disabled by the operator", m.id)
        } else if !r.resolved.missing.is_empty() {
            format!(
                "its plugin {} needs configuration the operator has not set yet ({}); ask them to set it",
                m.id,
                r.resolved.missing.join(", ")
            )
        } else {
            match phase {
                Some(Phase::Failed) => format!(
                    "its plugin {} has failed and is stopped until the operator restarts it",
                    m.id
                ),
                Some(Phase::Stopped) | None => format!("its plugin {} is stopped", m.id),
                Some(_) if failures >= toolhost_runtime::CRASH_LOOP => format!(
                    "its plugin {} is in a crash loop ({failures} failures in a row); retrying will not help until the operator has looked at it",
                    m.id
                ),
                Some(_) => format!("its plugin {} is starting; try again in a moment", m.id),
            }
        };
        for t in &m.tools {
            out.insert(
                toolhost_manifest::naming::exposed(prefix, &m.id, &t.name),
                toolhost_catalog::Absence {
                    surfaces: t.surfaces.clone(),
                    why: why.clone(),
                },
            );
        }
    }
    out
}

/// Publishes a revision whenever a plugin's state changes in a way that
/// changes what is listed.
pub(super) async fn run(lc: Arc<Lifecycle>, mut rx: mpsc::UnboundedReceiver<()>) {
    while rx.recv().await.is_some() {
        while rx.try_recv().is_ok() {}
        // Compiling a large catalog takes a while: on a blocking thread,
        // not on a worker that calls and the admin API are waiting for.
        // (Never `block_in_place`: it can retire a worker thread, and a
        // plugin forked from that thread dies with it, by its
        // parent-death signal.)
        let publishing = Arc::clone(&lc);
        if tokio::task::spawn_blocking(move || publishing.publish())
            .await
            .is_err()
        {
            tracing::error!("publishing the catalog failed; the next change publishes again");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::super::fixture::{Scratch, config, disabled_static_plugin, open};

    #[tokio::test]
    async fn the_first_revision_is_published_at_start_and_an_unchanged_set_publishes_nothing() {
        let state = Scratch::new("authority");
        let (lc, store, _) = open(config(&state.0));
        assert_eq!(store.current().revision(), 1);
        assert!(store.current().generation().starts_with("embedded-"));
        assert_eq!(lc.publish(), 1, "nothing changed: no new revision");
        assert_eq!(store.current().revision(), 1);
    }

    #[tokio::test]
    async fn a_disabled_plugin_is_not_listed() {
        let state = Scratch::new("authority-disabled");
        let cfg = disabled_static_plugin(&state.0);
        let (_lc, store, _) = open(cfg);
        assert_eq!(store.current().len(), 0);
    }

    #[tokio::test]
    async fn in_managed_mode_the_authority_publishes_nothing() {
        let state = Scratch::new("authority-managed");
        let mut cfg = config(&state.0);
        cfg.managed = true;
        let (lc, store, _) = open(cfg);
        assert_eq!(store.current().revision(), 0);
        assert_eq!(lc.publish(), 0);
    }
}
