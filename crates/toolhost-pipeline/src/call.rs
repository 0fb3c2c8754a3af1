//! The pipeline itself: one function per step, chained with `?`.
//!
//! [`Pipeline::call`] resolves the name (step 1: an unknown name is a
//! protocol error, not a tool result), then runs the steps of one [`Call`]
//! in order. Each step returns `Result<_, CallFailure>`: the first that
//! fails ends the call with a tool result the model can act on, and every
//! call, however it ended, gets one audit event.
//!
//! - 1: resolve (`Pipeline::call`);
//! - 2 to 4: check: bound, aliases, the closed root and the schema
//!   (`Call::check`);
//! - 5: authorize against the state now (`Call::authorize`), wait for a
//!   starting plugin (`Call::plugin`), ask the backend (`Call::ask_backend`),
//!   get a person's approval where the policy or the backend wants one
//!   (`Call::approve`) and take a place among the plugin's calls in flight
//!   (`Call::reserve`);
//! - 6: dispatch exactly once (`Call::dispatch`);
//! - 7: map the answer (`Call::map`);
//! - 8: audit (`Pipeline::call`).
//!
//! With telemetry on, the steps that take time are spans under the
//! request's SERVER span (`toolhost.validate`, `toolhost.authorize`,
//! `toolhost.plugin_wait` when the plugin is starting,
//! `toolhost.backend_authorize`, `toolhost.dispatch`); a step that fails
//! carries the call's outcome code as `error.type`.
//!
//! Kept in one file on purpose: the steps read in the order they run, and
//! each is short; split apart, the order that is the pipeline's whole
//! point would live nowhere.

use crate::authorize::{Authorizer, Verdict};
use crate::binding::Binding;
use crate::caller::{Caller, Silent, Unanswered};
use crate::content::Block;
use crate::counters::{CallStats, Counters};
use crate::policy::{ApprovalNote, Asked, Asking, CallFacts, Decision, NoPolicy, Policy, Refusal};
use crate::port::{PluginLink, PluginPort};
use crate::result::{CallResult, ErrorCode};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolhost_base::log_safe;
use toolhost_catalog::{Entry, Reading, Store};
use toolhost_proto::answer::ToolAnswer;
use toolhost_proto::plugin::Credential;
use toolhost_proto::request::{ContextRef, ToolRequestRef};
use toolhost_runtime::{CallSlot, InvokeError, PluginUnavailable};
use toolhost_telemetry::Step as Traced;
use toolhost_validate::{Checked, ToolPolicy, Violation, check_arguments};
use tracing::Instrument as _;

/// A tool [`Pipeline::resolve`] found, and the catalog reading it came
/// from, open until the call holds its plugin process: an upgrade that
/// replaced the tool's plugin meanwhile waits for that before it stops
/// the old process (`toolhost_catalog::Grace`).
#[derive(Debug)]
pub struct Found {
    entry: Arc<Entry>,
    reading: Reading,
}

impl Found {
    /// `entry`, read from the catalog during `reading`.
    #[must_use]
    pub fn new(entry: Arc<Entry>, reading: Reading) -> Self {
        Self { entry, reading }
    }

    /// The tool's entry in the catalog it was resolved in.
    #[must_use]
    pub fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }
}

/// What [`Pipeline::resolve`] found for a name.
#[derive(Debug)]
pub enum Resolution {
    /// A tool of the session's surface, served now.
    Found(Found),
    /// No such tool for this session: the call's whole answer, audited.
    Answered(Result<CallResult, UnknownTool>),
}

/// Daemon-wide caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// No call waits longer than this, whatever its tool declares.
    pub max_timeout: Duration,
    /// Largest result (text plus structured content, serialized).
    pub max_result_bytes: usize,
    /// Most calls in flight per plugin; more fail fast as
    /// `plugin_unavailable` instead of queueing behind a slow plugin.
    pub max_calls_per_plugin: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_timeout: Duration::from_secs(300),
            max_result_bytes: 1024 * 1024,
            max_calls_per_plugin: 64,
        }
    }
}

/// Step 1 found nothing: a protocol error, `Unknown tool: <name>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unknown tool: {0}")]
pub struct UnknownTool(pub String);

/// A step refused the call: the tool result that says why.
#[derive(Debug)]
pub(crate) struct CallFailure(CallResult);

impl CallFailure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(CallResult::failure(code, message, None))
    }

    pub(crate) fn with_violations(
        code: ErrorCode,
        message: impl Into<String>,
        v: &[Violation],
    ) -> Self {
        Self(CallResult::failure(code, message, Some(v)))
    }
}

pub(crate) type Step<T> = Result<T, CallFailure>;

/// (generation, revision) of a catalog version.
type CatalogVersion = (String, u64);

/// The call pipeline, shared by every session.
#[derive(Debug)]
pub struct Pipeline {
    store: Arc<Store>,
    plugins: Arc<dyn PluginPort>,
    pub(crate) limits: Limits,
    /// The backend's `Authorize`, when configured.
    authorizer: Option<Authorizer>,
    /// The operator's word: rate limits, argument rules, approvals.
    policy: Arc<dyn Policy>,
    /// Tokens for the services plugins call on their callers' behalf.
    credentials: Option<Arc<dyn crate::credentials::Credentials>>,
    /// What each session was shown of each tool.
    pins: Arc<crate::pins::Pins>,
    counters: Counters,
}

