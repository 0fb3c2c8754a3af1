//! The OTLP export: a batch processor with a bounded queue in front of a
//! gRPC or HTTP/protobuf exporter.
//!
//! A finished span is handed to the processor's queue with `try_send`:
//! when the queue is full (a collector down or hanging, exports timing out
//! one after another) the span is dropped and counted, so a call never
//! waits on the collector and memory never grows past the queue. One
//! export runs at a time and is cut off after its timeout.

use crate::switch::set_tracer;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{BatchConfigBuilder, Sampler, SdkTracerProvider};
use std::time::Duration;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// OTLP/gRPC (port 4317 by convention); `http://` or `https://`.
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318), POSTed to
    /// `<endpoint>/v1/traces`; `http://` only.
    HttpProtobuf,
}

/// Where and how to export, all from the daemon's configuration file.
#[derive(Clone)]
pub struct Export {
    /// The collector's base URL.
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: Protocol,
    /// Headers sent with every export (values may be secrets: never
    /// printed, not even by `Debug`).
    pub headers: Vec<(String, String)>,
    /// The share of new traces recorded, 0.0 to 1.0; a trace the agent
    /// started keeps the agent's decision.
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// Further resource attributes (`deployment.environment.name`, ...).
    pub resource: Vec<(String, String)>,
    /// Spans waiting for export at most; more are dropped.
    pub max_queue: usize,
    /// How often a batch is sent.
    pub flush_interval: Duration,
    /// How long one export may take before it is abandoned.
    pub export_timeout: Duration,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("sampling_ratio", &self.sampling_ratio)
            .field("service_name", &self.service_name)
            .field("max_queue", &self.max_queue)
            .finish_non_exhaustive()
    }
}

impl Export {
    /// An export to `endpoint` with the defaults: gRPC, every new trace
    /// sampled, service `toolhost`, 2,048 spans queued, a batch a second,
    /// ten seconds per export.
    #[must_use]
    pub fn to(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol: Protocol::Grpc,
            headers: Vec::new(),
            sampling_ratio: 1.0,
            service_name: "toolhost".into(),
            resource: Vec::new(),
            max_queue: 2048,
            flush_interval: Duration::from_secs(1),
            export_timeout: Duration::from_secs(10),
        }
    }
}

/// Telemetry could not be set up; the daemon refuses to start rather than
/// run without the traces its operator asked for.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The endpoint is not a URL the chosen protocol can use.
    #[error("[telemetry] endpoint {endpoint:?}: {why}")]
    Endpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
    /// A header name or value cannot be sent (the value is not shown).
    #[error(
        "[telemetry] header {0:?} cannot be sent: names are lower-case tokens and values printable ASCII"
    )]
    Header(String),
    /// A setting is out of range.
    #[error("[telemetry] {0}")]
    Setting(String),
    /// The exporter could not be built.
    #[error("[telemetry] the OTLP exporter could not be set up: {0}")]
    Exporter(String),
    /// Telemetry was installed already in this process.
    #[error("telemetry is already installed in this process")]
    AlreadyInstalled,
}

/// The installed pipeline; flush it on shutdown.
#[derive(Debug)]
pub struct Installed {
    provider: SdkTracerProvider,
}

impl Installed {
    /// Sends what is queued, waiting at most `timeout`; spans still
    /// queued after it are lost (a collector that hangs must not hold up
    /// the daemon's exit).
    pub fn shutdown(self, timeout: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
            tracing::warn!(error = %e, "telemetry: spans may have been lost at shutdown");
        }
    }
}

/// Checks `export` and turns telemetry on for this process. Must run
/// inside the daemon's tokio runtime (the export runs on it).
pub fn install(export: &Export) -> Result<Installed, TelemetryError> {
    check(export)?;
    let exporter = match export.protocol {
        Protocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &export.headers {
                let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                    .map_err(|_| TelemetryError::Header(k.clone()))?;
                let value = v.parse().map_err(|_| TelemetryError::Header(k.clone()))?;
                metadata.insert(key, value);
            }
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(export.endpoint.clone())
                .with_timeout(export.export_timeout)
                .with_metadata(metadata);
            if export.endpoint.starts_with("https://") {
                b = b.with_tls_config(
                    opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                        .with_native_roots(),
                );
            }
            b.build()
        }
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!(
                "{}/v1/traces",
                export.endpoint.trim_end_matches('/')
            ))
            .with_timeout(export.export_timeout)
            .with_headers(export.headers.iter().cloned().collect())
            .build(),
    }
    .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(export.max_queue)
        .with_max_export_batch_size(export.max_queue.min(512))
        .with_scheduled_delay(export.flush_interval)
        .with_max_export_timeout(export.export_timeout)
        .with_max_concurrent_exports(1)
        .build();
    let processor = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio)
        .with_batch_config(batch)
        .build();
    let resource = Resource::builder_empty()
        .with_service_name(export.service_name.clone())
        .with_attributes(
            export
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            export.sampling_ratio,
        ))))
        .with_resource(resource)
        .build();
    if !set_tracer(provider.tracer("toolhost")) {
        return Err(TelemetryError::AlreadyInstalled);
    }
    Ok(Installed { provider })
}

