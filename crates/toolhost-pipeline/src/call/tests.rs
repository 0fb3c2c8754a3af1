//! Each step of the pipeline against a fake plugin ([`Fake`]), which
//! records what reached it, in order: the pipeline's rules read as tests.
//!
//! The backend's `Authorize` is a real gRPC server in-process (the
//! pipeline's only other collaborator), on a Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use super::*;
use crate::port::{BoxFuture, EventStream, PluginLink, PluginPort};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;
use toolhost_catalog::{Descriptor, Snapshot};
use toolhost_proto::plugin::{AgentToolRequest, AgentToolResponse};
use toolhost_proto::plugin_v2::{Answer as WireAnswer, PluginEvent, Start};
use toolhost_proto::request::ToolRequestRef;
use toolhost_runtime::{CallSlots, PluginUnavailable};
use toolhost_validate::UnknownArguments;

/// What the fake plugin does and saw.
#[derive(Debug, Default)]
struct Fake {
    slots: CallSlots,
    /// In order: `ready`, `wait`, `reserve`, `invoke <deadline ms>`.
    log: Mutex<Vec<String>>,
    requests: Mutex<Vec<AgentToolRequest>>,
    /// The plugin version each `ready` asked for, in order.
    versions: Mutex<Vec<String>>,
    /// What `ready` says (`None`: ready now).
    unavailable: Mutex<Option<PluginUnavailable>>,
    /// Opened by the test while the plugin is "starting".
    started: Notify,
    /// Closed while a test holds calls in flight.
    gate: Mutex<Option<Arc<Notify>>>,
    /// The answer to every invocation.
    answer: Mutex<Option<Result<AgentToolResponse, InvokeError>>>,
}

impl Fake {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn note(&self, what: impl Into<String>) {
        self.log.lock().unwrap().push(what.into());
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn invocations(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    fn answers(&self, r: Result<AgentToolResponse, InvokeError>) {
        *self.answer.lock().unwrap() = Some(r);
    }

    fn hold_calls(&self) -> Arc<Notify> {
        let gate = Arc::new(Notify::new());
        *self.gate.lock().unwrap() = Some(Arc::clone(&gate));
        gate
    }
}

struct Link(Arc<Fake>);

impl PluginPort for Arc<Fake> {
    fn ready(&self, _id: &str, version: &str) -> Result<Box<dyn PluginLink>, PluginUnavailable> {
        self.note("ready");
        self.versions.lock().unwrap().push(version.to_owned());
        match self.unavailable.lock().unwrap().clone() {
            None => Ok(Box::new(Link(Arc::clone(self)))),
            Some(e) => Err(e),
        }
    }

    fn ready_within<'a>(
        &'a self,
        _id: &'a str,
        _version: &'a str,
        wait: Duration,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn PluginLink>, PluginUnavailable>> {
        Box::pin(async move {
            self.note("wait");
            tokio::select! {
                () = cancel.cancelled() => Err(PluginUnavailable::Cancelled),
                () = self.started.notified() => Ok(Box::new(Link(Arc::clone(self))) as Box<dyn PluginLink>),
                () = tokio::time::sleep(wait) => Err(PluginUnavailable::NotReadyInTime {
                    id: "notes".into(),
                    ms: wait.as_millis(),
                }),
            }
        })
    }
}

impl PluginLink for Link {
    fn protocol(&self) -> u32 {
        1
    }

    fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        self.0.note("reserve");
        self.0.slots.try_reserve(max)
    }

    fn invoke(
        &self,
        slot: CallSlot,
        request: &ToolRequestRef<'_>,
        deadline: Duration,
        _max_answer_bytes: usize,
    ) -> BoxFuture<'_, Result<ToolAnswer, InvokeError>> {
        let request = request.to_message();
        Box::pin(async move {
            let _slot = slot;
            self.0.note(format!("invoke {}", deadline.as_millis()));
            self.0.requests.lock().unwrap().push(request);
            let gate = self.0.gate.lock().unwrap().clone();
            if let Some(g) = gate {
                g.notified().await;
            }
            self.0
                .answer
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_else(|| {
                    Ok(AgentToolResponse {
                        text: "done".into(),
                        structured_content: None,
                        is_error: false,
                    })
                })
                .map(Into::into)
        })
    }

