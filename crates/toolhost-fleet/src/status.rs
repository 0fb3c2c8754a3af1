//! A daemon's status entry: what it applied, and when it last said so.

use serde::{Deserialize, Serialize};

/// The last catalog value a daemon was offered, and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The bucket revision of the value.
    pub kv_revision: u64,
    /// accepted, unchanged, stale, conflict, invalid, or refused (the
    /// value could not be read as a snapshot at all).
    pub outcome: String,
    /// Why, when it was not accepted.
    pub reasons: Vec<String>,
    /// For a sharded catalog: the shards this daemon read, and how many
    /// the header names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<(usize, usize)>,
}

/// Withheld tools named in a status entry; the rest are counted, so a
/// large catalog's defects cannot make every heartbeat megabytes.
pub const MAX_WITHHELD_LISTED: usize = 100;

/// `status.<daemon>`, JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusEntry {
    /// The daemon's id.
    pub daemon: String,
    /// The catalog it serves.
    pub epoch: u64,
    /// Its generation.
    pub generation: String,
    /// Its revision.
    pub revision: u64,
    /// The last value offered, and the outcome.
    pub applied: Option<Applied>,
    /// Withheld tools: exposed name and why; the first
    /// [`MAX_WITHHELD_LISTED`] only.
    pub withheld: Vec<(String, String)>,
    /// How many are withheld in all.
    #[serde(default)]
    pub withheld_total: usize,
    /// What the NATS server refused this daemon's user while it followed
    /// (a permission it lacks), if anything: it is not following.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Plugin id and state.
    pub plugins: Vec<(String, String)>,
    /// Where it stands against the group's placement, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::placement::PlacedEntry>,
    /// Seconds since the Unix epoch when it was written.
    pub heartbeat: u64,
}
