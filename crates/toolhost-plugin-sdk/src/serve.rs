//! The plugin side of the handshake and the gRPC services.

use crate::{
    DATA_DIR_KEY, HEALTH_SERVICE, Handler, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, PROTOCOL_VERSION,
    PROTOCOL_VERSIONS_KEY, Plugin, SOCKET_DIR_KEY,
};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use toolhost_proto::json::{json_from_struct, struct_from_json};
use toolhost_proto::plugin::plugin_server::{Plugin as PluginService, PluginServer};
use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest, AgentToolResponse};

/// Why a plugin could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Started by hand rather than by toolhost.
    #[error(
        "this is a toolhost plugin, start it with toolhost (it is started by `toolhost serve` \
         with {MAGIC_COOKIE_KEY}={MAGIC_COOKIE_VALUE} in its environment)"
    )]
    NotUnderToolhost,
    /// toolhost offered protocol versions this SDK does not speak.
    #[error("toolhost offered plugin protocol versions {offered:?}; this plugin speaks version 1")]
    NoCommonProtocol {
        /// What toolhost offered.
        offered: String,
    },
    /// Socket or server trouble.
    #[error("cannot serve the plugin: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("the plugin's gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// One tool call, as the handler sees it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// Unique per call: use it to deduplicate and to correlate logs.
    pub invocation_id: String,
    /// The tool's local name.
    pub name: String,
    /// Arguments, validated by toolhost against the tool's input schema.
    pub arguments: Map<String, Value>,
    /// Who is calling.
    pub context: AgentToolContext,
    /// When toolhost stops waiting for this call, if it said.
    pub deadline: Option<tokio::time::Instant>,
    cancelled: CancellationToken,
}

impl ToolCall {
    /// Completes when the call is cancelled: the agent cancelled it, its
    /// deadline passed, or toolhost went away. The result of a cancelled call
    /// is discarded, so stop work and return.
    pub async fn cancelled(&self) {
        self.cancelled.cancelled().await;
    }

    /// Whether the call has been cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    /// The plugin's data directory (from toolhost), if set.
    #[must_use]
    pub fn data_dir() -> Option<PathBuf> {
        std::env::var_os(DATA_DIR_KEY).map(PathBuf::from)
    }
}

/// A handler's successful answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// Text for the model.
    pub text: String,
    /// Machine-readable result; checked against the declared output schema.
    pub structured: Option<Map<String, Value>>,
    /// The tool ran and failed in a way the model should see.
    pub is_error: bool,
}

impl ToolOutput {
    /// A text result.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// A structured result; the text is its JSON, for clients that only
    /// read text.
    #[must_use]
    pub fn structured(value: Map<String, Value>) -> Self {
        let text = serde_json::to_string(&value).unwrap_or_default();
        Self {
            text,
            structured: Some(value),
            is_error: false,
        }
    }

    /// A structured result with a text of your own.
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = text.into();
        self
    }
}

/// A handler's failure: becomes an `is_error` result whose text the model
/// reads. Write it for the model: what went wrong and what to try instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The text for the model.
    pub message: String,
}

impl ToolError {
    /// An error with this text.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self::new(format!("I/O error: {e}"))
    }
}

struct Service {
    tools: Arc<HashMap<String, Handler>>,
}

/// Parses a `grpc-timeout` header: digits and a unit (H M S m u n).
fn grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl PluginService for Service {
    async fn invoke_agent_tool(
        &self,
        request: tonic::Request<AgentToolRequest>,
    ) -> Result<tonic::Response<AgentToolResponse>, tonic::Status> {
        let deadline = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout)
            .map(|d| tokio::time::Instant::now() + d);
        let req = request.into_inner();
        let Some(handler) = self.tools.get(&req.name).cloned() else {
            return Err(tonic::Status::not_found(format!(
                "this plugin has no tool named {:?}",
                req.name
            )));
        };
        // tonic drops this future when the client cancels or the deadline
        // passes; the guard then cancels the token the handler watches. The
        // handler runs on its own task so it can observe that and clean up.
        let token = CancellationToken::new();
        let guard = token.clone().drop_guard();
        let call = ToolCall {
            invocation_id: req.invocation_id,
            name: req.name,
            arguments: req
                .arguments
                .as_ref()
                .map(json_from_struct)
                .unwrap_or_default(),
            context: req.context.unwrap_or_default(),
            deadline,
            cancelled: token.clone(),
        };
        let task = tokio::spawn(async move {
            match deadline {
                Some(d) => {
                    tokio::select! {
                        r = handler(call) => r,
                        () = async { tokio::time::sleep_until(d).await; token.cancel(); std::future::pending().await } => unreachable!(),
                    }
                }
                None => handler(call).await,
            }
        });
        let outcome = task.await;
        drop(guard.disarm());
        let out = match outcome {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => ToolOutput {
                text: e.message,
                structured: None,
                is_error: true,
            },
            Err(_) => return Err(tonic::Status::internal("the tool handler panicked")),
        };
        Ok(tonic::Response::new(AgentToolResponse {
            text: out.text,
            structured_content: out.structured.as_ref().map(struct_from_json),
            is_error: out.is_error,
        }))
    }
}

/// Removes the socket's private directory when serving ends.
struct SocketDir(PathBuf);

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn socket_dir() -> std::io::Result<SocketDir> {
    // toolhost names a private directory for the socket (and makes it
    // TMPDIR too); older hosts do not, and the system's is used.
    let base = std::env::var_os(SOCKET_DIR_KEY).map_or_else(std::env::temp_dir, PathBuf::from);
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!(
            "kandev-plugin-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
                }
                return Ok(SocketDir(dir));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "cannot create a private socket directory",
    ))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the default actions still end the process.
        _ => std::future::pending().await,
    }
}

pub(crate) async fn serve(plugin: Plugin) -> Result<(), ServeError> {
    if std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        return Err(ServeError::NotUnderToolhost);
    }
    let offered = std::env::var(PROTOCOL_VERSIONS_KEY).unwrap_or_default();
    if !offered.split(',').any(|v| v.trim() == PROTOCOL_VERSION) {
        return Err(ServeError::NoCommonProtocol { offered });
    }
    let dir = socket_dir()?;
    let path = dir.0.join("plugin.sock");
    let listener = tokio::net::UnixListener::bind(&path)?;

    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(HEALTH_SERVICE, tonic_health::ServingStatus::Serving)
        .await;
    let service = PluginServer::new(Service {
        tools: Arc::new(plugin.tools),
    });

    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", toolhost_proto::contract::handshake::line(&path))?;
        out.flush()?;
    }
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(service)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown_signal())
        .await?;
    drop(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(grpc_timeout("5000000u"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("x"), None);
        assert_eq!(grpc_timeout(""), None);
        assert_eq!(grpc_timeout("10Q"), None);
    }
}
