//! What a plugin on tools from types uses, in one `use`:
//! `use toolhost_plugin_sdk::prelude::*;`.
//!
//! The derives (`Deserialize`, `Serialize`, `JsonSchema`) expand to code
//! that names `serde` and `schemars`, so the plugin keeps both in its own
//! `Cargo.toml`, as `toolhost new --lang rust` writes it.

pub use crate::call::{Answer, Question, ToolCall};
pub use crate::config::config;
pub use crate::data::DataFile;
pub use crate::output::{Content, ToolError, ToolOutput};
pub use crate::plugin::Plugin;
pub use schemars::JsonSchema;
pub use serde::{Deserialize, Serialize};
