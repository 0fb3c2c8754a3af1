//! Traces: each call's handler runs inside a span that is a child of
//! toolhost's, through the OpenTelemetry API.
//!
//! toolhost sends W3C trace context in the gRPC metadata of every call
//! (`traceparent`, `tracestate`). The SDK opens an `execute_tool {tool}`
//! span under it and runs the handler with that span current, so a span
//! the handler opens with `opentelemetry::global::tracer(..)` nests inside.
//!
//! Spans leave the process only when its environment configures OTLP
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! which toolhost passes to a plugin the operator lets export); the
//! protocol is `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc`, the default here as
//! in toolhost, or `http/protobuf`), and the rest of the standard
//! `OTEL_*` variables (service name, sampler, batch delay) apply. Without
//! them nothing is installed and a call costs one metadata lookup.
//!
//! Like toolhost, the SDK never puts an argument or a result on a span.

pub(crate) use opentelemetry::Context;
use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{
    SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::OnceLock;

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The installed export, flushed when the plugin stops serving.
pub(crate) struct Export(SdkTracerProvider);

impl Export {
    /// Sends what is queued, for at most two seconds.
    pub(crate) fn shutdown(self) {
        let _ = self
            .0
            .shutdown_with_timeout(std::time::Duration::from_secs(2));
    }
}

/// Installs the OTLP export when the environment configures it (inside
/// the plugin's tokio runtime). A broken configuration is reported on
/// stderr, which toolhost logs, and the plugin serves without traces.
pub(crate) fn install_from_env() -> Option<Export> {
    let configured = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if !configured("OTEL_EXPORTER_OTLP_ENDPOINT")
        && !configured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    {
        return None;
    }
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|_| "grpc".into());
    let exporter = match protocol.as_str() {
        "http/protobuf" => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build(),
        _ => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_timeout(std::time::Duration::from_secs(10))
            .build(),
    };
    let exporter = match exporter {
        Ok(e) => e,
        Err(e) => {
            eprintln!("toolhost-plugin-sdk: traces are not exported: {e}");
            return None;
        }
    };
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(opentelemetry_sdk::Resource::builder().build())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = TRACER.set(provider.tracer("toolhost-plugin-sdk"));
    Some(Export(provider))
}

struct Metadata<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The span of one call: `execute_tool {tool}`, a child of the span whose
/// context toolhost sent. `None` when nothing is exported.
pub(crate) fn call_span(
    metadata: &tonic::metadata::MetadataMap,
    tool: &str,
    invocation_id: &str,
) -> Option<Context> {
    let tracer = TRACER.get()?;
    let parent = TraceContextPropagator::new().extract(&Metadata(metadata));
    let span = tracer
        .span_builder(format!("execute_tool {tool}"))
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("gen_ai.tool.call.id", invocation_id.to_owned()),
            KeyValue::new("rpc.system", "grpc"),
        ])
        .start_with_context(tracer, &parent);
    Some(parent.with_span(span))
}

/// Runs `f` with the call's span current, so spans it opens nest inside.
pub(crate) async fn within<F: std::future::Future>(cx: Option<Context>, f: F) -> F::Output {
    use opentelemetry::context::FutureExt as _;
    match cx {
        Some(cx) => f.with_context(cx).await,
        None => f.await,
    }
}

/// Ends a call's span: a tool error is `error.type = tool_error`, a
/// handler that panicked or was cancelled `error.type` of its own.
pub(crate) fn end(cx: Option<Context>, outcome: Result<bool, &'static str>) {
    let Some(cx) = cx else { return };
    let span = cx.span();
    let error = match outcome {
        Ok(true) => Some("tool_error"),
        Ok(false) => None,
        Err(why) => Some(why),
    };
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", e));
        span.set_status(Status::error(e));
    }
    span.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_span_is_made_when_nothing_is_exported() {
        let mut md = tonic::metadata::MetadataMap::new();
        md.insert(
            "traceparent",
            tonic::metadata::MetadataValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        assert!(call_span(&md, "add", "inv").is_none());
    }
}
