//! Every MCP request, measured: a SERVER span (when telemetry is on) and
//! a sample of `mcp.server.operation.duration` (always).
//!
//! [`Traced`] wraps the [`Handler`] as rmcp's `ServerHandler` (rmcp's
//! streamable HTTP service takes nothing else), so each request method
//! the handler answers passes through [`Traced::run`] once: the span
//! covers the whole request and the protocol error that may end it. The span's parent is the agent's: `params._meta`'s
//! `traceparent` first, then the HTTP request's header of that name.
//!
//! What a span may say is limited to what toolhost chose or checked: the
//! method is rmcp's (a custom method is `_OTHER`), the tool name one the
//! catalog holds (an unknown name leaves the span without a target), the
//! session id one of toolhost's own sessions.

// rmcp marks logging deprecated (SEP-2577); `logging/setLevel` is still
// a request of both eras served, so it is traced like the rest.
#![allow(deprecated)]

use crate::handler::Handler;
use crate::operations::Ended;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    DiscoverResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt as _};
use std::future::Future;
use std::time::Instant;
use toolhost_telemetry::{FutureExt as _, ServerRequest, ServerSpan, Transport};

/// The handler, with a span and a duration sample around every request.
#[derive(Debug, Clone)]
pub struct Traced {
    inner: Handler,
    transport: Transport,
}

impl Traced {
    /// Wraps `inner`, serving over `transport`.
    #[must_use]
    pub fn new(inner: Handler, transport: Transport) -> Self {
        Self { inner, transport }
    }

    /// Opens the SERVER span of a request (before the handler takes its
    /// context).
    fn open(
        &self,
        method: &'static str,
        tool: Option<&str>,
        cx: &RequestContext<RoleServer>,
    ) -> (Instant, Option<ServerSpan>) {
        let started = Instant::now();
        if !toolhost_telemetry::enabled() {
            return (started, None);
        }
        let headers = cx
            .extensions
            .get::<http::request::Parts>()
            .map(|p| &p.headers);
        let version = cx.protocol_version().or_else(|| cx.meta.protocol_version());
        let span = request_span(
            self.inner.hub(),
            Request {
                method,
                tool,
                id: &cx.id,
                meta: Some(&cx.meta),
                headers,
                version: version.as_ref().map(|v| v.as_str()),
                transport: self.transport,
            },
        );
        (started, span)
    }

    /// Runs the handler's future for a request inside its span, then
    /// records how it ended.
    async fn run<T>(
        &self,
        method: &'static str,
        (started, span): (Instant, Option<ServerSpan>),
        handled: impl Future<Output = Result<T, McpError>> + Send,
        ended: impl FnOnce(&Result<T, McpError>) -> Ended,
    ) -> Result<T, McpError> {
        let result = match &span {
            Some(s) => handled.with_context(s.context().clone()).await,
            None => handled.await,
        };
        let how = ended(&result);
        self.inner
            .hub()
            .operations
            .observe(method, how, started.elapsed());
        if let Some(s) = span {
            how.end(s);
        }
        result
    }
}

/// What a request's SERVER span is made from, on either path (rmcp's,
/// or the direct path for plain stateless calls).
pub struct Request<'a> {
    /// The JSON-RPC method.
    pub method: &'static str,
    /// The name a `tools/call` asked for: the agent's text, named on the
    /// span only when the catalog holds it.
    pub tool: Option<&'a str>,
    /// The request's JSON-RPC id.
    pub id: &'a rmcp::model::RequestId,
    /// The request's `_meta`, where a trace context may come from.
    pub meta: Option<&'a serde_json::Map<String, serde_json::Value>>,
    /// The HTTP headers, where a trace context may come from too.
    pub headers: Option<&'a http::HeaderMap>,
    /// The MCP protocol version the client speaks.
    pub version: Option<&'a str>,
    /// Stdio or HTTP.
    pub transport: Transport,
}

