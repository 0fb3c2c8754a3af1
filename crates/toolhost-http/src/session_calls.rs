//! Plain `tools/call` on a 2025-era session, answered without rmcp's
//! session machinery.
//!
//! In default mode every request on a session goes through rmcp's session:
//! the session's worker task and its channels, a task for the handler, and
//! an SSE stream for the answer. That costs about twice the CPU per call of
//! the stateless direct path ([`crate::direct`]). Yet most calls owe their
//! client nothing but the result: no progress token, and a session whose
//! client cannot answer questions and set no log level (its
//! [`SessionFacts`], which the handler fills at `notifications/initialized`).
//! Such a call is answered here with one JSON body, which the streamable
//! HTTP transport lets a server send for any POST, through the same
//! pipeline call and result mapping as the stateless direct path.
//!
//! The rule that keeps it safe is the direct path's: **take a strict subset
//! of what rmcp serves, and hand everything else to rmcp untouched.** This
//! layer runs under [`crate::sessions::own_sessions`], so only a request on
//! the caller's own session reaches it, and its activity counts as any
//! other request's. It answers only when the session is still live in
//! rmcp's manager, has settled its facts, and the headers and body are the
//! plain shape the stateless direct path takes.
//!
//! What rmcp's session gives its calls, this layer gives the calls it
//! answers:
//! - `notifications/cancelled` naming one of them cancels it (the
//!   notification still goes on to rmcp, which acknowledges it);
//! - the session's end (`DELETE`, the idle sweep, shutdown) cancels them;
//! - the client's connection going away cancels them.
//!
//! What this module must not do: decide anything about the call (the
//! pipeline's), or answer any request whose session or shape it does not
//! fully know.

use crate::direct::{Caller, Direct, PlainCall, answer_plain, plain_headers, read_body};
use crate::identity::take_binding;
use crate::next::Next;
use crate::sessions::OwnedSession;
use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::response::Response;
use rmcp::model::{NumberOrString, RequestId};
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio_util::sync::CancellationToken;
use toolhost_mcp::SessionFacts;
use toolhost_net::ClientGone;

/// A `notifications/cancelled` is a few dozen bytes; larger bodies are not
/// read for one.
const MAX_CANCEL_BYTES: usize = 4096;

/// A call answered here, as a cancellation names it: its session and its
/// JSON-RPC id.
type CallKey = (Arc<str>, Id);

/// A JSON-RPC id, hashable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Id {
    Number(i64),
    String(Arc<str>),
}

impl From<&RequestId> for Id {
    fn from(id: &RequestId) -> Self {
        match id {
            NumberOrString::Number(n) => Self::Number(*n),
            NumberOrString::String(s) => Self::String(Arc::clone(s)),
        }
    }
}

/// What the layer needs, built once with the router.
#[derive(Debug)]
pub(crate) struct SessionCalls {
    direct: Arc<Direct>,
    /// rmcp's sessions: a session it no longer has is its to refuse.
    manager: Arc<LocalSessionManager>,
    running: RunningCalls,
}

impl SessionCalls {
    pub(crate) fn new(direct: Arc<Direct>, manager: Arc<LocalSessionManager>) -> Self {
        Self {
            direct,
            manager,
            running: RunningCalls::default(),
        }
    }
}

/// The calls answered here and still running, for cancellation.
#[derive(Debug, Default)]
struct RunningCalls {
    running: Mutex<HashMap<CallKey, CancellationToken>>,
}

impl RunningCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CallKey, CancellationToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a call as running under `key`; `None` when a call with the
    /// same id is already running on the session (a client's mistake, which
    /// rmcp is left to answer as it does).
    fn start(&self, key: CallKey, stop: &CancellationToken) -> Option<Running<'_>> {
        let mut running = self.lock();
        if running.contains_key(&key) {
            return None;
        }
        running.insert(key.clone(), stop.clone());
        Some(Running { calls: self, key })
    }

    /// Cancels the call `body` names, when it is a `notifications/cancelled`
    /// for a call of this session answered here.
    fn cancel_named(&self, session: &Arc<str>, body: &[u8]) {
        let Ok(note) = serde_json::from_slice::<Note<'_>>(body) else {
            return;
        };
        let Some(id) = note.params.and_then(|p| p.request_id) else {
            return;
        };
        if note.method != "notifications/cancelled" {
            return;
        }
        let key = (Arc::clone(session), Id::from(&id));
        if let Some(stop) = self.lock().get(&key) {
            stop.cancel();
        }
    }
}

