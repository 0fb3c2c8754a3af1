//! MCP's streamable HTTP transport, at `/mcp` ([`http_router`]).
//!
//! A bearer token picks the session's binding, and anything without a
//! known token gets 401 before MCP sees it: a static token from the
//! table, or an access token from an authorization server the operator
//! trusts (`oauth`: verified by `toolhost-oauth`, mapped to a binding by
//! the operator's rules, scopes checked, the resource's metadata served
//! so clients can find where to get one). A session belongs to the token
//! that created it (`sessions`): another token cannot resume, read or
//! delete it, and its idleness counts only its client's requests. A
//! 2026-07-28 `subscriptions/listen` stream is admitted against the hub's
//! caps before rmcp opens it (`admission`). A stateless protocol-1
//! `tools/call` may skip rmcp's per-request session altogether and go
//! straight to the call host (`direct`): the same call, the same span,
//! the same result bytes, for a fraction of the cost. So may a plain call
//! on a 2025-era session whose client is owed nothing but the result
//! (`session_calls`): one JSON body instead of the session's SSE stream.
//! The order of these layers is written once, in `stack`, where they are
//! composed into one future per request.
//!
//! The connections themselves (accept loop, caps, timeouts) are
//! `toolhost-net`'s; what a request means in MCP is `toolhost-mcp`'s.
//!
//! What this crate must not do: decide anything about a call, or let a
//! request reach MCP without a token that binds it.

#![forbid(unsafe_code)]

mod admission;
mod direct;
mod gate;
mod identity;
mod next;
mod oauth;
mod router;
mod session_calls;
mod sessions;
mod stack;

pub use direct::answered as direct_calls_answered;
pub use oauth::{BindingRule, FieldSource, OAuthGate};
pub use router::{HttpApp, HttpOptions, Metrics, http_router};
