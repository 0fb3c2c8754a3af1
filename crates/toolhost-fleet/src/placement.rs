//! The group's `placement` key: the plugins the backend places on every
//! daemon of the group, read as hostile as the catalog is (size-capped,
//! a field this toolhost does not know refuses the value) and handed to
//! the daemon's placer, which converges in the background: the catalog
//! watch and the heartbeat go on while plugins are pulled.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use toolhost_proto::admin as pb;

/// The largest placement value read.
pub const MAX_PLACEMENT_BYTES: usize = 1 << 20;

/// How a daemon applies a placement and says where it stands; the daemon
/// wires it to its lifecycle.
#[derive(Clone)]
pub struct Placer {
    /// Converges to a placement (returns when it has).
    pub apply: Arc<dyn Fn(pb::Placement) -> BoxFuture<'static, ()> + Send + Sync>,
    /// Where the daemon stands now.
    pub status: Arc<dyn Fn() -> pb::PlacementStatus + Send + Sync>,
}

impl std::fmt::Debug for Placer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Placer")
    }
}

/// One placed plugin in a status entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedRow {
    /// The plugin.
    pub id: String,
    /// The digest placed.
    pub desired: String,
    /// The digest installed ("" when none).
    pub installed: String,
    /// pulling, held, ready, starting, failed, removed.
    pub phase: String,
    /// Why, for held and failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Where a daemon stands against the group's placement, in its status
/// entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedEntry {
    /// The placement revision applied.
    pub revision: u64,
    /// Each placed plugin.
    pub plugins: Vec<PlacedRow>,
    /// Why the last placement value was refused or ignored.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused: String,
}

impl PlacedEntry {
    /// Every plugin placed is installed at its digest and ready.
    #[must_use]
    pub fn converged(&self) -> bool {
        self.refused.is_empty()
            && self
                .plugins
                .iter()
                .all(|p| p.phase == "ready" || p.phase == "removed")
    }
}

/// The status entry's view of a daemon's placement status.
#[must_use]
pub fn entry_of(s: pb::PlacementStatus) -> PlacedEntry {
    PlacedEntry {
        revision: s.revision,
        refused: s.refused,
        plugins: s
            .plugins
            .into_iter()
            .map(|p| PlacedRow {
                id: p.id,
                desired: p.desired,
                installed: p.installed,
                phase: p.phase,
                reason: p.reason,
            })
            .collect(),
    }
}

/// One value of the placement key, read as a placement, or why not.
pub(crate) fn read(value: &async_nats::jetstream::kv::Entry) -> Result<pb::Placement, String> {
    use async_nats::jetstream::kv::Operation;
    if value.operation != Operation::Put {
        return Err("the placement key was deleted; the plugins placed stay".to_owned());
    }
    if value.value.len() > MAX_PLACEMENT_BYTES {
        return Err(format!(
            "the placement value is {} bytes, over the limit of {MAX_PLACEMENT_BYTES}",
            value.value.len()
        ));
    }
    let unknown =
        toolhost_proto::strict::unknown_fields("toolhost.admin.v1.Placement", &value.value)
            .map_err(|e| format!("not a toolhost.admin.v1.Placement: {e}"))?;
    if !unknown.is_empty() {
        return Err(format!(
            "the placement has fields this toolhost does not know ({}); nothing changes",
            unknown.join(", ")
        ));
    }
    <pb::Placement as prost::Message>::decode(value.value.as_ref())
        .map_err(|e| format!("not a toolhost.admin.v1.Placement: {e}"))
}
