//! The token gate: nothing reaches `/mcp` or `/metrics` without a token
//! that binds it, a static one from the table or an access token the
//! `[http.oauth]` side accepts. What it found goes on in the request's
//! extensions (`toolhost_mcp::Authorized`), which no client can set.

use crate::identity::bearer_token;
use crate::next::Next;
use crate::oauth::OAuthGate;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use toolhost_calls::TokenTable;
use toolhost_mcp::{Authorized, Hub};

/// What the gate knows: the static tokens, and the OAuth side if any.
pub(crate) struct Gate {
    pub(crate) tokens: Arc<TokenTable>,
    pub(crate) oauth: Option<Arc<OAuthGate>>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) max_body_bytes: usize,
}

/// The token gate: `/mcp`'s outermost layer, and `/metrics`' and unknown
/// paths' only one.
pub(crate) async fn require_token(gate: &Gate, mut request: Request, next: impl Next) -> Response {
    let token = bearer_token(request.headers());
    if let Some((binding, owner)) = token.and_then(|t| {
        let owner = toolhost_calls::callers::digest(t);
        gate.tokens.resolve_digest(&owner).map(|b| (b, owner))
    }) {
        request
            .extensions_mut()
            .insert(Authorized { binding, owner });
        return next.run(request).await;
    }
    if let Some(oauth) = &gate.oauth {
        let token = token.map(str::to_owned);
        // Boxed: verifying an access token may fetch keys, a large
        // future that a static token's request should not carry.
        return match Box::pin(oauth.admit(
            token.as_deref(),
            request,
            &gate.hub,
            gate.max_body_bytes,
        ))
        .await
        {
            Ok((authorized, mut request)) => {
                request.extensions_mut().insert(authorized);
                next.run(request).await
            }
            Err(answer) => answer,
        };
    }
    let mut r = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"error":"unauthorized","message":"send Authorization: Bearer <token> with a token toolhost knows"}"#,
    )
        .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// The token gate as an axum middleware, for the routes outside `/mcp`.
pub(crate) async fn gate_only(
    State(gate): State<Arc<Gate>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    require_token(&gate, request, next).await
}
