//! What the operator's word over calls costs a call that passes it:
//! toolhost's CPU per plain `tools/call` with no policy (the default), with
//! rate limits per token and per tool that never refuse, and with one CEL
//! argument rule that allows the call.
//!
//! Each setting is its own daemon serving the protocol-2 bench plugin, as
//! in the telemetry series (`telemetry::series`): calls one at a time, CPU
//! read from `/proc` around the series. The first setting runs again last,
//! so the table shows the noise next to the differences. Approvals are not
//! here: a call that needs one waits for a person, which dwarfs any cost of
//! asking.
//!
//! Then what a hostile rule costs at the largest arguments a rule reads:
//! two legal rules whose work is the number of items times the length of a
//! string (`args.items.map(x, args.s + x)`), called with 57 KB of
//! arguments. Their cost bound is over the budget at that size, so each
//! call is refused before the rule runs: the table gives the time per
//! refused call and the daemon's peak RSS before and after the series.

use anyhow::{Context as _, Result, bail};
use std::time::{Duration, Instant};
use toolhost_bench::procs;

/// Prints the table: `n` calls per setting.
pub async fn report(n: usize) -> Result<()> {
    println!(
        "{n} plain stateless `tools/call`s of `kandev_bench_count` per setting, one at a time (plugin protocol 2, toolhost's direct path).\n"
    );
    println!("| policy | p50 latency ms | toolhost CPU µs per call |\n|---|---|---|");
    let limiter = "[rate_limits]\nbinding = { per_minute = 1000000, burst = 1000000 }\n\
                   [rate_limits.tools]\nkandev_bench_count = { per_minute = 1000000, burst = 1000000 }\n";
    let rule = "[[rules]]\ntool = \"kandev_bench_count\"\n\
                when = 'size(args) <= 4 && (!has(args.path) || args.path.startsWith(\"/workspace/\"))'\n\
                message = \"at most four arguments, and a path under /workspace\"\n";
    let rows = [
        ("none (the default)", ""),
        (
            "rate limits per token and per tool (never reached)",
            limiter,
        ),
        ("one CEL argument rule (allows the call)", rule),
        ("none again (the noise)", ""),
    ];
    for (name, config) in rows {
        let (p50, cpu) = crate::telemetry::series(n, config).await?;
        println!("| {name} | {p50:.3} | {cpu:.0} |");
    }
    println!(
        "\nThe CPU of a series is read from /proc around it (a tick is 10 ms, so over {n} calls it is good to about {:.0} µs).",
        10_000.0 / n.max(1) as f64
    );
    hostile((n / 10).max(20)).await
}

/// The arguments of a hostile call: 4,000 short items and a 30,000-byte
/// string, 57 KB of JSON (a rule reads at most 64 KiB).
fn hostile_body() -> String {
    let items: Vec<String> = (0..4_000).map(|i| format!("\"{i}\"")).collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"kandev_bench_take","arguments":{{"s":"{}","items":[{}]}}}}}}"#,
        "y".repeat(30_000),
        items.join(",")
    )
}

/// One hostile call: it must be refused by the rule's budget.
async fn hostile_call(http: &reqwest::Client, url: &str, body: &str) -> Result<()> {
    let r = http
        .post(url)
        .header("authorization", format!("Bearer {}", crate::systems::TOKEN))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_owned())
        .send()
        .await?;
    let text = r.text().await?;
    if !text.contains("refused_by_rule") || !text.contains("could cost more") {
        bail!(
            "a hostile call was not refused by the budget: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    Ok(())
}

/// The hostile rules' table: `n` calls of each.
async fn hostile(n: usize) -> Result<()> {
    println!(
        "\n{n} calls per rule of a tool with a hostile rule, 57 KB of arguments each (4,000 items and a 30,000-byte string), one at a time.\n"
    );
    println!(
        "| rule | outcome | p50 ms per call | toolhost CPU µs per call | daemon peak RSS before → after, MiB |\n|---|---|---|---|---|"
    );
    let body = hostile_body();
    for rule in [
        "args.items.map(x, args.s + x).size() >= 0",
        "size(args.items.map(x, args.s + x)) >= 0",
    ] {
        let dir = crate::systems::scratch("policy-hostile")?;
        let plugins = crate::tasks::plugin(&dir)?;
        let manifest = plugins.join("plugin.toml");
        let mut text = std::fs::read_to_string(&manifest)?;
        text.push_str(
            "\n[[tools]]\nname = \"take\"\ndescription = \"Takes a string and items.\"\nsurfaces = [\"chat\"]\n\
             input_schema = { type = \"object\", properties = { s = { type = \"string\" }, items = { type = \"array\", items = { type = \"string\" } } } }\n\
             annotations = { read_only = true, open_world = false }\n",
        );
        std::fs::write(&manifest, text)?;
        let config = crate::systems::toolhost_config(&dir, &plugins, true, true, false)?;
        let mut text = std::fs::read_to_string(&config)?;
        text.push_str(&format!(
            "[[rules]]\ntool = \"kandev_bench_take\"\nwhen = {rule:?}\nmessage = \"a hostile rule\"\n"
        ));
        std::fs::write(&config, text)?;
        let daemon = crate::systems::spawn_config(dir, &config)?;
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while hostile_call(&http, &daemon.url, &body).await.is_err() {
            if Instant::now() > deadline {
                bail!("toolhost never refused the hostile call at {}", daemon.url);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pid = daemon.pid();
        let before = procs::peak_rss_kib(pid);
        let c0 = procs::cpu_seconds(pid);
        let mut latencies = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            hostile_call(&http, &daemon.url, &body)
                .await
                .context("a hostile call")?;
            latencies.push(crate::measure::ms(t.elapsed()));
        }
        let cpu = procs::cpu_seconds(pid) - c0;
        let after = procs::peak_rss_kib(pid);
        #[allow(clippy::cast_precision_loss)] // small counts
        let per_call = cpu / n.max(1) as f64 * 1e6;
        #[allow(clippy::cast_precision_loss)] // KiB to MiB
        let mib = |k: u64| k as f64 / 1024.0;
        println!(
            "| `{rule}` | refused before it ran (over the budget) | {:.3} | {per_call:.0} | {:.1} → {:.1} |",
            crate::measure::median(latencies),
            mib(before),
            mib(after)
        );
    }
    println!(
        "\nBefore the budget (f134ed2) the same calls took 30–38 s of CPU each and raised the daemon's peak by 309 MiB. \
         The CPU per call includes reading 57 KB of JSON and validating it against the tool's schema."
    );
    Ok(())
}
