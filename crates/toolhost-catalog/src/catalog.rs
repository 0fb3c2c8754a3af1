//! The published, compiled catalog that readers load.

use crate::descriptor::Descriptor;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_validate::CompiledSchema;

/// One tool as the pipeline needs it: its declaration and compiled schemas.
#[derive(Debug)]
pub struct Entry {
    /// The declaration.
    pub descriptor: Descriptor,
    /// The compiled input schema, or why it did not compile.
    pub input: Result<Arc<CompiledSchema>, String>,
    /// The compiled output schema, if one is declared, or why it did not
    /// compile.
    pub output: Option<Result<Arc<CompiledSchema>, String>>,
    /// Digests of the canonical input and output schemas: the keys of the
    /// store's compiled-schema cache.
    pub(crate) schema_digests: ([u8; 32], Option<[u8; 32]>),
    /// Why a pushed descriptor is withheld: it does not match what is
    /// installed (managed mode).
    pub(crate) withheld: Option<String>,
    /// Whether the schemas were compiled: a descriptor withheld when it
    /// arrived never is, until a change of what is installed serves it.
    pub(crate) compiled: bool,
    /// The contract's digest ([`Descriptor::contract_digest`]), computed
    /// the first time a listing or a call needs it: a withheld tool never
    /// pays for it.
    pub(crate) contract: std::sync::OnceLock<[u8; 16]>,
}

impl Entry {
    /// The digest of the tool's contract with the model (what
    /// `tools/list` shows of it), computed once.
    #[must_use]
    pub fn contract_digest(&self) -> [u8; 16] {
        *self
            .contract
            .get_or_init(|| self.descriptor.contract_digest())
    }

    /// [`Entry::contract_digest`] as 32 hex digits (the listing's
    /// `_meta["toolhost/contract"]`).
    #[must_use]
    pub fn contract_fingerprint(&self) -> String {
        crate::descriptor::hex(&self.contract_digest())
    }

    /// Whether the tool can be listed and called: every declared schema
    /// compiled.
    #[must_use]
    pub fn is_sound(&self) -> bool {
        self.input.is_ok() && !matches!(self.output, Some(Err(_))) && self.withheld.is_none()
    }

    /// The reason the entry is withheld, if it is.
    #[must_use]
    pub fn defect(&self) -> Option<&str> {
        match (&self.input, &self.output, &self.withheld) {
            (Err(e), _, _) | (_, Some(Err(e)), _) | (_, _, Some(e)) => Some(e),
            _ => None,
        }
    }

    /// Whether `other` means the same to a model as this entry: what
    /// [`Descriptor::contract_fingerprint`] covers, compared field by
    /// field (the schemas by their digests), so a store comparing a whole
    /// revision hashes nothing.
    pub(crate) fn same_contract(&self, other: &Entry) -> bool {
        let (a, b) = (&self.descriptor, &other.descriptor);
        a.exposed_name == b.exposed_name
            && a.title == b.title
            && a.description == b.description
            && a.instructions == b.instructions
            && self.schema_digests == other.schema_digests
            && a.annotations == b.annotations
            && a.task == b.task
    }
}

/// A descriptor withheld from the catalog, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Defect {
    /// The exposed name.
    pub tool: String,
    /// What is wrong.
    pub reason: String,
}

/// Entries per chunk of [`Entries`].
const CHUNK: usize = 128;

/// The entries of a catalog, in name order, in chunks shared between
/// revisions: a revision that replaces a few entries copies the chunk list
/// and the chunks it touches, not one reference per entry (taking 10,000
/// references costs 10,000 cache misses).
#[derive(Debug, Default, Clone)]
pub(crate) struct Entries {
    chunks: Vec<Arc<Vec<Arc<Entry>>>>,
    len: usize,
}

