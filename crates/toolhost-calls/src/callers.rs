//! Who calls: bearer tokens and the bindings they stand for, and the
//! owners that sessions, tasks and parked calls are counted and kept
//! under. Only a SHA-256 of each token is kept.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use toolhost_pipeline::Binding;

/// Bearer tokens and the bindings they stand for. Only a SHA-256 of each
/// token is kept: a memory dump does not give the tokens away, and lookups
/// hash first, so timing depends on the hash, not on the secret. A
/// binding is shared, not copied, with each request that resolves it (a
/// copy was four strings a call).
#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: RwLock<HashMap<[u8; 32], Arc<Binding>>>,
}

/// Who opened a session or subscription: the SHA-256 of its bearer token
/// (HTTP), or the process itself (stdio, all zeros). Quotas count per owner.
pub type Owner = [u8; 32];

/// Whose tasks are whose: the token's owner and the one binding that
/// made them. A task belongs to that binding, not to the token alone: once
/// the binding is revoked and the token bound again (to another session,
/// say), the old binding's tasks are unknown to the new one.
pub fn task_owner(owner: &Owner, binding: &Binding) -> Owner {
    let mut h = Sha256::new();
    h.update(owner);
    h.update(binding.identity().to_le_bytes());
    h.finalize().into()
}

/// The SHA-256 of a token: how tokens are keyed, and how sessions know
/// their owner without keeping the token.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
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
            .insert(digest, Arc::new(binding));
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
    pub fn resolve(&self, token: &str) -> Option<Arc<Binding>> {
        self.resolve_digest(&digest(token))
    }

    /// The binding of the token whose SHA-256 is `digest`: for a caller
    /// that keeps the digest too (the HTTP gate counts sessions by it), so
    /// a token is hashed once per request.
    #[must_use]
    pub fn resolve_digest(&self, digest: &[u8; 32]) -> Option<Arc<Binding>> {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(digest)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoking_a_token_revokes_its_binding() {
        let t = TokenTable::new();
        t.bind("secret", Binding::new("chat", "t", "s", None));
        let b = t.resolve("secret");
        assert!(b.as_ref().is_some_and(|b| b.is_active()));
        assert!(t.revoke("secret"));
        assert!(t.resolve("secret").is_none());
        assert!(b.is_some_and(|b| !b.is_active()));
    }

    #[test]
    fn a_tasks_owner_is_the_token_and_the_binding_that_made_it() {
        let token = digest("secret");
        let first = Binding::new("chat", "t", "s", None);
        let again = Binding::new("chat", "t", "s", None);
        assert_eq!(task_owner(&token, &first), task_owner(&token, &first));
        assert_ne!(
            task_owner(&token, &first),
            task_owner(&token, &again),
            "a new binding of the same ids is another owner"
        );
        assert_ne!(
            task_owner(&token, &first),
            task_owner(&digest("other"), &first)
        );
    }
}
