//! `mcp.server.operation.duration`: how long each MCP request took, by
//! method and by how it ended, in the Prometheus text format under the
//! conventions' Prometheus-compatible name. Recorded for every request,
//! telemetry on or off; the labels are a bounded set (rmcp's methods,
//! `tool_error`, toolhost's own JSON-RPC error codes), never the client's
//! text.

use rmcp::ErrorData as McpError;
use rmcp::model::ServerResult;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use toolhost_telemetry::{ServerSpan, semconv};

/// How a request ended, for `error.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ended {
    /// A result.
    Ok,
    /// A tool result with `isError`: the call failed in a way the model
    /// can act on.
    ToolError,
    /// A JSON-RPC error, with its code.
    Rpc(i32),
}

impl Ended {
    /// How `result` ended.
    pub fn of(result: &Result<ServerResult, McpError>) -> Self {
        match result {
            Err(e) => Self::Rpc(e.code.0),
            Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => Self::ToolError,
            Ok(ServerResult::CustomResult(r))
                if r.0.get("isError").and_then(serde_json::Value::as_bool) == Some(true) =>
            {
                Self::ToolError
            }
            Ok(_) => Self::Ok,
        }
    }

    /// Ends `span` with this ending's `error.type`.
    pub(crate) fn end(self, span: ServerSpan) {
        let rpc = match self {
            Self::Rpc(code) => Some(i64::from(code)),
            _ => None,
        };
        span.end(self.error_type().as_deref(), rpc);
    }

    fn error_type(self) -> Option<String> {
        match self {
            Self::Ok => None,
            Self::ToolError => Some(semconv::TOOL_ERROR.to_owned()),
            Self::Rpc(code) => Some(code.to_string()),
        }
    }
}

/// Upper bounds (seconds) of `mcp.server.operation.duration`'s buckets,
/// the conventions' advice.
pub const OPERATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; 14],
    count: u64,
    sum: f64,
}

/// `mcp.server.operation.duration` by method and `error.type`: a bounded
/// set of labels (rmcp's methods, toolhost's own error codes).
#[derive(Debug, Default)]
pub(crate) struct Operations(Mutex<HashMap<(&'static str, Ended), Histogram>>);

impl Operations {
    pub(crate) fn observe(&self, method: &'static str, ended: Ended, took: Duration) {
        let secs = took.as_secs_f64();
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let h = all.entry((method, ended)).or_default();
        for (i, le) in OPERATION_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The family in the Prometheus text format, under the conventions'
    /// Prometheus-compatible name.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let name = "mcp_server_operation_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Duration of MCP requests as the server saw them (OpenTelemetry's mcp.server.operation.duration).\n# TYPE {name} histogram"
        );
        let mut rows: Vec<_> = {
            let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            all.iter().map(|(k, h)| (*k, h.clone())).collect()
        };
        rows.sort_by_key(|((m, e), _)| (*m, format!("{e:?}")));
        for ((method, ended), h) in rows {
            let labels = match ended.error_type() {
                Some(e) => format!("mcp_method_name=\"{method}\",error_type=\"{e}\""),
                None => format!("mcp_method_name=\"{method}\""),
            };
            for (le, n) in OPERATION_BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_every_bucket_at_or_above_them_and_labels_say_how_requests_ended() {
        let ops = Operations::default();
        ops.observe("tools/call", Ended::Ok, Duration::from_millis(15));
        ops.observe("tools/call", Ended::ToolError, Duration::from_millis(15));
        ops.observe("tools/list", Ended::Rpc(-32602), Duration::from_millis(1));
        let mut out = String::new();
        ops.render(&mut out);
        assert!(out.contains("# TYPE mcp_server_operation_duration_seconds histogram"));
        assert!(out.contains(
            "mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\",le=\"0.01\"} 0"
        ));
        assert!(out.contains(
            "mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\",le=\"0.02\"} 1"
        ));
        assert!(out.contains(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",error_type=\"tool_error\"} 1"
        ));
        assert!(out.contains(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/list\",error_type=\"-32602\"} 1"
        ));
    }
}
