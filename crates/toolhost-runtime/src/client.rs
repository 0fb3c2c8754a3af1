//! The per-plugin gRPC client: one call, one deadline, no retry.
//!
//! Protocol 1 is one unary `InvokeAgentTool` ([`PluginClient::invoke_in`]).
//! Protocol 2 is one bidirectional stream per call
//! ([`PluginClient::open_stream`]): the host's `start` and `answer`s go
//! one way, the plugin's progress, logs, questions and result the other.
//! Either way a call is one attempt: nothing here retries.

use crate::slots::{CallSlot, CallSlots};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use toolhost_proto::answer::ToolAnswer;
use toolhost_proto::plugin::AgentToolRequest;
use toolhost_proto::plugin_v2::plugin_client::PluginClient as GrpcV2;
use toolhost_proto::plugin_v2::{HostEvent, PluginEvent, host_event};
use toolhost_proto::request::ToolRequestRef;

/// A cheap, cloneable handle to one ready plugin process. It goes stale when
/// that process stops: calls made through a stale handle fail at once as
/// [`InvokeError::Unavailable`].
#[derive(Clone, Debug)]
pub struct PluginClient {
    plugin: Arc<str>,
    pid: u32,
    /// Protocol 1's calls: unary, straight over HTTP/2 (`crate::unary`).
    direct: Arc<crate::unary::DirectLink>,
    /// Protocol 2's streams, `Describe` and health probes; none for
    /// protocol 1, whose calls and probes share the direct link's one
    /// connection (a second would cost the daemon a descriptor per plugin).
    channel: Option<Channel>,
    /// The plugin protocol version the process speaks (1 or 2).
    protocol: u32,
    /// Cancelled when the process this handle talks to has stopped.
    gone: CancellationToken,
    /// Calls in flight on this process (shared by every clone).
    in_flight: CallSlots,
    /// Calls that hold this handle before (or while) they take a place
    /// among the calls in flight: a drain waits for them too.
    held: CallSlots,
    /// The token this process answers calls with (none when it cannot be
    /// a header value, which a process's own token always can).
    call_token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    /// The audiences its calls carry tokens for (the spec's, granted).
    audiences: Arc<[String]>,
}

/// What a plugin process says its code implements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Described {
    /// Local tool names with a handler, sorted.
    pub tools: Vec<String>,
    /// The SDK and its version, as the plugin tells it (made safe to log).
    pub sdk: String,
    /// The shapes the code states for its tools, when they were asked for
    /// (the supervisor's `keep_shapes`); a serving daemon does not keep
    /// them.
    pub shapes: std::sync::Arc<[ToolShape]>,
}

/// One tool's shape as the plugin's code declares it (its types, through
/// its SDK). The plugin's word: bounded when read, and never served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolShape {
    /// The tool's local name.
    pub name: String,
    /// The input schema (a JSON object).
    pub input: serde_json::Value,
    /// The output schema, when the code declares one.
    pub output: Option<serde_json::Value>,
    /// The code's description of the tool (made safe to print).
    pub description: String,
}

/// The largest schema read from a `Describe` answer, as JSON text: the
/// manifest's own cap on a schema file.
pub const MAX_SHAPE_SCHEMA_BYTES: usize = 256 * 1024;

/// The most schema text read from one `Describe` answer.
pub const MAX_SHAPES_BYTES: usize = 8 * 1024 * 1024;

