//! Connection limits, for every listener of the daemon: the MCP HTTP
//! listener (the listener module) and the admin API's Unix socket and TCP
//! port (which hand [`limited`] to tonic).
//!
//! The rules are the same everywhere, so a peer without credentials cannot
//! exhaust the daemon through any door:
//!
//! - **A cap on open connections.** At the cap, the connection idle
//!   longest (no request in progress and, for a byte stream, nothing read
//!   for longest) is closed to make room, so a flood of idle connections
//!   never locks a fresh client out. When every connection is busy, the
//!   newcomer is closed at once.
//! - **A header timeout.** A new connection must say something within
//!   `header_timeout`: its first request's headers (HTTP/1), or the first
//!   [`PREFACE_BYTES`] bytes (the HTTP/2 preface and settings), however
//!   slowly they dribble in.
//! - **An idle timeout.** A connection with nothing going on for
//!   `idle_timeout` is closed. The admin server pings its peers more often
//!   than that, so a live client answers and stays.
//! - **Accept errors** (`EMFILE` under descriptor pressure) pause the
//!   accept loop briefly instead of spinning, and are logged at most once a
//!   second ([`AcceptErrors`]).
//!
//! HTTP/1 also bounds each request's body (size and time); that is the
//! listener's, since only it sees requests.

use futures::Stream;
use futures::StreamExt as _;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Bytes a byte-stream connection must send within the header timeout.
pub const PREFACE_BYTES: u64 = 64;

/// Connection-level limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// A new connection must complete its first request's headers (or
    /// send [`PREFACE_BYTES`]) within this.
    pub header_timeout: Duration,
    /// A connection with nothing in progress is closed after this.
    pub idle_timeout: Duration,
    /// HTTP/1 only: a request body must arrive whole within this.
    pub body_timeout: Duration,
    /// HTTP/1 only: the largest request body; larger ones get 413 before
    /// MCP reads them.
    pub max_body_bytes: usize,
}

impl Default for ConnectionLimits {
    /// The MCP listener's.
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 2 * 1024 * 1024,
        }
    }
}

impl ConnectionLimits {
    /// An admin listener's: operators and backends open few connections.
    #[must_use]
    pub fn admin() -> Self {
        Self {
            max_connections: 64,
            ..Self::default()
        }
    }
}

/// One open connection, as the cap and the timeouts see it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Requests in progress (HTTP/1: from headers parsed to response body
    /// dropped; byte streams have none).
    pub(crate) busy: AtomicUsize,
    /// Requests started so far.
    pub(crate) started: AtomicU64,
    /// When the connection last went idle (or last read a byte), in ms
    /// since the registry's epoch.
    pub(crate) idle_since_ms: AtomicU64,
    /// Closes the connection at once (eviction at the cap); a child of the
    /// listener's shutdown token, so one token per connection says "stop"
    /// and a connection's task, woken at every read and write, polls its
    /// own uncontended token rather than one shared by every connection.
    pub(crate) evict: CancellationToken,
    /// Set with `evict`, and read without its lock by the admission.
    evicted: std::sync::atomic::AtomicBool,
}

/// How many evicted connections may still be closing on top of the cap.
///
/// An evicted connection keeps its descriptor until its task runs and
/// drops it; under a flood on a busy machine the accept loop can outrun
/// those tasks. Counting them until they close, and letting at most this
/// many be in flight, bounds a listener's descriptors at the cap plus
/// this, inside the reserve the daemon keeps for plugin restarts
/// (`[limits] reserved_fds`, 128 by default).
pub(crate) const EVICTIONS_IN_FLIGHT: usize = 8;

/// The open connections of one listener: every connection whose
/// descriptor is open, evicted ones included until they close.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(crate) epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    pub(crate) max: usize,
    /// Told each time a connection closes (a permit is kept when no one
    /// waits, so no close is missed).
    closed: tokio::sync::Notify,
    /// Each connection's `evict` token is a child of this one.
    shutdown: CancellationToken,
}

