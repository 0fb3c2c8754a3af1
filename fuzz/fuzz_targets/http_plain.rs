//! The direct path for plain stateless calls, against rmcp itself: the same
//! request (arbitrary body, headers picked by the first byte) goes to one
//! router with the direct path and one without, over the same hub and
//! tokens, and the two answers must be the same status, content type and
//! bytes. The direct path may only answer what rmcp would answer, and
//! exactly as rmcp does; any shape it misreads shows here as a difference.
#![no_main]
use axum::body::Body;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower::ServiceExt as _;
use toolhost_catalog::Store;
use toolhost_calls::TokenTable;
use toolhost_http::{HttpOptions, http_router};
use toolhost_mcp::Hub;
use toolhost_pipeline::{Binding, Limits, Pipeline};
use toolhost_runtime::Plugins;

const TOKEN: &str = "fuzz-token-0123456789";

struct Setup {
    rt: tokio::runtime::Runtime,
    direct: axum::Router,
    rmcp: axum::Router,
}

fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a runtime: {e}"));
        let (direct, rmcp) = rt.block_on(async {
            let pipeline = Pipeline::new(
                Arc::new(Store::new("kandev")),
                Arc::new(Plugins::new()),
                Limits::default(),
            );
            let hub = Hub::new(Arc::new(pipeline));
            let tokens = Arc::new(TokenTable::new());
            tokens.bind(TOKEN, Binding::new("chat", "t", "s", None));
            let options = |direct_calls| HttpOptions {
                stateless_json: true,
                direct_calls,
                max_body_bytes: 64 * 1024,
                ..HttpOptions::default()
            };
            (
                http_router(Arc::clone(&hub), Arc::clone(&tokens), options(true)),
                http_router(hub, tokens, options(false)),
            )
        });
        Setup { rt, direct, rmcp }
    })
}

/// The request: headers chosen by the bits of `flags`, the body as given.
fn request(flags: u8, body: &[u8]) -> http::Request<Body> {
    let mut r = http::Request::post("/mcp");
    r = match flags & 0b11 {
        0 => r,
        1 => r.header("mcp-protocol-version", "2025-11-25"),
        2 => r.header("mcp-protocol-version", "2026-07-28"),
        _ => r.header("mcp-protocol-version", "2024-11-05"),
    };
    r = r.header(
        "accept",
        if flags & 0b100 == 0 {
            "application/json, text/event-stream"
        } else {
            "application/json"
        },
    );
    r = r.header(
        "content-type",
        if flags & 0b1000 == 0 { "application/json" } else { "application/json; charset=utf-8" },
    );
    if flags & 0b1_0000 != 0 {
        r = r.header("origin", "http://localhost:1");
    }
    r = r.header("host", if flags & 0b10_0000 == 0 { "localhost" } else { "evil.test" });
    if flags & 0b100_0000 != 0 {
        r = r.header("mcp-session-id", "made-up");
    }
    r = r.header("authorization", format!("Bearer {TOKEN}"));
    r.body(Body::from(body.to_vec())).unwrap_or_else(|e| panic!("a request: {e}"))
}

async fn answer(router: &axum::Router, flags: u8, body: &[u8]) -> Option<(u16, String, Vec<u8>)> {
    let response = router.clone().oneshot(request(flags, body)).await.ok()?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = tokio::time::timeout(
        Duration::from_secs(5),
        axum::body::to_bytes(response.into_body(), 1 << 20),
    )
    .await
    .ok()?
    .ok()?;
    Some((status, content_type, body.to_vec()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else { return };
    let s = setup();
    s.rt.block_on(async {
        let (a, b) = tokio::join!(answer(&s.direct, flags, body), answer(&s.rmcp, flags, body));
        assert_eq!(a, b, "the direct path and rmcp answer differently");
    });
});