impl Pipeline {
    /// A pipeline over this catalog and these plugins (the daemon passes
    /// the runtime's registry, `toolhost_runtime::Plugins`).
    #[must_use]
    pub fn new(store: Arc<Store>, plugins: Arc<dyn PluginPort>, limits: Limits) -> Self {
        Self {
            store,
            plugins,
            limits,
            authorizer: None,
            policy: Arc::new(NoPolicy),
            credentials: None,
            pins: Arc::default(),
            counters: Counters::default(),
        }
    }

    /// What each session last listed: the listing records it, and a call
    /// of a tool whose contract changed since is refused once.
    #[must_use]
    pub fn pins(&self) -> &Arc<crate::pins::Pins> {
        &self.pins
    }

    /// Asks `policy` about every call (`toolhost-policy` implements it).
    #[must_use]
    pub fn with_policy(mut self, policy: Arc<dyn Policy>) -> Self {
        self.policy = policy;
        self
    }

    /// Asks `authorizer` about every call, after the local checks.
    #[must_use]
    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Gets tokens for plugins' audiences through `credentials`.
    #[must_use]
    pub fn with_credentials(
        mut self,
        credentials: Arc<dyn crate::credentials::Credentials>,
    ) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Call counters and durations so far, for metrics.
    #[must_use]
    pub fn stats(&self) -> CallStats {
        self.counters.snapshot()
    }

    /// The longest any call may run.
    #[must_use]
    pub fn max_timeout(&self) -> Duration {
        self.limits.max_timeout
    }

    /// The catalog store.
    #[must_use]
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Runs one `tools/call` for a caller that takes no progress, logs or
    /// questions. `cancel` is the agent's cancellation.
    pub async fn call(
        &self,
        binding: &Binding,
        name: &str,
        arguments: Option<Value>,
        cancel: CancellationToken,
    ) -> Result<CallResult, UnknownTool> {
        self.call_for(binding, name, arguments, &Silent, cancel)
            .await
    }

    /// Runs one direct `tools/call` through every stage; a protocol-2
    /// plugin's progress, log messages and questions go to `caller`.
    /// `cancel` is the agent's cancellation.
    pub async fn call_for(
        &self,
        binding: &Binding,
        name: &str,
        arguments: Option<Value>,
        caller: &dyn Caller,
        cancel: CancellationToken,
    ) -> Result<CallResult, UnknownTool> {
        match self.resolve(binding, name) {
            Resolution::Found(found) => {
                let stage = self
                    .admit(binding, &found, arguments, caller, cancel, CallMode::Direct)
                    .await;
                Ok(stage.run_to_end(None).await)
            }
            Resolution::Answered(answer) => answer,
        }
    }

    /// Step 1: the tool `name` among those `binding`'s surface can see.
    /// A name that resolves to nothing is answered here, audited and
    /// counted: a tool this surface would see, declared but not served
    /// now, is unavailable for a reason the agent is told; any other name
    /// is unknown (and nothing about other surfaces shows).
    pub fn resolve(&self, binding: &Binding, name: &str) -> Resolution {
        let (reading, catalog) = self.store.read_for_call();
        if let Some(entry) = catalog.resolve(&binding.surface, name) {
            return Resolution::Found(Found::new(Arc::clone(entry), reading));
        }
        drop((reading, catalog));
        let why = self.store.why_absent(&binding.surface, name);
        let outcome = if why.is_some() {
            "tool_unavailable"
        } else {
            "unknown_tool"
        };
        // An id for the audit line only: nothing runs, so a failed
        // generator costs nothing here.
        let invocation_id = toolhost_base::ids::unguessable_id().unwrap_or_default();
        tracing::info!(target: "toolhost::audit", invocation_id, tool = %truncate(name),
            task_id = %log_safe(&binding.task_id, 256), session_id = %log_safe(&binding.session_id, 256),
            outcome, trace_id = toolhost_telemetry::trace_id().as_deref(), "tool call");
        self.counters.count("", outcome, Duration::ZERO);
        Resolution::Answered(match why {
            // The name matched a declared tool: it is ours, not the
            // agent's text, to repeat.
            Some(why) => Ok(CallResult::failure(
                ErrorCode::ToolUnavailable,
                format!("{name} is unavailable: {why}"),
                None,
            )),
            None => Err(UnknownTool(truncate(name))),
        })
    }

