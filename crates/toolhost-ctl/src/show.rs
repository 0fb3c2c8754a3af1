//! How a plugin's status reads on a terminal and as JSON: what it asks
//! for and is granted, its configuration's state, its sandbox and its
//! disk. Every text field comes from the daemon, which got much of it from
//! plugins, manifests and archives, so text output shows each field as
//! one escaped line ([`one_line_status`]).

use toolhost_admin::admin as pb;
use toolhost_base::outln;

/// `p` with every text field cut to one escaped line, for the text
/// output: the daemon's answer carries what plugins (their `Describe`,
/// their stderr in `last_error`), manifests and archives said.
pub(crate) fn one_line_status(p: &pb::PluginStatus) -> pb::PluginStatus {
    use toolhost_base::term::one_line;
    let line = |s: &String| one_line(s).into_owned();
    let lines = |v: &Vec<String>| v.iter().map(line).collect();
    pb::PluginStatus {
        id: line(&p.id),
        version: line(&p.version),
        state: line(&p.state),
        last_error: line(&p.last_error),
        origin: line(&p.origin),
        signer: line(&p.signer),
        source: line(&p.source),
        withheld: p
            .withheld
            .iter()
            .map(|d| pb::Defect {
                tool: line(&d.tool),
                reason: line(&d.reason),
            })
            .collect(),
        config: p
            .config
            .iter()
            .map(|i| pb::ConfigItem {
                name: line(&i.name),
                state: line(&i.state),
                source: line(&i.source),
                problem: line(&i.problem),
                ..i.clone()
            })
            .collect(),
        missing_config: lines(&p.missing_config),
        asks: lines(&p.asks),
        ungranted: lines(&p.ungranted),
        sandbox: p
            .sandbox
            .iter()
            .map(|r| pb::SandboxRule {
                rule: line(&r.rule),
                state: line(&r.state),
                detail: line(&r.detail),
            })
            .collect(),
        unimplemented_tools: lines(&p.unimplemented_tools),
        undeclared_tools: lines(&p.undeclared_tools),
        sdk: line(&p.sdk),
        config_file_problems: lines(&p.config_file_problems),
        policies: p
            .policies
            .iter()
            .map(|t| pb::ToolPolicy {
                tool: line(&t.tool),
                approval: line(&t.approval),
                rate_limit: line(&t.rate_limit),
                rules: t.rules,
            })
            .collect(),
        held: p.held.as_ref().map(|h| pb::HeldUpgrade {
            version: line(&h.version),
            why: line(&h.why),
            changes: lines(&h.changes),
            statement: line(&h.statement),
            downgrade: h.downgrade,
            source: line(&h.source),
        }),
        ..p.clone()
    }
}

/// An upgrade held for the operator, and what to do about it.
pub(crate) fn print_held(id: &str, h: &pb::HeldUpgrade, indent: &str) {
    let statement = if h.statement.is_empty() {
        String::new()
    } else {
        format!(", statement {}", h.statement)
    };
    let back = if h.downgrade {
        " (an older version: the operator allowed it)"
    } else {
        ""
    };
    let statement = if h.source.is_empty() {
        statement
    } else {
        format!("{statement}, from {}", h.source)
    };
    outln!(
        "{indent}held: version {}{statement}{back} waits for the operator ({}); accept what you reviewed: toolhost plugins accept {id} --version {}; reject: toolhost plugins reject {id}",
        h.version,
        h.why,
        h.version
    );
}

pub(crate) fn print_config(items: &[pb::ConfigItem]) {
    for i in items {
        let mut what = i.state.clone();
        if !i.source.is_empty() && i.source != i.state {
            what = format!("{what} ({})", i.source);
        }
        let kind = if i.secret { " secret" } else { "" };
        outln!("    config {}{kind}: {what}", i.name);
        if !i.problem.is_empty() {
            outln!("      problem: {}", i.problem);
        }
    }
}

/// What the operator should fix, one line each: the configuration file's
/// problems, and where the running code and the manifest disagree.
pub(crate) fn plugin_warnings(p: &pb::PluginStatus) -> Vec<String> {
    let mut out = Vec::new();
    for problem in &p.config_file_problems {
        out.push(format!("config file: {problem}"));
    }
    if !p.unimplemented_tools.is_empty() {
        out.push(format!(
            "tools declared but not implemented: {} (calls to them fail; add a handler or remove them from plugin.toml)",
            p.unimplemented_tools.join(", ")
        ));
    }
    if !p.undeclared_tools.is_empty() {
        out.push(format!(
            "tools implemented but not declared: {} (no agent can call them; declare them in plugin.toml)",
            p.undeclared_tools.join(", ")
        ));
    }
    out
}