    fn open_stream(
        &self,
        _slot: CallSlot,
        _start: Start,
        _deadline: Duration,
        _max_event_bytes: usize,
    ) -> BoxFuture<'_, Result<Box<dyn EventStream>, InvokeError>> {
        Box::pin(async { Err(InvokeError::TooLarge(0)) })
    }
}

/// Unused by protocol-1 fakes; here so the trait's shape is exercised.
#[allow(dead_code)]
struct NoStream;

impl EventStream for NoStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<PluginEvent>, InvokeError>> {
        Box::pin(async { Ok(None) })
    }
    fn answer(&self, _answer: WireAnswer) -> BoxFuture<'_, Result<(), InvokeError>> {
        Box::pin(async { Ok(()) })
    }
    fn finish(self: Box<Self>) {}
}

const NAME: &str = "kandev_notes_add";

fn add_note(timeout_ms: u32) -> Descriptor {
    Descriptor {
        plugin_id: "notes".into(),
        plugin_version: "1.0.0".into(),
        local_name: "add".into(),
        exposed_name: NAME.into(),
        title: None,
        description: "Adds a note.".into(),
        instructions: None,
        surfaces: vec!["chat".into()],
        input_schema: json!({
            "type": "object",
            "properties": { "text": { "type": "string", "maxLength": 100 } },
            "required": ["text"]
        })
        .into(),
        output_schema: None,
        annotations: Default::default(),
        timeout_ms,
        aliases: BTreeMap::new(),
        unknown_arguments: UnknownArguments::Reject,
        reset_timeout_on_progress: false,
        task: toolhost_catalog::TaskSupport::Never,
        task_timeout_ms: None,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    }
}

fn other_tool() -> Descriptor {
    Descriptor {
        local_name: "ping".into(),
        exposed_name: "kandev_notes_ping".into(),
        input_schema: json!({ "type": "object" }).into(),
        ..add_note(1000)
    }
}

fn offer(store: &Store, revision: u64, tools: Vec<Descriptor>) {
    let r = store.offer(Snapshot {
        generation: "g1".into(),
        epoch: 1,
        revision,
        tools,
    });
    assert_eq!(
        r.outcome,
        toolhost_catalog::Outcome::Accepted,
        "{:?}",
        r.reasons
    );
}

fn pipeline_with(fake: &Arc<Fake>, tools: Vec<Descriptor>, limits: Limits) -> Pipeline {
    let store = Arc::new(Store::new("kandev"));
    offer(&store, 1, tools);
    Pipeline::new(store, Arc::new(Arc::clone(fake)), limits)
}

fn pipeline(fake: &Arc<Fake>) -> Pipeline {
    pipeline_with(fake, vec![add_note(1000)], Limits::default())
}

fn chat() -> Binding {
    Binding::new("chat", "task-1", "session-1", None)
}

async fn call(p: &Pipeline, binding: &Binding, args: Value) -> CallResult {
    p.call(binding, NAME, Some(args), CancellationToken::new())
        .await
        .expect("the tool resolves")
}

fn code(r: &CallResult) -> &'static str {
    r.outcome()
}

/// Polls `condition` until it holds, or fails after five seconds.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// Step 1: resolve.

#[tokio::test]
async fn an_unknown_name_is_a_protocol_error_and_reaches_no_plugin() {
    let fake = Fake::new();
    let p = pipeline(&fake);
    let r = p
        .call(
            &chat(),
            "kandev_notes_nope",
            Some(json!({})),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.err(), Some(UnknownTool("kandev_notes_nope".into())));
    // A tool of another surface is not revealed either.
    let task = Binding::new("task", "t", "s", None);
    assert!(
        p.call(&task, NAME, Some(json!({})), CancellationToken::new())
            .await
            .is_err()
    );
    assert!(fake.log().is_empty(), "{:?}", fake.log());
}

// Steps 2 to 4: check.

