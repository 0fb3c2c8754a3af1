//! `toolhost serve`: wires manifests, supervisor, catalog, pipeline and MCP.

use crate::config::{BindingConfig, Config};
use crate::settings::{HttpSettings, Overrides, Settings};
use anyhow::{Context as _, Result, bail};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_admin::{AdminService, AdminState};
use toolhost_calls::TokenTable;
use toolhost_catalog::Store;
use toolhost_lifecycle::{ArchiveLimits, Lifecycle, LifecycleConfig};
use toolhost_mcp::{HttpOptions, Hub, http_router, serve_stdio};
use toolhost_net::{ConnectionLimits, serve_http};

/// Descriptors kept back from HTTP connections by default.
const DEFAULT_RESERVED_FDS: u64 = 128;
use toolhost_pipeline::{Authorizer, AuthorizerAddress, Binding, Limits, Pipeline};
use toolhost_runtime::Plugins;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Configuration file (TOML); flags override it.
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
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
    // A closed stderr (`serve --dev | head`, a log collector that went
    // away) must not matter: tracing's default reports a failed write with
    // `eprintln!`, which panics on a closed pipe, in whatever task logged,
    // the signal handler's included.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
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

/// Installs the SIGTERM and SIGINT handlers now (the kernel's default, to
/// die without stopping the plugins, holds until they are installed, so
/// this runs before anything is announced), and returns the future that
/// cancels `token` when either arrives.
fn shutdown_signal(token: CancellationToken) -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        if let (Ok(mut term), Ok(mut int)) = streams {
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

pub async fn run(args: ServeArgs) -> Result<()> {
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let settings = config.resolve(args.overrides)?;
    init_logging(&settings.log_format, &settings.log_level)?;
    let fd_limit = raise_fd_limit();
    toolhost_runtime::remove_stale_run_dirs();
    let telemetry = match &settings.telemetry {
        Some(export) => {
            let installed = toolhost_telemetry::install(export)?;
            tracing::info!(
                endpoint = %export.endpoint,
                sampling_ratio = export.sampling_ratio,
                "telemetry: exporting spans over OTLP"
            );
            Some(installed)
        }
        None => None,
    };
    let daemon = Daemon::wire(&settings)?;
    let served = daemon.serve(&settings, fd_limit).await;
    if let Some(t) = telemetry {
        // What is queued goes out, unless the collector makes it wait.
        tokio::task::spawn_blocking(move || t.shutdown(Duration::from_secs(3)))
            .await
            .ok();
    }
    served
}

/// Keeps disk space for the daemon's own state (`<state_dir>/.reserve`),
/// so a plugin that fills the disk cannot stop the operator's next
/// `plugins config` or the next state save (`toolhost_base::files`).
fn keep_state_reserve(s: &Settings) {
    if s.state_reserve_bytes == 0 {
        return;
    }
    let path = s.state_dir.join(".reserve");
    match toolhost_base::files::Reserve::keep(&path, s.state_reserve_bytes) {
        Ok(held) if held < s.state_reserve_bytes => tracing::warn!(
            held_mib = held >> 20,
            wanted_mib = s.state_reserve_bytes >> 20,
            "the disk holding the state directory is nearly full: the reserve for the daemon's own state is short"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            "cannot keep a reserve for the daemon's state in {}: {e}",
            path.display()
        ),
    }
}

/// The daemon's parts, built and connected, not yet serving.
struct Daemon {
    lifecycle: Arc<Lifecycle>,
    hub: Arc<Hub>,
    tokens: Arc<TokenTable>,
    admin: AdminService,
    shutdown: CancellationToken,
}

impl Daemon {
    /// Builds the parts: the catalog store (with the fence restored in
    /// managed mode), the lifecycle (which loads and starts the plugins),
    /// the pipeline, the hub, the tokens and the admin service.
    fn wire(s: &Settings) -> Result<Self> {
        keep_state_reserve(s);
        let store = Arc::new(Store::new(s.prefix.clone()));
        let plugins = Arc::new(Plugins::new());
        let archive = ArchiveLimits::default();
        let (lifecycle, problems) = Lifecycle::open(
            LifecycleConfig {
                prefix: s.prefix.clone(),
                state_dir: s.state_dir.clone(),
                static_paths: s.plugin_paths.clone(),
                supervisor: s.supervisor.clone(),
                managed: s.managed,
                // A task is a call: an upgrade waits for it as for any.
                drain_timeout: s.max_timeout.max(s.tasks.max_lifetime),
                archive_limits: ArchiveLimits {
                    max_bytes: s.max_archive_bytes.unwrap_or(archive.max_bytes),
                    max_entries: s.max_archive_entries.unwrap_or(archive.max_entries),
                },
                operators: s.operators.clone(),
                sandbox: s.sandbox.clone(),
            },
            Arc::clone(&store),
            Arc::clone(&plugins),
        )?;
        for p in &problems {
            tracing::error!("plugin problem: {p}");
        }
        let fence_file = s.state_dir.join("catalog-fence.json");
        if s.managed {
            tracing::info!("managed mode: the catalog comes from the backend's pushes");
            // The last run's fence: a dead backend's delayed push cannot
            // take over after a restart either.
            if let Some(fence) = toolhost_admin::fence::load(&fence_file)? {
                tracing::info!(
                    epoch = fence.epoch,
                    generation = %toolhost_base::log_safe(&fence.generation, 256),
                    revision = fence.revision,
                    "catalog fence restored"
                );
                store.restore_fence(fence);
            }
            restore_last_good(&store, &lifecycle, &fence_file);
        }
        let hub = Hub::new(
            Arc::new(pipeline(s, &store, &plugins)?),
            Arc::clone(&plugins),
        );
        if let Some(max) = s.max_sessions {
            hub.set_max_sessions(max);
        }
        if let Some(max) = s.max_sessions_per_token {
            hub.set_max_sessions_per_token(max);
        }
        hub.set_agent_view(s.agent_view.clone());
        hub.tasks().set_limits(s.tasks);
        let tokens = Arc::new(TokenTable::new());
        for (secret, b) in &s.tokens {
            tokens.bind(secret, binding(b));
        }
        if s.http.is_some() && tokens.is_empty() {
            tracing::warn!(
                "HTTP is on but no [[http.tokens]] are configured: every request will get 401"
            );
        }
        let admin_state = Arc::new(AdminState {
            store: Arc::clone(&store),
            plugins,
            tokens: Arc::clone(&tokens),
            hub: Arc::clone(&hub),
            managed: s.managed,
            installed: lifecycle.installed(),
            lifecycle: Arc::clone(&lifecycle),
            fence_file: s.managed.then_some(fence_file),
            fleet: s.fleet.as_ref().map(|f| {
                Arc::new(toolhost_admin::FleetLink::new(
                    &f.url,
                    &f.keys.bucket,
                    &f.daemon,
                ))
            }),
        });
        if let Some(link) = admin_state.fleet.clone() {
            hub.set_extra_metrics(Arc::new(move || link.metrics()));
        }
        let shutdown = CancellationToken::new();
        if let Some(fleet) = &s.fleet {
            tokio::spawn(toolhost_fleet::run(
                fleet.clone(),
                Arc::clone(&admin_state),
                shutdown.child_token(),
            ));
        }
        let admin = AdminService::new(admin_state);
        Ok(Self {
            lifecycle,
            hub,
            tokens,
            admin,
            shutdown,
        })
    }

    /// Serves on every configured listener until a signal (or, on stdio,
    /// the client leaving), then stops the plugins.
    async fn serve(self, s: &Settings, fd_limit: u64) -> Result<()> {
        tokio::spawn(Arc::clone(&self.hub).run_notifier());
        tokio::spawn(shutdown_signal(self.shutdown.clone()));
        let admin_limits = ConnectionLimits {
            max_connections: s
                .admin_max_connections
                .unwrap_or(ConnectionLimits::admin().max_connections),
            ..ConnectionLimits::admin()
        };
        self.serve_admin(s, admin_limits).await?;
        let http_task = match &s.http {
            Some(h) => Some(self.serve_http(s, h, fd_limit, admin_limits).await?),
            None => None,
        };
        if let Some(b) = &s.stdio {
            let (stop, hub, b) = (self.shutdown.clone(), Arc::clone(&self.hub), binding(b));
            tokio::spawn(async move {
                if let Err(e) = serve_stdio(hub, b, stop.clone()).await {
                    tracing::error!("stdio session ended with an error: {e}");
                }
                // The stdio client is the daemon's reason to live.
                stop.cancel();
            });
        }
        self.shutdown.cancelled().await;
        tracing::info!("stopping plugins");
        let grace = s.supervisor.stop_grace + Duration::from_secs(5);
        if tokio::time::timeout(grace, self.lifecycle.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("some plugins did not stop in time");
        }
        toolhost_runtime::remove_run_dir();
        toolhost_sandbox::remove_cgroup_root();
        if let Some(t) = http_task {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        Ok(())
    }

    /// The admin API: a 0600 Unix socket, and TCP with a token if asked.
    async fn serve_admin(&self, s: &Settings, limits: ConnectionLimits) -> Result<()> {
        let (admin, stop, socket) = (
            self.admin.clone(),
            self.shutdown.clone(),
            s.admin_socket.clone(),
        );
        // Bound before anything is announced: a CLI run the moment the
        // daemon says it serves finds the socket.
        match toolhost_admin::BoundSocket::bind(&socket) {
            Ok(bound) => {
                tokio::spawn(async move {
                    if let Err(e) = toolhost_admin::serve_unix(bound, admin, limits, stop).await {
                        tracing::error!("admin API stopped: {e}");
                    }
                });
            }
            // A stdio server beside a daemon: the daemon keeps the admin
            // socket, and this session does not need one.
            Err(e) if s.stdio.is_some() => {
                tracing::warn!("admin API not served by this stdio server: {e}");
            }
            Err(e) => tracing::error!("admin API not served: {e}"),
        }
        if let Some((addr, token)) = s.admin_tcp.clone() {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (admin)"))?;
            errln!("toolhost: admin API on tcp://{}", listener.local_addr()?);
            let (admin, stop) = (self.admin.clone(), self.shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) =
                    toolhost_admin::serve_tcp(listener, &token, admin, limits, stop).await
                {
                    tracing::error!("admin API (TCP) stopped: {e}");
                }
            });
        }
        Ok(())
    }

    /// Streamable HTTP at `/mcp`, within the connection limits.
    async fn serve_http(
        &self,
        s: &Settings,
        h: &HttpSettings,
        fd_limit: u64,
        admin: ConnectionLimits,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let listener = tokio::net::TcpListener::bind(&h.listen)
            .await
            .with_context(|| {
                let hint = if s.dev.is_some() {
                    " (another `serve --dev`? pass --http 127.0.0.1:0 for a free port)"
                } else {
                    ""
                };
                format!("cannot listen on {}{hint}", h.listen)
            })?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            tracing::warn!(%local, "listening on a non-loopback address; make sure tokens and allowed_hosts are what you intend");
        }
        let d = HttpOptions::default();
        let options = HttpOptions {
            max_body_bytes: s.max_request_bytes.unwrap_or(d.max_body_bytes),
            shutdown: self.shutdown.child_token(),
            stateless_json: h.stateless_json,
            direct_calls: h.direct_calls.unwrap_or(d.direct_calls),
            session_idle_timeout: h.session_idle_timeout.unwrap_or(d.session_idle_timeout),
            allowed_hosts: h.allowed_hosts.clone().unwrap_or(d.allowed_hosts),
            allowed_origins: h.allowed_origins.clone().unwrap_or(d.allowed_origins),
        };
        let dl = ConnectionLimits::default();
        let configured = h.max_connections.unwrap_or(dl.max_connections);
        let reserved = s.reserved_fds.unwrap_or(DEFAULT_RESERVED_FDS);
        // Both admin listeners may be full at once.
        let max_connections =
            fit_connections(configured, fd_limit, reserved, admin.max_connections * 2);
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
            header_timeout: h.header_timeout.unwrap_or(dl.header_timeout),
            idle_timeout: h.idle_timeout.unwrap_or(dl.idle_timeout),
            body_timeout: h.body_timeout.unwrap_or(dl.body_timeout),
            max_body_bytes: options.max_body_bytes,
        };
        let app = http_router(Arc::clone(&self.hub), Arc::clone(&self.tokens), options);
        // A line for people and scripts (tests wait for it).
        errln!("toolhost: serving MCP on http://{local}/mcp");
        if let Some(dev) = &s.dev {
            dev.banner(local, &s.admin_socket);
        }
        tokio::spawn(crate::memory::trim_after_bursts(self.shutdown.clone()));
        Ok(tokio::spawn(serve_http(
            listener,
            app,
            limits,
            self.shutdown.clone(),
        )))
    }
}

