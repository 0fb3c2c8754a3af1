//! `--features`: a daemon's idle memory with each optional part on and
//! off. toolhost has no Cargo features to build a part out: each part is
//! in every build and costs memory only when the configuration turns it on
//! (a task, a client, buffers). This is the check of that rule, one daemon
//! per row, each serving the bench plugin and otherwise idle.

use anyhow::{Context, Result};
use std::time::{Duration, Instant};

/// The lowest RSS of `pid` over `window`, in KiB: the figure once the
/// daemon has been quiet for a tick (it drops its start-up pages then).
async fn settled_kib(pid: u32, window: Duration) -> u64 {
    let mut low = u64::MAX;
    let until = Instant::now() + window;
    while Instant::now() < until {
        low = low.min(toolhost_bench::procs::rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    low
}

async fn idle_with(tag: &str, extra: &str) -> Result<u64> {
    let dir = crate::systems::scratch(tag)?;
    let plugins = crate::systems::plugin_dir_for(&dir, 1)?;
    let config = crate::systems::toolhost_config(&dir, &plugins, false, true, false)?;
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(extra);
    std::fs::write(&config, text)?;
    let daemon = crate::systems::spawn_config(dir, &config)?;
    Ok(settled_kib(daemon.pid(), Duration::from_secs(6)).await)
}

/// Prints one row per setting.
pub async fn report() -> Result<()> {
    let receiver =
        toolhost_bench::otlp::Receiver::start(toolhost_bench::otlp::Mode::Collect).await?;
    let scratch = crate::systems::scratch("features-nats")?;
    let (nats, url) = crate::fleet::start_nats(&scratch)?;
    crate::fleet::bucket(&url, "toolhost_bench").await?;
    let rows = [
        ("nothing optional configured", String::new()),
        (
            "`[telemetry]` on: a live OTLP receiver, sampling 100 %",
            format!(
                "[telemetry]\nendpoint = \"{}\"\nsampling_ratio = 1.0\n",
                receiver.endpoint()
            ),
        ),
        (
            "`[backend.nats]` on: following a live nats-server's bucket",
            format!("[backend.nats]\nurl = \"{url}\"\ngroup = \"bench\"\ndaemon = \"d1\"\n"),
        ),
    ];
    println!("| configured | idle RSS (lowest within 6 s) |\n|---|---|");
    for (i, (name, extra)) in rows.iter().enumerate() {
        let kib = idle_with(&format!("features-{i}"), extra)
            .await
            .with_context(|| name.to_string())?;
        println!("| {name} | {:.1} MiB |", kib as f64 / 1024.0);
    }
    drop(nats);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}