impl Entries {
    pub(crate) fn from_vec(all: Vec<Arc<Entry>>) -> Self {
        let len = all.len();
        let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK));
        let mut it = all.into_iter();
        loop {
            let chunk: Vec<Arc<Entry>> = it.by_ref().take(CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            chunks.push(Arc::new(chunk));
        }
        Self { chunks, len }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Arc<Entry>> {
        self.chunks.get(i / CHUNK).and_then(|c| c.get(i % CHUNK))
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Replaces the entry at `i` (copying its chunk if it is shared).
    pub(crate) fn set(&mut self, i: usize, e: Arc<Entry>) {
        if let Some(slot) = self
            .chunks
            .get_mut(i / CHUNK)
            .and_then(|c| Arc::make_mut(c).get_mut(i % CHUNK))
        {
            *slot = e;
        }
    }
}

/// Hashes a [`crate::descriptor::Fingerprint`], which is already a uniform digest, by
/// taking 8 of its bytes: no need to hash a hash.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FingerprintHasher(u64);

impl std::hash::Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
}

/// fingerprint -> position.
pub(crate) type ByFingerprint = HashMap<
    crate::descriptor::Fingerprint,
    usize,
    std::hash::BuildHasherDefault<FingerprintHasher>,
>;

/// The body of a catalog: shared between revisions whose content is equal,
/// so recording a new revision of the same content copies nothing.
#[derive(Debug, Default)]
pub(crate) struct Body {
    /// Sorted by exposed name.
    pub entries: Entries,
    /// exposed name -> index in `entries`. Shared with the previous body
    /// when the names are the same.
    pub index: Arc<HashMap<String, usize>>,
    /// surface -> indexes of sound entries visible there, in name order.
    /// Shared when no entry's visibility changed.
    pub by_surface: Arc<HashMap<String, Vec<usize>>>,
    /// fingerprint -> index in `entries`, for entries whose descriptor is
    /// sealed: how an offer finds an unchanged descriptor without reading
    /// its content.
    pub by_fingerprint: Arc<ByFingerprint>,
    /// The withheld entries and why, in name order (every offer answers
    /// them; walking every entry for them would cost more than the offer).
    pub defects: Arc<Vec<Defect>>,
    /// surface -> the change sequence at which its visible list last
    /// changed. A session remembers the epoch it last listed at and is
    /// notified when its surface's epoch moves.
    pub surface_epochs: HashMap<String, u64>,
    /// Bumped by every accepted change.
    pub change_seq: u64,
    /// exposed name -> the change sequence at which that tool's contract
    /// (what a model reads: texts, schemas, annotations, task mode) last
    /// changed under the same name. Only tools that ever changed are here,
    /// so it is empty, and a call pays one emptiness check, until an
    /// upgrade or a push rewrites a tool.
    pub contract_changes: Arc<HashMap<String, u64>>,
}

impl Body {
    /// The change sequence and surface epochs of the body that follows this
    /// one, given the surfaces whose visible lists changed: the sequence
    /// moves by one, and each changed surface's epoch moves to it.
    pub(crate) fn next_epochs(
        &self,
        changed: &std::collections::BTreeSet<String>,
    ) -> (HashMap<String, u64>, u64) {
        let change_seq = self.change_seq + 1;
        let mut surface_epochs = self.surface_epochs.clone();
        for s in changed {
            surface_epochs.insert(s.clone(), change_seq);
        }
        (surface_epochs, change_seq)
    }
}

/// How one catalog's exposed names differ from an earlier one's: for logs
/// and for anyone rebuilding a version's tool set from the versions before.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NameChanges<'a> {
    /// Names only the newer catalog has.
    pub added: Vec<&'a str>,
    /// Names only the older catalog has.
    pub removed: Vec<&'a str>,
    /// Names both have, with a different declaration.
    pub changed: Vec<&'a str>,
}

/// A published catalog: a version and its compiled tools. Immutable; the
/// store swaps in a new one.
#[derive(Debug, Default)]
pub struct Catalog {
    pub(crate) generation: String,
    pub(crate) epoch: u64,
    pub(crate) revision: u64,
    pub(crate) body: Arc<Body>,
}

impl Catalog {
    /// The generation ("" before any snapshot was accepted).
    #[must_use]
    pub fn generation(&self) -> &str {
        &self.generation
    }

