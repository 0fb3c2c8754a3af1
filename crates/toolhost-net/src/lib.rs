//! The daemon's connections, before any protocol sees them: the HTTP
//! accept loop ([`serve_http`]) and the one set of connection limits every
//! listener holds to ([`ConnectionLimits`], [`limited`]): the MCP HTTP
//! port and the admin API's Unix socket and TCP port alike.
//!
//! Each limit holds before a request is parsed or a credential read, so
//! a peer without a token cannot exhaust the daemon through any door: a
//! cap on open connections (the one idle longest makes room), a header
//! timeout, an idle timeout, a body bound in size and time (HTTP/1), and
//! accept errors that pause the loop instead of spinning it. Every HTTP
//! request carries a [`ClientGone`] token, cancelled when its client goes,
//! so a call whose client left is cancelled at once.
//!
//! What this crate must not do: read a request's meaning (MCP, gRPC,
//! tokens are the layers above), or keep anything about a connection past
//! its end.

#![forbid(unsafe_code)]

pub mod limits;
mod listener;

pub use limits::{ConnectionLimits, limited};
pub use listener::{App, ClientGone, Guarded, requests_read, serve_http, take_large_request};