/// A call running here; leaves the running set when dropped.
struct Running<'a> {
    calls: &'a RunningCalls,
    key: CallKey,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.calls.lock().remove(&self.key);
    }
}

/// The middleware: a plain call on the caller's own settled session is
/// answered here; anything else goes on to rmcp as it came.
pub(crate) async fn session_calls(
    calls: &SessionCalls,
    request: Request,
    next: impl Next,
) -> Response {
    let Some(session) = request.extensions().get::<OwnedSession>().cloned() else {
        return next.run(request).await;
    };
    let direct = &calls.direct;
    if !one_session_id(request.headers())
        || !plain_headers(direct, request.method(), request.uri(), request.headers())
    {
        return next.run(request).await;
    }
    let (mut parts, bytes) = match read_body(direct, request).await {
        Ok(read) => read,
        Err(Ok(request)) => return next.run(request).await,
        Err(Err(refused)) => return refused,
    };
    let plain = serde_json::from_slice::<PlainCall<'_>>(&bytes)
        .ok()
        .filter(|c| c.jsonrpc == "2.0" && c.method == "tools/call");
    if let Some(call) = plain
        && answers_here(calls, &session.facts, &session.id).await
    {
        let stop = session.ended.child_token();
        let key = (Arc::clone(&session.id), Id::from(&call.id));
        // The binding is taken (not copied) only once the call is this
        // layer's to answer: a call whose id is already running goes on
        // to rmcp with the gate's verdict where it was.
        if let Some(_running) = calls.running.start(key, &stop)
            && let Some(binding) =
                take_binding(&parts.headers, &mut parts.extensions, &direct.tokens)
        {
            let gone = parts.extensions.get::<ClientGone>().map(|g| g.0.clone());
            let caller = Caller {
                binding,
                owner: session.owner,
                stop: &stop,
                gone: gone.as_ref(),
            };
            return answer_plain(direct, call, caller, &parts.headers).await;
        }
    } else if bytes.len() <= MAX_CANCEL_BYTES {
        calls.running.cancel_named(&session.id, &bytes);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether a plain call on this session is this layer's: the session owes
/// its client nothing but results, and rmcp still has it.
async fn answers_here(calls: &SessionCalls, facts: &SessionFacts, id: &Arc<str>) -> bool {
    facts.only_results() && calls.manager.has_session(id).await.unwrap_or(false)
}

/// Exactly one `Mcp-Session-Id`; more is rmcp's to judge.
fn one_session_id(headers: &HeaderMap) -> bool {
    let mut ids = headers.get_all("mcp-session-id").iter();
    ids.next().is_some() && ids.next().is_none()
}

/// A notification, read only as far as a cancellation needs.
#[derive(Deserialize)]
struct Note<'a> {
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(default)]
    params: Option<CancelParams>,
}

#[derive(Deserialize)]
struct CancelParams {
    #[serde(rename = "requestId", default)]
    request_id: Option<RequestId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancellation_reaches_only_the_call_it_names_on_its_own_session() {
        let calls = RunningCalls::default();
        let (a, b) = (Arc::<str>::from("a"), Arc::<str>::from("b"));
        let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
        let _ra = calls.start((Arc::clone(&a), Id::Number(5)), &stop_a);
        let _rb = calls.start((Arc::clone(&b), Id::Number(5)), &stop_b);
        assert!(
            calls
                .start((Arc::clone(&a), Id::Number(5)), &CancellationToken::new())
                .is_none(),
            "an id already running on the session"
        );
        let note = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"r"}}}}"#
            )
        };
        calls.cancel_named(&a, note("\"5\"").as_bytes());
        calls.cancel_named(&a, note("6").as_bytes());
        calls.cancel_named(
            &a,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":5}}"#,
        );
        assert!(!stop_a.is_cancelled() && !stop_b.is_cancelled());
        calls.cancel_named(&a, note("5").as_bytes());
        assert!(stop_a.is_cancelled(), "the named call");
        assert!(!stop_b.is_cancelled(), "the same id on another session");
        drop(_ra);
        assert!(
            calls
                .start((a, Id::Number(5)), &CancellationToken::new())
                .is_some(),
            "an ended call's id is free again"
        );
    }

    #[test]
    fn only_one_session_id_is_read() {
        let mut h = HeaderMap::new();
        assert!(!one_session_id(&h));
        h.append("mcp-session-id", "a".parse().unwrap());
        assert!(one_session_id(&h));
        h.append("mcp-session-id", "b".parse().unwrap());
        assert!(!one_session_id(&h));
    }
}
