//! What `toolhost serve` runs with: the flags ([`Overrides`]) over the
//! configuration file ([`crate::config::Config`]) over the defaults,
//! resolved once into [`Settings`], with every rule that spans fields
//! checked there, before anything starts.

use crate::config::{BindingConfig, Config, DEFAULT_MAX_TIMEOUT, default_state_dir, read_secret};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Duration;
use toolhost_lifecycle::settings::{Operator, SandboxConfig};
use toolhost_runtime::SupervisorConfig;

/// The flags of `toolhost serve` that override the file.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct Overrides {
    /// Plugin directories, or directories of plugin directories (repeatable).
    #[arg(long = "plugins", value_name = "DIR")]
    pub plugins: Vec<PathBuf>,
    /// Serve one plugin directory for development, with no config file:
    /// HTTP on 127.0.0.1:7010 (or --http), a fresh token bound to the
    /// plugin's first surface (or --surface), printed with the call line;
    /// state in `dev/` under the state directory (unless --state-dir).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["plugins", "stdio"])]
    pub dev: Option<PathBuf>,
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

/// The disk space kept for the daemon's own state when a plugin fills the
/// disk: room for a last-good catalog of 100,000 tools, twice over.
const DEFAULT_STATE_RESERVE_MB: u64 = 64;

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
    /// Disk space kept for the daemon's own state, bytes.
    pub state_reserve_bytes: u64,
    pub supervisor: SupervisorConfig,
    pub managed: bool,
    /// `[backend.nats]`: the fleet's bucket.
    pub fleet: Option<toolhost_fleet::FleetConfig>,
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
    pub agent_view: toolhost_listing::AgentView,
    /// The bounds of hosted tasks (`[tasks]`).
    pub tasks: toolhost_calls::TaskLimits,
    /// Where spans go (`[telemetry]`); `None`: nothing is traced.
    pub telemetry: Option<toolhost_telemetry::Export>,
    /// `--dev`: what to tell the developer once HTTP listens.
    pub dev: Option<crate::dev::DevSession>,
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
        let tasks = self.tasks.resolve()?;
        let telemetry = match &self.telemetry {
            Some(t) => crate::telemetry::resolve(t)?,
            None => None,
        };
        let dev = match &o.dev {
            Some(dir) => Some(crate::dev::DevSession::new(
                dir,
                &prefix,
                o.surface.as_deref(),
            )?),
            None => None,
        };
        // `--dev` keeps apart from a daemon of the same configuration
        // (its own admin socket and data), unless told where.
        let apart = |d: PathBuf| if dev.is_some() { d.join("dev") } else { d };
        let state_dir = o
            .state_dir
            .clone()
            .unwrap_or_else(|| apart(self.state_dir.clone().unwrap_or_else(default_state_dir)));
        let stdio = self.stdio_binding(&o)?;
        let http_config = self.http.take().unwrap_or_default();
        // A stdio server is started by an MCP client for itself: it serves
        // HTTP only when asked with --http, so it never collides with a
        // daemon started from the same configuration.
        let listen = if o.stdio {
            o.http.clone()
        } else if dev.is_some() {
            Some(
                o.http
                    .clone()
                    .unwrap_or_else(|| "127.0.0.1:7010".to_owned()),
            )
        } else {
            o.http.clone().or(http_config.listen.clone())
        };
        if !o.stdio && listen.is_none() {
            bail!(
                "nothing to serve on: pass --stdio and/or --http ADDR (or [http] listen in the config file)"
            );
        }
        let mut tokens = http_config
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| Ok((t.secret(i + 1)?, t.binding.clone())))
            .collect::<Result<Vec<_>>>()?;
        if let Some(d) = &dev {
            tokens.push((d.token.clone(), d.binding()));
        }
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
            plugin_paths: if let Some(d) = &dev {
                vec![d.dir.clone()]
            } else if o.plugins.is_empty() {
                self.plugins.clone()
            } else {
                o.plugins.clone()
            },
            admin_socket: if dev.is_some() {
                state_dir.join("admin.sock")
            } else {
                self.admin_socket(Some(&state_dir))
            },
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
            state_reserve_bytes: self
                .limits
                .state_reserve_mb
                .unwrap_or(DEFAULT_STATE_RESERVE_MB)
                .saturating_mul(1 << 20),
            supervisor: self.supervisor.resolve(),
            managed: self.backend.managed || self.backend.nats.is_some(),
            fleet: match &self.backend.nats {
                None => None,
                Some(n) => Some(fleet_config(n)?),
            },
            authorize: self.backend.authorize.clone().map(|a| {
                (
                    a,
                    Duration::from_millis(self.backend.authorize_timeout_ms.unwrap_or(1000)),
                )
            }),
            admin_tcp,
            admin_max_connections: self.admin.max_connections,
            operators: {
                let mut operators: std::collections::BTreeMap<String, Operator> = self
                    .plugin
                    .iter()
                    .map(|(id, p)| {
                        let mut op = p.operator(id)?;
                        if p.telemetry {
                            let Some(export) = &telemetry else {
                                bail!(
                                    "[plugin.{id}] telemetry = true needs a [telemetry] endpoint to send spans to"
                                );
                            };
                            op.telemetry = Some(crate::telemetry::plugin_telemetry(id, export)?);
                        }
                        Ok((id.clone(), op))
                    })
                    .collect::<Result<_>>()?;
                if let Some(crate::dev::DevSession {
                    id: Some(id),
                    venv_base: Some(base),
                    ..
                }) = &dev
                {
                    operators
                        .entry(id.clone())
                        .or_default()
                        .read
                        .push(base.clone());
                }
                operators
            },
            sandbox: self.sandbox.resolve()?,
            agent_view,
            tasks,
            telemetry,
            dev,
        })
    }

    /// The stdio session's binding: flags over `[stdio]`. Required only
    /// when serving stdio.
    fn stdio_binding(&self, o: &Overrides) -> Result<Option<BindingConfig>> {
        let base = self.stdio.as_ref();
        let pick = |flag: &Option<String>, from: Option<&String>| {
            flag.clone()
                .or(from.cloned())
                .filter(|v| !v.trim().is_empty())
        };
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

/// `[backend.nats]`, checked: the group and daemon id must be safe parts
/// of a NATS subject.
fn fleet_config(n: &crate::config::NatsConfig) -> Result<toolhost_fleet::FleetConfig> {
    let group = n.group.clone().unwrap_or_else(|| "default".to_owned());
    let daemon = match &n.daemon {
        Some(d) => d.clone(),
        // The host name, in the subject-safe alphabet.
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(64)
            .collect(),
    };
    let prefix = n.bucket.clone().unwrap_or_else(|| "toolhost".to_owned());
    let keys = toolhost_fleet::FleetKeys::new(&prefix, &group, &daemon)
        .map_err(|e| anyhow::anyhow!("[backend.nats]: {e}"))?;
    Ok(toolhost_fleet::FleetConfig {
        url: n.url.clone(),
        auth: n.auth()?,
        tls: n.tls()?,
        keys,
        daemon,
        heartbeat: Duration::from_secs(n.heartbeat_s.unwrap_or(15).max(1)),
        max_value_bytes: 16 * 1024 * 1024,
        backoff_first: Duration::from_millis(250),
        backoff_max: Duration::from_secs(30),
    })
}