/// Who signed a plugin's package, and the registry reference it was
/// pulled from.
pub(crate) fn print_provenance(p: &pb::PluginStatus, indent: &str) {
    if !p.signer.is_empty() {
        outln!("{indent}signer: {}", p.signer);
    }
    if !p.source.is_empty() {
        outln!("{indent}source: {}", p.source);
    }
}

/// What a plugin asks for, what it is granted, and its sandbox.
pub(crate) fn print_grants(p: &pb::PluginStatus) {
    print_provenance(p, "    ");
    if let Some(h) = &p.held {
        print_held(&p.id, h, "    ");
        for c in &h.changes {
            outln!("      {c}");
        }
    }
    if !p.sdk.is_empty() {
        outln!("    built on {}", p.sdk);
    }
    for line in plugin_warnings(p) {
        outln!("    {line}");
    }
    if !p.missing_config.is_empty() {
        outln!(
            "    needs configuration: {} (toolhost plugins config {} NAME=VALUE)",
            p.missing_config.join(", "),
            p.id
        );
    }
    for a in &p.asks {
        if !a.starts_with("config ") {
            outln!("    {a}");
        }
    }
    if !p.ungranted.is_empty() {
        outln!(
            "    not granted: {} (grant = [..] under [plugin.\"{}\"] in the configuration)",
            p.ungranted.join(", "),
            p.id
        );
    }
}

/// A data directory's use against its quota, in MiB.
pub(crate) fn disk_line(d: &pb::DiskUse) -> String {
    let used = if d.measured {
        format!("{:.1} MiB", mib(d.used_bytes))
    } else {
        "not measured yet".to_owned()
    };
    let how = toolhost_base::term::one_line(&d.mechanism);
    let over = if d.over {
        "; OVER QUOTA: its data is read-only until it deletes below 90%"
    } else if d.short {
        "; READ-ONLY: the disk holding toolhost's state is nearly full"
    } else if d.read_only {
        "; READ-ONLY until its process that may write is ready"
    } else {
        ""
    };
    let files = if d.measured {
        format!(", {} of {} files", d.used_files, d.limit_files)
    } else {
        String::new()
    };
    format!(
        "disk {used} of {:.0} MiB{files} ({how}){over}",
        mib(d.limit_bytes)
    )
}

#[allow(clippy::cast_precision_loss)] // a display in MiB
fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

pub(crate) fn print_sandbox(p: &pb::PluginStatus) {
    if let Some(d) = &p.disk {
        outln!("    {}", disk_line(d));
    }
    for r in &p.sandbox {
        outln!("    sandbox {:<13} {:<13} {}", r.rule, r.state, r.detail);
    }
}

/// Each tool's policy: approval, its own rate limit, its rules.
pub(crate) fn print_policies(policies: &[pb::ToolPolicy]) {
    for t in policies {
        let rate = if t.rate_limit.is_empty() {
            "no limit of its own"
        } else {
            &t.rate_limit
        };
        outln!(
            "    policy  {}: approval {}; {rate}; {} rule(s)",
            t.tool,
            t.approval,
            t.rules
        );
    }
}

