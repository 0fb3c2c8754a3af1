//! The small mechanisms every layer of toolhost shares, written once.
//!
//! - [`text`]: text from outside (plugins, archives, manifests, agents,
//!   the fleet) made safe for a log line or an operator's terminal, and
//!   the test manifest validation uses to refuse such text outright;
//! - [`files`]: the daemon's private files, written whole, with one rule
//!   for their modes and a reserve of disk space for its own state.
//!
//! Each lives here because two or more crates in different layers need
//! it, and a copy in each drifts.
//!
//! What this crate must not do: depend on any other crate of ours, start
//! a task or a thread, or know what a plugin, a tool or a call is.

#![forbid(unsafe_code)]

pub mod files;
pub mod text;
