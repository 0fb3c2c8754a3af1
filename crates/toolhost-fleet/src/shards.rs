//! A sharded catalog: the `catalog` key holds a header (a snapshot with
//! no tools) naming each plugin's tools by the digest of their shard, kept
//! at `tools.<plugin>.<hex digest>`. A daemon fetches, checks and decodes
//! only the shards of the plugins it runs or is placed, so a 10,000-tool
//! revision costs a daemon with three plugins three small reads; the
//! revision still switches at once, when the header is written (the
//! shards it names are written first).
//!
//! Every shard is hostile: its key must name a plugin id of the safe
//! alphabet and a digest, its bytes must hash to that digest, it must be a
//! `ToolShard` with no field this toolhost does not know, and every tool
//! in it must belong to the plugin it is filed under (a shard cannot
//! smuggle another plugin's tools past a daemon that skipped that
//! plugin's shard). One bad shard refuses the whole revision, as one
//! malformed descriptor does.
//!
//! Shards are fetched with one watch of exactly their keys (the consumer
//! permission a daemon already has), never a listing of the bucket.

use futures::StreamExt as _;
use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use toolhost_proto::admin as pb;

/// The most shards a header may name.
pub const MAX_SHARDS: usize = 100_000;

/// How long a daemon waits for the shards it asked for.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The key of a plugin's shard.
#[must_use]
pub fn shard_key(plugin: &str, digest: &str) -> String {
    format!("tools.{plugin}.{}", digest.trim_start_matches("sha256:"))
}

/// `sha256:HEX` of a shard's bytes.
#[must_use]
pub fn shard_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// A whole snapshot split as a backend writes it: the header (no tools,
/// a shard per plugin, by digest) and each shard's key and bytes, plugins
/// in id order. Write the shards first, then the header.
#[must_use]
pub fn shard_snapshot(s: pb::Snapshot) -> (pb::Snapshot, Vec<(String, Vec<u8>)>) {
    let mut by_plugin: BTreeMap<String, Vec<pb::ToolDescriptor>> = BTreeMap::new();
    for t in s.tools {
        by_plugin.entry(t.plugin_id.clone()).or_default().push(t);
    }
    let mut shards = Vec::with_capacity(by_plugin.len());
    let mut header = pb::Snapshot {
        generation: s.generation,
        revision: s.revision,
        epoch: s.epoch,
        tools: Vec::new(),
        shards: Vec::with_capacity(by_plugin.len()),
        retiring: Vec::new(),
    };
    for (plugin, tools) in by_plugin {
        let bytes = prost::Message::encode_to_vec(&pb::ToolShard { tools });
        let digest = shard_digest(&bytes);
        shards.push((shard_key(&plugin, &digest), bytes));
        header.shards.push(pb::CatalogShard { plugin, digest });
    }
    (header, shards)
}

/// The shards of the plugins a daemon keeps between revisions, by digest:
/// an unchanged plugin's shard is not fetched again.
#[derive(Debug, Default)]
pub(crate) struct ShardCache {
    by_digest: BTreeMap<String, Vec<pb::ToolDescriptor>>,
}

/// A daemon's sharded catalog between values: the shards it holds, the
/// header it serves from, and the plugins it selected for it.
#[derive(Debug, Default)]
pub(crate) struct Sharded {
    pub(crate) cache: ShardCache,
    /// The header in force and its bucket revision (`None`: the value in
    /// force is a whole snapshot).
    pub(crate) header: Option<(u64, pb::Snapshot)>,
    /// The plugins the header was assembled for.
    pub(crate) selected: BTreeSet<String>,
    /// The plugins the latest placement value names (wanted before they
    /// are installed, so their tools are there when they are).
    pub(crate) placed: BTreeSet<String>,
}

/// What assembling a revision read.
#[derive(Debug)]
pub(crate) struct Assembled {
    pub(crate) snapshot: pb::Snapshot,
    /// Shards this daemon used, and how many the header names.
    pub(crate) used: usize,
    pub(crate) total: usize,
}

