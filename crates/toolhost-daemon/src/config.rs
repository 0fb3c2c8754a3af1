//! The configuration file (TOML). Flags override it. Unknown keys are
//! errors: a misspelt setting must not silently fall back to a default.

use crate::oauth::OAuthFile;
pub use crate::policy::{ApprovalsFile, RateFile, RateLimitsFile, RuleFile};
use crate::registry::RegistryFile;
pub use crate::sandboxing::{PluginConfig, SandboxFile};
pub use crate::secret::read_secret;
pub use crate::telemetry::TelemetryFile;
pub use crate::trust::InstallFile;
use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_runtime::SupervisorConfig;

/// The operator's configuration file, as written: its shape, read and
/// checked for unknown keys; [`Config::resolve`] turns it into settings.
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
    /// `[log]`.
    #[serde(default)]
    pub log: LogConfig,
    /// `[stdio]`: the stdio session's binding.
    pub stdio: Option<BindingConfig>,
    /// `[http]`: the streamable HTTP listener and its tokens.
    pub http: Option<HttpConfig>,
    /// `[limits]`.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `[supervisor]`: health checks, backoff, restarts.
    #[serde(default)]
    pub supervisor: SupervisorFile,
    /// `[admin]`: the admin API's listeners.
    #[serde(default)]
    pub admin: AdminConfig,
    /// `[backend]`: a backend that owns the catalog or authorizes calls.
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
    /// Tool calls run as MCP tasks (2026-07-28 clients).
    #[serde(default)]
    pub tasks: TasksFile,
    /// OpenTelemetry traces, exported over OTLP; off without it.
    pub telemetry: Option<TelemetryFile>,
    /// Which calls need a person's approval.
    #[serde(default)]
    pub approvals: ApprovalsFile,
    /// How fast each token and each tool may call.
    #[serde(default)]
    pub rate_limits: RateLimitsFile,
    /// What a call's arguments must satisfy, per tool or per plugin.
    #[serde(default)]
    pub rules: Vec<RuleFile>,
    /// Whom packages must come from.
    #[serde(default)]
    pub install: InstallFile,
    /// How registries are reached, and how much of them is kept.
    #[serde(default)]
    pub registry: RegistryFile,
}

/// `[tasks]`: the bounds of the tasks toolhost hosts.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksFile {
    /// Tasks one token may hold, running or with a result kept.
    pub max_per_token: Option<usize>,
    /// Tasks the daemon holds in all.
    pub max_total: Option<usize>,
    /// How long a finished task's result is kept.
    pub retention_ms: Option<u64>,
    /// The longest a task may run, whatever its tool declares.
    pub max_lifetime_ms: Option<u64>,
}

impl TasksFile {
    /// The bounds, defaults filled in and checked.
    pub fn resolve(&self) -> anyhow::Result<toolhost_calls::TaskLimits> {
        let d = toolhost_calls::TaskLimits::default();
        let limits = toolhost_calls::TaskLimits {
            per_owner: self.max_per_token.unwrap_or(d.per_owner),
            total: self.max_total.unwrap_or(d.total),
            retention: self.retention_ms.map_or(d.retention, Duration::from_millis),
            max_lifetime: self
                .max_lifetime_ms
                .map_or(d.max_lifetime, Duration::from_millis),
        };
        if limits.per_owner == 0 || limits.total == 0 {
            anyhow::bail!(
                "[tasks] max_per_token and max_total must be at least 1 (a tool that requires a task could never run)"
            );
        }
        if limits.max_lifetime.is_zero() || limits.max_lifetime > Duration::from_secs(7 * 86_400) {
            anyhow::bail!("[tasks] max_lifetime_ms must be 1 ms to 7 days");
        }
        if limits.retention > Duration::from_secs(7 * 86_400) {
            anyhow::bail!("[tasks] retention_ms must be at most 7 days");
        }
        Ok(limits)
    }
}

/// `[mcp]`: what agents are shown besides the catalog.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpFile {
    /// Most tools per `tools/list` page (0: one page).
    pub tools_page_size: Option<usize>,
    /// The byte budget of the instructions generated from the schemas.
    pub instructions_bytes: Option<usize>,
    /// Serve the built-in `<prefix>_toolhost_find_tools`.
    pub find_tools: Option<bool>,
    /// How long a 2026-07-28 client may cache a `tools/list` answer, ms.
    pub list_ttl_ms: Option<u64>,
}

