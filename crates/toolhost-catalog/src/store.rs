//! The store: offers, outcomes and the atomic swap.
//!
//! Writers (offers) take one mutex, so offers are linearizable: the result
//! is as if they ran one at a time, in lock order. Readers never take it:
//! they `load` the current [`Catalog`] from an `ArcSwap`. Each swap happens
//! under the writer lock and only ever installs a newer version, so no reader
//! can observe the version go backwards.
//!
//! Kept in one file on purpose (about 870 lines): an offer is one
//! procedure under one lock (fence, version order, validation, the
//! fingerprint diff, the swap, the reaper), and its correctness is the
//! order of those steps; split across files, each would hold half of an
//! invariant. Its model-based tests are in `tests/store.rs`.

use crate::catalog::{Body, ByFingerprint, Catalog, Defect, Entries, Entry};
use crate::descriptor::{Descriptor, Snapshot};
use crate::grace::{Grace, Reading};
use crate::installed::Installed;
use crate::schema::Schema;
use arc_swap::ArcSwap;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;
use toolhost_validate::CompiledSchema;

/// Most tools a snapshot may hold.
pub const MAX_TOOLS: usize = 100_000;

/// Most withheld tools, or reasons, an answer to the operator or the
/// backend names; the rest are counted. A snapshot of 100,000 tools that
/// all name a plugin a daemon lacks is ordinary in a fleet, and listing
/// them would make one answer about 15 MB, over the 4 MiB a gRPC client
/// reads by default: the push would be taken and its answer lost.
pub const MAX_LISTED: usize = 100;

/// `reasons` with at most [`MAX_LISTED`] kept, and one more line counting
/// the rest.
pub fn listed_reasons(mut reasons: Vec<String>) -> Vec<String> {
    if reasons.len() > MAX_LISTED {
        let more = reasons.len() - MAX_LISTED;
        reasons.truncate(MAX_LISTED);
        reasons.push(format!("and {more} more"));
    }
    reasons
}

/// What the store did with an offered snapshot.
///
/// ```
/// use toolhost_catalog::{Outcome, Snapshot, Store};
///
/// let store = Store::new("kandev");
/// let at = |generation: &str, epoch: u64, revision: u64| Snapshot {
///     generation: generation.to_owned(),
///     epoch,
///     revision,
///     tools: Vec::new(),
/// };
/// assert_eq!(store.offer(at("a", 10, 1)).outcome, Outcome::Accepted);
/// // A retry of what is current is no failure, and notifies nobody.
/// assert_eq!(store.offer(at("a", 10, 1)).outcome, Outcome::Unchanged);
/// // The next revision, with the same tools: recorded, nothing rebuilt.
/// assert_eq!(store.offer(at("a", 10, 2)).outcome, Outcome::Unchanged);
/// assert_eq!(store.current().revision(), 2);
/// // A delayed older revision is ignored.
/// assert_eq!(store.offer(at("a", 10, 1)).outcome, Outcome::Stale);
/// // A new generation needs a greater epoch: a dead backend's push loses,
/// // and a second one claiming the same epoch is a conflict.
/// assert_eq!(store.offer(at("b", 9, 1)).outcome, Outcome::Stale);
/// assert_eq!(store.offer(at("c", 10, 1)).outcome, Outcome::Conflict);
/// // A greater epoch takes over (with the same tools, nothing is rebuilt).
/// assert_eq!(store.offer(at("d", 11, 1)).outcome, Outcome::Unchanged);
/// assert_eq!(store.current().generation(), "d");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It is now the current catalog; sessions whose lists changed are told.
    Accepted,
    /// Same content as the current one: the new version was recorded,
    /// nothing rebuilt, nobody notified.
    Unchanged,
    /// Older than the current one, or from a retired generation: ignored.
    Stale,
    /// Same generation and revision as the current one with different
    /// content: ignored, and worth an operator's look.
    Conflict,
    /// Malformed: ignored; `reasons` says why.
    Invalid,
}

impl Outcome {
    /// Lowercase name, for logs and the CLI.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Unchanged => "unchanged",
            Self::Stale => "stale",
            Self::Conflict => "conflict",
            Self::Invalid => "invalid",
        }
    }
}

/// The answer to an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferResult {
    /// What happened.
    pub outcome: Outcome,
    /// The current generation after the offer.
    pub generation: String,
    /// The current revision after the offer.
    pub revision: u64,
    /// Why the snapshot was invalid, stale or in conflict.
    pub reasons: Vec<String>,
    /// Descriptors of the current catalog withheld as unsound.
    pub defects: Vec<Defect>,
    /// Surfaces whose visible tool list changed (accepted offers only).
    pub changed_surfaces: Vec<String>,
}

/// The newest version the store has accepted: what a new generation must
/// beat. Persisted by the daemon (managed mode) so a restart keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fence {
    /// The highest epoch accepted.
    pub epoch: u64,
    /// Its generation.
    pub generation: String,
    /// The highest revision of that generation accepted.
    pub revision: u64,
}

