//! Who a request is, as far as MCP's meaning needs it: the binding it acts
//! for and whose quota it counts against. The transport establishes it
//! (HTTP's bearer-token gate in `toolhost-http`, a fixed binding for
//! stdio); this crate never reads a header or a token.

use crate::hub::Owner;
use std::sync::Arc;
use toolhost_pipeline::Binding;

/// The caller a transport's gate established for one request, put in the
/// request's extensions (which no client can set).
#[derive(Debug, Clone)]
pub struct Authorized {
    /// The binding the request acts for, shared with the token table.
    pub binding: Arc<Binding>,
    /// Whose quota its sessions, parked calls and tasks count against
    /// (a digest of the token).
    pub owner: Owner,
}

/// The caller the gate established for this request, if one did.
#[must_use]
pub fn authorized(extensions: &rmcp::model::Extensions) -> Option<&Authorized> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Authorized>())
}
