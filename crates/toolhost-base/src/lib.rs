//! The small mechanisms every layer of toolhost shares, written once.
//!
//! - [`text`]: text from outside (plugins, archives, manifests, agents,
//!   the fleet) made safe for a log line or an operator's terminal, and
//!   the test manifest validation uses to refuse such text outright;
//! - [`files`]: the daemon's private files, written whole, with one rule
//!   for their modes and a reserve of disk space for its own state;
//! - [`ids`]: handles nobody can guess (invocation ids, question handles,
//!   task ids, tokens), from the system's CSPRNG;
//! - [`Bucket`]: the token bucket that bounds a plugin's log lines and its
//!   log messages to a caller;
//! - [`time`]: wall-clock time as RFC 3339 text;
//! - [`term`]: every line a person reads, through the escaping rule, and
//!   the `outln!`, `errln!`, `err!` and `outjson!` macros that print them.
//!
//! Each lives here because two or more crates in different layers need
//! it, and a copy in each drifts.
//!
//! What this crate must not do: depend on any other crate of ours, start
//! a task or a thread, or know what a plugin, a tool or a call is.

#![forbid(unsafe_code)]

mod bucket;
pub mod files;
pub mod ids;
pub mod term;
pub mod text;
pub mod time;

pub use bucket::Bucket;
/// Text from outside (a plugin, an agent, a client), made safe for a log
/// line: the one escaping rule of [`text`].
pub use text::escaped as log_safe;