#[tokio::test]
async fn a_refused_check_dispatches_nothing() {
    let fake = Fake::new();
    let p = pipeline(&fake);
    for args in [
        json!({ "txet": "hello" }),
        json!({}),
        json!({ "text": 5 }),
        json!({ "text": "x".repeat(101) }),
        json!("not an object"),
    ] {
        let r = call(&p, &chat(), args).await;
        assert_eq!(code(&r), "invalid_arguments", "{:?}", r.text());
    }
    assert!(
        fake.log().is_empty(),
        "a refused call asked nothing of the plugin: {:?}",
        fake.log()
    );
    assert_eq!(p.stats().count, 5);
}

#[tokio::test]
async fn an_unknown_argument_is_named_without_its_value() {
    let fake = Fake::new();
    let p = pipeline(&fake);
    let r = call(&p, &chat(), json!({ "txet": "a-secret-value" })).await;
    let text = r.text();
    assert!(text.contains("txet"), "{text}");
    assert!(text.contains("did you mean `text`"), "{text}");
    assert!(!text.contains("a-secret-value"), "{text}");
}

// Step 5: authorize against the state now.

#[tokio::test]
async fn authorization_reads_the_catalog_as_it_is_now() {
    let fake = Fake::new();
    let p = pipeline_with(&fake, vec![add_note(1000), other_tool()], Limits::default());
    let listed = p.store().current().get(NAME).cloned().expect("listed");
    let binding = chat();
    let step = |p: &Pipeline, version: &str| -> Step<Option<CatalogVersion>> {
        let mut c = Call {
            pipeline: p,
            binding: &binding,
            entry: &listed,
            reading: None,
            serving: None,
            invocation_id: "id".to_owned(),
            caller: &Silent,
            cancel: CancellationToken::new(),
            mode: CallMode::Direct,
            span: tracing::Span::none(),
            started: Instant::now(),
            authorized_at: None,
            events: crate::caller::EventCounts::default(),
            approval: ApprovalNote::default(),
            task_id: None,
            decision_id: None,
            // Not a call that ran: nothing to audit when it is dropped.
            audited: true,
        };
        c.authorize()
            .map(|()| c.authorized_at.clone())
            .inspect(|_| assert_eq!(c.version_to_call(), version))
    };
    // A revision that leaves the tool as it was: authorized against it.
    offer(p.store(), 2, vec![add_note(1000)]);
    assert_eq!(step(&p, "1.0.0").ok().flatten(), Some(("g1".to_owned(), 2)));
    // One that changes only the plugin's version (an upgrade of code):
    // the same declaration, authorized, and served by the new version.
    let upgraded = Descriptor {
        plugin_version: "1.1.0".into(),
        ..add_note(1000)
    };
    offer(p.store(), 3, vec![upgraded]);
    assert_eq!(step(&p, "1.1.0").ok().flatten(), Some(("g1".to_owned(), 3)));
    // A revision that changes its declaration: refused, though the call
    // resolved against the old one.
    offer(p.store(), 4, vec![add_note(2000)]);
    let refused = step(&p, "1.0.0").err().map(|CallFailure(r)| r.outcome());
    assert_eq!(refused, Some("tool_unavailable"));
    // And one that withdraws it.
    offer(p.store(), 5, vec![other_tool()]);
    let refused = step(&p, "1.0.0").err().map(|CallFailure(r)| r.outcome());
    assert_eq!(refused, Some("tool_unavailable"));
    assert!(fake.log().is_empty());
}

#[tokio::test]
async fn a_call_resolved_before_an_upgrade_of_code_only_goes_to_the_new_version() {
    let fake = Fake::new();
    let p = pipeline(&fake);
    let binding = chat();
    let Resolution::Found(found) = p.resolve(&binding, NAME) else {
        panic!("{NAME} resolves");
    };
    // The catalog is read, and the reading stays open: a drain that
    // advanced now would wait for this call.
    let epoch = p.store().grace().advance();
    assert_eq!(p.store().grace().readers_since(epoch), 1);
    let upgraded = Descriptor {
        plugin_version: "1.1.0".into(),
        ..add_note(1000)
    };
    offer(p.store(), 2, vec![upgraded]);
    let stage = p
        .admit(
            &binding,
            &found,
            Some(json!({ "text": "hi" })),
            &Silent,
            CancellationToken::new(),
            CallMode::Direct,
        )
        .await;
    // Admitted: it holds its plugin, so the reading has ended.
    assert_eq!(p.store().grace().readers_since(epoch), 0);
    let r = stage.run_to_end(None).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(*fake.versions.lock().unwrap(), ["1.1.0"]);
}

