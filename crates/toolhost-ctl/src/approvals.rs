//! `toolhost approvals`: the calls waiting for the operator's approval
//! (the backend's `Authorize` asked for one), and the operator's decision.
//! An approval covers one repeat of one call (same binding, tool, catalog
//! version and arguments); the list shows the arguments' digest, never the
//! arguments.

use crate::ops::{Target, status_error};
use anyhow::Result;
use std::process::ExitCode;
use toolhost_admin::admin as pb;
use toolhost_base::term::Format;
use toolhost_base::{outjson, outln};

/// `toolhost approvals` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ApprovalsCommand {
    /// Approve a pending call: the agent's next identical call (same
    /// binding, tool, catalog version and arguments) runs, once.
    Approve {
        /// The approval's id, as `toolhost approvals` lists it.
        id: String,
    },
    /// Deny a pending call: the agent's next identical call is refused.
    Deny {
        /// The approval's id.
        id: String,
    },
}

/// `toolhost approvals`: lists the calls waiting for the operator's
/// approval, or decides one.
pub async fn approvals(t: &Target, command: Option<ApprovalsCommand>) -> Result<ExitCode> {
    let mut c = t.connect().await?;
    let decision = match command {
        Some(ApprovalsCommand::Approve { id }) => Some((id, true)),
        Some(ApprovalsCommand::Deny { id }) => Some((id, false)),
        None => None,
    };
    if let Some((id, approve)) = decision {
        let decided = c
            .decide_approval(pb::DecideApprovalRequest {
                id: id.clone(),
                approve,
            })
            .await
            .map_err(|e| status_error(&e))?
            .into_inner()
            .approval
            .unwrap_or_default();
        if approve {
            outln!(
                "approved {id}: the agent's next call of {} with the same arguments runs, once",
                decided.tool
            );
        } else {
            outln!(
                "denied {id}: the agent's next call of {} with the same arguments is refused",
                decided.tool
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let list = c
        .list_approvals(pb::ListApprovalsRequest {})
        .await
        .map_err(|e| status_error(&e))?
        .into_inner()
        .approvals;
    print_list(t.format, list);
    Ok(ExitCode::SUCCESS)
}

/// The pending approvals, as a table or JSON: ids, digests and the
/// backend's reason (escaped), never the arguments.
fn print_list(format: Format, list: Vec<pb::ApprovalEntry>) {
    if format == Format::Json {
        let rows: Vec<_> = list
            .iter()
            .map(|e| {
                let b = e.binding.clone().unwrap_or_default();
                serde_json::json!({
                    "id": e.id, "tool": e.tool, "plugin": e.plugin_id, "state": e.state,
                    "surface": b.surface, "task_id": b.task_id, "session_id": b.session_id,
                    "arguments_digest": e.arguments_digest, "reason": e.reason,
                    "catalog_generation": e.catalog_generation, "catalog_revision": e.catalog_revision,
                    "requested_at_unix_s": e.requested_at_unix_s, "expires_in_s": e.expires_in_s,
                })
            })
            .collect();
        outjson!(serde_json::Value::Array(rows));
        return;
    }
    if list.is_empty() {
        outln!("no approvals pending");
        return;
    }
    outln!(
        "{:<32}  {:<8}  {:>9}  {:<32}  {:<20}  reason",
        "approval",
        "state",
        "expires s",
        "arguments",
        "tool"
    );
    for e in list {
        // The reason is the backend's text: escaped like any text from
        // outside before it reaches a terminal.
        outln!(
            "{:<32}  {:<8}  {:>9}  {:<32}  {:<20}  {}",
            e.id,
            e.state,
            e.expires_in_s,
            e.arguments_digest,
            e.tool,
            toolhost_base::log_safe(&e.reason, 256)
        );
    }
}
