//! `toolhost harness DIR`: toolhost's own call pipeline for an SDK's test
//! harness, so a plugin's author can test a tool with no daemon and get
//! exactly what an agent would.
//!
//! The SDK's harness (`toolhost_plugin.testing` in Python) starts this
//! command once and speaks JSON lines with it on stdin and stdout. It
//! sends a call (`{"call": {"tool", "arguments", "answers", ...}}`); this
//! process runs the real pipeline over the plugin's manifest (bounds, the
//! schema with the root closed, the error texts, the deadline, the output
//! schema, the result's size, the question rules) and, where a daemon
//! would dispatch to the plugin's process, hands the call back to the
//! test's process instead (`{"start": BASE64, "deadline_ms": N}`, the
//! protocol-2 `HostEvent` that starts the call, or `{"invoke": ...}`,
//! protocol 1's request), where the SDK runs the handler in-process. The handler's
//! events come back as the wire messages they would be (`{"event":
//! BASE64}` of `PluginEvent`, `{"response": BASE64}`, `{"abort": {"code",
//! "message"}}`), and a question is answered from the test's `answers`,
//! checked against the question as a client's answer is, then sent on
//! (`{"answer": BASE64}`, a `HostEvent`). Every message is the protocol's
//! own, encoded as on the wire, so an SDK's harness feeds them to the same
//! code that serves a daemon. The call ends with `{"result": RESULT,
//! "progress": [...], "logs": [...], "questions": [...]}`: RESULT is the
//! MCP `CallToolResult` an agent's client receives, and the rest is what
//! the handler sent to the caller on the way. A name the tool's surface
//! cannot see ends as `{"unknown_tool": "..."}`, MCP's protocol error.
//!
//! Its first line says what a harness needs of the manifest without
//! reading TOML: `{"manifest": {"id", "protocol", "config": [{"name",
//! "secret", "default"}], "checks_shapes": true}}`. An SDK's harness then
//! sends what its plugin's code states, as `Describe` would answer it
//! (`{"shapes": BASE64}` of `DescribeResponse`), and this process answers
//! `{"drift": [...]}`: each tool whose code and manifest part, in the words
//! `check --start` uses (the tool, the JSON pointers, the `schema sync` to
//! run), and tools the manifest declares that no handler implements. A
//! harness fails its test on any, as the daemon would refuse the package.
//!
//! What this must not do: run the plugin's code itself, or apply any rule
//! of its own: every verdict is the pipeline's.

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use prost::Message as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolhost_base::errln;
use toolhost_catalog::{Snapshot, Store};
use toolhost_manifest::{check_set, naming};
use toolhost_pipeline::{
    Answer, AnswerAction, AskFuture, Binding, Caller, EventStream, Limits, LogLevel, LogMessage,
    Pipeline, PluginLink, PluginPort, Progress, Question, Unanswered,
};
use toolhost_proto::plugin::AgentToolResponse;
use toolhost_proto::plugin_v2::{Answer as WireAnswer, PluginEvent, Start};
use toolhost_proto::request::ToolRequestRef;
use toolhost_runtime::{CallSlot, CallSlots, InvokeError, PluginUnavailable};

