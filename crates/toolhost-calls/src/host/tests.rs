//! The call host against a fake pipeline ([`Fake`]) whose "plugin" does
//! what each test scripts: progress, a question, a wait for cancellation,
//! a refusal before admission. Each delivery is a [`Recorder`] that keeps
//! what reached it and routes questions as the test says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use super::*;
use crate::deliver::{BoxFuture, Route};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolhost_catalog::{Descriptor, Snapshot, Store, TaskSupport};
use toolhost_pipeline::content::Block;
use toolhost_pipeline::{AnswerAction, Caller, LogLevel, LogMessage, Progress};

/// What the fake plugin does with a call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Script {
    /// Answers "ok".
    Answer,
    /// Sends this many progress updates and two log messages, then answers.
    Chatty(u32),
    /// Asks one question and answers with what it got.
    Ask,
    /// Waits until cancelled.
    Wait,
    /// Refuses before admission (a validation failure, say).
    RefuseEarly,
}

struct Fake {
    store: Arc<Store>,
    script: Mutex<Script>,
    runs: AtomicUsize,
    cancelled: AtomicUsize,
    ended: AtomicUsize,
}

fn text(s: &str) -> CallResult {
    CallResult {
        content: vec![Block::text(s)],
        structured: None,
        is_error: false,
        code: None,
        meta: None,
    }
}

impl CallPipeline for Fake {
    fn resolve(&self, binding: &Binding, name: &str) -> Resolution {
        match self.store.current().resolve(&binding.surface, name) {
            Some(entry) => {
                let (reading, _) = self.store.read_for_call();
                Resolution::Found(Found::new(Arc::clone(entry), reading))
            }
            None => Resolution::Answered(Err(UnknownTool(name.to_owned()))),
        }
    }

    fn admit<'a>(
        &'a self,
        _binding: &'a Binding,
        _found: &'a Found,
        _arguments: Option<Value>,
        caller: &'a dyn Caller,
        cancel: CancellationToken,
        _mode: CallMode,
    ) -> crate::port::BoxFuture<'a, Admission<'a>> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            let script = *self.script.lock().unwrap();
            if script == Script::RefuseEarly {
                self.ended.fetch_add(1, Ordering::SeqCst);
                return Admission::Done(CallResult::failure(
                    ErrorCode::InvalidArguments,
                    "refused",
                    None,
                ));
            }
            Admission::Admitted(Box::new(FakeCall {
                fake: self,
                caller,
                cancel,
                script,
            }))
        })
    }

    fn max_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }
}

/// A call the fake admitted: the script runs when it is finished.
struct FakeCall<'a> {
    fake: &'a Fake,
    caller: &'a dyn Caller,
    cancel: CancellationToken,
    script: Script,
}

impl<'a> crate::port::Admitted<'a> for FakeCall<'a> {
    fn finish(self: Box<Self>, _task: Option<String>) -> crate::port::BoxFuture<'a, CallResult> {
        Box::pin(async move {
            let FakeCall {
                fake,
                caller,
                cancel,
                script,
            } = *self;
            let r = match script {
                Script::Chatty(n) => {
                    for i in 1..=n {
                        caller.progress(Progress {
                            progress: f64::from(i),
                            total: Some(f64::from(n)),
                            message: Some(format!("step {i}")),
                        });
                    }
                    for m in ["first", "second"] {
                        caller.log(LogMessage {
                            level: LogLevel::Info,
                            logger: None,
                            message: m.into(),
                            data: None,
                        });
                    }
                    text("ok")
                }
                Script::Ask => {
                    let q = Question {
                        message: "Sure?".into(),
                        requested_schema: serde_json::json!({
                            "type": "object",
                            "properties": { "ok": { "type": "boolean" } }
                        })
                        .as_object()
                        .cloned()
                        .unwrap(),
                    };
                    match caller.ask(q).await {
                        Ok(a) => text(&format!("answered {:?}", a.action)),
                        Err(e) => text(&format!("unanswered: {e}")),
                    }
                }
                Script::Wait => {
                    cancel.cancelled().await;
                    fake.cancelled.fetch_add(1, Ordering::SeqCst);
                    CallResult::failure(ErrorCode::Cancelled, "cancelled", None)
                }
                Script::Answer | Script::RefuseEarly => text("ok"),
            };
            fake.ended.fetch_add(1, Ordering::SeqCst);
            r
        })
    }

    fn abandon(self: Box<Self>, result: CallResult) -> CallResult {
        self.fake.ended.fetch_add(1, Ordering::SeqCst);
        result
    }
}

