//! Live sessions and `notifications/tools/list_changed`.

use crate::tools::ListingCache;
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use toolhost_catalog::Store;
use toolhost_pipeline::Pipeline;

/// How long one notification may take before that client is given up on
/// for this change.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The default limit of live sessions and subscriptions.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

enum Target {
    /// A session client (2025-11-25 and older).
    Peer(Peer<RoleServer>),
    /// An open `subscriptions/listen` stream (2026-07-28).
    Sink(SubscriptionSink),
}

struct Listener {
    id: u64,
    surface: String,
    /// The surface epoch this listener has last been told about.
    seen: u64,
    /// Whether the client has finished initializing. A session counts
    /// toward the limit from `initialize` on, so sessions that never send
    /// `notifications/initialized` cannot pile up past it, but it is told
    /// of changes only once it is ready.
    ready: bool,
    target: Arc<Target>,
}

impl Listener {
    /// Subscriptions are removed when their stream ends; a session is live
    /// until its transport closes (the client left, or the idle timeout).
    fn is_live(&self) -> bool {
        match &*self.target {
            Target::Peer(p) => !p.is_transport_closed(),
            Target::Sink(_) => true,
        }
    }
}

/// Shared by every session: the pipeline, listing caches, and the listeners
/// to notify.
pub struct Hub {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) listings: ListingCache,
    listeners: Mutex<Vec<Listener>>,
    next_id: AtomicU64,
    /// Most live sessions and subscriptions; 0 means no limit.
    max_sessions: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("listeners", &self.listener_count())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub over this pipeline. Call [`Hub::run_notifier`] to start
    /// delivering list changes.
    #[must_use]
    pub fn new(pipeline: Arc<Pipeline>) -> Arc<Self> {
        Arc::new(Self {
            pipeline,
            listings: ListingCache::default(),
            listeners: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            max_sessions: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_SESSIONS),
        })
    }

    /// Sets the most live sessions and subscriptions (0: no limit). New
    /// sessions beyond it are refused at `initialize`.
    pub fn set_max_sessions(&self, max: usize) {
        self.max_sessions.store(max, Ordering::Relaxed);
    }

    /// Admits a session at `initialize`, if the limit allows one more:
    /// counted from now, notified once [`Hub::mark_ready`]. The check and
    /// the insert happen under one lock, so concurrent `initialize`s cannot
    /// overshoot the limit. `None` when the limit is reached.
    pub(crate) fn admit_peer(&self, surface: &str, peer: Peer<RoleServer>) -> Option<u64> {
        let max = self.max_sessions.load(Ordering::Relaxed);
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Count only live ones: closed sessions are pruned first.
        listeners.retain(Listener::is_live);
        if max != 0 && listeners.len() >= max {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        listeners.push(Listener {
            id,
            surface: surface.to_owned(),
            seen: self.store().current().surface_epoch(surface),
            ready: false,
            target: Arc::new(Target::Peer(peer)),
        });
        Some(id)
    }

    /// The session admitted as `id` finished initializing: from now on it
    /// is told of list changes.
    pub(crate) fn mark_ready(&self, id: u64) {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = listeners.iter_mut().find(|l| l.id == id) {
            l.ready = true;
        }
    }

    /// The session limit.
    #[must_use]
    pub fn max_sessions(&self) -> usize {
        self.max_sessions.load(Ordering::Relaxed)
    }

    fn store(&self) -> &Arc<Store> {
        self.pipeline.store()
    }

    /// How many sessions and subscriptions would be notified of a change.
    #[must_use]
    pub fn listener_count(&self) -> usize {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|l| l.ready)
            .count()
    }

    /// Sessions and subscriptions counted against the limit: the listeners
    /// plus sessions still initializing.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) fn add_subscription(&self, surface: &str, sink: SubscriptionSink) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let seen = self.store().current().surface_epoch(surface);
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Listener {
                id,
                surface: surface.to_owned(),
                seen,
                ready: true,
                target: Arc::new(Target::Sink(sink)),
            });
        id
    }

    pub(crate) fn remove(&self, id: u64) {
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|l| l.id != id);
    }

    /// Delivers list changes until the store is dropped. Spawn it once.
    pub async fn run_notifier(self: Arc<Self>) {
        let mut changes = self.store().subscribe();
        while changes.changed().await.is_ok() {
            self.notify_changed();
        }
    }

    /// Notifies every listener whose surface's epoch moved past what it was
    /// told, each on its own task with a timeout. Closed ones are dropped.
    pub fn notify_changed(&self) {
        let catalog = self.store().current();
        let mut due = Vec::new();
        {
            let mut listeners = self
                .listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            listeners.retain(Listener::is_live);
            for l in listeners.iter_mut().filter(|l| l.ready) {
                let epoch = catalog.surface_epoch(&l.surface);
                if epoch > l.seen {
                    l.seen = epoch;
                    due.push((l.id, Arc::clone(&l.target)));
                }
            }
        }
        for (id, target) in due {
            tokio::spawn(async move {
                let sent = match &*target {
                    Target::Peer(p) => {
                        tokio::time::timeout(SEND_TIMEOUT, p.notify_tool_list_changed())
                            .await
                            .map(|r| r.is_ok())
                    }
                    Target::Sink(s) => {
                        tokio::time::timeout(SEND_TIMEOUT, s.notify_tool_list_changed())
                            .await
                            .map(|r| r.is_ok())
                    }
                };
                if !matches!(sent, Ok(true)) {
                    tracing::debug!(
                        listener = id,
                        "list_changed not delivered (client slow or gone)"
                    );
                }
            });
        }
    }
}
