//! `[telemetry]`: where toolhost's spans go, and what a plugin the
//! operator lets export gets. Secrets (export headers) are read here, once,
//! and never printed.

use crate::config::{TelemetryFile, read_secret};
use anyhow::{Context as _, Result, bail};
use std::path::Path;
use std::time::Duration;

/// What a plugin with `telemetry = true` gets from `[telemetry]`.
pub fn plugin_telemetry(
    id: &str,
    export: &toolhost_telemetry::Export,
) -> Result<toolhost_lifecycle::settings::PluginTelemetry> {
    let (https, rest) = match export.endpoint.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, export.endpoint.trim_start_matches("http://")),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let port = match authority.rsplit_once(':') {
        Some((_, p)) if !p.ends_with(']') => p
            .parse::<u16>()
            .with_context(|| format!("[telemetry] endpoint: port {p:?}"))?,
        _ if https => 443,
        _ => 80,
    };
    let protocol = match export.protocol {
        toolhost_telemetry::Protocol::Grpc => "grpc",
        toolhost_telemetry::Protocol::HttpProtobuf => "http/protobuf",
    };
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", export.endpoint.clone()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
        ("OTEL_SERVICE_NAME", id.to_owned()),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio".to_owned()),
        ("OTEL_TRACES_SAMPLER_ARG", export.sampling_ratio.to_string()),
        (
            "OTEL_BSP_SCHEDULE_DELAY",
            export.flush_interval.as_millis().to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    Ok(toolhost_lifecycle::settings::PluginTelemetry { env, port })
}

/// The export `[telemetry]` asks for, secrets read and everything
/// checked; `None` when no endpoint is set.
pub fn resolve(file: &TelemetryFile) -> Result<Option<toolhost_telemetry::Export>> {
    let this = file;
    {
        let Some(endpoint) = this.endpoint.clone() else {
            return Ok(None);
        };
        let mut e = toolhost_telemetry::Export::to(endpoint);
        e.protocol = match this.protocol.as_deref() {
            None | Some("grpc") => toolhost_telemetry::Protocol::Grpc,
            Some("http/protobuf") => toolhost_telemetry::Protocol::HttpProtobuf,
            Some(other) => bail!(
                "[telemetry] protocol {other:?} is not one toolhost exports: use \"grpc\" or \"http/protobuf\""
            ),
        };
        if let Some(r) = this.sampling_ratio {
            e.sampling_ratio = r;
        }
        if let Some(n) = &this.service_name {
            e.service_name.clone_from(n);
        }
        e.resource = this.resource.clone().into_iter().collect();
        for (key, value) in &this.headers {
            let (name, value) = if let Some(name) = key.strip_suffix("_file") {
                (
                    name,
                    read_secret(Path::new(value))
                        .with_context(|| format!("[telemetry] header {name}"))?,
                )
            } else if let Some(name) = key.strip_suffix("_env") {
                let v = std::env::var(value).with_context(|| {
                    format!("[telemetry] header {name}: environment variable {value} is not set")
                })?;
                (name, v)
            } else {
                (key.as_str(), value.clone())
            };
            e.headers.push((name.to_ascii_lowercase(), value));
        }
        if let Some(n) = this.max_queue {
            e.max_queue = n;
        }
        if let Some(ms) = this.flush_interval_ms {
            e.flush_interval = Duration::from_millis(ms);
        }
        if let Some(ms) = this.export_timeout_ms {
            e.export_timeout = Duration::from_millis(ms);
        }
        toolhost_telemetry::export::check(&e)?;
        Ok(Some(e))
    }
}