/// `[admin]`.
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

/// `[backend]`.
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
    /// `[backend.authorize_arguments]`: the argument fields (JSON
    /// pointers) sent with each tool's `Authorize`, by exposed name; no
    /// other argument is ever sent.
    #[serde(default)]
    pub authorize_arguments: std::collections::HashMap<String, Vec<String>>,
    /// The fleet's NATS JetStream key-value bucket: the catalog comes from
    /// there (managed mode), and this daemon writes its status there.
    pub nats: Option<NatsConfig>,
}

/// `[backend.nats]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// `nats://host:4222`.
    pub url: String,
    /// The buckets' prefix (default `toolhost`): a group's bucket is
    /// `<prefix>_<group>`.
    pub bucket: Option<String>,
    /// The group of daemons this one belongs to (default `default`).
    pub group: Option<String>,
    /// This daemon's id in the fleet (default: the host name).
    pub daemon: Option<String>,
    /// Seconds between status heartbeats (default 15).
    pub heartbeat_s: Option<u64>,
    /// Credentials, from files or the daemon's environment (never inline;
    /// exactly one kind): a token from a file,
    pub token_file: Option<PathBuf>,
    /// or from a variable of the daemon's environment;
    pub token_env: Option<String>,
    /// a user,
    pub user: Option<String>,
    /// with a password from a file,
    pub password_file: Option<PathBuf>,
    /// or from a variable;
    pub password_env: Option<String>,
    /// an nkey seed file;
    pub nkey_seed_file: Option<PathBuf>,
    /// or a `.creds` file.
    pub creds_file: Option<PathBuf>,
    /// Require TLS.
    #[serde(default)]
    pub tls_required: bool,
    /// CA certificates (PEM) to trust for the server; TLS is then required.
    pub tls_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) to present,
    pub tls_cert_file: Option<PathBuf>,
    /// with its key.
    pub tls_key_file: Option<PathBuf>,
}

impl NatsConfig {
    /// The credentials, read now: exactly one kind may be given.
    pub fn auth(&self) -> Result<toolhost_fleet::NatsAuth> {
        use toolhost_fleet::NatsAuth;
        let from =
            |file: &Option<PathBuf>, env: &Option<String>, what: &str| -> Result<Option<String>> {
                match (file, env) {
                    (Some(_), Some(_)) => {
                        bail!("[backend.nats]: {what} is given twice (file and environment)")
                    }
                    (Some(f), None) => Ok(Some(read_secret(f)?)),
                    (None, Some(v)) => std::env::var(v)
                        .map(Some)
                        .with_context(|| format!("[backend.nats]: the environment has no {v}")),
                    (None, None) => Ok(None),
                }
            };
        let token = from(&self.token_file, &self.token_env, "the token")?;
        let password = from(&self.password_file, &self.password_env, "the password")?;
        let seed = match &self.nkey_seed_file {
            Some(f) => Some(read_secret(f)?),
            None => None,
        };
        let kinds = [
            token.is_some(),
            self.user.is_some() || password.is_some(),
            seed.is_some(),
            self.creds_file.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() > 1 {
            bail!(
                "[backend.nats]: give one kind of credentials: a token, a user and password, an nkey seed, or a creds file"
            );
        }
        Ok(
            match (
                token,
                self.user.clone(),
                password,
                seed,
                self.creds_file.clone(),
            ) {
                (Some(t), ..) => NatsAuth::Token(t),
                (_, Some(u), Some(p), ..) => NatsAuth::UserPassword(u, p),
                (_, Some(_), None, ..) | (_, None, Some(_), ..) => {
                    bail!(
                        "[backend.nats]: a user needs a password (password_file or password_env), and a password a user"
                    )
                }
                (_, _, _, Some(s), _) => NatsAuth::NkeySeed(s),
                (_, _, _, _, Some(c)) => NatsAuth::CredsFile(c),
                _ => NatsAuth::None,
            },
        )
    }

    /// TLS as configured.
    pub fn tls(&self) -> Result<toolhost_fleet::NatsTls> {
        let client = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => bail!("[backend.nats]: tls_cert_file and tls_key_file go together"),
        };
        Ok(toolhost_fleet::NatsTls {
            require: self.tls_required || self.tls_ca_file.is_some() || client.is_some(),
            ca_file: self.tls_ca_file.clone(),
            client,
        })
    }
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `pretty` or `json`.
    pub format: Option<String>,
    /// An `EnvFilter` directive, e.g. `info` or `toolhost=debug`.
    pub level: Option<String>,
}

