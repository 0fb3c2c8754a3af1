//! Starting one plugin process and stopping it again.

use crate::leaders::{Leader, Leaders};
use crate::sockets::SocketDir;
use crate::spec::PluginSpec;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolhost_proto::contract::handshake::{self, HandshakeError};
use toolhost_proto::contract::{
    CALL_TOKEN_KEY, CONFIG_FILE_KEY, DATA_DIR_KEY, HEALTH_SERVICE, MAGIC_COOKIE_KEY,
    MAGIC_COOKIE_VALUE, PROTOCOL_VERSIONS_KEY, SOCKET_DIR_KEY,
};
use toolhost_sandbox::{Jail, Own, Prepared};

/// Why a plugin did not become ready. Every message names what went wrong;
/// the supervisor adds the plugin id.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The command could not be run.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory could not be created.
    #[error("cannot create the data directory {dir}: {source}")]
    DataDir {
        /// The directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// The account it runs as (`[sandbox] user`) cannot be given its
    /// directories, or cannot reach its command.
    #[error("{0}")]
    HandOver(#[from] toolhost_sandbox::account::HandOverError),
    /// Exited before printing the handshake line.
    #[error("exited before its handshake line ({0})")]
    ExitedEarly(String),
    /// No handshake line within the startup timeout.
    #[error("printed no handshake line within {0:?}")]
    HandshakeTimeout(Duration),
    /// The handshake line was refused.
    #[error(
        "its first line on stdout is not a handshake ({source}): stdout is the handshake channel, so print nothing there before it and log to stderr; the line is `1|{protocol}|unix|<socket path>|grpc` for the protocol {protocol} its manifest declares"
    )]
    Handshake {
        /// What is wrong with the line.
        source: HandshakeError,
        /// The protocol the manifest declares (and toolhost offered).
        protocol: u32,
    },
    /// The handshake named a protocol version other than the one offered
    /// (the manifest's `runtime.protocol`).
    #[error(
        "its handshake answers plugin protocol {answered}, but its manifest declares protocol {offered} \
         (`protocol` under [runtime]) and only that was offered"
    )]
    ProtocolMismatch {
        /// What toolhost offered.
        offered: u32,
        /// What the plugin answered.
        answered: u32,
    },
    /// The socket could not be connected to.
    #[error("cannot connect to its socket {socket}: {detail}")]
    Connect {
        /// The socket.
        socket: String,
        /// Why.
        detail: String,
    },
    /// Health never answered SERVING in time.
    #[error(
        "did not report healthy within the startup timeout of {timeout:?} (last answer: {last})"
    )]
    NeverHealthy {
        /// The startup timeout.
        timeout: Duration,
        /// The last health answer or error.
        last: String,
    },
    /// Exited during start-up after the handshake.
    #[error("exited during start-up ({0})")]
    ExitedDuringStart(String),
    /// The sandbox could not be prepared (a granted path cannot be
    /// opened, the cgroup cannot be made).
    #[error("cannot prepare its sandbox: {0}")]
    Sandbox(std::io::Error),
    /// Its socket directory could not be created.
    #[error("cannot create its socket directory: {0}")]
    SocketDir(std::io::Error),
    /// The handshake named a socket outside the directory it was given.
    #[error(
        "its handshake names the socket {socket}, outside the directory toolhost gave it ({dir}); \
         create the socket in $KANDEV_PLUGIN_SOCKET_DIR (or beneath $TMPDIR)"
    )]
    ForeignSocket {
        /// The socket it named (printable characters only).
        socket: String,
        /// The directory it was given.
        dir: String,
    },
}

impl StartError {
    /// Whether the start failed for lack of a resource (descriptors,
    /// processes, memory) rather than because of the plugin: such a start
    /// is retried once the pressure ends, and never makes a plugin
    /// `failed`.
    #[must_use]
    pub fn is_resource_shortage(&self) -> bool {
        let errno = match self {
            Self::Spawn { source, .. } | Self::DataDir { source, .. } => source.raw_os_error(),
            Self::SocketDir(source) | Self::Sandbox(source) => source.raw_os_error(),
            Self::Connect { detail, .. } => {
                return detail.contains("Too many open files");
            }
            _ => None,
        };
        // EMFILE, ENFILE, EAGAIN (fork: too many processes), ENOMEM.
        matches!(errno, Some(24 | 23 | 11 | 12))
    }
}

