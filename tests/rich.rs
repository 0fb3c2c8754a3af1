//! Plugin protocol 2 end to end: the real daemon, `testplug` speaking
//! protocol 2, and rmcp's client in both protocol eras (2025-11-25
//! sessions, and 2026-07-28 requests without a session).
//!
//! Each test reads what the plugin really saw from its `events.log`, and
//! what the agent really got from the client's own handlers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect
#![allow(deprecated)] // rmcp marks logging deprecated; both eras toolhost serves have it

use base64::Engine as _;
use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, ContentBlock, LoggingLevel, NumberOrString, ProgressToken,
    RequestMetaObject, ResourceContents, SetLevelRequestParams,
};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost_e2e::asker::{Asker, ERAS, Era, Reply, call, connect, params, texts};
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, events, eventually, outcome_code, richplug_dir,
    testplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);
const SECRET: &str = "S3CRET-rich-e2e";

/// A daemon serving `rp` (protocol 2) and `tp` (protocol 1).
async fn daemon(root: &Path) -> Daemon {
    let plugins = [richplug_dir(root, "rp"), testplug_dir(root, "tp", "normal")];
    let config = TestConfig::new(root, &plugins)
        .ids("task-rich", "session-rich")
        .build();
    let d = Daemon::start_logging(root, &config, &[], "trace");
    for p in ["rp", "tp"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    d
}

fn with_meta(mut p: CallToolRequestParams, meta: RequestMetaObject) -> CallToolRequestParams {
    p.meta = Some(meta);
    p
}

#[tokio::test]
async fn every_content_kind_arrives_intact_in_both_eras() {
    let root = Scratch::new("rich-media");
    let d = daemon(root.path()).await;
    let bytes: Vec<u8> = (0..=255).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    for era in ERAS {
        let c = connect(&d.url, Asker::new(false), era).await;
        let r = call(&c, params("kandev_rp_media", json!({}))).await;
        assert_eq!(r.is_error, Some(false), "{era:?}: {r:?}");
        assert_eq!(r.content.len(), 7, "{era:?}");
        let v: Vec<Value> = r
            .content
            .iter()
            .map(|b| serde_json::to_value(b).unwrap())
            .collect();
        assert_eq!(
            v[0],
            json!({"type": "text", "text": "every kind", "annotations": {"audience": ["assistant"], "priority": 0.25}})
        );
        assert_eq!(
            v[1],
            json!({"type": "image", "data": b64, "mimeType": "image/png"})
        );
        assert_eq!(
            v[2],
            json!({"type": "audio", "data": b64, "mimeType": "audio/wav"})
        );
        assert_eq!(
            v[3],
            json!({"type": "resource_link", "uri": "https://example.com/report.pdf", "name": "report", "title": "Report",
                   "description": "the full report", "mimeType": "application/pdf", "size": 1234})
        );
        match &r.content[4] {
            ContentBlock::Resource(e) => match &e.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => {
                    assert_eq!(uri, "notes://export/all.md");
                    assert_eq!(mime_type.as_deref(), Some("text/markdown"));
                    assert_eq!(text, "# Notes\n\n- one\n");
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        assert_eq!(v[5]["resource"]["blob"], json!(b64));
        assert_eq!(v[6]["annotations"]["audience"], json!(["user"]));
        assert_eq!(r.structured_content, Some(json!({"blocks": 7})));
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn a_block_that_breaks_a_rule_is_a_plugin_error_naming_the_rule_not_the_content() {
    let root = Scratch::new("rich-bad");
    let d = daemon(root.path()).await;
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    let r = call(&c, params("kandev_rp_bad_block", json!({}))).await;
    assert_eq!(outcome_code(&r), "plugin_error");
    let all = serde_json::to_string(&r).unwrap();
    assert!(
        all.contains("an image's MIME type must be image/*"),
        "{all}"
    );
    assert!(!all.contains("SECRET-BLOCK-BYTES"));
    assert!(!d.logs().contains("SECRET-BLOCK-BYTES"));
    let _ = c.cancel().await;
}

#[tokio::test]
async fn progress_arrives_coalesced_with_the_callers_token_and_only_when_asked() {
    let root = Scratch::new("rich-progress");
    let d = daemon(root.path()).await;
    for era in ERAS {
        let asker = Asker::new(false);
        let c = connect(&d.url, asker.clone(), era).await;
        // 200 updates over about 400 ms: far more than the coalescing rate.
        // (rmcp's client puts a token of its own on every request.)
        let r = call(
            &c,
            params("kandev_rp_steps", json!({"steps": 200, "pause_ms": 2})),
        )
        .await;
        assert_eq!(texts(&r), ["200 steps done"], "{era:?}");
        let got = asker.progress.lock().unwrap().clone();
        assert!(!got.is_empty(), "{era:?}: no progress arrived");
        assert!(
            got.len() < 200,
            "{era:?}: {} updates were not coalesced",
            got.len()
        );
        let token = got[0].progress_token.clone();
        assert!(
            got.iter().all(|p| p.progress_token == token),
            "{era:?}: more than one token"
        );
        assert!(
            got.windows(2).all(|w| w[0].progress < w[1].progress),
            "{era:?}: not increasing"
        );
        let last = got.last().unwrap();
        assert_eq!(
            (last.progress, last.total),
            (200.0, Some(200.0)),
            "{era:?}: the last update was lost"
        );
        assert_eq!(last.message.as_deref(), Some("step 200 of 200"));
        let _ = c.cancel().await;
    }
}

/// One raw 2026-07-28 `tools/call` of `steps`, with `meta` added to the
/// request's `_meta`; returns the response body (SSE or JSON).
async fn raw_steps(d: &Daemon, meta: Value) -> String {
    raw_steps_of(d, meta, 100, 2).await
}

/// [`raw_steps`] with `steps` updates `pause_ms` apart.
async fn raw_steps_of(d: &Daemon, meta: Value, steps: u64, pause_ms: u64) -> String {
    let mut m = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
        m.extend(extra.clone());
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "kandev_rp_steps", "arguments": {"steps": steps, "pause_ms": pause_ms}, "_meta": m}});
    let (status, text) = toolhost_e2e::http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "kandev_rp_steps"),
        ],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&format!("{steps} steps done")), "{text}");
    text
}

