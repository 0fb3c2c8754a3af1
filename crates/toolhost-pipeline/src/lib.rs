//! The `tools/call` pipeline: docs/CONTRACT.md §5, in that order.
//!
//! 1. **Resolve** the name among the tools the session can see; otherwise
//!    the call is a protocol error, `Unknown tool` (tools of other surfaces are
//!    not revealed).
//!    A tool whose contract is not the one the session was last shown is
//!    refused once first ([`pins`]): the model is told to list again.
//! 2. to 4. **Bound, normalize aliases, validate** (`toolhost-validate`).
//! 5. **Authorize** against the state *now*: the tool is still in the current
//!    catalog with the same declaration and on the session's surface, the
//!    session's binding is still active; the operator's [`policy`] screens
//!    it (rate limits, argument rules); its plugin is ready (and runs the
//!    declared version); then the backend's `Authorize`, when configured;
//!    the policy's decision, which may ask a person to approve; and last,
//!    a place among the plugin's calls in flight. There the call is
//!    *admitted* ([`Pipeline::admit`] returns a [`Stage`]): whoever hosts
//!    it may act (create a task) before it is dispatched.
//!    Discovery is never authorization.
//! 6. **Dispatch** exactly one gRPC call with the tool's deadline (capped),
//!    an invocation id and the binding's context; the agent's cancellation
//!    cancels it. Nothing is retried. A protocol-2 plugin's call is one
//!    stream: its progress, log messages and questions go to the
//!    [`Caller`], checked and bounded, and a question's answer is checked
//!    against the requested schema before the plugin sees it.
//! 7. **Map the result**: content rules ([`content`]), size cap,
//!    output-schema check, `unknown_args`.
//! 8. **Audit**: one event per call, ids and outcome, never contents.
//!
//! Every failure from step 2 on is a result the model can act on
//! ([`CallResult::failure`]), with a stable [`ErrorCode`].
//!
//! The pipeline reaches plugins only through [`port`]: the daemon plugs in
//! the runtime's registry, and the unit tests of every step plug in a fake
//! plugin that records what reached it.
//!
//! What this crate must not do: speak MCP (the `toolhost-mcp` crate maps
//! results onto the protocol), know what a task is (the host creates it
//! between the stages), hold the operator's policy (`toolhost-policy`
//! implements [`Policy`]), or put an argument or result value into an
//! error, a log line or a metric.

#![forbid(unsafe_code)]

mod authorize;
mod binding;
mod call;
mod caller;
pub mod content;
mod counters;
pub mod credentials;
pub mod pins;
pub mod policy;
pub mod port;
mod question;
mod result;
mod stream;
#[cfg(test)]
mod testing;

pub use authorize::{Authorizer, AuthorizerAddress, AuthorizerSetupError, Denied, Verdict};
pub use binding::{Binding, BindingState, Principal};
pub use call::{Approve, CallMode, Found, Limits, Pipeline, Ready, Resolution, Stage, UnknownTool};
pub use caller::{
    Answer, AnswerAction, AskFuture, Caller, LogLevel, LogMessage, Progress, Question, Silent,
    Unanswered,
};
pub use counters::{CallStats, DURATION_BUCKETS};
pub use credentials::Credentials;
pub use pins::{Pins, Shown};
pub use policy::{
    ApprovalNote, Asked, Asking, CallFacts, Decision, NoPolicy, Policy, Refusal, arguments_digest,
};
pub use port::{EventStream, PluginLink, PluginPort};
pub use question::{
    CheckedQuestion, MAX_QUESTION_FIELDS, MAX_QUESTION_MESSAGE, check_answer, check_question,
};
pub use result::{CallResult, ErrorCode};
