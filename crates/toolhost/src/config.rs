//! The configuration file (TOML). Flags override it. Unknown keys are
//! errors: a misspelt setting must not silently fall back to a default.

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_runtime::SupervisorConfig;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Exposed-name prefix.
    pub prefix: Option<String>,
    /// Plugin directories, or directories of plugin directories.
    #[serde(default)]
    pub plugins: Vec<PathBuf>,
    /// Where plugins' data directories live.
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub log: LogConfig,
    pub stdio: Option<BindingConfig>,
    pub http: Option<HttpConfig>,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub supervisor: SupervisorFile,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub backend: BackendConfig,
    /// Per-plugin settings, by plugin id.
    #[serde(default)]
    pub plugin: std::collections::BTreeMap<String, PluginConfig>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Variables of the daemon's environment this plugin also gets (its
    /// environment is otherwise clean).
    #[serde(default)]
    pub pass_env: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// The admin socket (mode 0600); default `<state_dir>/admin.sock`.
    pub socket: Option<PathBuf>,
    /// Also serve the admin API on TCP (needs `token_file`).
    pub tcp: Option<String>,
    /// The bearer token every TCP admin call must carry.
    pub token_file: Option<PathBuf>,
    /// Most admin connections at once, per listener.
    pub max_connections: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// The catalog comes from the backend's pushes, not from the installed
    /// plugins.
    #[serde(default)]
    pub managed: bool,
    /// The backend's Authorizer: `unix:/path` or `http://host:port`.
    pub authorize: Option<String>,
    /// How long an Authorize call may take before the call is denied.
    pub authorize_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `pretty` or `json`.
    pub format: Option<String>,
    /// An `EnvFilter` directive, e.g. `info` or `toolhost=debug`.
    pub level: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    pub surface: String,
    pub task_id: String,
    pub session_id: String,
    pub workspace_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address to listen on; loopback by default.
    pub listen: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    #[serde(default)]
    pub stateless_json: bool,
    /// Most live MCP sessions and subscriptions.
    pub max_sessions: Option<usize>,
    /// Most live MCP sessions and subscriptions of one bearer token.
    pub max_sessions_per_token: Option<usize>,
    /// An idle session is closed after this long.
    pub session_idle_timeout_ms: Option<u64>,
    /// Most open connections; at the cap the longest-idle one is closed.
    pub max_connections: Option<usize>,
    /// A new connection must send its request headers within this.
    pub header_timeout_ms: Option<u64>,
    /// A connection with no request in progress is closed after this.
    pub idle_timeout_ms: Option<u64>,
    /// A request body must arrive whole within this.
    pub body_timeout_ms: Option<u64>,
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token itself, or
    pub token: Option<String>,
    /// a file holding it (first line).
    pub token_file: Option<PathBuf>,
    #[serde(flatten)]
    pub binding: BindingConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_timeout_ms: Option<u64>,
    pub max_result_bytes: Option<usize>,
    pub max_calls_per_plugin: Option<usize>,
    pub max_request_bytes: Option<usize>,
    /// File descriptors kept back from connections, for plugin (re)starts,
    /// installs and the admin socket.
    pub reserved_fds: Option<u64>,
    /// Largest unpacked size of a plugin archive.
    pub max_archive_bytes: Option<u64>,
    /// Most entries in a plugin archive.
    pub max_archive_entries: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorFile {
    pub health_interval_ms: Option<u64>,
    pub health_timeout_ms: Option<u64>,
    pub health_failures: Option<u32>,
    pub backoff_first_ms: Option<u64>,
    pub backoff_max_ms: Option<u64>,
    pub healthy_reset_ms: Option<u64>,
    pub max_restarts: Option<u32>,
    pub restart_window_ms: Option<u64>,
    pub stop_grace_ms: Option<u64>,
}

impl SupervisorFile {
    pub fn resolve(&self) -> SupervisorConfig {
        let d = SupervisorConfig::default();
        let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
        SupervisorConfig {
            health_interval: ms(self.health_interval_ms, d.health_interval),
            health_timeout: ms(self.health_timeout_ms, d.health_timeout),
            health_failures: self.health_failures.unwrap_or(d.health_failures).max(1),
            backoff_first: ms(self.backoff_first_ms, d.backoff_first),
            backoff_max: ms(self.backoff_max_ms, d.backoff_max),
            healthy_reset: ms(self.healthy_reset_ms, d.healthy_reset),
            max_restarts: self.max_restarts.unwrap_or(d.max_restarts),
            restart_window: ms(self.restart_window_ms, d.restart_window),
            stop_grace: ms(self.stop_grace_ms, d.stop_grace),
        }
    }
}

impl Config {
    /// Reads a config file; relative paths in it are relative to its
    /// directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        let mut c: Self = toml::from_str(&text)
            .with_context(|| format!("invalid config file {}", path.display()))?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        c.plugins.iter_mut().for_each(rebase);
        if let Some(s) = c.state_dir.as_mut() {
            rebase(s);
        }
        if let Some(s) = c.admin.socket.as_mut() {
            rebase(s);
        }
        if let Some(s) = c.admin.token_file.as_mut() {
            rebase(s);
        }
        if let Some(h) = c.http.as_mut() {
            for t in &mut h.tokens {
                if let Some(f) = t.token_file.as_mut() {
                    rebase(f);
                }
            }
        }
        Ok(c)
    }
}

/// The first line of a secret file.
pub fn read_secret(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read token file {}", path.display()))?;
    let t = text.lines().next().unwrap_or_default().trim().to_owned();
    if t.is_empty() {
        bail!("token file {} is empty", path.display());
    }
    Ok(t)
}

/// Where the daemon keeps state when nothing says otherwise.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .map_or_else(|| PathBuf::from(".toolhost"), |base| base.join("toolhost"))
}

impl Config {
    /// The admin socket this configuration implies.
    pub fn admin_socket(&self, state_dir_flag: Option<&Path>) -> PathBuf {
        self.admin.socket.clone().unwrap_or_else(|| {
            state_dir_flag
                .map(Path::to_path_buf)
                .or(self.state_dir.clone())
                .unwrap_or_else(default_state_dir)
                .join("admin.sock")
        })
    }
}

impl TokenConfig {
    pub fn secret(&self) -> Result<String> {
        match (&self.token, &self.token_file) {
            (Some(t), None) if !t.trim().is_empty() => Ok(t.trim().to_owned()),
            (None, Some(f)) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read token file {}", f.display()))?;
                let t = text.lines().next().unwrap_or_default().trim().to_owned();
                if t.is_empty() {
                    bail!("token file {} is empty", f.display());
                }
                Ok(t)
            }
            _ => bail!("each [[http.tokens]] needs exactly one of `token` or `token_file`"),
        }
    }
}
