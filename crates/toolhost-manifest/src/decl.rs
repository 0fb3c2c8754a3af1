//! What a valid manifest declares: the types every other crate reads, and
//! the bounds the rules check them against.

use crate::naming;
use crate::problem::Problem;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use toolhost_validate::UnknownArguments;

/// Environment variables toolhost sets for the plugin; a manifest may not.
pub use toolhost_proto::contract::RESERVED_ENV;

/// The manifest file name inside a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.toml";
/// At most this many tools per plugin.
pub const MAX_TOOLS: usize = 32;
/// Default and bounds of a tool's `timeout_ms`.
pub const DEFAULT_TOOL_TIMEOUT_MS: u32 = 30_000;
/// The largest `timeout_ms`.
pub const MAX_TOOL_TIMEOUT_MS: u32 = 300_000;
/// Default `startup_timeout_ms`.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;
pub(crate) const MAX_STARTUP_TIMEOUT_MS: u64 = 600_000;
pub(crate) const MAX_DESCRIPTION: usize = 1024;
pub(crate) const MAX_TITLE: usize = 128;

/// A validated plugin manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The plugin directory.
    pub dir: PathBuf,
    /// `id`, e.g. `acme.notes`.
    pub id: String,
    /// `version`.
    pub version: semver::Version,
    /// Display name.
    pub name: String,
    /// Plugin description (may be empty).
    pub description: String,
    /// How to start the plugin.
    pub runtime: Runtime,
    /// The declared tools, in file order.
    pub tools: Vec<ToolDecl>,
    /// Problems that withhold one tool, not the plugin: a schema that
    /// breaks a schema rule. `toolhost check` and installs treat them as
    /// problems; a plugin already configured or installed serves its other
    /// tools, and the catalog withholds these (they fail closed).
    pub defects: Vec<Problem>,
}

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// The executable, resolved against the plugin directory.
    pub command: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// How long the plugin has to print its handshake and become healthy.
    pub startup_timeout_ms: u64,
    /// The plugin protocol version it speaks: 1 (unary, the default) or 2
    /// (streaming: rich results, progress, logs, questions). toolhost offers
    /// exactly this version at start and uses v2 only when it says 2.
    pub protocol: u32,
}

/// The plugin protocol versions a manifest may declare.
pub const PROTOCOL_VERSIONS: [u32; 2] = [1, 2];

/// One `[[tools]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDecl {
    /// Local name, unique in the plugin.
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What the tool does, for the model.
    pub description: String,
    /// Where the tool is offered.
    pub surfaces: Vec<String>,
    /// Per-call deadline.
    pub timeout_ms: u32,
    /// Input schema, exactly as declared.
    pub input_schema: Value,
    /// Output schema, exactly as declared.
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    pub annotations: Annotations,
    /// alias -> canonical property.
    pub aliases: BTreeMap<String, String>,
    /// What to do with undeclared top-level arguments.
    pub unknown_arguments: UnknownArguments,
    /// Each progress update restarts the deadline (protocol 2 only), never
    /// past the daemon's `max_timeout_ms` from the start of the call.
    pub reset_timeout_on_progress: bool,
}

/// The four MCP behaviour hints. Omitted hints take the conservative value:
/// a tool is assumed to write, destroy, not be idempotent and reach the
/// outside world until its author says otherwise. `destructive` is only
/// meaningful for a tool that writes, so a read-only tool defaults to
/// non-destructive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Annotations {
    /// Does not modify its environment.
    pub read_only: bool,
    /// May perform destructive updates.
    pub destructive: bool,
    /// Repeating a call with the same arguments has no further effect.
    pub idempotent: bool,
    /// Interacts with an open world of external entities.
    pub open_world: bool,
}

impl Default for Annotations {
    fn default() -> Self {
        Self {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        }
    }
}

impl Manifest {
    /// `(local, exposed)` for every tool, in declaration order.
    #[must_use]
    pub fn exposed_names(&self, prefix: &str) -> Vec<(String, String)> {
        self.tools
            .iter()
            .map(|t| (t.name.clone(), naming::exposed(prefix, &self.id, &t.name)))
            .collect()
    }
}
