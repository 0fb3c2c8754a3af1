//! What tracing costs a call: toolhost's CPU per plain `tools/call` with
//! telemetry off (the default), on with sampling at 0 %, and on with
//! sampling at 100 % exporting to a live OTLP/gRPC receiver
//! (`toolhost_bench::otlp`, the `opentelemetry-proto` `TraceService`).
//!
//! Each setting is its own daemon serving the protocol-2 bench plugin;
//! calls are plain stateless 2025-era requests without a `traceparent`
//! (the new trace's fate is the ratio's), one at a time, and toolhost's
//! CPU is read from `/proc` around the series.

use anyhow::{Context as _, Result, bail};
use std::time::{Duration, Instant};
use toolhost_bench::otlp::{Mode, Receiver};
use toolhost_bench::procs;

/// A plain stateless `tools/call` of `kandev_bench_count` with `token` as
/// the bearer; an error unless it succeeded.
pub(crate) async fn call_as(http: &reqwest::Client, url: &str, token: &str) -> Result<()> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"kandev_bench_count","arguments":{}}}"#;
    let r = http
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body)
        .send()
        .await?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() || !text.contains("\"content\"") || text.contains("\"isError\":true") {
        bail!(
            "a call failed: HTTP {status}: {}",
            text.chars().take(200).collect::<String>()
        );
    }
    Ok(())
}

/// `n` calls against a daemon with `telemetry` appended to its
/// configuration: (p50 latency ms, toolhost CPU µs per call).
pub(crate) async fn series(n: usize, telemetry: &str) -> Result<(f64, f64)> {
    series_as(n, telemetry, crate::systems::TOKEN, None).await
}

/// [`series`] with `token` as every call's bearer, the bench plugin
/// declaring `audience` under `[credentials]` when given.
pub(crate) async fn series_as(
    n: usize,
    telemetry: &str,
    token: &str,
    audience: Option<&str>,
) -> Result<(f64, f64)> {
    let dir = crate::systems::scratch("telemetry")?;
    let plugins = crate::tasks::plugin(&dir)?;
    if let Some(audience) = audience {
        let manifest = plugins.join("plugin.toml");
        let mut text = std::fs::read_to_string(&manifest)?;
        text.push_str(&format!("\n[credentials]\naudiences = [{audience:?}]\n"));
        std::fs::write(&manifest, text)?;
    }
    let config = crate::systems::toolhost_config(&dir, &plugins, true, true, false)?;
    let mut text = std::fs::read_to_string(&config)?;
    // `[plugin.bench]` is the config's last table: a setting may add to it.
    let extra = telemetry.replace("[plugin.bench]\n", "");
    text.push_str(&extra);
    std::fs::write(&config, text)?;
    let daemon = crate::systems::spawn_config(dir, &config)?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while call_as(&http, &daemon.url, token).await.is_err() {
        if Instant::now() > deadline {
            bail!("toolhost never answered at {}", daemon.url);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..200 {
        call_as(&http, &daemon.url, token).await?;
    }
    let pid = daemon.pid();
    let mut latencies = Vec::with_capacity(n);
    let c0 = procs::cpu_seconds(pid);
    for _ in 0..n {
        let t = Instant::now();
        call_as(&http, &daemon.url, token)
            .await
            .context("a measured call")?;
        latencies.push(crate::measure::ms(t.elapsed()));
    }
    let cpu = procs::cpu_seconds(pid) - c0;
    #[allow(clippy::cast_precision_loss)] // call counts are small
    let per_call = cpu / n.max(1) as f64 * 1e6;
    Ok((crate::measure::median(latencies), per_call))
}

/// Prints the table: `n` calls per setting.
pub async fn report(n: usize) -> Result<()> {
    let receiver = Receiver::start(Mode::Collect).await?;
    let on = |ratio: &str| {
        format!(
            "[telemetry]\nendpoint = \"{}\"\nsampling_ratio = {ratio}\nflush_interval_ms = 200\n",
            receiver.endpoint()
        )
    };
    println!(
        "{n} plain stateless `tools/call`s per setting, one at a time (testplug `count`, plugin protocol 2, toolhost's direct path).\n"
    );
    println!(
        "| telemetry | p50 latency ms | toolhost CPU µs per call | spans exported (200 warm-up calls included) |\n|---|---|---|---|"
    );
    let rows = [
        ("off (no `[telemetry]`)", String::new()),
        ("on, sampling 0 %", on("0.0")),
        ("on, sampling 100 %, live receiver", on("1.0")),
    ];
    for (name, config) in rows {
        let before = receiver.spans().len();
        let (p50, cpu) = series(n, &config).await?;
        // What was sampled arrives within a flush or two.
        let settle = Instant::now() + Duration::from_secs(3);
        let sampled = config.contains("= 1.0");
        let mut spans = receiver.spans().len() - before;
        while sampled && Instant::now() < settle && spans < n * 5 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            spans = receiver.spans().len() - before;
        }
        println!("| {name} | {p50:.2} | {cpu:.0} | {spans} |");
    }
    println!(
        "\nThe CPU of a series is read from /proc around it (a tick is 10 ms, so over {n} calls it is good to about {:.0} µs). \
         A sampled call exports five spans from toolhost (the SERVER span, validate, authorize, dispatch, the CLIENT span); the plugin exports none here.",
        10_000.0 / n.max(1) as f64
    );
    Ok(())
}
