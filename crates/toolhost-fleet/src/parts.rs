//! What a daemon hands its fleet link: the managed catalog, the token
//! table, the link's state, and how it says and changes what it runs.

use crate::link::FleetLink;
use std::sync::Arc;
use toolhost_calls::TokenTable;
use toolhost_managed::Managed;

/// What a daemon's fleet link works on, handed over by the daemon: the
/// managed catalog values are offered to, the token table bindings go to,
/// the link's state (which `toolhost status` and `/metrics` show), and
/// what the status entry says of each plugin.
pub struct FleetParts {
    /// Where catalog values go, under the rules of an admin push.
    pub catalog: Arc<Managed>,
    /// Where session bindings go.
    pub tokens: Arc<TokenTable>,
    /// The link's state.
    pub link: Arc<FleetLink>,
    /// Each installed plugin's id and `enabled`, `disabled` or
    /// `needs_config`, for the status entry.
    pub plugins: Arc<dyn Fn() -> Vec<(String, String)> + Send + Sync>,
    /// How placements are applied (`None`: the group's placement key is
    /// not followed).
    pub placer: Option<crate::placement::Placer>,
    /// The plugins this daemon runs: whose shards of a sharded catalog it
    /// reads.
    pub wanted: Arc<dyn Fn() -> std::collections::BTreeSet<String> + Send + Sync>,
}
