//! Write a toolhost plugin in Rust.
//!
//! A plugin declares its tools in `plugin.toml` (the manifest is the
//! declaration; the code only implements). This crate gives the
//! implementation side everything the wire protocol asks for, so a plugin is
//! one function per tool:
//!
//! - the handshake (docs/PROTOCOL.md §3 and §4, go-plugin's conventions): the magic
//!   cookie is checked, the protocol version toolhost offers in
//!   `PLUGIN_PROTOCOL_VERSIONS` (1 or 2, as the manifest declares) is
//!   chosen, a Unix socket is bound in the private directory toolhost names
//!   in `KANDEV_PLUGIN_SOCKET_DIR`, and `1|<version>|unix|<socket>|grpc` is
//!   printed on stdout;
//! - the services: `kandev.plugin.v1.Plugin` (protocol 1, one unary call
//!   per tool call) and `toolhost.plugin.v2.Plugin` (protocol 2, one stream
//!   per call), and the standard `grpc.health.v1` service, reporting
//!   `plugin` as SERVING;
//! - only toolhost gets an answer: the call token toolhost leaves in the
//!   file named by `TOOLHOST_PLUGIN_CALL_TOKEN` is read once and deleted,
//!   and a call that does not carry it (another plugin, a local process
//!   reaching the socket) is refused with `UNAUTHENTICATED`;
//! - graceful shutdown on SIGTERM or SIGINT;
//! - cancellation: when toolhost cancels a call (the agent gave up) or its
//!   deadline passes, [`ToolCall::cancelled`] completes, so a handler can
//!   stop work and clean up.
//!
//! ```no_run
//! use toolhost_plugin_sdk::{Plugin, ToolCall, ToolError, ToolOutput};
//!
//! async fn greet(call: ToolCall) -> Result<ToolOutput, ToolError> {
//!     let who = call.arguments.get("name").and_then(|v| v.as_str()).unwrap_or("world");
//!     Ok(ToolOutput::text(format!("hello, {who} (task {})", call.context.task_id)))
//! }
//!
//! async fn slow(call: ToolCall) -> Result<ToolOutput, ToolError> {
//!     tokio::select! {
//!         _ = call.cancelled() => Err(ToolError::new("cancelled")),
//!         _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => Ok(ToolOutput::text("done")),
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     Plugin::new().tool("greet", greet).tool("slow", slow).run()
//! }
//! ```
//!
//! With `protocol = 2` under `[runtime]` in the manifest (docs/PROTOCOL.md
//! §7), a handler can do more than return text, through the same
//! [`ToolCall`]:
//!
//! - [`ToolCall::progress`] reports how far it has got;
//! - [`ToolCall::log`] sends a log message to the calling agent;
//! - [`ToolCall::ask`] asks the user a [`Question`] and waits for the
//!   [`Answer`] (checked by toolhost against the question's fields);
//! - [`ToolOutput`] holds any [`Content`]: text, images, audio, resource
//!   links and embedded resources, with annotations.
//!
//! ```no_run
//! use toolhost_plugin_sdk::{Content, Question, ToolCall, ToolError, ToolOutput};
//!
//! async fn delete(call: ToolCall) -> Result<ToolOutput, ToolError> {
//!     let q = Question::new("Delete everything?").boolean("confirm", "Yes").required("confirm");
//!     if !call.ask(q).await?.flag("confirm") {
//!         return Ok(ToolOutput::text("nothing was deleted"));
//!     }
//!     call.progress(1.0, Some(1.0), "deleted");
//!     Ok(ToolOutput::text("deleted").with(Content::resource_text("notes://log.md", "text/markdown", "# Log")))
//! }
//! ```
//!
//! The SDK serves both protocols and answers the version toolhost offers;
//! under protocol 1, progress, logs and questions are no-ops (questions
//! fail with [`AskError::CannotAsk`]) and non-text blocks become one line of
//! text each.
//!
//! Configuration and secrets the operator supplies for the manifest's
//! `[[config]]` items come through [`config()`]: `config().get_str("api_url")`,
//! `config().secret("token")`.
//!
//! With the `types` feature (on by default), a tool's arguments and result
//! are Rust types ([`typed`]), [`prelude`] brings what such a plugin uses in
//! one `use`, and [`DataFile`] keeps a JSON document in the data directory
//! with no update lost.
//!
//! Run by hand, without toolhost, the plugin prints "this is a toolhost
//! plugin, start it with toolhost" and exits with status 1.
//!
//! Under toolhost the plugin runs in a sandbox (docs/PROTOCOL.md §3): it can
//! write only its data directory (`KANDEV_PLUGIN_DATA_DIR`) and its socket
//! directory (also `TMPDIR`), read its own directory and the system's
//! paths, and reach the network and the daemon's environment only as its
//! manifest's `[capabilities]` declare and the operator grants. Nothing in
//! this crate needs more.
//!
//! What this crate must not do: validate arguments (toolhost already did,
//! against the manifest's schema) or retry anything. Arguments arrive exactly
//! as the schema allows, with aliases already renamed.

#![forbid(unsafe_code)]

mod call;
mod config;
#[cfg(feature = "types")]
mod data;
mod output;
mod plugin;
#[cfg(feature = "types")]
pub mod prelude;
mod serve;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "otel")]
mod trace;
#[cfg(not(feature = "otel"))]
#[path = "trace_off.rs"]
mod trace;
#[cfg(feature = "types")]
pub mod typed;
#[cfg(feature = "testing")]
mod write_rule;

pub use call::{Answer, AskError, LogLevel, Question, ToolCall};
pub use config::{Config, Secret, config};
#[cfg(feature = "types")]
pub use data::DataFile;
pub use output::{Audience, Content, ToolError, ToolOutput};
pub use plugin::Plugin;
pub use serve::ServeError;
pub use toolhost_proto::plugin::AgentToolContext as Context;

pub use toolhost_proto::contract::{
    DATA_DIR_KEY, HEALTH_SERVICE, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, PROTOCOL_VERSION,
    PROTOCOL_VERSION_2, PROTOCOL_VERSIONS_KEY, SOCKET_DIR_KEY,
};
