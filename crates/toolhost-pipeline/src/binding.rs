//! Who is calling: a session's binding (docs/CONTRACT.md §3).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// Numbers each binding made, so that two bindings of the same token are
/// never taken for one another.
static NEXT_BINDING: AtomicU64 = AtomicU64::new(1);

/// The identity an MCP session is bound to. Cheap to clone; clones share
/// the active flag, so revoking a binding reaches every session using it.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Where the session works; decides which tools it sees.
    pub surface: String,
    /// The task it works on.
    pub task_id: String,
    /// The agent session.
    pub session_id: String,
    /// The workspace, if any.
    pub workspace_id: Option<String>,
    /// Who the caller proved to be with an access token, if it did (a
    /// static token or a backend's binding proves no one in particular).
    pub principal: Option<Arc<Principal>>,
    state: Arc<BindingState>,
}

/// A caller verified by an authorization server: what the backend's
/// `Authorize` and the audit may know of them. Never a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The issuer that vouched for it.
    pub issuer: String,
    /// Who (`sub`).
    pub subject: String,
    /// With which client (`client_id`), if the token says.
    pub client_id: Option<String>,
    /// The scopes its token was granted.
    pub scopes: Vec<String>,
}

/// Shared, revocable state of a binding.
#[derive(Debug)]
pub struct BindingState {
    active: AtomicBool,
    /// Cancelled when the binding is revoked: what it started that
    /// outlives a request (its tasks) ends with it.
    revoked: CancellationToken,
    /// Which binding this is (clones share it).
    identity: u64,
}

impl Binding {
    /// An active binding.
    #[must_use]
    pub fn new(
        surface: impl Into<String>,
        task_id: impl Into<String>,
        session_id: impl Into<String>,
        workspace_id: Option<String>,
    ) -> Self {
        Self {
            surface: surface.into(),
            task_id: task_id.into(),
            session_id: session_id.into(),
            workspace_id,
            principal: None,
            state: Arc::new(BindingState {
                active: AtomicBool::new(true),
                revoked: CancellationToken::new(),
                identity: NEXT_BINDING.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    /// The same binding, on behalf of `principal`.
    #[must_use]
    pub fn with_principal(mut self, principal: Principal) -> Self {
        self.principal = Some(Arc::new(principal));
        self
    }

    /// Whether the binding is still in force.
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.state.active.load(Ordering::Acquire)
    }

    /// Revokes the binding: calls past resolution are refused at
    /// authorization from now on, and what it started that outlives a
    /// request (its tasks) is cancelled.
    pub fn revoke(&self) {
        self.state.active.store(false, Ordering::Release);
        self.state.revoked.cancel();
    }

    /// Which binding this is: the same for its clones, different for any
    /// other binding, even of the same token and identity.
    #[must_use]
    pub fn identity(&self) -> u64 {
        self.state.identity
    }

    /// Cancelled when the binding is revoked.
    #[must_use]
    pub fn revocation(&self) -> CancellationToken {
        self.state.revoked.clone()
    }
}
