//! One task per plugin: start, watch, restart with backoff, give up, stop.

use crate::client::PluginClient;
use crate::leaders::Leaders;
use crate::process::{self, LAST_WORDS, Running};
use crate::spec::PluginSpec;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Failures in a row (failed starts and crashes since it was last ready)
/// from which a plugin is said to be in a crash loop.
pub const CRASH_LOOP: u32 = 3;

/// Supervision knobs. The defaults are docs/PROTOCOL.md §5's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorConfig {
    /// Time between health probes of a ready plugin.
    pub health_interval: Duration,
    /// How long one probe may take.
    pub health_timeout: Duration,
    /// Consecutive failed probes that count as a crash.
    pub health_failures: u32,
    /// Upper bound of the first restart delay (full jitter: the delay is
    /// uniform in zero to the bound).
    pub backoff_first: Duration,
    /// Largest restart delay bound.
    pub backoff_max: Duration,
    /// Ready this long, and the backoff and restart history reset.
    pub healthy_reset: Duration,
    /// More restarts than this within `restart_window` and the plugin is
    /// failed until an operator restarts it.
    pub max_restarts: u32,
    /// The window for `max_restarts`.
    pub restart_window: Duration,
    /// Between SIGTERM and SIGKILL when stopping.
    pub stop_grace: Duration,
    /// Keep the shapes the code states for its tools (`Describe`): for
    /// `check --start` and `schema sync`, never for a serving daemon,
    /// which would hold every schema twice.
    pub keep_shapes: bool,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            health_interval: Duration::from_secs(5),
            health_timeout: Duration::from_secs(2),
            health_failures: 3,
            backoff_first: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            healthy_reset: Duration::from_secs(60),
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            stop_grace: Duration::from_secs(5),
            keep_shapes: false,
        }
    }
}

/// Where a plugin is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its process is starting (handshake, health).
    Starting,
    /// Serving calls.
    Ready,
    /// Crashed; waiting out the backoff before starting again.
    Restarting,
    /// Stopped on purpose.
    Stopped,
    /// Gave up after too many restarts; an operator must restart it.
    Failed,
}

impl Phase {
    /// Lowercase name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Restarting => "restarting",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// A plugin's observable state.
#[derive(Debug, Clone)]
pub struct PluginState {
    /// The phase.
    pub phase: Phase,
    /// The current process, when there is one.
    pub pid: Option<u32>,
    /// Restarts since the supervisor started.
    pub restarts: u32,
    /// Why it last stopped or failed to start, naming the plugin.
    pub last_error: Option<String>,
    /// A client for the current process, when ready.
    pub client: Option<PluginClient>,
    /// What the current process says it implements, when it says
    /// (asked once per start, before it is ready).
    pub described: Option<crate::client::Described>,
    /// Failed starts and crashes since it was last ready: at
    /// [`CRASH_LOOP`] and more it is in a crash loop.
    pub failures: u32,
    /// Its data directory's quota, as the current process started with it.
    pub disk: Option<toolhost_sandbox::disk::Quota>,
}

enum Command {
    Start,
    Restart,
    Stop,
}

/// The daemon's handle on one supervised plugin.
#[derive(Debug)]
pub struct PluginHandle {
    id: String,
    version: String,
    /// The tools its manifest declares (local names).
    declared: Vec<String>,
    /// Whether its processes may write their data directory (a plugin
    /// held read-only runs under a handle of its own until it is let go).
    data_writable: bool,
    state: watch::Receiver<PluginState>,
    commands: mpsc::UnboundedSender<Command>,
}

impl PluginHandle {
    /// The plugin id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether its processes may write their data directory.
    #[must_use]
    pub fn data_writable(&self) -> bool {
        self.data_writable
    }

    /// Where the running process's code and the manifest disagree:
    /// declared tools without a handler, and handlers for undeclared
    /// tools. Empty when they agree or the process has not said.
    #[must_use]
    pub fn tool_differences(&self) -> (Vec<String>, Vec<String>) {
        self.state
            .borrow()
            .described
            .as_ref()
            .map(|d| d.differences(self.declared.iter().map(String::as_str)))
            .unwrap_or_default()
    }

