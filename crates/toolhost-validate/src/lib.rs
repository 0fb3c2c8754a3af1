//! Argument checking for tool calls: docs/CONTRACT.md §5, steps 2 to 4, as a
//! library the call pipeline uses, plus the schema rules that install
//! validation shares (docs/PROTOCOL.md §1).
//!
//! The order is fixed and each step has one job:
//!
//! 1. [`bounds`]: absent arguments become `{}`; a non-object, more than
//!    1 MiB serialized, or nesting deeper than 64 is refused before any
//!    schema work is spent on it.
//! 2. aliases: a declared compatibility alias is renamed to its canonical
//!    property; both present is an error, never a silent pick.
//! 3. the closed root: a top-level key the schema does not declare (directly,
//!    or inside `allOf`/`anyOf`/`oneOf`/`$ref`/`if`/`then`/`else`) is refused,
//!    or, for tools that ask for it, dropped and reported. Nested objects keep
//!    whatever the schema says about them: open maps stay open.
//! 4. the compiled JSON Schema itself.
//!
//! What this crate must never do: put an argument value into an error. Every
//! message is built here from the error's *kind*, its location and what the
//! schema declares; `jsonschema`'s own `Display` quotes the offending value and
//! is never used. Object keys are treated as data too: a key is named only
//! when it looks like an identifier.
//!
//! Checking is total: any JSON value in, a result out, no panic.

#![forbid(unsafe_code)]

pub mod bounds;
mod check;
mod extent;
mod known;
mod names;
mod refs;
mod render;
mod schema;
mod violation;

pub use check::{Checked, ToolPolicy, UnknownArguments, check_arguments};
pub use names::{is_identifier_like, is_nameable, looks_like_credential};
pub use schema::{CompiledSchema, MAX_SCHEMA_BYTES, SchemaProblem, SchemaRule, check_schema};
pub use violation::{ArgumentError, MAX_MESSAGE_BYTES, MAX_VIOLATIONS, Violation, bounded};