impl Failed {
    /// Whether the sandbox may be why: the command could not be run for
    /// want of permission (or exited 126, "cannot execute"), or what it
    /// wrote on stderr says an access was denied. Only then does the
    /// message point at the sandbox; a plugin that fails for its own
    /// reasons (a missing module) is not sent looking for a grant.
    #[must_use]
    pub fn access_denied(&self) -> bool {
        const DENIED: [&str; 6] = [
            "Permission denied",
            "PermissionError",
            "EACCES",
            "Operation not permitted",
            "EPERM",
            "os error 13",
        ];
        let exited_126 = matches!(
            &self.error,
            StartError::ExitedEarly(s) | StartError::ExitedDuringStart(s) if s.contains("exit status: 126")
        );
        matches!(&self.error, StartError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
            || exited_126
            || self
                .stderr
                .iter()
                .any(|l| DENIED.iter().any(|d| l.contains(d)))
    }
}

/// A started, healthy plugin process.
pub(crate) struct Running {
    pub child: Child,
    pub pid: u32,
    /// The channel the start checked health on; taken by the process's
    /// client (which drops it for protocol 1, whose calls and probes share
    /// one connection of their own).
    pub channel: Option<Channel>,
    /// The socket it serves on (protocol 1's calls connect again).
    pub socket: std::path::PathBuf,
    /// What every call to this process presents (`contract::CALL_TOKEN_KEY`).
    pub call_token: String,
    /// Removed when the process is done with (this is dropped).
    pub _sockets: SocketDir,
    /// Its pids cgroup, if the sandbox made one: every process left in it
    /// is killed when this is dropped.
    pub jail: Option<Jail>,
    /// Answers the process's `listen()` calls while it lives.
    _listen: Option<toolhost_sandbox::listen::ListenSupervisor>,
    /// Its data directory's quota, as applied at this start.
    pub disk: Option<toolhost_sandbox::disk::Quota>,
    /// The last lines it wrote on stderr, for the message when it exits.
    pub stderr: crate::logs::Tail,
    /// Its place among the daemon's plugin processes, until dropped.
    pub _leader: Leader,
}

/// Variables of the daemon's environment every plugin gets; everything
/// else must be named in the configuration (`[plugin.<id>] pass_env`).
const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait failed: {e}"),
    }
}