fn tool(name: &str, task: TaskSupport) -> Descriptor {
    Descriptor {
        plugin_id: "t".into(),
        plugin_version: "1.0.0".into(),
        local_name: name.into(),
        exposed_name: format!("kandev_t_{name}"),
        title: None,
        description: "A tool.".into(),
        instructions: None,
        surfaces: vec!["chat".into()],
        input_schema: serde_json::json!({ "type": "object" }).into(),
        output_schema: None,
        annotations: Default::default(),
        timeout_ms: 10_000,
        aliases: BTreeMap::new(),
        unknown_arguments: toolhost_validate::UnknownArguments::Reject,
        reset_timeout_on_progress: false,
        task,
        task_timeout_ms: None,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    }
}

fn host(script: Script) -> (Arc<CallHost>, Arc<Fake>) {
    let store = Arc::new(Store::new("kandev"));
    let r = store.offer(Snapshot {
        generation: "g1".into(),
        epoch: 1,
        revision: 1,
        tools: vec![
            tool("plain", TaskSupport::Never),
            tool("either", TaskSupport::Optional),
            tool("only_task", TaskSupport::Required),
        ],
    });
    assert_eq!(r.outcome, toolhost_catalog::Outcome::Accepted, "{r:?}");
    let fake = Arc::new(Fake {
        store,
        script: Mutex::new(script),
        runs: AtomicUsize::new(0),
        cancelled: AtomicUsize::new(0),
        ended: AtomicUsize::new(0),
    });
    let host = CallHost::new(
        Arc::clone(&fake) as _,
        Arc::new(Tasks::new(crate::tasks::TaskLimits::default())),
    );
    (Arc::new(host), fake)
}

fn request(name: &str, tasks: TaskOffer) -> CallRequest {
    CallRequest {
        binding: Arc::new(Binding::new("chat", "task-1", "session-1", None)),
        name: format!("kandev_t_{name}"),
        arguments: None,
        wants: Wants {
            progress: true,
            log_level: Some(LogLevel::Debug),
            can_ask: true,
        },
        owner: [7; 32],
        tasks,
    }
}

/// How a recorder routes a question.
#[derive(Clone, Copy)]
enum Asks {
    Answer,
    Park,
    Refuse,
}

/// A delivery that keeps what reached it.
struct Recorder {
    asks: Asks,
    seen: Mutex<Vec<String>>,
}

impl Recorder {
    fn new(asks: Asks) -> Self {
        Self {
            asks,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Delivery for Recorder {
    fn progress(&self, update: Progress) -> BoxFuture<'_, ()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("progress {}", update.progress));
        Box::pin(std::future::ready(()))
    }

    fn log(&self, message: LogMessage) -> BoxFuture<'_, ()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("log {}", message.message));
        Box::pin(std::future::ready(()))
    }

    fn question(&self, q: &Question) -> Route<'_> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("question {}", q.message));
        match self.asks {
            Asks::Answer => Route::Asked(Box::pin(async {
                Ok(Answer {
                    action: AnswerAction::Accept,
                    content: Some(serde_json::json!({ "ok": true })),
                })
            })),
            Asks::Park => Route::Park,
            Asks::Refuse => Route::Refused(Unanswered::CannotAsk),
        }
    }
}

fn never() -> CancellationToken {
    CancellationToken::new()
}

fn result_text(h: &Hosted) -> String {
    match h {
        Hosted::Done(Ok(r)) => r.text(),
        other => panic!("not done: {other:?}"),
    }
}