#[tokio::test]
async fn progress_goes_out_with_the_token_the_client_sent_and_not_without_one() {
    let root = Scratch::new("rich-rawprogress");
    let d = daemon(root.path()).await;
    let with = raw_steps(&d, json!({"progressToken": "tok-raw"})).await;
    let sent = with.matches("notifications/progress").count();
    assert!(
        (1..100).contains(&sent),
        "{sent} progress notifications: {with}"
    );
    assert_eq!(
        with.matches("\"progressToken\":\"tok-raw\"").count(),
        sent,
        "{with}"
    );
    assert!(
        with.contains("\"progress\":100.0")
            || with.contains("\"progress\":100,")
            || with.contains("\"progress\":100}"),
        "the last update was lost: {with}"
    );
    let without = raw_steps(&d, json!({})).await;
    assert!(!without.contains("notifications/progress"), "{without}");

    // At the plugin's full speed: a handful of notifications, the last one
    // the plugin's last update.
    let flood = raw_steps_of(&d, json!({"progressToken": "tok-flood"}), 20_000, 0).await;
    let sent = flood.matches("notifications/progress").count();
    assert!((1..100).contains(&sent), "{sent} notifications");
    let last = flood
        .lines()
        .rev()
        .find(|l| l.contains("notifications/progress"))
        .unwrap_or_default();
    assert!(
        last.contains("step 20000 of 20000"),
        "the last update was lost: {last}"
    );
}

