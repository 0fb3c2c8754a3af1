//! Call hosting: one way through a `tools/call`, whoever asked for it.
//!
//! A [`CallHost`] takes a binding, a tool name, arguments and a
//! [`Delivery`], looks the tool up once, decides whether the call runs
//! directly or as a task, runs the pipeline and delivers what a
//! protocol-2 plugin sends (progress, log messages, questions) through
//! that one trait. Three deliveries exist: a session's stream (the MCP
//! handler), nowhere (the plain stateless path), and a task's state
//! (here, [`follow`]). Around the host:
//!
//! - [`callers`]: bearer tokens, the bindings they stand for, and the
//!   owners sessions, parked calls and tasks are counted under;
//! - [`Tasks`]: the books of calls run as MCP tasks (ownership, CSPRNG
//!   ids, caps, retention), their states typed, not wire JSON;
//! - the calls parked on a question until a 2026-07-28 client answers it;
//! - [`port`]: the seam to the pipeline, which the unit tests fake.
//!
//! What this crate must not do: speak MCP (the `toolhost-mcp` crate maps
//! requests and results onto the protocol), decide anything about a call
//! (the pipeline does), or run a call twice.

#![forbid(unsafe_code)]

pub mod callers;
mod deliver;
mod follow;
mod host;
mod parked;
pub mod port;
mod relay;
mod reply;
mod tasks;

pub use callers::{Owner, TokenTable};
pub use deliver::{BoxFuture, Delivery, PROGRESS_INTERVAL, Route, Stop};
pub use host::{CallHost, CallRequest, Hosted, TaskOffer};
pub use parked::{NotParked, NotTaken, Waiting};
pub use relay::Wants;
pub use tasks::{
    Cancelled, Failure, NotAnswered, POLL_INTERVAL, TaskLimits, TaskRefused, TaskState,
    TaskSummary, TaskView, Tasks, ended,
};
