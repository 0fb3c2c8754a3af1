//! The spans toolhost makes, and the one switch that turns them on.
//!
//! A request's [`ServerSpan`] is the root of toolhost's part of a trace
//! (its parent is the agent's span, when the agent named one). Inside it,
//! the call pipeline opens a [`Step`] per step that takes time, and every
//! gRPC call toolhost makes is a [`ClientSpan`] whose context travels in
//! the call's metadata. Spans nest through the ambient OpenTelemetry
//! [`Context`]: a future run with [`Step::within`] sees its step as the
//! current span, so whatever it opens is that step's child.
//!
//! Children are opened only under a sampled span: when the root was not
//! sampled, a step costs one thread-local read and nothing else, and the
//! context still propagates (with its sampled flag off) so the plugin
//! agrees not to record either.

use crate::semconv;
use crate::switch::{TRACER, enabled};
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::SdkTracer;
use std::future::Future;

/// The tracer, when telemetry is on and the current span is sampled.
fn sampled_parent() -> Option<(&'static SdkTracer, Context)> {
    let tracer = TRACER.get()?;
    let cx = Context::current();
    cx.span()
        .span_context()
        .is_sampled()
        .then_some((tracer, cx))
}

/// How an MCP request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio (`network.transport = pipe`).
    Stdio,
    /// Streamable HTTP (`network.transport = tcp`, `network.protocol.name = http`).
    Http,
}

/// What the SERVER span of one MCP request says about it. Every field is
/// toolhost's own or checked: `tool` must be a name the catalog holds.
#[derive(Debug, Clone, Default)]
pub struct ServerRequest<'a> {
    /// The JSON-RPC method (`tools/call`), from rmcp's typed request.
    pub method: &'a str,
    /// The exposed tool name of a `tools/call`, when the catalog has it.
    pub tool: Option<&'a str>,
    /// The JSON-RPC request id.
    pub request_id: Option<String>,
    /// The MCP session id (HTTP sessions).
    pub session_id: Option<&'a str>,
    /// The protocol version in force.
    pub protocol_version: Option<&'a str>,
    /// stdio or HTTP.
    pub transport: Option<Transport>,
    /// The agent's span, from `_meta` or the HTTP headers.
    pub parent: Option<Context>,
}

/// The SERVER span of one MCP request: `{mcp.method.name} {target}`.
#[derive(Debug)]
pub struct ServerSpan {
    cx: Context,
}

impl ServerSpan {
    /// Opens the span, a child of the agent's span when it named one and a
    /// new root otherwise; `None` when telemetry is off.
    #[must_use]
    pub fn start(r: ServerRequest<'_>) -> Option<Self> {
        let tracer = TRACER.get()?;
        let name = match r.tool {
            Some(tool) => format!("{} {tool}", r.method),
            None => r.method.to_owned(),
        };
        let mut attributes = Vec::with_capacity(9);
        attributes.push(KeyValue::new(semconv::MCP_METHOD_NAME, r.method.to_owned()));
        if let Some(tool) = r.tool {
            attributes.push(KeyValue::new(semconv::GEN_AI_TOOL_NAME, tool.to_owned()));
            attributes.push(KeyValue::new(
                semconv::GEN_AI_OPERATION_NAME,
                semconv::EXECUTE_TOOL,
            ));
        }
        if let Some(id) = r.request_id {
            attributes.push(KeyValue::new(semconv::JSONRPC_REQUEST_ID, id));
        }
        if let Some(s) = r.session_id {
            attributes.push(KeyValue::new(semconv::MCP_SESSION_ID, s.to_owned()));
        }
        if let Some(v) = r.protocol_version {
            attributes.push(KeyValue::new(semconv::MCP_PROTOCOL_VERSION, v.to_owned()));
        }
        match r.transport {
            Some(Transport::Stdio) => {
                attributes.push(KeyValue::new(semconv::NETWORK_TRANSPORT, "pipe"));
            }
            Some(Transport::Http) => {
                attributes.push(KeyValue::new(semconv::NETWORK_TRANSPORT, "tcp"));
                attributes.push(KeyValue::new(semconv::NETWORK_PROTOCOL_NAME, "http"));
            }
            None => {}
        }
        let parent = r.parent.unwrap_or_default();
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        Some(Self {
            cx: parent.with_span(span),
        })
    }

