//! The pipeline itself.

use crate::binding::Binding;
use crate::plugins::Plugins;
use crate::result::{CallResult, ErrorCode};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use toolhost_catalog::{Entry, Store};
use toolhost_proto::json::{json_from_struct, struct_from_json};
use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest};
use toolhost_runtime::{InvokeError, log_safe};
use toolhost_validate::{ToolPolicy, check_arguments};
use tracing::Instrument as _;

/// Daemon-wide caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// No call waits longer than this, whatever its tool declares.
    pub max_timeout: Duration,
    /// Largest result (text plus structured content, serialized).
    pub max_result_bytes: usize,
    /// Most calls in flight per plugin; more fail fast as
    /// `plugin_unavailable` instead of queueing behind a slow plugin.
    pub max_calls_per_plugin: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_timeout: Duration::from_secs(300),
            max_result_bytes: 1024 * 1024,
            max_calls_per_plugin: 64,
        }
    }
}

/// Upper bounds (seconds) of the call duration histogram's buckets.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// Calls by (exposed tool, outcome), and a duration histogram.
#[derive(Debug, Clone, Default)]
pub struct CallStats {
    /// (tool, outcome) -> calls. The tool is `""` for unknown names.
    pub calls: std::collections::BTreeMap<(String, &'static str), u64>,
    /// Cumulative counts per bucket of [`DURATION_BUCKETS`].
    pub buckets: [u64; 12],
    /// All calls.
    pub count: u64,
    /// Total seconds.
    pub sum_seconds: f64,
}

/// Step 1 found nothing: a protocol error, `Unknown tool: <name>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unknown tool: {0}")]
pub struct UnknownTool(pub String);

/// The call pipeline, shared by every session.
#[derive(Debug)]
pub struct Pipeline {
    store: Arc<Store>,
    plugins: Arc<Plugins>,
    limits: Limits,
    /// The backend's `Authorize`, when configured.
    authorizer: Option<crate::Authorizer>,
    /// Call counters and the duration histogram.
    stats: std::sync::Mutex<Counters>,
}

/// What [`Pipeline::count`] updates on every call. Keyed by tool, then by
/// the outcome's static word, so a call to a tool already counted finds
/// its slot with a borrowed `&str` and allocates nothing.
#[derive(Debug, Default)]
struct Counters {
    by_tool: std::collections::HashMap<String, std::collections::BTreeMap<&'static str, u64>>,
    buckets: [u64; 12],
    count: u64,
    sum_seconds: f64,
}

impl Pipeline {
    /// A pipeline over this catalog and these plugins.
    #[must_use]
    pub fn new(store: Arc<Store>, plugins: Arc<Plugins>, limits: Limits) -> Self {
        Self {
            store,
            plugins,
            limits,
            authorizer: None,
            stats: std::sync::Mutex::default(),
        }
    }

    /// Asks `authorizer` about every call, after the local checks.
    #[must_use]
    pub fn with_authorizer(mut self, authorizer: crate::Authorizer) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Call counters and durations so far, for metrics.
    #[must_use]
    pub fn stats(&self) -> CallStats {
        let c = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        CallStats {
            calls: c
                .by_tool
                .iter()
                .flat_map(|(tool, outcomes)| outcomes.iter().map(|(o, n)| ((tool.clone(), *o), *n)))
                .collect(),
            buckets: c.buckets,
            count: c.count,
            sum_seconds: c.sum_seconds,
        }
    }

    fn count(&self, tool: &str, outcome: &'static str, took: Duration) {
        let mut s = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcomes = match s.by_tool.get_mut(tool) {
            Some(o) => o,
            None => s.by_tool.entry(tool.to_owned()).or_default(),
        };
        *outcomes.entry(outcome).or_default() += 1;
        let secs = took.as_secs_f64();
        for (i, le) in DURATION_BUCKETS.iter().enumerate() {
            if secs <= *le {
                s.buckets[i] += 1;
            }
        }
        s.count += 1;
        s.sum_seconds += secs;
    }

    /// The catalog store.
    #[must_use]
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The plugins.
    #[must_use]
    pub fn plugins(&self) -> &Arc<Plugins> {
        &self.plugins
    }

