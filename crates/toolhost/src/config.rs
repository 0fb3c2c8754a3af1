//! The configuration file (TOML). Flags override it. Unknown keys are
//! errors: a misspelt setting must not silently fall back to a default.

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_lifecycle::settings::{Operator, OperatorFile, RawValue, SandboxConfig};
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
    /// The plugin sandbox, for every plugin.
    #[serde(default)]
    pub sandbox: SandboxFile,
    /// What agents are shown besides the catalog.
    #[serde(default)]
    pub mcp: McpFile,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpFile {
    /// Most tools per `tools/list` page (0: one page).
    pub tools_page_size: Option<usize>,
    /// The byte budget of the instructions generated from the schemas.
    pub instructions_bytes: Option<usize>,
    /// Serve the built-in `<prefix>_toolhost_find_tools`.
    pub find_tools: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Variables of the daemon's environment this plugin also gets (its
    /// environment is otherwise clean).
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Its `[[config]]` values: plain values inline, secrets as
    /// `<name>_file` (a file's content) or `<name>_env` (a variable of the
    /// daemon's environment).
    #[serde(default)]
    pub config: toml::Table,
    /// Capabilities its manifest declares that the operator grants:
    /// `filesystem`, `network`, `env`.
    #[serde(default)]
    pub grant: Vec<String>,
    /// Sandbox rules turned off for this plugin.
    #[serde(default)]
    pub sandbox_off: Vec<String>,
    /// More paths it may read and execute.
    #[serde(default)]
    pub read: Vec<PathBuf>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFile {
    /// `false` turns the sandbox off for every plugin.
    pub enabled: Option<bool>,
    pub default_memory_mb: Option<u64>,
    pub max_memory_mb: Option<u64>,
    pub default_open_files: Option<u64>,
    pub max_open_files: Option<u64>,
    pub default_processes: Option<u64>,
    pub max_processes: Option<u64>,
    /// Paths every plugin may read and execute (interpreters, libraries
    /// outside the system paths).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// The account plugins run as (a root daemon only): a name, a uid, or
    /// `uid:gid`.
    pub user: Option<String>,
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
    /// Stateless JSON mode only: answer plain 2025-era `tools/call`
    /// requests without rmcp's per-request server (default true).
    pub direct_calls: Option<bool>,
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
    /// Kept whole on purpose: one place where every flag meets its key, field
    /// by field, in the order of the settings.
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
        // `~/` is the daemon's home: where per-user interpreters live
        // (pyenv, nvm), the same config works for every user.
        let home_or_rebase = |p: &mut PathBuf| {
            if let (Ok(rest), Some(home)) = (p.strip_prefix("~"), std::env::var_os("HOME")) {
                *p = PathBuf::from(home).join(rest);
            } else {
                rebase(p);
            }
        };
        c.sandbox.read.iter_mut().for_each(home_or_rebase);
        for p in c.plugin.values_mut() {
            p.read.iter_mut().for_each(home_or_rebase);
            for (key, v) in &mut p.config {
                if key.ends_with("_file")
                    && let toml::Value::String(f) = v
                {
                    let mut path = PathBuf::from(&*f);
                    rebase(&mut path);
                    *f = path.display().to_string();
                }
            }
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
            (None, Some(f)) => read_secret(f),
            _ => bail!("each [[http.tokens]] needs exactly one of `token` or `token_file`"),
        }
    }
}

/// The flags of `toolhost serve` that override the file.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Overrides {
    /// Plugin directories, or directories of plugin directories (repeatable).
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Serve one MCP session on stdin/stdout (logs go to stderr).
    #[arg(long)]
    pub stdio: bool,
    /// Serve streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:7010; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Surface of the stdio session.
    #[arg(long)]
    pub surface: Option<String>,
    /// Task id of the stdio session.
    #[arg(long)]
    pub task_id: Option<String>,
    /// Session id of the stdio session.
    #[arg(long)]
    pub session_id: Option<String>,
    /// Workspace id of the stdio session.
    #[arg(long)]
    pub workspace_id: Option<String>,
    /// Where plugins' data directories live.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Log format: pretty or json.
    #[arg(long)]
    pub log_format: Option<String>,
}

/// What the HTTP listener serves with, resolved.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub listen: String,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub stateless_json: bool,
    pub direct_calls: Option<bool>,
    pub session_idle_timeout: Option<Duration>,
    /// Before fitting under the open-file limit.
    pub max_connections: Option<usize>,
    pub header_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub body_timeout: Option<Duration>,
}

