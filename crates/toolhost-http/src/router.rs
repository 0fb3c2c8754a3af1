//! Streamable HTTP at `/mcp`: bearer tokens, the DNS-rebinding guards, and
//! rmcp's `StreamableHttpService`.

use crate::direct::{Direct, plain_calls};
use crate::identity::bearer_token;
use crate::oauth::OAuthGate;
use crate::session_calls::{SessionCalls, session_calls};
use crate::sessions::{Sessions, own_sessions};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolhost_calls::TokenTable;
use toolhost_mcp::Authorized;
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

/// What the gate knows: the static tokens, and the OAuth side if any.
struct Gate {
    tokens: Arc<TokenTable>,
    oauth: Option<Arc<OAuthGate>>,
    hub: Arc<Hub>,
    max_body_bytes: usize,
}

async fn require_token(
    State(gate): State<Arc<Gate>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = bearer_token(request.headers());
    if let Some((binding, owner)) = token.and_then(|t| {
        gate.tokens
            .resolve(t)
            .map(|b| (b, toolhost_calls::callers::digest(t)))
    }) {
        request
            .extensions_mut()
            .insert(Authorized { binding, owner });
        return next.run(request).await;
    }
    if let Some(oauth) = &gate.oauth {
        let token = token.map(str::to_owned);
        return match oauth
            .admit(token.as_deref(), request, &gate.hub, gate.max_body_bytes)
            .await
        {
            Ok((authorized, mut request)) => {
                request.extensions_mut().insert(authorized);
                next.run(request).await
            }
            Err(answer) => answer,
        };
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
    let service = Shared(Arc::new(StreamableHttpService::new(
        move || {
            Ok(toolhost_mcp::Traced::new(
                Handler::new(Arc::clone(&hub), identity.clone()),
                toolhost_telemetry::Transport::Http,
            ))
        },
        Arc::new(toolhost_mcp::UnmarkedSessions(manager)),
        config,
    )));
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
    let plain_calls_direct = (options.stateless_json && options.direct_calls).then_some(direct);
    let mcp = mcp_stack(
        Arc::clone(&gate),
        plain_calls_direct,
        sessions,
        calls_on_sessions,
        admission,
        service,
    );
    with_gate_and_probes(mcp, options.metrics, gate, ready_hub)
}

/// `/mcp`'s stack, composed by type, outermost first: the token gate, then
/// (stateless) the direct plain calls, the session owners' layer, (on
/// sessions) the direct session calls under it, which hands on only the
/// caller's own sessions and counts their activity, and the listens'
/// admission over rmcp. As layers of an `axum::Router` (and a nested one),
/// every layer boxed its route again and the nest rewrote the URI: about
/// 15 allocations a request (BENCHMARKS.md).
fn mcp_stack(
    gate: Arc<Gate>,
    plain: Option<Arc<Direct>>,
    sessions: Arc<Sessions>,
    calls_on_sessions: Option<Arc<SessionCalls>>,
    admission: Arc<crate::admission::ListenAdmission>,
    service: Shared,
) -> impl tower::Service<
    Request,
    Response = Response,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(gate, require_token))
        .option_layer(plain.map(|direct| axum::middleware::from_fn_with_state(direct, plain_calls)))
        .layer(axum::middleware::from_fn_with_state(sessions, own_sessions))
        .option_layer(
            calls_on_sessions
                .map(|calls| axum::middleware::from_fn_with_state(calls, session_calls)),
        )
        .layer(axum::middleware::from_fn_with_state(
            admission,
            crate::admission::admit_listens,
        ))
        .service(service)
}

/// `/mcp` (its stack has the token gate) and `/metrics` behind the token
/// gate, `/healthz` and `/readyz` open.
fn with_gate_and_probes<M>(
    mcp: M,
    metrics: Option<Metrics>,
    gate: Arc<Gate>,
    ready_hub: Arc<Hub>,
) -> axum::Router
where
    M: tower::Service<Request, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    M::Future: Send + 'static,
{
    let metadata = gate.oauth.as_ref().map(|o| o.metadata());
    // `/mcp` and anything beneath it, as a nested service would be (rmcp
    // reads only the request's host, not its path).
    // Any other path is behind the gate too: without a token it is 401,
    // as `/mcp` is, so a caller without one learns nothing of the paths.
    let unknown = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&gate),
            require_token,
        ))
        .service_fn(|_: Request| async {
            Ok::<_, std::convert::Infallible>(StatusCode::NOT_FOUND.into_response())
        });
    let mut gated = axum::Router::new()
        .route_service("/mcp", mcp.clone())
        .route_service("/mcp/", mcp.clone())
        .route_service("/mcp/{*rest}", mcp)
        .fallback_service(unknown);
    if let Some(render) = metrics {
        gated = gated.route(
            "/metrics",
            axum::routing::get(move || {
                let text = render();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
            })
            .layer(axum::middleware::from_fn_with_state(gate, require_token)),
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
    open.merge(gated)
}

/// rmcp's service behind an `Arc`. axum clones a route's whole service
/// stack for every request, and rmcp's service clones its configuration
/// (the allowed hosts and origins, as owned strings) with it: profiled at
/// about 1% of toolhost's CPU per call, on every path, the direct one
/// included. Cloning this is one reference count.
#[derive(Clone)]
struct Shared(Arc<StreamableHttpService<toolhost_mcp::Traced, toolhost_mcp::UnmarkedSessions>>);

impl tower::Service<Request> for Shared {
    type Response = http::Response<
        http_body_util::combinators::BoxBody<axum::body::Bytes, std::convert::Infallible>,
    >;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let service = Arc::clone(&self.0);
        Box::pin(async move { Ok(service.handle(request).await) })
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
