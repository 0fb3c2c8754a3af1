//! The operator's word over each call, as the configuration file says it:
//! `[approvals]`, which calls a person must approve before they run, and
//! `[rate_limits]`, how fast each token and each tool may call, and
//! `[[rules]]`, what a call's arguments must satisfy (docs/CONTRACT.md §5).
//! Read, compiled and checked here; the pipeline applies them.

use anyhow::bail;
use serde::Deserialize;
use std::time::Duration;

/// `[approvals]`: which calls a person must approve before they run, and
/// for how long an approval holds. Nothing needs approval without it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsFile {
    /// Every tool annotated `destructive` (and not `read_only`).
    #[serde(default)]
    pub destructive: bool,
    /// These tools, by exposed name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Every tool of these plugins, by id.
    #[serde(default)]
    pub plugins: Vec<String>,
    /// Tools a person may approve for the rest of a session (`"*"`: all).
    #[serde(default)]
    pub session: Vec<String>,
    /// How long an answer, or an approval pending for the operator, holds.
    pub expires_ms: Option<u64>,
    /// How long a "for this session" approval holds.
    pub session_expires_ms: Option<u64>,
}

impl ApprovalsFile {
    /// The policy, defaults filled in and checked.
    pub fn resolve(&self) -> anyhow::Result<toolhost_policy::ApprovalPolicy> {
        let d = toolhost_policy::ApprovalPolicy::default();
        let policy = toolhost_policy::ApprovalPolicy {
            destructive: self.destructive,
            tools: self.tools.iter().cloned().collect(),
            plugins: self.plugins.iter().cloned().collect(),
            session: self.session.iter().cloned().collect(),
            lifetime: self.expires_ms.map_or(d.lifetime, Duration::from_millis),
            session_lifetime: self
                .session_expires_ms
                .map_or(d.session_lifetime, Duration::from_millis),
        };
        let day = Duration::from_secs(86_400);
        if policy.lifetime.is_zero() || policy.lifetime > day {
            bail!("[approvals] expires_ms must be 1 ms to 1 day");
        }
        if policy.session_lifetime.is_zero() || policy.session_lifetime > 7 * day {
            bail!("[approvals] session_expires_ms must be 1 ms to 7 days");
        }
        if let Some(t) = policy
            .session
            .iter()
            .find(|t| *t != "*" && !policy.tools.contains(*t))
            .filter(|_| policy.plugins.is_empty() && !policy.destructive)
        {
            bail!(
                "[approvals] session names {t:?}, which needs no approval (list it in tools, or set destructive or plugins)"
            );
        }
        Ok(policy)
    }
}

/// One limit as written: calls a minute, and the most at once.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateFile {
    /// Calls a minute, on average.
    pub per_minute: f64,
    /// The most calls at once (default: a tenth of a minute's calls, at
    /// least 1).
    pub burst: Option<f64>,
}

impl RateFile {
    fn resolve(self, place: &str) -> anyhow::Result<toolhost_policy::Rate> {
        let burst = self.burst.unwrap_or((self.per_minute / 10.0).max(1.0));
        let sane = |v: f64| v.is_finite() && (0.001..=1_000_000.0).contains(&v);
        if !sane(self.per_minute) {
            bail!("[rate_limits] {place}: per_minute must be 0.001 to 1000000");
        }
        if !sane(burst) || burst < 1.0 {
            bail!("[rate_limits] {place}: burst must be 1 to 1000000");
        }
        Ok(toolhost_policy::Rate {
            per_minute: self.per_minute,
            burst,
        })
    }
}

/// `[rate_limits]`: token buckets, per binding (token) and per tool. No
/// limit without it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsFile {
    /// Each token, across every tool it calls.
    pub binding: Option<RateFile>,
    /// Each tool (exposed name), across every caller.
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, RateFile>,
}

impl RateLimitsFile {
    /// The limits, checked.
    pub fn resolve(&self) -> anyhow::Result<toolhost_policy::RatePolicy> {
        Ok(toolhost_policy::RatePolicy {
            binding: self.binding.map(|b| b.resolve("binding")).transpose()?,
            tools: self
                .tools
                .iter()
                .map(|(name, r)| Ok((name.clone(), r.resolve(&format!("tools.{name}"))?)))
                .collect::<anyhow::Result<_>>()?,
        })
    }
}

/// One `[[rules]]` entry: a CEL expression over a call's arguments that
/// must be true for the call to run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    /// The tool it applies to (exposed name).
    pub tool: Option<String>,
    /// Or every tool of this plugin (id).
    pub plugin: Option<String>,
    /// The expression: it sees `args`, `binding` and `tool`.
    pub when: String,
    /// What the agent is told when it is false.
    pub message: String,
}

/// Compiles the `[[rules]]`; a bad one is an error naming its place.
pub fn compile_rules(rules: &[RuleFile]) -> anyhow::Result<toolhost_policy::Rules> {
    use toolhost_policy::{RuleSpec, Rules, Scope};
    let mut specs = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let scope = match (&r.tool, &r.plugin) {
            (Some(t), None) => Scope::Tool(t.clone()),
            (None, Some(p)) => Scope::Plugin(p.clone()),
            _ => bail!(
                "[[rules]] #{}: name exactly one of tool (an exposed name) or plugin (an id)",
                i + 1
            ),
        };
        let target = match &scope {
            Scope::Tool(t) => format!("tool {t}"),
            Scope::Plugin(p) => format!("plugin {p}"),
        };
        specs.push(RuleSpec {
            place: format!("[[rules]] #{} ({target})", i + 1),
            scope,
            expression: r.when.clone(),
            message: r.message.clone(),
        });
    }
    Ok(Rules::compile(&specs)?)
}