    /// Steps 2 to 5 for a tool [`Pipeline::resolve`] found, up to the
    /// moment the call is admitted: checked, authorized, screened by the
    /// policy, its plugin ready, the backend asked, and either its place
    /// among the plugin's calls taken ([`Stage::Ready`]) or a question for
    /// a person to answer first ([`Stage::Approve`]). Everything after
    /// resolution reads `entry`, and authorization checks it against the
    /// catalog as it is then. A call that ends here is audited here.
    ///
    /// Admission and dispatch are apart so that whoever hosts the call can
    /// act between them (a task is created once its call is admitted, and
    /// before an approval question, which it carries) without the pipeline
    /// knowing what a task is.
    pub async fn admit<'a>(
        &'a self,
        binding: &'a Binding,
        found: &'a Found,
        arguments: Option<Value>,
        caller: &'a dyn Caller,
        cancel: CancellationToken,
        mode: CallMode,
    ) -> Stage<'a> {
        let started = Instant::now();
        let Ok(invocation_id) = toolhost_base::ids::unguessable_id() else {
            // No randomness: no handle anyone could trust. Nothing ran.
            tracing::error!("the system's random number generator failed; a call was refused");
            self.counters.count("", "internal", started.elapsed());
            return Stage::Done(CallResult::failure(
                ErrorCode::Internal,
                "toolhost could not make an invocation id (the system's random number generator failed); nothing ran, so the call may be repeated",
                None,
            ));
        };
        let entry = &found.entry;
        let d = &entry.descriptor;
        let span = tracing::info_span!("tools/call", invocation_id = %invocation_id, tool = %d.exposed_name, plugin = %d.plugin_id);
        let mut call = Call {
            pipeline: self,
            binding,
            entry,
            reading: Some(&found.reading),
            serving: None,
            invocation_id,
            caller,
            cancel,
            mode,
            span,
            started,
            authorized_at: None,
            events: crate::caller::EventCounts::default(),
            approval: ApprovalNote::default(),
            task_id: None,
            decision_id: None,
            audited: false,
        };
        let span = call.span.clone();
        match call.admit(arguments).instrument(span).await {
            Ok(Admitted::Ready(ready)) => Stage::Ready(Ready { call, ready }),
            Ok(Admitted::Ask(waiting)) => Stage::Approve(Approve { call, waiting }),
            Err(CallFailure(r)) => Stage::Done(call.finish(r)),
        }
    }

    /// Step 8: ids, outcome and duration; never contents. The version
    /// named is the one the call was authorized against.
    fn audit(&self, call: &Call<'_>, result: &CallResult) {
        let (binding, started) = (call.binding, call.started);
        let d = &call.entry.descriptor;
        let version = call.authorized_at.as_ref();
        tracing::info!(
            target: "toolhost::audit",
            invocation_id = call.invocation_id,
            tool = %d.exposed_name,
            plugin = %d.plugin_id,
            // Ids from the configuration or the backend: escaped like any
            // text from outside (a borrow when clean).
            task_id = %log_safe(&binding.task_id, 256),
            session_id = %log_safe(&binding.session_id, 256),
            outcome = result.outcome(),
            catalog_generation = version.map(|v| log_safe(&v.0, 256)).as_deref(),
            catalog_revision = version.map(|v| v.1),
            progress = call.events.progress,
            log_messages = call.events.logs,
            log_messages_dropped = call.events.logs_dropped,
            questions = call.events.questions,
            approval = call.approval.by,
            arguments_digest = call.approval.arguments_digest.as_deref(),
            mcp_task = call.task_id.as_deref(),
            decision_id = call.decision_id.as_deref(),
            principal = call.binding.principal.as_ref().map(|p| log_safe(&p.subject, 256)).as_deref(),
            trace_id = toolhost_telemetry::trace_id().as_deref(),
            duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "tool call"
        );
        self.counters
            .count(&d.exposed_name, result.outcome(), started.elapsed());
        toolhost_telemetry::record(
            toolhost_telemetry::semconv::TOOLHOST_OUTCOME,
            result.outcome(),
        );
        if let Some(task) = &call.task_id {
            toolhost_telemetry::record(toolhost_telemetry::semconv::MCP_TASK_ID, task.clone());
        }
    }

    /// The largest encoded answer read from a plugin: the result limit,
    /// doubled for the protobuf encoding of structured content (larger
    /// than its JSON), plus room for the envelope. Past it, decoding stops
    /// and the answer is `result_too_large`; under it, the exact check on
    /// the mapped result decides.
    pub(crate) fn max_answer_bytes(&self) -> usize {
        self.limits
            .max_result_bytes
            .saturating_mul(2)
            .saturating_add(64 * 1024)
    }
}

/// How a call runs, which decides its deadline: a task runs for its
/// tool's task timeout within the operator's cap on tasks; a direct call
/// for the tool's timeout within the daemon's `max_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// Answered in the request that made it.
    Direct,
    /// Run as an MCP task, with the operator's cap on a task's lifetime.
    Task {
        /// The longest a task may run.
        cap: Duration,
    },
}

impl CallMode {
    /// The call's deadline for tool `d`.
    #[must_use]
    pub fn deadline(self, d: &toolhost_catalog::Descriptor, max_timeout: Duration) -> Duration {
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        match self {
            Self::Task { cap } => ms(d.task_timeout_ms.unwrap_or(d.timeout_ms)).min(cap),
            Self::Direct => ms(d.timeout_ms).min(max_timeout),
        }
    }
}

/// Where a call stands after [`Pipeline::admit`].
#[derive(Debug)]
pub enum Stage<'a> {
    /// It ended (refused, or failed before admission): its answer, audited.
    Done(CallResult),
    /// Admitted, its place held: [`Ready::dispatch`] sends it.
    Ready(Ready<'a>),
    /// A person must approve it first: [`Approve::ask`].
    Approve(Approve<'a>),
}

impl Stage<'_> {
    /// Runs the call on from here to its end in the request that holds
    /// it: asks what must be asked, then dispatches (`task`: the MCP task
    /// it runs as, for the audit).
    pub async fn run_to_end(self, task: Option<String>) -> CallResult {
        let mut stage = self;
        loop {
            stage = match stage {
                Stage::Done(r) => return r,
                Stage::Ready(mut ready) => {
                    ready.call.task_id = task;
                    return ready.dispatch().await;
                }
                Stage::Approve(mut approve) => {
                    approve.call.task_id.clone_from(&task);
                    // Boxed: a question's round trip is a large future,
                    // and a call that asks nothing should not carry it.
                    Box::pin(approve.ask()).await
                }
            };
        }
    }

    /// Names the MCP task the call runs as (for the audit).
    pub fn set_task(&mut self, task: String) {
        match self {
            Stage::Done(_) => {}
            Stage::Ready(r) => r.call.task_id = Some(task),
            Stage::Approve(a) => a.call.task_id = Some(task),
        }
    }

    /// Ends an admitted call that will not be dispatched (its task could
    /// not be made): `result` is its answer, audited, and its place freed.
    #[must_use]
    pub fn abandon(self, result: CallResult) -> CallResult {
        match self {
            Stage::Done(r) => r,
            Stage::Ready(r) => r.call.finish(result),
            Stage::Approve(a) => a.call.finish(result),
        }
    }
}

