//! A test MCP client that records progress and log messages and answers
//! questions as told, in either protocol era (for the protocol-2 suites).

#![allow(clippy::unwrap_used, clippy::expect_used, deprecated)] // a test helper; rmcp marks logging deprecated

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, RequestContext,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData as McpError, RoleClient, ServiceExt as _};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the test user answers to a question.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Accept with these values.
    Accept(Value),
    /// Decline.
    Decline,
    /// Cancel.
    Cancel,
    /// Never answers (until the call is dropped).
    Hold,
}

/// A client that records progress and log messages and answers questions
/// as told.
#[derive(Clone)]
pub struct Asker {
    can_elicit: bool,
    /// Declares the Tasks extension (`io.modelcontextprotocol/tasks`).
    tasks: bool,
    reply: Arc<Mutex<Reply>>,
    /// Questions asked so far.
    pub asked: Arc<AtomicUsize>,
    /// The questions, as JSON.
    pub questions: Arc<Mutex<Vec<Value>>>,
    /// Progress notifications received.
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// Log messages received.
    pub logs: Arc<Mutex<Vec<LoggingMessageNotificationParam>>>,
}

impl Asker {
    /// A client that declares form elicitation when `can_elicit`.
    #[must_use]
    pub fn new(can_elicit: bool) -> Self {
        Self {
            can_elicit,
            tasks: false,
            reply: Arc::new(Mutex::new(Reply::Decline)),
            asked: Arc::default(),
            questions: Arc::default(),
            progress: Arc::default(),
            logs: Arc::default(),
        }
    }

    /// The same client declaring the Tasks extension too.
    #[must_use]
    pub fn with_tasks(mut self) -> Self {
        self.tasks = true;
        self
    }

    /// What it answers from now on.
    pub fn answer(&self, r: Reply) {
        *self.reply.lock().unwrap() = r;
    }
}

impl rmcp::ClientHandler for Asker {
    fn get_info(&self) -> ClientConfig {
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        if self.can_elicit {
            let mut e = ElicitationCapability::new();
            e.form = Some(FormElicitationCapability::default());
            caps.elicitation = Some(e);
        }
        ClientConfig::new(caps, Implementation::new("asker", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.questions
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).unwrap());
        self.asked.fetch_add(1, Ordering::SeqCst);
        let reply = self.reply.lock().unwrap().clone();
        Ok(match reply {
            Reply::Accept(v) => ElicitResult::new(ElicitationAction::Accept).with_content(v),
            Reply::Decline => ElicitResult::new(ElicitationAction::Decline),
            Reply::Cancel => ElicitResult::new(ElicitationAction::Cancel),
            Reply::Hold => std::future::pending().await,
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params);
    }
}

/// A connected [`Asker`].
pub type Client = rmcp::service::RunningService<RoleClient, Asker>;

#[derive(Clone, Copy, Debug, PartialEq)]
/// The MCP protocol era a client speaks.
pub enum Era {
    /// 2025-11-25: sessions, `initialize`.
    Sessions,
    /// 2026-07-28: no session, per-request metadata.
    Modern,
}

/// Both eras.
pub const ERAS: [Era; 2] = [Era::Sessions, Era::Modern];

/// Connects `asker` over streamable HTTP with [`crate::TOKEN`], in `era`.
pub async fn connect(url: &str, asker: Asker, era: Era) -> Client {
    connect_as(url, crate::TOKEN, asker, era).await
}

/// Connects `asker` over streamable HTTP with `token`, in `era`.
pub async fn connect_as(url: &str, token: &str, asker: Asker, era: Era) -> Client {
    toolhost_registry::use_ring_for_tls();
    let t = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    let c = match era {
        Era::Sessions => asker.serve(t).await,
        Era::Modern => {
            asker
                .serve_with_lifecycle(
                    t,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
        }
    };
    c.unwrap_or_else(|e| panic!("cannot connect ({era:?}): {e}"))
}

/// `tools/call` params for `name` with `args` (a JSON object; anything else
/// sends none).
#[must_use]
pub fn params(name: &str, args: Value) -> rmcp::model::CallToolRequestParams {
    rmcp::model::CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

/// One call, answered within 30 s, or a panic naming the tool.
pub async fn call(
    c: &Client,
    p: rmcp::model::CallToolRequestParams,
) -> rmcp::model::CallToolResult {
    let name = p.name.clone();
    let wait = std::time::Duration::from_secs(30);
    match tokio::time::timeout(wait, c.call_tool(p)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => panic!("{name}: {e}"),
        Err(_) => panic!("{name}: no answer within {wait:?}"),
    }
}

/// The text blocks of a result.
#[must_use]
pub fn texts(r: &rmcp::model::CallToolResult) -> Vec<String> {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}
