//! `[telemetry]`: where toolhost's spans go, and what a plugin the
//! operator lets export gets. Secrets (export headers) are read here, once,
//! and never printed.

use crate::secret::read_secret;
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// `[telemetry]`: where toolhost sends its spans. Without this section (or
/// without `endpoint`) nothing is traced.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryFile {
    /// The collector's base URL: `http://127.0.0.1:4317` for OTLP/gRPC,
    /// `http://127.0.0.1:4318` for OTLP/HTTP (spans go to `/v1/traces`).
    pub endpoint: Option<String>,
    /// `grpc` (the default) or `http/protobuf`.
    pub protocol: Option<String>,
    /// The share of new traces recorded, 0.0 to 1.0 (default 1.0); a trace
    /// the agent started keeps the agent's decision.
    pub sampling_ratio: Option<f64>,
    /// `service.name` (default `toolhost`).
    pub service_name: Option<String>,
    /// Further resource attributes, e.g. `"deployment.environment.name" = "prod"`.
    #[serde(default)]
    pub resource: std::collections::BTreeMap<String, String>,
    /// Headers sent with every export. A secret is read as
    /// `<name>_file = "path"` (the file's first line) or `<name>_env = "VAR"`,
    /// like plugin secrets; plain values are for what is not secret.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Spans waiting for export at most (default 2048); more are dropped.
    pub max_queue: Option<usize>,
    /// How often a batch is sent (default 1000 ms).
    pub flush_interval_ms: Option<u64>,
    /// How long one export may take (default 10000 ms).
    pub export_timeout_ms: Option<u64>,
}

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
    let Some(endpoint) = file.endpoint.clone() else {
        return Ok(None);
    };
    let mut e = toolhost_telemetry::Export::to(endpoint);
    e.protocol = match file.protocol.as_deref() {
        None | Some("grpc") => toolhost_telemetry::Protocol::Grpc,
        Some("http/protobuf") => toolhost_telemetry::Protocol::HttpProtobuf,
        Some(other) => bail!(
            "[telemetry] protocol {other:?} is not one toolhost exports: use \"grpc\" or \"http/protobuf\""
        ),
    };
    if let Some(r) = file.sampling_ratio {
        e.sampling_ratio = r;
    }
    if let Some(n) = &file.service_name {
        e.service_name.clone_from(n);
    }
    e.resource = file.resource.clone().into_iter().collect();
    for (key, value) in &file.headers {
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
    if let Some(n) = file.max_queue {
        e.max_queue = n;
    }
    if let Some(ms) = file.flush_interval_ms {
        e.flush_interval = Duration::from_millis(ms);
    }
    if let Some(ms) = file.export_timeout_ms {
        e.export_timeout = Duration::from_millis(ms);
    }
    toolhost_telemetry::export::check(&e)?;
    Ok(Some(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_may_reach_the_collectors_port_and_learns_nothing_secret() {
        let mut e = toolhost_telemetry::Export::to("http://127.0.0.1:4317");
        e.headers = vec![("x-api-key".into(), "secret-value".into())];
        let t = plugin_telemetry("notes", &e).unwrap();
        assert_eq!(t.port, 4317);
        assert_eq!(t.env["OTEL_SERVICE_NAME"], "notes");
        assert_eq!(
            t.env["OTEL_EXPORTER_OTLP_ENDPOINT"],
            "http://127.0.0.1:4317"
        );
        assert!(t.env.values().all(|v| !v.contains("secret-value")));
        for (endpoint, port) in [
            ("https://otlp.example.com", 443),
            ("http://collector", 80),
            ("http://[::1]:4318/", 4318),
            ("https://[::1]", 443),
        ] {
            let e = toolhost_telemetry::Export::to(endpoint);
            assert_eq!(plugin_telemetry("p", &e).unwrap().port, port, "{endpoint}");
        }
    }

    #[test]
    fn headers_come_from_files_and_no_endpoint_means_off() {
        assert!(resolve(&TelemetryFile::default()).unwrap().is_none());
        let dir = std::env::temp_dir().join(format!("toolhost-otlp-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, "from-a-file\n").unwrap();
        let file = TelemetryFile {
            endpoint: Some("http://127.0.0.1:4317".into()),
            headers: [
                ("X-Api-Key_file".to_owned(), key.display().to_string()),
                ("x-scope-orgid".to_owned(), "tenant".to_owned()),
            ]
            .into_iter()
            .collect(),
            ..TelemetryFile::default()
        };
        let e = resolve(&file).unwrap().unwrap();
        assert!(
            e.headers
                .contains(&("x-api-key".into(), "from-a-file".into()))
        );
        assert!(
            e.headers
                .contains(&("x-scope-orgid".into(), "tenant".into()))
        );
        let bad = TelemetryFile {
            endpoint: Some("http://127.0.0.1:4317".into()),
            protocol: Some("zipkin".into()),
            ..TelemetryFile::default()
        };
        assert!(resolve(&bad).unwrap_err().to_string().contains("grpc"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