/// An admitted call, its place among the plugin's calls held.
pub struct Ready<'a> {
    call: Call<'a>,
    ready: Dispatchable,
}

impl std::fmt::Debug for Ready<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("invocation_id", &self.call.invocation_id)
            .finish_non_exhaustive()
    }
}

/// What dispatch needs, once admitted.
struct Dispatchable {
    checked: Checked,
    client: Box<dyn PluginLink>,
    slot: CallSlot,
    deadline: Duration,
}

/// A call waiting for a person's approval.
pub struct Approve<'a> {
    call: Call<'a>,
    waiting: Waiting,
}

impl std::fmt::Debug for Approve<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approve")
            .field("invocation_id", &self.call.invocation_id)
            .finish_non_exhaustive()
    }
}

/// What asking needs: the call's checked arguments and deadline, and the
/// policy's question. It holds no plugin process meanwhile: an
/// upgrade's drain does not wait for a person, and once approved the call
/// takes the client of the version serving the tool then.
struct Waiting {
    checked: Checked,
    deadline: Duration,
    asking: Box<dyn Asking>,
}

/// What admission came to.
enum Admitted {
    Ready(Dispatchable),
    Ask(Waiting),
}

impl Ready<'_> {
    /// Steps 6 to 8: exactly one dispatch, the answer mapped, the call
    /// audited.
    pub async fn dispatch(self) -> CallResult {
        let Self { mut call, ready } = self;
        let span = call.span.clone();
        let r = async {
            let step = Traced::start("toolhost.dispatch");
            step.attribute(
                toolhost_telemetry::semconv::TOOLHOST_PLUGIN_PROTOCOL,
                i64::from(ready.client.protocol()),
            );
            let Dispatchable {
                checked,
                client,
                slot,
                deadline,
            } = ready;
            let dispatched = step
                .within(call.dispatch_checked(&*client, slot, checked, deadline))
                .await;
            traced(&step, dispatched)
        }
        .instrument(span)
        .await;
        match r {
            Ok(r) | Err(CallFailure(r)) => call.finish(r),
        }
    }
}

impl<'a> Approve<'a> {
    /// The question the policy wants answered.
    #[must_use]
    pub fn question(&self) -> crate::caller::Question {
        self.waiting.asking.question()
    }

    /// Puts the question to the person behind the caller, within the
    /// call's deadline, and decides with the answer: admitted, ended, or
    /// asked again (an answer that came too late).
    pub async fn ask(self) -> Stage<'a> {
        let Self { mut call, waiting } = self;
        let span = call.span.clone();
        match call.approve(waiting).instrument(span).await {
            Ok(Admitted::Ready(ready)) => Stage::Ready(Ready { call, ready }),
            Ok(Admitted::Ask(waiting)) => Stage::Approve(Approve { call, waiting }),
            Err(CallFailure(r)) => Stage::Done(call.finish(r)),
        }
    }
}

/// One call past resolution: what every step reads, and the catalog
/// version its authorization read (for the audit).
pub(crate) struct Call<'a> {
    pub(crate) pipeline: &'a Pipeline,
    binding: &'a Binding,
    pub(crate) entry: &'a Arc<Entry>,
    /// The catalog reading `entry` came from, ended once the call holds
    /// its plugin process (or will not).
    reading: Option<&'a Reading>,
    /// The plugin version serving the tool when authorization found it
    /// served by another than `entry` names, with the same declaration
    /// (an upgrade that changed nothing else).
    serving: Option<String>,
    invocation_id: String,
    pub(crate) caller: &'a dyn Caller,
    pub(crate) cancel: CancellationToken,
    pub(crate) mode: CallMode,
    span: tracing::Span,
    started: Instant,
    authorized_at: Option<CatalogVersion>,
    /// What a protocol-2 call's plugin sent, counted for the audit.
    pub(crate) events: crate::caller::EventCounts,
    /// Who approved (or denied) the call and the digest of what, when it
    /// needed approval.
    approval: ApprovalNote,
    /// The MCP task the call runs as, if any.
    task_id: Option<String>,
    /// The backend's id for its `Authorize` decision, if it gave one.
    decision_id: Option<String>,
    /// Whether its audit event was written.
    audited: bool,
}

impl Drop for Call<'_> {
    /// A call dropped between its stages (its host went away before it
    /// asked or dispatched) is still audited, once: nothing ran.
    fn drop(&mut self) {
        if !self.audited {
            self.audited = true;
            let r = CallResult::failure(
                ErrorCode::Cancelled,
                "the call was given up before it was dispatched; nothing ran",
                None,
            );
            self.pipeline.audit(self, &r);
        }
    }
}

/// A plugin's answer in either protocol, before step 7 maps it.
pub(crate) struct Answered {
    pub(crate) content: Vec<Block>,
    pub(crate) structured: Option<Value>,
    pub(crate) is_error: bool,
}

