//! Progress at its maximum rate: one protocol-2 call whose plugin reports
//! `steps` updates 1 ms apart (about a thousand a second, far over the 20 a
//! second toolhost forwards), made once with a progress token (toolhost
//! coalesces the updates into notifications) and once without (the plugin
//! is told nobody listens, and sends none). The difference in toolhost's
//! CPU is what taking in and coalescing progress costs.

use anyhow::{Context as _, Result, bail};
use serde_json::json;
use std::time::Instant;
use toolhost_bench::procs;

/// One raw 2026-07-28 `tools/call` of `steps`; answers the response body.
async fn call(
    http: &reqwest::Client,
    url: &str,
    steps: u64,
    token: Option<&str>,
) -> Result<String> {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "toolhost-bench", "version": "1"},
    });
    if let (Some(t), Some(m)) = (token, meta.as_object_mut()) {
        m.insert("progressToken".into(), json!(t));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "kandev_bench_steps", "arguments": {"steps": steps, "pause_ms": 1}, "_meta": meta}});
    let r = http
        .post(url)
        .header("authorization", format!("Bearer {}", crate::systems::TOKEN))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "kandev_bench_steps")
        .body(body.to_string())
        .send()
        .await?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() || !text.contains("steps done") {
        bail!(
            "the call failed: HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    Ok(text)
}

/// Prints the table.
pub async fn report(steps: u64) -> Result<()> {
    let daemon = crate::systems::spawn_toolhost_for("progress", false, true, false, 2)?;
    let pid = daemon.pid();
    let ep = crate::load::Endpoint {
        url: daemon.url.clone(),
        token: Some(crate::systems::TOKEN.into()),
        tool: "kandev_bench_echo".into(),
        session: true,
    };
    crate::systems::ready_http(&ep).await?;
    let plugin = procs::children(pid);
    let http = reqwest::Client::new();
    println!(
        "One call whose plugin reports {steps} progress updates 1 ms apart (testplug `steps`, Rust SDK).\n"
    );
    println!(
        "| client | wall ms | notifications received | toolhost CPU ms | plugin CPU ms |\n|---|---|---|---|---|"
    );
    let mut cpu = Vec::new();
    for token in [Some("bench"), None] {
        let (t0, p0, wall) = (
            procs::cpu_seconds(pid),
            procs::cpu_of(&plugin),
            Instant::now(),
        );
        let body = call(&http, &daemon.url, steps, token)
            .await
            .context("progress call")?;
        let wall = wall.elapsed();
        let (t, p) = (procs::cpu_seconds(pid) - t0, procs::cpu_of(&plugin) - p0);
        let notes = body.matches("notifications/progress").count();
        println!(
            "| {} | {:.0} | {notes} | {:.1} | {:.1} |",
            if token.is_some() {
                "asked for progress"
            } else {
                "did not ask"
            },
            wall.as_secs_f64() * 1e3,
            t * 1e3,
            p * 1e3
        );
        cpu.push(t);
    }
    #[allow(clippy::cast_precision_loss)] // step counts are small
    let per = (cpu[0] - cpu[1]) / steps.max(1) as f64 * 1e9;
    println!(
        "\ntoolhost CPU per progress update taken from the plugin (with a listener, minus without): {per:.0} ns"
    );
    Ok(())
}