pub(crate) fn plugin_json(p: &pb::PluginStatus) -> serde_json::Value {
    serde_json::json!({
        "id": p.id, "version": p.version, "origin": p.origin, "signer": p.signer, "source": p.source, "enabled": p.enabled, "state": p.state,
        "held": p.held.as_ref().map(|h| serde_json::json!({ "version": h.version, "why": h.why, "changes": h.changes })),
        "pid": p.pid, "restarts": p.restarts, "failures": p.failures, "crash_loop": p.state == "restarting" && p.failures >= toolhost_runtime::CRASH_LOOP, "last_error": p.last_error,
        "withheld": p.withheld.iter().map(|d| serde_json::json!({ "tool": d.tool, "reason": d.reason })).collect::<Vec<_>>(),
        "withheld_total": p.withheld_total,
        "config": p.config.iter().map(|i| serde_json::json!({ "name": i.name, "secret": i.secret, "required": i.required, "state": i.state, "source": i.source, "problem": i.problem })).collect::<Vec<_>>(),
        "missing_config": p.missing_config,
        "unimplemented_tools": p.unimplemented_tools,
        "undeclared_tools": p.undeclared_tools,
        "sdk": p.sdk,
        "config_file_problems": p.config_file_problems,
        "asks": p.asks,
        "ungranted": p.ungranted,
        "sandbox": p.sandbox.iter().map(|r| serde_json::json!({ "rule": r.rule, "state": r.state, "detail": r.detail })).collect::<Vec<_>>(),
        "policies": p.policies.iter().map(|t| serde_json::json!({ "tool": t.tool, "approval": t.approval, "rate_limit": t.rate_limit, "rules": t.rules })).collect::<Vec<_>>(),
        "disk": p.disk.as_ref().map(|d| serde_json::json!({ "used_bytes": d.measured.then_some(d.used_bytes), "limit_bytes": d.limit_bytes, "used_files": d.measured.then_some(d.used_files), "limit_files": d.limit_files, "kernel": d.kernel, "over": d.over, "short": d.short, "read_only": d.read_only })),
    })
}

/// The operator's word over calls, as `status` shows it.
pub(crate) fn policy_lines(p: &pb::PolicySummary) {
    outln!("policy    approvals: {}", p.approvals);
    if p.approvals_pending > 0 {
        outln!(
            "          {} approval(s) waiting for the operator (toolhost approvals)",
            p.approvals_pending
        );
    }
    let token = if p.token_rate_limit.is_empty() {
        "none".to_owned()
    } else {
        p.token_rate_limit.clone()
    };
    outln!(
        "          rate limits: per token {token}; {} tool(s) with their own",
        p.tool_rate_limits
    );
    outln!("          argument rules: {}", p.rules);
}

/// How many plugins one `ListPlugins` page asks for: summaries are a few
/// hundred bytes each, a plugin in full grows with its tools.
const SUMMARY_PAGE: u32 = 500;
const DETAIL_PAGE: u32 = 50;

fn list_error(e: &tonic::Status) -> anyhow::Error {
    anyhow::anyhow!(
        "{} ({:?})",
        toolhost_base::term::one_line(e.message()),
        e.code()
    )
}

/// One page of plugins in id order, after `after`.
pub(crate) async fn plugins_page(
    c: &mut toolhost_admin::Client,
    detail: bool,
    after: &str,
    page_size: u32,
) -> anyhow::Result<pb::ListPluginsResponse> {
    Ok(c.list_plugins(pb::ListPluginsRequest {
        detail,
        after: after.to_owned(),
        page_size,
        ..Default::default()
    })
    .await
    .map_err(|e| list_error(&e))?
    .into_inner())
}

/// Every installed plugin, a page at a time: a summary of each (see
/// `ListPluginsRequest.detail`), or everything with `detail`.
pub(crate) async fn installed_plugins(
    c: &mut toolhost_admin::Client,
    detail: bool,
) -> anyhow::Result<Vec<pb::PluginStatus>> {
    let size = if detail { DETAIL_PAGE } else { SUMMARY_PAGE };
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let page = plugins_page(c, detail, &after, size).await?;
        all.extend(page.plugins);
        // A daemon that answers a next page it does not move to would
        // keep us asking for ever.
        if page.next_after.is_empty() || page.next_after <= after {
            return Ok(all);
        }
        after = page.next_after;
    }
}

/// Everything the daemon knows of plugin `id`; `None` when it is not
/// installed.
pub(crate) async fn one_plugin(
    c: &mut toolhost_admin::Client,
    id: &str,
) -> anyhow::Result<Option<pb::PluginStatus>> {
    let answer = c
        .list_plugins(pb::ListPluginsRequest {
            id: id.to_owned(),
            detail: true,
            ..Default::default()
        })
        .await;
    match answer {
        Ok(r) => Ok(r.into_inner().plugins.into_iter().find(|p| p.id == id)),
        Err(e) if e.code() == tonic::Code::NotFound => Ok(None),
        Err(e) => Err(list_error(&e)),
    }
}

/// [`one_plugin`] for text output: every field one escaped line.
pub(crate) async fn one_plugin_for_text(
    c: &mut toolhost_admin::Client,
    id: &str,
) -> anyhow::Result<Option<pb::PluginStatus>> {
    Ok(one_plugin(c, id).await?.as_ref().map(one_line_status))
}