#[tokio::test]
async fn log_messages_respect_the_level_reach_only_the_caller_and_stay_out_of_the_daemon_log() {
    let root = Scratch::new("rich-logs");
    let d = daemon(root.path()).await;
    let bystander = Asker::new(false);
    let other = connect(&d.url, bystander.clone(), Era::Sessions).await;
    other
        .peer()
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .unwrap();
    for era in ERAS {
        let asker = Asker::new(false);
        let c = connect(&d.url, asker.clone(), era).await;
        // No level set: nothing is sent.
        let _ = call(
            &c,
            params("kandev_rp_steps", json!({"steps": 1, "note": SECRET})),
        )
        .await;
        assert!(
            asker.logs.lock().unwrap().is_empty(),
            "{era:?}: logs without a level"
        );

        let p = params("kandev_rp_steps", json!({"steps": 1, "note": SECRET}));
        let p = match era {
            Era::Sessions => {
                c.peer()
                    .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
                    .await
                    .unwrap();
                p
            }
            Era::Modern => {
                let mut meta = RequestMetaObject::new();
                meta.set_log_level(LoggingLevel::Warning);
                with_meta(p, meta)
            }
        };
        let _ = call(&c, p).await;
        let logs = asker.logs.lock().unwrap().clone();
        let levels: Vec<LoggingLevel> = logs.iter().map(|l| l.level).collect();
        assert_eq!(
            levels,
            [LoggingLevel::Warning, LoggingLevel::Error],
            "{era:?}"
        );
        assert_eq!(
            logs[0].data["message"],
            json!(format!("Warning message {SECRET}"))
        );
        assert_eq!(logs[0].data["data"], json!({"level": "Warning"}));
        let _ = c.cancel().await;
    }
    assert!(
        bystander.logs.lock().unwrap().is_empty(),
        "another session received a caller's logs"
    );
    let _ = other.cancel().await;
    // The daemon's stderr reaches the test through a pipe: wait for it.
    let daemon_log = eventually(
        WAIT,
        "the daemon to record that logs were sent",
        async || {
            let logs = d.logs();
            logs.contains("plugin log message sent to the caller")
                .then_some(logs)
        },
    )
    .await;
    assert!(
        !daemon_log.contains(SECRET),
        "the daemon logged a plugin message's text"
    );
}

#[tokio::test]
async fn questions_round_trip_in_both_eras() {
    let root = Scratch::new("rich-ask");
    let d = daemon(root.path()).await;
    let data = root.path().join("state/data/rp");
    for era in ERAS {
        let asker = Asker::new(true);
        let c = connect(&d.url, asker.clone(), era).await;

        asker.answer(Reply::Accept(json!({"confirm": true, "reason": SECRET})));
        let r = call(&c, params("kandev_rp_confirm", json!({}))).await;
        assert_eq!(r.is_error, Some(false), "{era:?}: {r:?}");
        assert_eq!(
            texts(&r),
            [format!(
                "accepted {}",
                json!({"confirm": true, "reason": SECRET})
            )],
            "{era:?}"
        );
        let q = asker.questions.lock().unwrap().last().cloned().unwrap();
        assert_eq!(q["message"], json!("Delete the notes?"));
        assert_eq!(
            q["requestedSchema"]["properties"]["confirm"]["type"],
            json!("boolean")
        );

        asker.answer(Reply::Decline);
        assert_eq!(
            texts(&call(&c, params("kandev_rp_confirm", json!({}))).await),
            ["declined"],
            "{era:?}"
        );
        asker.answer(Reply::Cancel);
        assert_eq!(
            texts(&call(&c, params("kandev_rp_confirm", json!({}))).await),
            ["cancelled by the user"],
            "{era:?}"
        );

        // An answer that does not match the requested schema never reaches
        // the plugin: the call stops, and the error names no value.
        let before = events(&data, "answered").len();
        asker.answer(Reply::Accept(json!({"confirm": SECRET})));
        let r = call(&c, params("kandev_rp_confirm", json!({}))).await;
        assert_eq!(outcome_code(&r), "invalid_arguments", "{era:?}: {r:?}");
        assert!(!serde_json::to_string(&r).unwrap().contains(SECRET));
        // The text the model reads names the field, as argument errors do.
        let said = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<String>();
        assert!(
            said.contains("/confirm` must be of type boolean"),
            "{era:?}: {said}"
        );
        let seen = eventually(WAIT, "the plugin sees the end of the call", async || {
            let e = events(&data, "answered");
            (e.len() > before).then_some(e)
        })
        .await;
        assert!(seen.last().unwrap().ends_with("ended"), "{era:?}: {seen:?}");
        let leaked = format!("\"confirm\":\"{SECRET}");
        assert!(seen.iter().all(|l| !l.contains(&leaked)), "{seen:?}");
        let _ = c.cancel().await;
    }
    // Nothing from a question or an answer in the daemon's own log.
    assert!(!d.logs().contains(SECRET));
}

