//! Streamable HTTP at `/mcp`: bearer tokens, the DNS-rebinding guards, and
//! rmcp's `StreamableHttpService`.

use crate::direct::Direct;
use crate::gate::{Gate, gate_only};
use crate::oauth::OAuthGate;
use crate::session_calls::SessionCalls;
use crate::sessions::Sessions;
use crate::stack::{Layers, Mcp};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolhost_calls::TokenTable;
use toolhost_mcp::Hub;
use toolhost_mcp::{Handler, Identity};

/// HTTP settings.
#[derive(Clone)]
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
    /// Answer a plain 2025-era `tools/call` (a name and arguments, nothing
    /// else) directly instead of through rmcp: in stateless JSON mode
    /// instead of its per-request server (see `direct`), and on a session
    /// whose client is owed nothing but the result instead of the session's
    /// worker and SSE stream (see `session_calls`). The same answer for
    /// much less work. On by default; off sends every request through rmcp.
    pub direct_calls: bool,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Stops the service (sessions end, new requests are refused).
    pub shutdown: CancellationToken,
    /// A session with no client request for this long is closed (abandoned
    /// sessions do not pile up). Notifications toolhost sends do not count.
    pub session_idle_timeout: std::time::Duration,
    /// `/metrics` (behind the token gate): the daemon's metric families in
    /// the Prometheus text format; `None` serves no `/metrics`.
    pub metrics: Option<Metrics>,
    /// Access tokens from authorization servers (`[http.oauth]`), beside
    /// the static tokens; `None` accepts static tokens only.
    pub oauth: Option<Arc<OAuthGate>>,
}

/// Renders metric families in the Prometheus text format.
pub type Metrics = Arc<dyn Fn() -> String + Send + Sync>;

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("stateless_json", &self.stateless_json)
            .field("direct_calls", &self.direct_calls)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("session_idle_timeout", &self.session_idle_timeout)
            .field("metrics", &self.metrics.is_some())
            .field("oauth", &self.oauth)
            .finish_non_exhaustive()
    }
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
            direct_calls: true,
            // Arguments may be 1 MiB serialized; leave room for the envelope.
            max_body_bytes: 2 * 1024 * 1024,
            shutdown: CancellationToken::new(),
            session_idle_timeout: std::time::Duration::from_secs(300),
            metrics: None,
            oauth: None,
        }
    }
}

/// The HTTP app: `/mcp` (token gate, then rmcp's streamable HTTP service),
/// `/metrics` (token gate), `/healthz` and `/readyz` (open), the resource's
/// OAuth metadata (open), and 401 or 404 for anything else.
#[derive(Clone)]
pub struct HttpApp {
    /// `/mcp` and every path beneath it.
    mcp: Mcp,
    /// Every other path.
    rest: axum::Router,
}

