//! The small mechanisms every layer of toolhost shares, written once.
//!
//! - [`beneath`]: files read and written beneath one directory, resolved
//!   by the kernel, so no link or `..` in a plugin's folder leads outside
//!   (the author's tools on a folder just cloned);
//! - [`text`]: text from outside (plugins, archives, manifests, agents,
//!   the fleet) made safe for a log line or an operator's terminal, and
//!   the test manifest validation uses to refuse such text outright;
//! - [`files`]: the daemon's private files, written whole, with one rule
//!   for their modes; [`reserve`]: spare files of allocated blocks, from
//!   which the daemon's own writes succeed on a disk a plugin filled;
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

pub mod beneath;
mod bucket;
pub mod files;
pub mod ids;
pub mod reserve;
pub mod term;
pub mod text;
pub mod time;

pub use bucket::Bucket;
/// Text from outside (a plugin, an agent, a client), made safe for a log
/// line: the one escaping rule of [`text`].
pub use text::escaped as log_safe;
