//! The plugin side of the handshake and the gRPC services.

use crate::call::Link;
use crate::call::ToolCall;
use crate::output::{ToolError, ToolOutput};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use toolhost_proto::contract::{
    CALL_TOKEN_KEY, CALL_TOKEN_METADATA, HEALTH_SERVICE, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE,
    PROTOCOL_VERSION, PROTOCOL_VERSION_2, PROTOCOL_VERSIONS_KEY, SOCKET_DIR_KEY,
};
use toolhost_proto::json::{json_from_struct, struct_from_json};
use toolhost_proto::plugin::plugin_server::{Plugin as PluginService, PluginServer};
use toolhost_proto::plugin::{AgentToolRequest, AgentToolResponse};
use toolhost_proto::plugin_v2::plugin_server::{
    Plugin as StreamService, PluginServer as StreamServer,
};
use toolhost_proto::plugin_v2::{self as wire, host_event, plugin_event};

/// A tool's handler, boxed: what `Plugin::tool` stores.
pub(crate) type Handler = Arc<dyn Fn(ToolCall) -> BoxFuture + Send + Sync>;

/// A handler's answer, boxed.
pub(crate) type BoxFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ToolOutput, ToolError>> + Send>>;

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
    #[error("toolhost offered plugin protocol versions {offered:?}; this plugin speaks 1 and 2")]
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

struct Service {
    tools: Arc<HashMap<String, Handler>>,
    /// The shapes the code states (`Plugin::shape`), for `Describe`.
    shapes: Vec<wire::ToolShape>,
    /// The token toolhost presents on every call; `None` under a toolhost
    /// that sends none (before call tokens), when nothing is checked.
    call_token: Option<Arc<str>>,
}

impl Service {
    /// Refuses a call that does not carry this process's call token: the
    /// socket is reachable by other processes of the same user (another
    /// plugin among them), and only toolhost has the token.
    fn check_caller<T>(&self, request: &tonic::Request<T>) -> Result<(), tonic::Status> {
        let Some(expected) = &self.call_token else {
            return Ok(());
        };
        let given = request
            .metadata()
            .get(CALL_TOKEN_METADATA)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if constant_time_eq(given, expected.as_bytes()) {
            Ok(())
        } else {
            Err(tonic::Status::unauthenticated(
                "this plugin answers only the toolhost that started it",
            ))
        }
    }
}

/// Equal, in time that does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads (and deletes) the call token toolhost left for this process.
fn call_token() -> Result<Option<Arc<str>>, ServeError> {
    let Some(path) = std::env::var_os(CALL_TOKEN_KEY) else {
        return Ok(None);
    };
    let token = std::fs::read_to_string(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(Some(Arc::from(token.trim())))
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

fn deadline_of<T>(request: &tonic::Request<T>) -> Option<tokio::time::Instant> {
    request
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(grpc_timeout)
        .map(|d| tokio::time::Instant::now() + d)
}

/// Runs a handler on its own task (so it can observe cancellation and
/// clean up), cancelling `token` when the deadline passes. A panic comes
/// back as `Err`.
pub(crate) async fn run_handler(
    handler: Handler,
    call: ToolCall,
    token: CancellationToken,
    span: Option<crate::trace::Context>,
) -> Result<ToolOutput, tonic::Status> {
    let deadline = call.deadline;
    let current = span.clone();
    let running = RunningHandler::begin();
    let task = tokio::spawn(crate::trace::within(current, async move {
        let _running = running;
        match deadline {
            Some(d) => {
                tokio::select! {
                    r = handler(call) => r,
                    () = async { tokio::time::sleep_until(d).await; token.cancel(); std::future::pending().await } => unreachable!(),
                }
            }
            None => handler(call).await,
        }
    }));
    if let Some(d) = deadline {
        tokio::spawn(watch_past_deadline(task.abort_handle(), d));
    }
    // Ends the span however the call ends, also when toolhost drops it.
    let mut ending = SpanEnd(span, Err("cancelled"));
    let out = match task.await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(ToolError { message })) => Ok(ToolOutput {
            is_error: true,
            ..ToolOutput::text(message)
        }),
        Err(_) => Err(tonic::Status::internal("the tool handler panicked")),
    };
    ending.1 = match &out {
        Ok(o) => Ok(o.is_error),
        Err(_) => Err("panic"),
    };
    out
}