    /// Runs one `tools/call`. `cancel` is the agent's cancellation.
    pub async fn call(
        &self,
        binding: &Binding,
        name: &str,
        arguments: Option<Value>,
        cancel: CancellationToken,
    ) -> Result<CallResult, UnknownTool> {
        let started = Instant::now();
        let invocation_id = invocation_id();
        // 1. Resolve among the tools this session can see.
        let catalog = self.store.current();
        let Some(entry) = catalog.resolve(&binding.surface, name).cloned() else {
            tracing::info!(target: "toolhost::audit", invocation_id, tool = %truncate(name),
                task_id = %log_safe(&binding.task_id, 256), session_id = %log_safe(&binding.session_id, 256),
                outcome = "unknown_tool", "tool call");
            // An unknown name is the agent's text: it never becomes a label.
            self.count("", "unknown_tool", started.elapsed());
            return Err(UnknownTool(truncate(name)));
        };
        drop(catalog);
        let d = &entry.descriptor;
        let span = tracing::info_span!("tools/call", invocation_id = %invocation_id, tool = %d.exposed_name, plugin = %d.plugin_id);
        let mut authorized_at = None;
        let result = self
            .run(
                binding,
                &entry,
                &invocation_id,
                arguments,
                cancel,
                &mut authorized_at,
            )
            .instrument(span)
            .await;
        // 8. Audit: ids, outcome and duration; never contents.
        tracing::info!(
            target: "toolhost::audit",
            invocation_id,
            tool = %d.exposed_name,
            plugin = %d.plugin_id,
            // Ids from the configuration or the backend: escaped like any
            // text from outside (a borrow when clean).
            task_id = %log_safe(&binding.task_id, 256),
            session_id = %log_safe(&binding.session_id, 256),
            outcome = result.outcome(),
            catalog_generation = authorized_at.as_ref().map(|v: &CatalogVersion| log_safe(&v.0, 256)).as_deref(),
            catalog_revision = authorized_at.as_ref().map(|v| v.1),
            duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "tool call"
        );
        self.count(&d.exposed_name, result.outcome(), started.elapsed());
        Ok(result)
    }

