//! The hand-written `ServerHandler`.

// rmcp marks logging deprecated (SEP-2577); both protocol eras toolhost
// serves still have `logging/setLevel` and `notifications/message`.
#![allow(deprecated)]

use crate::deliver::{QUESTION_KEY, ToSession};
use crate::hub::{Hub, Owner};
use crate::identity::authorized;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    ElicitResult, GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams,
    InitializeResult, InputResponses, ListToolsResult, LoggingLevel, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscriptionFilter,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolhost_calls::{CallRequest, NotTaken, Stop, TaskOffer, Wants};
use toolhost_net::ClientGone;
use toolhost_pipeline::Binding;

/// How a session's binding is found.
#[derive(Debug, Clone)]
pub enum Identity {
    /// One binding for the whole transport (stdio: the process is the
    /// identity).
    Fixed(Arc<Binding>),
    /// Per request, as the transport's gate established it
    /// ([`crate::identity::Authorized`] in the request's extensions: HTTP looks the
    /// bearer token up on every request, so a revoked token stops working
    /// at once).
    Gated,
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
    /// The level the client set with `logging/setLevel` (2025 era; a
    /// 2026-07-28 request names its own). Per session, like `admitted`.
    log_level: Arc<std::sync::Mutex<Option<LoggingLevel>>>,
    /// The version `initialize` settled on. Per session, like `admitted`.
    negotiated: Arc<std::sync::OnceLock<ProtocolVersion>>,
}

impl Handler {
    /// A handler over the hub.
    #[must_use]
    pub fn new(hub: Arc<Hub>, identity: Identity) -> Self {
        Self {
            hub,
            identity,
            admitted: Arc::default(),
            log_level: Arc::default(),
            negotiated: Arc::default(),
        }
    }

    /// The hub this handler serves from.
    pub(crate) fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    fn binding(&self, extensions: &rmcp::model::Extensions) -> Result<Arc<Binding>, McpError> {
        let found = match &self.identity {
            Identity::Fixed(b) => Some(b.clone()),
            Identity::Gated => authorized(extensions).map(|a| a.binding.clone()),
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
            Identity::Gated => authorized(extensions).map_or([0; 32], |a| a.owner),
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
        ServerConfig::new({
            #[allow(deprecated)] // logging stays part of MCP for the eras toolhost serves
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build()
        })
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
        let mut result = self.negotiate_initialize(&request)?;
        // Tasks are hosted for 2026-07-28 clients only; the 2025 era's
        // experimental tasks are not implemented, and its calls are direct.
        if let Some(extensions) = result.capabilities.extensions.as_mut() {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                result.capabilities.extensions = None;
            }
        }
        result.instructions = Some(self.hub.listing.instructions_for(&b.surface).to_string());
        let _ = self.negotiated.set(result.protocol_version.clone());
        Ok(result)
    }

    async fn discover(
        &self,
        cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        let b = self.binding(&cx.extensions)?;
        let info = self
            .get_info()
            .with_instructions(self.hub.listing.instructions_for(&b.surface).to_string());
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn on_initialized(&self, cx: NotificationContext<RoleServer>) {
        if let Some(id) = self.admitted.get() {
            self.hub.mark_ready(*id);
        }
        // The transport's record of this session (HTTP sessions only): what
        // a call answered outside rmcp owes the client besides its result.
        let facts = cx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Arc<crate::facts::SessionFacts>>());
        if let (Some(facts), Some(info), Some(version)) =
            (facts, cx.peer.peer_info(), self.negotiated.get())
            && *version < ProtocolVersion::V_2026_07_28
        {
            let can_ask = crate::facts::can_elicit(&info.capabilities);
            facts.settle(can_ask, Arc::clone(&self.log_level));
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
        // Over HTTP its place was taken before the acknowledgement
        // (the HTTP transport's admission, in `toolhost-http`); on stdio there is one client.
        let ticket = extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Arc<crate::hub::ListenTicket>>())
            .cloned();
        let id = match &ticket {
            Some(t) => self.hub.open_reserved(t, cx.sink().clone()),
            None => self
                .hub
                .add_subscription(owner, &b.surface, cx.sink().clone())
                .map_err(|refused| McpError::invalid_request(refused.to_string(), None))?,
        };
        // A stream is not activity: it ends after the idle timeout like an
        // idle session, and a client still there listens again.
        let _ = tokio::time::timeout(self.hub.listen_timeout(), cx.cancelled()).await;
        self.hub.remove(id);
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let b = self.binding(&cx.extensions)?;
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (page, next, shown) = self.hub.listing.page(&b.surface, cursor)?;
        self.hub.listed(&b, shown);
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        if is_modern(&cx) {
            // A listing is the caller's surface's (bindings filter it):
            // cacheable by this caller only, for the configured time.
            result = result
                .with_ttl_ms(self.hub.listing.view().list_ttl_ms)
                .with_cache_scope(rmcp::model::CacheScope::Private);
        }
        Ok(result)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(request.level);
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        match request.request_state {
            Some(handle) => {
                let arguments = request.arguments.map(serde_json::Value::Object);
                self.resume_call(
                    &request.name,
                    &handle,
                    arguments,
                    request.input_responses,
                    &cx,
                )
                .await
            }
            None => {
                let arguments = request.arguments.map(serde_json::Value::Object);
                // Tasks are hosted for 2026-07-28 clients; a 2025-era call
                // is always direct.
                let tasks = if is_modern(&cx) {
                    let declared = cx.client_capabilities().is_some_and(|c| c.supports_tasks());
                    TaskOffer::Offered { declared }
                } else {
                    TaskOffer::NotOffered
                };
                self.run_call(request.name.into(), arguments, tasks, &cx)
                    .await
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.task_owner(&cx)
            .and_then(|owner| crate::hosted::get(&self.hub, &owner, &request.task_id))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = self.task_owner(&cx)?;
        crate::hosted::update(
            &self.hub,
            &owner,
            &request.task_id,
            &request.input_responses,
        )
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = self.task_owner(&cx)?;
        crate::hosted::cancel(&self.hub, &owner, &request.task_id)
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
        let CallToolResponse::Complete(result) = self
            .run_call(name, arguments, TaskOffer::NotOffered, &cx)
            .await?
        else {
            // Arguments of the wrong type never reach a plugin, so never
            // reach a question.
            return Err(McpError::internal_error("the call did not complete", None));
        };
        let value = serde_json::to_value(result)
            .map_err(|_| McpError::internal_error("the result could not be encoded", None))?;
        Ok(CustomResult::new(value))
    }
}

/// Whether the request comes from a 2026-07-28 (or later) client: no
/// session, questions as input-required results, the log level per request.
fn is_modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// Whether the client can answer a form question.
fn can_elicit(cx: &RequestContext<RoleServer>) -> bool {
    cx.client_capabilities()
        .is_some_and(|c| crate::facts::can_elicit(&c))
}

impl Handler {
    /// Whose tasks a `tasks/*` request may see: its token's. A 2025-era
    /// session has no tasks (the era's experimental tasks are not
    /// implemented), so the methods are unknown to it.
    fn task_owner(&self, cx: &RequestContext<RoleServer>) -> Result<Owner, McpError> {
        if !is_modern(cx) {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "tasks are served to 2026-07-28 clients only",
                None,
            ));
        }
        let binding = self.binding(&cx.extensions)?;
        Ok(toolhost_calls::callers::task_owner(
            &self.owner(&cx.extensions),
            &binding,
        ))
    }