/// A session's identity. The three ids default to empty so that every
/// missing one is named at once ([`BindingConfig::missing`]), not one per
/// run as serde would.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    /// The surface whose tools the session sees.
    #[serde(default)]
    pub surface: String,
    /// The agent's task.
    #[serde(default)]
    pub task_id: String,
    /// The agent's session.
    #[serde(default)]
    pub session_id: String,
    /// Its workspace, if any.
    pub workspace_id: Option<String>,
}

impl BindingConfig {
    /// The required ids it lacks (empty or absent).
    #[must_use]
    pub fn missing(&self) -> Vec<&'static str> {
        [
            ("surface", &self.surface),
            ("task_id", &self.task_id),
            ("session_id", &self.session_id),
        ]
        .into_iter()
        .filter(|(_, v)| v.trim().is_empty())
        .map(|(k, _)| k)
        .collect()
    }
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address to listen on; loopback by default.
    pub listen: Option<String>,
    /// `Host` values accepted (the DNS-rebinding guard).
    pub allowed_hosts: Option<Vec<String>>,
    /// `Origin` values accepted when a request carries one.
    pub allowed_origins: Option<Vec<String>>,
    /// Session-less JSON responses: cheaper per call, no notifications
    /// for 2025-era clients.
    #[serde(default)]
    pub stateless_json: bool,
    /// Answer plain 2025-era `tools/call` requests without rmcp's
    /// per-request server (stateless JSON mode) or session stream (a
    /// session owed nothing but results) (default true).
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
    /// `[[http.tokens]]`: bearer tokens and the bindings they stand for.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// `[http.oauth]`: access tokens from authorization servers.
    pub oauth: Option<OAuthFile>,
}

impl HttpConfig {
    /// Its files, relative to the config file's folder.
    fn rebase(&mut self, rebase: &mut dyn FnMut(&mut PathBuf)) {
        for t in &mut self.tokens {
            if let Some(f) = t.token_file.as_mut() {
                rebase(f);
            }
        }
        if let Some(o) = self.oauth.as_mut() {
            o.rebase(rebase);
        }
    }
}

/// One `[[http.tokens]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token itself, or
    pub token: Option<String>,
    /// a file holding it (first line).
    pub token_file: Option<PathBuf>,
    /// The binding it stands for.
    #[serde(flatten)]
    pub binding: BindingConfig,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// No call waits longer, whatever its tool declares.
    pub max_timeout_ms: Option<u64>,
    /// Largest result (text plus structured content).
    pub max_result_bytes: Option<usize>,
    /// Most calls in flight per plugin.
    pub max_calls_per_plugin: Option<usize>,
    /// Largest HTTP request body.
    pub max_request_bytes: Option<usize>,
    /// File descriptors kept back from connections, for plugin (re)starts,
    /// installs and the admin socket.
    pub reserved_fds: Option<u64>,
    /// Largest unpacked size of a plugin archive.
    pub max_archive_bytes: Option<u64>,
    /// Most entries in a plugin archive.
    pub max_archive_entries: Option<u64>,
    /// Disk space kept for the daemon's own state, MiB.
    pub state_reserve_mb: Option<u64>,
    /// Spare files (inodes) kept for the daemon's own state.
    pub state_reserve_files: Option<usize>,
}

/// `[supervisor]`: each key overrides `toolhost_runtime::SupervisorConfig`'s
/// field of the same name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorFile {
    /// Between health probes.
    pub health_interval_ms: Option<u64>,
    /// One probe's deadline.
    pub health_timeout_ms: Option<u64>,
    /// Failed probes in a row that restart a plugin.
    pub health_failures: Option<u32>,
    /// The first restart's backoff.
    pub backoff_first_ms: Option<u64>,
    /// The longest backoff.
    pub backoff_max_ms: Option<u64>,
    /// Up this long, a plugin's backoff starts over.
    pub healthy_reset_ms: Option<u64>,
    /// Restarts within the window before a plugin is `failed`.
    pub max_restarts: Option<u32>,
    /// The window restarts are counted in.
    pub restart_window_ms: Option<u64>,
    /// How long a stopping plugin gets between SIGTERM and SIGKILL.
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
            keep_shapes: false,
        }
    }
}

