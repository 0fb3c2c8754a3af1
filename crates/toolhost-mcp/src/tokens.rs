//! Bearer tokens: which binding each stands for, and reading one from a
//! request. Only a SHA-256 of each token is kept.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};
use toolhost_pipeline::Binding;

/// Bearer tokens and the bindings they stand for. Only a SHA-256 of each
/// token is kept: a memory dump does not give the tokens away, and lookups
/// hash first, so timing depends on the hash, not on the secret.
#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: RwLock<HashMap<[u8; 32], Binding>>,
}

/// Who opened a session or subscription: the SHA-256 of its bearer token
/// (HTTP), or the process itself (stdio, all zeros). Quotas count per owner.
pub type Owner = [u8; 32];

/// Whose tasks are whose: the token's owner and the one binding that
/// made them. A task belongs to that binding, not to the token alone: once
/// the binding is revoked and the token bound again (to another session,
/// say), the old binding's tasks are unknown to the new one.
pub(crate) fn task_owner(owner: &Owner, binding: &Binding) -> Owner {
    let mut h = Sha256::new();
    h.update(owner);
    h.update(binding.identity().to_le_bytes());
    h.finalize().into()
}

/// The SHA-256 of a token: how tokens are keyed, and how sessions know
/// their owner without keeping the token.
pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The binding the token gate resolved for this request, put in the
/// request's extensions (which no client can set), so later layers do not
/// hash and look the token up again.
#[derive(Debug, Clone)]
pub(crate) struct Authorized(pub(crate) Binding);

/// This request's binding: the gate's, or (where no gate ran) the token's
/// own lookup in `tokens`.
pub(crate) fn request_binding(
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
    tokens: &TokenTable,
) -> Option<Binding> {
    match extensions.get::<Authorized>() {
        Some(Authorized(binding)) => Some(binding.clone()),
        None => bearer_token(headers).and_then(|t| tokens.resolve(t)),
    }
}

impl TokenTable {
    /// An empty table.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds a token (replacing, and revoking, any earlier binding of it).
    pub fn bind(&self, token: &str, binding: Binding) {
        self.bind_digest(digest(token), binding);
    }

    /// Binds a token known only by its SHA-256 (a fleet's bucket never holds
    /// tokens in the clear), replacing and revoking any earlier binding.
    pub fn bind_digest(&self, digest: [u8; 32], binding: Binding) {
        let old = self
            .by_hash
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(digest, binding);
        if let Some(old) = old {
            old.revoke();
        }
    }

    /// Whether a token known only by its SHA-256 is bound.
    #[must_use]
    pub fn has_digest(&self, digest: &[u8; 32]) -> bool {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(digest)
    }

    /// Revokes a token known only by its SHA-256.
    pub fn revoke_digest(&self, digest: &[u8; 32]) -> bool {
        let old = self
            .by_hash
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(digest);
        old.map(|b| b.revoke()).is_some()
    }

    /// Revokes a token: its next request gets 401, and calls of its sessions
    /// already past resolution fail authorization.
    pub fn revoke(&self, token: &str) -> bool {
        self.revoke_digest(&digest(token))
    }

    /// The binding of a token, if it has one.
    #[must_use]
    pub fn resolve(&self, token: &str) -> Option<Binding> {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&digest(token))
            .cloned()
    }

    /// How many tokens are bound.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no token is bound.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    #[test]
    fn a_request_binding_is_the_gates_or_else_the_tokens() {
        let t = TokenTable::new();
        t.bind("secret", Binding::new("chat", "task-1", "s", None));
        let mut with_token = HeaderMap::new();
        with_token.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret"),
        );
        let none = axum::http::Extensions::new();
        let found = request_binding(&with_token, &none, &t).map(|b| b.task_id);
        assert_eq!(found.as_deref(), Some("task-1"), "no gate ran: the table");
        assert!(
            request_binding(&HeaderMap::new(), &none, &t).is_none(),
            "no token"
        );
        let mut gated = axum::http::Extensions::new();
        gated.insert(Authorized(Binding::new("chat", "task-2", "s", None)));
        let found = request_binding(&with_token, &gated, &t).map(|b| b.task_id);
        assert_eq!(
            found.as_deref(),
            Some("task-2"),
            "the gate's verdict is used"
        );
    }

    #[test]
    fn revoking_a_token_revokes_its_binding() {
        let t = TokenTable::new();
        t.bind("secret", Binding::new("chat", "t", "s", None));
        let b = t.resolve("secret");
        assert!(b.as_ref().is_some_and(Binding::is_active));
        assert!(t.revoke("secret"));
        assert!(t.resolve("secret").is_none());
        assert!(b.is_some_and(|b| !b.is_active()));
    }
}