/// Builds the command: a clean environment, own process group,
/// parent-death signal, no inherited descriptors but 0, 1 and 2.
///
/// The environment is built, not inherited: the daemon's may hold cloud
/// credentials and tokens. In order, later ones winning: [`BASE_ENV`], the
/// variables the operator passes to this plugin, the manifest's
/// `runtime.env`, then the protocol's own (cookie, versions, data and
/// socket directories, `TMPDIR`), which nothing may override.
fn command(spec: &PluginSpec, sockets: &SocketDir, temp: &Path, sandbox: &Prepared) -> Command {
    let mut cmd = Command::new(&spec.command);
    cmd.env_clear();
    for key in BASE_ENV
        .iter()
        .copied()
        .chain(spec.pass_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    if std::env::var_os("PATH").is_none() {
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    }
    cmd.args(&spec.args)
        .envs(&spec.env)
        .env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
        .env(PROTOCOL_VERSIONS_KEY, spec.protocol.to_string())
        .env(DATA_DIR_KEY, &spec.data_dir)
        .env(SOCKET_DIR_KEY, sockets.path())
        .env("TMPDIR", temp)
        .current_dir(&spec.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if spec.config.is_some() {
        cmd.env(CONFIG_FILE_KEY, sockets.path().join(CONFIG_FILE));
    }
    cmd.env(CALL_TOKEN_KEY, sockets.path().join(CALL_TOKEN_FILE));
    // In the child between fork and exec: the parent-death signal (so even
    // `kill -9 toolhost` leaves no plugin behind), no inherited descriptor
    // but 0, 1 and 2, then the sandbox.
    sandbox.confine(cmd.as_std_mut());
    cmd
}

/// The configuration file's name in the socket directory.
const CONFIG_FILE: &str = "config.json";

/// The call token's file name in the socket directory.
const CALL_TOKEN_FILE: &str = "call-token";

/// Writes the configuration for the plugin to read at start.
fn write_config(sockets: &SocketDir, config: &crate::spec::Delivered) -> std::io::Result<()> {
    write_private(&sockets.path().join(CONFIG_FILE), config.bytes())
}

/// Writes a file for the plugin alone: 0600, created new (never through a
/// link), in the 0700 socket directory that only this process is told
/// about.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    toolhost_base::files::create_private(path, bytes)
}

/// A start that failed: why, and the last lines the process wrote on
/// stderr (its own words: a traceback, a missing module).
#[derive(Debug)]
pub(crate) struct Failed {
    pub error: StartError,
    pub stderr: Vec<String>,
}

impl From<StartError> for Failed {
    fn from(error: StartError) -> Self {
        Self {
            error,
            stderr: Vec::new(),
        }
    }
}

/// How long a failed start waits for the process's stderr to be read to
/// its end, so the error has its last words.
pub(crate) const LAST_WORDS: Duration = Duration::from_millis(300);

/// Starts the plugin and waits until it is healthy, or fails having killed
/// and reaped whatever it started.
///
/// Kept whole on purpose: every step from directories to healthy has its own
/// cleanup on failure, and one function keeps each failure next to the kill and
/// reap that follow it.
pub(crate) async fn start(spec: &PluginSpec, leaders: &Leaders) -> Result<Running, Failed> {
    // Whatever starts plugins (the daemon, `check --start`, the harness)
    // keeps what a plugin leaves behind when it dies: it comes here, not
    // to init, and is stopped too (`toolhost_sandbox::tree`).
    static SUBREAPER: std::sync::Once = std::sync::Once::new();
    SUBREAPER.call_once(|| {
        if let Err(e) = toolhost_sandbox::tree::become_subreaper() {
            tracing::warn!("cannot keep what plugins leave behind: {e}");
        }
    });
    data_dir(&spec.data_dir).map_err(|source| StartError::DataDir {
        dir: spec.data_dir.display().to_string(),
        source,
    })?;
    // Before the hand-over: a quota is on the directory, whoever owns it.
    let disk = spec.sandbox.disk_bytes.map(|bytes| {
        let files = spec.sandbox.disk_files.unwrap_or(u64::MAX);
        toolhost_sandbox::disk::Quota::apply(
            &spec.data_dir,
            bytes,
            files,
            spec.disk_image.as_deref(),
        )
    });
    let temp = crate::temp::temp_dir(&spec.data_dir);
    let sockets = SocketDir::create().map_err(StartError::SocketDir)?;
    if let Some(config) = &spec.config {
        write_config(&sockets, config).map_err(StartError::SocketDir)?;
    }
    let call_token = toolhost_base::ids::unguessable_id().map_err(StartError::SocketDir)?;
    write_private(&sockets.path().join(CALL_TOKEN_FILE), call_token.as_bytes())
        .map_err(StartError::SocketDir)?;
    if spec.sandbox.run_as.is_none() {
        toolhost_sandbox::account::reclaim(&spec.data_dir).map_err(|source| {
            StartError::DataDir {
                dir: spec.data_dir.display().to_string(),
                source,
            }
        })?;
    }
    if let Some(user) = &spec.sandbox.run_as {
        // What toolhost made above the plugin's places: the run directory,
        // the data root, the state directory, and (for an installed
        // plugin) the directories between the state directory and it.
        let state = spec.data_dir.parent().and_then(std::path::Path::parent);
        let mut made: Vec<&std::path::Path> = [sockets.path().parent(), spec.data_dir.parent()]
            .into_iter()
            .flatten()
            .chain(state)
            .collect();
        if let Some(state) = state {
            made.extend(
                spec.dir
                    .ancestors()
                    .skip(1)
                    .take_while(|d| d.starts_with(state) && *d != state),
            );
        }
        toolhost_sandbox::account::hand_over(
            user,
            &spec.data_dir,
            sockets.path(),
            &made,
            &[&spec.command, &spec.dir.join("plugin.toml")],
        )
        .map_err(StartError::from)?;
    }
    let sandbox = Prepared::new(
        &spec.sandbox,
        &Own {
            dir: &spec.dir,
            command: &spec.command,
            data_dir: &spec.data_dir,
            data_writable: spec.data_writable,
            socket_dir: sockets.path(),
            temp_dir: &temp,
        },
    )
    .map_err(StartError::Sandbox)?;
    let deadline = Instant::now() + spec.startup_timeout;
    // On the daemon's spawner thread, never a blocking-pool one: the
    // child's parent-death signal follows the thread that forked it, and a
    // pool thread exits when idle, killing it (`spawner.rs`).
    let spawned =
        crate::spawner::spawn(command(spec, &sockets, &temp, &sandbox), leaders.clone()).await;
    let confinement = sandbox.into_confinement();
    let (mut child, pid, leader) = spawned.map_err(|source| StartError::Spawn {
        command: spec.command.display().to_string(),
        source,
    })?;
    let stderr = crate::logs::Tail::default();
    match handshake_and_connect(spec, &sockets, &temp, &mut child, deadline, &stderr).await {
        Ok((channel, socket)) => Ok(Running {
            child,
            pid,
            channel: Some(channel),
            socket,
            call_token,
            _sockets: sockets,
            jail: confinement.jail,
            _listen: confinement.listen,
            disk,
            stderr,
            _leader: leader,
        }),
        Err(error) => {
            stop(&mut child, pid, Duration::ZERO, true).await;
            Err(Failed {
                error,
                stderr: stderr.last_lines(LAST_WORDS).await,
            })
        }
    }
}

/// The plugin's data directory, and the data root above it: private
/// whatever the umask (they hold what agents sent), by the one rule of
/// `toolhost_base::files`, which never takes away the search bit the
/// `[sandbox] user` hand-over gave the root: a start of one plugin must
/// not lock the others' account out of their data.
fn data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    if let Some(root) = dir.parent() {
        toolhost_base::files::private_dir(root)?;
    }
    toolhost_base::files::private_dir(dir)
}