/// The flags of `toolhost harness`.
#[derive(Debug, clap::Args)]
pub struct HarnessArgs {
    /// The plugin's directory (holding plugin.toml).
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// One call a test asks for.
#[derive(Debug, Deserialize)]
struct CallRequest {
    tool: String,
    #[serde(default)]
    arguments: Option<Value>,
    /// The surface the call comes from; the tool's first by default.
    #[serde(default)]
    surface: Option<String>,
    /// Whether the caller can answer questions (default: yes).
    #[serde(default = "yes")]
    can_ask: bool,
    /// Whether the caller asked for progress (default: yes).
    #[serde(default = "yes")]
    progress: bool,
    /// The answers to the questions the tool asks, in order: an object
    /// (accepted, with those values), `"decline"` or `"cancel"`.
    #[serde(default)]
    answers: Vec<Value>,
}

fn yes() -> bool {
    true
}

/// What the test's process sends while a call runs.
#[derive(Debug)]
enum FromTest {
    Event(PluginEvent),
    Response(AgentToolResponse),
    Abort { code: tonic::Code, message: String },
}

/// Where the pipeline's dispatch meets the test's process.
#[derive(Debug)]
struct Wire {
    out: mpsc::UnboundedSender<Value>,
    from_test: tokio::sync::Mutex<mpsc::UnboundedReceiver<FromTest>>,
    slots: CallSlots,
    protocol: u32,
}

/// The plugin, as the pipeline sees it: always ready, and its one call
/// at a time answered by the test's process.
#[derive(Debug, Clone)]
struct TestPort(Arc<Wire>);

struct TestLink(Arc<Wire>);

impl PluginPort for TestPort {
    fn ready(&self, _id: &str, _version: &str) -> Result<Box<dyn PluginLink>, PluginUnavailable> {
        Ok(Box::new(TestLink(Arc::clone(&self.0))))
    }

    fn ready_within<'a>(
        &'a self,
        id: &'a str,
        version: &'a str,
        _wait: Duration,
        _cancel: &'a CancellationToken,
    ) -> toolhost_pipeline::port::BoxFuture<'a, Result<Box<dyn PluginLink>, PluginUnavailable>>
    {
        Box::pin(async move { self.ready(id, version) })
    }
}

fn encoded(message: &impl prost::Message) -> String {
    base64::engine::general_purpose::STANDARD.encode(message.encode_to_vec())
}

impl PluginLink for TestLink {
    fn protocol(&self) -> u32 {
        self.0.protocol
    }

    fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        self.0.slots.try_reserve(max)
    }

    fn invoke(
        &self,
        slot: CallSlot,
        request: &ToolRequestRef<'_>,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> toolhost_pipeline::port::BoxFuture<
        '_,
        Result<toolhost_proto::answer::ToolAnswer, InvokeError>,
    > {
        // The bytes the daemon would send, encoded as it encodes them.
        let mut wire = Vec::with_capacity(request.encoded_len());
        request.encode(&mut wire);
        Box::pin(async move {
            let _slot = slot;
            let _ = self.0.out.send(json!({
                "invoke": base64::engine::general_purpose::STANDARD.encode(&wire),
                "deadline_ms": deadline.as_millis(),
            }));
            let mut rx = self.0.from_test.lock().await;
            match tokio::time::timeout(deadline, rx.recv()).await {
                Err(_) => {
                    let _ = self.0.out.send(json!({ "cancel": true }));
                    Err(InvokeError::Timeout(deadline))
                }
                Ok(Some(FromTest::Response(r))) if r.encoded_len() > max_answer_bytes => {
                    Err(InvokeError::TooLarge(max_answer_bytes))
                }
                Ok(Some(FromTest::Response(r))) => Ok(r.into()),
                Ok(Some(FromTest::Abort { code, message })) => Err(InvokeError::Refused {
                    plugin: "test".into(),
                    code,
                    message,
                }),
                Ok(Some(FromTest::Event(_))) => {
                    Err(broken("a protocol-2 event in a protocol-1 call"))
                }
                Ok(None) => Err(broken("the test's process went away")),
            }
        })
    }

    fn open_stream(
        &self,
        slot: CallSlot,
        start: Start,
        deadline: Duration,
        max_event_bytes: usize,
    ) -> toolhost_pipeline::port::BoxFuture<'_, Result<Box<dyn EventStream>, InvokeError>> {
        Box::pin(async move {
            let first = toolhost_proto::plugin_v2::HostEvent {
                event: Some(toolhost_proto::plugin_v2::host_event::Event::Start(start)),
            };
            let _ = self.0.out.send(json!({
                "start": encoded(&first),
                "deadline_ms": deadline.as_millis(),
            }));
            Ok(Box::new(TestStream {
                wire: Arc::clone(&self.0),
                _slot: slot,
                until: tokio::time::Instant::now() + deadline,
                deadline,
                max_event_bytes,
                finished: false,
            }) as Box<dyn EventStream>)
        })
    }
}

