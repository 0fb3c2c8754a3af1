//! `toolhost status`: the daemon at a glance, in a screen at any size.
//!
//! The catalog, the sessions, tasks and policy, and the plugins: every one
//! of them up to 50, past that their count by state and those that need a
//! look, so a daemon of a thousand plugins reads as one of three. Each
//! plugin is the daemon's summary (`ListPluginsRequest.detail` unset), a
//! page at a time; `--detail` asks for everything.
//!
//! What this module must not do: ask the daemon for what it will not
//! print, or print a daemon's text without the escaping rule.

use crate::ops::{Target, status_error};
use crate::show::{disk_line, installed_plugins, one_line_status, plugin_json, plugin_warnings};
use anyhow::Result;
use std::process::ExitCode;
use toolhost_admin::admin as pb;
use toolhost_base::term::Format;
use toolhost_base::{outjson, outln};

/// `toolhost status`'s options.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Which daemon.
    #[command(flatten)]
    pub target: Target,
    /// Every plugin in full. Without it the JSON gives each plugin's
    /// state and what needs the operator, and the text lists each plugin
    /// only up to 50 of them; past that, the count by state and the
    /// plugins that need a look.
    #[arg(long)]
    pub detail: bool,
}

/// Past this many plugins, `status` (text) lists only those that need a
/// look: a daemon's health must read in a screen at any size.
const STATUS_EVERY_PLUGIN_UP_TO: usize = 50;