/// Everything `serve` needs: the flags over the file over the defaults,
/// resolved once, with every cross-field rule checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub log_format: String,
    pub log_level: String,
    pub prefix: String,
    pub plugin_paths: Vec<PathBuf>,
    pub state_dir: PathBuf,
    /// The stdio session's binding, when serving stdio.
    pub stdio: Option<BindingConfig>,
    /// The HTTP listener, when serving HTTP.
    pub http: Option<HttpSettings>,
    /// Bearer tokens (resolved secrets) and their bindings.
    pub tokens: Vec<(String, BindingConfig)>,
    pub max_sessions: Option<usize>,
    pub max_sessions_per_token: Option<usize>,
    pub max_timeout: Duration,
    pub max_result_bytes: Option<usize>,
    pub max_calls_per_plugin: Option<usize>,
    pub max_request_bytes: Option<usize>,
    pub reserved_fds: Option<u64>,
    pub max_archive_bytes: Option<u64>,
    pub max_archive_entries: Option<u64>,
    pub supervisor: SupervisorConfig,
    pub managed: bool,
    /// The backend's Authorizer address, and how long it may take.
    pub authorize: Option<(String, Duration)>,
    pub admin_socket: PathBuf,
    /// `[admin] tcp` and its token.
    pub admin_tcp: Option<(String, String)>,
    pub admin_max_connections: Option<usize>,
    /// Per plugin id, what the operator decided.
    pub operators: std::collections::BTreeMap<String, Operator>,
    /// The sandbox's daemon-wide settings.
    pub sandbox: SandboxConfig,
    /// What agents are shown besides the catalog (`[mcp]`).
    pub agent_view: toolhost_mcp::AgentView,
}

impl Config {
    /// Applies the flags over the file and checks the whole.
    pub fn resolve(mut self, o: Overrides) -> Result<Settings> {
        let prefix = self
            .prefix
            .clone()
            .unwrap_or_else(|| toolhost_manifest::naming::DEFAULT_PREFIX.to_owned());
        if !toolhost_manifest::naming::is_valid_prefix(&prefix) {
            bail!(
                "prefix {prefix:?} must be 1 to 16 lowercase letters and digits, starting with a letter"
            );
        }
        let agent_view = self.mcp.resolve(&prefix)?;
        let state_dir = o
            .state_dir
            .clone()
            .or(self.state_dir.clone())
            .unwrap_or_else(default_state_dir);
        let stdio = self.stdio_binding(&o)?;
        let http_config = self.http.take().unwrap_or_default();
        // A stdio server is started by an MCP client for itself: it serves
        // HTTP only when asked with --http, so it never collides with a
        // daemon started from the same configuration.
        let listen = if o.stdio {
            o.http.clone()
        } else {
            o.http.clone().or(http_config.listen.clone())
        };
        if !o.stdio && listen.is_none() {
            bail!(
                "nothing to serve on: pass --stdio and/or --http ADDR (or [http] listen in the config file)"
            );
        }
        let tokens = http_config
            .tokens
            .iter()
            .map(|t| Ok((t.secret()?, t.binding.clone())))
            .collect::<Result<Vec<_>>>()?;
        let admin_tcp = match (&self.admin.tcp, &self.admin.token_file) {
            (None, _) => None,
            (Some(_), None) => bail!(
                "[admin] tcp needs token_file: the admin API is never served on TCP without a token"
            ),
            (Some(addr), Some(file)) => Some((addr.clone(), read_secret(file)?)),
        };
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        Ok(Settings {
            log_format: o
                .log_format
                .clone()
                .or(self.log.format.clone())
                .unwrap_or_else(|| "pretty".into()),
            log_level: self.log.level.clone().unwrap_or_else(|| "info".into()),
            prefix,
            plugin_paths: if o.plugins.is_empty() {
                self.plugins.clone()
            } else {
                o.plugins.clone()
            },
            admin_socket: self.admin_socket(Some(&state_dir)),
            state_dir,
            stdio,
            http: listen.map(|listen| HttpSettings {
                listen,
                allowed_hosts: http_config.allowed_hosts.clone(),
                allowed_origins: http_config.allowed_origins.clone(),
                stateless_json: http_config.stateless_json,
                direct_calls: http_config.direct_calls,
                session_idle_timeout: ms(http_config.session_idle_timeout_ms),
                max_connections: http_config.max_connections,
                header_timeout: ms(http_config.header_timeout_ms),
                idle_timeout: ms(http_config.idle_timeout_ms),
                body_timeout: ms(http_config.body_timeout_ms),
            }),
            tokens,
            max_sessions: http_config.max_sessions,
            max_sessions_per_token: http_config.max_sessions_per_token,
            max_timeout: ms(self.limits.max_timeout_ms).unwrap_or(DEFAULT_MAX_TIMEOUT),
            max_result_bytes: self.limits.max_result_bytes,
            max_calls_per_plugin: self.limits.max_calls_per_plugin,
            max_request_bytes: self.limits.max_request_bytes,
            reserved_fds: self.limits.reserved_fds,
            max_archive_bytes: self.limits.max_archive_bytes,
            max_archive_entries: self.limits.max_archive_entries,
            supervisor: self.supervisor.resolve(),
            managed: self.backend.managed,
            authorize: self.backend.authorize.clone().map(|a| {
                (
                    a,
                    Duration::from_millis(self.backend.authorize_timeout_ms.unwrap_or(1000)),
                )
            }),
            admin_tcp,
            admin_max_connections: self.admin.max_connections,
            operators: self
                .plugin
                .iter()
                .map(|(id, p)| Ok((id.clone(), p.operator(id)?)))
                .collect::<Result<_>>()?,
            sandbox: self.sandbox.resolve()?,
            agent_view,
        })
    }

