//! Tool calls as MCP tasks: what a task costs over a direct call, and what
//! a task waiting for its answer holds.
//!
//! One toolhost serving the protocol-2 bench plugin, with `count` (answers
//! at once) and `confirm` (asks a question) declared `task = "optional"`.
//! Raw 2026-07-28 requests over HTTP, one at a time:
//!
//! - **direct**: `tools/call` of `count` from a client that does not
//!   declare the Tasks extension;
//! - **task**: the same call declaring it (answered with a task id), then,
//!   once the call has surely ended, one `tasks/get` that reads the result.
//!
//! toolhost's CPU is read from `/proc` around each series, so the CPU per
//! task counts the create and the one read. Then 1,000 `confirm` tasks are
//! left in `input_required`, each holding its call, its place among the
//! plugin's calls and its question, and toolhost's RSS is compared with
//! before.

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use toolhost_bench::procs;

const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A 2026-07-28 request; answers the response body (JSON or one SSE event).
async fn request(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    mut params: Value,
    tasks: bool,
) -> Result<String> {
    let capabilities = if tasks {
        json!({ "extensions": { TASKS_EXTENSION: {} }, "elicitation": { "form": {} } })
    } else {
        json!({})
    };
    if let Some(p) = params.as_object_mut() {
        p.insert(
            "_meta".into(),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": capabilities,
                "io.modelcontextprotocol/clientInfo": {"name": "toolhost-bench", "version": "1"},
            }),
        );
    }
    // SEP-2243: the name a request is about goes in a header too (a
    // tool's name, a task's id).
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut r = http
        .post(url)
        .header("authorization", format!("Bearer {}", crate::systems::TOKEN))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        r = r.header("mcp-name", n);
    }
    let r = r.body(body.to_string()).send().await?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() || text.contains("\"error\"") {
        bail!(
            "{method} failed: HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    Ok(text)
}

/// The `taskId` in an answer.
fn task_id(body: &str) -> Result<String> {
    let at = body
        .find("\"taskId\":\"")
        .context("the answer holds no task id")?
        + "\"taskId\":\"".len();
    let end = body[at..].find('"').context("an unterminated task id")?;
    Ok(body[at..at + end].to_owned())
}

/// `n` direct calls of `count`, `pause` before each: their latencies (ms)
/// and toolhost's CPU seconds over the series.
async fn direct_series(
    http: &reqwest::Client,
    url: &str,
    pid: u32,
    n: usize,
    pause: Duration,
) -> Result<(Vec<f64>, f64)> {
    let mut latencies = Vec::with_capacity(n);
    let c0 = procs::cpu_seconds(pid);
    for _ in 0..n {
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let t = Instant::now();
        let body = request(
            http,
            url,
            "tools/call",
            call_params("kandev_bench_count"),
            false,
        )
        .await?;
        latencies.push(crate::measure::ms(t.elapsed()));
        if !body.contains("\"content\"") {
            bail!("a direct call answered no result");
        }
    }
    Ok((latencies, procs::cpu_seconds(pid) - c0))
}

/// Calls `tool` declaring the Tasks extension; answers the task's id.
async fn create_task(http: &reqwest::Client, url: &str, tool: &str) -> Result<String> {
    task_id(&request(http, url, "tools/call", call_params(tool), true).await?)
}

fn call_params(tool: &str) -> Value {
    json!({"name": tool, "arguments": {}})
}

/// The bench plugin with `count` and `confirm` allowed to run as tasks.
pub(crate) fn plugin(dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let p = crate::systems::plugin_dir_for(dir, 2)?;
    let manifest = p.join("plugin.toml");
    let mut text = std::fs::read_to_string(&manifest)?;
    text.push_str(
        r#"
[[tools]]
name = "count"
description = "Answers how many calls it has had."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true, open_world = false }
task = "optional"

[[tools]]
name = "confirm"
description = "Asks the user to confirm."
surfaces = ["chat"]
timeout_ms = 300000
input_schema = { type = "object" }
annotations = { read_only = true, open_world = false }
task = "optional"
"#,
    );
    std::fs::write(&manifest, text)?;
    Ok(p)
}

