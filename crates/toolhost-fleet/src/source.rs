//! The daemon's side: watch the group's catalog key, offer each value to
//! the store as an admin push, and keep the status entry current.

use crate::keys::FleetKeys;
use crate::link::FleetLink;
pub use crate::parts::FleetParts;
use crate::shards::Sharded;
use crate::status::StatusEntry;
use crate::values::{offer_latest, reselect};
use futures::{FutureExt as _, StreamExt as _};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How to prove who we are to the NATS server. Values are read from files
/// or the environment by the caller, the way plugin secrets are; `Debug`
/// never shows them.
#[derive(Clone, Default)]
pub enum NatsAuth {
    /// No credentials.
    #[default]
    None,
    /// A token.
    Token(String),
    /// A user and password.
    UserPassword(String, String),
    /// An nkey seed (`SU...`).
    NkeySeed(String),
    /// A `.creds` file (a JWT and its seed).
    CredsFile(std::path::PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "None",
            Self::Token(_) => "Token(..)",
            Self::UserPassword(..) => "UserPassword(..)",
            Self::NkeySeed(_) => "NkeySeed(..)",
            Self::CredsFile(_) => "CredsFile(..)",
        })
    }
}

/// TLS to the NATS server, when configured.
#[derive(Debug, Clone, Default)]
pub struct NatsTls {
    /// Refuse a server that does not offer TLS.
    pub require: bool,
    /// CA certificates (PEM) to trust for the server.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM).
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// A connection's options from the credentials and TLS settings.
async fn options(
    name: &str,
    auth: &NatsAuth,
    tls: &NatsTls,
) -> Result<async_nats::ConnectOptions, FleetError> {
    let mut o = match auth {
        NatsAuth::None => async_nats::ConnectOptions::new(),
        NatsAuth::Token(t) => async_nats::ConnectOptions::with_token(t.clone()),
        NatsAuth::UserPassword(u, p) => {
            async_nats::ConnectOptions::with_user_and_password(u.clone(), p.clone())
        }
        NatsAuth::NkeySeed(seed) => async_nats::ConnectOptions::with_nkey(seed.clone()),
        NatsAuth::CredsFile(path) => async_nats::ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|e| FleetError::Nats(format!("{}: {e}", path.display())))?,
    };
    o = o.name(name).require_tls(tls.require);
    if let Some(ca) = &tls.ca_file {
        o = o.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &tls.client {
        o = o.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(o)
}

/// Connects with the credentials and TLS settings (the CLI's way in).
pub async fn connect(
    url: &str,
    name: &str,
    auth: &NatsAuth,
    tls: &NatsTls,
) -> Result<async_nats::Client, FleetError> {
    options(name, auth, tls)
        .await?
        .connect(url)
        .await
        .map_err(nats)
}

/// How long a JetStream request of the daemon's may take. A request the
/// server's permissions drop is never answered, so this is also how soon
/// a daemon whose NATS user is too narrow says so.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// A reconnect delay with full jitter: uniform below an exponential bound.
fn jittered(first: Duration, max: Duration, attempt: u32) -> Duration {
    let bound = first
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(max);
    bound.mul_f64(fastrand::f64())
}

/// Where the fleet's bucket is, and who this daemon is in it.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The NATS server, `nats://host:4222`.
    pub url: String,
    /// Credentials.
    pub auth: NatsAuth,
    /// TLS.
    pub tls: NatsTls,
    /// This daemon's bucket and keys.
    pub keys: FleetKeys,
    /// This daemon's id, as in its status key.
    pub daemon: String,
    /// How often the status entry is rewritten when nothing changes.
    pub heartbeat: Duration,
    /// The largest catalog value read; a larger one is refused.
    pub max_value_bytes: usize,
    /// The first reconnect delay; each next one doubles, up to `backoff_max`,
    /// and each is drawn uniformly below its bound (full jitter), so a
    /// thousand daemons do not reconnect in step.
    pub backoff_first: Duration,
    /// The largest reconnect delay.
    pub backoff_max: Duration,
}

/// Why a session with the engine ended.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Connecting, the bucket, the watch or a write failed.
    #[error("NATS: {0}")]
    Nats(String),
    /// The server ended the watch.
    #[error("the catalog watch ended")]
    WatchEnded,
    /// The group's bucket is not there yet.
    #[error(
        "the bucket {0} does not exist yet; the backend or `toolhost fleet push` creates it with the group's first catalog"
    )]
    NoBucket(String),
    /// The server refused something this daemon's NATS user may not do.
    #[error(
        "the NATS server refused this daemon's user: {0}; it needs the permissions listed in the README's \"A fleet through NATS JetStream\""
    )]
    Refused(String),
}

