//! Plugin start-to-ready and crash-to-ready times, with real processes.
//!
//! Run: `cargo build --workspace --bins --release && cargo bench -p toolhost-e2e --bench plugins`
//!
//! start-to-ready: from `supervise()` to the state `ready` (spawn, handshake
//! line, socket connect, first SERVING health answer).
//! crash-to-ready: from SIGKILL of a ready process to `ready` again with a
//! new pid, each a first crash; measured with the default backoff (the first
//! restart uniform in 0..250 ms) and with no backoff (the cost of noticing
//! and restarting).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::Path;
use std::time::{Duration, Instant};
use toolhost_e2e::{Scratch, testplug_dir, workspace_root};
use toolhost_manifest::Manifest;
use toolhost_runtime::{Phase, PluginHandle, PluginSpec, SupervisorConfig, supervise};

const RUNS: usize = 20;

fn spec(dir: &Path, data: &Path) -> PluginSpec {
    match Manifest::load(dir) {
        Ok(m) => toolhost_lifecycle::plugin_spec(&m, data),
        Err(p) => panic!("{p:#?}"),
    }
}

async fn ready(h: &PluginHandle, not_pid: Option<u32>) -> u32 {
    let mut rx = h.subscribe();
    let s = tokio::time::timeout(
        Duration::from_secs(30),
        rx.wait_for(|s| s.phase == Phase::Ready && s.pid != not_pid),
    )
    .await;
    match s {
        Ok(Ok(s)) => s.pid.unwrap_or(0),
        _ => panic!("{} never became ready", h.id()),
    }
}

fn summary(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "| {name} | {:.1} | {:.1} | {:.1} | {} |",
        ms(v[v.len() / 2]),
        ms(v[v.len() * 9 / 10]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

fn main() {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    rt.block_on(async {
        let root = Scratch::new("bench-plugins");
        let plugins = [
            (
                "notes (Rust SDK)",
                workspace_root().join("plugins-example/notes"),
            ),
            (
                "textkit (Python SDK)",
                workspace_root().join("plugins-example/textkit"),
            ),
            (
                "jsonkit (TypeScript SDK)",
                workspace_root().join("plugins-example/jsonkit"),
            ),
            (
                "testplug (Rust SDK)",
                testplug_dir(root.path(), "tp", "normal"),
            ),
        ];
        println!("| measurement | median ms | p90 ms | max ms | runs |\n|---|---|---|---|---|");
        for (name, dir) in &plugins {
            let mut starts = Vec::new();
            for _ in 0..RUNS {
                let t = Instant::now();
                let h = supervise(spec(dir, root.path()), SupervisorConfig::default());
                ready(&h, None).await;
                starts.push(t.elapsed());
                h.stop().await;
            }
            summary(&format!("start to ready: {name}"), starts);
        }
        for (label, cfg) in [
            (
                "default backoff",
                SupervisorConfig {
                    max_restarts: 1000,
                    ..SupervisorConfig::default()
                },
            ),
            (
                "no backoff",
                SupervisorConfig {
                    max_restarts: 1000,
                    backoff_first: Duration::ZERO,
                    ..SupervisorConfig::default()
                },
            ),
        ] {
            for (name, dir) in &plugins {
                // Each run is a first crash of a healthy plugin: consecutive
                // crashes would measure the growing backoff instead.
                let mut times = Vec::new();
                for _ in 0..RUNS {
                    let h = supervise(spec(dir, root.path()), cfg.clone());
                    let pid = ready(&h, None).await;
                    let t = Instant::now();
                    if let Some(p) = i32::try_from(pid)
                        .ok()
                        .and_then(rustix::process::Pid::from_raw)
                    {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                    ready(&h, Some(pid)).await;
                    times.push(t.elapsed());
                    h.stop().await;
                }
                summary(&format!("crash to ready ({label}): {name}"), times);
            }
        }
    });
}
