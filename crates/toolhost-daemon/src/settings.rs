//! What `toolhost serve` runs with: the flags ([`Overrides`]) over the
//! configuration file ([`crate::config::Config`]) over the defaults,
//! resolved once into [`Settings`], with every rule that spans fields
//! checked there, before anything starts.

use crate::config::{
    BindingConfig, Config, DEFAULT_MAX_TIMEOUT, HttpConfig, LimitsConfig, default_state_dir,
    read_secret,
};
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
    /// With --dev: a configuration value the plugin needs, `NAME=VALUE`, or
    /// `NAME=@FILE` to read it from a file (for secrets). For this run
    /// only; repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE", requires = "dev")]
    pub set: Vec<String>,
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

/// The HTTP listener: where it listens, what it serves with, and the
/// connection limits as configured (fitted under the open-file limit when
/// the daemon starts).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// `host:port`.
    pub listen: String,
    /// What `/mcp` serves with (the shutdown token and `/metrics` are the
    /// daemon's to set).
    pub options: toolhost_http::HttpOptions,
    /// The connection limits.
    pub limits: toolhost_net::ConnectionLimits,
}

/// The admin API's listeners.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    /// The Unix socket (0600).
    pub socket: PathBuf,
    /// `[admin] tcp` and its token.
    pub tcp: Option<(String, String)>,
    /// The connection limits of each listener.
    pub limits: toolhost_net::ConnectionLimits,
}

/// The disk space kept for the daemon's own state when a plugin fills the
/// disk: room for a last-good catalog of 100,000 tools, twice over.
const DEFAULT_STATE_RESERVE_MB: u64 = 64;

/// Descriptors kept back from HTTP connections by default.
const DEFAULT_RESERVED_FDS: u64 = 128;

/// Everything `serve` needs: the flags over the file over the defaults,
/// resolved once into the library crates' own types, with every
/// cross-field rule checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `pretty` or `json`.
    pub log_format: String,
    /// The tracing filter.
    pub log_level: String,
    /// The exposed-name prefix.
    pub prefix: String,
    /// Plugin directories, or directories of them.
    pub plugin_paths: Vec<PathBuf>,
    /// Where the daemon keeps its state and plugins their data.
    pub state_dir: PathBuf,
    /// Disk space kept for the daemon's own state, bytes.
    pub state_reserve_bytes: u64,
    /// Spare files (inodes) kept in the reserve.
    pub state_reserve_files: usize,
    /// The stdio session's binding, when serving stdio.
    pub stdio: Option<BindingConfig>,
    /// The HTTP listener, when serving HTTP.
    pub http: Option<HttpSettings>,
    /// Bearer tokens (resolved secrets) and their bindings.
    pub tokens: Vec<(String, BindingConfig)>,
    /// Live MCP sessions and subscriptions, in all and per token.
    pub max_sessions: (usize, usize),
    /// The pipeline's caps.
    pub limits: toolhost_pipeline::Limits,
    /// Descriptors kept back from HTTP connections.
    pub reserved_fds: u64,
    /// What an install reads of an archive.
    pub archive: toolhost_package::ArchiveLimits,
    /// How registries are reached, and what of them is kept.
    pub registry: toolhost_lifecycle::RegistryConfig,
    /// Whom packages must come from (`[install]`).
    pub trust: toolhost_package::statement::TrustPolicy,
    /// What an upgrade that changes a plugin's contract does.
    pub contracts: toolhost_lifecycle::contract::ContractPolicy,
    /// The supervisor's timings.
    pub supervisor: SupervisorConfig,
    /// A backend owns the catalog.
    pub managed: bool,
    /// `[backend.nats]`: the fleet's bucket.
    pub fleet: Option<toolhost_fleet::FleetConfig>,
    /// The backend's Authorizer address, and how long it may take.
    pub authorize: Option<(String, Duration)>,
    /// The argument fields sent with each tool's `Authorize`.
    pub authorize_arguments: std::collections::HashMap<String, Vec<String>>,
    /// The admin API's listeners.
    pub admin: AdminSettings,
    /// Per plugin id, what the operator decided.
    pub operators: std::collections::BTreeMap<String, Operator>,
    /// The sandbox's daemon-wide settings.
    pub sandbox: SandboxConfig,
    /// What agents are shown besides the catalog (`[mcp]`).
    pub agent_view: toolhost_listing::AgentView,
    /// The bounds of hosted tasks (`[tasks]`).
    pub tasks: toolhost_calls::TaskLimits,
    /// The operator's word over calls: which need a person's approval
    /// (`[approvals]`), how fast each token and tool may call
    /// (`[rate_limits]`), and the argument rules (`[[rules]]`), compiled.
    pub policy: std::sync::Arc<toolhost_policy::OperatorPolicy>,
    /// Where spans go (`[telemetry]`); `None`: nothing is traced.
    pub telemetry: Option<toolhost_telemetry::Export>,
    /// `--dev`: what to tell the developer once HTTP listens.
    pub dev: Option<crate::dev::DevSession>,
}