fn nats(e: impl std::fmt::Display) -> FleetError {
    FleetError::Nats(e.to_string())
}

/// Follows the group's catalog until `stop`, reconnecting with backoff and
/// jitter whenever the engine goes away. The catalog is served from the
/// store throughout: nothing here is on a call's path.
pub async fn run(cfg: FleetConfig, state: FleetParts, stop: CancellationToken) {
    let link = Arc::clone(&state.link);
    let mut attempt: u32 = 0;
    // The last refusal and when: kept in the status entry across sessions
    // (a reconnect would otherwise hide it until it happens again), until
    // a session has followed for ten heartbeats without one.
    let mut refused: Option<(String, Instant)> = None;
    loop {
        match session(&cfg, &state, &link, &stop, &mut attempt, &mut refused).await {
            Ok(()) => return,
            Err(e) => {
                link.set_connected(false);
                let said = e.to_string();
                link.set_error(&said);
                tracing::warn!(bucket = %cfg.keys.bucket, "fleet: {said}; reconnecting");
            }
        }
        let delay = jittered(cfg.backoff_first, cfg.backoff_max, attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// What the server said was refused on this connection: a permission the
/// daemon's user lacks shows only as an unanswered request, and this is
/// how the daemon can name it.
/// A refusal that comes while the link runs (the reply to the stream's
/// flow control, say, which the client sends on its own) wakes the session:
/// the daemon would otherwise stop following without a word.
#[derive(Debug, Default)]
struct Refusals {
    said: std::sync::Mutex<Option<String>>,
    came: tokio::sync::Notify,
}

impl Refusals {
    fn note(&self, what: String) {
        *self
            .said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(what);
        self.came.notify_one();
    }

    fn take(&self) -> Option<String> {
        self.said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// The error of a failed step, naming the permission the server refused
/// when it refused one.
fn explained(refusals: &Refusals, e: impl std::fmt::Display) -> FleetError {
    refused_or(refusals, nats(e))
}

fn refused_or(refusals: &Refusals, e: FleetError) -> FleetError {
    refusals.take().map_or(e, FleetError::Refused)
}

/// One connection: the watch delivers the key's latest value first (not
/// every revision in between), then each new one.
///
/// Kept whole on purpose: one connection's select loop: the watch, the
/// heartbeat, the status writes and the stop signal share the connection and
/// its timers.
async fn session(
    cfg: &FleetConfig,
    state: &FleetParts,
    link: &Arc<FleetLink>,
    stop: &CancellationToken,
    attempt: &mut u32,
    refused: &mut Option<(String, Instant)>,
) -> Result<(), FleetError> {
    let refusals = Arc::new(Refusals::default());
    // The link is up once the watch runs; after that, the client's own
    // reconnects (which resume the watch) are followed from its events.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events = {
        let (link, refusals, watching) = (
            Arc::clone(link),
            Arc::clone(&refusals),
            Arc::clone(&watching),
        );
        move |event: async_nats::Event| {
            use async_nats::{Event, ServerError};
            match event {
                Event::Connected if watching.load(std::sync::atomic::Ordering::Relaxed) => {
                    link.set_connected(true);
                }
                Event::Disconnected => link.set_connected(false),
                Event::ServerError(ServerError::Other(text)) => {
                    tracing::warn!(
                        "fleet: the NATS server says: {}",
                        toolhost_base::log_safe(&text, 300)
                    );
                    // A permission refused is shown at once, whatever the
                    // session is doing, and ends it (the daemon would go on
                    // looking connected while it no longer follows).
                    if text.contains("Permissions Violation") {
                        link.set_error(&FleetError::Refused(text.clone()).to_string());
                        refusals.note(text);
                    }
                }
                Event::ServerError(ServerError::AuthorizationViolation) => {
                    link.set_error(
                        "the NATS server refused this daemon's user: authorization violation",
                    );
                    refusals.note("authorization violation".to_owned());
                }
                _ => {}
            }
            std::future::ready(())
        }
    };
    let (first, max) = (cfg.backoff_first, cfg.backoff_max);
    let client = options(&format!("toolhost {}", cfg.daemon), &cfg.auth, &cfg.tls)
        .await?
        .event_callback(events)
        // The client's own reconnects, jittered as ours are.
        .reconnect_delay_callback(move |attempts| {
            jittered(first, max, u32::try_from(attempts).unwrap_or(u32::MAX))
        })
        .connect(&cfg.url)
        .await
        .map_err(|e| explained(&refusals, e))?;
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(REQUEST_TIMEOUT)
        .build(client);
    let kv = match js.get_key_value(cfg.keys.bucket.as_str()).await {
        Ok(kv) => kv,
        Err(e) if e.to_string().contains("stream not found") => {
            return Err(FleetError::NoBucket(cfg.keys.bucket.clone()));
        }
        Err(e) => return Err(explained(&refusals, e)),
    };
    // With history: the key's latest value first (the one in force when
    // this daemon starts or comes back), then each new one; never every
    // revision in between.
    let mut watch = kv
        .watch_with_history(cfg.keys.catalog.as_str())
        .await
        .map_err(|e| explained(&refusals, e))?;
    // Bindings: every token's current value, then each change. A token is
    // in the bucket only as its SHA-256.
    let mut bindings = kv
        .watch_with_history(cfg.keys.bindings.as_str())
        .await
        .map_err(|e| explained(&refusals, e))?;
    // Placements: the latest value first, then each new one, applied in
    // the background (pulls take their time); each one's end is said at
    // once in the status entry.
    let mut placements = match &state.placer {
        Some(_) => Some(
            kv.watch_with_history(cfg.keys.placement.as_str())
                .await
                .map_err(|e| explained(&refusals, e))?,
        ),
        None => None,
    };
    let placed = Arc::new(tokio::sync::Notify::new());
    let mut sharded = Sharded::default();
    let mut entry = StatusEntry {
        daemon: cfg.daemon.clone(),
        refused: refused.as_ref().map(|(what, _)| what.clone()),
        ..StatusEntry::default()
    };
    // The first status write proves the last permission the daemon needs.
    write_status(&kv, cfg, state, &mut entry)
        .await
        .map_err(|e| refused_or(&refusals, e))?;
    *attempt = 0;
    watching.store(true, std::sync::atomic::Ordering::Relaxed);
    link.set_connected(true);
    tracing::info!(bucket = %cfg.keys.bucket, key = %cfg.keys.catalog, "fleet: watching the catalog");
    let mut beat = tokio::time::interval(cfg.heartbeat);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = refusals.came.notified() => {
                // A permission refused while following: said in the
                // status entry (NACK in `fleet status`), then the session
                // ends and the link says NOT CONNECTED with the refusal.
                let Some(what) = refusals.take() else { continue };
                *refused = Some((what.clone(), Instant::now()));
                link.set_refused(Some(&FleetError::Refused(what.clone()).to_string()));
                entry.refused = Some(what.clone());
                let _ = write_status(&kv, cfg, state, &mut entry).await;
                return Err(FleetError::Refused(what));
            }
            _ = beat.tick() => {
                if refused.as_ref().is_some_and(|(_, at)| at.elapsed() > cfg.heartbeat * 10) {
                    *refused = None;
                    link.set_refused(None);
                    entry.refused = None;
                }
                write_status(&kv, cfg, state, &mut entry).await.map_err(|e| refused_or(&refusals, e))?;
            }
            () = placed.notified() => {
                if let Some(applied) = reselect(state, &kv, &mut sharded, cfg.max_value_bytes).await {
                    link.record_applied(applied.kv_revision, &applied.outcome);
                    entry.applied = Some(applied);
                }
                write_status(&kv, cfg, state, &mut entry).await.map_err(|e| refused_or(&refusals, e))?;
            }
            Some(next) = async {
                match placements.as_mut() {
                    Some(w) => w.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let value = next.map_err(nats)?;
                place(state, &value, &placed, &mut entry, &mut sharded);
                if let Some(applied) = reselect(state, &kv, &mut sharded, cfg.max_value_bytes).await {
                    link.record_applied(applied.kv_revision, &applied.outcome);
                    entry.applied = Some(applied);
                }
                write_status(&kv, cfg, state, &mut entry).await.map_err(|e| refused_or(&refusals, e))?;
            }
            next = bindings.next() => {
                let value = next.ok_or(FleetError::WatchEnded)?.map_err(nats)?;
                apply_binding(state, &value);
            }
            next = watch.next() => {
                let mut queued = vec![next.ok_or(FleetError::WatchEnded)?.map_err(nats)?];
                // Values that queued while this daemon was away or busy
                // (stopped, say) are judged together: one is offered.
                while let Some(Some(later)) = watch.next().now_or_never() {
                    queued.push(later.map_err(nats)?);
                }
                if queued.len() > 1 {
                    tracing::info!(queued = queued.len(), "fleet: catalog values queued; offering the latest");
                }
                let applied = offer_latest(state, &kv, &mut sharded, queued, cfg.max_value_bytes).await;
                link.record_applied(applied.kv_revision, &applied.outcome);
                entry.applied = Some(applied);
                write_status(&kv, cfg, state, &mut entry).await.map_err(|e| refused_or(&refusals, e))?;
            }
        }
    }
}

/// Hands a placement value to the daemon's placer, in the background; a
/// value that is not a placement is said in the status entry and changes
/// nothing.
fn place(
    state: &FleetParts,
    value: &async_nats::jetstream::kv::Entry,
    placed: &Arc<tokio::sync::Notify>,
    entry: &mut StatusEntry,
    sharded: &mut Sharded,
) {
    let Some(placer) = state.placer.clone() else {
        return;
    };
    match crate::placement::read(value) {
        Err(why) => {
            tracing::warn!("fleet: a placement value refused: {why}");
            let mut now = entry.placement.clone().unwrap_or_default();
            now.refused = why;
            entry.placement = Some(now);
        }
        Ok(p) => {
            tracing::info!(
                revision = p.revision,
                plugins = p.plugins.len(),
                "fleet: placement"
            );
            if let Some(now) = entry.placement.as_mut() {
                now.refused.clear();
            }
            sharded.placed = p.plugins.iter().map(|x| x.id.clone()).collect();
            let placed = Arc::clone(placed);
            tokio::spawn(async move {
                (placer.apply)(p).await;
                placed.notify_one();
            });
        }
    }
}

/// The most tokens a daemon holds bound: a hostile or broken engine
/// cannot grow its memory without end. One daemon serves one agent
/// executor, whose sessions are counted in tens.
const MAX_BINDINGS: usize = 100_000;

/// Binds or revokes the token one binding key names. A value that is not
/// a binding revokes the token rather than leave an old binding standing.
fn apply_binding(state: &FleetParts, value: &async_nats::jetstream::kv::Entry) {
    use async_nats::jetstream::kv::Operation;
    let Some(digest) = crate::keys::binding_digest(&value.key) else {
        tracing::warn!("fleet: a binding key that names no token digest; ignored");
        return;
    };
    if value.operation != Operation::Put {
        state.tokens.revoke_digest(&digest);
        tracing::info!("fleet: a session binding revoked");
        return;
    }
    let parsed = (value.value.len() <= 4096)
        .then(|| {
            <toolhost_proto::admin::SessionBinding as prost::Message>::decode(value.value.as_ref())
                .ok()
        })
        .flatten()
        .ok_or_else(|| "not a toolhost.admin.v1.SessionBinding".to_owned())
        .and_then(toolhost_managed::binding_from_proto);
    match parsed {
        Ok(_) if state.tokens.len() >= MAX_BINDINGS && !state.tokens.has_digest(&digest) => {
            tracing::warn!(
                "fleet: a session binding refused: {MAX_BINDINGS} tokens are bound already"
            );
        }
        Ok(binding) => {
            state.tokens.bind_digest(digest, binding);
            tracing::info!("fleet: a session binding set");
        }
        Err(why) => {
            state.tokens.revoke_digest(&digest);
            tracing::warn!("fleet: a binding value refused ({why}); the token is revoked");
        }
    }
}

/// Writes this daemon's status entry: what it serves now.
async fn write_status(
    kv: &async_nats::jetstream::kv::Store,
    cfg: &FleetConfig,
    state: &FleetParts,
    entry: &mut StatusEntry,
) -> Result<(), FleetError> {
    let c = state.catalog.store().current();
    entry.epoch = c.epoch();
    entry.generation = c.generation().to_owned();
    entry.revision = c.revision();
    let defects = c.withheld();
    entry.withheld_total = defects.len();
    entry.withheld = defects
        .iter()
        .take(crate::status::MAX_WITHHELD_LISTED)
        .map(|d| (d.tool.clone(), d.reason.clone()))
        .collect();
    entry.plugins = (state.plugins)();
    if let Some(placer) = &state.placer {
        let now = crate::placement::entry_of((placer.status)());
        // A refused value is kept in the entry until a placement applies.
        let refused = entry
            .placement
            .as_ref()
            .map(|p| p.refused.clone())
            .filter(|r| !r.is_empty() && now.refused.is_empty());
        entry.placement = Some(crate::placement::PlacedEntry {
            refused: refused.unwrap_or(now.refused.clone()),
            ..now
        });
    }
    entry.heartbeat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let bytes = serde_json::to_vec(entry).map_err(nats)?;
    kv.put(cfg.keys.status.as_str(), bytes.into())
        .await
        .map_err(nats)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::read;
    use async_nats::jetstream::kv::{Entry, Operation};

    fn entry(value: Vec<u8>, operation: Operation) -> Entry {
        Entry {
            bucket: "toolhost_default".to_owned(),
            key: "catalog".to_owned(),
            value: value.into(),
            revision: 7,
            delta: 0,
            created: time::OffsetDateTime::UNIX_EPOCH,
            operation,
            seen_current: true,
        }
    }

    /// Whatever the engine holds under `catalog`, only a snapshot within
    /// the size limit is read as one; anything else is a reason.
    #[test]
    fn only_a_snapshot_within_the_limit_is_read() {
        let snapshot = toolhost_proto::admin::Snapshot {
            shards: Vec::new(),
            retiring: Vec::new(),
            generation: "g".to_owned(),
            revision: 3,
            epoch: 9,
            tools: Vec::new(),
        };
        let bytes = prost::Message::encode_to_vec(&snapshot);
        let read_back = read(&entry(bytes.clone(), Operation::Put), 1024);
        assert_eq!(read_back.map(|s| (s.epoch, s.revision)), Ok((9, 3)));

        let over = read(&entry(bytes, Operation::Put), 4);
        assert!(over.is_err_and(|why| why.contains("over the limit of 4")));

        let garbage = read(
            &entry(b"\xff\xff\xff garbage".to_vec(), Operation::Put),
            1024,
        );
        assert!(garbage.is_err_and(|why| why.contains("not a toolhost.admin.v1.Snapshot")));

        // Another message's bytes (a binding) put under the catalog key.
        let binding = toolhost_proto::admin::SessionBinding {
            surface: "chat".to_owned(),
            task_id: "t".to_owned(),
            session_id: "s".to_owned(),
            workspace_id: String::new(),
        };
        let wrong = read(
            &entry(prost::Message::encode_to_vec(&binding), Operation::Put),
            1024,
        );
        assert!(wrong.is_err(), "{wrong:?}");

        for gone in [Operation::Delete, Operation::Purge] {
            let why = read(&entry(Vec::new(), gone), 1024);
            assert!(why.is_err_and(|w| w.contains("deleted; the current catalog stays")));
        }
    }

    #[test]
    fn reconnect_delays_are_jittered_below_a_doubling_bound() {
        let (first, max) = (Duration::from_millis(250), Duration::from_secs(30));
        for attempt in 0..40 {
            let bound = first
                .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
                .min(max);
            let d = jittered(first, max, attempt);
            assert!(d <= bound, "attempt {attempt}: {d:?} over {bound:?}");
        }
        let spread: std::collections::BTreeSet<_> =
            (0..50).map(|_| jittered(first, max, 10)).collect();
        assert!(spread.len() > 10, "not jittered: {spread:?}");
    }
}
