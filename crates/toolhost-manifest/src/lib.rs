//! Plugin manifests (`plugin.toml`) and the names their tools are exposed
//! under: docs/PROTOCOL.md §1 and §2.
//!
//! This crate owns install validation: every rule a plugin must satisfy
//! before toolhost will run it, checked all at once so an author sees every
//! problem in one pass, each naming the file, the tool and the rule. It
//! owns [`naming::exposed`], the pure function from a plugin's local tool
//! names to the flat namespace agents see.
//!
//! It must not start processes, hold state, or touch the network: it reads a
//! directory and returns data or problems. Nothing here panics on any input.

#![forbid(unsafe_code)]

mod decl;
pub mod grants;
pub mod manifest;
pub mod naming;
pub mod problem;
mod read;
mod rules;
pub mod set;
mod text;

pub use manifest::{Annotations, Manifest, Runtime, TaskSupport, ToolDecl};
pub use problem::{Problem, Rule};
pub use rules::is_valid_plugin_id;
pub use set::{CheckedSet, check_set, expand_plugin_dirs};
pub use toolhost_validate::UnknownArguments;