    /// What this request's client can take.
    fn wants(&self, cx: &RequestContext<RoleServer>) -> Wants {
        let level = if is_modern(cx) {
            cx.meta.log_level()
        } else {
            self.log_level.lock().ok().and_then(|l| *l)
        };
        Wants {
            progress: cx.meta.get_progress_token().is_some(),
            log_level: level.map(crate::deliver::pipeline_level),
            can_ask: can_elicit(cx),
        }
    }

    /// One new tool call, hosted: cancelled when the client cancels or
    /// goes away.
    async fn run_call(
        &self,
        name: String,
        arguments: Option<serde_json::Value>,
        tasks: TaskOffer,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let request = CallRequest {
            binding: self.binding(&cx.extensions)?,
            name,
            arguments,
            wants: self.wants(cx),
            owner: self.owner(&cx.extensions),
            tasks,
        };
        let modern = is_modern(cx);
        let to = ToSession {
            peer: &cx.peer,
            progress_token: cx.meta.get_progress_token(),
            modern,
        };
        // The client's connection dropping cancels the call as an explicit
        // `notifications/cancelled` would, so the plugin is told and the
        // call's slot frees at once.
        let gone = client_gone(&cx.extensions);
        let stop = Stop {
            request: &cx.ct,
            gone: gone.as_ref(),
        };
        let hosted = self.hub.host.call(request, &to, stop).await;
        crate::hosted::response(hosted, modern)
    }

    /// A 2026-07-28 client's answer to a question: the call parked under
    /// `handle` takes the answer and goes on, driven by this request.
    async fn resume_call(
        &self,
        name: &str,
        handle: &str,
        arguments: Option<serde_json::Value>,
        responses: Option<InputResponses>,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let b = self.binding(&cx.extensions)?;
        let owner = self.owner(&cx.extensions);
        let waiting = match self
            .hub
            .host
            .take_parked(handle, &owner, name, arguments.as_ref())
        {
            Ok(waiting) => waiting,
            // The answer belongs to the call that asked, with its
            // arguments: a retry with others is a new call (and asks its
            // own questions, an approval among them).
            Err(NotTaken::OtherArguments) => {
                let declared = cx.client_capabilities().is_some_and(|c| c.supports_tasks());
                return self
                    .run_call(name.into(), arguments, TaskOffer::Offered { declared }, cx)
                    .await;
            }
            Err(NotTaken::Unknown) => {
                return Err(McpError::invalid_params(
                    "requestState names no call of this tool waiting for an answer \
                     (unknown, expired, or already answered)",
                    None,
                ));
            }
        };
        let answer = responses
            .as_ref()
            .and_then(|r| r.get(QUESTION_KEY))
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
        let Some(answer) = answer else {
            self.hub.host.put_back(handle.to_owned(), waiting);
            return Err(McpError::invalid_params(
                format!(
                    "inputResponses must hold the answer to the question under {QUESTION_KEY:?} (an elicitation result)"
                ),
                None,
            ));
        };
        let to = ToSession {
            peer: &cx.peer,
            progress_token: cx.meta.get_progress_token(),
            modern: true,
        };
        let gone = client_gone(&cx.extensions);
        let stop = Stop {
            request: &cx.ct,
            gone: gone.as_ref(),
        };
        let answer = crate::deliver::answer_of(answer);
        let hosted = self
            .hub
            .host
            .resume(waiting, answer, b.is_active(), &to, stop)
            .await;
        crate::hosted::response(hosted, true)
    }
}
