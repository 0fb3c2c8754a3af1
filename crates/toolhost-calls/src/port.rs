//! The seam between the call host and the pipeline: what the host needs
//! of it, and nothing more. The daemon plugs in `toolhost_pipeline::Pipeline`;
//! the host's unit tests plug in a fake that plays the plugin's part
//! (progress, questions, a slow answer) without a process.
//!
//! A call crosses it in two parts: [`CallPipeline::admit`] runs it up to
//! admission (checked, authorized, the policy's word taken, its place
//! held, or a question for a person waiting), and the [`Admitted`] call is
//! then run to its end. Between the two the host does what is its own: a
//! task is created there, before the call asks a person anything (the
//! task carries the question) and before it reaches its plugin.

use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{
    Binding, CallMode, CallResult, Caller, Found, Pipeline, Resolution, Stage,
};

/// A boxed future that borrows for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A call past admission, borrowing what its admission borrowed.
pub trait Admitted<'a>: Send + 'a {
    /// Runs it to its end: asks a person if it must, then dispatches once.
    /// `task`: the MCP task it runs as, for its audit line.
    fn finish(self: Box<Self>, task: Option<String>) -> BoxFuture<'a, CallResult>;
    /// Ends it without dispatching (its task could not be made): `result`
    /// is its answer, audited, and its place among the plugin's calls
    /// freed.
    fn abandon(self: Box<Self>, result: CallResult) -> CallResult;
}

/// What [`CallPipeline::admit`] came to.
pub enum Admission<'a> {
    /// The call ended before admission (refused, failed): its answer.
    Done(CallResult),
    /// Admitted: run it on with [`Admitted::finish`].
    Admitted(Box<dyn Admitted<'a>>),
}

/// The pipeline, as the call host drives it.
pub trait CallPipeline: Send + Sync + 'static {
    /// Step 1: the tool a name stands for on this binding's surface, or
    /// the whole answer to a call of it.
    fn resolve(&self, binding: &Binding, name: &str) -> Resolution;

    /// Steps 2 to 5 for a resolved tool, up to admission.
    fn admit<'a>(
        &'a self,
        binding: &'a Binding,
        found: &'a Found,
        arguments: Option<Value>,
        caller: &'a dyn Caller,
        cancel: CancellationToken,
        mode: CallMode,
    ) -> BoxFuture<'a, Admission<'a>>;

    /// The longest any direct call may run.
    fn max_timeout(&self) -> Duration;
}

impl CallPipeline for Pipeline {
    fn resolve(&self, binding: &Binding, name: &str) -> Resolution {
        Pipeline::resolve(self, binding, name)
    }

    fn admit<'a>(
        &'a self,
        binding: &'a Binding,
        found: &'a Found,
        arguments: Option<Value>,
        caller: &'a dyn Caller,
        cancel: CancellationToken,
        mode: CallMode,
    ) -> BoxFuture<'a, Admission<'a>> {
        Box::pin(async move {
            match Pipeline::admit(self, binding, found, arguments, caller, cancel, mode).await {
                Stage::Done(r) => Admission::Done(r),
                stage => Admission::Admitted(Box::new(stage)),
            }
        })
    }

    fn max_timeout(&self) -> Duration {
        Pipeline::max_timeout(self)
    }
}

impl<'a> Admitted<'a> for Stage<'a> {
    fn finish(self: Box<Self>, task: Option<String>) -> BoxFuture<'a, CallResult> {
        Box::pin(self.run_to_end(task))
    }

    fn abandon(self: Box<Self>, result: CallResult) -> CallResult {
        Stage::abandon(*self, result)
    }
}

/// A tool toolhost answers itself, without the pipeline (the built-in
/// find tool): asked before every call.
pub trait Builtin: Send + Sync {
    /// Whether `name` is this tool's now.
    fn claims(&self, name: &str) -> bool;
    /// The answer to a call of it.
    fn answer(&self, binding: &Binding, name: &str, arguments: Option<Value>) -> CallResult;
}
