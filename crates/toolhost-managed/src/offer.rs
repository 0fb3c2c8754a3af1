//! [`Managed`]: the one door a pushed catalog comes in by, and what it keeps.

use crate::convert::snapshot_from_proto;
use crate::fence::{self, FenceError};
use arc_swap::ArcSwap;
use std::path::PathBuf;
use std::sync::Arc;
use toolhost_catalog::{Installed, Outcome, Store};
use toolhost_proto::admin as pb;

/// The catalog a backend owns: the store it is pushed into, the installed
/// declarations pushes are checked against, and where it is kept.
#[derive(Debug)]
pub struct Managed {
    store: Arc<Store>,
    installed: Arc<ArcSwap<Installed>>,
    /// `<state_dir>/catalog-fence.json`; `None` keeps nothing on disk.
    fence_file: Option<PathBuf>,
}

impl Managed {
    /// The managed catalog over `store`, restoring what the last run kept
    /// beside `fence_file`: its fence (a delayed push of a dead backend
    /// stays refused), then the last snapshot it was pushed, served until
    /// the backend pushes again. A fence that cannot be read is an error
    /// (the operator resets it on purpose); a last-good snapshot that
    /// cannot be is said, and nothing is served until a push.
    pub fn open(
        store: Arc<Store>,
        installed: Arc<ArcSwap<Installed>>,
        fence_file: Option<PathBuf>,
    ) -> Result<Self, FenceError> {
        if let Some(path) = &fence_file {
            if let Some(f) = fence::load(path)? {
                tracing::info!(
                    epoch = f.epoch,
                    generation = %toolhost_base::log_safe(&f.generation, 256),
                    revision = f.revision,
                    "catalog fence restored"
                );
                store.restore_fence(f);
            }
            restore_last_good(&store, &installed, path);
        }
        Ok(Self {
            store,
            installed,
            fence_file,
        })
    }

