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
/// The largest `task_timeout_ms`: a day. The operator's `[tasks]
/// max_lifetime_ms` caps it further.
pub const MAX_TASK_TIMEOUT_MS: u32 = 86_400_000;
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
    /// `[[config]]`: the settings and secrets it asks the operator for.
    pub config: Vec<ConfigDecl>,
    /// `[capabilities]`: what it asks for beyond its own directories.
    pub capabilities: Capabilities,
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
    /// One sentence for the server's instructions: how to call it well
    /// (`[[tools]] instructions`).
    pub instructions: Option<String>,
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
    /// Whether a call may run as an MCP task (the 2026-07-28 Tasks
    /// extension): `task = "never" | "optional" | "required"`.
    pub task: TaskSupport,
    /// How long a call run as a task may take, when longer than
    /// `timeout_ms` (a task outlives its request, so it may run for
    /// minutes or hours); `None`: `timeout_ms`.
    pub task_timeout_ms: Option<u32>,
}

/// Whether a tool's call may run as an MCP task: a call that outlives its
/// request, polled by the client. A tool says so because only its author
/// knows whether a call may take minutes and whether it is safe to leave
/// running when the client goes away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TaskSupport {
    /// Only a direct call (the default).
    #[default]
    Never,
    /// Either, as the client asks.
    Optional,
    /// Only as a task.
    Required,
}

impl TaskSupport {
    /// The manifest's word for it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Optional => "optional",
            Self::Required => "required",
        }
    }

    /// The support a manifest word names.
    #[must_use]
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "never" => Some(Self::Never),
            "optional" => Some(Self::Optional),
            "required" => Some(Self::Required),
            _ => None,
        }
    }

    /// Whether a call may be direct.
    #[must_use]
    pub fn allows_direct(self) -> bool {
        self != Self::Required
    }

    /// Whether a call may be a task.
    #[must_use]
    pub fn allows_task(self) -> bool {
        self != Self::Never
    }

    /// Whether `self` allows nothing that `declared` does not: what a
    /// pushed descriptor may say of an installed tool. `optional` may be
    /// narrowed to either; `never` and `required` only stay as they are.
    #[must_use]
    pub fn within(self, declared: Self) -> bool {
        (!self.allows_direct() || declared.allows_direct())
            && (!self.allows_task() || declared.allows_task())
    }
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

/// The most `[[config]]` items a plugin may declare.
pub const MAX_CONFIG_ITEMS: usize = 64;

/// The type of a configuration value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// Any UTF-8 text.
    String,
    /// A 64-bit signed integer.
    Integer,
    /// `true` or `false`.
    Boolean,
}

impl ConfigType {
    /// The name used in manifests.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
        }
    }
}

/// A configuration value of one of the three types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigValue {
    /// Text.
    String(String),
    /// A whole number.
    Integer(i64),
    /// A flag.
    Boolean(bool),
}

/// One `[[config]]` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigDecl {
    /// `^[a-z][a-z0-9_]{0,63}$`, unique in the plugin.
    pub name: String,
    /// What it is for, for the operator.
    pub description: String,
    /// Its type.
    pub kind: ConfigType,
    /// Whether the plugin cannot run without it.
    pub required: bool,
    /// The value when the operator supplies none (never for a secret).
    pub default: Option<ConfigValue>,
    /// A credential: write-only, never shown or logged.
    pub secret: bool,
}

/// Filesystem access a plugin asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read (and execute).
    Read,
    /// Read and write.
    Write,
}

/// One path a plugin asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    /// Absolute, without `..`.
    pub path: PathBuf,
    /// What it asks to do there.
    pub access: Access,
}

/// Network access a plugin asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// None (the default).
    #[default]
    None,
    /// Outbound TCP connections to these ports.
    Connect(Vec<u16>),
    /// Outbound TCP connections to any port.
    Any,
}

/// `[capabilities]`: what a plugin asks for beyond its own directory, data
/// directory and socket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Paths outside its own directories.
    pub filesystem: Vec<PathGrant>,
    /// Network access.
    pub network: Network,
    /// Names of the daemon's environment variables it asks to inherit.
    pub env: Vec<String>,
    /// Address space it asks for, in MiB (`memory_mb`).
    pub memory_mb: Option<u64>,
    /// Open files it asks for (`open_files`).
    pub open_files: Option<u64>,
    /// Processes and threads it asks for (`processes`).
    pub processes: Option<u64>,
    /// The size of its data directory it asks for, in MiB (`disk_mb`).
    pub disk_mb: Option<u64>,
    /// `[credentials] audiences`: the services it calls on the caller's
    /// behalf. Granted (`grant = ["credentials"]`), each call carries a
    /// token for each audience, exchanged from the caller's own (which the
    /// plugin never sees).
    pub credentials: Vec<String>,
}

/// The most audiences a plugin may declare.
pub const MAX_AUDIENCES: usize = 8;

/// Bounds of the resource limits a manifest may ask for.
pub const MEMORY_MB_RANGE: (u64, u64) = (64, 1 << 20);
/// Bounds of `open_files`.
pub const OPEN_FILES_RANGE: (u64, u64) = (16, 1 << 20);
/// Bounds of `processes`.
pub const PROCESSES_RANGE: (u64, u64) = (1, 1 << 16);
/// Bounds of `disk_mb`.
pub const DISK_MB_RANGE: (u64, u64) = (1, 1 << 24);