/// Compiled schemas by canonical digest, kept across revisions.
#[derive(Default)]
struct Writer {
    /// Restored from before a restart, while the catalog is still empty.
    restored: Option<Fence>,
    /// The version restored from the last-good snapshot at start, if any:
    /// the catalog is "last good" while it is still the current one.
    last_good: Option<(String, u64)>,
    retired: HashSet<String>,
    schemas: HashMap<[u8; 32], Arc<CompiledSchema>>,
    compilations: u64,
}

/// The version an offer claims.
struct Offered<'a> {
    generation: &'a str,
    epoch: u64,
    revision: u64,
}

/// Judges an offer against the fence. `None`: it may proceed. `live`:
/// the fence is the current catalog (not one restored after a restart, when
/// the catalog is still empty and the same version must be accepted again).
fn judge(f: &Fence, live: bool, s: &Offered<'_>, same_content: bool) -> Option<(Outcome, String)> {
    if s.generation != f.generation {
        return match s.epoch.cmp(&f.epoch) {
            std::cmp::Ordering::Greater => None,
            std::cmp::Ordering::Less => Some((
                Outcome::Stale,
                format!(
                    "fenced: epoch {} is below the current epoch {} (generation {:?})",
                    s.epoch, f.epoch, f.generation
                ),
            )),
            std::cmp::Ordering::Equal => Some((
                Outcome::Conflict,
                format!(
                    "epoch {} already belongs to generation {:?}; a new generation needs a greater epoch",
                    s.epoch, f.generation
                ),
            )),
        };
    }
    if s.epoch != f.epoch {
        return Some((
            Outcome::Conflict,
            format!(
                "generation {:?} has epoch {}, not {}",
                f.generation, f.epoch, s.epoch
            ),
        ));
    }
    if !live {
        return (s.revision < f.revision).then(|| {
            (
                Outcome::Stale,
                format!(
                    "revision {} is older than {}, the last accepted before the restart",
                    s.revision, f.revision
                ),
            )
        });
    }
    match s.revision.cmp(&f.revision) {
        std::cmp::Ordering::Greater => None,
        std::cmp::Ordering::Less => Some((
            Outcome::Stale,
            format!("revision {} is older than {}", s.revision, f.revision),
        )),
        // An identical retry is not a failure.
        std::cmp::Ordering::Equal if same_content => Some((
            Outcome::Unchanged,
            format!("revision {} is already current", s.revision),
        )),
        std::cmp::Ordering::Equal => Some((
            Outcome::Conflict,
            format!(
                "revision {} has different content than the current one",
                f.revision
            ),
        )),
    }
}

/// A declared tool that is not served now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absence {
    /// The surfaces that would see it.
    pub surfaces: Vec<String>,
    /// Why it is not served, in words for the agent (what is wrong, not
    /// how the plugin is built).
    pub why: String,
}

/// The catalog store. Cheap to share behind an `Arc`.
pub struct Store {
    prefix: String,
    current: ArcSwap<Catalog>,
    /// Tools a surface would see that are not served now, and why: so a
    /// call to one says why instead of "Unknown tool".
    absent: ArcSwap<std::collections::HashMap<String, Absence>>,
    writer: Mutex<Writer>,
    changes: watch::Sender<u64>,
    reaper: Reaper,
    /// How many tools the catalog grew and shrank by, summed over its
    /// changes since [`Store::take_size_churn`] was last called.
    churn: std::sync::atomic::AtomicU64,
    /// Who may still act on a replaced version (see [`Grace`]).
    grace: Arc<Grace>,
}

/// Frees what an offer leaves behind (the incoming copies of descriptors
/// that matched live entries, replaced catalogs) on a thread of its own:
/// for a 10,000-tool snapshot that is some 100,000 allocations, and the new
/// catalog is live before any of them needs freeing.
struct Reaper(Mutex<Option<std::sync::mpsc::Sender<Box<dyn Send>>>>);

impl Reaper {
    fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Send>>();
        let spawned = std::thread::Builder::new()
            .name("catalog-reaper".to_owned())
            .spawn(move || while rx.recv().is_ok() {});
        // Without a thread, garbage is dropped in place (see `reap`).
        Self(Mutex::new(spawned.ok().map(|_| tx)))
    }

    fn reap(&self, garbage: Box<dyn Send>) {
        let tx = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(tx) = tx {
            // The thread only stops when the sender is gone; if it died,
            // the garbage comes back and is dropped here.
            let _ = tx.send(garbage);
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.current.load();
        f.debug_struct("Store")
            .field("generation", &c.generation)
            .field("revision", &c.revision)
            .field("tools", &c.len())
            .finish_non_exhaustive()
    }
}

/// Where a normalized snapshot's tools come from: reused from the current
/// catalog, or new.
enum Planned {
    Reuse(Arc<Entry>),
    New(Box<Descriptor>),
    /// Same declaration, but whether it matches what is installed changed.
    Rejudge(Arc<Entry>, Option<String>),
}