    /// The version being run.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The current phase, without copying the rest of the state (what a
    /// count of a thousand plugins by phase asks for).
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.state.borrow().phase
    }

    /// Restarts since the supervisor started, without copying the state.
    #[must_use]
    pub fn restarts(&self) -> u32 {
        self.state.borrow().restarts
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> PluginState {
        self.state.borrow().clone()
    }

    /// Reads the current state in place: every call asks which client to
    /// use, and a copy of the state would copy its strings for each.
    pub fn read_state<R>(&self, read: impl FnOnce(&PluginState) -> R) -> R {
        read(&self.state.borrow())
    }

    /// A receiver that sees every state change.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<PluginState> {
        self.state.clone()
    }

    /// A client for the current process, if the plugin is ready.
    #[must_use]
    pub fn client(&self) -> Option<PluginClient> {
        let s = self.state.borrow();
        if s.phase == Phase::Ready {
            s.client.clone()
        } else {
            None
        }
    }

    /// Restarts the plugin now (also the way out of `failed`), resetting
    /// its backoff.
    pub fn restart(&self) {
        let _ = self.commands.send(Command::Restart);
    }

    /// Starts a stopped plugin.
    pub fn start(&self) {
        let _ = self.commands.send(Command::Start);
    }

    /// Stops the plugin (SIGTERM, grace, SIGKILL) and waits until it is.
    pub async fn stop(&self) {
        let mut rx = self.state.clone();
        let _ = self.commands.send(Command::Stop);
        let _ = rx.wait_for(|s| s.phase == Phase::Stopped).await;
    }
}

/// Starts supervising a plugin: its process starts at once. Its processes
/// are counted among no registry's; a daemon supervises through
/// `Plugins::supervise`.
#[must_use]
pub fn supervise(spec: PluginSpec, config: SupervisorConfig) -> PluginHandle {
    supervise_among(spec, config, Leaders::default())
}

/// [`supervise`], recording each process it spawns among `leaders`.
pub(crate) fn supervise_among(
    spec: PluginSpec,
    config: SupervisorConfig,
    leaders: Leaders,
) -> PluginHandle {
    let (tx, rx) = watch::channel(PluginState {
        phase: Phase::Starting,
        pid: None,
        restarts: 0,
        last_error: None,
        client: None,
        described: None,
        failures: 0,
        disk: None,
    });
    let (ctx, crx) = mpsc::unbounded_channel();
    let (id, version, declared) = (spec.id.clone(), spec.version.clone(), spec.tools.clone());
    let data_writable = spec.data_writable;
    tokio::spawn(
        Supervisor {
            spec,
            config,
            leaders,
            state: tx,
            commands: crx,
        }
        .run(),
    );
    PluginHandle {
        id,
        version,
        declared,
        data_writable,
        state: rx,
        commands: ctx,
    }
}

struct Supervisor {
    spec: PluginSpec,
    config: SupervisorConfig,
    leaders: Leaders,
    state: watch::Sender<PluginState>,
    commands: mpsc::UnboundedReceiver<Command>,
}

/// Why a ready process stopped being ready.
enum Ended {
    Crashed(String),
    RestartRequested,
    StopRequested,
}

/// After a stop: start again, or the handle is gone.
enum Next {
    Start,
    Quit,
}

impl Supervisor {
    /// For a plugin run as `[sandbox] user`: that account must also be
    /// able to read and execute what the plugin runs, which the daemon's
    /// own rights say nothing about.
    fn account_hint(&self) -> String {
        self.spec.sandbox.run_as.as_ref().map_or_else(String::new, |u| {
            format!(
                "; it runs as user {:?} (uid {}), which must be able to reach, read and execute its interpreter and \
                 libraries too (every directory above them searchable by that user)",
                u.name, u.uid
            )
        })
    }