impl Config {
    /// Applies the flags over the file and checks the whole.
    ///
    /// Kept whole on purpose: it is the one place the file and the flags meet,
    /// read top to bottom against the `Settings` it fills; the sections that
    /// take more than a few lines are helpers.
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
        let approvals = self.approvals.resolve()?;
        let rate_limits = self.rate_limits.resolve()?;
        let trust = self.install.resolve()?;
        let contracts = crate::trust::contract_policy(
            &self.install,
            self.plugin
                .iter()
                .map(|(id, p)| (id, p.contract_changes.as_deref())),
        )?;
        let rules = crate::policy::compile_rules(&self.rules)?;
        for r in rules.reach() {
            if r.max_arguments < toolhost_policy::rules::MAX_RULE_INPUT_BYTES {
                tracing::warn!(rule = %r.place, max_arguments_bytes = r.max_arguments,
                    "this rule's cost grows faster than its arguments: calls with larger arguments are refused before it runs");
            }
        }
        let policy = std::sync::Arc::new(toolhost_policy::OperatorPolicy::new(
            approvals,
            rate_limits,
            rules,
        ));
        let telemetry = match &self.telemetry {
            Some(t) => crate::telemetry::resolve(t)?,
            None => None,
        };
        let mut dev = match &o.dev {
            Some(dir) => Some(
                crate::dev::DevSession::new(dir, &prefix, o.surface.as_deref())?
                    .with_values(crate::dev::parse_sets(&o.set)?)?,
            ),
            None => None,
        };
        // `--dev` keeps apart from a daemon of the same configuration
        // (its own admin socket and data), unless told where.
        let apart = |d: PathBuf| if dev.is_some() { d.join("dev") } else { d };
        let state_dir = o
            .state_dir
            .clone()
            .unwrap_or_else(|| apart(self.state_dir.clone().unwrap_or_else(default_state_dir)));
        if let Some(d) = dev.as_mut() {
            d.keep_token(&state_dir)?;
        }
        let stdio = self.stdio_binding(&o)?;
        let http_config = self.http.take().unwrap_or_default();
        // A stdio server is started by an MCP client for itself: it serves
        // HTTP only when asked with --http, so it never collides with a
        // daemon started from the same configuration.
        let listen = listen_address(&o, dev.is_some(), &http_config);
        if !o.stdio && listen.is_none() {
            bail!(
                "nothing to serve on: pass --stdio and/or --http ADDR (or [http] listen in the config file)"
            );
        }
        let tokens = http_tokens(&http_config, dev.as_ref())?;
        let admin_tcp = match (&self.admin.tcp, &self.admin.token_file) {
            (None, _) => None,
            (Some(_), None) => bail!(
                "[admin] tcp needs token_file: the admin API is never served on TCP without a token"
            ),
            (Some(addr), Some(file)) => Some((addr.clone(), read_secret(file)?)),
        };
        let max_request_bytes = self.limits.max_request_bytes;
        let http = listen
            .map(|listen| http_settings(listen, &http_config, max_request_bytes))
            .transpose()?;
        let (pipeline_limits, archive) = self.limits.resolve();
        let admin_limits = toolhost_net::ConnectionLimits {
            max_connections: self
                .admin
                .max_connections
                .unwrap_or(toolhost_net::ConnectionLimits::admin().max_connections),
            ..toolhost_net::ConnectionLimits::admin()
        };
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
            admin: AdminSettings {
                socket: if dev.is_some() {
                    state_dir.join("admin.sock")
                } else {
                    self.admin_socket(Some(&state_dir))
                },
                tcp: admin_tcp,
                limits: admin_limits,
            },
            state_dir,
            stdio,
            http,
            tokens,
            max_sessions: (
                http_config
                    .max_sessions
                    .unwrap_or(toolhost_mcp::DEFAULT_MAX_SESSIONS),
                http_config
                    .max_sessions_per_token
                    .unwrap_or(toolhost_mcp::DEFAULT_MAX_SESSIONS_PER_TOKEN),
            ),
            limits: pipeline_limits,
            reserved_fds: self.limits.reserved_fds.unwrap_or(DEFAULT_RESERVED_FDS),
            archive,
            registry: self.registry.resolve()?,
            trust,
            contracts,
            state_reserve_bytes: self
                .limits
                .state_reserve_mb
                .unwrap_or(DEFAULT_STATE_RESERVE_MB)
                .saturating_mul(1 << 20),
            state_reserve_files: self.limits.state_reserve_files.unwrap_or(64).clamp(1, 4096),
            supervisor: toolhost_runtime::SupervisorConfig {
                // `serve --dev` compares the code's shapes with the manifest
                // at every reload.
                keep_shapes: dev.is_some(),
                ..self.supervisor.resolve()
            },
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
            authorize_arguments: {
                if self.backend.authorize.is_none() && !self.backend.authorize_arguments.is_empty()
                {
                    bail!(
                        "[backend.authorize_arguments] names fields for the backend's Authorize, but [backend] authorize is not set"
                    );
                }
                self.backend.authorize_arguments.clone()
            },
            operators: self.operators(telemetry.as_ref(), dev.as_ref())?,
            sandbox: self.sandbox.resolve()?,
            agent_view,
            tasks,
            policy,
            telemetry,
            dev,
        })
    }

    /// Per plugin, the operator's decisions: `[plugin.ID]`, its telemetry
    /// grant, and under `--dev` read access to the virtualenv's base.
    fn operators(
        &self,
        telemetry: Option<&toolhost_telemetry::Export>,
        dev: Option<&crate::dev::DevSession>,
    ) -> Result<std::collections::BTreeMap<String, Operator>> {
        let mut operators: std::collections::BTreeMap<String, Operator> = self
            .plugin
            .iter()
            .map(|(id, p)| {
                let mut op = p.operator(id)?;
                if p.telemetry {
                    let Some(export) = telemetry else {
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
            venv_base,
            values,
            ..
        }) = dev
        {
            let op = operators.entry(id.clone()).or_default();
            op.read.extend(venv_base.iter().cloned());
            for (name, value) in values {
                op.config.values.insert(
                    name.clone(),
                    (
                        toolhost_lifecycle::settings::Supplied::Text(value.clone()),
                        toolhost_lifecycle::settings::Source::CommandLine,
                    ),
                );
            }
        }
        Ok(operators)
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

/// `[http]` as the listener serves it: the defaults where the file says
/// nothing.
fn http_settings(
    listen: String,
    h: &crate::config::HttpConfig,
    max_request_bytes: Option<usize>,
) -> Result<HttpSettings> {
    let ms = |v: Option<u64>| v.map(Duration::from_millis);
    let d = toolhost_http::HttpOptions::default();
    let options = toolhost_http::HttpOptions {
        max_body_bytes: max_request_bytes.unwrap_or(d.max_body_bytes),
        stateless_json: h.stateless_json,
        direct_calls: h.direct_calls.unwrap_or(d.direct_calls),
        session_idle_timeout: ms(h.session_idle_timeout_ms).unwrap_or(d.session_idle_timeout),
        allowed_hosts: h.allowed_hosts.clone().unwrap_or(d.allowed_hosts),
        allowed_origins: h.allowed_origins.clone().unwrap_or(d.allowed_origins),
        oauth: h
            .oauth
            .as_ref()
            .map(crate::oauth::OAuthFile::resolve)
            .transpose()?,
        ..d
    };
    let dl = toolhost_net::ConnectionLimits::default();
    let limits = toolhost_net::ConnectionLimits {
        max_connections: h.max_connections.unwrap_or(dl.max_connections),
        header_timeout: ms(h.header_timeout_ms).unwrap_or(dl.header_timeout),
        idle_timeout: ms(h.idle_timeout_ms).unwrap_or(dl.idle_timeout),
        body_timeout: ms(h.body_timeout_ms).unwrap_or(dl.body_timeout),
        max_body_bytes: options.max_body_bytes,
    };
    Ok(HttpSettings {
        listen,
        options,
        limits,
    })
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

/// Where HTTP listens: a stdio server is started by an MCP client for
/// itself and serves HTTP only when asked with --http, so it never collides
/// with a daemon started from the same configuration; `--dev` listens on a
/// known local port unless told otherwise.
fn listen_address(o: &Overrides, dev: bool, http: &HttpConfig) -> Option<String> {
    if o.stdio {
        o.http.clone()
    } else if dev {
        Some(
            o.http
                .clone()
                .unwrap_or_else(|| "127.0.0.1:7010".to_owned()),
        )
    } else {
        o.http.clone().or(http.listen.clone())
    }
}

/// The HTTP tokens with their bindings, and `--dev`'s own.
fn http_tokens(
    http: &HttpConfig,
    dev: Option<&crate::dev::DevSession>,
) -> Result<Vec<(String, BindingConfig)>> {
    let mut tokens = http
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| Ok((t.secret(i + 1)?, t.binding.clone())))
        .collect::<Result<Vec<_>>>()?;
    if let Some(d) = dev {
        tokens.push((d.token.clone(), d.binding()));
    }
    Ok(tokens)
}

impl LimitsConfig {
    /// `[limits]` as the pipeline's and the archive reader's bounds, each
    /// unset key at its library default.
    fn resolve(&self) -> (toolhost_pipeline::Limits, toolhost_package::ArchiveLimits) {
        let d = toolhost_pipeline::Limits::default();
        let pipeline = toolhost_pipeline::Limits {
            max_timeout: self
                .max_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_MAX_TIMEOUT),
            max_result_bytes: self.max_result_bytes.unwrap_or(d.max_result_bytes),
            max_calls_per_plugin: self
                .max_calls_per_plugin
                .unwrap_or(d.max_calls_per_plugin)
                .max(1),
        };
        let d = toolhost_package::ArchiveLimits::default();
        let archive = toolhost_package::ArchiveLimits {
            max_bytes: self.max_archive_bytes.unwrap_or(d.max_bytes),
            max_entries: self.max_archive_entries.unwrap_or(d.max_entries),
        };
        (pipeline, archive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("/etc/toolhost/toolhost.toml")).expect("a valid config")
    }

    fn http(addr: &str) -> Overrides {
        Overrides {
            http: Some(addr.into()),
            state_dir: Some("/tmp/toolhost-settings-test".into()),
            ..Overrides::default()
        }
    }

    fn error(text: &str, o: Overrides) -> String {
        match config(text).resolve(o) {
            Ok(_) => panic!("{text:?} resolved"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn nothing_to_serve_is_an_error_that_names_the_flags() {
        let e = error("", Overrides::default());
        assert!(e.contains("--stdio") && e.contains("--http"), "{e}");
    }

    #[test]
    fn a_stdio_server_serves_http_only_when_asked_on_the_command_line() {
        let file = "[http]\nlisten = \"127.0.0.1:7010\"\n";
        let stdio = Overrides {
            stdio: true,
            surface: Some("chat".into()),
            task_id: Some("t".into()),
            session_id: Some("s".into()),
            ..Overrides::default()
        };
        let s = config(file).resolve(stdio.clone()).expect("resolves");
        assert!(s.http.is_none(), "the file's listener is the daemon's");
        let both = Overrides {
            http: Some("127.0.0.1:0".into()),
            ..stdio
        };
        let s = config(file).resolve(both).expect("resolves");
        assert_eq!(s.http.map(|h| h.listen).as_deref(), Some("127.0.0.1:0"));
    }

    #[test]
    fn flags_override_the_file_and_unset_limits_take_the_libraries_defaults() {
        let s = config("[http]\nlisten = \"127.0.0.1:1\"\n[limits]\nmax_result_bytes = 4096\n")
            .resolve(http("127.0.0.1:2"))
            .expect("resolves");
        assert_eq!(
            s.http.as_ref().map(|h| h.listen.as_str()),
            Some("127.0.0.1:2")
        );
        assert_eq!(s.limits.max_result_bytes, 4096);
        let d = toolhost_pipeline::Limits::default();
        assert_eq!(s.limits.max_calls_per_plugin, d.max_calls_per_plugin);
        assert_eq!(s.limits.max_timeout, DEFAULT_MAX_TIMEOUT);
        assert_eq!(s.archive, toolhost_package::ArchiveLimits::default());
        assert_eq!(s.prefix, toolhost_manifest::naming::DEFAULT_PREFIX);
    }

    #[test]
    fn a_cap_of_zero_calls_per_plugin_still_lets_one_through() {
        let s = config("[limits]\nmax_calls_per_plugin = 0\n")
            .resolve(http("127.0.0.1:0"))
            .expect("resolves");
        assert_eq!(s.limits.max_calls_per_plugin, 1);
    }

    #[test]
    fn an_invalid_prefix_is_refused_by_its_rule() {
        let e = error("prefix = \"Bad-Prefix\"\n", http("127.0.0.1:0"));
        assert!(e.contains("lowercase letters and digits"), "{e}");
    }

    #[test]
    fn the_admin_api_is_never_on_tcp_without_a_token() {
        let e = error("[admin]\ntcp = \"127.0.0.1:7011\"\n", http("127.0.0.1:0"));
        assert!(e.contains("token_file"), "{e}");
    }

    #[test]
    fn a_plugin_telemetry_grant_needs_somewhere_to_send_spans() {
        let e = error("[plugin.notes]\ntelemetry = true\n", http("127.0.0.1:0"));
        assert!(
            e.contains("[plugin.notes]") && e.contains("[telemetry]"),
            "{e}"
        );
    }

    #[test]
    fn a_configured_token_carries_its_binding() {
        let s = config(
            "[[http.tokens]]\ntoken = \"secret-token\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n",
        )
        .resolve(http("127.0.0.1:0"))
        .expect("resolves");
        assert_eq!(s.tokens.len(), 1);
        assert_eq!(s.tokens[0].0, "secret-token");
        assert_eq!(s.tokens[0].1.surface, "chat");
    }
}