#[tokio::test]
async fn a_revoked_binding_is_refused_before_the_plugin_is_asked() {
    let fake = Fake::new();
    let p = pipeline(&fake);
    let binding = chat();
    binding.revoke();
    let r = call(&p, &binding, json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "not_authorized");
    assert!(fake.log().is_empty());
}

#[tokio::test]
async fn a_tool_withdrawn_while_its_plugin_starts_is_not_dispatched() {
    let fake = Fake::new();
    *fake.unavailable.lock().unwrap() = Some(PluginUnavailable::Starting("notes".into()));
    let p = Arc::new(pipeline_with(
        &fake,
        vec![add_note(5000), other_tool()],
        Limits::default(),
    ));
    let pending = tokio::spawn({
        let p = Arc::clone(&p);
        async move { call(&p, &chat(), json!({ "text": "hi" })).await }
    });
    until("the call waits for the plugin", || {
        fake.log().contains(&"wait".into())
    })
    .await;
    offer(p.store(), 2, vec![other_tool()]);
    fake.started.notify_one();
    let r = pending.await.expect("the call ends");
    assert_eq!(code(&r), "tool_unavailable", "{}", r.text());
    assert_eq!(fake.invocations(), 0);
}

#[tokio::test]
async fn a_starting_plugin_is_waited_for_within_the_deadline_it_counts_against() {
    let fake = Fake::new();
    *fake.unavailable.lock().unwrap() = Some(PluginUnavailable::Starting("notes".into()));
    let p = Arc::new(pipeline(&fake));
    let pending = tokio::spawn({
        let p = Arc::clone(&p);
        async move { call(&p, &chat(), json!({ "text": "hi" })).await }
    });
    until("the call waits for the plugin", || {
        fake.log().contains(&"wait".into())
    })
    .await;
    fake.started.notify_one();
    let r = pending.await.expect("the call ends");
    assert_eq!(code(&r), "ok", "{}", r.text());
    let log = fake.log();
    let Some(invoke) = log.iter().find(|l| l.starts_with("invoke ")) else {
        panic!("not dispatched: {log:?}");
    };
    let ms: u128 = invoke["invoke ".len()..].parse().expect("a deadline");
    assert!(ms <= 1000, "the wait counts against the deadline: {ms} ms");
}

#[tokio::test]
async fn an_unavailable_plugin_is_a_tool_result_that_says_why() {
    let fake = Fake::new();
    *fake.unavailable.lock().unwrap() = Some(PluginUnavailable::Failed("notes".into()));
    let p = pipeline_with(&fake, vec![add_note(50)], Limits::default());
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    // A failed plugin is waited for only as long as the call's deadline.
    assert_eq!(code(&r), "plugin_unavailable", "{}", r.text());
    assert_eq!(fake.invocations(), 0);
}

// Step 5, the backend, and the reservation.

/// What the plugin had seen (its log, the slots taken) each time the
/// backend was asked.
type Asked = Arc<Mutex<Vec<(Vec<String>, usize)>>>;

/// A backend that allows or denies, and records what the plugin had seen
/// when it was asked.
struct Backend {
    allow: bool,
    fake: Arc<Fake>,
    asked: Asked,
}

#[tonic::async_trait]
impl toolhost_proto::admin::authorizer_server::Authorizer for Backend {
    async fn authorize(
        &self,
        _req: tonic::Request<toolhost_proto::admin::AuthorizeRequest>,
    ) -> Result<tonic::Response<toolhost_proto::admin::AuthorizeResponse>, tonic::Status> {
        self.asked
            .lock()
            .unwrap()
            .push((self.fake.log(), self.fake.slots.taken()));
        Ok(tonic::Response::new(
            toolhost_proto::admin::AuthorizeResponse {
                allowed: self.allow,
                reason: if self.allow {
                    String::new()
                } else {
                    "not today".into()
                },
                needs_approval: false,
                ..Default::default()
            },
        ))
    }
}

