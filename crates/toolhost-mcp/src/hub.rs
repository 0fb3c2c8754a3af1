//! Live sessions and `notifications/tools/list_changed`.

use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use toolhost_calls::CallHost;
use toolhost_catalog::Store;
use toolhost_listing::Listing;
use toolhost_pipeline::Pipeline;
use toolhost_runtime::Plugins;

/// How long one notification may take before that client is given up on
/// for this change.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The default limit of live sessions and subscriptions.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// The default limit of live sessions and subscriptions per bearer token.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 256;

pub use toolhost_calls::Owner;

/// Why a session or subscription was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The daemon-wide limit.
    #[error("too many sessions (the limit is {0}); close one and try again")]
    Total(usize),
    /// This token's quota.
    #[error(
        "too many sessions for this token (the limit is {0} per token); close one and try again"
    )]
    PerToken(usize),
}

enum Target {
    /// A session client (2025-11-25 and older).
    Peer(Peer<RoleServer>),
    /// An open `subscriptions/listen` stream (2026-07-28).
    Sink(SubscriptionSink),
    /// A `subscriptions/listen` request admitted before rmcp acknowledges
    /// it: it holds its place until its stream opens or its request ends.
    Reserved,
}

/// A place held for one `subscriptions/listen` request, taken before rmcp
/// sends the acknowledgement (which it does before the handler runs): a
/// stream over the limit is refused without ever being acknowledged. The
/// place is given back when the ticket is dropped, whether the stream
/// opened or not.
#[derive(Debug)]
pub struct ListenTicket {
    id: u64,
    hub: std::sync::Weak<Hub>,
}

impl Drop for ListenTicket {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.remove(self.id);
        }
    }
}

struct Listener {
    id: u64,
    owner: Owner,
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
            Target::Sink(_) | Target::Reserved => true,
        }
    }
}