/// How long a handler may go on past its deadline (it was told, through
/// its cancellation token) before it is dropped; and, once dropped, how
/// long it may take to go before the plugin reports itself unhealthy.
const HUNG_GRACE: Duration = Duration::from_secs(5);

/// How long a plugin that is stopping waits for its handlers still running
/// (each told of its cancellation when its call's connection went) to
/// finish, before the process ends under them. Well inside toolhost's
/// stop grace (5 s by default), after which it kills the process.
const HANDLERS_GRACE: Duration = Duration::from_secs(1);

/// Handlers running now, each on a task of its own.
static RUNNING_HANDLERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Woken when the last running handler ends.
static HANDLERS_DONE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Counts one handler as running for as long as it lives: its task ends,
/// or is aborted, or is dropped with the runtime.
struct RunningHandler;

impl RunningHandler {
    fn begin() -> Self {
        RUNNING_HANDLERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self
    }
}

impl Drop for RunningHandler {
    fn drop(&mut self) {
        if RUNNING_HANDLERS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            HANDLERS_DONE.notify_waiters();
        }
    }
}

/// Completes when no handler is running.
async fn handlers_done() {
    loop {
        let done = HANDLERS_DONE.notified();
        tokio::pin!(done);
        // Registered before the count is read, so an end in between wakes it.
        done.as_mut().enable();
        if RUNNING_HANDLERS.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        done.await;
    }
}

/// The health reporter, for a handler that hangs.
static HEALTH: std::sync::OnceLock<tonic_health::server::HealthReporter> =
    std::sync::OnceLock::new();

/// A handler still running [`HUNG_GRACE`] after its deadline is dropped (at
/// its next `.await`); one that is still there after another grace is
/// blocked where no `.await` comes (a blocking call on an async worker),
/// holding a thread: the plugin reports itself unhealthy, so toolhost
/// restarts it instead of letting such threads pile up.
async fn watch_past_deadline(task: tokio::task::AbortHandle, deadline: tokio::time::Instant) {
    tokio::time::sleep_until(deadline + HUNG_GRACE).await;
    if task.is_finished() {
        return;
    }
    task.abort();
    tokio::time::sleep(HUNG_GRACE).await;
    if task.is_finished() {
        return;
    }
    eprintln!(
        "a tool handler is still running {}s past its deadline, blocked where it cannot be stopped; reporting unhealthy so toolhost restarts this plugin (run blocking work with tokio::task::spawn_blocking)",
        (HUNG_GRACE * 2).as_secs()
    );
    if let Some(reporter) = HEALTH.get() {
        reporter
            .set_service_status(HEALTH_SERVICE, tonic_health::ServingStatus::NotServing)
            .await;
    }
}

