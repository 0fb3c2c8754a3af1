//! `toolhost serve`: the daemon, wired once from its settings, and served
//! on every configured listener until a signal.

use crate::config::{BindingConfig, Config};
use crate::settings::{HttpSettings, Overrides, Settings};
use anyhow::{Context as _, Result, bail};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_admin::{AdminService, AdminState};
use toolhost_base::errln;
use toolhost_calls::TokenTable;
use toolhost_catalog::Store;
use toolhost_http::{HttpOptions, http_router};
use toolhost_lifecycle::{Lifecycle, LifecycleConfig};
use toolhost_managed::{LinkStatus, Managed};
use toolhost_mcp::{Hub, serve_stdio};
use toolhost_net::{ConnectionLimits, serve_http};
use toolhost_pipeline::{Authorizer, AuthorizerAddress, Binding, Pipeline};
use toolhost_runtime::Plugins;

/// The flags of `toolhost serve`.
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

/// Runs the daemon until a signal (or, on stdio, its client leaving).
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

/// Keeps spare files for the daemon's own state (`<state_dir>/.reserve/`),
/// so a plugin that fills the disk (bytes or inodes) cannot stop the
/// operator's next `plugins config` or the next state save
/// (`toolhost_base::reserve`).
fn keep_state_reserve(s: &Settings) {
    if s.state_reserve_bytes == 0 {
        return;
    }
    // The folders the daemon's own writes go into exist before the disk
    // can be full: a spare replaces a file, it cannot make a folder.
    let config = s.state_dir.join("config");
    if let Err(e) = toolhost_base::files::private_dir(&config) {
        tracing::warn!("cannot make {}: {e}", config.display());
    }
    let path = s.state_dir.join(".reserve");
    // An older toolhost kept one file there.
    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
        let _ = std::fs::remove_file(&path);
    }
    let kept =
        toolhost_base::reserve::Reserve::keep(&path, s.state_reserve_bytes, s.state_reserve_files);
    match kept {
        Ok(held) if held.bytes < s.state_reserve_bytes || held.files < s.state_reserve_files => {
            tracing::warn!(
                held_mib = held.bytes >> 20,
                wanted_mib = s.state_reserve_bytes >> 20,
                held_files = held.files,
                wanted_files = s.state_reserve_files,
                "the disk holding the state directory is nearly full: the reserve for the daemon's own state is short"
            )
        }
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
    /// What `/metrics` reads.
    metrics: Arc<crate::metrics::Sources>,
    shutdown: CancellationToken,
}

impl Daemon {
    /// Builds the parts: the catalog store, the lifecycle (which loads and
    /// starts the plugins), the managed catalog (its fence and last-good
    /// snapshot restored), the pipeline and the hub over it, the tokens,
    /// the admin service and the fleet link, each handed what it serves.
    fn wire(s: &Settings) -> Result<Self> {
        keep_state_reserve(s);
        let store = Arc::new(Store::new(s.prefix.clone()));
        let plugins = Arc::new(Plugins::new());
        let lifecycle = open_lifecycle(s, &store, &plugins)?;
        let managed = if s.managed {
            tracing::info!("managed mode: the catalog comes from the backend's pushes");
            let fence_file = s.state_dir.join("catalog-fence.json");
            Some(Arc::new(Managed::open(
                Arc::clone(&store),
                lifecycle.installed(),
                Some(fence_file),
            )?))
        } else {
            None
        };
        let pipeline = Arc::new(pipeline(s, &store, &plugins)?);
        let hub = hub(s, &pipeline);
        let tokens = Arc::new(TokenTable::new());
        for (secret, b) in &s.tokens {
            tokens.bind(secret, binding(b));
        }
        if s.http.as_ref().is_some_and(|h| h.options.oauth.is_none()) && tokens.is_empty() {
            tracing::warn!(
                "HTTP is on but no [[http.tokens]] or [http.oauth] are configured: every request will get 401"
            );
        }
        let shutdown = CancellationToken::new();
        let link = s.fleet.as_ref().map(|f| {
            Arc::new(toolhost_fleet::FleetLink::new(
                &f.url,
                &f.keys.bucket,
                &f.daemon,
            ))
        });
        if let (Some(fleet), Some(link), Some(managed)) = (&s.fleet, &link, &managed) {
            follow_fleet(fleet, link, managed, &tokens, &lifecycle, &shutdown);
        }
        let link = link.map(|l| l as Arc<dyn LinkStatus>);
        let sessions = {
            let hub = Arc::clone(&hub);
            Arc::new(move || hub.listener_count())
        };
        let admin = AdminService::new(Arc::new(AdminState {
            store: Arc::clone(&store),
            managed,
            plugins: Arc::clone(&plugins),
            lifecycle: Arc::clone(&lifecycle),
            tokens: Arc::clone(&tokens),
            tasks: Arc::clone(hub.tasks()),
            policy: Arc::clone(&s.policy),
            sessions,
            fleet: link.clone(),
        }));
        let metrics = Arc::new(crate::metrics::Sources {
            hub: Arc::clone(&hub),
            pipeline,
            policy: Arc::clone(&s.policy),
            plugins,
            fleet: link,
        });
        Ok(Self {
            lifecycle,
            hub,
            tokens,
            admin,
            metrics,
            shutdown,
        })
    }