/// Shared by every session: the call host, what agents are shown, and the
/// listeners to notify.
pub struct Hub {
    /// Where every tool call goes.
    pub(crate) host: Arc<CallHost>,
    /// The catalog, for list changes.
    store: Arc<Store>,
    /// The pipeline, for what each session last listed (its pins).
    pipeline: Arc<Pipeline>,
    /// What agents are shown: listings, instructions, the find tool.
    pub(crate) listing: Arc<Listing>,
    listeners: Mutex<Vec<Listener>>,
    next_id: AtomicU64,
    /// Most live sessions and subscriptions; 0 means no limit.
    max_sessions: std::sync::atomic::AtomicUsize,
    /// Most live sessions and subscriptions of one owner; 0 means no limit.
    max_per_owner: std::sync::atomic::AtomicUsize,
    /// How long a `subscriptions/listen` stream lives without a new one.
    listen_timeout: Mutex<Duration>,
    /// `mcp.server.operation.duration`, by method and how it ended.
    pub(crate) operations: crate::operations::Operations,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("listeners", &self.listener_count())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub over this pipeline, its calls hosted by one [`CallHost`].
    /// Call [`Hub::run_notifier`] to start delivering list changes.
    #[must_use]
    pub fn new(pipeline: Arc<Pipeline>) -> Arc<Self> {
        let store = Arc::clone(pipeline.store());
        let host = Arc::new(CallHost::new(
            Arc::clone(&pipeline) as _,
            Arc::new(toolhost_calls::Tasks::default()),
        ));
        let listing = Listing::new(Arc::clone(&store), Arc::clone(pipeline.pins()));
        host.set_builtin(Arc::clone(&listing) as _);
        Arc::new(Self {
            host,
            store,
            pipeline,
            listing,
            listeners: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            max_sessions: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_SESSIONS),
            max_per_owner: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_SESSIONS_PER_TOKEN),
            listen_timeout: Mutex::new(Duration::from_secs(300)),
            operations: crate::operations::Operations::default(),
        })
    }

    /// A hub over `store` with no plugin running and default limits: for
    /// benches and tests of what agents are shown (a call of a plugin's
    /// tool answers `plugin_unavailable`).
    #[must_use]
    pub fn without_plugins(store: Arc<Store>) -> Arc<Self> {
        let plugins = Arc::new(Plugins::new());
        Self::new(Arc::new(Pipeline::new(
            store,
            plugins as _,
            toolhost_pipeline::Limits::default(),
        )))
    }

    /// The tasks hosted for 2026-07-28 clients: their bounds, and what
    /// the operator sees and cancels.
    #[must_use]
    pub fn tasks(&self) -> &Arc<toolhost_calls::Tasks> {
        self.host.tasks()
    }

    /// Records what `binding` was shown of each tool's contract: a call of
    /// one whose contract is then another is refused once.
    pub(crate) fn listed(
        &self,
        binding: &toolhost_pipeline::Binding,
        shown: Arc<toolhost_pipeline::Shown>,
    ) {
        self.pipeline.pins().listed(binding, shown);
    }

    /// The call host: calls parked on a question, the tasks.
    #[must_use]
    pub fn host(&self) -> &Arc<CallHost> {
        &self.host
    }

    /// Counts a request that ended, for `/metrics`, and ends its span with
    /// how it ended (a transport that answers without rmcp, as the direct
    /// path does, reports here what rmcp's path reports in `Traced`).
    pub fn request_ended(
        &self,
        method: &'static str,
        ended: crate::operations::Ended,
        took: std::time::Duration,
        span: Option<toolhost_telemetry::ServerSpan>,
    ) {
        self.operations.observe(method, ended, took);
        if let Some(s) = span {
            ended.end(s);
        }
    }

    /// `mcp.server.operation.duration`'s families, in the Prometheus text
    /// format, appended to `out`.
    pub fn render_operations(&self, out: &mut String) {
        self.operations.render(out);
    }

    /// What agents are shown: listings, instructions, the find tool.
    #[must_use]
    pub fn listing(&self) -> &Arc<Listing> {
        &self.listing
    }

    /// Sets what agents are shown besides the catalog (at start).
    pub fn set_agent_view(&self, view: toolhost_listing::AgentView) {
        self.listing.set_view(view);
    }

    /// Sets the most live sessions and subscriptions one bearer token may
    /// hold (0: no limit).
    pub fn set_max_sessions_per_token(&self, max: usize) {
        self.max_per_owner.store(max, Ordering::Relaxed);
    }

    /// Sets how long a `subscriptions/listen` stream lives: it ends after
    /// this (the session idle timeout), and the client listens again.
    pub fn set_listen_timeout(&self, timeout: Duration) {
        *self
            .listen_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = timeout;
    }

    pub(crate) fn listen_timeout(&self) -> Duration {
        *self
            .listen_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one more listener of `owner` if both limits allow it. The
    /// check and the insert happen under one lock, so concurrent admissions
    /// cannot overshoot.
    fn admit(
        &self,
        owner: Owner,
        surface: &str,
        ready: bool,
        target: Target,
    ) -> Result<u64, Refused> {
        let max = self.max_sessions.load(Ordering::Relaxed);
        let per_owner = self.max_per_owner.load(Ordering::Relaxed);
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Count only live ones: closed sessions are pruned first.
        listeners.retain(Listener::is_live);
        if max != 0 && listeners.len() >= max {
            return Err(Refused::Total(max));
        }
        if per_owner != 0 && listeners.iter().filter(|l| l.owner == owner).count() >= per_owner {
            return Err(Refused::PerToken(per_owner));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        listeners.push(Listener {
            id,
            owner,
            surface: surface.to_owned(),
            seen: self.store().current().surface_epoch(surface),
            ready,
            target: Arc::new(target),
        });
        Ok(id)
    }

    /// Sets the most live sessions and subscriptions (0: no limit). New
    /// sessions beyond it are refused at `initialize`.
    pub fn set_max_sessions(&self, max: usize) {
        self.max_sessions.store(max, Ordering::Relaxed);
    }

    /// Admits a session at `initialize`, if the limits allow one more:
    /// counted from now, notified once [`Hub::mark_ready`].
    pub(crate) fn admit_peer(
        &self,
        owner: Owner,
        surface: &str,
        peer: Peer<RoleServer>,
    ) -> Result<u64, Refused> {
        self.admit(owner, surface, false, Target::Peer(peer))
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
        &self.store
    }

    /// The catalog store this hub serves from.
    #[must_use]
    pub fn catalog(&self) -> &Arc<Store> {
        &self.store
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
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        listeners.retain(Listener::is_live);
        listeners.len()
    }

    /// Admits a `subscriptions/listen` stream, if the limits allow one
    /// more. It counts like a session.
    pub(crate) fn add_subscription(
        &self,
        owner: Owner,
        surface: &str,
        sink: SubscriptionSink,
    ) -> Result<u64, Refused> {
        self.admit(owner, surface, true, Target::Sink(sink))
    }

    /// Holds a place for a `subscriptions/listen` request of `owner`, if
    /// the limits allow one more.
    pub fn reserve_listen(
        self: &Arc<Self>,
        owner: Owner,
        surface: &str,
    ) -> Result<ListenTicket, Refused> {
        let id = self.admit(owner, surface, false, Target::Reserved)?;
        Ok(ListenTicket {
            id,
            hub: Arc::downgrade(self),
        })
    }

    /// The stream `ticket` held a place for is open: it is told of changes
    /// from now on. The place stays taken until the ticket is dropped.
    pub(crate) fn open_reserved(&self, ticket: &ListenTicket, sink: SubscriptionSink) -> u64 {
        let mut listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = listeners.iter_mut().find(|l| l.id == ticket.id) {
            l.target = Arc::new(Target::Sink(sink));
            l.ready = true;
        }
        ticket.id
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
                    // Not ready, so never due.
                    Target::Reserved => Ok(true),
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

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Owner = [1; 32];
    const BOB: Owner = [2; 32];

    fn hub() -> Arc<Hub> {
        Hub::without_plugins(Arc::new(Store::new("kandev")))
    }

    #[tokio::test]
    async fn the_daemon_wide_limit_refuses_one_more_and_a_dropped_place_frees_one() {
        let hub = hub();
        hub.set_max_sessions(2);
        let first = hub.reserve_listen(ALICE, "chat").expect("one");
        let _second = hub.reserve_listen(BOB, "chat").expect("two");
        assert_eq!(
            hub.reserve_listen(BOB, "chat").err(),
            Some(Refused::Total(2))
        );
        assert_eq!(hub.session_count(), 2);
        drop(first);
        assert_eq!(
            hub.session_count(),
            1,
            "a dropped ticket gives its place back"
        );
        assert!(hub.reserve_listen(BOB, "chat").is_ok());
    }

    #[tokio::test]
    async fn each_token_has_its_own_quota() {
        let hub = hub();
        hub.set_max_sessions_per_token(1);
        let _alice = hub.reserve_listen(ALICE, "chat").expect("alice's one");
        assert_eq!(
            hub.reserve_listen(ALICE, "chat").err(),
            Some(Refused::PerToken(1))
        );
        assert!(
            hub.reserve_listen(BOB, "chat").is_ok(),
            "another token is not held to alice's quota"
        );
    }

    #[tokio::test]
    async fn zero_means_no_limit() {
        let hub = hub();
        hub.set_max_sessions(0);
        hub.set_max_sessions_per_token(0);
        let tickets: Vec<_> = (0..50)
            .map(|_| hub.reserve_listen(ALICE, "chat").expect("no limit"))
            .collect();
        assert_eq!(hub.session_count(), tickets.len());
    }

    #[tokio::test]
    async fn a_reserved_place_counts_against_the_limit_but_is_not_notified() {
        let hub = hub();
        let _ticket = hub.reserve_listen(ALICE, "chat").expect("admitted");
        assert_eq!(hub.session_count(), 1);
        assert_eq!(
            hub.listener_count(),
            0,
            "nothing is told of changes before its stream opens"
        );
    }

    #[test]
    fn a_refusal_says_what_to_do() {
        for r in [Refused::Total(3), Refused::PerToken(2)] {
            let text = r.to_string();
            assert!(
                text.contains("the limit is") && text.contains("close one"),
                "{text}"
            );
        }
    }
}