#[tokio::test]
async fn a_sessions_progress_and_logs_arrive_before_its_result_the_last_update_included() {
    let (host, fake) = host(Script::Chatty(100));
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let hosted = host
        .call(request("plain", TaskOffer::NotOffered), &to, stop)
        .await;
    assert_eq!(result_text(&hosted), "ok");
    let seen = to.seen();
    assert_eq!(
        seen.last().map(String::as_str),
        Some("progress 100"),
        "{seen:?}"
    );
    let progress = seen.iter().filter(|s| s.starts_with("progress")).count();
    assert!(progress < 100, "coalesced: {progress} updates delivered");
    let logs: Vec<&String> = seen.iter().filter(|s| s.starts_with("log")).collect();
    assert_eq!(logs, ["log first", "log second"]);
    assert_eq!(fake.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_question_asked_in_the_session_is_answered_while_the_call_waits() {
    let (host, _) = host(Script::Ask);
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let hosted = host
        .call(request("plain", TaskOffer::NotOffered), &to, stop)
        .await;
    assert_eq!(result_text(&hosted), "answered Accept");
    assert_eq!(to.seen(), ["question Sure?"]);
}

#[tokio::test]
async fn a_parked_question_waits_for_a_later_request_which_drives_the_call_on() {
    let (host, fake) = host(Script::Ask);
    let to = Recorder::new(Asks::Park);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let hosted = host
        .call(
            request("plain", TaskOffer::Offered { declared: false }),
            &to,
            stop,
        )
        .await;
    let Hosted::Parked { handle, question } = hosted else {
        panic!("{hosted:?}")
    };
    assert_eq!(question.message, "Sure?");
    assert_eq!(host.parked_len(), 1);
    assert_eq!(
        host.take_parked(&handle, &[8; 32], "kandev_t_plain", None)
            .err(),
        Some(NotTaken::Unknown),
        "another owner's handle is unknown"
    );
    let other = serde_json::json!({"other": true});
    assert_eq!(
        host.take_parked(&handle, &[7; 32], "kandev_t_plain", Some(&other))
            .err(),
        Some(NotTaken::OtherArguments),
        "a retry with other arguments is another call, and the call stays parked"
    );
    let waiting = host
        .take_parked(&handle, &[7; 32], "kandev_t_plain", None)
        .unwrap();
    let answer = Answer {
        action: AnswerAction::Decline,
        content: None,
    };
    let hosted = host.resume(waiting, answer, true, &to, stop).await;
    assert_eq!(result_text(&hosted), "answered Decline");
    assert_eq!(fake.runs.load(Ordering::SeqCst), 1, "one attempt");
}

#[tokio::test]
async fn a_plain_call_refuses_a_question_it_cannot_take() {
    let (host, _) = host(Script::Ask);
    let to = Recorder::new(Asks::Refuse);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let hosted = host
        .call(request("plain", TaskOffer::NotOffered), &to, stop)
        .await;
    assert!(result_text(&hosted).starts_with("unanswered: this client cannot answer"));
}

#[tokio::test]
async fn a_cancelled_request_cancels_its_call_which_ends_once() {
    let (host, fake) = host(Script::Wait);
    let to = Recorder::new(Asks::Answer);
    let cancel = CancellationToken::new();
    let waiting = {
        let (host, cancel) = (Arc::clone(&host), cancel.clone());
        tokio::spawn(async move {
            let to = Recorder::new(Asks::Answer);
            let stop = Stop {
                request: &cancel,
                gone: None,
            };
            host.call(request("plain", TaskOffer::NotOffered), &to, stop)
                .await
        })
    };
    until("the call runs", || fake.runs.load(Ordering::SeqCst) == 1).await;
    cancel.cancel();
    let hosted = waiting.await.unwrap();
    let Hosted::Done(Ok(r)) = hosted else {
        panic!("{hosted:?}")
    };
    assert_eq!(r.code, Some(ErrorCode::Cancelled));
    assert_eq!(fake.cancelled.load(Ordering::SeqCst), 1);
    assert!(to.seen().is_empty());
}

#[tokio::test]
async fn a_dropped_driver_cancels_its_call_which_still_runs_to_its_end() {
    let (host, fake) = host(Script::Wait);
    let driving = {
        let host = Arc::clone(&host);
        tokio::spawn(async move {
            let to = Recorder::new(Asks::Answer);
            let never = CancellationToken::new();
            let stop = Stop {
                request: &never,
                gone: None,
            };
            host.call(request("plain", TaskOffer::NotOffered), &to, stop)
                .await
        })
    };
    until("the call runs", || fake.runs.load(Ordering::SeqCst) == 1).await;
    // The connection closed: the request's future is dropped mid-call.
    driving.abort();
    until("the call ends on its own", || {
        fake.ended.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(fake.cancelled.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_task_is_created_only_once_the_call_is_admitted() {
    let (host, fake) = host(Script::RefuseEarly);
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let declared = TaskOffer::Offered { declared: true };
    let hosted = host.call(request("either", declared), &to, stop).await;
    let Hosted::Done(Ok(r)) = hosted else {
        panic!("refused before admission is a direct answer: {hosted:?}")
    };
    assert_eq!(r.code, Some(ErrorCode::InvalidArguments));
    assert!(host.tasks().list(Instant::now()).is_empty(), "no task");

    *fake.script.lock().unwrap() = Script::Chatty(3);
    let hosted = host.call(request("either", declared), &to, stop).await;
    let Hosted::Task(view) = hosted else {
        panic!("{hosted:?}")
    };
    let tasks = Arc::clone(host.tasks());
    until("the task completes", || {
        tasks
            .list(Instant::now())
            .iter()
            .any(|t| t.id == view.id && t.state == "completed")
    })
    .await;
    assert!(to.seen().is_empty(), "a task's events go to the task");
}

#[tokio::test]
async fn a_tasks_question_waits_for_its_answer_and_progress_becomes_its_status() {
    let (host, _) = host(Script::Ask);
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let req = request("either", TaskOffer::Offered { declared: true });
    let owner = task_owner(&req.owner, &req.binding);
    let Hosted::Task(view) = host.call(req, &to, stop).await else {
        panic!("not a task")
    };
    let tasks = Arc::clone(host.tasks());
    until("input_required", || {
        matches!(
            tasks.get(&owner, &view.id, Instant::now()).map(|v| v.state),
            Some(TaskState::InputRequired { .. })
        )
    })
    .await;
    let answered = tasks.answer(&owner, &view.id, |key| {
        assert_eq!(key, "question-1");
        Some(Answer {
            action: AnswerAction::Accept,
            content: Some(serde_json::json!({ "ok": "not a boolean" })),
        })
    });
    assert!(
        matches!(answered, Err(crate::tasks::NotAnswered::DoesNotFit(ref m)) if !m.contains("not a boolean")),
        "refused, the value not echoed: {answered:?}"
    );
    tasks
        .answer(&owner, &view.id, |_| {
            Some(Answer {
                action: AnswerAction::Accept,
                content: Some(serde_json::json!({ "ok": true })),
            })
        })
        .unwrap();
    until("completed", || {
        matches!(
            tasks.get(&owner, &view.id, Instant::now()).map(|v| v.state),
            Some(TaskState::Completed(_))
        )
    })
    .await;
    let Some(TaskState::Completed(r)) =
        tasks.get(&owner, &view.id, Instant::now()).map(|v| v.state)
    else {
        unreachable!()
    };
    assert_eq!(r.text(), "answered Accept");
}

#[tokio::test]
async fn how_a_call_runs_follows_its_tools_declaration_and_the_callers_offer() {
    let (host, fake) = host(Script::Answer);
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let undeclared = TaskOffer::Offered { declared: false };
    let hosted = host.call(request("only_task", undeclared), &to, stop).await;
    assert!(matches!(hosted, Hosted::NeedsTasks), "{hosted:?}");
    assert_eq!(fake.runs.load(Ordering::SeqCst), 0, "refused before it ran");
    let hosted = host
        .call(request("only_task", TaskOffer::NotOffered), &to, stop)
        .await;
    assert_eq!(result_text(&hosted), "ok", "no tasks in this era: direct");
    let hosted = host.call(request("either", undeclared), &to, stop).await;
    assert_eq!(result_text(&hosted), "ok");
    let hosted = host
        .call(request("missing", TaskOffer::NotOffered), &to, stop)
        .await;
    assert!(matches!(hosted, Hosted::Done(Err(_))), "{hosted:?}");
}

struct Find;

impl crate::port::Builtin for Find {
    fn claims(&self, name: &str) -> bool {
        name == "kandev_find"
    }
    fn answer(&self, _: &Binding, _: &str, _: Option<Value>) -> CallResult {
        text("found")
    }
}

#[tokio::test]
async fn the_builtin_tool_is_answered_without_the_pipeline() {
    let (host, fake) = host(Script::Answer);
    host.set_builtin(Arc::new(Find));
    let to = Recorder::new(Asks::Answer);
    let stop = never();
    let stop = Stop {
        request: &stop,
        gone: None,
    };
    let mut req = request("plain", TaskOffer::NotOffered);
    req.name = "kandev_find".into();
    assert_eq!(result_text(&host.call(req, &to, stop).await), "found");
    assert_eq!(fake.runs.load(Ordering::SeqCst), 0);
}

/// Polls `condition` until it holds, or fails after five seconds.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
