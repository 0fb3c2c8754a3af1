//! The MCP surface: what agents talk to.
//!
//! [`Handler`] is an rmcp `ServerHandler` written by hand over the current
//! catalog (no tool macros: the tool set is data, and it changes at run
//! time). It serves `tools/list` from the catalog's per-surface view and
//! hands every `tools/call` to the pipeline. It runs on stdio ([`serve_stdio`])
//! and on streamable HTTP at `/mcp` ([`http_router`], served by
//! [`serve_http`]), where a bearer token picks the session's binding and
//! anything else gets 401 before MCP sees it. [`serve_http`] is toolhost's
//! own accept loop: a connection cap, header, idle and body timeouts, and a
//! [`ClientGone`] token per request, so no peer can exhaust the daemon
//! before it has shown a token. A session belongs to the token that created
//! it, and its idleness counts only the client's requests.
//!
//! [`Hub`] keeps every live session of both protocol eras (sessions that
//! initialized, for 2025-11-25 and older; open `subscriptions/listen`
//! streams, for 2026-07-28) and sends `notifications/tools/list_changed` to
//! exactly those whose surface's visible list changed. Each send is bounded
//! and runs on its own task, so a slow or dead client never holds up the
//! others.
//!
//! Tool calls may run as MCP tasks (the 2026-07-28 Tasks extension): a
//! call that outlives its request, created only once the pipeline has
//! admitted it, and read, answered and cancelled with `tasks/*`. [`Tasks`]
//! keeps their books: ownership, unguessable ids, caps and retention.
//!
//! What this crate must not do: decide anything about a call. Resolution,
//! validation, authorization and dispatch are the pipeline's; this crate
//! maps them onto the protocol.

#![forbid(unsafe_code)]

mod admission;
mod content;
mod deliver;
mod direct;
mod handler;
mod hosted;
mod http;
mod hub;
mod identity;
mod metrics;
mod operations;
mod sessions;
mod traced;
mod unmarked;

pub use handler::{Handler, Identity};
pub use http::{HttpOptions, http_router};
pub use hub::{DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_TOKEN, ExtraMetrics, Hub, Refused};
pub use traced::{Traced, serve_stdio};
