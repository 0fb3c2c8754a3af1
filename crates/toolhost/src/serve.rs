//! `toolhost serve`: wires manifests, supervisor, catalog, pipeline and MCP.

use crate::config::{BindingConfig, Config, default_state_dir, read_secret};
use anyhow::{Context as _, Result, bail};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_admin::{AdminService, AdminState};
use toolhost_catalog::Store;
use toolhost_lifecycle::{ArchiveLimits, Lifecycle, LifecycleConfig};
use toolhost_manifest::naming;
use toolhost_mcp::{
    ConnectionLimits, HttpOptions, Hub, TokenTable, http_router, serve_http, serve_stdio,
};

/// Descriptors kept back from HTTP connections by default.
const DEFAULT_RESERVED_FDS: u64 = 128;
use toolhost_pipeline::{Authorizer, AuthorizerAddress, Binding, Limits, Pipeline, Plugins};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Configuration file (TOML); flags override it.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Plugin directories, or directories of plugin directories (repeatable).
    #[arg(long = "plugins", value_name = "DIR")]
    plugins: Vec<PathBuf>,
    /// Serve one MCP session on stdin/stdout (logs go to stderr).
    #[arg(long)]
    stdio: bool,
    /// Serve streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:7010; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Surface of the stdio session.
    #[arg(long)]
    surface: Option<String>,
    /// Task id of the stdio session.
    #[arg(long)]
    task_id: Option<String>,
    /// Session id of the stdio session.
    #[arg(long)]
    session_id: Option<String>,
    /// Workspace id of the stdio session.
    #[arg(long)]
    workspace_id: Option<String>,
    /// Where plugins' data directories live.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Log format: pretty or json.
    #[arg(long)]
    log_format: Option<String>,
}

/// Crates that log whole protocol messages (arguments and results
/// included) at debug or trace. They are capped at `info` whatever the
/// filter says: no log line ever carries argument or result contents.
const PAYLOAD_LOGGERS: [&str; 8] = [
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "tower_http",
    "axum",
    "reqwest",
];

fn init_logging(format: &str, level: &str) -> Result<()> {
    use std::io::IsTerminal as _;
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .context("invalid log level")?;
    for target in PAYLOAD_LOGGERS {
        filter = filter.add_directive(format!("{target}=info").parse().context("log directive")?);
    }
    // rmcp logs session ids, clientInfo, cancellation reasons and whole
    // notifications at info, and every error answer (with the agent's text
    // in it) at warn: capped at error.
    filter = filter.add_directive("rmcp=error".parse().context("log directive")?);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        "json" => builder.json().init(),
        "pretty" => builder.init(),
        other => bail!("log format must be pretty or json, not {other:?}"),
    }
    Ok(())
}

fn binding(b: &BindingConfig) -> Binding {
    Binding::new(
        &b.surface,
        &b.task_id,
        &b.session_id,
        b.workspace_id.clone(),
    )
}

async fn shutdown_signal(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    if let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            () = token.cancelled() => {}
        }
    } else {
        token.cancelled().await;
    }
    token.cancel();
}

/// Raises the soft limit of open files to the hard limit, so that the
/// limits below, not the kernel, decide when connections are refused.
/// Returns the soft limit now in force.
fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current != now.maximum
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            },
        )
        .is_ok()
    {
        return now.maximum.unwrap_or(u64::MAX);
    }
    now.current.unwrap_or(u64::MAX)
}

/// The HTTP connection cap: the configured one, lowered so that HTTP
/// connections, and the admin listeners at their caps, leave the reserve
/// of descriptors for plugins and installs.
fn fit_connections(configured: usize, fd_limit: u64, reserved: u64, admin: usize) -> usize {
    let admin = u64::try_from(admin).unwrap_or(u64::MAX);
    let room = fd_limit.saturating_sub(reserved).saturating_sub(admin);
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .min(configured)
        .max(1)
}

fn archive_limits(limits: &crate::config::LimitsConfig) -> ArchiveLimits {
    let d = ArchiveLimits::default();
    ArchiveLimits {
        max_bytes: limits.max_archive_bytes.unwrap_or(d.max_bytes),
        max_entries: limits.max_archive_entries.unwrap_or(d.max_entries),
    }
}