impl Planned {
    fn name(&self) -> &str {
        match self {
            Self::Reuse(e) | Self::Rejudge(e, _) => &e.descriptor.exposed_name,
            Self::New(d) => &d.exposed_name,
        }
    }
}

impl Store {
    /// An empty store for exposed names with `prefix`.
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            current: ArcSwap::from_pointee(Catalog::default()),
            absent: ArcSwap::from_pointee(std::collections::HashMap::new()),
            writer: Mutex::new(Writer::default()),
            changes: watch::channel(0).0,
            reaper: Reaper::new(),
            churn: std::sync::atomic::AtomicU64::new(0),
            grace: Arc::default(),
        }
    }

    /// Replaces what is known of the tools that are declared but not
    /// served (by exposed name). The catalog's authority sets it whenever
    /// it publishes.
    pub fn set_absent(&self, absent: std::collections::HashMap<String, Absence>) {
        self.absent.store(Arc::new(absent));
    }

    /// Why `name` is not served, if it is a tool `surface` would see and
    /// the authority said why.
    #[must_use]
    pub fn why_absent(&self, surface: &str, name: &str) -> Option<String> {
        let absent = self.absent.load();
        let a = absent.get(name)?;
        a.surfaces
            .iter()
            .any(|s| s == surface)
            .then(|| a.why.clone())
    }

    /// The current catalog, read by a call: the reading stays counted
    /// until the call ends it ([`Reading::end`]) once it holds what it
    /// needs, so that a version replaced meanwhile is not retired under it
    /// ([`Store::grace`]).
    #[must_use]
    pub fn read_for_call(&self) -> (Reading, Arc<Catalog>) {
        let reading = self.grace.begin();
        (reading, self.current.load_full())
    }

    /// The grace periods of this store's readings: after publishing a
    /// catalog that replaces a version, [`Grace::advance`] and wait while
    /// readings of the old one are open.
    #[must_use]
    pub fn grace(&self) -> &Grace {
        &self.grace
    }

    /// The current catalog. Lock-free; hold the `Arc` as long as needed.
    #[must_use]
    pub fn current(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Fires after every accepted change with the new change sequence; read
    /// [`Catalog::surface_epoch`] to see whether a surface was affected.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Restores the fence a previous run of the daemon had reached, so a
    /// delayed push from a dead backend cannot take over after a restart.
    /// Only before the first offer.
    pub fn restore_fence(&self, fence: Fence) {
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if self.current.load().generation.is_empty() {
            w.restored = Some(fence);
        }
    }

    /// The fence now: the current version, or the restored one.
    #[must_use]
    pub fn fence(&self) -> Option<Fence> {
        let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.current.load();
        if cur.generation.is_empty() {
            return w.restored.clone();
        }
        Some(Fence {
            epoch: cur.epoch,
            generation: cur.generation.clone(),
            revision: cur.revision,
        })
    }

    /// Serves the last snapshot accepted before a restart, before the
    /// backend has pushed anything: offered like a push (the fence and the
    /// installed declarations judge it), and only when it is exactly the
    /// version the restored fence names, so it can never be older than
    /// what the fence admits. The catalog counts as last good until a push
    /// replaces it ([`Store::serving_last_good`]).
    pub fn restore_last_good(&self, snapshot: Snapshot, installed: &Installed) -> OfferResult {
        let version = (snapshot.generation.clone(), snapshot.revision);
        let matches_fence = self.fence().is_some_and(|f| {
            f.generation == snapshot.generation
                && f.epoch == snapshot.epoch
                && f.revision == snapshot.revision
        });
        if !matches_fence || !self.current.load().generation.is_empty() {
            let cur = self.current.load();
            return OfferResult {
                outcome: Outcome::Stale,
                generation: cur.generation.clone(),
                revision: cur.revision,
                reasons: vec![
                    "the last-good snapshot is not the version the catalog fence names (or a push came first)"
                        .to_owned(),
                ],
                defects: cur.defects(),
                changed_surfaces: vec![],
            };
        }
        let r = self.offer_managed(snapshot, installed);
        if r.outcome == Outcome::Accepted {
            self.writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .last_good = Some(version);
        }
        r
    }

    /// Whether the current catalog is the one restored at start from the
    /// last-good snapshot (no push has replaced it since).
    #[must_use]
    pub fn serving_last_good(&self) -> bool {
        let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.current.load();
        w.last_good
            .as_ref()
            .is_some_and(|(g, r)| *g == cur.generation && *r == cur.revision)
    }

    /// Judges the current catalog again against `installed`, after what is
    /// installed (or accepted by the operator) changed: an entry whose
    /// verdict changed is served or withheld, at the same version (no push
    /// came, so the fence does not move). Returns the surfaces whose
    /// visible list changed; their sessions are told as after a push.
    pub fn rejudge(&self, installed: &Installed) -> Vec<String> {
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.current.load_full();
        if cur.generation.is_empty() {
            return Vec::new();
        }
        let tools: Vec<Descriptor> = cur.entries().map(|e| e.descriptor.clone()).collect();
        let (plan, same, duplicates) = plan(&cur.body, tools, Some(installed));
        self.reaper.reap(Box::new(duplicates));
        if same {
            return Vec::new();
        }
        let (body, changed) = self.build(&mut w, &cur.body, plan, Some(installed));
        let seq = body.change_seq;
        let next = Arc::new(Catalog {
            generation: cur.generation.clone(),
            epoch: cur.epoch,
            revision: cur.revision,
            body: Arc::new(body),
        });
        let replaced = self.current.swap(Arc::clone(&next));
        self.changes.send_replace(seq);
        self.reaper.reap(Box::new((replaced, cur)));
        changed
    }

    /// How many tools the catalog grew and shrank by, summed over every
    /// change since the last call: a catalog that went from 8 tools to
    /// 10,000 and back to 8 between two calls answers 19,984. The daemon
    /// gives freed memory back after a large one.
    pub fn take_size_churn(&self) -> u64 {
        self.churn.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// Offers a snapshot (docs/CONTRACT.md §2).
    pub fn offer(&self, snapshot: Snapshot) -> OfferResult {
        self.offer_checked(snapshot, None, false)
    }

    /// Offers a snapshot pushed by a backend: descriptors that do not match
    /// `installed` are withheld and reported as defects.
    pub fn offer_managed(&self, snapshot: Snapshot, installed: &Installed) -> OfferResult {
        self.offer_checked(snapshot, Some(installed), false)
    }

    /// [`Self::offer_managed`] for a fleet daemon's own view of a sharded
    /// revision: the shards it selects follow the plugins it runs, so the
    /// same version may come again with more or fewer tools when those
    /// change; it replaces what is served rather than conflict. Every
    /// other rule of an offer holds (a lower version is stale).
    pub fn offer_managed_view(&self, snapshot: Snapshot, installed: &Installed) -> OfferResult {
        self.offer_checked(snapshot, Some(installed), true)
    }

    /// Kept whole on purpose: the rules of an offer, in the order they are
    /// decided, under one writer lock; each `return` is an outcome.
    fn offer_checked(
        &self,
        mut snapshot: Snapshot,
        installed: Option<&Installed>,
        view: bool,
    ) -> OfferResult {
        snapshot.seal();
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = self.current.load_full();
        // Shape rules are pure per descriptor: one equal to an entry of the
        // current catalog passed them when it was accepted, so only new
        // descriptors are checked.
        let (plan, same_content) = match swap_plan(&cur.body, &snapshot.tools, installed) {
            // The same names as now, a few descriptors replaced: no sort,
            // no walk of unchanged content.
            Some(plan) => {
                let tools = std::mem::take(&mut snapshot.tools);
                let same = plan.is_empty();
                let plan = Plan::Swap(
                    plan.into_iter()
                        .filter_map(|(at, k)| tools.get(k).map(|d| (at, Box::new(d.clone()))))
                        .collect(),
                );
                self.reaper.reap(Box::new(tools));
                (plan, same)
            }
            None => {
                snapshot.normalize();
                let (plan, same, duplicates) = plan(&cur.body, snapshot.tools, installed);
                self.reaper.reap(Box::new(duplicates));
                (Plan::Full(plan), same)
            }
        };
        let reasons = self.shape_problems(&snapshot.generation, &plan);
        let answer = |outcome, reasons, cur: &Catalog, changed| OfferResult {
            outcome,
            generation: cur.generation.clone(),
            revision: cur.revision,
            reasons,
            defects: cur.defects(),
            changed_surfaces: changed,
        };
        if !reasons.is_empty() {
            return answer(Outcome::Invalid, reasons, &cur, vec![]);
        }
        if w.retired.contains(&snapshot.generation) {
            let why = format!("generation {:?} was retired", snapshot.generation);
            return answer(Outcome::Stale, vec![why], &cur, vec![]);
        }
        // What the offer is judged against: the live version, or after a
        // restart the fence the last run reached.
        let live = !cur.generation.is_empty();
        let fence = if live {
            Some(Fence {
                epoch: cur.epoch,
                generation: cur.generation.clone(),
                revision: cur.revision,
            })
        } else {
            w.restored.clone()
        };
        // A daemon's own view of the version it serves may change with
        // what it runs: judged as if its content were the same.
        let same_version = fence.as_ref().is_some_and(|f| {
            live && f.generation == snapshot.generation
                && f.epoch == snapshot.epoch
                && f.revision == snapshot.revision
        });
        let judged_same = same_content || (view && same_version);
        if let Some(f) = &fence
            && let Some((outcome, why)) = judge(
                f,
                live,
                &Offered {
                    generation: &snapshot.generation,
                    epoch: snapshot.epoch,
                    revision: snapshot.revision,
                },
                judged_same,
            )
            && !(view && same_version && !same_content)
        {
            if outcome == Outcome::Unchanged {
                // An identical retry is the backend speaking too.
                w.last_good = None;
            }
            return answer(outcome, vec![why], &cur, vec![]);
        }
        let same_generation = snapshot.generation == cur.generation;
        if !same_generation && live {
            w.retired.insert(cur.generation.clone());
        }
        if let Some(f) = w.restored.take()
            && f.generation != snapshot.generation
        {
            w.retired.insert(f.generation);
        }

        // A push the store takes (even unchanged) is the backend speaking:
        // what it serves is no longer only the last good one.
        w.last_good = None;
        if same_content && live {
            let next = Catalog {
                generation: snapshot.generation,
                epoch: snapshot.epoch,
                revision: snapshot.revision,
                body: Arc::clone(&cur.body),
            };
            let next = Arc::new(next);
            self.current.store(Arc::clone(&next));
            trace_applied(&cur, &next);
            return answer(Outcome::Unchanged, vec![], &next, vec![]);
        }

        let (body, changed) = match plan {
            Plan::Full(plan) => self.build(&mut w, &cur.body, plan, installed),
            Plan::Swap(swaps) => self.build_swapped(&mut w, &cur.body, swaps, installed),
        };
        let seq = body.change_seq;
        let next = Catalog {
            generation: snapshot.generation,
            epoch: snapshot.epoch,
            revision: snapshot.revision,
            body: Arc::new(body),
        };
        let next = Arc::new(next);
        let replaced = self.current.swap(Arc::clone(&next));
        self.changes.send_replace(seq);
        self.churn.fetch_add(
            cur.len().abs_diff(next.len()) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        trace_applied(&cur, &next);
        self.reaper.reap(Box::new((replaced, cur)));
        answer(Outcome::Accepted, vec![], &next, changed)
    }

    fn shape_problems(&self, generation: &str, plan: &Plan) -> Vec<String> {
        let mut out = Vec::new();
        // Printable, so a generation id can be logged and shown as it is.
        if generation.is_empty()
            || generation.len() > 128
            || generation.chars().any(char::is_control)
        {
            out.push("generation must be 1 to 128 bytes, without control characters".to_owned());
        }
        let plan = match plan {
            // Same count and names as the current catalog, which passed.
            Plan::Swap(swaps) => {
                for (_, d) in swaps {
                    d.shape_problems(&self.prefix, &mut out);
                }
                return out;
            }
            Plan::Full(plan) => plan,
        };
        if plan.len() > MAX_TOOLS {
            out.push(format!("{} tools; at most {MAX_TOOLS}", plan.len()));
        }
        for p in plan {
            if let Planned::New(d) = p {
                d.shape_problems(&self.prefix, &mut out);
            }
        }
        for pair in plan.windows(2) {
            if pair[0].name() == pair[1].name() {
                out.push(format!("{}: listed twice", pair[0].name()));
            }
        }
        out
    }

    /// Builds the new body from the current one with a few entries
    /// replaced in place (same names, so the same order and index): only
    /// the replaced entries are compiled, and the fingerprint map, the
    /// defects and the surface lists are updated rather than rebuilt.
    fn build_swapped(
        &self,
        w: &mut Writer,
        cur: &Body,
        swaps: Vec<(usize, Box<Descriptor>)>,
        installed: Option<&Installed>,
    ) -> (Body, Vec<String>) {
        let mut changed: BTreeSet<String> = BTreeSet::new();
        let mut entries = cur.entries.clone();
        let mut by_fingerprint = ByFingerprint::clone(&cur.by_fingerprint);
        let mut same_visibility = true;
        let mut touched: HashSet<String> = HashSet::new();
        let mut rewritten = Vec::new();
        for (at, d) in swaps {
            let Some(old) = cur.entries.get(at) else {
                continue;
            };
            changed.extend(old.descriptor.surfaces.iter().cloned());
            changed.extend(d.surfaces.iter().cloned());
            let entry = judged_entry(w, *d, installed);
            same_visibility &= old.descriptor.surfaces == entry.descriptor.surfaces
                && old.is_sound() == entry.is_sound();
            if by_fingerprint.get(&old.descriptor.fingerprint) == Some(&at) {
                by_fingerprint.remove(&old.descriptor.fingerprint);
            }
            by_fingerprint.insert(entry.descriptor.fingerprint, at);
            if !old.same_contract(&entry) {
                rewritten.push(entry.descriptor.exposed_name.clone());
            }
            touched.insert(entry.descriptor.exposed_name.clone());
            entries.set(at, Arc::new(entry));
        }
        let by_surface = if same_visibility {
            Arc::clone(&cur.by_surface)
        } else {
            Arc::new(surface_lists(entries.iter()))
        };
        let mut defects: Vec<Defect> = cur
            .defects
            .iter()
            .filter(|d| !touched.contains(&d.tool))
            .cloned()
            .collect();
        for name in &touched {
            if let Some(e) = cur.index.get(name).and_then(|i| entries.get(*i))
                && let Some(reason) = e.defect()
            {
                defects.push(Defect {
                    tool: name.clone(),
                    reason: reason.to_owned(),
                });
            }
        }
        defects.sort_by(|a, b| a.tool.cmp(&b.tool));
        let (surface_epochs, change_seq) = cur.next_epochs(&changed);
        let contract_changes = contract_changes(cur, rewritten, change_seq, None);
        let body = Body {
            entries,
            index: Arc::clone(&cur.index),
            by_surface,
            by_fingerprint: Arc::new(by_fingerprint),
            defects: Arc::new(defects),
            surface_epochs,
            change_seq,
            contract_changes,
        };
        (body, changed.into_iter().collect())
    }

    /// Builds the new body: reused entries as they are, new ones compiled
    /// (through the cache), and the surfaces whose visible list changed.
    ///
    /// Kept whole on purpose: one pass over the planned entries that builds the
    /// new body and the changed surfaces together; split, it would walk the
    /// plan twice.
    fn build(
        &self,
        w: &mut Writer,
        cur: &Body,
        plan: Vec<Planned>,
        installed: Option<&Installed>,
    ) -> (Body, Vec<String>) {
        let mut changed: BTreeSet<String> = BTreeSet::new();
        let mut entries = Vec::with_capacity(plan.len());
        // Whether every name sits where it sat before, and whether every
        // replaced entry keeps its surfaces and soundness: then the index and
        // the per-surface lists of the current body still hold.
        let mut same_names = plan.len() == cur.entries.len();
        let mut same_visibility = same_names;
        let mut rewritten = Vec::new();
        for (i, p) in plan.into_iter().enumerate() {
            match p {
                Planned::Reuse(e) => {
                    same_names &= cur.entries.get(i).is_some_and(|o| Arc::ptr_eq(o, &e));
                    entries.push(e);
                }
                Planned::Rejudge(old, withheld) => {
                    changed.extend(old.descriptor.surfaces.iter().cloned());
                    same_visibility = false;
                    same_names &= cur.entries.get(i).is_some_and(|o| Arc::ptr_eq(o, &old));
                    entries.push(Arc::new(rejudged(w, &old, withheld)));
                }
                Planned::New(d) => {
                    let old = cur
                        .index
                        .get(&d.exposed_name)
                        .and_then(|j| cur.entries.get(*j));
                    if let Some(old) = old {
                        changed.extend(old.descriptor.surfaces.iter().cloned());
                    }
                    changed.extend(d.surfaces.iter().cloned());
                    let entry = judged_entry(w, *d, installed);
                    if old.is_some_and(|o| !o.same_contract(&entry)) {
                        rewritten.push(entry.descriptor.exposed_name.clone());
                    }
                    let in_place = cur.index.get(&entry.descriptor.exposed_name) == Some(&i);
                    same_names &= in_place;
                    same_visibility &= in_place
                        && old.is_some_and(|o| {
                            o.descriptor.surfaces == entry.descriptor.surfaces
                                && o.is_sound() == entry.is_sound()
                        });
                    entries.push(Arc::new(entry));
                }
            }
        }
        let index = if same_names {
            Arc::clone(&cur.index)
        } else {
            let mut index = HashMap::with_capacity(entries.len());
            for (i, e) in entries.iter().enumerate() {
                index.insert(e.descriptor.exposed_name.clone(), i);
            }
            for old in cur.entries.iter() {
                if !index.contains_key(&old.descriptor.exposed_name) {
                    changed.extend(old.descriptor.surfaces.iter().cloned());
                }
            }
            Arc::new(index)
        };
        let by_surface = if same_names && same_visibility {
            Arc::clone(&cur.by_surface)
        } else {
            Arc::new(surface_lists(entries.iter()))
        };
        let by_fingerprint: ByFingerprint = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.descriptor.fingerprint.is_sealed())
            .map(|(i, e)| (e.descriptor.fingerprint, i))
            .collect();
        let defects = entries
            .iter()
            .filter_map(|e| {
                e.defect().map(|r| Defect {
                    tool: e.descriptor.exposed_name.clone(),
                    reason: r.to_owned(),
                })
            })
            .collect();
        let (surface_epochs, change_seq) = cur.next_epochs(&changed);
        let renamed = (!same_names).then_some(&*index);
        let contract_changes = contract_changes(cur, rewritten, change_seq, renamed);
        // Keep the cache to what is live, once it has grown well past it.
        if w.schemas.len() > 2 * entries.len() + 64 {
            let live: HashSet<[u8; 32]> = entries
                .iter()
                .flat_map(|e| std::iter::once(e.schema_digests.0).chain(e.schema_digests.1))
                .collect();
            w.schemas.retain(|k, _| live.contains(k));
        }
        let body = Body {
            entries: Entries::from_vec(entries),
            index,
            by_surface,
            by_fingerprint: Arc::new(by_fingerprint),
            defects: Arc::new(defects),
            surface_epochs,
            change_seq,
            contract_changes,
        };
        (body, changed.into_iter().collect())
    }
}

/// The contract-change map of the body that follows `cur`: the tools in
/// `rewritten` changed their contract at `seq`, and when the names changed
/// (`names`, the new index) a tool that left takes its entry with it. The
/// map is shared, untouched, when neither happened.
fn contract_changes(
    cur: &Body,
    rewritten: Vec<String>,
    seq: u64,
    names: Option<&HashMap<String, usize>>,
) -> Arc<HashMap<String, u64>> {
    let prune = names.is_some() && !cur.contract_changes.is_empty();
    if rewritten.is_empty() && !prune {
        return Arc::clone(&cur.contract_changes);
    }
    let mut map = HashMap::clone(&cur.contract_changes);
    if let Some(names) = names {
        map.retain(|name, _| names.contains_key(name));
    }
    for name in rewritten {
        map.insert(name, seq);
    }
    Arc::new(map)
}

/// surface -> indexes of the sound entries visible there, in order.
fn surface_lists<'a>(
    entries: impl IntoIterator<Item = &'a Arc<Entry>>,
) -> HashMap<String, Vec<usize>> {
    let mut by_surface: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, e) in entries.into_iter().enumerate() {
        if e.is_sound() {
            for s in &e.descriptor.surfaces {
                by_surface.entry(s.clone()).or_default().push(i);
            }
        }
    }
    by_surface
}