/// The SERVER span of one request; `None` when telemetry is off.
pub fn request_span(hub: &crate::hub::Hub, r: Request<'_>) -> Option<ServerSpan> {
    if !toolhost_telemetry::enabled() {
        return None;
    }
    let header = |name: &str| {
        r.headers
            .and_then(|h| h.get(name))
            .and_then(|v| v.to_str().ok())
    };
    let meta = |name: &str| {
        r.meta
            .and_then(|m| m.get(name))
            .and_then(serde_json::Value::as_str)
    };
    let parent = match meta(toolhost_telemetry::TRACEPARENT) {
        Some(tp) => toolhost_telemetry::parent_from(Some(tp), meta(toolhost_telemetry::TRACESTATE)),
        None => toolhost_telemetry::parent_from(
            header(toolhost_telemetry::TRACEPARENT),
            header(toolhost_telemetry::TRACESTATE),
        ),
    };
    let catalog = r.tool.map(|_| hub.catalog().current());
    let tool = r
        .tool
        .zip(catalog.as_ref())
        .and_then(|(name, c)| c.get(name))
        .map(|e| e.descriptor.exposed_name.as_str());
    // Only what looks like a session id toolhost makes: the header is the
    // client's text.
    let session = header("mcp-session-id")
        .filter(|s| s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    ServerSpan::start(ServerRequest {
        method: r.method,
        tool,
        request_id: Some(r.id.to_string()).filter(|id| id.len() <= 128),
        session_id: session,
        protocol_version: r.version.filter(|v| v.len() <= 32),
        transport: Some(r.transport),
        parent,
    })
}

/// How any request ended: its error's code, or fine.
fn plain<T>(r: &Result<T, McpError>) -> Ended {
    match r {
        Err(e) => Ended::Rpc(e.code.0),
        Ok(_) => Ended::Ok,
    }
}

/// Every request method the [`Handler`] answers goes through
/// [`Traced::run`]; the rest is handed over as it is.
impl ServerHandler for Traced {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    async fn ping(&self, cx: RequestContext<RoleServer>) -> Result<(), McpError> {
        let opened = self.open("ping", None, &cx);
        self.run("ping", opened, self.inner.ping(cx), plain).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let opened = self.open("initialize", None, &cx);
        self.run(
            "initialize",
            opened,
            self.inner.initialize(request, cx),
            plain,
        )
        .await
    }

    async fn discover(&self, cx: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let opened = self.open("server/discover", None, &cx);
        self.run("server/discover", opened, self.inner.discover(cx), plain)
            .await
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        self.inner.on_initialized(cx).await;
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    /// A stream that lives as long as the client listens: no span (its
    /// length says nothing about the server's work).
    async fn listen(&self, cx: SubscriptionContext) -> Result<(), McpError> {
        self.inner.listen(cx).await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let opened = self.open("tools/list", None, &cx);
        self.run(
            "tools/list",
            opened,
            self.inner.list_tools(request, cx),
            plain,
        )
        .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let opened = self.open("logging/setLevel", None, &cx);
        self.run(
            "logging/setLevel",
            opened,
            self.inner.set_level(request, cx),
            plain,
        )
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let opened = self.open("tools/call", Some(&request.name), &cx);
        self.run(
            "tools/call",
            opened,
            self.inner.call_tool(request, cx),
            |r| match r {
                Ok(CallToolResponse::Complete(c)) if c.is_error == Some(true) => Ended::ToolError,
                r => plain(r),
            },
        )
        .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let opened = self.open("tasks/get", None, &cx);
        self.run("tasks/get", opened, self.inner.get_task(request, cx), plain)
            .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let opened = self.open("tasks/update", None, &cx);
        self.run(
            "tasks/update",
            opened,
            self.inner.update_task(request, cx),
            plain,
        )
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let opened = self.open("tasks/cancel", None, &cx);
        self.run(
            "tasks/cancel",
            opened,
            self.inner.cancel_task(request, cx),
            plain,
        )
        .await
    }

    /// rmcp hands over a `tools/call` whose arguments do not fit its types
    /// as a custom request; any other custom method is `_OTHER` (its name
    /// is the client's text).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let method = if request.method == "tools/call" {
            "tools/call"
        } else {
            "_OTHER"
        };
        let opened = self.open(method, None, &cx);
        self.run(
            method,
            opened,
            self.inner.on_custom_request(request, cx),
            |r| match r {
                Ok(c) if c.0.get("isError").and_then(serde_json::Value::as_bool) == Some(true) => {
                    Ended::ToolError
                }
                r => plain(r),
            },
        )
        .await
    }
}

/// Serves one MCP session on stdin/stdout until the client closes it or
/// `shutdown` fires.
pub async fn serve_stdio(
    hub: std::sync::Arc<crate::hub::Hub>,
    binding: toolhost_pipeline::Binding,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), std::io::Error> {
    let running = Traced::new(
        Handler::new(
            hub,
            crate::handler::Identity::Fixed(std::sync::Arc::new(binding)),
        ),
        toolhost_telemetry::Transport::Stdio,
    )
    .serve_with_ct(
        crate::unmarked::Unmarked(rmcp::transport::async_rw::AsyncRwTransport::new_server(
            tokio::io::stdin(),
            tokio::io::stdout(),
        )),
        shutdown,
    )
    .await
    .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