/// A call's span, ended when dropped with what is known by then.
struct SpanEnd(Option<crate::trace::Context>, Result<bool, &'static str>);

impl Drop for SpanEnd {
    fn drop(&mut self) {
        crate::trace::end(self.0.take(), self.1);
    }
}

impl Service {
    fn handler(&self, name: &str) -> Result<Handler, tonic::Status> {
        self.tools.get(name).cloned().ok_or_else(|| {
            tonic::Status::not_found(format!("this plugin has no tool named {name:?}"))
        })
    }
}

pub(crate) fn tool_call(
    req: AgentToolRequest,
    deadline: Option<tokio::time::Instant>,
    cancelled: CancellationToken,
    link: Option<Arc<Link>>,
) -> ToolCall {
    ToolCall {
        invocation_id: req.invocation_id,
        name: req.name,
        arguments: req
            .arguments
            .as_ref()
            .map(json_from_struct)
            .unwrap_or_default(),
        context: req.context.unwrap_or_default(),
        deadline,
        cancelled,
        link,
    }
}

#[tonic::async_trait]
impl PluginService for Service {
    async fn invoke_agent_tool(
        &self,
        request: tonic::Request<AgentToolRequest>,
    ) -> Result<tonic::Response<AgentToolResponse>, tonic::Status> {
        self.check_caller(&request)?;
        let deadline = deadline_of(&request);
        let (metadata, _, req) = request.into_parts();
        let handler = self.handler(&req.name)?;
        let span = crate::trace::call_span(&metadata, &req.name, &req.invocation_id);
        // tonic drops this future when the client cancels or the deadline
        // passes; the guard then cancels the token the handler watches.
        let token = CancellationToken::new();
        let guard = token.clone().drop_guard();
        let call = tool_call(req, deadline, token.clone(), None);
        let out = run_handler(handler, call, token, span).await;
        drop(guard.disarm());
        Ok(tonic::Response::new(v1_response(&out?)))
    }
}

/// A handler's answer as protocol 1 carries it.
pub(crate) fn v1_response(out: &ToolOutput) -> AgentToolResponse {
    AgentToolResponse {
        text: out.v1_text(),
        structured_content: out.structured.as_ref().map(struct_from_json),
        is_error: out.is_error,
    }
}

type EventStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<wire::PluginEvent, tonic::Status>> + Send>,
>;

#[tonic::async_trait]
impl StreamService for Service {
    type InvokeStream = EventStream;

    async fn describe(
        &self,
        request: tonic::Request<wire::DescribeRequest>,
    ) -> Result<tonic::Response<wire::DescribeResponse>, tonic::Status> {
        self.check_caller(&request)?;
        let mut tools: Vec<String> = self.tools.keys().cloned().collect();
        tools.sort();
        Ok(tonic::Response::new(wire::DescribeResponse {
            tools,
            sdk: concat!("toolhost-plugin-sdk ", env!("CARGO_PKG_VERSION")).to_owned(),
            // Tools registered with their types (schemars) state their shapes.
            shapes: self.shapes.clone(),
        }))
    }

    async fn invoke(
        &self,
        request: tonic::Request<tonic::Streaming<wire::HostEvent>>,
    ) -> Result<tonic::Response<EventStream>, tonic::Status> {
        self.check_caller(&request)?;
        let deadline = deadline_of(&request);
        let (metadata, _, mut inbound) = request.into_parts();
        let start = match inbound.message().await? {
            Some(wire::HostEvent {
                event: Some(host_event::Event::Start(s)),
            }) => s,
            _ => {
                return Err(tonic::Status::invalid_argument(
                    "the first event of a call must be `start`",
                ));
            }
        };
        let req = start.request.clone().unwrap_or_default();
        let handler = self.handler(&req.name)?;
        let span = crate::trace::call_span(&metadata, &req.name, &req.invocation_id);
        let running = run_call(handler, start, deadline, span, None);
        let (link, reader_token) = (running.link, running.token);

        // toolhost's side: answers to questions; an error means the call
        // was reset (cancelled, or past its deadline).
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = inbound.message() => match m {
                        Ok(Some(wire::HostEvent { event: Some(host_event::Event::Answer(a)) })) => link.answered(a),
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => {
                            reader_token.cancel();
                            break;
                        }
                    },
                    () = reader_token.cancelled() => break,
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(running.events),
        )))
    }
}

/// One protocol-2 call on its way: the events for toolhost, the link its
/// answers go through, and the token that cancels it.
pub(crate) struct RunningCall {
    pub(crate) events: tokio::sync::mpsc::Receiver<Result<wire::PluginEvent, tonic::Status>>,
    pub(crate) link: Arc<Link>,
    pub(crate) token: CancellationToken,
}

/// Starts one protocol-2 call of `handler`: the served stream and the test
/// harness run calls the same way, and differ only in where the events go
/// and the answers come from.
pub(crate) fn run_call(
    handler: Handler,
    start: wire::Start,
    deadline: Option<tokio::time::Instant>,
    span: Option<crate::trace::Context>,
    on: Option<&tokio::runtime::Handle>,
) -> RunningCall {
    let req = start.request.clone().unwrap_or_default();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let link = Arc::new(Link::new(tx.clone(), &start));
    let flush = Arc::clone(&link);
    let token = CancellationToken::new();
    let call = tool_call(req, deadline, token.clone(), Some(Arc::clone(&link)));
    let running_token = token.clone();
    let task = async move {
        let outcome = tokio::select! {
            r = run_handler(handler, call, token.clone(), span) => r,
            // toolhost dropped the call: stop the handler.
            () = tx.closed() => {
                token.cancel();
                return;
            }
        };
        // The last progress update goes out before the result.
        flush.flush_progress().await;
        let event = outcome.map(|out| wire::PluginEvent {
            event: Some(plugin_event::Event::Result(out.into_wire())),
        });
        let _ = tx.send(event).await;
        token.cancel();
    };
    // The test harness runs handlers on a runtime of its own (see
    // `write_rule`); the plugin on the one it serves from.
    match on {
        Some(runtime) => drop(runtime.spawn(task)),
        None => drop(tokio::spawn(task)),
    }
    RunningCall {
        events: rx,
        link,
        token: running_token,
    }
}