#[tokio::test]
async fn a_client_that_cannot_answer_gets_an_error_that_says_so() {
    let root = Scratch::new("rich-noask");
    let d = daemon(root.path()).await;
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    let r = call(&c, params("kandev_rp_confirm", json!({}))).await;
    assert_eq!(outcome_code(&r), "cannot_ask", "{r:?}");
    assert!(texts(&r)[0].contains("cannot answer questions"));
    let _ = c.cancel().await;

    let c = connect(&d.url, Asker::new(false), Era::Modern).await;
    match c.call_tool(params("kandev_rp_confirm", json!({}))).await {
        Err(rmcp::service::ServiceError::McpError(e)) => {
            assert_eq!(
                e.code,
                rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "{e:?}"
            );
            assert!(e.data.unwrap().to_string().contains("elicitation"));
        }
        other => panic!("expected the missing-capability error, got {other:?}"),
    }
    let _ = c.cancel().await;
}

#[tokio::test]
async fn cancelling_during_a_question_reaches_the_plugin() {
    let root = Scratch::new("rich-cancel");
    let d = daemon(root.path()).await;
    let data = root.path().join("state/data/rp");
    for era in ERAS {
        let asker = Asker::new(true);
        asker.answer(Reply::Hold);
        let c = Arc::new(connect(&d.url, asker.clone(), era).await);
        let before = events(&data, "cancelled confirm").len();
        let pending = {
            let c = Arc::clone(&c);
            tokio::spawn(async move { c.call_tool(params("kandev_rp_confirm", json!({}))).await })
        };
        eventually(WAIT, "the question reaches the client", async || {
            (asker.asked.load(Ordering::SeqCst) > 0).then_some(())
        })
        .await;
        // The client gives up: dropping the call cancels it (2025 era);
        // a 2026-07-28 call waits for its answer only until its deadline.
        pending.abort();
        let seen = eventually(WAIT, "the plugin sees the cancellation", async || {
            (events(&data, "cancelled confirm").len() > before).then_some(())
        })
        .await;
        let () = seen;
        d.wait_metric("toolhost_calls_awaiting_answer", 0.0).await;
        if let Ok(c) = Arc::try_unwrap(c) {
            let _ = c.cancel().await;
        }
    }
}

