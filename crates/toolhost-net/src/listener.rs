//! The HTTP accept loop: connection-level limits that hold before any
//! request is parsed, so a peer without a token cannot exhaust the daemon.
//!
//! `axum::serve` has none of these, which is why it is not used. The cap,
//! the header and idle timeouts and the handling of accept errors are the
//! daemon's one set of connection limits ([`crate::limits`]); what only an
//! HTTP/1 listener can do is here:
//!
//! - **Idle means no request in progress.** A connection is busy from a
//!   request's headers until its response body is done, and a busy one is
//!   never evicted or timed out.
//! - **A body timeout.** A request body must arrive whole within
//!   `body_timeout`, and no larger than `max_body_bytes` (read here, before
//!   MCP sees it).
//! - **Disconnect cancels.** Every request carries a [`ClientGone`] token,
//!   cancelled when its connection or its response stream is dropped, so a
//!   tool call whose client left is cancelled and frees its slot at once.

use crate::limits::{AcceptErrors, Conn, ConnectionLimits, Registry};
use axum::body::Body;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Set when a large request body has been read since the last
/// [`take_large_request`]: the daemon then gives freed memory back to the
/// system (glibc keeps what a burst of big requests freed otherwise).
static LARGE_REQUEST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Bodies at least this large count as large.
const LARGE_BODY: usize = 256 * 1024;

/// Whether a large request body was read since the last call.
pub fn take_large_request() -> bool {
    LARGE_REQUEST.swap(false, Ordering::Relaxed)
}

/// Requests read so far, by every listener: how the daemon tells a quiet
/// moment after a load (when memory a load left behind can go back to the
/// system) from a load still going on.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Requests read so far (it only grows).
pub fn requests_read() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Cancelled when the client of a request goes away: its connection closed,
/// or its response stream was dropped. Found in the request's extensions.
#[derive(Debug, Clone, Default)]
pub struct ClientGone(pub CancellationToken);

/// Marks a request in progress for as long as it lives (the service call,
/// then the response body), and tells the call when the client is gone.
struct InProgress {
    registry: Arc<Registry>,
    conn: Arc<Conn>,
    gone: CancellationToken,
}

impl InProgress {
    fn begin(registry: &Arc<Registry>, conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::SeqCst);
        conn.started.fetch_add(1, Ordering::SeqCst);
        Self {
            registry: Arc::clone(registry),
            conn: Arc::clone(conn),
            gone: CancellationToken::new(),
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.conn
            .idle_since_ms
            .store(self.registry.now_ms(), Ordering::SeqCst);
        self.conn.busy.fetch_sub(1, Ordering::SeqCst);
        // A finished call ignores this; one still running is cancelled.
        self.gone.cancel();
    }
}

/// A response body that holds `guard` until the body is done or dropped:
/// how a request stays "in progress" while its answer streams.
pub struct Guarded<G> {
    inner: Body,
    _guard: G,
}

impl<G> Guarded<G> {
    /// `body`, holding `guard` until it is done or dropped.
    pub fn new(body: Body, guard: G) -> Self {
        Self {
            inner: body,
            _guard: guard,
        }
    }
}

impl<G: Unpin> http_body::Body for Guarded<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn plain(status: http::StatusCode, text: &'static str) -> http::Response<Body> {
    let mut r = http::Response::new(Body::from(text));
    *r.status_mut() = status;
    r
}

/// What the listener serves: a service from a request (its body already
/// read whole) to a response, which never fails. It is cloned for every
/// request, so a clone must be cheap: an `axum::Router` is one, and so is
/// `toolhost-http`'s app, which sends `/mcp` past axum's router.
pub trait App:
    tower::Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> App for S where
    S: tower::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// One request: read the body within its limits, then the app.