fn broken(detail: &str) -> InvokeError {
    InvokeError::Unavailable {
        plugin: "test".into(),
        detail: detail.into(),
    }
}

/// One protocol-2 call in the test's process.
struct TestStream {
    wire: Arc<Wire>,
    _slot: CallSlot,
    until: tokio::time::Instant,
    deadline: Duration,
    max_event_bytes: usize,
    finished: bool,
}

impl EventStream for TestStream {
    fn next(
        &mut self,
    ) -> toolhost_pipeline::port::BoxFuture<'_, Result<Option<PluginEvent>, InvokeError>> {
        Box::pin(async move {
            let mut rx = self.wire.from_test.lock().await;
            match tokio::time::timeout_at(self.until, rx.recv()).await {
                Err(_) => Err(InvokeError::Timeout(self.deadline)),
                Ok(Some(FromTest::Event(e))) if e.encoded_len() > self.max_event_bytes => {
                    Err(InvokeError::TooLarge(self.max_event_bytes))
                }
                Ok(Some(FromTest::Event(e))) => Ok(Some(e)),
                Ok(Some(FromTest::Abort { code, message })) => Err(InvokeError::Refused {
                    plugin: "test".into(),
                    code,
                    message,
                }),
                Ok(Some(FromTest::Response(_))) => {
                    Err(broken("a protocol-1 response in a protocol-2 call"))
                }
                Ok(None) => Err(broken("the test's process went away")),
            }
        })
    }

    fn answer(
        &self,
        answer: WireAnswer,
    ) -> toolhost_pipeline::port::BoxFuture<'_, Result<(), InvokeError>> {
        Box::pin(async move {
            let event = toolhost_proto::plugin_v2::HostEvent {
                event: Some(toolhost_proto::plugin_v2::host_event::Event::Answer(answer)),
            };
            let _ = self.wire.out.send(json!({ "answer": encoded(&event) }));
            Ok(())
        })
    }

    fn finish(mut self: Box<Self>) {
        self.finished = true;
    }
}

impl Drop for TestStream {
    /// A call that ends without its result (a deadline, a refusal) is
    /// cancelled in the test's process, as a reset stream cancels it in a
    /// plugin's.
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.wire.out.send(json!({ "cancel": true }));
        }
    }
}

/// The test, as the caller of one call: what it was sent, and the
/// answers it gives.
#[derive(Debug, Default)]
struct TestCaller {
    wants_progress: bool,
    can_ask: bool,
    answers: Mutex<VecDeque<Value>>,
    progress: Mutex<Vec<Value>>,
    logs: Mutex<Vec<Value>>,
    questions: Mutex<Vec<Value>>,
}

fn push(list: &Mutex<Vec<Value>>, v: Value) {
    list.lock().unwrap_or_else(PoisonError::into_inner).push(v);
}

fn taken(list: &Mutex<Vec<Value>>) -> Vec<Value> {
    std::mem::take(&mut *list.lock().unwrap_or_else(PoisonError::into_inner))
}

impl Caller for TestCaller {
    fn wants_progress(&self) -> bool {
        self.wants_progress
    }

    fn log_level(&self) -> Option<LogLevel> {
        Some(LogLevel::Debug)
    }

    fn can_ask(&self) -> bool {
        self.can_ask
    }

    fn progress(&self, update: Progress) {
        push(
            &self.progress,
            json!({ "progress": update.progress, "total": update.total, "message": update.message }),
        );
    }

    fn log(&self, message: LogMessage) {
        push(
            &self.logs,
            json!({
                "level": format!("{:?}", message.level).to_lowercase(),
                "logger": message.logger,
                "message": message.message,
                "data": message.data,
            }),
        );
    }