async fn with_backend(fake: &Arc<Fake>, allow: bool) -> (Pipeline, Asked, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "toolhost-pipeline-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("backend.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let backend = Backend {
        allow,
        fake: Arc::clone(fake),
        asked: Arc::clone(&asked),
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(toolhost_proto::admin::authorizer_server::AuthorizerServer::new(backend))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let address =
        crate::authorize::AuthorizerAddress::parse(&format!("unix:{}", sock.display())).unwrap();
    let authorizer = Authorizer::new(&address, Duration::from_secs(5)).unwrap();
    (pipeline(fake).with_authorizer(authorizer), asked, dir)
}

#[tokio::test]
async fn the_backend_is_asked_after_the_local_checks_and_before_the_reservation() {
    let fake = Fake::new();
    let (p, asked, dir) = with_backend(&fake, true).await;
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    let seen = asked.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (plugin_log, slots_taken) = &seen[0];
    assert_eq!(
        plugin_log,
        &["ready"],
        "the plugin was found ready, nothing more"
    );
    assert_eq!(
        *slots_taken, 0,
        "no slot was held while the backend was asked"
    );
    assert_eq!(fake.log()[..2], ["ready", "reserve"]);
    // Arguments the local checks refuse never reach the backend.
    let r = call(&p, &chat(), json!({ "txet": "hi" })).await;
    assert_eq!(code(&r), "invalid_arguments");
    assert_eq!(
        asked.lock().unwrap().len(),
        1,
        "refused arguments never reach the backend"
    );
    assert_eq!(fake.log().len(), 3, "nor the plugin");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_backend_denial_takes_no_slot_and_dispatches_nothing() {
    let fake = Fake::new();
    let (p, asked, dir) = with_backend(&fake, false).await;
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "not_authorized");
    assert!(r.text().contains("not today"), "{}", r.text());
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert_eq!(fake.log(), ["ready"], "no reservation, no invocation");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_reservation_is_exact_under_concurrency() {
    let fake = Fake::new();
    let limits = Limits {
        max_calls_per_plugin: 4,
        ..Limits::default()
    };
    let p = Arc::new(pipeline_with(&fake, vec![add_note(5000)], limits));
    let gate = fake.hold_calls();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { call(&p, &chat(), json!({ "text": "hi" })).await })
        })
        .collect();
    // Twelve are refused at once; four are in the plugin.
    until("four calls in flight", || fake.invocations() == 4).await;
    until("every call past its reservation", || {
        fake.log().iter().filter(|l| *l == "reserve").count() == 16
    })
    .await;
    assert_eq!(fake.slots.taken(), 4);
    gate.notify_waiters();
    *fake.gate.lock().unwrap() = None;
    gate.notify_waiters();
    let mut outcomes = BTreeMap::new();
    for c in calls {
        let r = c.await.expect("the call ends");
        *outcomes.entry(code(&r)).or_insert(0) += 1;
        if code(&r) == "plugin_unavailable" {
            assert!(
                r.text().contains("already has 4 calls in flight"),
                "{}",
                r.text()
            );
        }
    }
    assert_eq!(
        outcomes,
        BTreeMap::from([("ok", 4), ("plugin_unavailable", 12)])
    );
    assert_eq!(
        fake.invocations(),
        4,
        "a refused call never reached the plugin"
    );
    assert_eq!(fake.slots.taken(), 0, "every slot came back");
    let r = call(&p, &chat(), json!({ "text": "again" })).await;
    assert_eq!(code(&r), "ok");
}

// Step 6: dispatch once.

