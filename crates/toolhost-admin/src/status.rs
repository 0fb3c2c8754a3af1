//! How a plugin reads on the wire (`PluginStatus`): its lifecycle record
//! (version, origin, configuration's state, asks, grants, signer, a held
//! upgrade, disk, sandbox) over its running process's state.
//!
//! What this module must not do: decide anything; it only translates.

use std::sync::Arc;
use toolhost_proto::admin as pb;
use toolhost_runtime::PluginHandle;

pub(crate) fn status_of(h: &PluginHandle) -> pb::PluginStatus {
    let s = h.state();
    let (unimplemented_tools, undeclared_tools) = h.tool_differences();
    pb::PluginStatus {
        unimplemented_tools,
        undeclared_tools,
        sdk: s
            .described
            .as_ref()
            .map(|d| d.sdk.clone())
            .unwrap_or_default(),
        id: h.id().to_owned(),
        version: h.version().to_owned(),
        state: s.phase.as_str().to_owned(),
        pid: s.pid.unwrap_or(0),
        restarts: s.restarts,
        failures: s.failures,
        last_error: s.last_error.unwrap_or_default(),
        enabled: true,
        ..Default::default()
    }
}

pub(crate) fn config_items(
    items: &[toolhost_lifecycle::settings::ItemStatus],
) -> Vec<pb::ConfigItem> {
    items
        .iter()
        .map(|i| pb::ConfigItem {
            name: i.name.clone(),
            secret: i.secret,
            required: i.required,
            state: i.state.to_owned(),
            source: i.source.map(|s| s.as_str().to_owned()).unwrap_or_default(),
            problem: i.problem.clone().unwrap_or_default(),
        })
        .collect()
}

/// A plugin's state as `PluginStatus.state` says it: its process's phase
/// when it is enabled and has one.
pub(crate) fn state_of(
    enabled: bool,
    needs_config: bool,
    handle: Option<&Arc<PluginHandle>>,
) -> String {
    match handle {
        Some(h) if enabled => h.phase().as_str().to_owned(),
        _ if !enabled => "disabled".to_owned(),
        _ if needs_config => "needs_config".to_owned(),
        _ => "stopped".to_owned(),
    }
}

/// A plugin's status from its lifecycle record and its running process.
pub(crate) fn plugin_status(
    info: toolhost_lifecycle::PluginInfo,
    handle: Option<&Arc<PluginHandle>>,
) -> pb::PluginStatus {
    let mut st = match handle {
        Some(h) if info.enabled => status_of(h),
        _ => pb::PluginStatus {
            id: info.id.clone(),
            state: state_of(info.enabled, !info.needs_config.is_empty(), None),
            ..Default::default()
        },
    };
    st.version = info.version;
    st.origin = info.origin.to_owned();
    st.enabled = info.enabled;
    st.config = config_items(&info.config);
    st.missing_config = info.needs_config;
    st.asks = info.asks;
    st.ungranted = info.ungranted;
    st.config_file_problems = info.config_file_problems;
    st.signer = info.signer;
    st.source = info.source.unwrap_or_default();
    st.held = info.held.map(|h| pb::HeldUpgrade {
        source: h.source.unwrap_or_default(),
        version: h.version,
        why: h.why,
        changes: h.changes,
        statement: h.statement,
        downgrade: h.downgrade,
    });
    st.disk = info.disk.map(|d| pb::DiskUse {
        used_bytes: d.used.unwrap_or(0),
        limit_bytes: d.limit,
        kernel: matches!(
            d.enforcement,
            toolhost_sandbox::disk::Enforcement::Kernel(_)
        ),
        mechanism: match &d.enforcement {
            toolhost_sandbox::disk::Enforcement::Kernel(how) => (*how).to_owned(),
            toolhost_sandbox::disk::Enforcement::Measured(_) => {
                format!("measured every {:.1} s", d.every.as_secs_f64())
            }
        },
        over: d.over,
        short: d.short,
        read_only: d.read_only,
        used_files: d.used_files.unwrap_or(0),
        limit_files: d.limit_files,
        measured: d.used.is_some(),
    });
    st.sandbox = info
        .sandbox
        .iter()
        .map(|r| pb::SandboxRule {
            rule: r.rule.as_str().to_owned(),
            state: r.state.as_str().to_owned(),
            detail: r.detail.clone(),
        })
        .collect();
    st
}