    async fn run(
        &self,
        binding: &Binding,
        entry: &Arc<Entry>,
        invocation_id: &str,
        arguments: Option<Value>,
        cancel: CancellationToken,
        authorized_at: &mut Option<CatalogVersion>,
    ) -> CallResult {
        let d = &entry.descriptor;
        // Withheld entries (a schema that does not compile, or a pushed
        // declaration that does not match what is installed) fail closed.
        let (true, Ok(schema)) = (entry.is_sound(), &entry.input) else {
            return CallResult::failure(
                ErrorCode::ToolUnavailable,
                format!(
                    "{} is unavailable: its declaration is withheld",
                    d.exposed_name
                ),
                None,
            );
        };
        // 2-4. Bound, normalize aliases, validate.
        let policy = ToolPolicy {
            aliases: &d.aliases,
            unknown: d.unknown_arguments,
        };
        let checked = match check_arguments(schema, &policy, arguments) {
            Ok(c) => c,
            Err(e) => {
                return CallResult::failure(
                    ErrorCode::InvalidArguments,
                    e.message,
                    Some(&e.violations),
                );
            }
        };
        // 5. Authorize against the state now.
        let now = self.store.current();
        let same = now
            .get(&d.exposed_name)
            .is_some_and(|cur| Arc::ptr_eq(cur, entry) || cur.descriptor == *d);
        if !same {
            return CallResult::failure(
                ErrorCode::ToolUnavailable,
                format!(
                    "{} was withdrawn or changed since it was listed; list the tools again",
                    d.exposed_name
                ),
                None,
            );
        }
        // The audit names the version this call was authorized against, so
        // what was dispatched can be checked against what was offered.
        *authorized_at = Some((now.generation().to_owned(), now.revision()));
        drop(now);
        if !binding.is_active() {
            return CallResult::failure(
                ErrorCode::NotAuthorized,
                "this session's binding has been revoked",
                None,
            );
        }
        if !d.on_surface(&binding.surface) {
            return CallResult::failure(
                ErrorCode::NotAuthorized,
                "this tool is not offered on this session's surface",
                None,
            );
        }
        // A plugin still starting (or restarting) is waited for, within
        // the call's own deadline; the wait counts against it.
        let mut deadline =
            Duration::from_millis(u64::from(d.timeout_ms)).min(self.limits.max_timeout);
        let client = match self.plugins.client(&d.plugin_id, &d.plugin_version) {
            Ok(c) => c,
            Err(_) => {
                let waiting = Instant::now();
                let waited = self
                    .plugins
                    .client_within(&d.plugin_id, &d.plugin_version, deadline, &cancel)
                    .await;
                let c = match waited {
                    Ok(c) => c,
                    Err(_) if cancel.is_cancelled() => {
                        return CallResult::failure(
                            ErrorCode::Cancelled,
                            "the call was cancelled by the client",
                            None,
                        );
                    }
                    Err(why) => {
                        return CallResult::failure(ErrorCode::PluginUnavailable, why, None);
                    }
                };
                deadline = deadline.saturating_sub(waiting.elapsed());
                // Authorization is about the state now: after a wait, the
                // catalog and the binding are read again.
                let now = self.store.current();
                let same = now
                    .get(&d.exposed_name)
                    .is_some_and(|cur| Arc::ptr_eq(cur, entry) || cur.descriptor == *d);
                if !same || !binding.is_active() || !d.on_surface(&binding.surface) {
                    return CallResult::failure(
                        ErrorCode::ToolUnavailable,
                        format!(
                            "{} was withdrawn or changed while its plugin was starting; list the tools again",
                            d.exposed_name
                        ),
                        None,
                    );
                }
                *authorized_at = Some((now.generation().to_owned(), now.revision()));
                c
            }
        };
        if let Some(a) = &self.authorizer
            && let Err(why) = a.check(invocation_id, d, binding).await
        {
            return CallResult::failure(ErrorCode::NotAuthorized, why, None);
        }
        let Some(slot) = client.try_reserve(self.limits.max_calls_per_plugin) else {
            return CallResult::failure(
                ErrorCode::PluginUnavailable,
                format!(
                    "plugin {} already has {} calls in flight (the limit); try again shortly",
                    d.plugin_id, self.limits.max_calls_per_plugin
                ),
                None,
            );
        };
        // 6. Dispatch exactly once.
        let request = AgentToolRequest {
            invocation_id: invocation_id.to_owned(),
            name: d.local_name.clone(),
            arguments: Some(struct_from_json(&checked.arguments)),
            context: Some(AgentToolContext {
                task_id: binding.task_id.clone(),
                session_id: binding.session_id.clone(),
                workspace_id: binding.workspace_id.clone().unwrap_or_default(),
                surface: binding.surface.clone(),
            }),
        };
        let answer = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                return CallResult::failure(ErrorCode::Cancelled, "the call was cancelled by the client", None);
            }
            r = client.invoke_in(slot, request, deadline, self.max_answer_bytes()) => r,
        };
        let response = match answer {
            Ok(r) => r,
            Err(InvokeError::Timeout(t)) => {
                return CallResult::failure(
                    ErrorCode::Timeout,
                    format!(
                        "{} did not answer within {} ms; it may or may not have taken effect",
                        d.exposed_name,
                        t.as_millis()
                    ),
                    None,
                );
            }
            Err(e @ InvokeError::Unavailable { .. }) => {
                return CallResult::failure(ErrorCode::PluginUnavailable, e.to_string(), None);
            }
            Err(InvokeError::TooLarge(_)) => {
                return CallResult::failure(
                    ErrorCode::ResultTooLarge,
                    format!(
                        "{}'s answer is larger than the limit of {} bytes; the tool ran and may have done its work, \
                         so do not simply repeat the call: ask for less (a smaller page or range)",
                        d.exposed_name, self.limits.max_result_bytes
                    ),
                    None,
                );
            }
            Err(InvokeError::Refused { code, .. }) => {
                return CallResult::failure(
                    ErrorCode::PluginError,
                    format!(
                        "plugin {} answered with a gRPC error ({code:?})",
                        d.plugin_id
                    ),
                    None,
                );
            }
        };
        // 7. Map the result.
        let structured = response
            .structured_content
            .as_ref()
            .map(|s| Value::Object(json_from_struct(s)));
        let size = response.text.len()
            + structured
                .as_ref()
                .map_or(0, |s| serde_json::to_vec(s).map_or(usize::MAX, |b| b.len()));
        if size > self.limits.max_result_bytes {
            return CallResult::failure(
                ErrorCode::ResultTooLarge,
                format!(
                    "{} answered {size} bytes; the limit is {} bytes",
                    d.exposed_name, self.limits.max_result_bytes
                ),
                None,
            );
        }
        if !response.is_error
            && let Some(Ok(out_schema)) = &entry.output
        {
            let verdict = match &structured {
                Some(s) => out_schema.check_value(s),
                None => Err(toolhost_validate::ArgumentError {
                    message: "no structured content".to_owned(),
                    violations: vec![],
                }),
            };
            if let Err(e) = verdict {
                return CallResult::failure(
                    ErrorCode::PluginError,
                    format!(
                        "plugin {}'s result does not match the tool's declared output schema",
                        d.plugin_id
                    ),
                    Some(&e.violations),
                );
            }
        }
        // Report mode: the dropped names go in `_meta` and the text, never
        // into `structuredContent`, which stays exactly the plugin's (and
        // so matches the output schema it was checked against).
        let mut text = response.text;
        let mut meta = None;
        if !checked.unknown_args.is_empty() {
            text.push_str(&format!(
                "\n(ignored unknown arguments: {})",
                checked.unknown_args.join(", ")
            ));
            let mut m = serde_json::Map::new();
            m.insert(
                "unknown_args".into(),
                Value::from(checked.unknown_args.clone()),
            );
            meta = Some(m);
        }
        CallResult {
            text,
            structured,
            is_error: response.is_error,
            code: None,
            meta,
        }
    }
}

impl Pipeline {
    /// The largest encoded answer read from a plugin: the result limit,
    /// doubled for the protobuf encoding of structured content (larger
    /// than its JSON), plus room for the envelope. Past it, decoding stops
    /// and the answer is `result_too_large`; under it, the exact check on
    /// the mapped result decides.
    fn max_answer_bytes(&self) -> usize {
        self.limits
            .max_result_bytes
            .saturating_mul(2)
            .saturating_add(64 * 1024)
    }
}

/// (generation, revision) of a catalog version.
type CatalogVersion = (String, u64);

/// 128 random bits as 32 hex digits.
fn invocation_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Names from agents are echoed only in `Unknown tool`, and only so long;
/// in a log line, control characters are escaped, so a name cannot forge
/// a line.
fn truncate(name: &str) -> String {
    log_safe(name, 128).into_owned()
}