#[tokio::test]
async fn one_dispatch_carries_the_local_name_the_context_and_a_capped_deadline() {
    let fake = Fake::new();
    let limits = Limits {
        max_timeout: Duration::from_millis(700),
        ..Limits::default()
    };
    let p = pipeline_with(&fake, vec![add_note(60_000)], limits);
    let binding = Binding::new("chat", "task-9", "session-9", Some("ws".into()));
    let r = call(&p, &binding, json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "ok");
    assert_eq!(fake.log(), ["ready", "reserve", "invoke 700"]);
    let requests = fake.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.name, "add");
    assert_eq!(req.invocation_id.len(), 32);
    let ctx = req.context.clone().expect("a context");
    assert_eq!(
        (
            ctx.task_id.as_str(),
            ctx.session_id.as_str(),
            ctx.workspace_id.as_str(),
            ctx.surface.as_str()
        ),
        ("task-9", "session-9", "ws", "chat")
    );
}

#[tokio::test]
async fn a_failed_invocation_is_never_retried_and_says_what_it_means() {
    let cases = [
        (
            InvokeError::Timeout(Duration::from_millis(5)),
            "timeout",
            "may or may not have taken effect",
        ),
        (
            InvokeError::Unavailable {
                plugin: "notes".into(),
                detail: "Unavailable".into(),
            },
            "plugin_unavailable",
            "may or may not have taken effect",
        ),
        (
            InvokeError::TooLarge(10),
            "result_too_large",
            "do not simply repeat the call",
        ),
        (
            InvokeError::Refused {
                plugin: "notes".into(),
                code: tonic::Code::NotFound,
                message: "no such tool".into(),
            },
            "plugin_error",
            "does not implement add:",
        ),
        (
            InvokeError::Refused {
                plugin: "notes".into(),
                code: tonic::Code::Internal,
                message: "the plugin's own words".into(),
            },
            "plugin_error",
            "gRPC error (Internal)",
        ),
    ];
    for (error, expected, says) in cases {
        let fake = Fake::new();
        fake.answers(Err(error));
        let p = pipeline(&fake);
        let r = call(&p, &chat(), json!({ "text": "hi" })).await;
        assert_eq!(code(&r), expected);
        assert!(r.text().contains(says), "{}", r.text());
        assert!(!r.text().contains("own words"), "{}", r.text());
        assert_eq!(fake.invocations(), 1, "attempted once");
    }
}

#[tokio::test]
async fn cancellation_ends_the_call_and_frees_its_slot() {
    let fake = Fake::new();
    let p = Arc::new(pipeline(&fake));
    let _gate = fake.hold_calls();
    let cancel = CancellationToken::new();
    let pending = tokio::spawn({
        let (p, cancel) = (Arc::clone(&p), cancel.clone());
        async move {
            p.call(&chat(), NAME, Some(json!({ "text": "hi" })), cancel)
                .await
        }
    });
    until("the call in the plugin", || fake.invocations() == 1).await;
    cancel.cancel();
    let r = pending.await.expect("the call ends").expect("resolved");
    assert_eq!(code(&r), "cancelled");
    until("the slot is free", || fake.slots.taken() == 0).await;
}

// Step 7: map.

#[tokio::test]
async fn a_result_over_the_limit_is_refused_and_says_the_tool_ran() {
    let fake = Fake::new();
    fake.answers(Ok(AgentToolResponse {
        text: "x".repeat(300),
        structured_content: None,
        is_error: false,
    }));
    let limits = Limits {
        max_result_bytes: 200,
        ..Limits::default()
    };
    let p = pipeline_with(&fake, vec![add_note(1000)], limits);
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "result_too_large");
    assert!(r.text().contains("the limit is 200 bytes"), "{}", r.text());
    assert!(r.text().contains("may have"), "{}", r.text());
}

fn with_output_schema() -> Descriptor {
    Descriptor {
        output_schema: Some(
            json!({
                "type": "object",
                "properties": { "id": { "type": "integer" } },
                "required": ["id"]
            })
            .into(),
        ),
        ..add_note(1000)
    }
}

fn structured(v: Value, is_error: bool) -> AgentToolResponse {
    let Value::Object(m) = v else {
        panic!("an object")
    };
    AgentToolResponse {
        text: "t".into(),
        structured_content: Some(toolhost_proto::json::struct_from_json(&m)),
        is_error,
    }
}

