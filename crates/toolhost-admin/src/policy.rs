//! What the admin API shows of the operator's word over calls: each
//! tool's policy (`plugins show`), the daemon-wide summary (`status`) and
//! the approvals waiting for the operator, by ids and digests, never
//! arguments.

use toolhost_catalog::Entry;
use toolhost_policy::OperatorPolicy;
use toolhost_proto::admin as pb;

/// The policy over each of `tools` (one plugin's entries in the catalog).
pub(crate) fn tool_policies<'a>(
    p: &OperatorPolicy,
    tools: impl Iterator<Item = &'a Entry>,
) -> Vec<pb::ToolPolicy> {
    tools
        .map(|e| {
            let (approval, rate, rules) = p.describe(&e.descriptor);
            pb::ToolPolicy {
                tool: e.descriptor.exposed_name.clone(),
                approval,
                rate_limit: rate.unwrap_or_default(),
                rules: u32::try_from(rules).unwrap_or(u32::MAX),
            }
        })
        .collect()
}

/// The operator's word over calls, daemon-wide, for `status`.
pub(crate) fn summary(p: &OperatorPolicy) -> pb::PolicySummary {
    let rates = p.rates().policy();
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    pb::PolicySummary {
        approvals: p.approvals().policy().summary(),
        token_rate_limit: rates
            .binding
            .map(|b| format!("{} calls a minute, bursts of {}", b.per_minute, b.burst))
            .unwrap_or_default(),
        tool_rate_limits: n(rates.tools.len()),
        rules: n(p.rules().len()),
        approvals_pending: n(p.approvals().pending().len()),
    }
}

/// A pending approval as the admin API shows it: ids and a digest, never
/// the arguments.
pub(crate) fn approval_entry(p: toolhost_policy::Pending) -> pb::ApprovalEntry {
    pb::ApprovalEntry {
        binding: Some(pb::SessionBinding {
            surface: p.surface,
            task_id: p.task_id,
            session_id: p.session_id,
            workspace_id: String::new(),
        }),
        state: match p.decision {
            None => "pending",
            Some(true) => "approved",
            Some(false) => "denied",
        }
        .to_owned(),
        id: p.id,
        tool: p.tool,
        plugin_id: p.plugin,
        arguments_digest: p.arguments_digest,
        catalog_generation: p.catalog.0,
        catalog_revision: p.catalog.1,
        reason: p.reason,
        requested_at_unix_s: p.requested_at,
        expires_in_s: p.expires_in,
        decision_id: p.decision_id.unwrap_or_default(),
        principal_subject: p.principal.unwrap_or_default(),
    }
}
