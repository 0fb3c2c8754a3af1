//! Streamable HTTP at `/mcp`: bearer tokens, the DNS-rebinding guards, and
//! rmcp's `StreamableHttpService`.

use crate::handler::{Handler, Identity};
use crate::hub::Hub;
use crate::sessions::{Sessions, own_sessions};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use tokio_util::sync::CancellationToken;
use toolhost_pipeline::Binding;

/// Bearer tokens and the bindings they stand for. Only a SHA-256 of each
/// token is kept: a memory dump does not give the tokens away, and lookups
/// hash first, so timing depends on the hash, not on the secret.
#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: RwLock<HashMap<[u8; 32], Binding>>,
}

/// The SHA-256 of a token: how tokens are keyed, and how sessions know
/// their owner without keeping the token.
pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenTable {
    /// An empty table.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds a token (replacing, and revoking, any earlier binding of it).
    pub fn bind(&self, token: &str, binding: Binding) {
        let old = self
            .by_hash
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(digest(token), binding);
        if let Some(old) = old {
            old.revoke();
        }
    }

    /// Revokes a token: its next request gets 401, and calls of its sessions
    /// already past resolution fail authorization.
    pub fn revoke(&self, token: &str) -> bool {
        let old = self
            .by_hash
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&digest(token));
        old.map(|b| b.revoke()).is_some()
    }

    /// The binding of a token, if it has one.
    #[must_use]
    pub fn resolve(&self, token: &str) -> Option<Binding> {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&digest(token))
            .cloned()
    }

    /// How many tokens are bound.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_hash
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no token is bound.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The token of an `Authorization: Bearer <token>` header.
#[must_use]
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// HTTP settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `Host` values accepted (DNS-rebinding guard). Default: loopback names.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted when a request carries one. Default: loopback
    /// origins on any port; requests without `Origin` (non-browser clients)
    /// pass.
    pub allowed_origins: Vec<String>,
    /// Session-less JSON responses (`legacy_session_mode = false`,
    /// `json_response = true`): cheaper per call, no server-initiated
    /// notifications for legacy clients.
    pub stateless_json: bool,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Stops the service (sessions end, new requests are refused).
    pub shutdown: CancellationToken,
    /// A session with no client request for this long is closed (abandoned
    /// sessions do not pile up). Notifications toolhost sends do not count.
    pub session_idle_timeout: std::time::Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            allowed_hosts: vec![
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
                "[::1]".into(),
            ],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
            ],
            stateless_json: false,
            // Arguments may be 1 MiB serialized; leave room for the envelope.
            max_body_bytes: 2 * 1024 * 1024,
            shutdown: CancellationToken::new(),
            session_idle_timeout: std::time::Duration::from_secs(300),
        }
    }
}

async fn require_token(
    State(tokens): State<Arc<TokenTable>>,
    request: Request,
    next: Next,
) -> Response {
    let known = bearer_token(request.headers()).is_some_and(|t| tokens.resolve(t).is_some());
    if known {
        return next.run(request).await;
    }
    let mut r = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"error":"unauthorized","message":"send Authorization: Bearer <token> with a token toolhost knows"}"#,
    )
        .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// The router: `/mcp` (token gate, then rmcp's streamable HTTP service),
/// `/metrics` (token gate) and `/healthz` (open: it says only "ok").
pub fn http_router(hub: Arc<Hub>, tokens: Arc<TokenTable>, options: HttpOptions) -> axum::Router {
    let hub_for_metrics = Arc::clone(&hub);
    let ready_hub = Arc::clone(&hub);
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowed_hosts)
        .with_allowed_origins(options.allowed_origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(options.shutdown.clone());
    if options.stateless_json {
        config = config
            .with_legacy_session_mode(false)
            .with_json_response(true);
    }
    let identity = Identity::Tokens(Arc::clone(&tokens));
    // Idleness is toolhost's to judge (see `sessions`): rmcp's own timer
    // counts the notifications toolhost sends as activity.
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions = Sessions::new(options.session_idle_timeout);
    hub.set_listen_timeout(options.session_idle_timeout);
    tokio::spawn(crate::sessions::sweep(
        Arc::clone(&sessions),
        Arc::clone(&manager),
        options.shutdown.clone(),
    ));
    let service = StreamableHttpService::new(
        move || Ok(Handler::new(Arc::clone(&hub), identity.clone())),
        manager,
        config,
    );
    let mcp = axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(sessions, own_sessions));
    let metrics_hub = Arc::clone(&hub_for_metrics);
    let gated = axum::Router::new()
        .nest_service("/mcp", mcp)
        .route(
            "/metrics",
            axum::routing::get(move || metrics(Arc::clone(&metrics_hub))),
        )
        .layer(axum::middleware::from_fn_with_state(tokens, require_token));
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || readyz(Arc::clone(&ready_hub))),
        )
        .merge(gated)
}

/// Ready when a catalog has been published (embedded: the first revision;
/// managed: the backend's first accepted push).
async fn readyz(hub: Arc<Hub>) -> impl IntoResponse {
    if hub.pipeline.store().current().generation().is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "no catalog yet\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

/// Appends one metric family's help and type lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Prometheus text format: catalog version and size, plugin states, live
/// sessions, calls by tool and outcome, call durations. Names, ids and
/// counts only, never contents.
async fn metrics(hub: Arc<Hub>) -> impl IntoResponse {
    use std::fmt::Write as _;
    let pipeline = &hub.pipeline;
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
    let _ = writeln!(out, "toolhost_catalog_defects {}", catalog.defects().len());
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
        "toolhost_plugin_state",
        "gauge",
        "1 for the state each plugin is in.",
    );
    let plugins = pipeline.plugins().all();
    for h in &plugins {
        let _ = writeln!(
            out,
            "toolhost_plugin_state{{plugin=\"{}\",state=\"{}\"}} 1",
            h.id(),
            h.state().phase.as_str()
        );
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
            h.state().restarts
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
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_parse() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn revoking_a_token_revokes_its_binding() {
        let t = TokenTable::new();
        t.bind("secret", Binding::new("chat", "t", "s", None));
        let b = t.resolve("secret");
        assert!(b.as_ref().is_some_and(Binding::is_active));
        assert!(t.revoke("secret"));
        assert!(t.resolve("secret").is_none());
        assert!(b.is_some_and(|b| !b.is_active()));
    }
}
