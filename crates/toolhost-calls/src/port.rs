//! The seam between the call host and the pipeline: what the host needs
//! of it, and nothing more. The daemon plugs in `toolhost_pipeline::Pipeline`;
//! the host's unit tests plug in a fake that plays the plugin's part
//! (progress, questions, a slow answer) without a process.

use crate::relay::CallFuture;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::{Binding, CallResult, Caller, Pipeline, Resolution};

/// The pipeline, as the call host drives it.
pub trait CallPipeline: Send + Sync + 'static {
    /// Step 1: the tool a name stands for on this binding's surface, or
    /// the whole answer to a call of it.
    fn resolve(&self, binding: &Binding, name: &str) -> Resolution;

    /// Steps 2 to 8 for a resolved tool, as a future that owns what it
    /// needs: the call may outlive the request that started it.
    fn run(
        self: Arc<Self>,
        binding: Binding,
        entry: Arc<toolhost_catalog::Entry>,
        arguments: Option<Value>,
        caller: Box<dyn Caller>,
        cancel: CancellationToken,
    ) -> CallFuture;

    /// The longest any direct call may run.
    fn max_timeout(&self) -> Duration;
}

impl CallPipeline for Pipeline {
    fn resolve(&self, binding: &Binding, name: &str) -> Resolution {
        Pipeline::resolve(self, binding, name)
    }

    fn run(
        self: Arc<Self>,
        binding: Binding,
        entry: Arc<toolhost_catalog::Entry>,
        arguments: Option<Value>,
        caller: Box<dyn Caller>,
        cancel: CancellationToken,
    ) -> CallFuture {
        Box::pin(async move {
            self.call_resolved(&binding, &entry, arguments, &*caller, cancel)
                .await
        })
    }

    fn max_timeout(&self) -> Duration {
        Pipeline::max_timeout(self)
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
