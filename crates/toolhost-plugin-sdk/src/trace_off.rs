//! Without the `otel` feature: no spans, and nothing to install.

/// Stands in for OpenTelemetry's context.
#[derive(Clone)]
pub(crate) struct Context;

/// Nothing to flush.
pub(crate) struct Export;

impl Export {
    pub(crate) fn shutdown(self) {}
}

pub(crate) fn install_from_env() -> Option<Export> {
    None
}

pub(crate) fn call_span(
    _metadata: &tonic::metadata::MetadataMap,
    _tool: &str,
    _invocation_id: &str,
) -> Option<Context> {
    None
}

pub(crate) async fn within<F: std::future::Future>(_cx: Option<Context>, f: F) -> F::Output {
    f.await
}

pub(crate) fn end(_cx: Option<Context>, _outcome: Result<bool, &'static str>) {}
