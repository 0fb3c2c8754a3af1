//! Starting one plugin process and stopping it again.

use crate::handshake::{self, HandshakeError};
use crate::supervisor::PluginSpec;
use crate::{
    DATA_DIR_KEY, HEALTH_SERVICE, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, PROTOCOL_VERSIONS_KEY,
};
use hyper_util::rt::TokioIo;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

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
    /// Exited before printing the handshake line.
    #[error("exited before its handshake line ({0})")]
    ExitedEarly(String),
    /// No handshake line within the startup timeout.
    #[error("printed no handshake line within {0:?}")]
    HandshakeTimeout(Duration),
    /// The handshake line was refused.
    #[error("bad handshake: {0}")]
    Handshake(#[from] HandshakeError),
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
}

/// A started, healthy plugin process.
pub(crate) struct Running {
    pub child: Child,
    pub pid: u32,
    pub channel: Channel,
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait failed: {e}"),
    }
}

/// Builds the command: own process group, parent-death signal, cookie.
fn command(spec: &PluginSpec) -> Command {
    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .envs(&spec.env)
        .env(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
        .env(PROTOCOL_VERSIONS_KEY, "1")
        .env(DATA_DIR_KEY, &spec.data_dir)
        .current_dir(&spec.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    set_parent_death_signal(&mut cmd);
    cmd
}

/// Linux: the kernel sends SIGKILL to the plugin when the thread that forked
/// it dies, so even `kill -9 toolhost` leaves no plugin behind. Plugins are
/// spawned from Tokio worker threads, which live as long as the runtime.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed; prctl(PR_SET_PDEATHSIG) is a
    // single system call that allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_: &mut Command) {}

/// Starts the plugin and waits until it is healthy, or fails having killed
/// and reaped whatever it started.
pub(crate) async fn start(spec: &PluginSpec) -> Result<Running, StartError> {
    std::fs::create_dir_all(&spec.data_dir).map_err(|source| StartError::DataDir {
        dir: spec.data_dir.display().to_string(),
        source,
    })?;
    let deadline = Instant::now() + spec.startup_timeout;
    let mut child = command(spec).spawn().map_err(|source| StartError::Spawn {
        command: spec.command.display().to_string(),
        source,
    })?;
    let pid = child.id().unwrap_or(0);
    match handshake_and_connect(spec, &mut child, deadline).await {
        Ok(channel) => Ok(Running {
            child,
            pid,
            channel,
        }),
        Err(e) => {
            stop(&mut child, pid, Duration::ZERO).await;
            Err(e)
        }
    }
}

async fn handshake_and_connect(
    spec: &PluginSpec,
    child: &mut Child,
    deadline: Instant,
) -> Result<Channel, StartError> {
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(StartError::ExitedEarly("no stdout/stderr pipes".to_owned()));
    };
    tokio::spawn(crate::logs::forward(spec.id.clone(), "stderr", stderr));
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
    let hs = handshake::parse(&line)?;
    tokio::spawn(crate::logs::forward(spec.id.clone(), "stdout", stdout));

    let channel = tokio::select! {
        r = connect(&hs.socket, deadline) => r?,
        status = child.wait() => return Err(StartError::ExitedDuringStart(describe(status))),
    };
    tokio::select! {
        r = wait_healthy(channel.clone(), deadline, spec.startup_timeout) => r?,
        status = child.wait() => return Err(StartError::ExitedDuringStart(describe(status))),
    }
    Ok(channel)
}

/// A gRPC channel over the Unix socket. The URI is required by the API and
/// ignored by the connector.
pub(crate) async fn connect(
    socket: &std::path::Path,
    deadline: Instant,
) -> Result<Channel, StartError> {
    let path = socket.to_path_buf();
    let endpoint =
        Endpoint::from_static("http://plugin.invalid").connect_timeout(Duration::from_secs(2));
    let mut pause = Duration::from_millis(2);
    loop {
        let p = path.clone();
        let attempt = endpoint
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let p = p.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
                }
            }))
            .await;
        match attempt {
            Ok(ch) => return Ok(ch),
            Err(e) if Instant::now() + pause >= deadline => {
                return Err(StartError::Connect {
                    socket: path.display().to_string(),
                    detail: e.to_string(),
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

/// One health probe, bounded by `timeout`.
pub(crate) async fn probe(channel: &Channel, timeout: Duration) -> bool {
    let mut health = HealthClient::new(channel.clone());
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: HEALTH_SERVICE.to_owned(),
    });
    req.set_timeout(timeout);
    matches!(
        tokio::time::timeout(timeout, health.check(req)).await,
        Ok(Ok(r)) if r.get_ref().status() == ServingStatus::Serving
    )
}

/// Stops the plugin's process group: SIGTERM, up to `grace` for it to exit,
/// then SIGKILL; the child is always reaped. The group is killed even when
/// the leader has already exited, so helpers it started go too.
pub(crate) async fn stop(child: &mut Child, pid: u32, grace: Duration) {
    let group = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    let signal_group = |sig| {
        if let Some(g) = group {
            // ESRCH (the group is gone) is the outcome we want anyway.
            let _ = rustix::process::kill_process_group(g, sig);
        }
    };
    if !grace.is_zero() {
        signal_group(rustix::process::Signal::TERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            signal_group(rustix::process::Signal::KILL);
            return;
        }
    }
    signal_group(rustix::process::Signal::KILL);
    let _ = child.kill().await;
    let _ = child.wait().await;
}