/// Serves the last catalog the backend pushed before this start, until it
/// pushes again, instead of nothing (`toolhost_admin::fence`). Anything
/// wrong with the file is said, and nothing is restored.
fn restore_last_good(store: &Store, lifecycle: &Lifecycle, fence_file: &std::path::Path) {
    match toolhost_admin::fence::load_last_good(fence_file) {
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; serving no catalog until the backend pushes"),
        Ok(Some(snapshot)) => {
            let r = store.restore_last_good(snapshot, &lifecycle.installed().load());
            if r.outcome == toolhost_catalog::Outcome::Accepted {
                tracing::info!(
                    generation = %toolhost_base::log_safe(&r.generation, 256),
                    revision = r.revision,
                    withheld = r.defects.len(),
                    "serving the last catalog the backend pushed before this start, until it pushes again"
                );
            } else {
                tracing::warn!(
                    outcome = r.outcome.as_str(),
                    reasons = %r.reasons.join("; "),
                    "the last-good catalog was not restored; serving no catalog until the backend pushes"
                );
            }
        }
    }
}

/// The call pipeline, with the backend's Authorizer when configured.
fn pipeline(s: &Settings, store: &Arc<Store>, plugins: &Arc<Plugins>) -> Result<Pipeline> {
    let d = Limits::default();
    let limits = Limits {
        max_timeout: s.max_timeout,
        max_result_bytes: s.max_result_bytes.unwrap_or(d.max_result_bytes),
        max_calls_per_plugin: s
            .max_calls_per_plugin
            .unwrap_or(d.max_calls_per_plugin)
            .max(1),
    };
    let mut pipeline = Pipeline::new(Arc::clone(store), Arc::clone(plugins) as _, limits);
    if let Some((addr, timeout)) = &s.authorize {
        let address = AuthorizerAddress::parse(addr)?;
        pipeline = pipeline.with_authorizer(Authorizer::new(&address, *timeout)?);
        tracing::info!(authorizer = %addr, "every call is also authorized by the backend");
    }
    Ok(pipeline)
}