pub async fn run(args: ServeArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let log_format = args
        .log_format
        .clone()
        .or(config.log.format.clone())
        .unwrap_or_else(|| "pretty".into());
    init_logging(&log_format, config.log.level.as_deref().unwrap_or("info"))?;
    let fd_limit = raise_fd_limit();
    toolhost_runtime::remove_stale_run_dirs();

    let prefix = config
        .prefix
        .clone()
        .unwrap_or_else(|| naming::DEFAULT_PREFIX.to_owned());
    if !naming::is_valid_prefix(&prefix) {
        bail!(
            "prefix {prefix:?} must be 1 to 16 lowercase letters and digits, starting with a letter"
        );
    }
    let plugin_paths = if args.plugins.is_empty() {
        config.plugins.clone()
    } else {
        args.plugins.clone()
    };

    let state_dir = args
        .state_dir
        .clone()
        .or(config.state_dir.clone())
        .unwrap_or_else(default_state_dir);

    // Which sessions to serve.
    let stdio_binding = {
        let base = config.stdio.clone();
        let pick =
            |flag: &Option<String>, from: Option<&str>| flag.clone().or(from.map(str::to_owned));
        let surface = pick(&args.surface, base.as_ref().map(|b| b.surface.as_str()));
        let task = pick(&args.task_id, base.as_ref().map(|b| b.task_id.as_str()));
        let session = pick(
            &args.session_id,
            base.as_ref().map(|b| b.session_id.as_str()),
        );
        let workspace = args
            .workspace_id
            .clone()
            .or(base.as_ref().and_then(|b| b.workspace_id.clone()));
        match (surface, task, session) {
            (Some(surface), Some(task_id), Some(session_id)) => Some(binding(&BindingConfig {
                surface,
                task_id,
                session_id,
                workspace_id: workspace,
            })),
            _ if args.stdio => bail!(
                "--stdio needs a binding: --surface, --task-id and --session-id (or [stdio] in the config file)"
            ),
            _ => None,
        }
    };
    let http_config = config.http.take().unwrap_or_default();
    // A stdio server is started by an MCP client for itself: it serves
    // HTTP only when asked with --http, so it never collides with a daemon
    // started from the same configuration.
    let http_addr = if args.stdio {
        args.http.clone()
    } else {
        args.http.clone().or(http_config.listen.clone())
    };
    if !args.stdio && http_addr.is_none() {
        bail!(
            "nothing to serve on: pass --stdio and/or --http ADDR (or [http] listen in the config file)"
        );
    }
    let tokens = Arc::new(TokenTable::new());
    for t in &http_config.tokens {
        tokens.bind(&t.secret()?, binding(&t.binding));
    }
    if http_addr.is_some() && tokens.is_empty() {
        tracing::warn!(
            "HTTP is on but no [[http.tokens]] are configured: every request will get 401"
        );
    }

    // Plugins and the catalog: the lifecycle loads what is installed, starts
    // it, and (embedded mode) publishes the catalog.
    let supervisor = config.supervisor.resolve();
    let store = Arc::new(Store::new(prefix.clone()));
    let plugins = Arc::new(Plugins::new());
    let managed = config.backend.managed;
    let max_timeout = config
        .limits
        .max_timeout_ms
        .map_or(Limits::default().max_timeout, Duration::from_millis);
    let (lifecycle, problems) = Lifecycle::open(
        LifecycleConfig {
            prefix: prefix.clone(),
            state_dir: state_dir.clone(),
            static_paths: plugin_paths.clone(),
            supervisor: supervisor.clone(),
            managed,
            drain_timeout: max_timeout,
            archive_limits: archive_limits(&config.limits),
            pass_env: config
                .plugin
                .iter()
                .map(|(id, p)| (id.clone(), p.pass_env.clone()))
                .collect(),
        },
        Arc::clone(&store),
        Arc::clone(&plugins),
    )?;
    for p in &problems {
        tracing::error!("plugin not served: {p}");
    }
    let fence_file = state_dir.join("catalog-fence.json");
    if managed {
        tracing::info!("managed mode: the catalog comes from the backend's pushes");
        // The last run's fence: a dead backend's delayed push cannot take
        // over after a restart either.
        if let Some(fence) = toolhost_admin::fence::load(&fence_file)? {
            tracing::info!(
                epoch = fence.epoch,
                generation = %toolhost_runtime::log_safe(&fence.generation, 256),
                revision = fence.revision,
                "catalog fence restored"
            );
            store.restore_fence(fence);
        }
    }
    let installed = lifecycle.installed();

    let limits = Limits {
        max_timeout: config
            .limits
            .max_timeout_ms
            .map_or(Limits::default().max_timeout, Duration::from_millis),
        max_result_bytes: config
            .limits
            .max_result_bytes
            .unwrap_or(Limits::default().max_result_bytes),
        max_calls_per_plugin: config
            .limits
            .max_calls_per_plugin
            .unwrap_or(Limits::default().max_calls_per_plugin)
            .max(1),
    };
    let mut pipeline = Pipeline::new(Arc::clone(&store), Arc::clone(&plugins), limits);
    if let Some(addr) = &config.backend.authorize {
        let address = AuthorizerAddress::parse(addr)?;
        let timeout = Duration::from_millis(config.backend.authorize_timeout_ms.unwrap_or(1000));
        pipeline = pipeline.with_authorizer(Authorizer::new(&address, timeout)?);
        tracing::info!(authorizer = %addr, "every call is also authorized by the backend");
    }
    let pipeline = Arc::new(pipeline);
    let hub = Hub::new(pipeline);
    if let Some(max) = http_config.max_sessions {
        hub.set_max_sessions(max);
    }
    if let Some(max) = http_config.max_sessions_per_token {
        hub.set_max_sessions_per_token(max);
    }
    tokio::spawn(Arc::clone(&hub).run_notifier());

    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));

    // The admin API: a 0600 Unix socket, and TCP with a token if asked.
    let admin = AdminService::new(Arc::new(AdminState {
        store: Arc::clone(&store),
        plugins: Arc::clone(&plugins),
        tokens: Arc::clone(&tokens),
        hub: Arc::clone(&hub),
        managed,
        installed,
        lifecycle: Arc::clone(&lifecycle),
        fence_file: managed.then(|| fence_file.clone()),
    }));
    let socket = config.admin_socket(Some(&state_dir));
    let admin_limits = toolhost_admin::ConnectionLimits {
        max_connections: config
            .admin
            .max_connections
            .unwrap_or(toolhost_admin::ConnectionLimits::default().max_connections),
        ..toolhost_admin::ConnectionLimits::default()
    };
    {
        let (admin, stop, socket) = (admin.clone(), shutdown.clone(), socket.clone());
        let stdio = args.stdio;
        tokio::spawn(async move {
            if let Err(e) = toolhost_admin::serve_unix(&socket, admin, admin_limits, stop).await {
                if stdio {
                    // A stdio server beside a daemon: the daemon keeps the
                    // admin socket, and this session does not need one.
                    tracing::warn!("admin API not served by this stdio server: {e}");
                } else {
                    tracing::error!("admin API not served: {e}");
                }
            }
        });
    }
    if let Some(addr) = &config.admin.tcp {
        let Some(token_file) = &config.admin.token_file else {
            bail!(
                "[admin] tcp needs token_file: the admin API is never served on TCP without a token"
            );
        };
        let token = read_secret(token_file)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (admin)"))?;
        eprintln!("toolhost: admin API on tcp://{}", listener.local_addr()?);
        let (admin, stop) = (admin.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(e) =
                toolhost_admin::serve_tcp(listener, &token, admin, admin_limits, stop).await
            {
                tracing::error!("admin API (TCP) stopped: {e}");
            }
        });
    }

    let mut http_task = None;
    if let Some(addr) = http_addr {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            tracing::warn!(%local, "listening on a non-loopback address; make sure tokens and allowed_hosts are what you intend");
        }
        let mut options = HttpOptions {
            max_body_bytes: config
                .limits
                .max_request_bytes
                .unwrap_or(HttpOptions::default().max_body_bytes),
            shutdown: shutdown.child_token(),
            stateless_json: http_config.stateless_json,
            session_idle_timeout: http_config.session_idle_timeout_ms.map_or(
                HttpOptions::default().session_idle_timeout,
                Duration::from_millis,
            ),
            ..HttpOptions::default()
        };
        if let Some(h) = http_config.allowed_hosts.clone() {
            options.allowed_hosts = h;
        }
        if let Some(o) = http_config.allowed_origins.clone() {
            options.allowed_origins = o;
        }
        let defaults = ConnectionLimits::default();
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        let configured = http_config
            .max_connections
            .unwrap_or(defaults.max_connections);
        let reserved = config.limits.reserved_fds.unwrap_or(DEFAULT_RESERVED_FDS);
        // Both admin listeners may be full at once.
        let admin_fds = admin_limits.max_connections * 2;
        let max_connections = fit_connections(configured, fd_limit, reserved, admin_fds);
        if max_connections < configured {
            tracing::warn!(
                configured,
                max_connections,
                fd_limit,
                reserved,
                "[http] max_connections lowered to fit the open-file limit (raise `ulimit -n` to allow more)"
            );
        }
        let limits = ConnectionLimits {
            max_connections,
            header_timeout: ms(http_config.header_timeout_ms, defaults.header_timeout),
            idle_timeout: ms(http_config.idle_timeout_ms, defaults.idle_timeout),
            body_timeout: ms(http_config.body_timeout_ms, defaults.body_timeout),
            max_body_bytes: options.max_body_bytes,
        };
        let app = http_router(Arc::clone(&hub), Arc::clone(&tokens), options);
        // A line for people and scripts (tests wait for it).
        eprintln!("toolhost: serving MCP on http://{local}/mcp");
        tokio::spawn(crate::memory::trim_after_bursts(shutdown.clone()));
        http_task = Some(tokio::spawn(serve_http(
            listener,
            app,
            limits,
            shutdown.clone(),
        )));
    }
    if args.stdio {
        let Some(b) = stdio_binding else {
            bail!("--stdio needs a binding")
        };
        let stop = shutdown.clone();
        let hub = Arc::clone(&hub);
        tokio::spawn(async move {
            if let Err(e) = serve_stdio(hub, b, stop.clone()).await {
                tracing::error!("stdio session ended with an error: {e}");
            }
            // The stdio client is the daemon's reason to live.
            stop.cancel();
        });
    }

    shutdown.cancelled().await;
    tracing::info!("stopping plugins");
    let grace = supervisor.stop_grace + Duration::from_secs(5);
    if tokio::time::timeout(grace, lifecycle.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some plugins did not stop in time");
    }
    toolhost_runtime::remove_run_dir();
    if let Some(t) = http_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    Ok(())
}