    fn ask(&self, question: Question) -> AskFuture<'_> {
        push(
            &self.questions,
            json!({ "message": question.message, "requested_schema": question.requested_schema }),
        );
        let next = self
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        Box::pin(async move {
            match next {
                None => Err(Unanswered::Failed(
                    "the test gave no answer for this question (pass answers=[...])".into(),
                )),
                Some(Value::String(s)) if s == "decline" => Ok(Answer {
                    action: AnswerAction::Decline,
                    content: None,
                }),
                Some(Value::String(s)) if s == "cancel" => Ok(Answer {
                    action: AnswerAction::Cancel,
                    content: None,
                }),
                Some(content) => Ok(Answer {
                    action: AnswerAction::Accept,
                    content: Some(content),
                }),
            }
        })
    }
}

/// Runs the harness until stdin closes.
pub fn run(args: &HarnessArgs) -> Result<ExitCode> {
    let set = check_set(naming::DEFAULT_PREFIX, std::slice::from_ref(&args.dir));
    let problems = set.all_problems();
    if !problems.is_empty() {
        for p in &problems {
            errln!("error: {p}");
        }
        bail!(
            "{} has {} problem(s); the harness checks calls against a valid manifest only",
            args.dir.display(),
            problems.len()
        );
    }
    let Some(m) = set.plugins.into_iter().next() else {
        bail!("no plugin.toml in {}", args.dir.display());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(m))?;
    Ok(ExitCode::SUCCESS)
}

/// Where the code an SDK's harness described (`Describe`'s answer, base64)
/// and the manifest part, as `check --start` says it.
fn drift_of(m: &toolhost_manifest::Manifest, shapes: &str) -> Vec<String> {
    let answer = base64::engine::general_purpose::STANDARD
        .decode(shapes)
        .ok()
        .and_then(|b| toolhost_proto::plugin_v2::DescribeResponse::decode(b.as_slice()).ok());
    let Some(answer) = answer else {
        return vec!["the harness sent shapes that are not a base64 DescribeResponse".to_owned()];
    };
    let missing: Vec<&str> = m
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| !answer.tools.iter().any(|h| h == t))
        .collect();
    let mut problems =
        toolhost_lifecycle::drift::drift(m, &toolhost_runtime::shapes_of(answer), &m.dir);
    if !missing.is_empty() {
        problems.push(format!(
            "{}: tools declared in plugin.toml but not implemented by its code: {}",
            m.id,
            missing.join(", ")
        ));
    }
    problems
}