/// What an offer will do to the current body.
enum Plan {
    /// The general case: every descriptor matched by name in order.
    Full(Vec<Planned>),
    /// The same names as now: entries replaced in place, by position.
    Swap(Vec<(usize, Box<Descriptor>)>),
}

/// Descriptors of one offer that replace the current one of the same name,
/// by (position now, index in the offer); `None` unless the offer names
/// exactly the current tools, each once, all sealed, and changes few of
/// them. Unchanged descriptors are found by fingerprint, in any order,
/// without reading their content; with `installed`, an unchanged entry
/// whose verdict would change sends the offer the general way.
fn swap_plan(
    cur: &Body,
    tools: &[Descriptor],
    installed: Option<&Installed>,
) -> Option<Vec<(usize, usize)>> {
    let n = tools.len();
    if n == 0 || n != cur.entries.len() || cur.by_fingerprint.len() != n {
        return None;
    }
    let mut taken = vec![false; n];
    let mut unmatched = Vec::new();
    for (k, d) in tools.iter().enumerate() {
        if !d.fingerprint.is_sealed() {
            return None;
        }
        match cur.by_fingerprint.get(&d.fingerprint) {
            Some(&at) => {
                let slot = taken.get_mut(at)?;
                if std::mem::replace(slot, true) {
                    return None;
                }
            }
            None => {
                unmatched.push(k);
                // Many changes: the general path costs no more.
                if unmatched.len() > 64 + n / 16 {
                    return None;
                }
            }
        }
    }
    let mut swaps = Vec::with_capacity(unmatched.len());
    for k in unmatched {
        let at = *cur.index.get(&tools.get(k)?.exposed_name)?;
        if std::mem::replace(taken.get_mut(at)?, true) {
            return None;
        }
        swaps.push((at, k));
    }
    if let Some(inst) = installed {
        let swapped: HashSet<usize> = swaps.iter().map(|(at, _)| *at).collect();
        for (at, e) in cur.entries.iter().enumerate() {
            if !swapped.contains(&at)
                && inst.verdict(&e.descriptor, &e.schema_digests) != e.withheld
            {
                return None;
            }
        }
    }
    Some(swaps)
}