/// `toolhost status`.
///
/// Kept whole on purpose: it prints the daemon's status top to bottom as the
/// operator reads it; each section is a few lines over the one answer.
pub async fn status(args: &StatusArgs) -> Result<ExitCode> {
    let t = &args.target;
    let mut c = t.connect().await?;
    let st = c
        .get_status(pb::GetStatusRequest {})
        .await
        .map_err(|e| status_error(&e))?
        .into_inner();
    let plugins = installed_plugins(&mut c, args.detail).await?;
    if t.format == Format::Json {
        let plugins: Vec<_> = if args.detail {
            plugins.iter().map(plugin_json).collect()
        } else {
            plugins.iter().map(glance_json).collect()
        };
        outjson!(serde_json::json!({
            "catalog": { "generation": st.generation, "revision": st.revision, "tools": st.tools, "defects": st.defects, "managed": st.managed, "last_good": st.last_good,
                "withheld": st.withheld.iter().map(|d| serde_json::json!({ "tool": d.tool, "reason": d.reason })).collect::<Vec<_>>() },
            "sessions": st.sessions, "bound_tokens": st.bound_tokens, "admin_socket": st.admin_socket,
            "plugin_states": st.plugin_states, "plugins": plugins,
            "tasks": st.tasks,
            "policy": st.policy.as_ref().map(|p| serde_json::json!({
                "approvals": p.approvals, "approvals_pending": p.approvals_pending,
                "token_rate_limit": p.token_rate_limit, "tool_rate_limits": p.tool_rate_limits, "rules": p.rules,
            })),
            "fleet": st.fleet.as_ref().map(|f| serde_json::json!({
                "server": f.server, "bucket": f.bucket, "daemon": f.daemon, "connected": f.connected,
                "last_error": f.last_error, "applied_kv_revision": f.applied_kv_revision,
                "applied_outcome": f.applied_outcome, "reconnects": f.reconnects, "seconds_in_state": f.seconds_in_state,
            })),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let mode = if st.managed && st.last_good {
        "managed by a backend; the last catalog it pushed before this start, served until it pushes again"
    } else if st.managed {
        "managed by a backend"
    } else {
        "embedded (from installed plugins)"
    };
    outln!(
        "catalog   generation {} revision {} ({mode})",
        st.generation,
        st.revision
    );
    outln!("          {} tool(s), {} withheld", st.tools, st.defects);
    if let Some(f) = &st.fleet {
        crate::fleet::link_lines(f);
    }
    for d in &st.withheld {
        outln!(
            "          withheld {}: {}",
            toolhost_base::term::one_line(&d.tool),
            toolhost_base::term::one_line(&d.reason)
        );
    }
    let more = (st.defects as usize).saturating_sub(st.withheld.len());
    if more > 0 {
        outln!("          and {more} more withheld");
    }
    outln!(
        "sessions  {} listening, {} token(s) bound",
        st.sessions,
        st.bound_tokens
    );
    outln!("tasks     {}", task_counts(&st.tasks));
    if let Some(p) = &st.policy {
        crate::show::policy_lines(p);
    }
    if !st.admin_socket.is_empty() {
        outln!("admin     {}", st.admin_socket);
    }
    outln!("plugins   {}", plugin_counts(&st.plugin_states));
    let every = args.detail || plugins.len() <= STATUS_EVERY_PLUGIN_UP_TO;
    let shown: Vec<pb::PluginStatus> = plugins
        .iter()
        .map(one_line_status)
        .filter(|p| every || needs_a_look(p))
        .collect();
    for p in shown.iter().take(if every {
        usize::MAX
    } else {
        STATUS_EVERY_PLUGIN_UP_TO
    }) {
        status_plugin_lines(p);
    }
    if !every {
        let unshown = shown.len().saturating_sub(STATUS_EVERY_PLUGIN_UP_TO);
        if unshown > 0 {
            outln!("  and {unshown} more that need a look");
        }
        outln!(
            "  {} in good order, not listed: toolhost plugins list, or toolhost status --detail",
            plugins.len().saturating_sub(shown.len())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A plugin in `status --format json`: what its text line and the lines
/// under it say, a few hundred bytes whatever the plugin declares
/// (`plugins list --format json` and `--detail` have every field).
fn glance_json(p: &pb::PluginStatus) -> serde_json::Value {
    serde_json::json!({
        "id": p.id, "version": p.version, "origin": p.origin, "enabled": p.enabled, "state": p.state,
        "pid": p.pid, "restarts": p.restarts, "failures": p.failures,
        "crash_loop": p.state == "restarting" && p.failures >= toolhost_runtime::CRASH_LOOP,
        "last_error": p.last_error, "missing_config": p.missing_config,
        "signer": p.signer, "source": p.source,
        "held": p.held.as_ref().map(|h| serde_json::json!({ "version": h.version, "why": h.why })),
        "withheld_total": p.withheld_total,
        "disk_over": p.disk.as_ref().is_some_and(|d| d.over),
        "sandbox_not_enforced": not_enforced(p),
        "needs_a_look": needs_a_look(p),
    })
}

/// The sandbox rules not enforced for `p` (the CPU per call is a limit
/// on calls, not on the process, and not counted).
fn not_enforced(p: &pb::PluginStatus) -> Vec<&str> {
    p.sandbox
        .iter()
        .filter(|r| r.state != "enforced" && r.rule != toolhost_sandbox::Rule::CpuPerCall.as_str())
        .map(|r| r.rule.as_str())
        .collect()
}

/// "1000 installed: 998 ready, 2 failed".
fn plugin_counts(states: &std::collections::HashMap<String, u32>) -> String {
    let total: u64 = states.values().map(|n| u64::from(*n)).sum();
    let mut by: Vec<(&String, &u32)> = states.iter().collect();
    // The most common state first, then by name: the same line each time.
    by.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let parts: Vec<String> = by
        .iter()
        .map(|(s, n)| format!("{n} {}", toolhost_base::term::one_line(s)))
        .collect();
    if parts.is_empty() {
        "none installed".to_owned()
    } else {
        format!("{total} installed: {}", parts.join(", "))
    }
}

/// Whether `p` is more than a ready (or disabled) plugin with nothing to
/// say: what `status` lists when it cannot list every plugin.
fn needs_a_look(p: &pb::PluginStatus) -> bool {
    !matches!(p.state.as_str(), "ready" | "disabled")
        || !p.missing_config.is_empty()
        || p.held.is_some()
        || p.disk.as_ref().is_some_and(|d| d.over)
        || !plugin_warnings(p).is_empty()
}

/// One plugin in `status`: its line, then what needs the operator.
fn status_plugin_lines(p: &pb::PluginStatus) {
    let pid = if p.pid == 0 {
        "-".to_owned()
    } else {
        p.pid.to_string()
    };
    let state = if p.state == "restarting" && p.failures >= toolhost_runtime::CRASH_LOOP {
        format!("CRASH LOOP ({} failures in a row)", p.failures)
    } else {
        p.state.clone()
    };
    outln!(
        "  {:<24} {:<10} {:<11} pid {:<8} restarts {}",
        p.id,
        p.version,
        state,
        pid,
        p.restarts
    );
    crate::show::print_provenance(p, "      ");
    if let Some(h) = &p.held {
        crate::show::print_held(&p.id, h, "      ");
    }
    if !p.last_error.is_empty() {
        outln!("      last error: {}", p.last_error);
    }
    if !p.missing_config.is_empty() {
        outln!("      needs configuration: {}", p.missing_config.join(", "));
    }
    if let Some(d) = p.disk.as_ref().filter(|d| d.over) {
        outln!("      {}", disk_line(d));
    }
    for line in plugin_warnings(p) {
        outln!("      {line}");
    }
    let open = not_enforced(p);
    if !open.is_empty() {
        outln!(
            "      sandbox not enforced: {} (toolhost plugins show {})",
            open.join(", "),
            p.id
        );
    }
}

/// Tasks by state, in the order a task goes through them.
fn task_counts(counts: &std::collections::HashMap<String, u32>) -> String {
    let order = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];
    order
        .iter()
        .map(|s| format!("{} {s}", counts.get(*s).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_by_state_reads_the_same_each_time_most_common_first() {
        let states = [("ready", 998), ("failed", 1), ("disabled", 1)]
            .into_iter()
            .map(|(s, n)| (s.to_owned(), n))
            .collect();
        assert_eq!(
            plugin_counts(&states),
            "1000 installed: 998 ready, 1 disabled, 1 failed"
        );
        assert_eq!(plugin_counts(&Default::default()), "none installed");
        // A state is the daemon's text: one escaped line.
        let odd = [("ready\nroot ok".to_owned(), 1)].into_iter().collect();
        assert!(!plugin_counts(&odd).contains('\n'));
    }

    #[test]
    fn a_ready_plugin_with_nothing_to_say_is_not_listed_past_fifty() {
        let ready = pb::PluginStatus {
            id: "p".into(),
            state: "ready".into(),
            ..Default::default()
        };
        assert!(!needs_a_look(&ready));
        let disabled = pb::PluginStatus {
            state: "disabled".into(),
            ..ready.clone()
        };
        assert!(!needs_a_look(&disabled));
        for look in [
            pb::PluginStatus {
                state: "restarting".into(),
                ..ready.clone()
            },
            pb::PluginStatus {
                missing_config: vec!["token".into()],
                ..ready.clone()
            },
            pb::PluginStatus {
                held: Some(pb::HeldUpgrade::default()),
                ..ready.clone()
            },
            pb::PluginStatus {
                unimplemented_tools: vec!["t".into()],
                ..ready.clone()
            },
            pb::PluginStatus {
                disk: Some(pb::DiskUse {
                    over: true,
                    ..Default::default()
                }),
                ..ready.clone()
            },
        ] {
            assert!(needs_a_look(&look), "{look:?}");
        }
    }
}
