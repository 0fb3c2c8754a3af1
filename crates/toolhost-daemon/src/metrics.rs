//! `/metrics`: the Prometheus text format, assembled from each part of the
//! daemon's own numbers (the catalog, the sessions, the call host, the
//! plugins, the pipeline, the MCP requests, the fleet link). Names, ids
//! and counts only, never contents.

use std::sync::Arc;
use toolhost_mcp::Hub;
use toolhost_pipeline::Pipeline;
use toolhost_runtime::Plugins;

/// The parts `/metrics` reads.
pub(crate) struct Sources {
    pub(crate) hub: Arc<Hub>,
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) policy: Arc<toolhost_policy::OperatorPolicy>,
    pub(crate) plugins: Arc<Plugins>,
    pub(crate) fleet: Option<Arc<dyn toolhost_managed::LinkStatus>>,
}

/// Appends one metric family's help and type lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Prometheus text format: catalog version and size, plugin states, live
/// sessions, calls by tool and outcome, call durations. Names, ids and
/// counts only, never contents.
///
/// Kept whole on purpose: a flat list of metric families in the order they
/// are exposed; each is a few lines, and the order is the output's.
pub(crate) fn render(sources: &Sources) -> String {
    use std::fmt::Write as _;
    let Sources {
        hub,
        pipeline,
        policy,
        plugins: running,
        fleet,
    } = sources;
    let catalog = pipeline.store().current();
    let mut out = String::new();
    family(
        &mut out,
        "toolhost_catalog_revision",
        "gauge",
        "Revision of the current catalog.",
    );
    let _ = writeln!(out, "toolhost_catalog_revision {}", catalog.revision());
    family(
        &mut out,
        "toolhost_catalog_info",
        "gauge",
        "The current catalog generation.",
    );
    let generation = catalog.generation().replace(['"', '\\', '\n'], "_");
    let _ = writeln!(
        out,
        "toolhost_catalog_info{{generation=\"{generation}\"}} 1"
    );
    family(
        &mut out,
        "toolhost_catalog_tools",
        "gauge",
        "Tools in the current catalog (sound or not).",
    );
    let _ = writeln!(out, "toolhost_catalog_tools {}", catalog.len());
    family(
        &mut out,
        "toolhost_catalog_defects",
        "gauge",
        "Tools withheld.",
    );
    let _ = writeln!(out, "toolhost_catalog_defects {}", catalog.withheld().len());
    family(
        &mut out,
        "toolhost_catalog_last_good",
        "gauge",
        "1 while the catalog is the last one the backend pushed before this start (managed mode, no push since).",
    );
    let _ = writeln!(
        out,
        "toolhost_catalog_last_good {}",
        u8::from(pipeline.store().serving_last_good())
    );
    family(
        &mut out,
        "toolhost_sessions",
        "gauge",
        "MCP sessions (initializing ones included) and subscriptions, counted against max_sessions.",
    );
    let _ = writeln!(out, "toolhost_sessions {}", hub.session_count());
    family(
        &mut out,
        "toolhost_mcp_listeners",
        "gauge",
        "Sessions and subscriptions that receive tools/list_changed.",
    );
    let _ = writeln!(out, "toolhost_mcp_listeners {}", hub.listener_count());
    family(
        &mut out,
        "toolhost_http_direct_calls_total",
        "counter",
        "Plain tools/call requests (stateless, or on a session owed nothing but results) answered by toolhost's direct path rather than rmcp's.",
    );
    let _ = writeln!(
        out,
        "toolhost_http_direct_calls_total {}",
        toolhost_http::direct_calls_answered()
    );
    family(
        &mut out,
        "toolhost_approvals_total",
        "counter",
        "Approvals by outcome: asked (a question put to the user), pending (waiting for the operator), granted, denied, expired, refused (nobody could be asked).",
    );
    let a = policy.approvals().stats();
    for (outcome, n) in [
        ("asked", a.asked),
        ("pending", a.pending_created),
        ("granted", a.granted),
        ("denied", a.denied),
        ("expired", a.expired),
        ("refused", a.refused),
    ] {
        let _ = writeln!(out, "toolhost_approvals_total{{outcome=\"{outcome}\"}} {n}");
    }
    family(
        &mut out,
        "toolhost_rule_budget_refusals_total",
        "counter",
        "Calls refused before their argument rules ran, because the rules could cost more than their budget at the call's argument size.",
    );
    let _ = writeln!(
        out,
        "toolhost_rule_budget_refusals_total {}",
        policy.rules().over_budget()
    );
    family(
        &mut out,
        "toolhost_calls_awaiting_answer",
        "gauge",
        "Calls parked until a 2026-07-28 client answers the plugin's question.",
    );
    let _ = writeln!(
        out,
        "toolhost_calls_awaiting_answer {}",
        hub.host().parked_len()
    );
    family(
        &mut out,
        "toolhost_tasks",
        "gauge",
        "Tool calls hosted as MCP tasks, by state (finished ones while their results are kept).",
    );
    for (state, n) in hub.tasks().counts() {
        let _ = writeln!(out, "toolhost_tasks{{state=\"{state}\"}} {n}");
    }
    family(
        &mut out,
        "toolhost_plugin_state",
        "gauge",
        "1 for the state each plugin is in.",
    );
    let plugins = running.all();
    for h in &plugins {
        let _ = writeln!(
            out,
            "toolhost_plugin_state{{plugin=\"{}\",state=\"{}\"}} 1",
            h.id(),
            h.phase().as_str()
        );
    }
    let waiting = running.needs_config();
    for id in waiting.keys() {
        let _ = writeln!(
            out,
            "toolhost_plugin_state{{plugin=\"{id}\",state=\"needs_config\"}} 1"
        );
    }
    family(
        &mut out,
        "toolhost_plugin_config_missing",
        "gauge",
        "1 for each required configuration item a plugin waits for (it is not started until set).",
    );
    for (id, missing) in waiting.iter() {
        for key in missing {
            let _ = writeln!(
                out,
                "toolhost_plugin_config_missing{{plugin=\"{id}\",key=\"{key}\"}} 1"
            );
        }
    }
    family(
        &mut out,
        "toolhost_plugin_restarts_total",
        "counter",
        "Restarts per plugin.",
    );
    for h in &plugins {
        let _ = writeln!(
            out,
            "toolhost_plugin_restarts_total{{plugin=\"{}\"}} {}",
            h.id(),
            h.restarts()
        );
    }
    let stats = pipeline.stats();
    family(
        &mut out,
        "toolhost_tool_calls_total",
        "counter",
        "Tool calls by exposed tool and outcome (tool is empty for unknown names).",
    );
    for ((tool, outcome), n) in &stats.calls {
        let _ = writeln!(
            out,
            "toolhost_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    family(
        &mut out,
        "toolhost_tool_call_duration_seconds",
        "histogram",
        "Time from a call's resolution to its answer.",
    );
    for (le, n) in toolhost_pipeline::DURATION_BUCKETS
        .iter()
        .zip(stats.buckets)
    {
        let _ = writeln!(
            out,
            "toolhost_tool_call_duration_seconds_bucket{{le=\"{le}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "toolhost_tool_call_duration_seconds_bucket{{le=\"+Inf\"}} {}",
        stats.count
    );
    let _ = writeln!(
        out,
        "toolhost_tool_call_duration_seconds_sum {}",
        stats.sum_seconds
    );
    let _ = writeln!(
        out,
        "toolhost_tool_call_duration_seconds_count {}",
        stats.count
    );
    hub.render_operations(&mut out);
    if let Some(link) = fleet {
        out.push_str(&link.metrics());
    }
    out
}
