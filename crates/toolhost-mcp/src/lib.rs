//! MCP's meaning: what agents' requests are, in the protocol's terms.
//!
//! [`Handler`] is an rmcp `ServerHandler` written by hand over the current
//! catalog (no tool macros: the tool set is data, and it changes at run
//! time). It answers `tools/list` from the listing (`toolhost-listing`),
//! maps every `tools/call` onto the call host (`toolhost-calls`) with a
//! [`toolhost_calls::Delivery`] that speaks to this session (progress,
//! logs, questions as elicitation or input-required), and maps `tasks/*`
//! onto the host's tasks. [`Traced`] wraps it with a span and a metric per
//! request; it runs on stdio ([`serve_stdio`]) and under the streamable
//! HTTP transport of `toolhost-http`.
//!
//! [`Hub`] keeps every live session of both protocol eras (sessions that
//! initialized, for 2025-11-25 and older; open `subscriptions/listen`
//! streams, for 2026-07-28) and sends `notifications/tools/list_changed` to
//! exactly those whose surface's visible list changed. Each send is bounded
//! and runs on its own task, so a slow or dead client never holds up the
//! others.
//!
//! What this crate must not do: decide anything about a call (resolution,
//! validation, authorization and dispatch are the pipeline's, hosting is
//! `toolhost-calls`'), or know what carries a request (a token, a
//! connection, a session id are the transport's).

#![forbid(unsafe_code)]

mod content;
mod deliver;
mod facts;
mod handler;
mod hosted;
mod hub;
mod identity;
mod operations;
mod traced;
mod unmarked;

pub use content::result_of;
pub use deliver::Nowhere;
pub use facts::SessionFacts;
pub use handler::{Handler, Identity};
pub use hub::{DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_TOKEN, Hub, ListenTicket, Refused};
pub use identity::{Authorized, authorized};
pub use operations::Ended;
pub use traced::{Request, Traced, request_span, serve_stdio};
pub use unmarked::UnmarkedSessions;
