//! The daemon's side: watch the group's catalog key, offer each value to
//! the store as an admin push, and keep the status entry current.

use crate::keys::FleetKeys;
use crate::status::{Applied, StatusEntry};
use futures::StreamExt as _;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_admin::AdminState;

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
pub async fn connect(
    url: &str,
    name: &str,
    auth: &NatsAuth,
    tls: &NatsTls,
) -> Result<async_nats::Client, FleetError> {
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
    o.connect(url).await.map_err(nats)
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
}

fn nats(e: impl std::fmt::Display) -> FleetError {
    FleetError::Nats(e.to_string())
}

/// Follows the group's catalog until `stop`, reconnecting with backoff and
/// jitter whenever the engine goes away. The catalog is served from the
/// store throughout: nothing here is on a call's path.
pub async fn run(cfg: FleetConfig, state: Arc<AdminState>, stop: CancellationToken) {
    let mut attempt: u32 = 0;
    loop {
        match session(&cfg, &state, &stop, &mut attempt).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(bucket = %cfg.keys.bucket, "fleet: {e}; reconnecting"),
        }
        let bound = cfg
            .backoff_first
            .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
            .min(cfg.backoff_max);
        let delay = bound.mul_f64(fastrand::f64());
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One connection: the watch delivers the key's latest value first (not
/// every revision in between), then each new one.
async fn session(
    cfg: &FleetConfig,
    state: &AdminState,
    stop: &CancellationToken,
    attempt: &mut u32,
) -> Result<(), FleetError> {
    let client = connect(
        &cfg.url,
        &format!("toolhost {}", cfg.daemon),
        &cfg.auth,
        &cfg.tls,
    )
    .await?;
    let js = async_nats::jetstream::new(client);
    let kv = js
        .get_key_value(cfg.keys.bucket.as_str())
        .await
        .map_err(nats)?;
    // With history: the key's latest value first (the one in force when
    // this daemon starts or comes back), then each new one; never every
    // revision in between.
    let mut watch = kv
        .watch_with_history(cfg.keys.catalog.as_str())
        .await
        .map_err(nats)?;
    // Bindings: every token's current value, then each change. A token is
    // in the bucket only as its SHA-256.
    let mut bindings = kv
        .watch_with_history(cfg.keys.bindings.as_str())
        .await
        .map_err(nats)?;
    *attempt = 0;
    tracing::info!(bucket = %cfg.keys.bucket, key = %cfg.keys.catalog, "fleet: watching the catalog");
    let mut entry = StatusEntry {
        daemon: cfg.daemon.clone(),
        ..StatusEntry::default()
    };
    let mut beat = tokio::time::interval(cfg.heartbeat);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = beat.tick() => write_status(&kv, cfg, state, &mut entry).await?,
            next = bindings.next() => {
                let value = next.ok_or(FleetError::WatchEnded)?.map_err(nats)?;
                apply_binding(state, &value);
            }
            next = watch.next() => {
                let value = next.ok_or(FleetError::WatchEnded)?.map_err(nats)?;
                entry.applied = Some(apply(state, &value, cfg.max_value_bytes));
                write_status(&kv, cfg, state, &mut entry).await?;
            }
        }
    }
}

/// Offers one value of the catalog key; what became of it.
fn apply(state: &AdminState, value: &async_nats::jetstream::kv::Entry, max: usize) -> Applied {
    use async_nats::jetstream::kv::Operation;
    let refused = |why: String| Applied {
        kv_revision: value.revision,
        outcome: "refused".to_owned(),
        reasons: vec![why],
    };
    if value.operation != Operation::Put {
        // A deleted key is not a catalog: keep serving the current one.
        return refused("the catalog key was deleted; the current catalog stays".to_owned());
    }
    if value.value.len() > max {
        return refused(format!(
            "the value is {} bytes, over the limit of {max}",
            value.value.len()
        ));
    }
    let snapshot =
        match <toolhost_proto::admin::Snapshot as prost::Message>::decode(value.value.as_ref()) {
            Ok(s) => s,
            Err(e) => return refused(format!("not a toolhost.admin.v1.Snapshot: {e}")),
        };
    match toolhost_admin::offer_pushed(state, snapshot) {
        Err(e) => refused(format!("taken, but not kept on disk: {e}")),
        Ok(r) => Applied {
            kv_revision: value.revision,
            outcome: toolhost_proto::admin::PushOutcome::try_from(r.outcome)
                .map(|o| {
                    o.as_str_name()
                        .trim_start_matches("PUSH_OUTCOME_")
                        .to_lowercase()
                })
                .unwrap_or_else(|_| "unknown".to_owned()),
            reasons: r.reasons,
        },
    }
}

/// Binds or revokes the token one binding key names. A value that is not
/// a binding revokes the token rather than leave an old binding standing.
fn apply_binding(state: &AdminState, value: &async_nats::jetstream::kv::Entry) {
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
        .and_then(toolhost_admin::binding_from_proto);
    match parsed {
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
    state: &AdminState,
    entry: &mut StatusEntry,
) -> Result<(), FleetError> {
    let c = state.store.current();
    entry.epoch = c.epoch();
    entry.generation = c.generation().to_owned();
    entry.revision = c.revision();
    entry.withheld = c
        .defects()
        .into_iter()
        .map(|d| (d.tool, d.reason))
        .collect();
    entry.plugins = state
        .lifecycle
        .list()
        .into_iter()
        .map(|p| {
            let how = if !p.enabled {
                "disabled"
            } else if !p.needs_config.is_empty() {
                "needs_config"
            } else {
                "enabled"
            };
            (p.id, how.to_owned())
        })
        .collect();
    entry.heartbeat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let bytes = serde_json::to_vec(entry).map_err(nats)?;
    kv.put(cfg.keys.status.as_str(), bytes.into())
        .await
        .map_err(nats)?;
    Ok(())
}