async fn handshake_and_connect(
    spec: &PluginSpec,
    sockets: &SocketDir,
    temp: &Path,
    child: &mut Child,
    deadline: Instant,
    tail: &crate::logs::Tail,
) -> Result<(Channel, std::path::PathBuf), StartError> {
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(StartError::ExitedEarly("no stdout/stderr pipes".to_owned()));
    };
    tokio::spawn(crate::logs::forward(
        spec.id.clone(),
        "stderr",
        stderr,
        Some(tail.clone()),
    ));
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    // A handshake line is short; a plugin that floods stdout without a
    // newline is cut off here rather than buffered.
    let read = async {
        let mut limited = (&mut stdout).take(4096);
        limited.read_line(&mut line).await
    };
    let got = tokio::select! {
        r = tokio::time::timeout_at(deadline, read) => r,
        status = child.wait() => return Err(StartError::ExitedEarly(describe(status))),
    };
    match got {
        Err(_) => return Err(StartError::HandshakeTimeout(spec.startup_timeout)),
        Ok(Ok(0)) => {
            let status = child.wait().await;
            return Err(StartError::ExitedEarly(describe(status)));
        }
        Ok(Err(e)) => return Err(StartError::ExitedEarly(format!("stdout failed: {e}"))),
        Ok(Ok(_)) => {}
    }
    let hs = handshake::parse(&line).map_err(|source| StartError::Handshake {
        source,
        protocol: spec.protocol,
    })?;
    if hs.protocol != spec.protocol {
        return Err(StartError::ProtocolMismatch {
            offered: spec.protocol,
            answered: hs.protocol,
        });
    }
    // Pinned first, then checked: the path resolved once is the one
    // checked and the one every connection must still reach (resolving it
    // again for the pin could follow a symlink swapped in after the check).
    let pinned = crate::sockets::pin(&hs.socket)
        .filter(|p| sockets.contains(p) || crate::temp::within(temp, p));
    let Some(socket) = pinned else {
        return Err(StartError::ForeignSocket {
            socket: crate::logs::printable(&hs.socket.display().to_string(), 256),
            dir: sockets.path().display().to_string(),
        });
    };
    tokio::spawn(crate::logs::forward(
        spec.id.clone(),
        "stdout",
        stdout,
        None,
    ));

    let channel = tokio::select! {
        r = connect(&socket, deadline) => r?,
        status = child.wait() => return Err(StartError::ExitedDuringStart(describe(status))),
    };
    tokio::select! {
        r = wait_healthy(channel.clone(), deadline, spec.startup_timeout) => r?,
        status = child.wait() => return Err(StartError::ExitedDuringStart(describe(status))),
    }
    Ok((channel, socket))
}