/// Matches a normalized tool list against the current body: equal
/// descriptors reuse their compiled entry. Returns the plan, whether the
/// content is the same as the current one, and the incoming descriptors
/// made redundant by reuse (garbage). With `installed`, a reused entry
/// whose match against the installed declarations changed is re-judged.
fn plan(
    cur: &Body,
    tools: Vec<Descriptor>,
    installed: Option<&Installed>,
) -> (Vec<Planned>, bool, Vec<Descriptor>) {
    let mut same = tools.len() == cur.entries.len();
    let mut duplicates = Vec::with_capacity(tools.len());
    let plan = tools
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            // Same position first: the common case is an unchanged list.
            let old = match cur.entries.get(i) {
                Some(o) if o.descriptor.exposed_name == d.exposed_name => Some(o),
                _ => cur
                    .index
                    .get(&d.exposed_name)
                    .and_then(|j| cur.entries.get(*j)),
            };
            match old {
                Some(old) if old.descriptor == d => {
                    duplicates.push(d);
                    let verdict = installed
                        .and_then(|inst| inst.verdict(&old.descriptor, &old.schema_digests));
                    if verdict == old.withheld {
                        Planned::Reuse(Arc::clone(old))
                    } else {
                        same = false;
                        Planned::Rejudge(Arc::clone(old), verdict)
                    }
                }
                _ => {
                    same = false;
                    Planned::New(Box::new(d))
                }
            }
        })
        .collect();
    (plan, same, duplicates)
}