    /// Serves on every configured listener until a signal (or, on stdio,
    /// the client leaving), then stops the plugins.
    async fn serve(self, s: &Settings, fd_limit: u64) -> Result<()> {
        tokio::spawn(Arc::clone(&self.hub).run_notifier());
        tokio::spawn(shutdown_signal(self.shutdown.clone()));
        // On every transport: a catalog pushed over the admin API frees
        // as much on stdio as over HTTP.
        tokio::spawn(crate::memory::trim_after_bursts(
            self.shutdown.clone(),
            Arc::clone(self.metrics.pipeline.store()),
        ));
        self.serve_admin(s).await?;
        let http_task = match &s.http {
            Some(h) => Some(self.serve_http(s, h, fd_limit).await?),
            None => None,
        };
        if let Some(crate::dev::DevSession {
            dir, id: Some(id), ..
        }) = &s.dev
        {
            tokio::spawn(crate::dev_watch::watch(
                dir.clone(),
                id.clone(),
                Arc::clone(&self.lifecycle),
                self.shutdown.clone(),
            ));
        }
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
    async fn serve_admin(&self, s: &Settings) -> Result<()> {
        let limits = s.admin.limits;
        let (admin, stop, socket) = (
            self.admin.clone(),
            self.shutdown.clone(),
            s.admin.socket.clone(),
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
        if let Some((addr, token)) = s.admin.tcp.clone() {
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
        let options = HttpOptions {
            shutdown: self.shutdown.child_token(),
            metrics: Some({
                let sources = Arc::clone(&self.metrics);
                Arc::new(move || crate::metrics::render(&sources))
            }),
            ..h.options.clone()
        };
        let configured = h.limits.max_connections;
        let reserved = s.reserved_fds;
        // Both admin listeners may be full at once.
        let max_connections = fit_connections(
            configured,
            fd_limit,
            reserved,
            s.admin.limits.max_connections * 2,
        );
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
            ..h.limits
        };
        let app = http_router(Arc::clone(&self.hub), Arc::clone(&self.tokens), options);
        // A line for people and scripts (tests wait for it).
        errln!("toolhost: serving MCP on http://{local}/mcp");
        if let Some(dev) = &s.dev {
            dev.banner(local, &s.admin.socket, &s.state_dir);
        }
        Ok(tokio::spawn(serve_http(
            listener,
            app,
            limits,
            self.shutdown.clone(),
        )))
    }
}

/// The lifecycle, loading and starting the installed plugins; a plugin
/// that cannot be loaded is said, and the others start.
fn open_lifecycle(
    s: &Settings,
    store: &Arc<Store>,
    plugins: &Arc<Plugins>,
) -> Result<Arc<Lifecycle>> {
    let (lifecycle, problems) = Lifecycle::open(
        LifecycleConfig {
            prefix: s.prefix.clone(),
            state_dir: s.state_dir.clone(),
            static_paths: s.plugin_paths.clone(),
            supervisor: s.supervisor.clone(),
            managed: s.managed,
            // A task is a call: an upgrade waits for it as for any.
            drain_timeout: s.limits.max_timeout.max(s.tasks.max_lifetime),
            archive_limits: s.archive,
            trust: s.trust.clone(),
            contracts: s.contracts.clone(),
            operators: s.operators.clone(),
            sandbox: s.sandbox.clone(),
            registry: s.registry.clone(),
        },
        Arc::clone(store),
        Arc::clone(plugins),
    )?;
    for p in &problems {
        tracing::error!("plugin problem: {p}");
    }
    Ok(lifecycle)
}

/// The hub over `pipeline`, with the session limits, what agents are
/// shown and the task bounds the settings give.
fn hub(s: &Settings, pipeline: &Arc<Pipeline>) -> Arc<Hub> {
    let hub = Hub::new(Arc::clone(pipeline));
    hub.set_max_sessions(s.max_sessions.0);
    hub.set_max_sessions_per_token(s.max_sessions.1);
    hub.set_agent_view(s.agent_view.clone());
    hub.tasks().set_limits(s.tasks);
    hub
}

/// What a fleet status entry says of each installed plugin.
/// Follows the group's keys in the background until `shutdown`.
fn follow_fleet(
    fleet: &toolhost_fleet::FleetConfig,
    link: &Arc<toolhost_fleet::FleetLink>,
    managed: &Arc<Managed>,
    tokens: &Arc<TokenTable>,
    lifecycle: &Arc<Lifecycle>,
    shutdown: &CancellationToken,
) {
    let parts = toolhost_fleet::FleetParts {
        catalog: Arc::clone(managed),
        tokens: Arc::clone(tokens),
        link: Arc::clone(link),
        plugins: plugin_summary(lifecycle),
        placer: Some(placer(lifecycle)),
        wanted: {
            let lifecycle = Arc::clone(lifecycle);
            Arc::new(move || {
                let placed = lifecycle.placement_status().plugins;
                lifecycle
                    .ids()
                    .into_iter()
                    .chain(
                        placed
                            .into_iter()
                            .filter(|p| p.phase != "removed")
                            .map(|p| p.id),
                    )
                    .collect()
            })
        },
    };
    tokio::spawn(toolhost_fleet::run(
        fleet.clone(),
        parts,
        shutdown.child_token(),
    ));
}

/// The fleet's way to the lifecycle's placement: a placement from the
/// wire checked, then converged to; one that is not valid is said in the
/// status the placer reports.
fn placer(lifecycle: &Arc<Lifecycle>) -> toolhost_fleet::Placer {
    let (apply_to, status_of) = (Arc::clone(lifecycle), Arc::clone(lifecycle));
    let refused: Arc<std::sync::Mutex<String>> = Arc::default();
    let said = Arc::clone(&refused);
    toolhost_fleet::Placer {
        apply: Arc::new(move |p| {
            let (lifecycle, refused) = (Arc::clone(&apply_to), Arc::clone(&refused));
            Box::pin(async move {
                let why = match toolhost_admin::placement::from_proto(p) {
                    Ok(placement) => lifecycle.apply_placement(placement).await.refused,
                    Err(why) => why,
                };
                *refused
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
            })
        }),
        status: Arc::new(move || {
            let mut s = toolhost_admin::placement::to_proto(status_of.placement_status());
            let why = said
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if !why.is_empty() {
                s.refused = why;
            }
            s
        }),
    }
}

fn plugin_summary(
    lifecycle: &Arc<Lifecycle>,
) -> Arc<dyn Fn() -> Vec<(String, String)> + Send + Sync> {
    let lifecycle = Arc::clone(lifecycle);
    Arc::new(move || {
        // Each heartbeat: standings, not every plugin's full record.
        lifecycle
            .standings()
            .into_iter()
            .map(|p| {
                let how = if !p.enabled {
                    "disabled"
                } else if p.needs_config {
                    "needs_config"
                } else {
                    "enabled"
                };
                (p.id, how.to_owned())
            })
            .collect()
    })
}

/// The call pipeline, with the backend's Authorizer when configured.
fn pipeline(s: &Settings, store: &Arc<Store>, plugins: &Arc<Plugins>) -> Result<Pipeline> {
    let mut pipeline = Pipeline::new(Arc::clone(store), Arc::clone(plugins) as _, s.limits)
        .with_policy(Arc::clone(&s.policy) as _);
    if let Some((addr, timeout)) = &s.authorize {
        let address = AuthorizerAddress::parse(addr)?;
        let authorizer = Authorizer::new(&address, *timeout)?
            .with_argument_fields(s.authorize_arguments.clone())
            .map_err(|e| anyhow::anyhow!("[backend.authorize_arguments] {e}"))?;
        pipeline = pipeline.with_authorizer(authorizer);
        tracing::info!(authorizer = %addr, "every call is also authorized by the backend");
    }
    if let Some(gate) = s.http.as_ref().and_then(|h| h.options.oauth.clone()) {
        // Plugins granted `credentials` get tokens exchanged from their
        // callers' (the gate keeps each caller's latest token).
        pipeline = pipeline.with_credentials(gate as _);
    }
    Ok(pipeline)
}
