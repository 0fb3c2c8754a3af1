//! What the operator is shown of a fleet link: written by the fleet's
//! transport, read by the admin API's status and the metrics, which both
//! sit beside the fleet, not above it. Only the view's shape and the trait
//! live here; the link's state is the fleet's own.

/// What the operator is shown of the link; a copy, taken under the lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkView {
    /// The server, without credentials.
    pub server: String,
    /// The group's bucket.
    pub bucket: String,
    /// This daemon's id in it.
    pub daemon: String,
    /// Connected and watching the catalog.
    pub connected: bool,
    /// The last error from the engine, or why the watch could not start
    /// (a permission the daemon's NATS user lacks, say), log-safe.
    pub last_error: String,
    /// The bucket revision of the last catalog value offered.
    pub applied_kv_revision: u64,
    /// What became of it (accepted, unchanged, stale, conflict, invalid,
    /// refused).
    pub applied_outcome: String,
    /// Times the link was lost since start.
    pub reconnects: u64,
    /// Seconds since `connected` last changed.
    pub seconds_in_state: u64,
}

/// A fleet link, as the status and the metrics read it.
pub trait LinkStatus: Send + Sync {
    /// What the operator is shown now.
    fn view(&self) -> LinkView;
    /// The link's metric families, in the Prometheus text format.
    fn metrics(&self) -> String;
}