/// The compiled schema for `schema`'s digest: from the cache, without
/// building the schema's tree, or compiled now from the tree.
fn compile_cached(
    w: &mut Writer,
    schema: &Schema,
) -> ([u8; 32], Result<Arc<CompiledSchema>, String>) {
    let digest = schema.digest();
    if let Some(c) = w.schemas.get(&digest) {
        return (digest, Ok(Arc::clone(c)));
    }
    w.compilations += 1;
    match CompiledSchema::compile(schema.value()) {
        Ok(c) => {
            let c = Arc::new(c);
            w.schemas.insert(digest, Arc::clone(&c));
            (digest, Ok(c))
        }
        Err(problems) => {
            let why = problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            (digest, Err(why))
        }
    }
}

/// A new descriptor's entry, judged before it is compiled: one withheld
/// (a pushed tool that does not match what is installed here) is never
/// compiled, so a fleet catalog of tools this daemon does not serve costs
/// their digests, not their compilation. The digests are what the
/// judgement compares, and what the compiled-schema cache is keyed by.
fn judged_entry(w: &mut Writer, d: Descriptor, installed: Option<&Installed>) -> Entry {
    if let Some(inst) = installed {
        let digests = (
            d.input_schema.digest(),
            d.output_schema.as_ref().map(Schema::digest),
        );
        if let Some(why) = inst.verdict(&d, &digests) {
            return withheld_entry(d, digests, why);
        }
    }
    compile_entry(w, d)
}

