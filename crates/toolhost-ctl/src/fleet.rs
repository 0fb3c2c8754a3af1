//! The fleet from the command line, through the NATS bucket the daemons
//! watch (`<prefix>_<group>`): `toolhost catalog push --nats URL FILE` writes a catalog for a
//! group (no backend needed for a small fleet), and `toolhost fleet status
//! --nats URL` prints each daemon's status entry, flagging those behind the
//! group's catalog, refusing it, or silent.

use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use toolhost_base::{outjson, outln};

/// Where the fleet's bucket is.
#[derive(Debug, Clone, clap::Args)]
pub struct NatsTarget {
    /// The NATS server, e.g. nats://127.0.0.1:4222.
    #[arg(long = "nats", value_name = "URL", env = "TOOLHOST_NATS_URL")]
    pub url: String,
    /// The buckets' prefix: a group's bucket is <prefix>_<group>.
    #[arg(long, default_value = "toolhost")]
    pub bucket: String,
    /// The group of daemons.
    #[arg(long, default_value = "default")]
    pub group: String,
    /// A file holding the NATS token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A NATS .creds file.
    #[arg(long, value_name = "FILE", conflicts_with = "token_file")]
    pub creds_file: Option<PathBuf>,
    /// A NATS user; its password comes from --password-file.
    #[arg(long, requires = "password_file", conflicts_with_all = ["token_file", "creds_file"])]
    pub user: Option<String>,
    /// A file holding the NATS user's password.
    #[arg(long, value_name = "FILE", requires = "user")]
    pub password_file: Option<PathBuf>,
    /// CA certificates (PEM) to trust for the server; TLS is then required.
    #[arg(long, value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
}

impl NatsTarget {
    /// The group's bucket; `create`: made when missing (a push is how a
    /// small fleet without a backend starts), with a short history.
    pub(crate) async fn bucket(&self, create: bool) -> Result<async_nats::jetstream::kv::Store> {
        let keys = toolhost_fleet::FleetKeys::new(&self.bucket, &self.group, "cli")?;
        let auth = match (
            &self.token_file,
            &self.creds_file,
            &self.user,
            &self.password_file,
        ) {
            (Some(f), ..) => {
                toolhost_fleet::NatsAuth::Token(toolhost_daemon::config::read_secret(f)?)
            }
            (_, Some(c), ..) => toolhost_fleet::NatsAuth::CredsFile(c.clone()),
            (_, _, Some(u), Some(p)) => toolhost_fleet::NatsAuth::UserPassword(
                u.clone(),
                toolhost_daemon::config::read_secret(p)?,
            ),
            _ => toolhost_fleet::NatsAuth::None,
        };
        let tls = toolhost_fleet::NatsTls {
            require: self.tls_ca_file.is_some(),
            ca_file: self.tls_ca_file.clone(),
            client: None,
        };
        let client = toolhost_fleet::connect(&self.url, "toolhost cli", &auth, &tls).await?;
        let js = async_nats::jetstream::new(client);
        match js.get_key_value(keys.bucket.as_str()).await {
            Ok(kv) => Ok(kv),
            Err(e)
                if create
                    && e.kind() == async_nats::jetstream::context::KeyValueErrorKind::GetBucket =>
            {
                js.create_key_value(async_nats::jetstream::kv::Config {
                    bucket: keys.bucket.clone(),
                    description: format!("toolhost fleet, group {}", self.group),
                    history: 5,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("cannot create bucket {:?} at {}", keys.bucket, self.url))
            }
            Err(e) => Err(e).with_context(|| {
                format!(
                    "no bucket {:?} at {} (`toolhost fleet push` creates it)",
                    keys.bucket, self.url
                )
            }),
        }
    }
}

/// Writes `snapshot` (JSON, as `toolhost catalog show` prints it) to the
/// group's catalog key; prints the bucket revision.
pub async fn push(target: &NatsTarget, file: &std::path::Path) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let snap: toolhost_catalog::Snapshot = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a catalog snapshot", file.display()))?;
    let (mut header, shards) =
        toolhost_fleet::shard_snapshot(toolhost_managed::snapshot_to_proto(&snap));
    let kv = target.bucket(true).await?;
    let before = match kv.get("catalog").await? {
        Some(b) => <toolhost_proto::admin::Snapshot as prost::Message>::decode(b.as_ref()).ok(),
        None => None,
    }
    .unwrap_or_default();
    let named =
        |s: &toolhost_proto::admin::CatalogShard| toolhost_fleet::shard_key(&s.plugin, &s.digest);
    let had: std::collections::BTreeSet<String> = before.shards.iter().map(named).collect();
    let has: std::collections::BTreeSet<String> = header.shards.iter().map(named).collect();
    // The shards first (one a plugin, by digest: an unchanged plugin's is
    // there already), then the header that switches the revision.
    let mut written = 0;
    for (key, bytes) in &shards {
        if !had.contains(key) {
            kv.put(key.as_str(), bytes.clone().into())
                .await
                .with_context(|| format!("cannot write {key}"))?;
            written += 1;
        }
    }
    header.retiring = before
        .shards
        .iter()
        .filter(|s| !has.contains(&named(s)))
        .cloned()
        .collect();
    let key = "catalog".to_owned();
    let revision = kv
        .put(key.as_str(), prost::Message::encode_to_vec(&header).into())
        .await
        .with_context(|| format!("cannot write {key}"))?;
    // What the header before this one retired has had a revision of grace.
    let mut removed = 0;
    for s in before.retiring.iter().filter(|s| !has.contains(&named(s))) {
        kv.delete(named(s).as_str()).await?;
        removed += 1;
    }
    outln!(
        "put {key} (generation {} epoch {} revision {}, {} plugin shards, {written} new, {removed} retired removed) as bucket revision {revision}; `toolhost fleet status --nats {}` shows the daemons converge",
        snap.generation,
        snap.epoch,
        snap.revision,
        shards.len(),
        target.url
    );
    Ok(ExitCode::SUCCESS)
}

