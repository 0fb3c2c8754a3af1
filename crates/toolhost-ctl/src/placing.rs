//! Placement from the operator's side: a placement file (JSON) written to
//! a group's `placement` key (`fleet place`) or given to one managed
//! daemon (`plugins place`), and where each daemon stands against it
//! (`fleet plugins`).
//!
//! The file: `{"revision": 3, "plugins": [{"id": "notes", "reference":
//! "registry.example.com/tools/notes@sha256:…", "values": {"NAME":
//! "value"}, "contract_changes": "hold"}]}`; any other key is refused.

use crate::fleet::NatsTarget;
use anyhow::{Context as _, Result, bail};
use std::path::Path;
use std::process::ExitCode;
use toolhost_base::{log_safe, outln};
use toolhost_proto::admin as pb;

/// A placement file, read strictly.
///
/// # Errors
/// The file cannot be read, is not JSON, or holds a key that is not one.
pub fn read_placement(file: &Path) -> Result<pb::Placement> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let Some(top) = v.as_object() else {
        bail!(
            "{}: a placement is an object with revision and plugins",
            file.display()
        );
    };
    if let Some(k) = top
        .keys()
        .find(|k| !matches!(k.as_str(), "revision" | "plugins"))
    {
        bail!(
            "{}: unknown key {k:?} (a placement has revision and plugins)",
            file.display()
        );
    }
    let revision = top
        .get("revision")
        .and_then(serde_json::Value::as_u64)
        .with_context(|| format!("{}: revision is a positive integer", file.display()))?;
    let mut plugins = Vec::new();
    for (i, p) in top
        .get("plugins")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let Some(o) = p.as_object() else {
            bail!("{}: plugins[{i}] is not an object", file.display());
        };
        if let Some(k) = o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "id" | "reference" | "values" | "contract_changes"
            )
        }) {
            bail!("{}: plugins[{i}]: unknown key {k:?}", file.display());
        }
        let text = |k: &str| {
            o.get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut values = std::collections::HashMap::new();
        if let Some(vals) = o.get("values") {
            let Some(vals) = vals.as_object() else {
                bail!(
                    "{}: plugins[{i}].values is an object of strings",
                    file.display()
                );
            };
            for (k, v) in vals {
                let Some(v) = v.as_str() else {
                    bail!(
                        "{}: plugins[{i}].values.{k} is not a string",
                        file.display()
                    );
                };
                values.insert(k.clone(), v.to_owned());
            }
        }
        plugins.push(pb::PlacedPlugin {
            id: text("id"),
            reference: text("reference"),
            values,
            contract_changes: text("contract_changes"),
        });
    }
    Ok(pb::Placement { revision, plugins })
}

/// Prints where a daemon stands, one plugin a line.
fn print_states(indent: &str, s: &toolhost_fleet::PlacedEntry) {
    for p in &s.plugins {
        let short = |d: &str| {
            d.trim_start_matches("sha256:")
                .chars()
                .take(12)
                .collect::<String>()
        };
        let reason = if p.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", log_safe(&p.reason, 300))
        };
        outln!(
            "{indent}{:<20} {:<9} placed {} installed {}{reason}",
            log_safe(&p.id, 64),
            log_safe(&p.phase, 16),
            short(&p.desired),
            if p.installed.is_empty() {
                "-".to_owned()
            } else {
                short(&p.installed)
            },
        );
    }
    if !s.refused.is_empty() {
        outln!("{indent}placement refused: {}", log_safe(&s.refused, 300));
    }
}

/// `toolhost plugins place FILE`: one managed daemon converges to it.
///
/// # Errors
/// The file is not a placement, or the daemon refused it.
pub(crate) async fn place_admin(c: &mut toolhost_admin::Client, file: &Path) -> Result<ExitCode> {
    let placement = read_placement(file)?;
    let s = c
        .place_plugins(placement)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    let entry = toolhost_fleet::entry_of(s);
    outln!("placement revision {}", entry.revision);
    print_states("  ", &entry);
    Ok(if entry.converged() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `toolhost fleet place FILE`: the group's placement key.
///
/// # Errors
/// The file is not a placement, or the bucket cannot be written.
pub async fn place_fleet(target: &NatsTarget, file: &Path) -> Result<ExitCode> {
    let placement = read_placement(file)?;
    let bytes = prost::Message::encode_to_vec(&placement);
    let kv = target.bucket(true).await?;
    let revision = kv
        .put("placement", bytes.into())
        .await
        .context("cannot write placement")?;
    outln!(
        "put placement (revision {}, {} plugins) as bucket revision {revision}; `toolhost fleet plugins --nats {}` shows the daemons converge",
        placement.revision,
        placement.plugins.len(),
        target.url
    );
    Ok(ExitCode::SUCCESS)
}

/// `toolhost fleet plugins`: the group's placement against each daemon;
/// exit 1 unless every daemon has converged to it.
///
/// # Errors
/// The bucket cannot be read.
pub async fn plugins_fleet(target: &NatsTarget) -> Result<ExitCode> {
    let kv = target.bucket(false).await?;
    let want = match kv.get("placement").await? {
        Some(v) => <pb::Placement as prost::Message>::decode(v.as_ref()).ok(),
        None => None,
    };
    let Some(want) = want else {
        outln!("group {}: no placement (or not a placement)", target.group);
        return Ok(ExitCode::from(1));
    };
    outln!(
        "group {}: placement revision {}",
        target.group,
        want.revision
    );
    for p in &want.plugins {
        outln!(
            "  {:<20} {}",
            log_safe(&p.id, 64),
            log_safe(&p.reference, 300)
        );
    }
    let mut converged = true;
    for (daemon, value) in crate::fleet::status_entries(&kv).await? {
        let entry: Option<toolhost_fleet::StatusEntry> = (value.len()
            <= crate::fleet::MAX_STATUS_BYTES)
            .then(|| serde_json::from_slice(&value).ok())
            .flatten();
        let placed = entry.and_then(|e| e.placement);
        let (flag, placed) = match placed {
            Some(p) if p.revision == want.revision && p.converged() => ("converged", p),
            Some(p) if p.revision == want.revision => ("CONVERGING", p),
            Some(p) => ("BEHIND", p),
            None => ("NO PLACEMENT", toolhost_fleet::PlacedEntry::default()),
        };
        converged &= flag == "converged";
        outln!(
            "  {:<24} revision {:<6} {flag}",
            log_safe(&daemon, 64),
            placed.revision
        );
        print_states("      ", &placed);
    }
    Ok(if converged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
