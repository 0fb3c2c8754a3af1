//! Who an HTTP request is: the bearer token of its `Authorization`
//! header, and the binding it stands for (the token table itself is
//! `toolhost_calls::TokenTable`). The gate (`gate.rs`) puts what it found
//! in the request's extensions as `toolhost_mcp::Authorized`, which the MCP
//! layer reads; the header is parsed here and nowhere else.

use axum::http::{HeaderMap, header};
use std::sync::Arc;
use toolhost_calls::TokenTable;
use toolhost_mcp::Authorized;
use toolhost_pipeline::Binding;

/// This request's binding: the gate's, or (where no gate ran) the token's
/// own lookup in `tokens`.
pub fn request_binding(
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
    tokens: &TokenTable,
) -> Option<Arc<Binding>> {
    match extensions.get::<Authorized>() {
        Some(a) => Some(a.binding.clone()),
        None => bearer_token(headers).and_then(|t| tokens.resolve(t)),
    }
}

/// The binding of a request this layer answers itself (it is handed on to
/// no one, so the gate's verdict is taken, not copied): the gate's, or
/// (where no gate ran) the token's own lookup in `tokens`.
pub fn take_binding(
    headers: &HeaderMap,
    extensions: &mut axum::http::Extensions,
    tokens: &TokenTable,
) -> Option<Arc<Binding>> {
    match extensions.remove::<Authorized>() {
        Some(a) => Some(a.binding),
        None => bearer_token(headers).and_then(|t| tokens.resolve(t)),
    }
}

/// Whose this request is (sessions and quotas count by it): the gate's
/// owner, or (where no gate ran) the digest of the bearer token.
pub fn request_owner(headers: &HeaderMap, extensions: &axum::http::Extensions) -> [u8; 32] {
    match extensions.get::<Authorized>() {
        Some(a) => a.owner,
        None => bearer_token(headers).map_or([0; 32], toolhost_calls::callers::digest),
    }
}

/// The token of an `Authorization: Bearer <token>` header.
#[must_use]
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_tokens_parse() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h), None);
    }

    /// A table binding `secret` to task-1, and headers that carry it.
    fn table_with_secret() -> (TokenTable, HeaderMap) {
        let t = TokenTable::new();
        t.bind("secret", Binding::new("chat", "task-1", "s", None));
        let mut with_token = HeaderMap::new();
        with_token.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret"),
        );
        (t, with_token)
    }

    /// Extensions where a gate's verdict named task-2.
    fn gated_as_task_2() -> axum::http::Extensions {
        let mut gated = axum::http::Extensions::new();
        gated.insert(Authorized {
            binding: Arc::new(Binding::new("chat", "task-2", "s", None)),
            owner: [0; 32],
        });
        gated
    }

    #[test]
    fn a_request_binding_is_the_gates_or_else_the_tokens() {
        let (t, with_token) = table_with_secret();
        let none = axum::http::Extensions::new();
        let found = request_binding(&with_token, &none, &t).map(|b| b.task_id.clone());
        assert_eq!(found.as_deref(), Some("task-1"), "no gate ran: the table");
        assert!(
            request_binding(&HeaderMap::new(), &none, &t).is_none(),
            "no token"
        );
        let gated = gated_as_task_2();
        let found = request_binding(&with_token, &gated, &t).map(|b| b.task_id.clone());
        assert_eq!(
            found.as_deref(),
            Some("task-2"),
            "the gate's verdict is used"
        );
    }

    #[test]
    fn a_taken_binding_is_the_gates_and_leaves_no_verdict_behind() {
        let (t, with_token) = table_with_secret();
        let mut gated = gated_as_task_2();
        let found = take_binding(&with_token, &mut gated, &t).map(|b| b.task_id.clone());
        assert_eq!(found.as_deref(), Some("task-2"), "the gate's verdict");
        assert!(gated.get::<Authorized>().is_none(), "taken, not copied");
        let found = take_binding(&with_token, &mut gated, &t).map(|b| b.task_id.clone());
        assert_eq!(found.as_deref(), Some("task-1"), "no verdict: the table");
        let mut none = axum::http::Extensions::new();
        assert!(take_binding(&HeaderMap::new(), &mut none, &t).is_none());
    }
}