/// An entry that is not served, and whose schemas were therefore not
/// compiled: both say why it is withheld.
fn withheld_entry(d: Descriptor, digests: ([u8; 32], Option<[u8; 32]>), why: String) -> Entry {
    Entry {
        output: d.output_schema.as_ref().map(|_| Err(why.clone())),
        input: Err(why.clone()),
        descriptor: d,
        schema_digests: digests,
        withheld: Some(why),
        compiled: false,
        contract: std::sync::OnceLock::new(),
    }
}

/// `old` judged again after the installed declarations changed: compiled
/// now if it is served for the first time, and uncompiled schemas never
/// served.
fn rejudged(w: &mut Writer, old: &Entry, withheld: Option<String>) -> Entry {
    match withheld {
        Some(why) if !old.compiled => {
            withheld_entry(old.descriptor.clone(), old.schema_digests, why)
        }
        None if !old.compiled => compile_entry(w, old.descriptor.clone()),
        withheld => Entry {
            descriptor: old.descriptor.clone(),
            input: old.input.clone(),
            output: old.output.clone(),
            schema_digests: old.schema_digests,
            withheld,
            compiled: true,
            contract: old.contract.clone(),
        },
    }
}

fn compile_entry(w: &mut Writer, d: Descriptor) -> Entry {
    let (in_digest, input) = compile_cached(w, &d.input_schema);
    let input = input.map_err(|e| format!("input schema: {e}"));
    let (out_digest, output) = match &d.output_schema {
        None => (None, None),
        Some(s) => {
            let (digest, r) = compile_cached(w, s);
            (
                Some(digest),
                Some(r.map_err(|e| format!("output schema: {e}"))),
            )
        }
    };
    Entry {
        descriptor: d,
        input,
        output,
        schema_digests: (in_digest, out_digest),
        withheld: None,
        compiled: true,
        contract: std::sync::OnceLock::new(),
    }
}