/// The shapes of a `Describe` answer that can be read: named tools among
/// `tools`, schemas that are JSON objects within the caps; the rest are
/// left out (a later comparison then reports the tool as not stated).
fn read_shapes(
    shapes: Vec<toolhost_proto::plugin_v2::ToolShape>,
    tools: &[String],
) -> Vec<ToolShape> {
    let mut budget = MAX_SHAPES_BYTES;
    let mut out: Vec<ToolShape> = Vec::new();
    for s in shapes.into_iter().take(1000) {
        let cost = s.input_schema_json.len() + s.output_schema_json.len();
        if s.input_schema_json.len() > MAX_SHAPE_SCHEMA_BYTES
            || s.output_schema_json.len() > MAX_SHAPE_SCHEMA_BYTES
            || cost > budget
            || tools.binary_search(&s.name).is_err()
            || out.iter().any(|o| o.name == s.name)
        {
            continue;
        }
        budget -= cost;
        let object = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .filter(serde_json::Value::is_object)
        };
        let Some(input) = object(&s.input_schema_json) else {
            continue;
        };
        let output = if s.output_schema_json.is_empty() {
            None
        } else {
            match object(&s.output_schema_json) {
                Some(o) => Some(o),
                None => continue,
            }
        };
        out.push(ToolShape {
            name: s.name,
            input,
            output,
            description: toolhost_base::log_safe(&s.description, 4096).into_owned(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The shapes of a `Describe` answer, read as a daemon reads them (the
/// harness compares an in-process plugin's with its manifest this way).
#[must_use]
pub fn shapes_of(answer: toolhost_proto::plugin_v2::DescribeResponse) -> Vec<ToolShape> {
    let mut tools = answer.tools;
    tools.sort();
    read_shapes(answer.shapes, &tools)
}

impl Described {
    /// Declared tools without a handler, and handlers for tools not
    /// declared (which no agent can reach).
    #[must_use]
    pub fn differences<'a>(
        &self,
        declared: impl IntoIterator<Item = &'a str>,
    ) -> (Vec<String>, Vec<String>) {
        let declared: std::collections::BTreeSet<&str> = declared.into_iter().collect();
        let implemented: std::collections::BTreeSet<&str> =
            self.tools.iter().map(String::as_str).collect();
        (
            declared
                .difference(&implemented)
                .map(|s| (*s).to_owned())
                .collect(),
            implemented
                .difference(&declared)
                .map(|s| (*s).to_owned())
                .collect(),
        )
    }
}

/// tonic's own default limit on a decoded message.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Why an invocation produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The deadline passed; the plugin was told (the stream was reset).
    #[error("the tool did not answer within {0:?}")]
    Timeout(Duration),
    /// The process died or the connection broke during the call. It may or
    /// may not have taken effect; it is never retried.
    #[error(
        "plugin {plugin} became unavailable during the call ({detail}); it may or may not have taken effect"
    )]
    Unavailable {
        /// The plugin id.
        plugin: String,
        /// What happened.
        detail: String,
    },
    /// The answer was larger than the limit; the plugin ran the call.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The plugin answered with a gRPC error (an unknown tool, a panic).
    #[error("plugin {plugin} refused the call: {code:?}: {message}")]
    Refused {
        /// The plugin id.
        plugin: String,
        /// The gRPC code.
        code: tonic::Code,
        /// The plugin's message (plugin text, not argument values).
        message: String,
    },
}

impl PluginClient {
    /// The handle of a process speaking plugin protocol `protocol`, whose
    /// start connected `channel` (kept for protocol 2, dropped for 1).
    pub(crate) fn new(
        plugin: Arc<str>,
        pid: u32,
        channel: Option<Channel>,
        socket: std::path::PathBuf,
        gone: CancellationToken,
        call_token: &str,
        protocol: u32,
    ) -> Self {
        Self {
            plugin,
            pid,
            direct: Arc::new(crate::unary::DirectLink::new(socket, gone.clone())),
            channel: channel.filter(|_| protocol == 2),
            protocol,
            gone,
            in_flight: CallSlots::default(),
            held: CallSlots::default(),
            call_token: call_token.parse().ok(),
            audiences: Arc::from(Vec::new()),
        }
    }

    /// The handle of a process whose calls carry tokens for `audiences`.
    #[must_use]
    pub(crate) fn with_audiences(mut self, audiences: &[String]) -> Self {
        self.audiences = Arc::from(audiences.to_vec());
        self
    }

    /// The audiences its calls carry tokens for.
    #[must_use]
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    /// The plugin protocol version the process speaks: 2 means calls go
    /// through [`PluginClient::open_stream`].
    #[must_use]
    pub fn protocol(&self) -> u32 {
        self.protocol
    }

    /// Calls in flight on this process right now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.taken()
    }

    /// Marks a call as holding this handle until the returned slot is
    /// dropped, whether or not it has a place among the calls in flight
    /// yet (it may still be waiting for an approval): [`Self::busy`]
    /// counts it, so a drain does not stop the process under it.
    #[must_use]
    pub fn hold(&self) -> CallSlot {
        self.held.take()
    }

    /// Calls in flight plus calls holding this handle: a process is idle,
    /// and may be stopped without failing a call, only at zero.
    #[must_use]
    pub fn busy(&self) -> usize {
        self.in_flight.taken() + self.held.taken()
    }

    /// The plugin id.
    #[must_use]
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The process this handle talks to.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process behind this handle has stopped.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.gone.is_cancelled()
    }

    /// Reserves a place among this process's calls in flight, if fewer
    /// than `max` are. Exact under any concurrency: the check and the count
    /// are one atomic step.
    #[must_use]
    pub fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        self.in_flight.try_reserve(max)
    }

    /// Makes exactly one `InvokeAgentTool` call. The deadline travels as
    /// `grpc-timeout` and is enforced here too. Dropping the returned future
    /// cancels the call (the HTTP/2 stream is reset, and the plugin's handler
    /// is told).
    pub async fn invoke(
        &self,
        request: AgentToolRequest,
        deadline: Duration,
    ) -> Result<ToolAnswer, InvokeError> {
        let slot = self.in_flight.take();
        let body = crate::unary::frame_message(&request);
        self.invoke_framed(slot, body, deadline, DEFAULT_MAX_ANSWER_BYTES)
            .await
    }

    /// [`PluginClient::invoke`] in a reserved slot, with answers larger
    /// than `max_answer_bytes` (encoded) refused as
    /// [`InvokeError::TooLarge`]. The request is encoded before this
    /// returns, straight from what it borrows, so the future borrows only
    /// the client.
    pub fn invoke_in(
        &self,
        slot: CallSlot,
        request: &ToolRequestRef<'_>,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> impl Future<Output = Result<ToolAnswer, InvokeError>> + Send + '_ {
        let body = crate::unary::frame(request.encoded_len(), |buf| request.encode(buf));
        self.invoke_framed(slot, body, deadline, max_answer_bytes)
    }

    async fn invoke_framed(
        &self,
        slot: CallSlot,
        body: bytes::Bytes,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> Result<ToolAnswer, InvokeError> {
        if self.gone.is_cancelled() {
            return Err(self.unavailable("the plugin process had already stopped"));
        }
        let _counted = slot;
        let span = self.client_span(
            "kandev.plugin.v1.Plugin/InvokeAgentTool",
            "kandev.plugin.v1.Plugin",
            "InvokeAgentTool",
        );
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some(t) = &self.call_token {
            metadata.insert(toolhost_proto::contract::CALL_TOKEN_METADATA, t.clone());
        }
        span.inject(&mut metadata);
        let call = self.direct.call(
            "/kandev.plugin.v1.Plugin/InvokeAgentTool",
            metadata.into_headers(),
            body,
            deadline,
            max_answer_bytes,
        );
        // No race against `gone` here, unlike protocol 2's stream: the
        // link's connection ends when the process stops, which fails the
        // call at once, and a wait on the token would take its lock on
        // every poll of every call in flight (BENCHMARKS.md).
        let answer = call.await;
        let status = match answer {
            Ok(bytes) => match ToolAnswer::decode(&bytes) {
                Ok(answer) => {
                    span.status(tonic::Code::Ok);
                    return Ok(answer);
                }
                Err(e) => tonic::Status::internal(format!("the answer could not be decoded: {e}")),
            },
            Err(crate::unary::Failure::Timeout) => {
                span.fail("timeout");
                return Err(InvokeError::Timeout(deadline));
            }
            Err(crate::unary::Failure::TooLarge) => {
                span.status(tonic::Code::OutOfRange);
                return Err(InvokeError::TooLarge(max_answer_bytes));
            }
            Err(crate::unary::Failure::Status(status)) => status,
        };
        if self.gone.is_cancelled() {
            span.fail("plugin_unavailable");
            return Err(self.unavailable("the plugin process stopped"));
        }
        span.status(status.code());
        Err(self.classify(&status, deadline, max_answer_bytes))
    }

    /// The CLIENT span of one call to this plugin (a no-op when telemetry
    /// is off or the call is not sampled).
    fn client_span(
        &self,
        name: &'static str,
        service: &'static str,
        method: &'static str,
    ) -> toolhost_telemetry::ClientSpan {
        toolhost_telemetry::ClientSpan::start(name, service, method, || {
            vec![
                toolhost_telemetry::KeyValue::new(
                    toolhost_telemetry::semconv::NETWORK_TRANSPORT,
                    "unix",
                ),
                toolhost_telemetry::KeyValue::new(
                    toolhost_telemetry::semconv::TOOLHOST_PLUGIN_ID,
                    self.plugin.to_string(),
                ),
                toolhost_telemetry::KeyValue::new(
                    toolhost_telemetry::semconv::TOOLHOST_PLUGIN_PROTOCOL,
                    i64::from(self.protocol),
                ),
            ]
        })
    }

    /// Opens the one protocol-2 stream of a call and sends `start`. The
    /// stream carries `grpc-timeout = deadline` (the call's hard limit: with
    /// `reset_timeout_on_progress` the caller enforces a shorter, rolling
    /// one). Each plugin event larger than `max_event_bytes` (encoded) is
    /// refused as [`InvokeError::TooLarge`]. Dropping the [`CallStream`]
    /// resets the stream, which is how the plugin learns of cancellation.
    pub async fn open_stream(
        &self,
        slot: CallSlot,
        start: toolhost_proto::plugin_v2::Start,
        deadline: Duration,
        max_event_bytes: usize,
    ) -> Result<CallStream, InvokeError> {
        if self.gone.is_cancelled() {
            return Err(self.unavailable("the plugin process had already stopped"));
        }
        // Two slots: the start and one answer can wait without blocking
        // the caller, and the plugin asks one question at a time.
        let (to_plugin, rx) = tokio::sync::mpsc::channel(2);
        let first = HostEvent {
            event: Some(host_event::Event::Start(start)),
        };
        if to_plugin.try_send(first).is_err() {
            return Err(self.unavailable("the call stream could not be started"));
        }
        let span = self.client_span(
            "toolhost.plugin.v2.Plugin/Invoke",
            "toolhost.plugin.v2.Plugin",
            "Invoke",
        );
        let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        req.set_timeout(deadline);
        self.present_token(&mut req);
        span.inject(req.metadata_mut());
        let Some(channel) = self.channel.clone() else {
            return Err(self.unavailable("the plugin speaks protocol 1, which has no streams"));
        };
        let mut grpc = GrpcV2::new(channel).max_decoding_message_size(max_event_bytes);
        let opened = tokio::select! {
            biased;
            () = self.gone.cancelled() => {
                span.fail("plugin_unavailable");
                return Err(self.unavailable("the plugin process stopped"));
            }
            r = tokio::time::timeout(deadline, grpc.invoke(req)) => r,
        };
        match opened {
            Err(_) => {
                span.fail("timeout");
                Err(InvokeError::Timeout(deadline))
            }
            Ok(Err(status)) => {
                span.status(status.code());
                Err(self.classify(&status, deadline, max_event_bytes))
            }
            Ok(Ok(resp)) => Ok(CallStream {
                client: self.clone(),
                _slot: slot,
                to_plugin,
                from_plugin: resp.into_inner(),
                deadline,
                max_event_bytes,
                span,
            }),
        }
    }

    /// One health probe of the process, bounded by `timeout`.
    pub(crate) async fn probe_health(&self, timeout: Duration) -> crate::health::Probed {
        match &self.channel {
            Some(channel) => crate::health::probe(channel, timeout).await,
            // A probe shares the calls' connection: with every stream the
            // plugin allows taken by calls, it would wait behind them and
            // time out, and a busy plugin would be restarted as a silent
            // one. Its calls end by their deadlines, so a later probe runs.
            // A plugin that allows no stream at all can take no call
            // either: it is probed, and its probe fails.
            None if self
                .direct
                .max_streams()
                .is_some_and(|max| max > 0 && self.in_flight.taken() >= max) =>
            {
                crate::health::Probed::Busy
            }
            None => crate::health::probe_direct(&self.direct, timeout).await,
        }
    }

    /// What the process says its code implements (protocol 2's
    /// `Describe`), within `timeout`. `None` when it does not say: a
    /// protocol-1 plugin, an SDK without `Describe`, or no answer in time.
    /// What it says is the plugin's word, so it is bounded here: at most
    /// 1,000 names of at most 128 bytes, and an SDK line of 200 bytes;
    /// the code's shapes only when `with_shapes`, within their caps.
    pub async fn describe(&self, timeout: Duration, with_shapes: bool) -> Option<Described> {
        if self.protocol != 2 {
            return None;
        }
        let mut req = tonic::Request::new(toolhost_proto::plugin_v2::DescribeRequest {});
        req.set_timeout(timeout);
        self.present_token(&mut req);
        let mut grpc = GrpcV2::new(self.channel.clone()?);
        let answer = tokio::time::timeout(timeout, grpc.describe(req))
            .await
            .ok()?
            .ok()?;
        let answer = answer.into_inner();
        let mut tools: Vec<String> = answer
            .tools
            .into_iter()
            .filter(|t| t.len() <= 128)
            .take(1000)
            .map(|t| toolhost_base::log_safe(&t, 128).into_owned())
            .collect();
        tools.sort();
        tools.dedup();
        let shapes = if with_shapes {
            read_shapes(answer.shapes, &tools)
        } else {
            Vec::new()
        };
        Some(Described {
            tools,
            sdk: toolhost_base::log_safe(&answer.sdk, 200).into_owned(),
            shapes: shapes.into(),
        })
    }

    /// Adds the process's call token to a request: the plugin answers
    /// nothing without it.
    fn present_token<T>(&self, req: &mut tonic::Request<T>) {
        if let Some(t) = &self.call_token {
            req.metadata_mut()
                .insert(toolhost_proto::contract::CALL_TOKEN_METADATA, t.clone());
        }
    }

    fn unavailable(&self, detail: &str) -> InvokeError {
        InvokeError::Unavailable {
            plugin: self.plugin.to_string(),
            detail: detail.to_owned(),
        }
    }

    /// tonic reports its own deadline as `Cancelled` "Timeout expired", not
    /// `DeadlineExceeded`; transport failures come as `Unavailable` or
    /// `Unknown`.
    fn classify(&self, status: &tonic::Status, deadline: Duration, limit: usize) -> InvokeError {
        match status.code() {
            // tonic's decoder refusing an answer over the limit.
            tonic::Code::OutOfRange if status.message().contains("message length too large") => {
                InvokeError::TooLarge(limit)
            }
            tonic::Code::DeadlineExceeded => InvokeError::Timeout(deadline),
            tonic::Code::Cancelled if status.message().contains("Timeout expired") => {
                InvokeError::Timeout(deadline)
            }
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                self.unavailable(&format!("{:?}", status.code()))
            }
            code => InvokeError::Refused {
                plugin: self.plugin.to_string(),
                code,
                message: status.message().chars().take(512).collect(),
            },
        }
    }
}