#[tokio::test]
async fn structured_content_must_match_the_output_schema_unless_it_is_an_error() {
    let fake = Fake::new();
    let p = pipeline_with(&fake, vec![with_output_schema()], Limits::default());
    fake.answers(Ok(structured(json!({ "id": 7 }), false)));
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "ok");
    assert_eq!(r.structured, Some(json!({ "id": 7 })));
    fake.answers(Ok(structured(json!({ "id": "seven" }), false)));
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "plugin_error");
    assert!(!r.text().contains("seven"), "no value echoed: {}", r.text());
    assert!(r.text().contains("/id"), "the place is named: {}", r.text());
    fake.answers(Ok(AgentToolResponse {
        text: "no structure".into(),
        structured_content: None,
        is_error: false,
    }));
    assert_eq!(
        code(&call(&p, &chat(), json!({ "text": "hi" })).await),
        "plugin_error"
    );
    // The plugin's own error that fits the schema keeps its structure;
    // one that does not is moved where no client checks it.
    fake.answers(Ok(structured(json!({ "id": 3 }), true)));
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "tool_error");
    assert_eq!(r.structured, Some(json!({ "id": 3 })));
    fake.answers(Ok(structured(json!({ "reason": "quota" }), true)));
    let r = call(&p, &chat(), json!({ "text": "hi" })).await;
    assert_eq!(code(&r), "tool_error");
    assert!(r.is_error);
    assert_eq!(r.structured, None);
    assert_eq!(
        r.meta.as_ref().map(|m| m["structured_error"].clone()),
        Some(json!({ "reason": "quota" }))
    );
}

/// Every failure of a tool with an output schema: the error in `_meta`
/// only, so a client that checks structured content on errors accepts it;
/// without an output schema, in both places.
#[tokio::test]
async fn a_failure_never_breaks_the_tools_output_schema() {
    let fake = Fake::new();
    let p = pipeline_with(&fake, vec![with_output_schema()], Limits::default());
    let checks = [
        (json!({ "text": 5 }), None, "invalid_arguments"),
        (
            json!({ "text": "hi" }),
            Some(Err(InvokeError::Timeout(Duration::from_millis(5)))),
            "timeout",
        ),
        (
            json!({ "text": "hi" }),
            Some(Err(InvokeError::TooLarge(10))),
            "result_too_large",
        ),
        (
            json!({ "text": "hi" }),
            Some(Ok(structured(json!({ "id": "x" }), false))),
            "plugin_error",
        ),
    ];
    for (args, answer, want) in checks {
        if let Some(a) = answer {
            fake.answers(a);
        }
        let r = call(&p, &chat(), args).await;
        assert_eq!(code(&r), want, "{}", r.text());
        assert_eq!(r.structured, None, "{want}: structured content on an error");
        let error = r
            .meta
            .as_ref()
            .map(|m| m["error"].clone())
            .unwrap_or_default();
        assert_eq!(error["code"], want);
        assert!(r.text().starts_with(&format!("Error ({want}): ")));
    }
    let p = pipeline_with(&fake, vec![add_note(1000)], Limits::default());
    let r = call(&p, &chat(), json!({ "text": 5 })).await;
    assert_eq!(
        r.structured.as_ref().map(|s| s["error"]["code"].clone()),
        Some(json!("invalid_arguments"))
    );
    assert_eq!(
        r.meta.as_ref().map(|m| m["error"]["code"].clone()),
        Some(json!("invalid_arguments"))
    );
}

#[tokio::test]
async fn report_mode_names_the_ignored_arguments_beside_the_result() {
    let fake = Fake::new();
    let mut read_only = Descriptor {
        unknown_arguments: UnknownArguments::Report,
        output_schema: Some(
            json!({ "type": "object", "additionalProperties": false, "properties": { "id": {} } })
                .into(),
        ),
        ..add_note(1000)
    };
    read_only.annotations.read_only = true;
    read_only.annotations.destructive = false;
    let p = pipeline_with(&fake, vec![read_only], Limits::default());
    fake.answers(Ok(structured(json!({ "id": 1 }), false)));
    let r = call(&p, &chat(), json!({ "text": "hi", "colour": "red" })).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert!(
        r.text().contains("(ignored unknown arguments: colour)"),
        "{}",
        r.text()
    );
    assert_eq!(
        r.structured,
        Some(json!({ "id": 1 })),
        "structured content stays the plugin's"
    );
    let meta = r.meta.clone().expect("_meta");
    assert_eq!(meta["unknown_args"], json!(["colour"]));
    // The plugin never saw the key.
    let requests = fake.requests.lock().unwrap().clone();
    let args =
        toolhost_proto::json::json_from_struct(requests[0].arguments.as_ref().expect("arguments"));
    assert!(!args.contains_key("colour"));
}