    /// The stdio session's binding: flags over `[stdio]`. Required only
    /// when serving stdio.
    fn stdio_binding(&self, o: &Overrides) -> Result<Option<BindingConfig>> {
        let base = self.stdio.as_ref();
        let pick = |flag: &Option<String>, from: Option<&String>| flag.clone().or(from.cloned());
        let surface = pick(&o.surface, base.map(|b| &b.surface));
        let task_id = pick(&o.task_id, base.map(|b| &b.task_id));
        let session_id = pick(&o.session_id, base.map(|b| &b.session_id));
        let workspace_id = o
            .workspace_id
            .clone()
            .or(base.and_then(|b| b.workspace_id.clone()));
        match (surface, task_id, session_id) {
            _ if !o.stdio => Ok(None),
            (Some(surface), Some(task_id), Some(session_id)) => Ok(Some(BindingConfig {
                surface,
                task_id,
                session_id,
                workspace_id,
            })),
            _ => bail!(
                "--stdio needs a binding: --surface, --task-id and --session-id (or [stdio] in the config file)"
            ),
        }
    }
}

impl McpFile {
    fn resolve(&self, prefix: &str) -> Result<toolhost_mcp::AgentView> {
        let instructions_bytes = self
            .instructions_bytes
            .unwrap_or(toolhost_mcp::DEFAULT_INSTRUCTIONS_BYTES);
        if !(512..=1 << 20).contains(&instructions_bytes) {
            bail!(
                "[mcp] instructions_bytes must be between 512 and 1048576 ({instructions_bytes} given): below 512 not even the first line fits"
            );
        }
        Ok(toolhost_mcp::AgentView {
            tools_page_size: self
                .tools_page_size
                .unwrap_or(toolhost_mcp::DEFAULT_TOOLS_PAGE_SIZE),
            instructions_bytes,
            find_tools: self.find_tools.unwrap_or(false).then(|| prefix.to_owned()),
        })
    }
}

impl SandboxFile {
    fn resolve(&self) -> Result<SandboxConfig> {
        let d = SandboxConfig::default();
        let c = SandboxConfig {
            enabled: self.enabled.unwrap_or(d.enabled),
            default_memory_mb: self.default_memory_mb.unwrap_or(d.default_memory_mb),
            max_memory_mb: self.max_memory_mb.unwrap_or(d.max_memory_mb),
            default_open_files: self.default_open_files.unwrap_or(d.default_open_files),
            max_open_files: self.max_open_files.unwrap_or(d.max_open_files),
            default_processes: self.default_processes.unwrap_or(d.default_processes),
            max_processes: self.max_processes.unwrap_or(d.max_processes),
            read: self.read.clone(),
            user: self
                .user
                .as_deref()
                .map(toolhost_sandbox::account::run_as)
                .transpose()?,
        };
        if c.default_memory_mb < 64 || c.default_open_files < 16 || c.default_processes < 1 {
            bail!(
                "[sandbox] defaults are too small to run anything: memory at least 64 MiB, 16 open files, 1 process"
            );
        }
        Ok(c)
    }
}

impl PluginConfig {
    /// The operator's decisions for plugin `id`, every value read from its
    /// source by the lifecycle's rules (`toolhost_lifecycle::settings::sources`).
    fn operator(&self, id: &str) -> Result<Operator> {
        let file = OperatorFile {
            pass_env: self.pass_env.clone(),
            config: self
                .config
                .iter()
                .map(|(key, v)| {
                    let raw = match v {
                        toml::Value::String(s) => RawValue::Text(s.clone()),
                        toml::Value::Integer(n) => RawValue::Integer(*n),
                        toml::Value::Boolean(b) => RawValue::Boolean(*b),
                        _ => RawValue::Other,
                    };
                    (key.clone(), raw)
                })
                .collect(),
            grant: self.grant.clone(),
            sandbox_off: self.sandbox_off.clone(),
            read: self.read.clone(),
        };
        Ok(Operator::from_file(id, &file)?)
    }
}

/// The longest any call may take unless `[limits] max_timeout_ms` says.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(300);
