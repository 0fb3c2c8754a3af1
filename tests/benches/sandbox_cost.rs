//! What the plugin sandbox costs: per plugin start, and per call.
//!
//! Run: `cargo build --workspace --bins --release && TOOLHOST_PROFILE=release cargo bench -p toolhost-e2e --bench sandbox_cost`
//!
//! Three policies, alternated run by run so drift on the machine falls on
//! each alike:
//! - `off`: no rule at all;
//! - `default`: what an installed plugin gets with no grant (limits, a pids
//!   cgroup, capabilities cleared, Landlock, the network seccomp filter
//!   refusing every IPv4 and IPv6 socket);
//! - `network granted`: the same with TCP connect granted, which adds the
//!   `listen()` filter whose every call the daemon answers.
//!
//! Start: from `supervise()` to `ready`. Call: sequential `InvokeAgentTool`
//! calls to the plugin's `count` tool over its socket, wall time per call,
//! and the plugin's CPU per call (every system call it makes passes the
//! seccomp filters).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::Path;
use std::time::{Duration, Instant};
use toolhost_e2e::{Scratch, probeplug_dir, sandbox_read_paths, workspace_root};
use toolhost_lifecycle::settings::{Grant, Operator, SandboxConfig, sandbox_policy};
use toolhost_manifest::Manifest;
use toolhost_proto::plugin::AgentToolRequest;
use toolhost_runtime::{Phase, PluginHandle, PluginSpec, SupervisorConfig, supervise};

const STARTS: usize = 30;
const CALLS: usize = 4000;

fn spec(dir: &Path, data: &Path, policy: &str) -> PluginSpec {
    let m = match Manifest::load(dir) {
        Ok(m) => m,
        Err(p) => panic!("{p:#?}"),
    };
    let mut s = toolhost_lifecycle::plugin_spec(&m, data);
    let cfg = SandboxConfig {
        read: sandbox_read_paths(),
        ..SandboxConfig::default()
    };
    let mut op = Operator::default();
    match policy {
        "off" => return s,
        "network granted" => {
            op.grant.insert(Grant::Network);
        }
        _ => {}
    }
    s.sandbox = sandbox_policy(&m, &op, &cfg);
    s
}

async fn ready(h: &PluginHandle) -> u32 {
    let mut rx = h.subscribe();
    let s = tokio::time::timeout(
        Duration::from_secs(30),
        rx.wait_for(|s| s.phase == Phase::Ready),
    )
    .await;
    match s {
        Ok(Ok(s)) => s.pid.unwrap_or(0),
        _ => panic!("{} never became ready: {:?}", h.id(), h.state()),
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

fn main() {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    rt.block_on(async {
        let root = Scratch::new("bench-sandbox");
        let asks = "[capabilities]\nnetwork = { connect = [443] }\n";
        let plugins = [
            ("testplug (Rust SDK)", probeplug_dir(root.path(), "tp", asks)),
            (
                "textkit (Python SDK)",
                workspace_root().join("plugins-example/textkit"),
            ),
        ];
        let policies = ["off", "default", "network granted"];
        println!(
            "| plugin | sandbox | start median ms | start p90 ms | call median µs | call p90 µs | plugin CPU µs/call |\n|---|---|---|---|---|---|---|"
        );
        for (name, dir) in &plugins {
            let mut starts: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
            for _ in 0..STARTS {
                for (i, policy) in policies.iter().enumerate() {
                    let t = Instant::now();
                    let h = supervise(spec(dir, root.path(), policy), SupervisorConfig::default());
                    ready(&h).await;
                    starts[i].push(t.elapsed().as_secs_f64() * 1000.0);
                    h.stop().await;
                }
            }
            let tool = if name.starts_with("testplug") { "count" } else { "word_count" };
            for (i, policy) in policies.iter().enumerate() {
                let h = supervise(spec(dir, root.path(), policy), SupervisorConfig::default());
                let pid = ready(&h).await;
                let client = h.client().expect("a client once ready");
                let request = || AgentToolRequest {
                    invocation_id: "bench".into(),
                    name: tool.into(),
                    arguments: serde_json::json!({"text": "a b c"})
                        .as_object()
                        .map(toolhost_proto::json::struct_from_json),
                    ..AgentToolRequest::default()
                };
                for _ in 0..200 {
                    let _ = client.invoke(request(), Duration::from_secs(10)).await;
                }
                let cpu0 = toolhost_bench::procs::cpu_seconds(pid);
                let mut calls = Vec::with_capacity(CALLS);
                for _ in 0..CALLS {
                    let t = Instant::now();
                    let r = client.invoke(request(), Duration::from_secs(10)).await;
                    assert!(r.is_ok(), "{policy}: {r:?}");
                    calls.push(t.elapsed().as_secs_f64() * 1e6);
                }
                let cpu = (toolhost_bench::procs::cpu_seconds(pid) - cpu0) * 1e6 / CALLS as f64;
                let (s50, s90) = median(starts[i].clone());
                let (c50, c90) = median(calls);
                println!(
                    "| {name} | {policy} | {s50:.1} | {s90:.1} | {c50:.0} | {c90:.0} | {cpu:.0} |"
                );
                h.stop().await;
            }
        }
    });
}