/// Prints the tables: `n` calls of each kind, and `parked` waiting tasks.
pub async fn report(n: usize, parked: usize) -> Result<()> {
    let dir = crate::systems::scratch("tasks")?;
    let plugins = plugin(&dir)?;
    let config = crate::systems::toolhost_config(&dir, &plugins, false, true, false)?;
    let mut text = std::fs::read_to_string(&config)?;
    // Finished tasks keep their places while their results are kept.
    let room = 2 * n + parked + 64;
    text = text.replacen(
        "[limits]\n",
        &format!("[limits]\nmax_calls_per_plugin = {room}\n"),
        1,
    );
    text.push_str(&format!(
        "[tasks]\nmax_per_token = {room}\nmax_total = {room}\n"
    ));
    std::fs::write(&config, text)?;
    let daemon = crate::systems::spawn_config(dir, &config)?;
    let pid = daemon.pid();
    let http = reqwest::Client::new();
    let url = daemon.url.clone();
    // Ready, and warm: the plugin answers, both paths have run.
    let deadline = Instant::now() + Duration::from_secs(30);
    while request(
        &http,
        &url,
        "tools/call",
        call_params("kandev_bench_count"),
        false,
    )
    .await
    .is_err()
    {
        if Instant::now() > deadline {
            bail!("toolhost never answered at {url}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..20 {
        let id = create_task(&http, &url, "kandev_bench_count").await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
        request(&http, &url, "tasks/get", json!({"taskId": id}), true).await?;
    }

    println!(
        "{n} calls of each kind, one at a time (testplug `count`, plugin protocol 2, a raw 2026-07-28 client over HTTP).\n"
    );
    let (mut create, mut read) = (Vec::new(), Vec::new());
    let mut extra_reads = 0usize;
    let (direct, direct_cpu) = direct_series(&http, &url, pid, n, Duration::ZERO).await?;
    // The same, with the 5 ms pause a task's read waits for: an idle
    // daemon wakes for each call, which costs CPU of its own.
    let (paused, paused_cpu) = direct_series(&http, &url, pid, n, Duration::from_millis(5)).await?;
    // toolhost is otherwise idle: the whole series' CPU is the tasks',
    // the call each runs after its create included.
    let c0 = procs::cpu_seconds(pid);
    for _ in 0..n {
        let t = Instant::now();
        let id = create_task(&http, &url, "kandev_bench_count").await?;
        create.push(crate::measure::ms(t.elapsed()));
        // By then the call has ended (on a loaded or debug build it may
        // not have: read again, counted, until it has).
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let t = Instant::now();
            let body = request(&http, &url, "tasks/get", json!({"taskId": id}), true).await?;
            read.push(crate::measure::ms(t.elapsed()));
            if body.contains("\"completed\"") {
                break;
            }
            extra_reads += 1;
            if Instant::now() > give_up {
                bail!("a task was not completed 10 s after it was created");
            }
        }
    }
    let task_cpu = procs::cpu_seconds(pid) - c0;
    #[allow(clippy::cast_precision_loss)] // call counts are small
    let per = |cpu: f64| cpu / n.max(1) as f64 * 1e6;
    println!("| path | p50 latency ms | toolhost CPU µs per call |\n|---|---|---|");
    println!(
        "| direct `tools/call` | {:.2} | {:.0} |",
        crate::measure::median(direct),
        per(direct_cpu)
    );
    println!(
        "| direct `tools/call`, 5 ms apart | {:.2} | {:.0} |",
        crate::measure::median(paused),
        per(paused_cpu)
    );
    let (create, read) = (crate::measure::median(create), crate::measure::median(read));
    println!(
        "| task: `tools/call` (created), 5 ms, one `tasks/get` (completed) | {create:.2} + {read:.2} = {:.2} | {:.0} |",
        create + read,
        per(task_cpu)
    );
    if extra_reads > 0 {
        println!(
            "| reads that found the task still working (each a further `tasks/get`, in the CPU above) | {extra_reads} | |"
        );
    }
    println!(
        "\nThe CPU of a series is read from /proc around it (a tick is 10 ms, so over {n} calls it is good to about {:.0} µs). \
         Each `tasks/get` follows its create by 5 ms, so the call has ended and one read finds the result; its latency is that of a request to an idle daemon.",
        10_000.0 / n.max(1) as f64
    );

    // Tasks waiting for an answer.
    let plugin_pids = procs::children(pid);
    let (before, plugin_before) = (procs::rss_kib(pid), plugin_rss(&plugin_pids));
    let mut ids = Vec::with_capacity(parked);
    for _ in 0..parked {
        ids.push(create_task(&http, &url, "kandev_bench_confirm").await?);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = request(
            &http,
            &url,
            "tasks/get",
            json!({"taskId": ids[ids.len() - 1]}),
            true,
        )
        .await?;
        if body.contains("\"input_required\"") {
            break;
        }
        if Instant::now() > deadline {
            bail!("the last task never asked its question");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every task asked (they asked in order, one plugin, one stream each):
    // check a sample.
    for id in ids.iter().step_by((parked / 10).max(1)) {
        let body = request(&http, &url, "tasks/get", json!({"taskId": id}), true).await?;
        if !body.contains("\"input_required\"") {
            bail!("a task is not waiting for its answer");
        }
    }
    let (after, plugin_after) = (procs::rss_kib(pid), plugin_rss(&plugin_pids));
    #[allow(clippy::cast_precision_loss)] // KiB counts
    let per_task = |b: u64, a: u64| (a.saturating_sub(b)) as f64 / parked.max(1) as f64;
    println!(
        "\n{parked} tasks of `confirm`, each waiting in `input_required` for its answer (its call open on the plugin's stream).\n"
    );
    println!("| process | RSS before | RSS with the tasks | per task |\n|---|---|---|---|");
    println!(
        "| toolhost | {:.1} MiB | {:.1} MiB | {:.1} KiB |",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        per_task(before, after)
    );
    println!(
        "| the plugin (Rust SDK) | {:.1} MiB | {:.1} MiB | {:.1} KiB |",
        plugin_before as f64 / 1024.0,
        plugin_after as f64 / 1024.0,
        per_task(plugin_before, plugin_after)
    );
    for id in &ids {
        request(&http, &url, "tasks/cancel", json!({"taskId": id}), true).await?;
    }
    Ok(())
}

fn plugin_rss(pids: &[u32]) -> u64 {
    pids.iter().map(|p| procs::rss_kib(*p)).sum()
}
