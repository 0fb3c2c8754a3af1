//! What agents are shown of the catalog: the `tools/list` listing of a
//! surface (cached per surface epoch, paged), the server instructions
//! written from the tools' schemas within a byte budget, and the built-in
//! find tool (an agent's search over a catalog too large to list).
//!
//! [`Listing`] holds the settings (`[mcp]`: [`AgentView`]) and the caches,
//! over the current catalog. It is also the call host's built-in tool
//! ([`toolhost_calls::port::Builtin`]): a call of the find tool is
//! answered here, at once, without the pipeline.
//!
//! What this crate must not do: show an agent a tool of another surface,
//! or anything a tool's declaration does not say (aliases, report mode
//! and other accepted-but-not-advertised behaviour stay unshown).

#![forbid(unsafe_code)]

mod find;
mod instructions;
mod pages;
mod tools;
mod view;

pub use find::exposed_name as find_tool_name;
pub use instructions::{DEFAULT_BUDGET as DEFAULT_INSTRUCTIONS_BYTES, generate};
pub use tools::to_tool;
pub use view::{AgentView, DEFAULT_LIST_TTL_MS, DEFAULT_TOOLS_PAGE_SIZE, Listing};