    /// The context to run the request in, so its steps nest under it.
    #[must_use]
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// Ends the span; `error` is its `error.type` (and makes its status
    /// an error), `rpc_code` the JSON-RPC error code when there was one.
    pub fn end(self, error: Option<&str>, rpc_code: Option<i64>) {
        let span = self.cx.span();
        if let Some(code) = rpc_code {
            span.set_attribute(KeyValue::new(
                semconv::RPC_RESPONSE_STATUS_CODE,
                code.to_string(),
            ));
        }
        if let Some(e) = error {
            span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, e.to_owned()));
            span.set_status(Status::error(e.to_owned()));
        }
        span.end();
    }
}

/// Sets an attribute on the current span (a call's outcome, its task),
/// when telemetry is on and the span records.
pub fn record(key: &'static str, value: impl Into<Value>) {
    if !enabled() {
        return;
    }
    Context::map_current(|cx| {
        let span = cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new(key, value));
        }
    });
}

/// An INTERNAL span over one pipeline step; ends when dropped.
#[derive(Debug)]
#[must_use = "a step's span ends when it is dropped"]
pub struct Step(Option<Context>);

impl Step {
    /// Opens `name` as a child of the current span, when that is sampled.
    pub fn start(name: &'static str) -> Self {
        Self::open(name, SpanKind::Internal, Vec::new)
    }

    fn open(
        name: &'static str,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        let Some((tracer, parent)) = sampled_parent() else {
            return Self(None);
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes())
            .start_with_context(tracer, &parent);
        Self(Some(parent.with_span(span)))
    }

    /// Runs `f` with this step as the current span.
    pub async fn within<F: Future>(&self, f: F) -> F::Output {
        match &self.0 {
            Some(cx) => f.with_context(cx.clone()).await,
            None => f.await,
        }
    }

    /// Sets an attribute.
    pub fn attribute(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Marks the step failed with toolhost's outcome code as `error.type`.
    pub fn fail(&self, error_type: &str) {
        if let Some(cx) = &self.0 {
            let span = cx.span();
            span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, error_type.to_owned()));
            span.set_status(Status::error(error_type.to_owned()));
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}

/// A CLIENT span over one gRPC call toolhost makes, named
/// `{rpc.service}/{rpc.method}`; its context goes in the call's metadata.
#[derive(Debug)]
#[must_use = "a client span ends when it is dropped"]
pub struct ClientSpan(Step);

impl ClientSpan {
    /// Opens the span under the current one (when sampled). `name` is
    /// `service/method`; `extra` attributes are toolhost's own (ids, not
    /// contents).
    pub fn start(
        name: &'static str,
        service: &'static str,
        method: &'static str,
        extra: impl FnOnce() -> Vec<KeyValue>,
    ) -> Self {
        Self(Step::open(name, SpanKind::Client, || {
            let mut a = vec![
                KeyValue::new(semconv::RPC_SYSTEM, "grpc"),
                KeyValue::new(semconv::RPC_SERVICE, service),
                KeyValue::new(semconv::RPC_METHOD, method),
            ];
            a.extend(extra());
            a
        }))
    }

    /// Writes this span's trace context (or, when it does not record, the
    /// current one's) into the call's metadata.
    pub fn inject(&self, metadata: &mut tonic::metadata::MetadataMap) {
        match &self.0.0 {
            Some(cx) => crate::context::inject_context(cx, metadata),
            None => crate::context::inject(metadata),
        }
    }