impl Config {
    /// Reads a config file; relative paths in it are relative to its
    /// directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// Reads a config file's text, as if read from `path` (relative paths
    /// in it are relative to its directory). Reads nothing else: secrets
    /// and paths the file names are read when the settings are resolved.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut c: Self = toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "invalid config file {}: {e}{}",
                path.display(),
                typo_hint(e.message())
            )
        })?;
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
            h.rebase(&mut |p: &mut PathBuf| rebase(p));
        }
        if let Some(t) = c.telemetry.as_mut() {
            for (key, v) in &mut t.headers {
                if key.ends_with("_file") {
                    let mut path = PathBuf::from(&*v);
                    rebase(&mut path);
                    *v = path.display().to_string();
                }
            }
        }
        if let Some(n) = c.backend.nats.as_mut() {
            [
                &mut n.token_file,
                &mut n.password_file,
                &mut n.nkey_seed_file,
                &mut n.creds_file,
                &mut n.tls_ca_file,
                &mut n.tls_cert_file,
                &mut n.tls_key_file,
            ]
            .into_iter()
            .flatten()
            .for_each(rebase);
        }
        Ok(c)
    }
}

/// Where the daemon keeps state when nothing says otherwise.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .map_or_else(|| PathBuf::from(".toolhost"), |base| base.join("toolhost"))
}

/// "; did you mean `x`?" for serde's "unknown field `y`, expected one of
/// `x`, ..." (and "unknown variant"), when `y` is a typo of one of them.
fn typo_hint(message: &str) -> String {
    let Some(rest) = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))
    else {
        return String::new();
    };
    let Some((word, expected)) = rest.split_once('`') else {
        return String::new();
    };
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    toolhost_lifecycle::settings::did_you_mean(word, candidates.iter().copied())
        .map(|c| format!("did you mean `{c}`?"))
        .unwrap_or_default()
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
    /// The token, read from its file if it is in one; every problem of the
    /// entry (`n`, from 1) at once.
    pub fn secret(&self, n: usize) -> Result<String> {
        let mut problems: Vec<String> = Vec::new();
        let missing = self.binding.missing();
        if !missing.is_empty() {
            problems.push(format!("it has no {}", missing.join(", no ")));
        }
        let secret = match (&self.token, &self.token_file) {
            (Some(t), None) if !t.trim().is_empty() => Some(Ok(t.trim().to_owned())),
            (None, Some(f)) => Some(read_secret(f)),
            _ => {
                problems.push("it needs exactly one of `token` or `token_file`".to_owned());
                None
            }
        };
        if !problems.is_empty() {
            bail!(
                "[[http.tokens]] entry {n}: {} (each entry is a token and the session it stands for: surface, task_id, session_id)",
                problems.join("; ")
            );
        }
        secret.unwrap_or_else(|| bail!("[[http.tokens]] entry {n} has no token"))
    }
}

impl McpFile {
    pub(crate) fn resolve(&self, prefix: &str) -> Result<toolhost_listing::AgentView> {
        let instructions_bytes = self
            .instructions_bytes
            .unwrap_or(toolhost_listing::DEFAULT_INSTRUCTIONS_BYTES);
        if !(512..=1 << 20).contains(&instructions_bytes) {
            bail!(
                "[mcp] instructions_bytes must be between 512 and 1048576 ({instructions_bytes} given): below 512 not even the first line fits"
            );
        }
        Ok(toolhost_listing::AgentView {
            tools_page_size: self
                .tools_page_size
                .unwrap_or(toolhost_listing::DEFAULT_TOOLS_PAGE_SIZE),
            instructions_bytes,
            find_tools: self.find_tools.unwrap_or(false).then(|| prefix.to_owned()),
            list_ttl_ms: self
                .list_ttl_ms
                .unwrap_or(toolhost_listing::DEFAULT_LIST_TTL_MS)
                .min(24 * 3600 * 1000),
        })
    }
}

/// The longest any call may take unless `[limits] max_timeout_ms` says.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(300);