impl Registry {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Self::under(max, &CancellationToken::new())
    }

    /// A registry whose connections' `evict` tokens are cancelled with
    /// `shutdown` too.
    pub(crate) fn under(max: usize, shutdown: &CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            next_id: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
            max: max.max(1),
            closed: tokio::sync::Notify::new(),
            shutdown: shutdown.clone(),
        })
    }

    /// Waits until a newcomer would not take the listener past its cap and
    /// the evictions in flight ([`EVICTIONS_IN_FLIGHT`]). An accept loop
    /// calls it before `accept`, so that the connection waits in the
    /// backlog (holding no descriptor of the daemon's) rather than being
    /// refused while evicted connections close.
    pub(crate) async fn room(&self) {
        while self.len() >= self.max + EVICTIONS_IN_FLIGHT {
            self.closed.notified().await;
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Admits a connection, evicting the longest-idle one at the cap. An
    /// evicted connection counts until it has closed (its task removes
    /// it). `None`: every live connection is busy, or
    /// [`EVICTIONS_IN_FLIGHT`] evicted ones are still closing, so the
    /// newcomer is refused.
    pub(crate) fn admit(&self) -> Option<(u64, Arc<Conn>)> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let closing = open
            .values()
            .filter(|c| c.evicted.load(Ordering::SeqCst))
            .count();
        if open.len() - closing >= self.max {
            if closing >= EVICTIONS_IN_FLIGHT {
                return None;
            }
            let victim = open
                .values()
                .filter(|c| c.busy.load(Ordering::SeqCst) == 0 && !c.evicted.load(Ordering::SeqCst))
                .min_by_key(|c| c.idle_since_ms.load(Ordering::SeqCst))?;
            victim.evicted.store(true, Ordering::SeqCst);
            victim.evict.cancel();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            evict: self.shutdown.child_token(),
            evicted: std::sync::atomic::AtomicBool::new(false),
        });
        open.insert(id, Arc::clone(&conn));
        Some((id, conn))
    }

    pub(crate) fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.closed.notify_one();
    }

    pub(crate) fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// An accept loop's failures: each one pauses the loop (the connection
/// stays in the backlog while descriptors are short), and a warning goes
/// out at most once a second.
#[derive(Debug, Default)]
pub(crate) struct AcceptErrors {
    failed: u64,
    last_warning: Option<Instant>,
}