    /// Records the call's gRPC status; anything but OK is its `error.type`.
    pub fn status(&self, code: tonic::Code) {
        self.0
            .attribute(semconv::RPC_GRPC_STATUS_CODE, i64::from(code as i32));
        if code != tonic::Code::Ok {
            self.0.fail(&format!("{code:?}"));
        }
    }

    /// Marks the call failed for a reason of toolhost's own (a deadline,
    /// an answer too large).
    pub fn fail(&self, error_type: &str) {
        self.0.fail(error_type);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use std::sync::{Arc, Mutex};

    /// Keeps every span it is given, in the order they ended.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Ok(mut kept) = self.0.lock() {
                kept.extend(batch);
            }
            Ok(())
        }
    }

    fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    /// One test, because the switch is set once per process: first
    /// everything is a no-op, then every span nests where it should.
    #[test]
    fn off_costs_nothing_and_on_nests_server_step_and_client_spans() {
        // Off: nothing is opened and nothing is written into a call.
        assert!(!enabled());
        let none = ServerSpan::start(ServerRequest {
            method: "tools/call",
            ..ServerRequest::default()
        });
        assert!(none.is_none());
        let client = ClientSpan::start("s/m", "s", "m", Vec::new);
        let mut metadata = tonic::metadata::MetadataMap::new();
        client.inject(&mut metadata);
        assert!(metadata.is_empty(), "no trace context is made up");
        record("toolhost.outcome", "ok");

        // On, with an exporter that keeps what it is given.
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        assert!(crate::switch::set_tracer(provider.tracer("toolhost")));
        let server = ServerSpan::start(ServerRequest {
            method: "tools/call",
            tool: Some("kandev_notes_add"),
            request_id: Some("7".into()),
            transport: Some(Transport::Http),
            ..ServerRequest::default()
        })
        .expect("a span when on");
        let trace_id = server.context().span().span_context().trace_id();
        {
            let _in_request = server.context().clone().attach();
            let step = Step::start("toolhost.validate");
            step.fail("invalid_arguments");
            drop(step);
            let client = ClientSpan::start("p/Invoke", "p", "Invoke", Vec::new);
            let mut metadata = tonic::metadata::MetadataMap::new();
            client.inject(&mut metadata);
            let sent = metadata
                .get(crate::TRACEPARENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(
                sent.contains(&trace_id.to_string()),
                "the plugin call carries the request's trace: {sent:?}"
            );
            client.status(tonic::Code::Unavailable);
        }
        server.end(Some("tool_error"), None);

        let spans = kept.0.lock().expect("not poisoned").clone();
        let named = |n: &str| {
            spans.iter().find(|s| s.name == n).unwrap_or_else(|| {
                panic!(
                    "no span {n:?} in {:?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            })
        };
        let root = named("tools/call kandev_notes_add");
        let step = named("toolhost.validate");
        let call = named("p/Invoke");
        assert_eq!(root.span_kind, SpanKind::Server);
        assert_eq!(step.span_kind, SpanKind::Internal);
        assert_eq!(call.span_kind, SpanKind::Client);
        for child in [step, call] {
            assert_eq!(child.parent_span_id, root.span_context.span_id());
            assert_eq!(child.span_context.trace_id(), trace_id);
        }
        assert_eq!(
            attribute(step, semconv::ERROR_TYPE)
                .map(ToString::to_string)
                .as_deref(),
            Some("invalid_arguments")
        );
        assert_eq!(
            attribute(call, semconv::ERROR_TYPE)
                .map(ToString::to_string)
                .as_deref(),
            Some("Unavailable")
        );
        assert_eq!(
            attribute(root, semconv::GEN_AI_TOOL_NAME)
                .map(ToString::to_string)
                .as_deref(),
            Some("kandev_notes_add")
        );
        assert_eq!(
            attribute(root, semconv::NETWORK_TRANSPORT)
                .map(ToString::to_string)
                .as_deref(),
            Some("tcp")
        );
    }
}
