//! What the runtime needs to know to run one plugin. Built by whoever reads
//! manifests (the lifecycle); the runtime itself never reads one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How to run one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// Plugin id (tags logs and errors).
    pub id: String,
    /// Version, for status output.
    pub version: String,
    /// The plugin directory (the process's working directory).
    pub dir: PathBuf,
    /// The executable.
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment (the manifest's `runtime.env`).
    pub env: BTreeMap<String, String>,
    /// Variables of the daemon's environment passed through (the
    /// operator's choice; the environment is otherwise clean).
    pub pass_env: Vec<String>,
    /// Handshake plus health must complete within this.
    pub startup_timeout: Duration,
    /// The plugin's own data directory, created before start.
    pub data_dir: PathBuf,
    /// Whether it may write there: `false` only while it is over a disk
    /// quota the kernel does not hold (it may still read, delete and
    /// truncate).
    pub data_writable: bool,
    /// The ext4 image that is the data directory's own file system, when
    /// the operator holds quotas that way (`[sandbox] disk_quota =
    /// "image"`, a root daemon).
    pub disk_image: Option<PathBuf>,
    /// The plugin protocol version to offer and then speak (1 or 2): the
    /// manifest's `runtime.protocol`.
    pub protocol: u32,
    /// The configuration delivered at start (JSON), when the manifest
    /// declares any.
    pub config: Option<Delivered>,
    /// The sandbox it runs in.
    pub sandbox: toolhost_sandbox::SandboxPolicy,
    /// The local names of the tools its manifest declares, to compare with
    /// what the process says it implements.
    pub tools: Vec<String>,
    /// The audiences its calls carry tokens for (declared in its manifest's
    /// `[credentials]` and granted by the operator).
    pub audiences: Vec<String>,
}

/// Configuration values and secrets for one plugin, as the JSON document
/// written to its config file. Never printed: `Debug` shows only the size.
#[derive(Clone, PartialEq, Eq)]
pub struct Delivered(std::sync::Arc<str>);

impl Delivered {
    /// Wraps the JSON document.
    #[must_use]
    pub fn new(json: String) -> Self {
        Self(json.into())
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The document itself: for the runtime's file and for tests, never for
    /// a status, a log line or an error.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Delivered({} bytes, redacted)", self.0.len())
    }
}