/// One protocol-2 call in progress: events from the plugin, answers to it.
/// Holds the call's place among the plugin's calls in flight until dropped;
/// dropping it resets the stream.
#[derive(Debug)]
pub struct CallStream {
    client: PluginClient,
    _slot: CallSlot,
    to_plugin: tokio::sync::mpsc::Sender<HostEvent>,
    from_plugin: tonic::Streaming<PluginEvent>,
    deadline: Duration,
    max_event_bytes: usize,
    /// The call's CLIENT span: it ends when the stream does.
    span: toolhost_telemetry::ClientSpan,
}

impl CallStream {
    /// The plugin's next event. `Ok(None)` means the plugin closed the
    /// stream (without a result, if none came yet: a broken plugin).
    pub async fn next(&mut self) -> Result<Option<PluginEvent>, InvokeError> {
        let gone = self.client.gone.clone();
        tokio::select! {
            biased;
            () = gone.cancelled() => Err(self.client.unavailable("the plugin process stopped")),
            r = self.from_plugin.message() => r.map_err(|status| {
                self.span.status(status.code());
                self.client.classify(&status, self.deadline, self.max_event_bytes)
            }),
        }
    }

    /// Ends a call whose result has arrived: closes the host's side and
    /// reads the plugin's side to its end in the background (for at most
    /// two seconds), so the stream closes cleanly. Dropping it instead
    /// would reset the stream, and an HTTP/2 connection tolerates only so
    /// many resets. The call's place among those in flight frees at once.
    pub fn finish(self) {
        let Self {
            to_plugin,
            mut from_plugin,
            _slot,
            span,
            ..
        } = self;
        span.status(tonic::Code::Ok);
        drop(span);
        drop(to_plugin);
        drop(_slot);
        tokio::spawn(async move {
            let drain = async { while let Ok(Some(_)) = from_plugin.message().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        });
    }

    /// Delivers the answer to a question. Fails when the plugin has
    /// already closed its side.
    pub async fn answer(
        &self,
        answer: toolhost_proto::plugin_v2::Answer,
    ) -> Result<(), InvokeError> {
        let event = HostEvent {
            event: Some(host_event::Event::Answer(answer)),
        };
        self.to_plugin
            .send(event)
            .await
            .map_err(|_| self.client.unavailable("the plugin closed the call stream"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protocol-1 client of the health server's plugin.
    fn protocol_1_client(server: &crate::health::tests::HealthServer) -> PluginClient {
        PluginClient::new(
            Arc::from("probed"),
            0,
            None,
            server.socket.clone(),
            CancellationToken::new(),
            "token",
            1,
        )
    }

    #[tokio::test]
    async fn a_protocol_1_plugin_whose_calls_take_every_stream_is_not_probed_behind_them() {
        let server = crate::health::tests::health_server_allowing(Some(2)).await;
        let client = protocol_1_client(&server);
        let timeout = Duration::from_secs(10);
        assert_eq!(
            client.probe_health(timeout).await,
            crate::health::Probed::Healthy
        );
        let one = client.in_flight.try_reserve(64);
        assert_eq!(
            client.probe_health(timeout).await,
            crate::health::Probed::Healthy
        );
        let two = client.in_flight.try_reserve(64);
        // Both streams the plugin allows are its calls': a probe would
        // wait behind them.
        assert_eq!(
            client.probe_health(timeout).await,
            crate::health::Probed::Busy
        );
        drop((one, two));
        assert_eq!(
            client.probe_health(timeout).await,
            crate::health::Probed::Healthy
        );
    }

    #[tokio::test]
    async fn a_protocol_1_plugin_that_allows_no_stream_is_probed_and_fails() {
        let server = crate::health::tests::health_server_allowing(Some(0)).await;
        let client = protocol_1_client(&server);
        let short = Duration::from_millis(300);
        // The first probe connects (and learns the limit); every probe, the
        // later ones knowing it, is made and fails.
        for _ in 0..2 {
            assert_eq!(
                client.probe_health(short).await,
                crate::health::Probed::Silent
            );
        }
    }

    #[test]
    fn the_difference_between_declared_and_implemented_goes_both_ways() {
        let d = Described {
            tools: vec!["add".into(), "debug".into(), "search".into()],
            sdk: "toolhost-plugin 1.0".into(),
            ..Described::default()
        };
        let (missing, undeclared) = d.differences(["add", "search", "export"]);
        assert_eq!(missing, ["export"], "declared without a handler");
        assert_eq!(undeclared, ["debug"], "a handler no agent can reach");
        assert_eq!(d.differences(["add", "debug", "search"]), (vec![], vec![]));
    }

    #[test]
    fn only_readable_shapes_of_named_tools_are_kept() {
        use toolhost_proto::plugin_v2::ToolShape as Wire;
        let shape = |name: &str, input: &str, output: &str| Wire {
            name: name.into(),
            input_schema_json: input.into(),
            output_schema_json: output.into(),
            description: "Adds.\u{1b}[31m".into(),
        };
        let tools = vec!["add".to_owned(), "list".to_owned(), "search".to_owned()];
        let huge = format!(
            "{{\"description\":\"{}\"}}",
            "x".repeat(MAX_SHAPE_SCHEMA_BYTES)
        );
        let kept = read_shapes(
            vec![
                shape("search", r#"{"type":"object"}"#, r#"{"type":"object"}"#),
                shape("add", r#"{"type":"object"}"#, ""),
                shape("add", r#"{"type":"string"}"#, ""),
                shape("other", r#"{"type":"object"}"#, ""),
                shape("list", "[1]", ""),
                shape("list", &huge, ""),
                shape("list", r#"{"type":"object"}"#, "not json"),
            ],
            &tools,
        );
        let names: Vec<&str> = kept.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["add", "search"],
            "unnamed, non-object, oversized and broken shapes are left out"
        );
        assert_eq!(
            kept[0].input,
            serde_json::json!({"type": "object"}),
            "the first shape of a name counts"
        );
        assert_eq!(kept[0].output, None);
        assert!(kept[1].output.is_some());
        assert!(
            !kept[0].description.contains('\u{1b}'),
            "made safe to print"
        );
    }
}