impl Store {
    /// How many schema compilations the store has run in its life (for
    /// tests and metrics: reuse shows as this number not moving).
    #[must_use]
    pub fn compilations(&self) -> u64 {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .compilations
    }

    /// How many compiled schemas the cache holds (for tests and metrics).
    #[must_use]
    pub fn compiled_schema_count(&self) -> usize {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .schemas
            .len()
    }
}

/// The `toolhost::catalog` debug event for a version that became current:
/// which exposed names appeared, vanished or changed declaration. Emitted
/// under the writer lock, so the events come out in the order the versions
/// were applied, and replaying them rebuilds every version's tool set: the
/// history an operator (or the chaos suite) needs to tell which tools a
/// call's `catalog_revision` offered. Names only; the diff is computed only
/// when someone listens at debug.
fn trace_applied(prev: &Catalog, next: &Catalog) {
    if !tracing::enabled!(target: "toolhost::catalog", tracing::Level::DEBUG) {
        return;
    }
    let diff = next.changes_since(prev);
    tracing::debug!(
        target: "toolhost::catalog",
        generation = %next.generation,
        revision = next.revision,
        tools = next.len(),
        added = %diff.added.join(" "),
        removed = %diff.removed.join(" "),
        changed = %diff.changed.join(" "),
        "catalog applied"
    );
}

#[cfg(test)]
mod tests {
    use super::{MAX_LISTED, listed_reasons};

    #[test]
    fn reasons_past_the_listed_many_are_counted_in_one_line() {
        let few: Vec<String> = (0..MAX_LISTED).map(|i| format!("r{i}")).collect();
        assert_eq!(listed_reasons(few.clone()), few);
        let many: Vec<String> = (0..MAX_LISTED + 250).map(|i| format!("r{i}")).collect();
        let listed = listed_reasons(many);
        assert_eq!(listed.len(), MAX_LISTED + 1);
        assert_eq!(listed[MAX_LISTED - 1], format!("r{}", MAX_LISTED - 1));
        assert_eq!(listed[MAX_LISTED], "and 250 more");
    }
}