/// Removes the socket's private directory when serving ends.
/// Where the socket is made, and whether this process made the folder (and
/// so removes it).
struct SocketDir(PathBuf, bool);

impl Drop for SocketDir {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn socket_dir() -> std::io::Result<SocketDir> {
    // toolhost names a private directory for the socket, fresh for this
    // process, where a plugin may make its socket and nothing else: the
    // socket goes straight in. Older hosts name none, and a private folder
    // is made in the system's temporary directory.
    if let Some(dir) = std::env::var_os(SOCKET_DIR_KEY) {
        return Ok(SocketDir(PathBuf::from(dir), false));
    }
    let base = std::env::temp_dir();
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
                return Ok(SocketDir(dir, true));
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

pub(crate) async fn serve(
    tools: HashMap<String, Handler>,
    shapes: Vec<wire::ToolShape>,
) -> Result<(), ServeError> {
    if std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        return Err(ServeError::NotUnderToolhost);
    }
    // Read (and delete) the configuration and call-token files now, before
    // any handler or child process could.
    let _ = crate::config::config();
    let call_token = call_token()?;
    // The highest version offered that this SDK speaks; toolhost offers
    // exactly the one the manifest declares.
    let offered = std::env::var(PROTOCOL_VERSIONS_KEY).unwrap_or_default();
    let speaks = |v: &str| offered.split(',').any(|o| o.trim() == v);
    let version = if speaks(PROTOCOL_VERSION_2) {
        PROTOCOL_VERSION_2
    } else if speaks(PROTOCOL_VERSION) {
        PROTOCOL_VERSION
    } else {
        return Err(ServeError::NoCommonProtocol { offered });
    };
    let dir = socket_dir()?;
    let path = dir.0.join("plugin.sock");
    let listener = tokio::net::UnixListener::bind(&path)?;

    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(HEALTH_SERVICE, tonic_health::ServingStatus::Serving)
        .await;
    let _ = HEALTH.set(reporter);
    let service = Service {
        tools: Arc::new(tools),
        shapes: Vec::new(),
        call_token,
    };
    let streaming = StreamServer::new(Service {
        tools: Arc::clone(&service.tools),
        shapes,
        call_token: service.call_token.clone(),
    });
    let service = PluginServer::new(service);

    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}",
            toolhost_proto::contract::handshake::line_for(version, &path)
        )?;
        out.flush()?;
    }
    let export = crate::trace::install_from_env();
    let served = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(service)
        .add_service(streaming)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown_signal())
        .await;
    // Every connection has ended, so every call in flight was cancelled;
    // its handler, on a task of its own, is told so and may clean up. The
    // runtime would drop those tasks as the process returns from here,
    // before they ran: let them finish first, for a moment.
    let _ = tokio::time::timeout(HANDLERS_GRACE, handlers_done()).await;
    if let Some(e) = export {
        // The last spans go out before the process ends.
        let _ = tokio::task::spawn_blocking(move || e.shutdown()).await;
    }
    served?;
    drop(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a stopping plugin does after its connections ended: the call
    /// dropped with its connection (its token cancelled), then a wait for
    /// the handlers, in which this one sees the cancellation and finishes.
    #[tokio::test]
    async fn a_stopping_plugin_lets_a_cancelled_handler_finish() {
        let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let started = Arc::new(tokio::sync::Notify::new());
        let (seen, running) = (Arc::clone(&cleaned), Arc::clone(&started));
        let handler: Handler = Arc::new(move |call: ToolCall| {
            let (seen, running) = (Arc::clone(&seen), Arc::clone(&running));
            Box::pin(async move {
                running.notify_one();
                call.cancelled().await;
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(ToolError::new("cancelled"))
            })
        });
        let token = CancellationToken::new();
        let call = tool_call(AgentToolRequest::default(), None, token.clone(), None);
        let in_flight = tokio::spawn(run_handler(handler, call, token.clone(), None));
        started.notified().await;
        // The connection went: the call's future is dropped, its guard
        // cancels the token.
        in_flight.abort();
        token.cancel();
        tokio::time::timeout(Duration::from_secs(10), handlers_done())
            .await
            .expect("the handlers finished");
        assert!(cleaned.load(std::sync::atomic::Ordering::SeqCst));
    }

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