impl AcceptErrors {
    /// Counts `error`, warns if due, and pauses.
    pub(crate) async fn pause(&mut self, error: &std::io::Error, open: usize, listener: &str) {
        self.failed += 1;
        if self
            .last_warning
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(%error, open, failed_accepts = self.failed, listener, "cannot accept connections; pausing");
            self.last_warning = Some(Instant::now());
            self.failed = 0;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One admitted byte-stream connection (an admin listener's): its place in
/// the registry, and the silence timer.
pub struct Limited<T> {
    inner: T,
    registry: Arc<Registry>,
    id: u64,
    conn: Arc<Conn>,
    evicted: Pin<Box<WaitForCancellationFutureOwned>>,
    read: u64,
    timer: Pin<Box<Sleep>>,
    idle_timeout: Duration,
}

impl<T> std::fmt::Debug for Limited<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limited")
            .field("id", &self.id)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for Limited<T> {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Limited<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.evicted.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed for a newer connection at the connection limit",
            )));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                let had_preface = self.read >= PREFACE_BYTES;
                self.read = self.read.saturating_add(n);
                // Until the preface is in, the deadline does not move.
                if n > 0 && (had_preface || self.read >= PREFACE_BYTES) {
                    let next = Instant::now() + self.idle_timeout;
                    self.timer.as_mut().reset(next);
                    let now = self.registry.now_ms();
                    self.conn.idle_since_ms.store(now, Ordering::SeqCst);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connection silent too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Limited<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Limited<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Admits byte-stream connections from `incoming` within `limits` (for
/// tonic's `serve_with_incoming`). `listener` names it in log lines.
pub fn limited<T, E>(
    incoming: impl Stream<Item = Result<T, E>>,
    limits: ConnectionLimits,
    listener: &'static str,
) -> impl Stream<Item = Result<Limited<T>, E>>
where
    E: std::fmt::Display,
{
    let registry = Registry::new(limits.max_connections);
    let errors = Arc::new(tokio::sync::Mutex::new(AcceptErrors::default()));
    let at_cap = Arc::new(AtomicU64::new(0));
    let for_errors = Arc::clone(&registry);
    incoming
        .then(move |accepted| {
            let (errors, registry) = (Arc::clone(&errors), Arc::clone(&for_errors));
            async move {
                // tonic retries a failed accept at once; under descriptor
                // pressure (EMFILE) that would spin.
                if let Err(e) = &accepted {
                    let e = std::io::Error::other(e.to_string());
                    errors.lock().await.pause(&e, registry.len(), listener).await;
                }
                accepted
            }
        })
        .filter_map(move |accepted| {
            let admitted = match accepted {
                Err(e) => Some(Err(e)),
                Ok(io) => match registry.admit() {
                    Some((id, conn)) => Some(Ok(Limited {
                        inner: io,
                        registry: Arc::clone(&registry),
                        id,
                        evicted: Box::pin(conn.evict.clone().cancelled_owned()),
                        conn,
                        read: 0,
                        timer: Box::pin(tokio::time::sleep(limits.header_timeout)),
                        idle_timeout: limits.idle_timeout,
                    })),
                    None => {
                        let refused = at_cap.fetch_add(1, Ordering::Relaxed) + 1;
                        if refused.is_power_of_two() {
                            tracing::warn!(
                                limit = limits.max_connections,
                                refused,
                                listener,
                                "connection limit reached and every connection is busy; refusing connections"
                            );
                        }
                        None
                    }
                },
            };
            futures::future::ready(admitted)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(r: &Registry) -> Arc<Conn> {
        match r.admit() {
            Some((_, c)) => c,
            None => panic!("no room for a connection"),
        }
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_makes_room() {
        let r = Registry::new(2);
        let a = admit(&r);
        let b = admit(&r);
        a.idle_since_ms.store(5, Ordering::SeqCst);
        b.idle_since_ms.store(1, Ordering::SeqCst);
        let _c = admit(&r);
        assert!(b.evict.is_cancelled(), "the longest idle goes first");
        assert!(!a.evict.is_cancelled());
        assert_eq!(r.len(), 3, "the evicted one counts until it closes");
    }

    #[test]
    fn evicted_connections_still_closing_are_bounded() {
        let r = Registry::new(1);
        let mut evicted = Vec::new();
        let first = r.admit().expect("room");
        evicted.push(first);
        for _ in 0..EVICTIONS_IN_FLIGHT {
            evicted.push(r.admit().expect("evicts the idle one"));
        }
        assert_eq!(r.len(), 1 + EVICTIONS_IN_FLIGHT);
        assert!(
            r.admit().is_none(),
            "no more descriptors while {EVICTIONS_IN_FLIGHT} evicted ones are closing"
        );
        let (id, _) = evicted.remove(0);
        r.remove(id);
        assert!(r.admit().is_some(), "a close makes room again");
    }

    #[tokio::test]
    async fn an_accept_loop_waits_for_room_while_evictions_close() {
        let r = Registry::new(1);
        let mut ids = Vec::new();
        for _ in 0..=EVICTIONS_IN_FLIGHT {
            ids.push(r.admit().expect("admitted").0);
        }
        let waiting = {
            let r = Arc::clone(&r);
            tokio::spawn(async move { r.room().await })
        };
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "no room at the cap plus the evictions"
        );
        r.remove(ids[0]);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("a close makes room")
            .expect("joined");
    }

    #[test]
    fn when_every_connection_is_busy_the_newcomer_is_refused() {
        let r = Registry::new(1);
        let a = admit(&r);
        a.busy.fetch_add(1, Ordering::SeqCst);
        assert!(r.admit().is_none());
        assert!(!a.evict.is_cancelled());
    }

    #[tokio::test]
    async fn a_byte_stream_evicted_at_the_cap_fails_its_next_read() {
        use tokio::io::AsyncReadExt as _;
        let (a, _a_peer) = tokio::io::duplex(64);
        let (b, _b_peer) = tokio::io::duplex(64);
        let incoming = futures::stream::iter([Ok::<_, std::io::Error>(a), Ok(b)]);
        let limits = ConnectionLimits {
            max_connections: 1,
            ..ConnectionLimits::admin()
        };
        let admitted: Vec<_> = limited(incoming, limits, "test").collect().await;
        let mut conns: Vec<_> = admitted.into_iter().filter_map(Result::ok).collect();
        assert_eq!(conns.len(), 2, "the newcomer took the idle one's place");
        let mut buf = [0u8; 8];
        let first = conns[0].read(&mut buf).await;
        assert_eq!(
            first.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionAborted)
        );
    }

    #[tokio::test]
    async fn a_silent_byte_stream_is_closed_at_the_header_timeout() {
        use tokio::io::AsyncReadExt as _;
        let (a, _peer) = tokio::io::duplex(64);
        let incoming = futures::stream::iter([Ok::<_, std::io::Error>(a)]);
        let limits = ConnectionLimits {
            header_timeout: Duration::from_millis(100),
            ..ConnectionLimits::admin()
        };
        let mut conns: Vec<_> = limited(incoming, limits, "test")
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        let mut buf = [0u8; 8];
        let read = conns[0].read(&mut buf).await;
        assert_eq!(
            read.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::TimedOut)
        );
    }
}