fn plugin_ok(p: &str) -> bool {
    (1..=64).contains(&p.len())
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn digest_ok(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Checks a header's shape: no tools beside its shards, each shard's
/// plugin and digest well formed, each plugin once.
pub(crate) fn check_header(h: &pb::Snapshot) -> Result<(), String> {
    if !h.tools.is_empty() {
        return Err("a sharded header carries no tools of its own".to_owned());
    }
    if h.shards.len() > MAX_SHARDS {
        return Err(format!(
            "the header names {} shards, over the limit of {MAX_SHARDS}",
            h.shards.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for s in &h.shards {
        if !plugin_ok(&s.plugin) || !digest_ok(&s.digest) {
            return Err(format!(
                "a shard is named {:?} {:?}: a plugin id (a-z, 0-9, - and _) and sha256:HEX",
                toolhost_base::log_safe(&s.plugin, 64),
                toolhost_base::log_safe(&s.digest, 80)
            ));
        }
        if !seen.insert(s.plugin.as_str()) {
            return Err(format!("plugin {} has two shards", s.plugin));
        }
    }
    Ok(())
}

/// Reads one shard's bytes as the tools of `plugin`, or why not.
fn decode(
    plugin: &str,
    digest: &str,
    bytes: &[u8],
    max: usize,
) -> Result<Vec<pb::ToolDescriptor>, String> {
    if bytes.len() > max {
        return Err(format!(
            "the shard of {plugin} is {} bytes, over the limit of {max}",
            bytes.len()
        ));
    }
    if shard_digest(bytes) != digest {
        return Err(format!(
            "the shard of {plugin} does not match its digest {digest}"
        ));
    }
    let unknown = toolhost_proto::strict::unknown_fields("toolhost.admin.v1.ToolShard", bytes)
        .map_err(|e| format!("the shard of {plugin} is not a toolhost.admin.v1.ToolShard: {e}"))?;
    if !unknown.is_empty() {
        return Err(format!(
            "the shard of {plugin} has fields this toolhost does not know ({})",
            unknown.join(", ")
        ));
    }
    let shard = <pb::ToolShard as prost::Message>::decode(bytes)
        .map_err(|e| format!("the shard of {plugin} is not a toolhost.admin.v1.ToolShard: {e}"))?;
    if let Some(t) = shard.tools.iter().find(|t| t.plugin_id != plugin) {
        return Err(format!(
            "the shard of {plugin} holds a tool of plugin {}: refused",
            toolhost_base::log_safe(&t.plugin_id, 64)
        ));
    }
    Ok(shard.tools)
}

/// The revision `header` names, as this daemon sees it: the tools of the
/// plugins in `wanted`, from the cache or fetched by one watch of their
/// keys; the rest are never read.
pub(crate) async fn assemble(
    kv: &async_nats::jetstream::kv::Store,
    header: &pb::Snapshot,
    wanted: &BTreeSet<String>,
    cache: &mut ShardCache,
    max: usize,
) -> Result<Assembled, String> {
    check_header(header)?;
    let mine: Vec<&pb::CatalogShard> = header
        .shards
        .iter()
        .filter(|s| wanted.contains(&s.plugin))
        .collect();
    let missing: Vec<&pb::CatalogShard> = mine
        .iter()
        .copied()
        .filter(|s| !cache.by_digest.contains_key(&s.digest))
        .collect();
    if !missing.is_empty() {
        let keys: Vec<String> = missing
            .iter()
            .map(|s| shard_key(&s.plugin, &s.digest))
            .collect();
        let mut watch = kv
            .watch_many_with_history(keys.iter().map(String::as_str))
            .await
            .map_err(|e| format!("cannot read the shards: {e}"))?;
        let mut got: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let deadline = tokio::time::Instant::now() + FETCH_TIMEOUT;
        while got.len() < keys.len() {
            let next = tokio::time::timeout_at(deadline, watch.next()).await;
            let Ok(Some(Ok(e))) = next else { break };
            if e.operation == async_nats::jetstream::kv::Operation::Put {
                got.insert(e.key.clone(), e.value.to_vec());
            }
            if e.delta == 0 && got.len() < keys.len() {
                break;
            }
        }
        for s in &missing {
            let key = shard_key(&s.plugin, &s.digest);
            let Some(bytes) = got.get(&key) else {
                return Err(format!(
                    "the shard {key} the header names is not in the bucket"
                ));
            };
            let tools = decode(&s.plugin, &s.digest, bytes, max)?;
            cache.by_digest.insert(s.digest.clone(), tools);
        }
    }
    let used: BTreeSet<&str> = mine.iter().map(|s| s.digest.as_str()).collect();
    cache.by_digest.retain(|d, _| used.contains(d.as_str()));
    let tools = mine
        .iter()
        .flat_map(|s| cache.by_digest.get(&s.digest).cloned().unwrap_or_default())
        .collect();
    Ok(Assembled {
        snapshot: pb::Snapshot {
            generation: header.generation.clone(),
            revision: header.revision,
            epoch: header.epoch,
            tools,
            shards: Vec::new(),
            retiring: Vec::new(),
        },
        used: mine.len(),
        total: header.shards.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(plugin: &str) -> pb::ToolDescriptor {
        pb::ToolDescriptor {
            plugin_id: plugin.to_owned(),
            local_name: "t".to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn a_shard_is_read_only_as_the_tools_of_its_own_plugin() {
        let bytes = prost::Message::encode_to_vec(&pb::ToolShard {
            tools: vec![tool("pa")],
        });
        let d = shard_digest(&bytes);
        assert_eq!(decode("pa", &d, &bytes, 1 << 20).map(|t| t.len()), Ok(1));
        // Filed under another plugin: it would smuggle pa's tool in.
        let e = decode("pb", &d, &bytes, 1 << 20).unwrap_err();
        assert!(e.contains("holds a tool of plugin pa"), "{e}");
        // Bytes of another digest.
        let other = shard_digest(b"x");
        assert!(
            decode("pa", &other, &bytes, 1 << 20)
                .unwrap_err()
                .contains("does not match")
        );
        assert!(
            decode("pa", &d, &bytes, 2)
                .unwrap_err()
                .contains("over the limit")
        );
    }

    #[test]
    fn a_header_names_each_plugin_once_with_safe_names() {
        let shard = |p: &str, d: &str| pb::CatalogShard {
            plugin: p.to_owned(),
            digest: d.to_owned(),
        };
        let d = shard_digest(b"a");
        let ok = pb::Snapshot {
            shards: vec![shard("pa", &d), shard("pb", &d)],
            ..Default::default()
        };
        assert!(check_header(&ok).is_ok());
        for bad in [
            vec![shard("pa", &d), shard("pa", &d)],
            vec![shard("p.a", &d)],
            vec![shard("pa", "sha256:zz")],
            vec![shard("pa>", &d)],
        ] {
            let h = pb::Snapshot {
                shards: bad,
                ..Default::default()
            };
            assert!(check_header(&h).is_err(), "{h:?}");
        }
        let with_tools = pb::Snapshot {
            shards: vec![shard("pa", &d)],
            tools: vec![tool("pa")],
            ..Default::default()
        };
        assert!(check_header(&with_tools).is_err());
    }
}
