//! OpenTelemetry for toolhost: one trace from the agent to the plugin.
//!
//! What this crate owns:
//!
//! - **The spans** ([`spans`]): a SERVER span per MCP request, named and
//!   attributed per OpenTelemetry's MCP semantic conventions
//!   ([`semconv`]); INTERNAL spans for the call pipeline's steps that
//!   take time; CLIENT spans for toolhost's own gRPC calls (to a plugin,
//!   to the backend's `Authorize`).
//! - **Trace context** ([`context`]): W3C `traceparent`/`tracestate` read
//!   from a request's `params._meta` or its HTTP headers, and written into
//!   the gRPC metadata of every outgoing call, so the plugin's own span
//!   joins the trace.
//! - **The export** ([`export`]): OTLP over gRPC or HTTP/protobuf through
//!   a bounded queue; a collector that is down or hangs drops spans, never
//!   slows a call.
//!
//! What it must not do: put an argument, a result, a secret or any other
//! text of the agent's into a span. Every attribute is a name, an id, a
//! code or a count that toolhost itself chose or checked; the tool name on
//! a span is one the catalog holds, never the agent's unchecked text.
//!
//! Off (nothing installed, the default) costs one atomic load per step: no
//! context is built, no attribute allocated, nothing sent.

#![forbid(unsafe_code)]

pub mod context;
pub mod export;
pub mod semconv;
pub mod spans;
mod switch;

pub use context::{TRACEPARENT, TRACESTATE, inject, parent_from, trace_id};
pub use export::{Export, Installed, Protocol, TelemetryError, install};
pub use spans::{ClientSpan, ServerRequest, ServerSpan, Step, Transport, record};
pub use switch::enabled;

/// Runs a future with a context current on every poll.
pub use opentelemetry::context::FutureExt;
/// The OpenTelemetry context type, re-exported so callers need not depend
/// on `opentelemetry` to pass one along.
pub use opentelemetry::{Context, KeyValue};