#[tokio::test]
async fn progress_extends_the_deadline_only_where_the_manifest_opts_in() {
    let root = Scratch::new("rich-rolling");
    let d = daemon(root.path()).await;
    let c = connect(&d.url, Asker::new(false), Era::Sessions).await;
    // Both tools have a 400 ms deadline and take 1 s, reporting progress
    // every 100 ms.
    let r = call(&c, params("kandev_rp_rolling", json!({"ms": 1000}))).await;
    assert_eq!(texts(&r), ["rolled 1000 ms"], "{r:?}");
    let r = call(&c, params("kandev_rp_still", json!({"ms": 1000}))).await;
    assert_eq!(outcome_code(&r), "timeout", "{r:?}");
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_protocol_1_plugin_beside_it_is_unchanged() {
    let root = Scratch::new("rich-v1");
    let d = daemon(root.path()).await;
    for era in ERAS {
        let asker = Asker::new(true);
        let c = connect(&d.url, asker.clone(), era).await;
        let p = with_meta(
            params("kandev_tp_echo", json!({"msg": "hi", "n": 1})),
            RequestMetaObject::with_progress_token(ProgressToken(NumberOrString::Number(7))),
        );
        let r = call(&c, p).await;
        assert_eq!(texts(&r), ["echoed"], "{era:?}");
        assert_eq!(
            r.structured_content.unwrap()["arguments"],
            json!({"msg": "hi", "n": 1})
        );
        assert!(asker.progress.lock().unwrap().is_empty());
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn a_plugin_that_breaks_the_stream_rules_gets_plugin_error_and_the_daemon_goes_on() {
    let root = Scratch::new("rich-rules");
    let d = daemon(root.path()).await;
    for era in ERAS {
        let asker = Asker::new(true);
        asker.answer(Reply::Accept(json!({"ok": true})));
        let c = connect(&d.url, asker.clone(), era).await;
        let r = call(&c, params("kandev_rp_bad_question", json!({}))).await;
        assert_eq!(outcome_code(&r), "plugin_error", "{era:?}: {r:?}");
        assert!(
            texts(&r)[0].contains("asked a question that breaks a rule"),
            "{r:?}"
        );
        assert_eq!(
            asker.asked.load(Ordering::SeqCst),
            0,
            "a bad question reached the user"
        );

        let r = call(&c, params("kandev_rp_two_questions", json!({}))).await;
        assert_eq!(outcome_code(&r), "plugin_error", "{era:?}: {r:?}");
        assert!(texts(&r)[0].contains("second question"), "{r:?}");

        // Every block counts: 2 MiB of image (2.7 MiB as base64) is over
        // the 1 MiB limit; 600 KiB of image is 800 KiB of base64, under it.
        let r = call(&c, params("kandev_rp_huge", json!({"bytes": 2_000_000}))).await;
        assert_eq!(outcome_code(&r), "result_too_large", "{era:?}: {r:?}");
        let r = call(&c, params("kandev_rp_huge", json!({"bytes": 900_000}))).await;
        assert_eq!(
            outcome_code(&r),
            "result_too_large",
            "{era:?}: base64 of 900 KB is 1.2 MB"
        );
        let r = call(&c, params("kandev_rp_huge", json!({"bytes": 600_000}))).await;
        assert_eq!(r.is_error, Some(false), "{era:?}: {r:?}");

        // And the plugin still serves.
        let r = call(&c, params("kandev_rp_media", json!({}))).await;
        assert_eq!(r.is_error, Some(false));
        let _ = c.cancel().await;
    }
}

#[tokio::test]
async fn a_second_question_before_the_first_is_answered_is_refused_every_time() {
    // The client answers at once, so the first answer races the second
    // question: the second must lose every time, in both eras, and the
    // user never sees it.
    let root = Scratch::new("rich-two-questions");
    let d = daemon(root.path()).await;
    const RUNS: usize = 100;
    for era in ERAS {
        let asker = Asker::new(true);
        asker.answer(Reply::Accept(json!({"ok": true})));
        let c = connect(&d.url, asker.clone(), era).await;
        for run in 0..RUNS {
            let r = call(&c, params("kandev_rp_two_questions", json!({}))).await;
            assert_eq!(
                outcome_code(&r),
                "plugin_error",
                "{era:?}, run {run}: {r:?}"
            );
            assert!(texts(&r)[0].contains("second question"), "{r:?}");
        }
        let seen = asker.asked.load(Ordering::SeqCst);
        assert!(
            seen <= RUNS,
            "{era:?}: the user saw {seen} questions in {RUNS} calls: a second one got through"
        );
        let _ = c.cancel().await;
    }
    // And the plugin still serves.
    let c = connect(&d.url, Asker::new(true), ERAS[0]).await;
    let r = call(&c, params("kandev_rp_media", json!({}))).await;
    assert_eq!(r.is_error, Some(false));
    let _ = c.cancel().await;

    // Over stdio too, where the answer comes back fastest.
    let file = stdio_config(root.path());
    let mut cmd = tokio::process::Command::new(toolhost_e2e::bin("toolhost"));
    cmd.args(["serve", "--stdio", "--config"]).arg(&file);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let asker = Asker::new(true);
    asker.answer(Reply::Accept(json!({"ok": true})));
    let c = asker.clone().serve(transport).await.unwrap();
    for run in 0..RUNS {
        let r = call(&c, params("kandev_rp_two_questions", json!({}))).await;
        assert_eq!(outcome_code(&r), "plugin_error", "stdio, run {run}: {r:?}");
    }
    let seen = asker.asked.load(Ordering::SeqCst);
    assert!(
        seen <= RUNS,
        "stdio: the user saw {seen} questions in {RUNS} calls"
    );
    let _ = c.cancel().await;
}

/// A configuration for `toolhost serve --stdio` with the rich plugin.
fn stdio_config(root: &std::path::Path) -> std::path::PathBuf {
    let plugins = [richplug_dir(root, "rp")];
    let config = TestConfig::new(root, &plugins)
        .stdio("task-stdio", "session-stdio")
        .build();
    let file = root.join("toolhost.toml");
    std::fs::write(&file, config).unwrap();
    file
}

#[tokio::test]
async fn a_stdio_session_gets_the_same() {
    let root = Scratch::new("rich-stdio");
    let file = stdio_config(root.path());
    let mut cmd = tokio::process::Command::new(toolhost_e2e::bin("toolhost"));
    cmd.args(["serve", "--stdio", "--config"]).arg(&file);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let asker = Asker::new(true);
    asker.answer(Reply::Accept(json!({"confirm": false})));
    let c = asker.clone().serve(transport).await.unwrap();
    // The plugin may still be starting: a call waits for it.
    let r = call(&c, params("kandev_rp_confirm", json!({}))).await;
    assert_eq!(
        texts(&r),
        [format!("accepted {}", json!({"confirm": false}))],
        "{r:?}"
    );
    let r = call(&c, params("kandev_rp_media", json!({}))).await;
    assert_eq!(r.content.len(), 7);
    let r = call(
        &c,
        params("kandev_rp_steps", json!({"steps": 50, "pause_ms": 2})),
    )
    .await;
    assert_eq!(texts(&r), ["50 steps done"]);
    let last = asker.progress.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.progress, 50.0);
    let _ = c.cancel().await;
}

#[tokio::test]
async fn a_forged_or_stale_request_state_resumes_nothing_and_is_not_echoed() {
    let root = Scratch::new("rich-forged");
    let d = daemon(root.path()).await;
    let forged = "0123456789abcdef0123456789abcdef-FORGED";
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "kandev_rp_confirm", "arguments": {},
    "requestState": forged,
    "inputResponses": {"question": {"action": "accept", "content": {"confirm": true}}},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }}});
    let (status, text) = toolhost_e2e::http_request(
        &d.base(),
        "POST",
        "/mcp",
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "kandev_rp_confirm"),
        ],
        &body.to_string(),
    )
    .await;
    assert!(status == 200 || status == 400, "{status}: {text}");
    assert!(
        text.contains("no call of this tool waiting for an answer"),
        "{text}"
    );
    assert!(!text.contains("FORGED"), "the handle was echoed: {text}");
    // The plugin never saw a call.
    assert!(events(&root.path().join("state/data/rp"), "invoked").is_empty());
    assert!(!d.logs().contains("FORGED"));
}