/// The settings' own rules, before anything is built.
pub fn check(export: &Export) -> Result<(), TelemetryError> {
    let bad = |why: &str| TelemetryError::Endpoint {
        endpoint: export.endpoint.clone(),
        why: why.to_owned(),
    };
    let rest = match export.protocol {
        Protocol::Grpc => export
            .endpoint
            .strip_prefix("http://")
            .or_else(|| export.endpoint.strip_prefix("https://"))
            .ok_or_else(|| bad("an OTLP/gRPC endpoint starts with http:// or https://"))?,
        Protocol::HttpProtobuf => export.endpoint.strip_prefix("http://").ok_or_else(|| {
            bad("an OTLP/HTTP endpoint starts with http:// (toolhost's HTTP exporter has no TLS: use protocol = \"grpc\" with https://, or a collector on this host)")
        })?,
    };
    if rest.is_empty() || export.endpoint.parse::<tonic::transport::Uri>().is_err() {
        return Err(bad("not a URL"));
    }
    if export.endpoint.contains('@') {
        return Err(bad(
            "credentials do not belong in the URL (they would be logged); send them as a header whose value is read from a file",
        ));
    }
    if !(0.0..=1.0).contains(&export.sampling_ratio) || export.sampling_ratio.is_nan() {
        return Err(TelemetryError::Setting(
            "sampling_ratio must be from 0.0 to 1.0".into(),
        ));
    }
    if export.max_queue == 0 || export.max_queue > 1_000_000 {
        return Err(TelemetryError::Setting(
            "max_queue must be 1 to 1,000,000 spans".into(),
        ));
    }
    if export.flush_interval.is_zero() || export.export_timeout.is_zero() {
        return Err(TelemetryError::Setting(
            "flush_interval_ms and export_timeout_ms must be at least 1".into(),
        ));
    }
    if export.service_name.trim().is_empty() {
        return Err(TelemetryError::Setting(
            "service_name must not be empty".into(),
        ));
    }
    for (k, v) in &export.headers {
        let name_ok = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
        if !name_ok || !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(TelemetryError::Header(k.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_before_anything_is_built() {
        assert!(check(&Export::to("http://127.0.0.1:4317")).is_ok());
        assert!(check(&Export::to("https://otlp.example.com")).is_ok());
        for bad in [
            "127.0.0.1:4317",
            "ftp://x",
            "http://",
            "http://user:pw@host:4317",
        ] {
            assert!(check(&Export::to(bad)).is_err(), "{bad}");
        }
        let mut http = Export::to("https://otlp.example.com");
        http.protocol = Protocol::HttpProtobuf;
        assert!(check(&http).is_err(), "no TLS over HTTP");
        let mut ratio = Export::to("http://c:4317");
        ratio.sampling_ratio = 1.5;
        assert!(check(&ratio).is_err());
        ratio.sampling_ratio = f64::NAN;
        assert!(check(&ratio).is_err());
        let mut header = Export::to("http://c:4317");
        header.headers = vec![("authorization".into(), "Bearer \nx".into())];
        let e = check(&header).expect_err("a newline in a value");
        assert!(
            !e.to_string().contains("Bearer"),
            "the value is not shown: {e}"
        );
    }

    #[test]
    fn debug_output_never_shows_a_header_value() {
        let mut e = Export::to("http://c:4317");
        e.headers = vec![("x-api-key".into(), "canary-secret-value".into())];
        let shown = format!("{e:?}");
        assert!(shown.contains("x-api-key"));
        assert!(!shown.contains("canary-secret-value"));
    }
}
