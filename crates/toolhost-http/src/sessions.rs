//! Who owns each streamable-HTTP session, and when it has gone idle.
//!
//! rmcp identifies a session by its `mcp-session-id` alone, so without this
//! any valid token could call on, or delete, another token's session. Here
//! a session belongs to the token that created it: a request on it with any
//! other token gets the same 404 as an unknown session, so a foreign id
//! cannot even be confirmed to exist.
//!
//! Idleness is measured here too, not by rmcp: rmcp's keep-alive timer is
//! reset by every event, including the `tools/list_changed` notifications
//! toolhost sends, so abandoned sessions never expired while the catalog
//! changed. Only requests from the client count as activity (a standalone
//! GET stream does not), and a session with a request in progress is never
//! idle, so a long tool call is not cut off.

use crate::identity::request_owner;
use crate::next::Next;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolhost_calls::Owner;
use toolhost_mcp::SessionFacts;

const SESSION_HEADER: &str = "mcp-session-id";

#[derive(Debug)]
struct Session {
    owner: Owner,
    last_request: Instant,
    in_flight: usize,
    /// What the session settled at its start (filled by the handler).
    facts: Arc<SessionFacts>,
    /// Cancelled when the session ends: calls answered outside rmcp stop
    /// with it, as rmcp's own do.
    ended: CancellationToken,
}

/// The caller's own live session, as a request on it carries it (an
/// extension) to the layers under [`own_sessions`].
#[derive(Debug, Clone)]
pub(crate) struct OwnedSession {
    pub(crate) id: Arc<str>,
    pub(crate) owner: Owner,
    pub(crate) facts: Arc<SessionFacts>,
    pub(crate) ended: CancellationToken,
}

/// Session owners and activity, shared by the middleware and the sweeper.
#[derive(Debug)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
    idle_timeout: Duration,
    /// The service's shutdown, parent of every session's end.
    shutdown: CancellationToken,
}

/// Keeps a request counted as in progress on its session until dropped.
struct Activity {
    sessions: Arc<Sessions>,
    id: String,
}

impl Drop for Activity {
    fn drop(&mut self) {
        let mut map = self
            .sessions
            .by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = map.get_mut(&self.id) {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.last_request = Instant::now();
        }
    }
}

enum Verdict {
    /// Not one of ours (unknown, or already closed): rmcp answers it.
    Unknown,
    /// Another token's session.
    Foreign,
    /// The caller's own.
    Own(OwnedSession),
}

impl Sessions {
    pub(crate) fn new(idle_timeout: Duration, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            by_id: Mutex::new(HashMap::new()),
            idle_timeout,
            shutdown,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn verdict(&self, id: &str, owner: &Owner) -> Verdict {
        match self.lock().get(id) {
            None => Verdict::Unknown,
            Some(s) if s.owner == *owner => Verdict::Own(OwnedSession {
                id: Arc::from(id),
                owner: s.owner,
                facts: Arc::clone(&s.facts),
                ended: s.ended.clone(),
            }),
            Some(_) => Verdict::Foreign,
        }
    }

    fn begin(self: &Arc<Self>, id: &str) -> Activity {
        if let Some(s) = self.lock().get_mut(id) {
            s.in_flight += 1;
            s.last_request = Instant::now();
        }
        Activity {
            sessions: Arc::clone(self),
            id: id.to_owned(),
        }
    }

    fn created(&self, id: &str, owner: Owner) {
        self.lock().insert(
            id.to_owned(),
            Session {
                owner,
                last_request: Instant::now(),
                in_flight: 0,
                facts: SessionFacts::new(),
                ended: self.shutdown.child_token(),
            },
        );
    }

    fn forget(&self, id: &str) {
        if let Some(s) = self.lock().remove(id) {
            s.ended.cancel();
        }
    }

    /// Sessions with no request in progress and none for the idle timeout.
    fn idle(&self, now: Instant) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, s)| {
                s.in_flight == 0 && now.duration_since(s.last_request) >= self.idle_timeout
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// How many sessions are tracked.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The same answer rmcp gives for an unknown session.
fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// Middleware on `/mcp`, after the token gate: refuses foreign sessions,
/// records new ones, counts activity.
pub(crate) async fn own_sessions(
    sessions: &Arc<Sessions>,
    mut request: Request,
    next: impl Next,
) -> Response {
    let owner = request_owner(request.headers(), request.extensions());
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(id) = session else {
        let response = next.run(request).await;
        if let Some(created) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            sessions.created(created, owner);
        }
        return response;
    };
    match sessions.verdict(&id, &owner) {
        Verdict::Foreign => return not_found(),
        Verdict::Unknown => return next.run(request).await,
        Verdict::Own(owned) => {
            // The handler fills the facts; the direct path reads them.
            request.extensions_mut().insert(Arc::clone(&owned.facts));
            request.extensions_mut().insert(owned);
        }
    }
    let method = request.method().clone();
    // A standalone GET stream is the server's channel, not client activity.
    let activity = (method != Method::GET).then(|| sessions.begin(&id));
    let mut response = next.run(request).await;
    if method == Method::DELETE && response.status().is_success() {
        sessions.forget(&id);
        // rmcp answers a session's end with 202 Accepted; the end is done,
        // not queued, and clients (the official Python SDK among them)
        // take 200 or 204 as success and log anything else as a failure.
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Body::empty();
            let headers = response.headers_mut();
            headers.remove(axum::http::header::CONTENT_LENGTH);
            headers.remove(axum::http::header::CONTENT_TYPE);
        }
    }
    match activity {
        None => response,
        Some(activity) => {
            response.map(|body| Body::new(toolhost_net::Guarded::new(body, activity)))
        }
    }
}

/// Closes sessions that have been idle for the timeout, and forgets the
/// ones rmcp closed itself. Runs until `stop`.
pub(crate) async fn sweep(
    sessions: Arc<Sessions>,
    manager: Arc<LocalSessionManager>,
    stop: CancellationToken,
) {
    let period =
        (sessions.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        for id in sessions.idle(Instant::now()) {
            sessions.forget(&id);
            let _ = manager.close_session(&Arc::from(id.as_str())).await;
            tracing::debug!("closed an idle MCP session");
        }
        for id in sessions.ids() {
            let live = manager
                .has_session(&Arc::from(id.as_str()))
                .await
                .unwrap_or(false);
            if !live {
                sessions.forget(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_belongs_to_the_token_that_created_it() {
        let s = Sessions::new(Duration::from_secs(60), CancellationToken::new());
        s.created("a", [1; 32]);
        assert!(matches!(s.verdict("a", &[1; 32]), Verdict::Own(_)));
        assert!(matches!(s.verdict("a", &[2; 32]), Verdict::Foreign));
        assert!(matches!(s.verdict("b", &[1; 32]), Verdict::Unknown));
    }

    #[test]
    fn a_request_in_progress_keeps_its_session_from_idling_out() {
        let s = Sessions::new(Duration::ZERO, CancellationToken::new());
        s.created("a", [1; 32]);
        let activity = s.begin("a");
        assert!(s.idle(Instant::now()).is_empty());
        drop(activity);
        assert_eq!(s.idle(Instant::now()), vec!["a".to_owned()]);
        let Verdict::Own(owned) = s.verdict("a", &[1; 32]) else {
            panic!("the session is its creator's");
        };
        s.forget("a");
        assert_eq!(s.len(), 0);
        assert!(owned.ended.is_cancelled(), "its calls stop with it");
    }
}