    /// The message of a start that failed: why, in the plugin's own
    /// words where it wrote any, and the sandbox named only when an access
    /// was denied.
    fn start_failure(&self, f: &process::Failed) -> String {
        let id = &self.spec.id;
        let said = crate::logs::said(&f.stderr);
        if !f.access_denied() {
            return format!("plugin {id} failed to start: {}{said}", f.error);
        }
        if self.spec.sandbox.filesystem.is_some() {
            format!(
                "plugin {id} failed to start: {}{said}; an access was denied, and it runs sandboxed, so a path outside its directory it needs \
                 (an interpreter, a library) must be granted: [sandbox] read, or [plugin.\"{id}\"] read or grant \
                 (`toolhost plugins show {id}` lists what it asks for){}",
                f.error,
                self.account_hint(),
            )
        } else {
            format!(
                "plugin {id} failed to start: {}{said}{}",
                f.error,
                self.account_hint()
            )
        }
    }

    fn publish(
        &self,
        phase: Phase,
        pid: Option<u32>,
        client: Option<PluginClient>,
        error: Option<String>,
    ) {
        self.state.send_modify(|s| {
            s.phase = phase;
            s.pid = pid;
            s.client = client;
            if error.is_some() {
                s.last_error = error;
            }
        });
        tracing::debug!(plugin = %self.spec.id, phase = phase.as_str(), "plugin state");
    }

