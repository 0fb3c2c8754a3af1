//! The soak: a bounded run (two minutes by default) of mixed valid and
//! invalid calls, with catalog churn, against a real toolhost. Reports calls,
//! answers by outcome, p99, and toolhost's resident memory at start and end.

use crate::load::{Endpoint, Session};
use anyhow::Result;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Kept whole on purpose: one soak run, read top to bottom as the sequence
/// it drives and samples.
pub async fn run(seconds: u64) -> Result<()> {
    let daemon = crate::systems::spawn_toolhost("soak", false, false)?;
    let (dir, url) = (daemon.dir.clone(), daemon.url.clone());
    let ep = Endpoint {
        url,
        token: Some(crate::systems::TOKEN.into()),
        tool: "kandev_bench_echo".into(),
        session: true,
    };
    crate::systems::ready_http(&ep).await?;
    let pid = daemon.pid();
    let sock = dir.join("state/admin.sock");
    let mut admin = crate::systems::admin_client(&sock).await?;
    let rss_start = toolhost_bench::procs::rss_kib(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let http = reqwest::Client::new();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..16u64 {
        let (stop, outcomes, latencies, http, ep) = (
            Arc::clone(&stop),
            Arc::clone(&outcomes),
            Arc::clone(&latencies),
            http.clone(),
            ep.clone(),
        );
        workers.spawn(async move {
            let Ok(mut s) = Session::open(http, ep).await else {
                return;
            };
            let mut i = w;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let args = match i % 5 {
                    0 => json!({ "msg": "hello", "n": 1 }),
                    1 => json!({ "msg": "hello", "n": "not a number" }),
                    2 => json!({ "n": 1 }),
                    3 => json!({ "msg": "hello", "n": 1, "unexpected": true }),
                    _ => json!({ "msg": "x".repeat(50), "n": 11 }),
                };
                let t = Instant::now();
                let o = s
                    .outcome("kandev_bench_echo", &args)
                    .await
                    .unwrap_or_else(|e| format!("transport: {e}"));
                if let Ok(mut l) = latencies.lock() {
                    l.push(t.elapsed());
                }
                if let Ok(mut m) = outcomes.lock() {
                    *m.entry(o).or_default() += 1;
                }
            }
        });
    }
    let started = Instant::now();
    let mut churn = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Catalog churn: the plugin leaves and comes back.
        let _ = admin
            .disable_plugin(toolhost_admin::admin::PluginRef { id: "bench".into() })
            .await;
        let _ = admin
            .enable_plugin(toolhost_admin::admin::PluginRef { id: "bench".into() })
            .await;
        churn += 2;
    }
    stop.store(true, Ordering::SeqCst);
    while workers.join_next().await.is_some() {}
    let rss_end = toolhost_bench::procs::rss_kib(pid);
    drop(daemon);

    let outcomes = outcomes.lock().map(|m| m.clone()).unwrap_or_default();
    let mut lat = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    lat.sort_unstable();
    let p99 = lat
        .get(lat.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    let calls: u64 = outcomes.values().sum();
    println!("## Soak: {seconds} s\n");
    println!("| measurement | value |\n|---|---|");
    println!(
        "| calls | {calls} ({:.0}/s) |",
        calls as f64 / started.elapsed().as_secs_f64()
    );
    for (o, n) in &outcomes {
        println!("| answers: {o} | {n} |");
    }
    println!("| catalog revisions from churn (disable + enable) | {churn} |");
    println!("| p99 latency | {:.2} ms |", p99.as_secs_f64() * 1000.0);
    println!(
        "| toolhost RSS at start | {:.1} MiB |",
        rss_start as f64 / 1024.0
    );
    println!(
        "| toolhost RSS at end | {:.1} MiB |",
        rss_end as f64 / 1024.0
    );
    anyhow::ensure!(
        !outcomes.keys().any(|k| k.starts_with("transport")),
        "transport failures: {outcomes:?}"
    );
    Ok(())
}
