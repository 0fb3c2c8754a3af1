//! `toolhost catalog`: show or push a running daemon's catalog over the
//! admin socket, or build a snapshot of plugin directories with no daemon.

use crate::ops::{Target, status_error};
use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost_admin::admin as pb;
use toolhost_base::term::Format;
use toolhost_base::{outjson, outln};
use toolhost_managed::{snapshot_from_proto, snapshot_to_proto};

/// `toolhost catalog ...`.
#[derive(Debug, clap::Subcommand)]
pub enum CatalogCommand {
    /// Print the current catalog as JSON (the format `catalog push` takes).
    Show,
    /// Print a catalog snapshot (JSON) of every tool of these plugin
    /// directories, with no daemon: what a small fleet without a backend
    /// pushes (`toolhost fleet push`). Each build is a newer revision of
    /// generation `cli` (the revision is the time in milliseconds), so a
    /// later build supersedes an earlier one and a delayed older one is
    /// refused as stale.
    Build {
        /// Plugin directories (each with a plugin.toml).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The exposed names' prefix, as the daemons' `prefix`.
        #[arg(long, default_value = "kandev")]
        prefix: String,
        /// The generation.
        #[arg(long, default_value = "cli")]
        generation: String,
        /// The generation's epoch: a backend taking over uses a greater one.
        #[arg(long, default_value_t = 1)]
        epoch: u64,
        /// The revision (default: the time, in milliseconds).
        #[arg(long)]
        revision: Option<u64>,
    },
    /// Push a catalog snapshot (JSON) to a daemon in managed mode. Exit 0
    /// when accepted or unchanged, 1 when stale, in conflict or invalid.
    Push {
        /// The snapshot file.
        file: PathBuf,
        /// Write it to this NATS server's bucket instead (the fleet's
        /// catalog key for --group), for every daemon of the group. A
        /// server that needs credentials or TLS: `toolhost fleet push`.
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
        /// The fleet's bucket (with --nats).
        #[arg(long, default_value = "toolhost", requires = "nats")]
        bucket: String,
        /// The fleet's group (with --nats).
        #[arg(long, default_value = "default", requires = "nats")]
        group: String,
    },
    /// Managed mode, a plugin under contract_changes = "hold": serve a
    /// pushed tool held because its title, description or instructions
    /// differ from what its plugin declares, accepting the contract it has
    /// now (printed, with its texts).
    ///
    /// Name the contract fingerprint you reviewed (the held reason and
    /// `toolhost status` name it): if the backend pushed other texts
    /// since, nothing is accepted.
    Accept {
        /// The tool's exposed name.
        tool: String,
        /// The contract fingerprint you reviewed.
        #[arg(long)]
        contract: String,
    },
}

/// Shows or pushes the daemon's catalog.
pub async fn catalog(t: &Target, cmd: &CatalogCommand) -> Result<ExitCode> {
    let mut c = t.connect().await?;
    match cmd {
        // No daemon needed; `cli` dispatches it before connecting.
        CatalogCommand::Build {
            paths,
            prefix,
            generation,
            epoch,
            revision,
        } => crate::fleet::build_catalog(paths, prefix, generation, *epoch, *revision),
        CatalogCommand::Accept { tool, contract } => accept(&mut c, tool, contract).await,
        CatalogCommand::Show => {
            let snap = c
                .get_catalog(pb::GetCatalogRequest {})
                .await
                .map_err(|e| status_error(&e))?
                .into_inner();
            let snap = snapshot_from_proto(snap)
                .map_err(|p| anyhow::anyhow!("unreadable catalog: {p:?}"))?;
            outjson!(serde_json::to_string_pretty(&snap)?);
            Ok(ExitCode::SUCCESS)
        }
        CatalogCommand::Push { file, .. } => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let snap: toolhost_catalog::Snapshot = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a catalog snapshot", file.display()))?;
            let r = c
                .push_catalog(pb::PushCatalogRequest {
                    snapshot: Some(snapshot_to_proto(&snap)),
                })
                .await
                .map_err(|e| status_error(&e))?
                .into_inner();
            let outcome =
                pb::PushOutcome::try_from(r.outcome).unwrap_or(pb::PushOutcome::Unspecified);
            print_push(t, &snap, &r, outcome);
            Ok(match outcome {
                pb::PushOutcome::Accepted | pb::PushOutcome::Unchanged => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            })
        }
    }
}

/// The answer to `toolhost catalog push`, as JSON or as lines.
fn print_push(
    t: &Target,
    snap: &toolhost_catalog::Snapshot,
    r: &pb::PushCatalogResponse,
    outcome: pb::PushOutcome,
) {
    let word = outcome
        .as_str_name()
        .trim_start_matches("PUSH_OUTCOME_")
        .to_ascii_lowercase();
    if t.format == Format::Json {
        let defects: Vec<_> = r
            .defects
            .iter()
            .map(|d| serde_json::json!({ "tool": d.tool, "reason": d.reason }))
            .collect();
        outjson!(serde_json::json!({
            "outcome": word,
            "offered": { "generation": snap.generation, "epoch": snap.epoch, "revision": snap.revision },
            "generation": r.generation,
            "revision": r.revision,
            "reasons": r.reasons,
            "defects": defects,
            "defects_total": r.defects_total,
        }));
    } else {
        outln!(
            "{word}: offered generation {} epoch {} revision {}; now generation {} revision {}",
            snap.generation,
            snap.epoch,
            snap.revision,
            r.generation,
            r.revision
        );
        for reason in &r.reasons {
            outln!("  reason: {reason}");
        }
        for d in &r.defects {
            outln!("  withheld: {}: {}", d.tool, d.reason);
        }
        let more = (r.defects_total as usize).saturating_sub(r.defects.len());
        if more > 0 {
            outln!("  and {more} more withheld (toolhost status counts them)");
        }
    }
}

/// `toolhost catalog accept TOOL`: the contract accepted, with its texts.
async fn accept(c: &mut toolhost_admin::Client, tool: &str, contract: &str) -> Result<ExitCode> {
    let r = c
        .accept_contract(pb::AcceptContractRequest {
            tool: tool.to_owned(),
            contract: contract.to_owned(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    let line = |s: &str| toolhost_base::term::one_line(s).into_owned();
    outln!("accepted contract {} of {}", line(&r.contract), line(tool));
    if !r.title.is_empty() {
        outln!("  title: {}", line(&r.title));
    }
    outln!("  description: {}", line(&r.description));
    outln!(
        "served: catalog generation {} revision {}",
        line(&r.generation),
        r.revision
    );
    Ok(ExitCode::SUCCESS)
}