async fn handle(
    app: impl App,
    limits: ConnectionLimits,
    in_progress: InProgress,
    request: http::Request<Incoming>,
) -> http::Response<Body> {
    let (mut parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, limits.max_body_bytes);
    let bytes = match tokio::time::timeout(limits.body_timeout, limited.collect()).await {
        Err(_) => {
            return plain(
                http::StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time\n",
            );
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return plain(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than the limit\n",
            );
        }
        Ok(Err(_)) => {
            return plain(
                http::StatusCode::BAD_REQUEST,
                "the request body broke off\n",
            );
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    if bytes.len() >= LARGE_BODY {
        LARGE_REQUEST.store(true, Ordering::Relaxed);
    }
    parts
        .extensions
        .insert(ClientGone(in_progress.gone.clone()));
    let request = http::Request::from_parts(parts, Body::from(bytes));
    let Ok(response) = app.oneshot(request).await;
    response.map(|inner| {
        Body::new(Guarded {
            inner,
            _guard: in_progress,
        })
    })
}

/// When a connection with no request in progress is due to close.
fn idle_deadline(registry: &Registry, conn: &Conn, limits: &ConnectionLimits) -> Instant {
    let since = Duration::from_millis(conn.idle_since_ms.load(Ordering::SeqCst));
    let allowance = if conn.started.load(Ordering::SeqCst) == 0 {
        limits.header_timeout
    } else {
        limits.idle_timeout
    };
    registry.epoch + since + allowance
}

async fn serve_connection(
    tcp: tokio::net::TcpStream,
    app: impl App,
    limits: ConnectionLimits,
    registry: Arc<Registry>,
    id: u64,
    conn: Arc<Conn>,
    shutdown: CancellationToken,
) {
    // Small JSON-RPC answers must not wait for Nagle's algorithm (a
    // streamed answer is several small writes; without this, a delayed ACK
    // costs ~40 ms per call).
    let _ = tcp.set_nodelay(true);
    let service = {
        let (registry, conn) = (Arc::clone(&registry), Arc::clone(&conn));
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let in_progress = InProgress::begin(&registry, &conn);
            let app = app.clone();
            async move { Ok::<_, Infallible>(handle(app, limits, in_progress, request).await) }
        })
    };
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(connection);
    loop {
        let deadline = idle_deadline(&registry, &conn, &limits);
        tokio::select! {
            _ = connection.as_mut() => break,
            // Eviction or shutdown: `evict` is a child of the shutdown token.
            () = conn.evict.cancelled() => {
                if shutdown.is_cancelled() {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await;
                }
                // Evicted, dropping the connection closes it; it had
                // nothing in progress.
                break;
            }
            () = tokio::time::sleep_until(deadline) => {
                // A request may have started or ended meanwhile: re-read.
                if conn.busy.load(Ordering::SeqCst) == 0
                    && Instant::now() >= idle_deadline(&registry, &conn, &limits)
                {
                    break;
                }
                if conn.busy.load(Ordering::SeqCst) > 0 {
                    // Busy: look again once the current request could
                    // have gone idle for a whole timeout.
                    tokio::select! {
                        _ = connection.as_mut() => break,
                        () = conn.evict.cancelled() => {
                            if shutdown.is_cancelled() {
                                connection.as_mut().graceful_shutdown();
                                let _ = tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await;
                            }
                            break;
                        }
                        () = tokio::time::sleep(limits.idle_timeout.min(limits.header_timeout)) => {}
                    }
                }
            }
        }
    }
    registry.remove(id);
}

/// Serves `app` on `listener` with `limits` until `shutdown`, then lets
/// requests in progress finish (up to 5 s).
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    app: impl App,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let registry = Registry::under(limits.max_connections, &shutdown);
    let mut refused: u64 = 0;
    let mut accept_errors = AcceptErrors::default();
    loop {
        // Evicted connections hold their descriptors until their tasks
        // close them: past the cap and those in flight, a newcomer waits
        // in the backlog rather than taking one more.
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            a = async {
                registry.room().await;
                listener.accept().await
            } => a,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: the connection stays in the backlog.
                accept_errors.pause(&e, registry.len(), "mcp").await;
                continue;
            }
        };
        let Some((id, conn)) = registry.admit() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(
                    limit = registry.max,
                    refused,
                    "connection limit reached and every connection is busy; refusing connections"
                );
            }
            drop(tcp);
            continue;
        };
        tokio::spawn(serve_connection(
            tcp,
            app.clone(),
            limits,
            Arc::clone(&registry),
            id,
            conn,
            shutdown.clone(),
        ));
    }
    // Wait for connections to finish their graceful shutdown.
    let deadline = Instant::now() + Duration::from_secs(6);
    while registry.len() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(max: usize) -> Arc<Registry> {
        Registry::new(max)
    }

    fn admit(r: &Registry) -> Arc<Conn> {
        match r.admit() {
            Some((_, c)) => c,
            None => panic!("no room for a connection"),
        }
    }

    #[test]
    fn when_every_connection_is_busy_the_newcomer_is_refused() {
        let r = registry(1);
        let a = admit(&r);
        let _busy = InProgress::begin(&r, &a);
        assert!(r.admit().is_none());
        assert!(!a.evict.is_cancelled());
    }

    #[test]
    fn shutting_down_stops_every_connection_through_its_own_token() {
        let shutdown = CancellationToken::new();
        let r = Registry::under(2, &shutdown);
        let (a, b) = (admit(&r), admit(&r));
        assert!(!a.evict.is_cancelled() && !b.evict.is_cancelled());
        shutdown.cancel();
        assert!(a.evict.is_cancelled() && b.evict.is_cancelled());
    }

    #[test]
    fn evicting_one_connection_leaves_the_others_and_the_listener_running() {
        let shutdown = CancellationToken::new();
        let r = Registry::under(1, &shutdown);
        let a = admit(&r);
        let b = admit(&r);
        assert!(a.evict.is_cancelled());
        assert!(!b.evict.is_cancelled() && !shutdown.is_cancelled());
    }

    #[test]
    fn a_request_ending_cancels_its_client_gone_token() {
        let r = registry(1);
        let a = admit(&r);
        let p = InProgress::begin(&r, &a);
        let gone = p.gone.clone();
        assert_eq!(a.busy.load(Ordering::SeqCst), 1);
        drop(p);
        assert!(gone.is_cancelled());
        assert_eq!(a.busy.load(Ordering::SeqCst), 0);
    }
}