/// A policy that asks about every call, and allows it once answered.
#[derive(Debug)]
struct AlwaysAsk;

struct AskOnce;

impl Asking for AskOnce {
    fn question(&self) -> crate::caller::Question {
        crate::caller::Question {
            message: "Run it?".into(),
            requested_schema: Map::new(),
        }
    }

    fn answered(self: Box<Self>, asked: crate::policy::Asked) -> Decision {
        match asked {
            crate::policy::Asked::Answered(..) => Decision::Allow(ApprovalNote {
                by: Some("user"),
                arguments_digest: None,
            }),
            _ => Decision::Refuse(
                Refusal::new(ErrorCode::NotAuthorized, "not approved"),
                ApprovalNote::default(),
            ),
        }
    }
}

impl Policy for AlwaysAsk {
    fn screen(&self, _call: &CallFacts<'_>) -> Result<(), Refusal> {
        Ok(())
    }

    fn decide(&self, _call: &CallFacts<'_>, _backend: Option<&str>, _can_ask: bool) -> Decision {
        Decision::Ask(Box::new(AskOnce))
    }
}

/// A person who answers once the test lets them.
struct Person(Arc<Notify>);

impl Caller for Person {
    fn wants_progress(&self) -> bool {
        false
    }
    fn log_level(&self) -> Option<crate::caller::LogLevel> {
        None
    }
    fn can_ask(&self) -> bool {
        true
    }
    fn progress(&self, _update: crate::caller::Progress) {}
    fn log(&self, _message: crate::caller::LogMessage) {}
    fn ask(&self, _question: crate::caller::Question) -> crate::caller::AskFuture<'_> {
        Box::pin(async move {
            self.0.notified().await;
            Ok(crate::caller::Answer {
                action: crate::caller::AnswerAction::Accept,
                content: None,
            })
        })
    }
}

#[tokio::test]
async fn a_call_waiting_for_a_person_holds_no_plugin_and_runs_on_the_version_serving_it_then() {
    let fake = Fake::new();
    let p = Arc::new(pipeline(&fake).with_policy(Arc::new(AlwaysAsk)));
    let answer = Arc::new(Notify::new());
    let pending = tokio::spawn({
        let (p, answer) = (Arc::clone(&p), Arc::clone(&answer));
        async move {
            let person = Person(answer);
            p.call_for(
                &chat(),
                NAME,
                Some(json!({ "text": "hi" })),
                &person,
                CancellationToken::new(),
            )
            .await
            .expect("the tool resolves")
        }
    });
    until("the plugin was found ready before the question", || {
        fake.log().contains(&"ready".into())
    })
    .await;
    // While the person thinks, the plugin is upgraded (code only).
    let upgraded = Descriptor {
        plugin_version: "1.1.0".into(),
        ..add_note(1000)
    };
    offer(p.store(), 2, vec![upgraded]);
    answer.notify_one();
    let r = pending.await.expect("the call ends");
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(*fake.versions.lock().unwrap(), ["1.0.0", "1.1.0"]);
    assert_eq!(fake.invocations(), 1);
}

#[test]
fn a_result_is_measured_as_the_json_it_would_be_written_as() {
    for v in [
        json!(null),
        json!({}),
        json!({ "a": [1, 2.5, "x\"y\u{1}"], "b": { "c": true, "é": null } }),
        json!("x".repeat(10_000)),
    ] {
        assert_eq!(encoded_len(&v), serde_json::to_vec(&v).unwrap().len());
    }
}
