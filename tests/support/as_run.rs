//! For suites that run twice, as root and as an unprivileged user
//! (`.ci/run`): the account plugins run as, a scratch directory that
//! account can reach, and the short forms of a call and of waiting for a
//! plugin that those suites share.

use crate::{AgentClient, Daemon, Scratch, call_tool, outcome_code};
use serde_json::Value;

/// Whether this run is root's.
#[must_use]
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The `[sandbox]` lines for this run: plugins as `nobody` under root.
#[must_use]
pub fn account() -> &'static str {
    if is_root() { "user = \"nobody\"" } else { "" }
}

/// A scratch directory the plugins' account can reach.
#[must_use]
pub fn scratch(tag: &str) -> Scratch {
    use std::os::unix::fs::PermissionsExt as _;
    let s = Scratch::new(tag);
    std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o711))
        .expect("a reachable scratch directory");
    s
}

/// (ok, text) of one call.
pub async fn call(c: &AgentClient, tool: &str, args: Value) -> (bool, String) {
    let (ok, text, _) = probe(c, tool, args).await;
    (ok, text)
}

/// (ok, text, structured) of one call.
pub async fn probe(c: &AgentClient, tool: &str, args: Value) -> (bool, String, Value) {
    let r = call_tool(c, tool, args).await.expect("answered");
    let text = r
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ");
    let structured = r.structured_content.clone().unwrap_or(Value::Null);
    let failed = r.is_error == Some(true) || outcome_code(&r) != "ok";
    (!failed, text, structured)
}

/// Waits until the plugin `id` is ready.
pub async fn ready(d: &Daemon, id: &str) {
    d.wait_metric(
        &format!("toolhost_plugin_state{{plugin=\"{id}\",state=\"ready\"}}"),
        1.0,
    )
    .await;
}