/// Every daemon's status entry, by daemon id: one watch of `status.*`
/// that delivers each key's latest value (not one read per daemon, and
/// not a listing of every key, bindings included), in id order.
pub(crate) async fn status_entries(
    kv: &async_nats::jetstream::kv::Store,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>> {
    use futures::StreamExt as _;
    let mut watch = kv.watch_with_history("status.*").await?;
    let mut entries = std::collections::BTreeMap::new();
    // A watch of keys that do not exist delivers nothing: a quiet second
    // means there is nothing (more) to read.
    while let Ok(Some(next)) = tokio::time::timeout(Duration::from_secs(1), watch.next()).await {
        let e = next?;
        let daemon = e.key.trim_start_matches("status.").to_owned();
        if e.operation == async_nats::jetstream::kv::Operation::Put {
            entries.insert(daemon, e.value.to_vec());
        } else {
            entries.remove(&daemon);
        }
        if e.delta == 0 {
            break;
        }
    }
    Ok(entries)
}

/// A status entry is read only up to this size.
pub(crate) const MAX_STATUS_BYTES: usize = 1024 * 1024;

/// One row per daemon of the group; exit 1 when any is behind, refusing
/// or silent.
pub async fn status(target: &NatsTarget, silent_after_s: u64) -> Result<ExitCode> {
    let kv = target.bucket(false).await?;
    let want = match kv.get("catalog").await? {
        Some(v) => <toolhost_proto::admin::Snapshot as prost::Message>::decode(v.as_ref())
            .ok()
            .map(|s| (s.generation, s.revision)),
        None => None,
    };
    let entries = status_entries(&kv).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match &want {
        Some((g, r)) => outln!("group {}: generation {g} revision {r}", target.group),
        None => outln!("group {}: no catalog (or not a snapshot)", target.group),
    }
    let mut all_well = true;
    for (daemon, value) in &entries {
        let entry: Option<toolhost_fleet::StatusEntry> = (value.len() <= MAX_STATUS_BYTES)
            .then(|| serde_json::from_slice(value).ok())
            .flatten();
        let Some(e) = entry else {
            all_well = false;
            outln!("  {daemon:<24} unreadable status entry");
            continue;
        };
        let mut flags = Vec::new();
        if want
            .as_ref()
            .is_some_and(|(g, r)| *g != e.generation || *r != e.revision)
        {
            flags.push("BEHIND");
        }
        if e.refused.is_some()
            || e.applied
                .as_ref()
                .is_some_and(|a| !matches!(a.outcome.as_str(), "accepted" | "unchanged"))
        {
            flags.push("NACK");
        }
        if now.saturating_sub(e.heartbeat) > silent_after_s {
            flags.push("SILENT");
        }
        if e.placement.as_ref().is_some_and(|p| !p.converged()) {
            flags.push("PLACING");
        }
        all_well &= flags.is_empty();
        let outcome = e.applied.as_ref().map_or("-", |a| a.outcome.as_str());
        outln!(
            "  {:<24} {} rev {:<6} {:<10} {} withheld, heartbeat {}s ago {}",
            toolhost_base::log_safe(daemon, 64),
            toolhost_base::log_safe(&e.generation, 64),
            e.revision,
            toolhost_base::log_safe(outcome, 16),
            e.withheld_total.max(e.withheld.len()),
            now.saturating_sub(e.heartbeat),
            flags.join(" ")
        );
        print_why(&e);
    }
    Ok(if all_well {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Why a daemon's row is flagged: the catalog value's reasons, a placed
/// plugin held or failed, a permission refused.
fn print_why(e: &toolhost_fleet::StatusEntry) {
    if let Some(a) = &e.applied {
        for r in &a.reasons {
            outln!("      {}", toolhost_base::log_safe(r, 300));
        }
    }
    for p in e.placement.iter().flat_map(|p| &p.plugins) {
        if matches!(p.phase.as_str(), "held" | "failed") {
            outln!(
                "      plugin {} {}: {}",
                toolhost_base::log_safe(&p.id, 64),
                toolhost_base::log_safe(&p.phase, 16),
                toolhost_base::log_safe(&p.reason, 300)
            );
        }
    }
    if let Some(r) = &e.refused {
        outln!(
            "      refused by the NATS server (a permission its user lacks): {}",
            toolhost_base::log_safe(r, 300)
        );
    }
}

/// The fleet link's lines of `toolhost status`.
pub fn link_lines(f: &toolhost_proto::admin::FleetLink) {
    let state = if f.connected {
        "connected"
    } else {
        "NOT CONNECTED"
    };
    outln!(
        "fleet     {state} to {} for {}s, bucket {} as {}, {} reconnect(s)",
        f.server,
        f.seconds_in_state,
        f.bucket,
        f.daemon,
        f.reconnects
    );
    if f.applied_kv_revision > 0 {
        outln!(
            "          last catalog value: bucket revision {}, {}",
            f.applied_kv_revision,
            f.applied_outcome
        );
    }
    if !f.last_error.is_empty() {
        outln!(
            "          last error: {}",
            toolhost_base::term::one_line(&f.last_error)
        );
    }
}

/// `catalog build`: a snapshot of plugin directories, with no daemon.
pub fn build_catalog(
    paths: &[PathBuf],
    prefix: &str,
    generation: &str,
    epoch: u64,
    revision: Option<u64>,
) -> Result<ExitCode> {
    if !toolhost_manifest::naming::is_valid_prefix(prefix) {
        anyhow::bail!(
            "prefix {prefix:?} must be 1 to 16 lowercase letters and digits, starting with a letter"
        );
    }
    let mut manifests = Vec::new();
    for p in paths {
        let m = toolhost_manifest::Manifest::load(p).map_err(|problems| {
            anyhow::anyhow!(
                "{} is not a valid plugin: {}",
                p.display(),
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        manifests.push(m);
    }
    let revision = revision.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    });
    let mut snap =
        toolhost_catalog::Snapshot::from_manifests(prefix, generation, revision, &manifests);
    snap.epoch = epoch;
    outjson!(serde_json::to_string_pretty(&snap)?);
    Ok(ExitCode::SUCCESS)
}