/// On the wire, `elicitation/create` carries a progress token only when the
/// call it belongs to had one (rmcp's own clients always send one, so this
/// speaks raw JSON-RPC over stdio).
#[tokio::test]
async fn a_question_carries_a_progress_token_only_when_its_call_had_one() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let root = Scratch::new("rich-qtoken");
    let file = stdio_config(root.path());
    let mut child = tokio::process::Command::new(toolhost_e2e::bin("toolhost"))
        .args(["serve", "--stdio", "--config"])
        .arg(&file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |v: Value| {
        input.write_all(format!("{v}\n").as_bytes()).await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    let until = async |lines: &mut tokio::io::Lines<_>, pred: &dyn Fn(&Value) -> bool| -> Value {
        tokio::time::timeout(WAIT, async {
            loop {
                let line: String = lines.next_line().await.unwrap().expect("a line");
                let v: Value = serde_json::from_str(&line).unwrap();
                if pred(&v) {
                    return v;
                }
            }
        })
        .await
        .expect("in time")
    };
    until(&mut lines, &|v| v["id"] == 1).await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    for (id, meta) in [(2, None), (3, Some(json!({"progressToken": "p-3"})))] {
        let mut params = json!({"name": "kandev_rp_confirm", "arguments": {}});
        if let Some(m) = &meta {
            params["_meta"] = m.clone();
        }
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})).await;
        let question = until(&mut lines, &|v| v["method"] == "elicitation/create").await;
        let token = question["params"]
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .cloned();
        assert_eq!(
            token.is_some(),
            meta.is_some(),
            "call {id} (meta {meta:?}) asked: {question}"
        );
        send(json!({"jsonrpc": "2.0", "id": question["id"], "result": {
            "action": "accept", "content": {"confirm": true}}}))
        .await;
        let answer = until(&mut lines, &|v| v["id"] == id).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let _ = child.kill().await;
}
