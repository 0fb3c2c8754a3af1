//! `subscriptions/listen` streams admitted before they are acknowledged.
//!
//! rmcp acknowledges a listen request (`notifications/subscriptions/
//! acknowledged`) before it calls the handler, so a limit checked in the
//! handler refuses a stream the client was already told is open. This
//! middleware looks at each POST first: a `subscriptions/listen` request
//! takes its place under `max_sessions` and the per-token quota here
//! ([`toolhost_mcp::ListenTicket`], carried to the handler in the request's
//! extensions), or is answered with a JSON-RPC error and never reaches
//! rmcp. Places are taken under one lock, so no interleaving of requests
//! gets past the limit.
//!
//! A request whose `Mcp-Method` header names another method (every
//! 2026-07-28 request carries one) is passed on without its body being
//! read. A listen request under a false header is still counted, by the
//! handler, after the acknowledgement (rmcp checks the header against the
//! body only when the protocol-version header is sent).
//!
//! What this module must not do: answer anything but an over-limit listen
//! request, or change a request it passes on.

use crate::identity::{request_binding, request_owner};
use crate::next::Next;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use toolhost_calls::TokenTable;
use toolhost_mcp::Hub;

const LISTEN: &[u8] = b"subscriptions/listen";

/// What the middleware needs: the hub that counts places, the tokens
/// that name a request's surface, and the body limit rmcp applies too.
pub(crate) struct ListenAdmission {
    pub(crate) hub: Arc<Hub>,
    pub(crate) tokens: Arc<TokenTable>,
    pub(crate) max_body_bytes: usize,
}

/// The JSON-RPC id of `body` if it is a `subscriptions/listen` request.
fn listen_request_id(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        method: Option<String>,
        id: Option<serde_json::Value>,
    }
    // Most requests are not listen requests: a scan, not a parse.
    memchr::memmem::find(body, LISTEN)?;
    let e: Envelope = serde_json::from_slice(body).ok()?;
    (e.method.as_deref() == Some("subscriptions/listen")).then(|| e.id.unwrap_or_default())
}

pub(crate) async fn admit_listens(
    admission: &ListenAdmission,
    request: Request,
    next: impl Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    // A request that names another method in `Mcp-Method` is passed on
    // unread. A listen request in disguise gets no further than the
    // handler's own check: refused there, after rmcp's acknowledgement.
    if let Some(declared) = request.headers().get("mcp-method")
        && declared.as_bytes() != LISTEN
    {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, admission.max_body_bytes).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is over {} bytes, or was cut off",
                admission.max_body_bytes
            ),
        )
            .into_response();
    };
    if let Some(id) = listen_request_id(&bytes)
        && let Some(binding) = request_binding(&parts.headers, &parts.extensions, &admission.tokens)
    {
        let owner = request_owner(&parts.headers, &parts.extensions);
        match admission.hub.reserve_listen(owner, &binding.surface) {
            Ok(ticket) => {
                parts.extensions.insert(Arc::new(ticket));
            }
            Err(refused) => {
                let error = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": { "code": -32600, "message": refused.to_string() },
                });
                return (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    error.to_string(),
                )
                    .into_response();
            }
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listen_request_is_recognized() {
        let listen = br#"{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{}}"#;
        assert_eq!(listen_request_id(listen), Some(serde_json::json!(7)));
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"q":"subscriptions/listen"}}}"#;
        assert_eq!(listen_request_id(call), None);
        assert_eq!(listen_request_id(b"subscriptions/listen"), None);
    }
}