    /// The epoch of the generation.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The revision.
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The exposed names that differ from `prev`, each list in name order.
    #[must_use]
    pub fn changes_since<'a>(&'a self, prev: &'a Catalog) -> NameChanges<'a> {
        let mut out = NameChanges::default();
        let (mut old, mut new) = (prev.entries().peekable(), self.entries().peekable());
        loop {
            let order = match (old.peek(), new.peek()) {
                (None, None) => return out,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(o), Some(n)) => o.descriptor.exposed_name.cmp(&n.descriptor.exposed_name),
            };
            match order {
                std::cmp::Ordering::Less => {
                    if let Some(o) = old.next() {
                        out.removed.push(&o.descriptor.exposed_name);
                    }
                }
                std::cmp::Ordering::Greater => {
                    if let Some(n) = new.next() {
                        out.added.push(&n.descriptor.exposed_name);
                    }
                }
                std::cmp::Ordering::Equal => {
                    if let (Some(o), Some(n)) = (old.next(), new.next())
                        && !Arc::ptr_eq(o, n)
                        && o.descriptor != n.descriptor
                    {
                        out.changed.push(&n.descriptor.exposed_name);
                    }
                }
            }
        }
    }

    /// Every entry, sound or not, in name order.
    pub fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.body.entries.iter()
    }

    /// The number of entries, sound or not.
    #[must_use]
    pub fn len(&self) -> usize {
        self.body.entries.len()
    }

    /// Whether the catalog has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.body.entries.is_empty()
    }

    /// The entry exposed as `name`, sound or not, on any surface.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.body
            .index
            .get(name)
            .and_then(|i| self.body.entries.get(*i))
    }

    /// The entry exposed as `name` if it is offered on `surface` (sound or
    /// not: an unsound one must fail closed as unavailable, not vanish).
    #[must_use]
    pub fn resolve(&self, surface: &str, name: &str) -> Option<&Arc<Entry>> {
        self.get(name).filter(|e| e.descriptor.on_surface(surface))
    }

    /// The sound entries visible on `surface`, in name order: a listing.
    pub fn visible(&self, surface: &str) -> impl Iterator<Item = &Arc<Entry>> {
        self.body
            .by_surface
            .get(surface)
            .into_iter()
            .flatten()
            .filter_map(|i| self.body.entries.get(*i))
    }

    /// The change sequence at which `surface`'s visible list last changed.
    #[must_use]
    pub fn surface_epoch(&self, surface: &str) -> u64 {
        self.body.surface_epochs.get(surface).copied().unwrap_or(0)
    }

    /// This catalog's place in the daemon's sequence of changes: every
    /// accepted change moves it on by one.
    #[must_use]
    pub fn change_seq(&self) -> u64 {
        self.body.change_seq
    }

    /// The change sequence at which the contract of the tool exposed as
    /// `name` last changed while keeping its name (0: never). A session
    /// that listed the tools before it listed the old contract.
    #[must_use]
    pub fn contract_changed_at(&self, name: &str) -> u64 {
        if self.body.contract_changes.is_empty() {
            return 0;
        }
        self.body.contract_changes.get(name).copied().unwrap_or(0)
    }

    /// Every withheld descriptor and why.
    #[must_use]
    pub fn defects(&self) -> Vec<Defect> {
        self.body.defects.to_vec()
    }

    /// [`Catalog::defects`] without a copy: a fleet catalog may withhold
    /// ten thousand tools, and a heartbeat or a metrics scrape wants a
    /// count and the first few.
    #[must_use]
    pub fn withheld(&self) -> &[Defect] {
        self.body.defects.as_slice()
    }

    /// The catalog as a snapshot (for `GetCatalog` and `toolhost tools`).
    #[must_use]
    pub fn to_snapshot(&self) -> crate::descriptor::Snapshot {
        crate::descriptor::Snapshot {
            generation: self.generation.clone(),
            epoch: self.epoch,
            revision: self.revision,
            tools: self.entries().map(|e| e.descriptor.clone()).collect(),
        }
    }
}
