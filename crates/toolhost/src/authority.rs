//! The embedded catalog authority: without a backend, toolhost builds its
//! catalog from the installed plugins.
//!
//! The generation is an id of this daemon run; the revision rises every time
//! the effective catalog changes. A plugin that has given up (`failed`) or
//! was stopped withholds its tools; one that is starting or restarting keeps
//! them listed, and calls fail as `plugin_unavailable` until it is ready.

use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;
use toolhost_catalog::{Outcome, Snapshot, Store};
use toolhost_manifest::Manifest;
use toolhost_runtime::{Phase, PluginHandle};

pub struct Embedded {
    pub prefix: String,
    pub store: Arc<Store>,
    pub plugins: Vec<(Manifest, Arc<PluginHandle>)>,
}

/// An id for this run of the daemon.
pub fn run_generation() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("embedded-{now}-{}", std::process::id())
}

impl Embedded {
    fn listed(&self) -> BTreeSet<String> {
        self.plugins
            .iter()
            .filter(|(_, h)| !matches!(h.state().phase, Phase::Failed | Phase::Stopped))
            .map(|(m, _)| m.id.clone())
            .collect()
    }

    fn offer(&self, generation: &str, revision: u64, listed: &BTreeSet<String>) {
        let manifests = self
            .plugins
            .iter()
            .map(|(m, _)| m)
            .filter(|m| listed.contains(&m.id));
        let snapshot = Snapshot::from_manifests(&self.prefix, generation, revision, manifests);
        let r = self.store.offer(snapshot);
        if r.outcome != Outcome::Accepted && r.outcome != Outcome::Unchanged {
            tracing::error!(outcome = r.outcome.as_str(), reasons = ?r.reasons, "the embedded catalog was refused");
        }
        for d in &r.defects {
            tracing::error!(tool = %d.tool, reason = %d.reason, "tool withheld");
        }
        tracing::info!(
            generation,
            revision,
            tools = self.store.current().len(),
            "catalog revision"
        );
    }

    /// Publishes the first revision, then a new one whenever the set of
    /// listed plugins changes. Returns when every plugin handle is gone.
    pub async fn run(self) {
        let generation = run_generation();
        let mut revision = 1;
        let mut listed = self.listed();
        self.offer(&generation, revision, &listed);
        let (tx, mut rx) = mpsc::unbounded_channel();
        for (_, h) in &self.plugins {
            let mut w = h.subscribe();
            let tx = tx.clone();
            tokio::spawn(async move {
                while w.changed().await.is_ok() {
                    if tx.send(()).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        while rx.recv().await.is_some() {
            let now = self.listed();
            if now != listed {
                listed = now;
                revision += 1;
                self.offer(&generation, revision, &listed);
            }
        }
    }
}