impl Call<'_> {
    /// The call's end: the answer fitted to the output schema, audited
    /// once.
    fn finish(mut self, mut result: CallResult) -> CallResult {
        result.fit_output_schema(self.entry.output.is_some());
        self.audited = true;
        self.pipeline.audit(&self, &result);
        result
    }

    /// Steps 2 to 5, in order, up to admission; the first failure ends
    /// the call.
    async fn admit(&mut self, arguments: Option<Value>) -> Step<Admitted> {
        self.contract_as_listed()?;
        let checked = {
            let step = Traced::start("toolhost.validate");
            traced(&step, self.check(arguments))?
        };
        {
            let step = Traced::start("toolhost.authorize");
            traced(&step, self.authorize())?;
        }
        self.screen(&checked)?;
        let (client, deadline) = self.plugin().await?;
        let backend_asks = self.ask_backend(&checked.arguments).await?;
        let decision = {
            let version = self.authorized_at.clone().unwrap_or_default();
            let facts = self.facts(&checked, &version);
            self.pipeline
                .policy
                .decide(&facts, backend_asks.as_deref(), self.caller.can_ask())
        };
        self.decided(decision, checked, Some(client), deadline)
    }

    /// What the policy reads of this call.
    fn facts<'f>(&'f self, checked: &'f Checked, version: &'f CatalogVersion) -> CallFacts<'f> {
        CallFacts {
            binding: self.binding,
            tool: &self.entry.descriptor,
            arguments: &checked.arguments,
            catalog: version,
            decision_id: self.decision_id.as_deref(),
        }
    }

    /// Acts on the policy's decision: a place taken, the call refused, or
    /// a question to put.
    ///
    /// `client` is the plugin's, taken before the decision; `None` after a
    /// question, when the call held none while it waited.
    fn decided(
        &mut self,
        decision: Decision,
        checked: Checked,
        client: Option<Box<dyn PluginLink>>,
        deadline: Duration,
    ) -> Step<Admitted> {
        match decision {
            Decision::Allow(note) => {
                let asked = note.by.is_some();
                self.approval = note;
                let client = match client {
                    Some(c) if !asked => c,
                    held => {
                        // A person (or the operator) took time: the tool
                        // and the binding are checked again against the
                        // state now, and the plugin taken as it is now.
                        let switched = self.still_authorized("it was being approved")?;
                        match held {
                            Some(c) if !switched => c,
                            _ => self.ready_now()?,
                        }
                    }
                };
                let slot = self.reserve(&*client)?;
                Ok(Admitted::Ready(Dispatchable {
                    checked,
                    client,
                    slot,
                    deadline,
                }))
            }
            Decision::Refuse(Refusal { code, message }, note) => {
                self.approval = note;
                Err(CallFailure::new(code, message))
            }
            Decision::Ask(asking) => {
                drop(client);
                Ok(Admitted::Ask(Waiting {
                    checked,
                    deadline,
                    asking,
                }))
            }
        }
    }

    /// Step 5: the policy's rate limits and rules, before the call waits
    /// for anything or anyone.
    fn screen(&self, checked: &Checked) -> Step<()> {
        let version = self.authorized_at.clone().unwrap_or_default();
        self.pipeline
            .policy
            .screen(&self.facts(checked, &version))
            .map_err(|r| CallFailure::new(r.code, r.message))
    }

    /// Step 5: the question put to the person behind the caller within
    /// the call's deadline, and the policy's decision on the answer.
    async fn approve(&mut self, waiting: Waiting) -> Step<Admitted> {
        let Waiting {
            checked,
            deadline,
            asking,
        } = waiting;
        let asked_at = Instant::now();
        let asked = if self.caller.can_ask() {
            let question = asking.question();
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    return Err(CallFailure::new(ErrorCode::Cancelled, "the call was cancelled by the client"));
                }
                r = tokio::time::timeout(deadline, self.caller.ask(question)) => match r {
                    Ok(Ok(answer)) => Asked::Answered(answer, asked_at.elapsed()),
                    Ok(Err(Unanswered::CannotAsk)) => Asked::CannotAsk,
                    Ok(Err(Unanswered::Failed(why))) => Asked::Failed(why),
                    Err(_) => Asked::TimedOut,
                },
            }
        } else {
            Asked::CannotAsk
        };
        let decision = asking.answered(asked);
        self.decided(decision, checked, None, deadline)
    }

    /// Before anything else: refused once if the tool's contract is not
    /// the one this session was last shown (see [`crate::pins`]).
    fn contract_as_listed(&self) -> Step<()> {
        let d = &self.entry.descriptor;
        let pins = &self.pipeline.pins;
        // A withheld tool is not served under any contract: the checks
        // that follow refuse it as unavailable.
        if pins.is_empty_fast()
            || !self.entry.is_sound()
            || !pins.refuse_once(self.binding, &d.exposed_name, self.entry.contract_digest())
        {
            return Ok(());
        }
        Err(CallFailure::new(
            ErrorCode::ContractChanged,
            format!(
                "the contract of {} changed since this session listed the tools (its description, schemas or \
                 annotations are new), so this call did not run: list the tools again (tools/list), read the \
                 tool's description and input schema as they are now, and call it again only if it still fits \
                 the task",
                d.exposed_name
            ),
        ))
    }

    /// Step 6 and 7, once the call is admitted with its place held.
    async fn dispatch_checked(
        &mut self,
        client: &dyn PluginLink,
        slot: CallSlot,
        checked: Checked,
        deadline: Duration,
    ) -> Step<CallResult> {
        let credentials = self.credentials(client).await?;
        let answered = if client.protocol() >= 2 {
            // Boxed: protocol 2's stream is a large future, and a
            // protocol-1 call should not carry its size.
            Box::pin(self.dispatch_stream(client, slot, &checked, &credentials, deadline)).await?
        } else {
            let r = self
                .dispatch(client, slot, &checked, &credentials, deadline)
                .await?;
            Answered {
                content: vec![Block::text(r.text)],
                structured: r.structured.map(Value::Object),
                is_error: r.is_error,
            }
        };
        self.map(answered, checked)
    }

    /// Steps 2 to 4: bound, normalize aliases, validate. A withheld entry (a
    /// schema that does not compile, or a pushed declaration that loosens
    /// the installed one) fails closed first.
    fn check(&self, arguments: Option<Value>) -> Step<Checked> {
        let d = &self.entry.descriptor;
        let (true, Ok(schema)) = (self.entry.is_sound(), &self.entry.input) else {
            return Err(CallFailure::new(
                ErrorCode::ToolUnavailable,
                format!(
                    "{} is unavailable: its declaration is withheld",
                    d.exposed_name
                ),
            ));
        };
        let policy = ToolPolicy {
            aliases: &d.aliases,
            unknown: d.unknown_arguments,
        };
        check_arguments(schema, &policy, arguments).map_err(|e| {
            CallFailure::with_violations(ErrorCode::InvalidArguments, e.message, &e.violations)
        })
    }

    /// Step 5: the tool is still in the current catalog with the same
    /// declaration, the binding is active and its surface allowed. The
    /// version read is remembered for the audit.
    fn authorize(&mut self) -> Step<()> {
        let d = &self.entry.descriptor;
        let now = self.pipeline.store.current();
        let Some(serving) = self.declared_now(&now) else {
            return Err(CallFailure::new(
                ErrorCode::ToolUnavailable,
                format!(
                    "{} was withdrawn or changed since it was listed; list the tools again",
                    d.exposed_name
                ),
            ));
        };
        self.serving = serving;
        self.authorized_at = Some((now.generation().to_owned(), now.revision()));
        drop(now);
        if !self.binding.is_active() {
            return Err(CallFailure::new(
                ErrorCode::NotAuthorized,
                "this session's binding has been revoked",
            ));
        }
        if !d.on_surface(&self.binding.surface) {
            return Err(CallFailure::new(
                ErrorCode::NotAuthorized,
                "this tool is not offered on this session's surface",
            ));
        }
        Ok(())
    }

    /// Whether the tool is declared now as the call read it (`None`: it
    /// is not), and by which plugin version it is served now when an
    /// upgrade that changed nothing else replaced the one read
    /// (`Some(Some(version))`). Such an upgrade is no change to the call:
    /// it is authorized against the same declaration and goes to the
    /// process serving it now.
    fn declared_now(&self, now: &toolhost_catalog::Catalog) -> Option<Option<String>> {
        let d = &self.entry.descriptor;
        let cur = now.get(&d.exposed_name)?;
        if Arc::ptr_eq(cur, self.entry) || cur.descriptor == *d {
            return Some(None);
        }
        cur.descriptor
            .same_contract_as(d)
            .then(|| Some(cur.descriptor.plugin_version.clone()))
    }

    /// The plugin version the call goes to: the one it resolved, unless
    /// authorization found the same declaration served by another.
    fn version_to_call(&self) -> &str {
        self.serving
            .as_deref()
            .unwrap_or(&self.entry.descriptor.plugin_version)
    }

    /// The client of the version to call, ready now (no waiting).
    fn ready_now(&self) -> Step<Box<dyn PluginLink>> {
        let d = &self.entry.descriptor;
        self.pipeline
            .plugins
            .ready(&d.plugin_id, self.version_to_call())
            .map_err(|e| CallFailure::new(ErrorCode::PluginUnavailable, e.to_string()))
    }

    /// Step 5, the plugin: ready now, or waited for while it starts, within
    /// the call's own deadline. Returns the client and what is left of the
    /// deadline. After a wait the catalog and binding are checked again.
    async fn plugin(&mut self) -> Step<(Box<dyn PluginLink>, Duration)> {
        let d = &self.entry.descriptor;
        let p = self.pipeline;
        let deadline = self.mode.deadline(d, p.limits.max_timeout);
        let ready = p.plugins.ready(&d.plugin_id, self.version_to_call());
        // The call holds its process now (the link counts it busy), or
        // waits for one as any call would: either way the catalog version
        // it read need not be kept for it any longer.
        if let Some(r) = self.reading.take() {
            r.end();
        }
        if let Ok(c) = ready {
            return Ok((c, deadline));
        }
        let waiting = Instant::now();
        // Only a wait takes time worth a span: a ready plugin costs none.
        let step = Traced::start("toolhost.plugin_wait");
        let waited = step
            .within(p.plugins.ready_within(
                &d.plugin_id,
                self.version_to_call(),
                deadline,
                &self.cancel,
            ))
            .await;
        if let Err(e) = &waited {
            step.fail(match e {
                PluginUnavailable::Cancelled => "cancelled",
                _ => "plugin_unavailable",
            });
        }
        drop(step);
        let client = match waited {
            Ok(c) => c,
            Err(PluginUnavailable::Cancelled) => {
                return Err(CallFailure::new(
                    ErrorCode::Cancelled,
                    "the call was cancelled by the client",
                ));
            }
            Err(e) => {
                return Err(CallFailure::new(
                    ErrorCode::PluginUnavailable,
                    e.to_string(),
                ));
            }
        };
        let client = if self.still_authorized("its plugin was starting")? {
            self.ready_now()?
        } else {
            client
        };
        Ok((client, deadline.saturating_sub(waiting.elapsed())))
    }

    /// Step 5: the backend's `Authorize`, when configured. `Some(reason)`
    /// when the backend allows the call only once the operator approves it.
    async fn ask_backend(&mut self, arguments: &Map<String, Value>) -> Step<Option<String>> {
        let Some(a) = &self.pipeline.authorizer else {
            return Ok(None);
        };
        let step = Traced::start("toolhost.backend_authorize");
        // Boxed: the backend's gRPC call is a large future, and every call
        // without a backend would carry its size (BENCHMARKS.md).
        let checked = step
            .within(Box::pin(a.check(
                &self.invocation_id,
                &self.entry.descriptor,
                self.binding,
                arguments,
            )))
            .await;
        self.decision_id = checked.decision_id;
        let r = checked
            .outcome
            .map(|v| match v {
                Verdict::Allowed => None,
                Verdict::NeedsApproval(reason) => Some(reason),
            })
            .map_err(|e| CallFailure::new(ErrorCode::NotAuthorized, e.to_string()));
        traced(&step, r)
    }

    /// The tool is still declared as it was and the binding still active
    /// and allowed, now; `while_what` says what took the time. `true` when
    /// the version to call changed meanwhile (an upgrade that changed
    /// nothing else): the caller takes that version's client.
    fn still_authorized(&mut self, while_what: &str) -> Step<bool> {
        let d = &self.entry.descriptor;
        let now = self.pipeline.store.current();
        let serving = match self.declared_now(&now) {
            Some(serving) if self.binding.is_active() && d.on_surface(&self.binding.surface) => {
                serving
            }
            _ => {
                return Err(CallFailure::new(
                    ErrorCode::ToolUnavailable,
                    format!(
                        "{} was withdrawn or changed while {while_what}; list the tools again",
                        d.exposed_name
                    ),
                ));
            }
        };
        let switched = serving.as_deref().unwrap_or(&d.plugin_version) != self.version_to_call();
        self.serving = serving;
        self.authorized_at = Some((now.generation().to_owned(), now.revision()));
        Ok(switched)
    }

    /// A place among the plugin's calls in flight: exact under any
    /// concurrency, failing fast rather than queueing.
    fn reserve(&self, client: &dyn PluginLink) -> Step<CallSlot> {
        let max = self.pipeline.limits.max_calls_per_plugin;
        client.try_reserve(max).ok_or_else(|| {
            CallFailure::new(
                ErrorCode::PluginUnavailable,
                format!(
                    "plugin {} already has {max} calls in flight (the limit); try again shortly",
                    self.entry.descriptor.plugin_id
                ),
            )
        })
    }

    /// Step 6: exactly one `InvokeAgentTool`, with the deadline, the
    /// invocation id and the binding's context. Cancellation drops it.
    async fn dispatch(
        &self,
        client: &dyn PluginLink,
        slot: CallSlot,
        checked: &Checked,
        credentials: &[Credential],
        deadline: Duration,
    ) -> Step<ToolAnswer> {
        let max_answer = self.pipeline.max_answer_bytes();
        let invoke = client.invoke(
            slot,
            &self.request(checked, credentials),
            deadline,
            max_answer,
        );
        let answer = tokio::select! {
            biased;
            () = self.cancel.cancelled() => {
                return Err(CallFailure::new(ErrorCode::Cancelled, "the call was cancelled by the client"));
            }
            r = invoke => r,
        };
        answer.map_err(|e| self.invoke_failure(e))
    }

    /// The request both protocols send: the invocation id, the local name,
    /// the checked arguments and the binding's context, borrowed where the
    /// call holds them (protocol 1 encodes it straight from these).
    pub(crate) fn request<'r>(
        &'r self,
        checked: &'r Checked,
        credentials: &'r [Credential],
    ) -> ToolRequestRef<'r> {
        let b = self.binding;
        ToolRequestRef {
            invocation_id: &self.invocation_id,
            name: &self.entry.descriptor.local_name,
            arguments: &checked.arguments,
            context: ContextRef {
                task_id: &b.task_id,
                session_id: &b.session_id,
                workspace_id: b.workspace_id.as_deref().unwrap_or_default(),
                surface: &b.surface,
                credentials,
            },
        }
    }

    /// Step 6, first: the tokens the plugin calls its audiences with, for
    /// a caller who proved who it is. A refusal fails the call here,
    /// before anything is sent.
    async fn credentials(&self, client: &dyn PluginLink) -> Step<Vec<Credential>> {
        let audiences = client.audiences();
        let (Some(source), Some(_)) = (&self.pipeline.credentials, &self.binding.principal) else {
            return Ok(Vec::new());
        };
        if audiences.is_empty() {
            return Ok(Vec::new());
        }
        // No span of its own: almost every call finds its tokens cached, and
        // an exchange that is not logs at the source.
        source.tokens(self.binding, audiences).await.map_err(|why| {
            CallFailure::new(
                ErrorCode::NotAuthorized,
                format!("{} was not run: {why}", self.entry.descriptor.exposed_name),
            )
        })
    }

    pub(crate) fn invoke_failure(&self, e: InvokeError) -> CallFailure {
        let d = &self.entry.descriptor;
        match e {
            InvokeError::Timeout(t) => CallFailure::new(
                ErrorCode::Timeout,
                format!(
                    "{} did not answer within {} ms; it may or may not have taken effect",
                    d.exposed_name,
                    t.as_millis()
                ),
            ),
            e @ InvokeError::Unavailable { .. } => {
                CallFailure::new(ErrorCode::PluginUnavailable, e.to_string())
            }
            InvokeError::TooLarge(_) => CallFailure::new(
                ErrorCode::ResultTooLarge,
                format!(
                    "{}'s answer is larger than the limit of {} bytes; the tool ran and may have done its work, \
                     so do not simply repeat the call: ask for less (a smaller page or range)",
                    d.exposed_name, self.pipeline.limits.max_result_bytes
                ),
            ),
            // The plugin's own status message is not passed on: it is the
            // plugin's text, and may carry what the call sent it. The
            // code says enough to act on.
            InvokeError::Refused { code, .. } => CallFailure::new(
                ErrorCode::PluginError,
                match code {
                    tonic::Code::NotFound => format!(
                        "plugin {} does not implement {}: its manifest declares the tool, but its code has no \
                         handler of that name; the call did not run (tell the plugin's author)",
                        d.plugin_id, d.local_name
                    ),
                    tonic::Code::Unauthenticated => format!(
                        "plugin {} refused toolhost's call token; the call did not run (the plugin's SDK \
                         may be older than this toolhost)",
                        d.plugin_id
                    ),
                    tonic::Code::Unimplemented => format!(
                        "plugin {} does not implement the plugin protocol its manifest declares; the call \
                         did not run",
                        d.plugin_id
                    ),
                    code => format!(
                        "plugin {} answered with a gRPC error ({code:?}); it may or may not have taken effect",
                        d.plugin_id
                    ),
                },
            ),
        }
    }

    /// Step 7: the size cap (every block counts), the output schema, and
    /// report mode's `unknown_args` (in `_meta` and the text, never in
    /// `structuredContent`, which stays exactly the plugin's and so matches
    /// the output schema it was checked against).
    ///
    /// Kept whole on purpose: step 7 is one contract (size, output schema,
    /// report mode) over one result; the order of its checks is the contract.
    fn map(&self, answered: Answered, checked: Checked) -> Step<CallResult> {
        let d = &self.entry.descriptor;
        let limit = self.pipeline.limits.max_result_bytes;
        let Answered {
            mut content,
            structured,
            is_error,
        } = answered;
        let size = content
            .iter()
            .map(Block::size)
            .fold(0usize, usize::saturating_add)
            .saturating_add(structured.as_ref().map_or(0, encoded_len));
        if size > limit {
            return Err(CallFailure::new(
                ErrorCode::ResultTooLarge,
                format!(
                    "{} answered {size} bytes; the limit is {limit} bytes. The tool ran and may have \
                     done its work, so do not simply repeat the call: ask for less",
                    d.exposed_name
                ),
            ));
        }
        if !is_error && let Some(Ok(out_schema)) = &self.entry.output {
            let verdict = match &structured {
                Some(s) => out_schema.check_value(s).map_err(|e| e.violations),
                None => Err(vec![]),
            };
            if let Err(violations) = verdict {
                // Where, by the violations' own words (places and rules,
                // never the value), for the agent and the operator alike.
                let what = if violations.is_empty() {
                    "it has no structured content".to_owned()
                } else {
                    violations
                        .iter()
                        .map(|v| v.message.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                tracing::warn!(
                    plugin = %d.plugin_id,
                    tool = %d.exposed_name,
                    problems = %what,
                    "a result does not match the tool's output schema"
                );
                return Err(CallFailure::with_violations(
                    ErrorCode::PluginError,
                    format!(
                        "plugin {}'s result does not match the tool's declared output schema: {what}. \
                         The tool ran and may have done its work, so do not simply repeat the call",
                        d.plugin_id
                    ),
                    &violations,
                ));
            }
        }
        let mut meta = None;
        let mut structured = structured;
        if is_error
            && let (Some(Ok(out_schema)), Some(s)) = (&self.entry.output, &structured)
            && out_schema.check_value(s).is_err()
        {
            // The tool's own error, shaped unlike its success: kept, but
            // where no client checks it against the output schema.
            let mut m = serde_json::Map::new();
            m.insert(
                "structured_error".into(),
                structured.take().unwrap_or_default(),
            );
            meta = Some(m);
        }
        if !checked.unknown_args.is_empty() {
            let note = format!(
                "(ignored unknown arguments: {})",
                checked.unknown_args.join(", ")
            );
            match content.iter_mut().find_map(|b| match &mut b.kind {
                crate::content::BlockKind::Text(t) => Some(t),
                _ => None,
            }) {
                Some(t) => {
                    t.push('\n');
                    t.push_str(&note);
                }
                None => content.push(Block::text(note)),
            }
            meta.get_or_insert_default()
                .insert("unknown_args".into(), Value::from(checked.unknown_args));
        }
        Ok(CallResult {
            content,
            structured,
            is_error,
            code: None,
            meta,
        })
    }
}

/// A step's result, with its span marked failed (toolhost's outcome code
/// as `error.type`) when it failed.
fn traced<T>(step: &Traced, r: Step<T>) -> Step<T> {
    if let Err(CallFailure(result)) = &r {
        step.fail(result.outcome());
    }
    r
}

/// Names from agents are echoed only in `Unknown tool`, and only so long;
/// in a log line, control characters are escaped, so a name cannot forge
/// a line.
fn truncate(name: &str) -> String {
    log_safe(name, 128).into_owned()
}

/// The length of `value` as compact JSON, counted as it is written rather
/// than written into a buffer: the size cap is checked on every result.
fn encoded_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests;
