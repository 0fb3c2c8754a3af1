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
mod calls;
mod content;
mod direct;
mod find;
mod handler;
mod hosted;
mod http;
mod hub;
mod instructions;
pub mod limits;
mod listener;
mod metrics;
mod operations;
mod pages;
mod sessions;
mod tasks;
mod tokens;
mod tools;
mod traced;
mod unmarked;

pub use find::exposed_name as find_tool_name;
pub use handler::{Handler, Identity};
pub use http::{HttpOptions, http_router};
pub use hub::{
    AgentView, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_TOKEN, DEFAULT_TOOLS_PAGE_SIZE,
    ExtraMetrics, Hub, Refused,
};
pub use instructions::{
    DEFAULT_BUDGET as DEFAULT_INSTRUCTIONS_BYTES, generate as generate_instructions,
};
pub use limits::ConnectionLimits;
pub use listener::{ClientGone, requests_read, serve_http, take_large_request};
pub use tasks::{Cancelled, TaskLimits, TaskRefused, TaskState, TaskSummary, TaskView, Tasks};
pub use tokens::{Owner, TokenTable};
pub use traced::{Traced, serve_stdio};