/// Kept whole on purpose: one loop reads the test's lines and routes them
/// to the call in flight; splitting it would split that routing.
async fn serve(m: toolhost_manifest::Manifest) -> Result<()> {
    let store = Arc::new(Store::new(naming::DEFAULT_PREFIX));
    let _ = store.offer(Snapshot::from_manifests(
        naming::DEFAULT_PREFIX,
        "harness",
        1,
        std::iter::once(&m),
    ));
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let (test_tx, test_rx) = mpsc::unbounded_channel::<FromTest>();
    let wire = Arc::new(Wire {
        out: out_tx.clone(),
        from_test: tokio::sync::Mutex::new(test_rx),
        slots: CallSlots::default(),
        protocol: m.runtime.protocol,
    });
    let pipeline = Arc::new(Pipeline::new(
        store,
        Arc::new(TestPort(Arc::clone(&wire))),
        Limits::default(),
    ));
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(v) = out_rx.recv().await {
            let mut line = v.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    // First, what an SDK's harness needs of the manifest without reading
    // TOML: the plugin's id and its configuration items.
    let _ = out_tx.send(json!({
        "manifest": {
            "id": m.id,
            "protocol": m.runtime.protocol,
            "config": m.config.iter().map(|c| json!({
                "name": c.name,
                "secret": c.secret,
                "default": c.default.as_ref().map(|d| match d {
                    toolhost_manifest::grants::ConfigValue::String(s) => json!(s),
                    toolhost_manifest::grants::ConfigValue::Integer(n) => json!(n),
                    toolhost_manifest::grants::ConfigValue::Boolean(b) => json!(b),
                }),
            })).collect::<Vec<_>>(),
            "checks_shapes": true,
        }
    }));
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    while let Some(line) = lines
        .next_line()
        .await
        .context("reading the test's lines")?
    {
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = out_tx.send(json!({ "error": format!("not a JSON line: {e}") }));
                continue;
            }
        };
        if let Some(shapes) = v.get("shapes").and_then(Value::as_str) {
            let _ = out_tx.send(json!({ "drift": drift_of(&m, shapes) }));
            continue;
        }
        if let Some(call) = v.get("call") {
            if running.as_ref().is_some_and(|r| !r.is_finished()) {
                let _ = out_tx.send(
                    json!({ "error": "one call at a time: the previous call has not ended" }),
                );
                continue;
            }
            let request: CallRequest = match serde_json::from_value(call.clone()) {
                Ok(r) => r,
                Err(e) => {
                    let _ = out_tx.send(json!({ "error": format!("a call needs tool, and may have arguments, surface, can_ask, progress and answers: {e}") }));
                    continue;
                }
            };
            let surface = request.surface.clone().unwrap_or_else(|| {
                m.tools
                    .iter()
                    .find(|t| t.name == request.tool)
                    .and_then(|t| t.surfaces.first().cloned())
                    .unwrap_or_default()
            });
            // What the test sent after a previous call ended belongs to
            // no call.
            if let Ok(mut rx) = wire.from_test.try_lock() {
                while rx.try_recv().is_ok() {}
            }
            let pipeline = Arc::clone(&pipeline);
            let out = out_tx.clone();
            let exposed = naming::exposed(naming::DEFAULT_PREFIX, &m.id, &request.tool);
            running = Some(tokio::spawn(async move {
                let caller = TestCaller {
                    wants_progress: request.progress,
                    can_ask: request.can_ask,
                    answers: Mutex::new(request.answers.into()),
                    ..TestCaller::default()
                };
                let binding = Binding::new(surface, "test-task", "test-session", None);
                let answer = pipeline
                    .call_for(
                        &binding,
                        &exposed,
                        request.arguments,
                        &caller,
                        CancellationToken::new(),
                    )
                    .await;
                let line = match answer {
                    Err(unknown) => json!({ "unknown_tool": unknown.to_string() }),
                    Ok(result) => match toolhost_mcp::result_of(result, false) {
                        Ok(rmcp::model::CallToolResponse::Complete(r)) => json!({
                            "result": r,
                            "progress": taken(&caller.progress),
                            "logs": taken(&caller.logs),
                            "questions": taken(&caller.questions),
                        }),
                        Ok(_) => {
                            json!({ "error": "the pipeline answered with something other than a tool result" })
                        }
                        Err(e) => json!({ "error": e.to_string() }),
                    },
                };
                let _ = out.send(line);
            }));
        } else if let Some(e) = v.get("event").and_then(Value::as_str) {
            match decoded::<PluginEvent>(e) {
                Ok(event) => {
                    let _ = test_tx.send(FromTest::Event(event));
                }
                Err(e) => {
                    let _ = out_tx.send(json!({ "error": e.to_string() }));
                }
            }
        } else if let Some(r) = v.get("response").and_then(Value::as_str) {
            match decoded::<AgentToolResponse>(r) {
                Ok(response) => {
                    let _ = test_tx.send(FromTest::Response(response));
                }
                Err(e) => {
                    let _ = out_tx.send(json!({ "error": e.to_string() }));
                }
            }
        } else if let Some(a) = v.get("abort") {
            let code = a.get("code").and_then(Value::as_i64).unwrap_or(2);
            let _ = test_tx.send(FromTest::Abort {
                code: tonic::Code::from_i32(i32::try_from(code).unwrap_or(2)),
                message: a
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            });
        } else {
            let _ =
                out_tx.send(json!({ "error": "a line is one of call, event, response or abort" }));
        }
    }
    if let Some(r) = running {
        let _ = r.await;
    }
    // The writer ends when the last sender is gone: the pipeline's port
    // holds one.
    drop(pipeline);
    drop(wire);
    drop(out_tx);
    let _ = writer.await;
    Ok(())
}

fn decoded<M: prost::Message + Default>(b64: &str) -> Result<M> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .context("not base64")?;
    M::decode(bytes.as_slice()).context("not the protocol's message")
}