    /// The store pushes go into.
    #[must_use]
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Offers a snapshot a backend pushed (over the admin API or from the
    /// fleet's key-value bucket) to the store, under the store's rules, and
    /// keeps the fence and the last-good snapshot. The answer is the push's;
    /// an error means the store took it but it could not be kept on disk.
    pub fn offer(&self, snapshot: pb::Snapshot) -> Result<pb::PushCatalogResponse, FenceError> {
        self.offer_as(snapshot, false)
    }

    /// [`Self::offer`] for a fleet daemon's view of a sharded revision (the
    /// tools of the plugins it runs): the same version may come again with
    /// other tools when what it runs changes (`Store::offer_managed_view`).
    pub fn offer_view(
        &self,
        snapshot: pb::Snapshot,
    ) -> Result<pb::PushCatalogResponse, FenceError> {
        self.offer_as(snapshot, true)
    }

    fn offer_as(
        &self,
        snapshot: pb::Snapshot,
        view: bool,
    ) -> Result<pb::PushCatalogResponse, FenceError> {
        // Kept as pushed, to be served after a restart until the backend
        // pushes again (crate::fence).
        let pushed = self
            .fence_file
            .is_some()
            .then(|| prost::Message::encode_to_vec(&snapshot));
        let current = self.store.current();
        let answer = match snapshot_from_proto(snapshot) {
            Err(reasons) => pb::PushCatalogResponse {
                outcome: pb::PushOutcome::Invalid.into(),
                generation: current.generation().to_owned(),
                revision: current.revision(),
                defects: vec![],
                reasons: toolhost_catalog::listed_reasons(reasons),
                defects_total: 0,
            },
            Ok(s) => {
                let offered = (s.generation.clone(), s.epoch, s.revision);
                let r = if view {
                    self.store.offer_managed_view(s, &self.installed.load())
                } else {
                    self.store.offer_managed(s, &self.installed.load())
                };
                if matches!(r.outcome, Outcome::Accepted | Outcome::Unchanged)
                    && let Some(path) = &self.fence_file
                {
                    let version = (offered.0.as_str(), offered.1, offered.2);
                    match &pushed {
                        Some(bytes) => fence::persist_push(&self.store, path, bytes, version),
                        None => fence::persist(&self.store, path),
                    }?;
                }
                let outcome = match r.outcome {
                    Outcome::Accepted => pb::PushOutcome::Accepted,
                    Outcome::Unchanged => pb::PushOutcome::Unchanged,
                    Outcome::Stale => pb::PushOutcome::Stale,
                    Outcome::Conflict => pb::PushOutcome::Conflict,
                    Outcome::Invalid => pb::PushOutcome::Invalid,
                };
                log_withheld(&r.defects);
                tracing::info!(
                    outcome = r.outcome.as_str(),
                    offered_generation = %toolhost_base::log_safe(&offered.0, 256),
                    offered_epoch = offered.1,
                    offered_revision = offered.2,
                    generation = %toolhost_base::log_safe(&r.generation, 256),
                    revision = r.revision,
                    "catalog push"
                );
                pb::PushCatalogResponse {
                    outcome: outcome.into(),
                    generation: r.generation,
                    revision: r.revision,
                    defects_total: u32::try_from(r.defects.len()).unwrap_or(u32::MAX),
                    defects: r
                        .defects
                        .into_iter()
                        .take(toolhost_catalog::MAX_LISTED)
                        .map(|d| pb::Defect {
                            tool: d.tool,
                            reason: d.reason,
                        })
                        .collect(),
                    reasons: toolhost_catalog::listed_reasons(r.reasons),
                }
            }
        };
        Ok(answer)
    }
}

/// Withheld tools named one per log line; the rest are counted in one.
/// A push of 10,000 tools whose plugins a daemon does not have is normal
/// in a fleet, and 10,000 lines cost it more than judging them (a third
/// of its CPU for the push); the push's answer, the fleet's status entry
/// and `toolhost status` name them.
const WITHHELD_LOGGED: usize = 20;

fn log_withheld(defects: &[toolhost_catalog::Defect]) {
    for d in defects.iter().take(WITHHELD_LOGGED) {
        tracing::warn!(tool = %d.tool, reason = %d.reason, "pushed tool withheld");
    }
    if let Some(more) = defects
        .len()
        .checked_sub(WITHHELD_LOGGED)
        .filter(|n| *n > 0)
    {
        tracing::warn!(
            more,
            withheld = defects.len(),
            "more pushed tools withheld; `toolhost status` names them"
        );
    }
}

/// Serves the last catalog the backend pushed before this start, until it
/// pushes again, instead of nothing. Anything wrong with the file is said,
/// and nothing is restored.
fn restore_last_good(store: &Store, installed: &ArcSwap<Installed>, fence_file: &std::path::Path) {
    match fence::load_last_good(fence_file) {
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; serving no catalog until the backend pushes"),
        Ok(Some(snapshot)) => {
            let r = store.restore_last_good(snapshot, &installed.load());
            if r.outcome == Outcome::Accepted {
                tracing::info!(
                    generation = %toolhost_base::log_safe(&r.generation, 256),
                    revision = r.revision,
                    withheld = r.defects.len(),
                    "serving the last catalog the backend pushed before this start, until it pushes again"
                );
            } else {
                tracing::warn!(
                    outcome = r.outcome.as_str(),
                    reasons = %r.reasons.join("; "),
                    "the last-good catalog was not restored; serving no catalog until the backend pushes"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(generation: &str, epoch: u64, revision: u64) -> pb::Snapshot {
        pb::Snapshot {
            shards: Vec::new(),
            retiring: Vec::new(),
            generation: generation.into(),
            epoch,
            revision,
            tools: vec![],
        }
    }

    fn open(dir: &std::path::Path) -> Result<Managed, FenceError> {
        Managed::open(
            Arc::new(Store::new("kandev")),
            Arc::new(ArcSwap::from_pointee(Installed::default())),
            Some(dir.join("catalog-fence.json")),
        )
    }

    fn outcome(r: &pb::PushCatalogResponse) -> pb::PushOutcome {
        pb::PushOutcome::try_from(r.outcome).unwrap_or(pb::PushOutcome::Unspecified)
    }

    #[test]
    fn a_taken_push_is_kept_and_a_restart_serves_it_behind_its_fence() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let first = open(dir.path()).expect("no fence yet");
        let r = first.offer(push("g1", 5, 1)).expect("kept on disk");
        assert_eq!(outcome(&r), pb::PushOutcome::Accepted);
        drop(first);

        let again = open(dir.path()).expect("the fence reads back");
        let current = again.store().current();
        assert_eq!((current.generation(), current.revision()), ("g1", 1));
        // A dead backend's delayed push of an older epoch stays refused.
        let late = again.offer(push("g0", 4, 9)).expect("an answer");
        assert_eq!(outcome(&late), pb::PushOutcome::Stale);
        // A newer epoch is taken (the same empty tool set: "unchanged").
        let newer = again.offer(push("g2", 6, 1)).expect("kept on disk");
        assert_ne!(outcome(&newer), pb::PushOutcome::Stale);
        assert_eq!(again.store().current().generation(), "g2");
    }

    /// The snapshot is written without waiting for the disk; after a power
    /// loss it may be another one of the same version, cut short at a
    /// tool's end. The fence's digest tells, and nothing is restored.
    #[test]
    fn a_last_good_snapshot_the_fence_does_not_name_is_not_restored() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fence = dir.path().join("catalog-fence.json");
        let first = open(dir.path()).expect("no fence yet");
        first.offer(push("g1", 1, 1)).expect("kept");
        drop(first);
        // The same version, decoding to the same snapshot, but not the
        // bytes written (an unknown field, which a decoder skips).
        let mut torn = prost::Message::encode_to_vec(&push("g1", 1, 1));
        torn.extend_from_slice(&[15 << 3, 1]);
        std::fs::write(crate::fence::last_good_path(&fence), &torn).expect("written");
        let restarted = open(dir.path()).expect("the fence reads");
        assert_ne!(restarted.store().current().generation(), "g1");
        drop(restarted);

        // A fence written before the digest existed (its snapshot was
        // synced first) still restores its snapshot: the same bytes.
        let text = std::fs::read_to_string(&fence).expect("read");
        let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert!(json.get("last_good_sha256").is_some(), "{text}");
        json.as_object_mut()
            .expect("an object")
            .remove("last_good_sha256");
        std::fs::write(&fence, json.to_string()).expect("written");
        let restarted = open(dir.path()).expect("the fence reads");
        assert_eq!(restarted.store().current().generation(), "g1");
    }

    /// An older push's write that arrives after a newer one's rewrites the
    /// fence but keeps the newer snapshot's digest, so that one stays checked.
    #[test]
    fn a_late_write_of_an_older_push_keeps_the_snapshot_digest() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fence = dir.path().join("catalog-fence.json");
        let managed = open(dir.path()).expect("no fence yet");
        managed.offer(push("g1", 1, 2)).expect("kept");
        let digest = |text: &str| -> Option<String> {
            let json: serde_json::Value = serde_json::from_str(text).ok()?;
            json.get("last_good_sha256")?.as_str().map(str::to_owned)
        };
        let before = digest(&std::fs::read_to_string(&fence).expect("read"));
        assert!(before.is_some());
        let older = prost::Message::encode_to_vec(&push("g1", 1, 1));
        crate::fence::persist_push(managed.store(), &fence, &older, ("g1", 1, 1)).expect("kept");
        let after = digest(&std::fs::read_to_string(&fence).expect("read"));
        assert_eq!(before, after);
    }

    #[test]
    fn an_invalid_push_changes_nothing_on_disk() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let managed = open(dir.path()).expect("no fence yet");
        let r = managed.offer(push("", 1, 1)).expect("an answer");
        assert_eq!(outcome(&r), pb::PushOutcome::Invalid);
        assert!(!r.reasons.is_empty(), "an invalid push says why");
        assert!(!dir.path().join("catalog-fence.json").exists());
    }

    #[test]
    fn an_unreadable_fence_stops_the_start_and_an_unreadable_snapshot_does_not() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fence = dir.path().join("catalog-fence.json");
        std::fs::write(&fence, b"{not json").expect("written");
        let Err(err) = open(dir.path()) else {
            panic!("a corrupt fence is an error");
        };
        assert!(err.to_string().contains("delete it"), "{err}");

        std::fs::remove_file(&fence).expect("removed");
        let managed = open(dir.path()).expect("no fence");
        managed.offer(push("g1", 1, 1)).expect("kept");
        drop(managed);
        std::fs::write(crate::fence::last_good_path(&fence), b"\xff\xff garbage").expect("written");
        let restarted = open(dir.path()).expect("the fence alone still reads");
        assert_ne!(
            restarted.store().current().generation(),
            "g1",
            "a snapshot that does not decode is not served"
        );
    }
}
