//! A live upgrade under load: an installed plugin is upgraded while 8 agents
//! call it; reports the calls that failed during the upgrade (target: none)
//! and the longest call latency while it happened.

use crate::load::{Endpoint, Session};
use anyhow::Result;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A copy of the bench plugin as `kit` at `version`.
fn kit(dir: &Path, version: &str) -> Result<std::path::PathBuf> {
    let src = crate::systems::plugin_dir(&dir.join(format!("src-{version}")))?;
    let text = std::fs::read_to_string(src.join("plugin.toml"))?;
    let text = text
        .replace("id = \"bench\"", "id = \"kit\"")
        .replace("version = \"1.0.0\"", &format!("version = \"{version}\""));
    std::fs::write(src.join("plugin.toml"), text)?;
    Ok(src)
}

/// Kept whole on purpose: one live upgrade under load, read top to bottom
/// as the sequence it times.
pub async fn report() -> Result<()> {
    let daemon = crate::systems::spawn_toolhost("upgrade", false, false)?;
    let (dir, url) = (daemon.dir.clone(), daemon.url.clone());
    let mut admin = crate::systems::admin_client(&dir.join("state/admin.sock")).await?;
    let v1 = kit(&dir, "1.0.0")?;
    admin
        .install_plugin(toolhost_admin::admin::InstallPluginRequest {
            path: v1.display().to_string(),
            ..Default::default()
        })
        .await?;
    let ep = Endpoint {
        url,
        token: Some(crate::systems::TOKEN.into()),
        tool: "kandev_kit_echo".into(),
        session: true,
    };
    crate::systems::ready_http(&ep).await?;

    // (started at, latency, outcome) of every call.
    let log: Arc<Mutex<Vec<(Instant, Duration, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::new();
    let mut agents = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (log, stop, http, ep) = (
            Arc::clone(&log),
            Arc::clone(&stop),
            http.clone(),
            ep.clone(),
        );
        agents.spawn(async move {
            let Ok(mut s) = Session::open(http, ep).await else {
                return;
            };
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let o = s
                    .outcome("kandev_kit_echo", &json!({ "msg": "hello", "n": 1 }))
                    .await
                    .unwrap_or_else(|e| format!("transport: {e}"));
                if let Ok(mut l) = log.lock() {
                    l.push((t, t.elapsed(), o));
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let v2 = kit(&dir, "2.0.0")?;
    let begin = Instant::now();
    admin
        .upgrade_plugin(toolhost_admin::admin::UpgradePluginRequest {
            path: v2.display().to_string(),
            ..Default::default()
        })
        .await?;
    let end = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    while agents.join_next().await.is_some() {}
    drop(daemon);

    let log = log.lock().map(|l| l.clone()).unwrap_or_default();
    let during: Vec<&(Instant, Duration, String)> = log
        .iter()
        .filter(|(t, d, _)| *t + *d >= begin && *t <= end)
        .collect();
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, _, o) in &during {
        *outcomes.entry(o.as_str()).or_default() += 1;
    }
    let failed: u64 = outcomes
        .iter()
        .filter(|(o, _)| **o != "ok")
        .map(|(_, n)| *n)
        .sum();
    let longest = during.iter().map(|(_, d, _)| *d).max().unwrap_or_default();
    let typical = {
        let mut before: Vec<Duration> = log
            .iter()
            .filter(|(t, _, _)| *t < begin)
            .map(|(_, d, _)| *d)
            .collect();
        before.sort_unstable();
        before.get(before.len() / 2).copied().unwrap_or_default()
    };
    println!("| measurement | value |\n|---|---|");
    println!(
        "| upgrade (new version ready, switch, drain, old stopped) | {:.0} ms |",
        (end - begin).as_secs_f64() * 1000.0
    );
    println!("| calls overlapping the upgrade | {} |", during.len());
    println!(
        "| of which failed | {failed} {:?} |",
        outcomes
            .iter()
            .filter(|(o, _)| **o != "ok")
            .collect::<Vec<_>>()
    );
    println!(
        "| longest call latency during the upgrade | {:.2} ms (p50 before it: {:.2} ms) |",
        longest.as_secs_f64() * 1000.0,
        typical.as_secs_f64() * 1000.0
    );
    Ok(())
}
