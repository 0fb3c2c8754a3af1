//! The hand-written `ServerHandler`.

use crate::hub::{Hub, Owner};
use crate::listener::ClientGone;
use crate::tokens::{TokenTable, bearer_token, digest};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt as _};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::Binding;

/// How a session's binding is found.
#[derive(Debug, Clone)]
pub enum Identity {
    /// One binding for the whole transport (stdio: the process is the
    /// identity).
    Fixed(Binding),
    /// Per request, from the `Authorization: Bearer` token (HTTP). Looked up
    /// on every request, so a revoked token stops working at once.
    Tokens(Arc<TokenTable>),
}

/// One MCP session (or, for 2026-07-28 clients, one request).
#[derive(Debug, Clone)]
pub struct Handler {
    hub: Arc<Hub>,
    identity: Identity,
    /// The hub's id for this session, from `initialize` on. Shared by the
    /// clones rmcp makes of one session's handler; each session gets its
    /// own from [`Handler::new`].
    admitted: Arc<std::sync::OnceLock<u64>>,
}

impl Handler {
    /// A handler over the hub.
    #[must_use]
    pub fn new(hub: Arc<Hub>, identity: Identity) -> Self {
        Self {
            hub,
            identity,
            admitted: Arc::default(),
        }
    }

    fn binding(&self, extensions: &rmcp::model::Extensions) -> Result<Binding, McpError> {
        let found = match &self.identity {
            Identity::Fixed(b) => Some(b.clone()),
            Identity::Tokens(table) => extensions
                .get::<http::request::Parts>()
                .and_then(|p| bearer_token(&p.headers))
                .and_then(|t| table.resolve(t)),
        };
        found.ok_or_else(|| {
            McpError::invalid_request("this session has no valid binding (bearer token)", None)
        })
    }

    /// Whose quota a session counts against: the token's digest (HTTP), or
    /// the process (stdio).
    fn owner(&self, extensions: &rmcp::model::Extensions) -> Owner {
        match &self.identity {
            Identity::Fixed(_) => [0; 32],
            Identity::Tokens(_) => extensions
                .get::<http::request::Parts>()
                .and_then(|p| bearer_token(&p.headers))
                .map_or([0; 32], digest),
        }
    }
}

/// Cancelled when the HTTP client of this request went away (stdio has no
/// such signal: the session's own end cancels its requests).
fn client_gone(extensions: &rmcp::model::Extensions) -> Option<CancellationToken> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<ClientGone>())
        .map(|g| g.0.clone())
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
        .with_instructions("Tools served by toolhost from installed plugins.")
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let b = self.binding(&cx.extensions)?;
        if self.admitted.get().is_none() {
            let owner = self.owner(&cx.extensions);
            let id = self
                .hub
                .admit_peer(owner, &b.surface, cx.peer.clone())
                .map_err(|refused| McpError::invalid_request(refused.to_string(), None))?;
            let _ = self.admitted.set(id);
        }
        cx.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, _cx: NotificationContext<RoleServer>) {
        if let Some(id) = self.admitted.get() {
            self.hub.mark_ready(*id);
        }
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, cx: SubscriptionContext) -> Result<(), McpError> {
        let extensions = &cx.request_context().extensions;
        let b = self.binding(extensions)?;
        let owner = self.owner(extensions);
        let id = self
            .hub
            .add_subscription(owner, &b.surface, cx.sink().clone())
            .map_err(|refused| McpError::invalid_request(refused.to_string(), None))?;
        // A stream is not activity: it ends after the idle timeout like an
        // idle session, and a client still there listens again.
        let _ = tokio::time::timeout(self.hub.listen_timeout(), cx.cancelled()).await;
        self.hub.remove(id);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let b = self.binding(&cx.extensions)?;
        let catalog = self.hub.pipeline.store().current();
        let tools = self.hub.listings.listing(&catalog, &b.surface);
        Ok(ListToolsResult::with_all_items(tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.map(serde_json::Value::Object);
        let result = self.run_call(&request.name, arguments, &cx).await?;
        Ok(result.into())
    }

    /// rmcp hands over, as a custom request, a `tools/call` whose params do
    /// not fit its types: `arguments` that are a string, an array or a
    /// number. Those are still tool calls: they get the pipeline's
    /// `invalid_arguments` answer and an audit event like any other.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        cx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        if request.method != "tools/call" {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "method not found",
                None,
            ));
        }
        let mut params = match request.params {
            Some(serde_json::Value::Object(p)) => p,
            _ => {
                return Err(McpError::invalid_params(
                    "tools/call needs params {name, arguments}",
                    None,
                ));
            }
        };
        let Some(serde_json::Value::String(name)) = params.remove("name") else {
            return Err(McpError::invalid_params(
                "tools/call needs a tool name (a string)",
                None,
            ));
        };
        let arguments = params.remove("arguments");
        let result = self.run_call(&name, arguments, &cx).await?;
        let value = serde_json::to_value(result)
            .map_err(|_| McpError::internal_error("the result could not be encoded", None))?;
        Ok(CustomResult::new(value))
    }
}

impl Handler {
    /// One tool call through the pipeline, cancelled when the client
    /// cancels or goes away.
    async fn run_call(
        &self,
        name: &str,
        arguments: Option<serde_json::Value>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let b = self.binding(&cx.extensions)?;
        let cancel = cx.ct.child_token();
        let call = self.hub.pipeline.call(&b, name, arguments, cancel.clone());
        let answer = match client_gone(&cx.extensions) {
            None => call.await,
            Some(gone) => {
                // The client's connection dropping cancels the call as an
                // explicit `notifications/cancelled` would, so the plugin
                // is told and the call's slot frees at once.
                tokio::pin!(call);
                tokio::select! {
                    r = &mut call => r,
                    () = gone.cancelled() => {
                        cancel.cancel();
                        call.await
                    }
                }
            }
        };
        match answer {
            Err(unknown) => Err(McpError::invalid_params(unknown.to_string(), None)),
            Ok(r) => {
                let mut result = if r.is_error {
                    CallToolResult::error(vec![ContentBlock::text(r.text)])
                } else {
                    CallToolResult::success(vec![ContentBlock::text(r.text)])
                };
                result.structured_content = r.structured;
                if let Some(meta) = r.meta {
                    result.meta = Some(rmcp::model::MetaObject(meta));
                }
                Ok(result)
            }
        }
    }
}

/// Serves one MCP session on stdin/stdout until the client closes it or
/// `shutdown` fires.
pub async fn serve_stdio(
    hub: Arc<Hub>,
    binding: Binding,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), std::io::Error> {
    let running = Handler::new(hub, Identity::Fixed(binding))
        .serve_with_ct(rmcp::transport::stdio(), shutdown)
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