    /// Kept whole on purpose: it is the supervisor's state machine, and each
    /// `continue` or `return` in it is a transition; split up, the transitions
    /// would scatter across functions that each hold half a state.
    async fn run(mut self) {
        let mut attempt: u32 = 0;
        let mut shortages: u32 = 0;
        let mut recent: VecDeque<Instant> = VecDeque::new();
        loop {
            self.publish(Phase::Starting, None, None, None);
            let started = tokio::select! {
                r = process::start(&self.spec, &self.leaders) => r,
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Start | Command::Restart) => continue,
                    Some(Command::Stop) | None => match self.stopped().await {
                        Next::Start => continue,
                        Next::Quit => return,
                    },
                },
            };
            let failure = match started {
                Err(f) if f.error.is_resource_shortage() || crate::descriptors::short_now() => {
                    // Not the plugin's fault: tried again, backing off,
                    // without counting toward `failed`. Out of descriptors
                    // at this moment counts whatever the error says: which
                    // step of a start runs out first is chance
                    // (`descriptors`).
                    shortages = shortages.saturating_add(1);
                    let why = format!(
                        "plugin {} could not start for lack of resources ({shortages} tries in a row): {}",
                        self.spec.id, f.error
                    );
                    tracing::warn!(plugin = %self.spec.id, "{why}; retrying");
                    self.publish(Phase::Restarting, None, None, Some(why));
                    self.state
                        .send_modify(|s| s.failures = s.failures.saturating_add(1));
                    tokio::select! {
                        () = tokio::time::sleep(backoff(&self.config, shortages)) => {}
                        cmd = self.commands.recv() => match cmd {
                            Some(Command::Start | Command::Restart) => {
                                attempt = 0;
                                shortages = 0;
                                recent.clear();
                            }
                            Some(Command::Stop) | None => match self.stopped().await {
                                Next::Start => continue,
                                Next::Quit => return,
                            },
                        },
                    }
                    continue;
                }
                Err(f) => self.start_failure(&f),
                Ok(running) => {
                    shortages = 0;
                    let ready_at = Instant::now();
                    match self.serve(running).await {
                        Ended::StopRequested => match self.stopped().await {
                            Next::Start => continue,
                            Next::Quit => return,
                        },
                        Ended::RestartRequested => {
                            attempt = 0;
                            recent.clear();
                            self.state.send_modify(|s| s.restarts += 1);
                            continue;
                        }
                        Ended::Crashed(why) => {
                            if ready_at.elapsed() >= self.config.healthy_reset {
                                attempt = 0;
                                recent.clear();
                            }
                            why
                        }
                    }
                }
            };
            self.state
                .send_modify(|s| s.failures = s.failures.saturating_add(1));
            tracing::warn!(plugin = %self.spec.id, "{failure}");
            let now = Instant::now();
            recent.push_back(now);
            while recent
                .front()
                .is_some_and(|t| now.duration_since(*t) > self.config.restart_window)
            {
                recent.pop_front();
            }
            if recent.len() > self.config.max_restarts as usize {
                let why = format!(
                    "{failure}; gave up after {} restarts within {:?} (restart it with `toolhost plugins restart {}`)",
                    self.config.max_restarts, self.config.restart_window, self.spec.id
                );
                tracing::error!(plugin = %self.spec.id, "{why}");
                self.publish(Phase::Failed, None, None, Some(why));
                match self.wait_for_command().await {
                    Some(Command::Start | Command::Restart) => {
                        attempt = 0;
                        recent.clear();
                        continue;
                    }
                    Some(Command::Stop) | None => match self.stopped().await {
                        Next::Start => continue,
                        Next::Quit => return,
                    },
                }
            }
            self.publish(Phase::Restarting, None, None, Some(failure));
            let delay = backoff(&self.config, attempt);
            attempt = attempt.saturating_add(1);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Start | Command::Restart) => { attempt = 0; recent.clear(); }
                    Some(Command::Stop) | None => match self.stopped().await {
                        Next::Start => continue,
                        Next::Quit => return,
                    },
                },
            }
            self.state.send_modify(|s| s.restarts += 1);
        }
    }

    /// Serves a ready process until it crashes or a command ends it; the
    /// process is stopped and reaped before this returns.
    /// Asks a started process what its code implements, and logs where it
    /// and the manifest disagree.
    ///
    /// Where the shapes are kept (`serve --dev`, `check`, `pack`), the
    /// answer decides whether code and manifest are compared at all, so it
    /// gets as long as a start may take: a loaded machine must not skip
    /// the comparison. A serving daemon only logs and shows it, and does
    /// not hold a plugin back from serving for longer than a health probe.
    async fn describe(&self, client: &PluginClient) -> Option<crate::client::Described> {
        let timeout = if self.config.keep_shapes {
            self.spec.startup_timeout.max(self.config.health_timeout)
        } else {
            self.config.health_timeout
        };
        let described = client.describe(timeout, self.config.keep_shapes).await;
        if let Some(d) = &described {
            let (unimplemented, undeclared) =
                d.differences(self.spec.tools.iter().map(String::as_str));
            if !unimplemented.is_empty() || !undeclared.is_empty() {
                tracing::warn!(
                    plugin = %self.spec.id,
                    unimplemented = %unimplemented.join(", "),
                    undeclared = %undeclared.join(", "),
                    "the plugin's code and its manifest disagree: declared tools without a handler answer that they are not implemented, and handlers for undeclared tools are never called"
                );
            }
        }
        described
    }

    async fn serve(&mut self, mut running: Running) -> Ended {
        let gone = CancellationToken::new();
        let client = PluginClient::new(
            Arc::from(self.spec.id.as_str()),
            running.pid,
            running.channel.take(),
            running.socket.clone(),
            gone.clone(),
            &running.call_token,
            self.spec.protocol,
        )
        .with_audiences(&self.spec.audiences);
        let described = self.describe(&client).await;
        let disk = running.disk.clone();
        self.state.send_modify(|s| {
            s.described = described;
            s.disk = disk;
            s.failures = 0;
        });
        // The probes go the way the process's calls do (see `health`).
        let prober = client.clone();
        self.publish(Phase::Ready, Some(running.pid), Some(client), None);
        tracing::info!(plugin = %self.spec.id, pid = running.pid, "plugin ready");

        let mut ticker = tokio::time::interval_at(
            Instant::now() + self.config.health_interval,
            self.config.health_interval,
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut probing: Option<Pin<Box<dyn Future<Output = crate::health::Probed> + Send>>> = None;
        let mut failed_probes = 0u32;
        let ended = loop {
            tokio::select! {
                status = running.child.wait() => {
                    let how = status.map_or_else(|e| format!("wait failed: {e}"), |s| s.to_string());
                    let said = crate::logs::said(&running.stderr.last_lines(LAST_WORDS).await);
                    break Ended::Crashed(format!("plugin {} exited ({how}){said}", self.spec.id));
                }
                _ = ticker.tick(), if probing.is_none() => {
                    let (client, timeout) = (prober.clone(), self.config.health_timeout);
                    probing = Some(Box::pin(async move { client.probe_health(timeout).await }));
                }
                probed = pending_or(&mut probing) => {
                    probing = None;
                    if let Some(how) = self.count_probe(probed, &mut failed_probes) {
                        // Why, in the plugin's own last words where it
                        // gave any: an SDK says which handler is stuck.
                        let said = crate::logs::said(&running.stderr.last_lines(LAST_WORDS).await);
                        break Ended::Crashed(format!(
                            "plugin {} failed {failed_probes} health probes in a row: {how}{said}", self.spec.id
                        ));
                    }
                }
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Start) => {}
                    Some(Command::Restart) => break Ended::RestartRequested,
                    Some(Command::Stop) | None => break Ended::StopRequested,
                },
            }
        };
        // Calls in flight fail now, not when their deadline passes.
        gone.cancel();
        let grace = match ended {
            Ended::Crashed(_) => std::time::Duration::ZERO,
            _ => self.config.stop_grace,
        };
        process::stop_running(&mut running, grace).await;
        ended
    }

    /// Counts one probe's outcome in `failed` (the failures in a row);
    /// once they reach the limit, says how the plugin failed them.
    fn count_probe(&self, probed: crate::health::Probed, failed: &mut u32) -> Option<&'static str> {
        use crate::health::Probed;
        match probed {
            Probed::Busy => {
                tracing::debug!(plugin = %self.spec.id, "health probe skipped: every stream the plugin allows is taken by calls");
                None
            }
            Probed::Healthy => {
                *failed = 0;
                None
            }
            Probed::Unhealthy | Probed::Silent => {
                *failed += 1;
                tracing::warn!(plugin = %self.spec.id, failed_probes = *failed, ?probed, "health probe failed");
                (*failed >= self.config.health_failures).then_some(match probed {
                    Probed::Unhealthy => "it reported itself unhealthy (an SDK does when a handler is stuck past its call)",
                    _ => "it did not answer (it hangs, or a handler blocks the thread that would answer)",
                })
            }
        }
    }

    async fn wait_for_command(&mut self) -> Option<Command> {
        self.commands.recv().await
    }

    /// Stopped: wait for a start, or for the handle to go away.
    async fn stopped(&mut self) -> Next {
        self.publish(Phase::Stopped, None, None, None);
        loop {
            match self.commands.recv().await {
                Some(Command::Start | Command::Restart) => return Next::Start,
                Some(Command::Stop) => {}
                None => return Next::Quit,
            }
        }
    }
}

/// Awaits the probe if one is running; otherwise never completes.
async fn pending_or<T>(probe: &mut Option<Pin<Box<dyn Future<Output = T> + Send>>>) -> T {
    match probe {
        Some(p) => p.await,
        None => std::future::pending().await,
    }
}

/// Exponential backoff with full jitter: uniform in `[0, min(max, first * 2^attempt)]`.
fn backoff(cfg: &SupervisorConfig, attempt: u32) -> Duration {
    let bound = cfg
        .backoff_first
        .saturating_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
        .min(cfg.backoff_max);
    let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(fastrand::u64(0..=millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let cfg = SupervisorConfig::default();
        for _ in 0..200 {
            assert!(
                backoff(&cfg, 0) <= Duration::from_millis(250),
                "first restart well under a second"
            );
            assert!(backoff(&cfg, 3) <= Duration::from_secs(2));
            assert!(backoff(&cfg, 30) <= Duration::from_secs(30));
        }
        // Full jitter spreads over the whole range.
        let big: Vec<Duration> = (0..200).map(|_| backoff(&cfg, 10)).collect();
        assert!(big.iter().any(|d| *d < Duration::from_secs(10)));
        assert!(big.iter().any(|d| *d > Duration::from_secs(20)));
    }
}
