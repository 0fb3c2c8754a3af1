//! The `tools/call` pipeline: docs/CONTRACT.md §5, in that order.
//!
//! 1. **Resolve** the name among the tools the session can see; otherwise
//!    the call is a protocol error, `Unknown tool` (tools of other surfaces are
//!    not revealed).
//! 2. to 4. **Bound, normalize aliases, validate** (`toolhost-validate`).
//! 5. **Authorize** against the state *now*: the tool is still in the current
//!    catalog with the same declaration and on the session's surface, its
//!    plugin is ready (and runs the declared version), and the session's
//!    binding is still active. Discovery is never authorization.
//! 6. **Dispatch** exactly one gRPC call with the tool's deadline (capped),
//!    an invocation id and the binding's context; the agent's cancellation
//!    cancels it. Nothing is retried.
//! 7. **Map the result**: size cap, output-schema check, `unknown_args`.
//! 8. **Audit**: one event per call, ids and outcome, never contents.
//!
//! Every failure from step 2 on is a result the model can act on
//! ([`CallResult::failure`]), with a stable [`ErrorCode`].
//!
//! What this crate must not do: speak MCP (the `toolhost-mcp` crate maps
//! results onto the protocol), or put an argument or result value into an
//! error, a log line or a metric.

mod authorize;
mod binding;
mod call;
mod counters;
mod plugins;
mod result;

pub use authorize::{Authorizer, AuthorizerAddress, AuthorizerSetupError, Denied};
pub use binding::{Binding, BindingState};
pub use call::{Limits, Pipeline, UnknownTool};
pub use counters::{CallStats, DURATION_BUCKETS};
pub use plugins::{PluginUnavailable, Plugins};
pub use result::{CallResult, ErrorCode};