impl HttpApp {
    /// Whether `path` is `/mcp`'s: `/mcp` itself, or beneath it. Matched on
    /// the raw path, as axum's router matches, so `/%6Dcp` is not `/mcp`.
    fn is_mcp(path: &str) -> bool {
        path.strip_prefix("/mcp")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

/// `/mcp`, nearly every request, goes straight to its stack: through
/// axum's router it cost five allocations a request (the route's boxed
/// service cloned, its future boxed twice, the URL parameters), for a
/// match this one comparison makes.
impl tower::Service<Request> for HttpApp {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if Self::is_mcp(request.uri().path()) {
            return tower::Service::call(&mut self.mcp, request);
        }
        Box::pin(tower::ServiceExt::oneshot(self.rest.clone(), request))
    }
}

/// The HTTP app (see [`HttpApp`]) over `hub`, with `tokens` at its gate.
pub fn http_router(hub: Arc<Hub>, tokens: Arc<TokenTable>, options: HttpOptions) -> HttpApp {
    let hub_for_metrics = Arc::clone(&hub);
    let ready_hub = Arc::clone(&hub);
    let allowed_hosts = options.allowed_hosts.clone();
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
    let identity = Identity::Gated;
    // Idleness is toolhost's to judge (see `sessions`): rmcp's own timer
    // counts the notifications toolhost sends as activity.
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    let sessions = Sessions::new(options.session_idle_timeout, options.shutdown.clone());
    hub.set_listen_timeout(options.session_idle_timeout);
    tokio::spawn(crate::sessions::sweep(
        Arc::clone(&sessions),
        Arc::clone(&manager),
        options.shutdown.clone(),
    ));
    let direct = Arc::new(Direct::new(
        Arc::clone(&hub),
        Arc::clone(&tokens),
        &allowed_hosts,
        options.max_body_bytes,
        options.shutdown.clone(),
    ));
    let calls_on_sessions = (!options.stateless_json && options.direct_calls)
        .then(|| Arc::new(SessionCalls::new(Arc::clone(&direct), Arc::clone(&manager))));
    let rmcp = StreamableHttpService::new(
        move || {
            Ok(toolhost_mcp::Traced::new(
                Handler::new(Arc::clone(&hub), identity.clone()),
                toolhost_telemetry::Transport::Http,
            ))
        },
        Arc::new(toolhost_mcp::UnmarkedSessions(manager)),
        config,
    );
    let admission = Arc::new(crate::admission::ListenAdmission {
        hub: Arc::clone(&hub_for_metrics),
        tokens: Arc::clone(&tokens),
        max_body_bytes: options.max_body_bytes,
    });
    let gate = Arc::new(Gate {
        tokens,
        oauth: options.oauth,
        hub: Arc::clone(&ready_hub),
        max_body_bytes: options.max_body_bytes,
    });
    let mcp = Mcp(Arc::new(Layers {
        gate: Arc::clone(&gate),
        plain: (options.stateless_json && options.direct_calls).then_some(direct),
        sessions,
        calls_on_sessions,
        admission,
        rmcp,
    }));
    with_gate_and_probes(mcp, options.metrics, gate, ready_hub)
}

/// `/mcp` (its stack has the token gate, and it is `/mcp` and anything
/// beneath it, as a nested service would be: rmcp reads only the request's
/// host, not its path), `/metrics` behind the token gate, `/healthz` and
/// `/readyz` open.
fn with_gate_and_probes(
    mcp: Mcp,
    metrics: Option<Metrics>,
    gate: Arc<Gate>,
    ready_hub: Arc<Hub>,
) -> HttpApp {
    let metadata = gate.oauth.as_ref().map(|o| o.metadata());
    // Any other path is behind the gate too: without a token it is 401,
    // as `/mcp` is, so a caller without one learns nothing of the paths.
    let unknown = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&gate),
            gate_only,
        ))
        .service_fn(|_: Request| async {
            Ok::<_, std::convert::Infallible>(StatusCode::NOT_FOUND.into_response())
        });
    let mut gated = axum::Router::new().fallback_service(unknown);
    if let Some(render) = metrics {
        gated = gated.route(
            "/metrics",
            axum::routing::get(move || {
                let text = render();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
            })
            .layer(axum::middleware::from_fn_with_state(gate, gate_only)),
        );
    }
    let mut open = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || readyz(Arc::clone(&ready_hub))),
        );
    // The resource's metadata (RFC 9728), open: a client reads it before
    // it has a token. At the path-suffixed URI the challenges name, and at
    // the bare well-known URI for clients that try that first.
    if let Some((path, document)) = metadata {
        let document: Arc<str> = Arc::from(document);
        let serve = move || {
            let document = Arc::clone(&document);
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                        (header::CACHE_CONTROL, "max-age=300"),
                    ],
                    document.to_string(),
                )
            }
        };
        open = open.route(&path, axum::routing::get(serve.clone()));
        if path != "/.well-known/oauth-protected-resource" {
            open = open.route(
                "/.well-known/oauth-protected-resource",
                axum::routing::get(serve),
            );
        }
    }
    HttpApp {
        mcp,
        rest: open.merge(gated),
    }
}

/// Ready when a catalog has been published (embedded: the first revision;
/// managed: the backend's first accepted push).
async fn readyz(hub: Arc<Hub>) -> impl IntoResponse {
    if hub.catalog().current().generation().is_empty() {
        (StatusCode::SERVICE_UNAVAILABLE, "no catalog yet\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

#[cfg(test)]
mod tests {
    use super::HttpApp;

    #[test]
    fn mcp_is_its_path_and_what_is_beneath_it_and_nothing_else() {
        for path in ["/mcp", "/mcp/", "/mcp/sub", "/mcp/a/b"] {
            assert!(HttpApp::is_mcp(path), "{path}");
        }
        for path in [
            "/", "/mcpx", "/mc", "/MCP", "//mcp", "/%6Dcp", "/metrics", "",
        ] {
            assert!(!HttpApp::is_mcp(path), "{path}");
        }
    }
}