/// A gRPC channel over the Unix socket. The URI is required by the API and
/// ignored by the connector.
pub(crate) async fn connect(
    socket: &std::path::Path,
    deadline: Instant,
) -> Result<Channel, StartError> {
    let path = socket.to_path_buf();
    // A call dropped before its end (cancelled, past its deadline) resets
    // its HTTP/2 stream; h2 remembers only 10 such streams by default, and
    // counts every late frame for a forgotten one toward a limit of 1024
    // per connection, past which it tears the connection down. Remember
    // enough that cancellations at any realistic rate never get there.
    let endpoint = Endpoint::from_static("http://plugin.invalid")
        .connect_timeout(Duration::from_secs(2))
        .http2_max_concurrent_reset_streams(4096);
    let mut pause = Duration::from_millis(2);
    loop {
        // Each (re)connection checks that the path still leads to the
        // pinned socket (a symlink could lead to another plugin's).
        let pinned = path.clone();
        let attempt = toolhost_proto::contract::connect_unix_with(endpoint.clone(), move || {
            let pinned = pinned.clone();
            async move { crate::sockets::connect_pinned(&pinned).await }
        })
        .await
        .map_err(|e| {
            // tonic's own message is "transport error"; the cause is below.
            let mut detail = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                detail = format!("{detail}: {s}");
                source = s.source();
            }
            detail
        });
        match attempt {
            Ok(ch) => return Ok(ch),
            Err(e) if Instant::now() + pause >= deadline => {
                return Err(StartError::Connect {
                    socket: path.display().to_string(),
                    detail: e,
                });
            }
            // The socket may appear a moment after the line is printed.
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
        }
    }
}

async fn wait_healthy(
    channel: Channel,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), StartError> {
    let mut health = HealthClient::new(channel);
    let mut pause = Duration::from_millis(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut req = tonic::Request::new(HealthCheckRequest {
            service: HEALTH_SERVICE.to_owned(),
        });
        req.set_timeout(left.max(Duration::from_millis(1)));
        let last = match tokio::time::timeout(left, health.check(req)).await {
            Ok(Ok(r)) if r.get_ref().status() == ServingStatus::Serving => return Ok(()),
            Ok(Ok(r)) => format!("{:?}", r.get_ref().status()),
            Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
            Err(_) => "timed out".to_owned(),
        };
        if Instant::now() + pause >= deadline {
            return Err(StartError::NeverHealthy { timeout, last });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Stops a running plugin ([`stop`]), then whatever is left in its cgroup:
/// processes that left the group, the remains of a fork bomb. Waits (up to
/// a second) until the cgroup is empty.
pub(crate) async fn stop_running(running: &mut Running, grace: Duration) {
    // A cgroup holds every process of the plugin, however detached: no
    // walk of the process tree is needed where there is one.
    stop(
        &mut running.child,
        running.pid,
        grace,
        running.jail.is_none(),
    )
    .await;
    if let Some(jail) = &running.jail {
        // What is left outlived its leader: the daemon is its parent now
        // (its subreaper), and reaps it once killed.
        let left = jail.pids();
        let deadline = Instant::now() + Duration::from_secs(1);
        while !jail.is_empty() && Instant::now() < deadline {
            jail.kill_all();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !left.is_empty() {
            let _ = tokio::task::spawn_blocking(move || crate::leaders::sweep_strays(Some(&left)))
                .await;
        }
    }
}

/// Stops the plugin's process group: SIGTERM, up to `grace` for it to exit,
/// then SIGKILL; the child is always reaped. The group is killed even when
/// the leader has already exited, so helpers it started go too. With
/// `walk` (no cgroup holds the plugin), so is everything below the leader,
/// whatever group or session it moved to (`toolhost_sandbox::tree`: the
/// leader is their subreaper), and what a leader that exited first left
/// behind, which came to the daemon as strays, is swept.
pub(crate) async fn stop(child: &mut Child, pid: u32, grace: Duration, walk: bool) {
    let group = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    let signal_group = |sig| {
        if let Some(g) = group {
            // ESRCH (the group is gone) is the outcome we want anyway.
            let _ = rustix::process::kill_process_group(g, sig);
        }
    };
    // Walks of /proc: off the runtime's threads.
    let sweep = || async {
        if walk {
            let _ = tokio::task::spawn_blocking(|| crate::leaders::sweep_strays(None)).await;
        }
    };
    if !grace.is_zero() {
        signal_group(rustix::process::Signal::TERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            signal_group(rustix::process::Signal::KILL);
            sweep().await;
            return;
        }
    }
    if walk {
        // Below a live leader: frozen, then killed.
        let _ =
            tokio::task::spawn_blocking(move || toolhost_sandbox::tree::kill_tree(pid, 8)).await;
    }
    signal_group(rustix::process::Signal::KILL);
    let _ = child.kill().await;
    let _ = child.wait().await;
    sweep().await;
}
