//! `toolhost-bench`: toolhost's costs next to the floor and a peer, in one
//! run, interleaved so drift shows (issue "Benchmarks against the floor and
//! against a peer gateway"). Run it through `scripts/bench` (which installs
//! the peer and builds in release); `--quick` is the CI form.
//!
//! Systems, all answering the same `echo` tool with a small schema:
//! - `toolhost` -> a Rust plugin over gRPC (default HTTP mode, and stateless
//!   JSON mode), and the same plugin declared for plugin protocol 2 (one
//!   stream per call); and stateless JSON mode with `direct_calls = false`,
//!   every request through rmcp, so what the direct path buys shows in the
//!   same run;
//! - `floor`: an in-process rmcp server answering the tool itself (default
//!   and stateless JSON), the floor for any MCP server;
//! - `grpc-direct`: the same plugin called directly over its socket, the
//!   floor of the plugin hop;
//! - `fastmcp-proxy`: a FastMCP gateway mounting a proxy of a FastMCP
//!   upstream under a prefix.
//!
//! Then progress at the plugin's full speed through toolhost (`progress`).
//!
//! Other modes: `--upgrade` (a live upgrade under load), `--soak SECONDS`,
//! `--progress STEPS` (progress forwarding only), `--sdks` (a call through
//! each SDK's plugin only), `--scale` (the catalog at scale only),
//! `--argcheck` (argument checking against jsonschema's `is_valid` only),
//! `--features` (idle memory with each optional
//! part configured, only), `--judge TOOLS` (one daemon's
//! work for a large withheld revision, in-process, only), `--fleet N,...` (N daemons fed through NATS JetStream only), `--fleet-served N,...` (the large revision with its plugins installed and its tools served), `--placement N` (three plugins from a registry placed on N daemons, uncached and cached),
//! `--plugins N,...` (N plugins in one daemon: start, memory, stop, only),
//! `--tasks N` (tool calls as MCP tasks against direct calls, and N tasks
//! waiting for an answer, only), `--telemetry N` (toolhost's CPU per call
//! with telemetry off, sampling at 0 % and at 100 % to a live OTLP
//! receiver, only), `--policy N` (toolhost's CPU per call with no
//! policy, with rate limits and with one CEL argument rule, only),
//! `--oauth N` (toolhost's CPU per call with a static token, a JWT and
//! a JWT whose plugin gets an exchanged token, only), and `--profile SECONDS [--json [--through-rmcp]]` (one toolhost under
//! load, its pid printed, for `perf record -p`).
//!
//! `BENCH_TOOLHOST=/path/to/toolhost` runs any mode against another
//! daemon build (the harness, floor and plugins stay this build's): a
//! before and after from one harness.

#![forbid(unsafe_code)]

mod argcheck;
mod args;
mod discovery;
mod features;
mod fleet;
mod fleet_served;
mod goals;
mod judge;
mod load;
mod measure;
mod oauth;
mod operate;
mod placement;
mod plugins;
mod policy;
mod progress;
mod scale;
mod sdks;
mod soak;
mod systems;
mod tasks;
mod telemetry;
mod upgrade;

use anyhow::{Result, bail};
use args::Args;
use goals::*;
use measure::*;
use std::time::{Duration, Instant};
use systems::*;
use toolhost_bench::procs;

/// Kept whole on purpose: the bench's table of contents; each mode is a
/// call, and the order here is the order of the report.
#[tokio::main]
async fn main() -> Result<()> {
    toolhost_registry::use_ring_for_tls();
    let args = <Args as clap::Parser>::parse();
    if args.upgrade {
        println!("## A live upgrade under load (8 agents)\n");
        return upgrade::report().await;
    }
    if args.sdks {
        println!("## A call through each SDK (plugin protocol 2)\n");
        return sdks::report(args.quick).await;
    }
    if let Some(n) = args.rss_tools {
        println!("| measurement | RSS |\n|---|---|");
        scale::print_rss_with_tools(n).await;
        return Ok(());
    }
    if args.features {
        println!("## Idle memory per optional part\n");
        return features::report().await;
    }
    if let Some(n) = args.judge {
        println!("## One daemon's work for a large withheld revision\n");
        return judge::report(n, if args.quick { 3 } else { 11 }).await;
    }
    if args.scale {
        println!("## The catalog at scale\n");
        scale::report(if args.quick { 200 } else { 1_000 }).await?;
        println!("\n| measurement | RSS |\n|---|---|");
        scale::print_rss_with_tools(if args.quick { 2_000 } else { 10_000 }).await;
        println!("\n## What agents are shown of a large catalog\n");
        return discovery::report(&discovery::examples_dir()).await;
    }
    if !args.plugins.is_empty() {
        println!("## Many plugins in one daemon\n");
        return plugins::report(&args.plugins).await;
    }
    if let Some(n) = args.operate {
        println!("## Operating a large daemon\n");
        return operate::report(n).await;
    }
    if !args.fleet_served.is_empty() {
        println!("## A fleet through NATS JetStream, the large revision served\n");
        return fleet_served::report(&args.fleet_served, args.quick).await;
    }
    if let Some(n) = args.placement {
        println!("## Plugins placed on a fleet from a registry\n");
        return placement::report(n).await;
    }
    if !args.fleet.is_empty() {
        println!("## A fleet through NATS JetStream\n");
        return fleet::report(&args.fleet, args.quick).await;
    }
    if let Some(n) = args.tasks {
        println!("## Tool calls as MCP tasks\n");
        return tasks::report(n, n).await;
    }
    if let Some(n) = args.telemetry {
        println!("## What tracing costs a call\n");
        return telemetry::report(n).await;
    }
    if let Some(n) = args.oauth {
        println!("## What an access token costs a call\n");
        return oauth::report(n).await;
    }
    if let Some(n) = args.policy {
        println!("## What the operator's policy costs a call\n");
        return policy::report(n).await;
    }
    if args.argcheck {
        println!("## Argument checking against jsonschema's `is_valid`\n");
        return argcheck::report(if args.quick { 3 } else { 15 }).map(drop);
    }
    if let Some(steps) = args.progress {
        println!("## Progress at its maximum rate (plugin protocol 2)\n");
        return progress::report(steps).await;
    }
    if let Some(seconds) = args.soak {
        return soak::run(seconds).await;
    }
    if let Some(seconds) = args.profile {
        return profile_target(seconds, args.json, !args.through_rmcp, args.concurrency).await;
    }
    let quick = args.quick;
    let skip_peer = args.no_peer;
    let (rounds, duration) = if quick {
        (1, Duration::from_millis(1500))
    } else {
        (3, Duration::from_secs(5))
    };
    let started = Instant::now();
    println!("# toolhost-bench{}\n", if quick { " --quick" } else { "" });
    println!(
        "rounds: {rounds}, {} s per measurement, interleaved; machine: {} cores; Tokio workers per Rust server: {WORKERS}\n",
        duration.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut systems = vec![
        start_toolhost(false, true, 1).await?,
        start_toolhost(true, true, 1).await?,
        start_floor(false).await?,
        start_floor(true).await?,
        start_direct_grpc().await?,
        start_toolhost(false, true, 2).await?,
        start_toolhost(true, false, 1).await?,
    ];
    // Where the peer is in `systems`, when it was started: never an index
    // guessed from the list's length.
    let mut peer = None;
    if !skip_peer {
        match start_fastmcp().await {
            Ok(s) => {
                peer = Some(systems.len());
                systems.push(s);
            }
            Err(e) => println!("(peer not measured: {e:#})\n"),
        }
    }
    // Idle: the lowest within 6 s once every system is up, as the settled
    // figure after the load is taken (the daemon gives memory back on its
    // first quiet tick).
    let idle_rss = [
        settled(systems[0].main_pid).await,
        settled(systems[1].main_pid).await,
    ];
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()?;
    let concurrencies = [1usize, 64];
    let mut results: Vec<Vec<Vec<Measured>>> =
        vec![vec![Vec::new(); concurrencies.len()]; systems.len()];
    for _ in 0..rounds {
        for (si, sys) in systems.iter().enumerate() {
            for (ci, c) in concurrencies.iter().enumerate() {
                let m = measure(sys, *c, duration, &http).await?;
                results[si][ci].push(m);
            }
        }
    }
    // The memory goal: resident memory after a sustained load at
    // concurrency 64, each toolhost in its own mode, sessions closed.
    let sustained = if quick {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(60)
    };
    let mut loaded_rss = [0u64; 2];
    let mut settled_rss = [0u64; 2];
    let mut sustained_errors = 0;
    for i in 0..2 {
        sustained_errors += measure(&systems[i], 64, sustained, &http).await?.errors;
        loaded_rss[i] = procs::rss_kib(systems[i].main_pid);
        settled_rss[i] = settled(systems[i].main_pid).await;
    }

    println!("## The call path over streamable HTTP\n");
    println!(
        "| system | concurrency | p50 ms | p99 ms | calls/s | server CPU µs/call | of which its first process | load generator CPU µs/call | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut summary: Vec<Vec<Summary>> = Vec::new();
    for (si, sys) in systems.iter().enumerate() {
        let mut per = Vec::new();
        for (ci, c) in concurrencies.iter().enumerate() {
            let ms_ = &results[si][ci];
            let row = Summary {
                p50: median(ms_.iter().map(|m| ms(m.p50)).collect()),
                p99: median(ms_.iter().map(|m| ms(m.p99)).collect()),
                throughput: median(ms_.iter().map(|m| m.throughput).collect()),
                cpu: median(ms_.iter().map(|m| m.server_cpu_us).collect()),
                main_cpu: median(ms_.iter().map(|m| m.main_cpu_us).collect()),
            };
            let client = median(ms_.iter().map(|m| m.client_cpu_us).collect());
            let errors: u64 = ms_.iter().map(|m| m.errors).sum();
            println!(
                "| {} | {c} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} | {client:.0} | {errors} |",
                sys.name, row.p50, row.p99, row.throughput, row.cpu, row.main_cpu
            );
            if let Some(e) = ms_.iter().find_map(|m| m.first_error.clone()) {
                println!("|  first error: {} | | | | | | | | |", e.replace('|', "/"));
            }
            per.push(row);
        }
        summary.push(per);
    }
    let failed: u64 = results
        .iter()
        .flatten()
        .flatten()
        .map(|m| m.errors)
        .sum::<u64>()
        + sustained_errors;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!("\n### Other ratios\n");
    println!("| ratio | value |\n|---|---|");
    println!(
        "| plugin protocol 2 p50 / protocol 1 p50, concurrency 1 | {:.2} |",
        ratio(summary[5][0].p50, summary[0][0].p50)
    );
    println!(
        "| plugin protocol 2 throughput / protocol 1 throughput, concurrency 64 | {:.2} |",
        ratio(summary[5][1].throughput, summary[0][1].throughput)
    );
    println!(
        "| plugin protocol 2 CPU per call - protocol 1 CPU per call (toolhost + plugin), concurrency 64 | {:.0} µs |",
        summary[5][1].cpu - summary[0][1].cpu
    );
    if let Some(p) = peer {
        println!(
            "| toolhost p50 / FastMCP proxy p50, concurrency 1 | {:.2} |",
            ratio(summary[0][0].p50, summary[p][0].p50)
        );
        println!(
            "| toolhost throughput / FastMCP proxy throughput, concurrency 64 | {:.2} |",
            ratio(summary[0][1].throughput, summary[p][1].throughput)
        );
    }
    drop(systems);

    println!("\n## Memory\n\n| measurement | RSS |\n|---|---|");
    let mib = |kib: u64| kib as f64 / 1024.0;
    for (i, mode) in ["default mode", "stateless JSON"].iter().enumerate() {
        println!(
            "| toolhost idle, one plugin ({mode}) | {:.1} MiB |",
            mib(idle_rss[i])
        );
        println!(
            "| toolhost after {} s at concurrency 64 ({mode}), as the load ends | {:.1} MiB |",
            sustained.as_secs(),
            mib(loaded_rss[i])
        );
        println!(
            "| the same, settled (lowest within 6 s of the end) | {:.1} MiB |",
            mib(settled_rss[i])
        );
    }
    scale::print_rss_with_tools(if quick { 2_000 } else { 10_000 }).await;

    println!("\n## Progress at its maximum rate (plugin protocol 2)\n");
    progress::report(if quick { 300 } else { 3_000 }).await?;

    println!("\n## A call through each SDK (plugin protocol 2)\n");
    sdks::report(quick).await?;

    println!("\n## A live upgrade under load (8 agents)\n");
    upgrade::report().await?;

    println!("\n## The catalog at scale (real rmcp clients, in process)\n");
    let revision = scale::report(if quick { 200 } else { 1_000 }).await?;

    println!("\n## Argument checking against jsonschema's `is_valid`\n");
    let checks = argcheck::report(if quick { 3 } else { 15 })?;

    println!("\n## Tool calls as MCP tasks\n");
    let n = if quick { 100 } else { 1_000 };
    tasks::report(n, n).await?;

    println!("\n## What tracing costs a call\n");
    telemetry::report(if quick { 300 } else { 3_000 }).await?;

    println!("\n## What the operator's policy costs a call\n");
    policy::report(if quick { 300 } else { 3_000 }).await?;
    println!("\n## What an access token costs a call\n");
    oauth::report(if quick { 300 } else { 3_000 }).await?;

    // The full run leaves the fleet to `--fleet 50,100,200` (minutes);
    // the quick one runs three daemons so the harness cannot rot.
    if quick {
        println!("\n## A fleet through NATS JetStream (3 daemons)\n");
        fleet::report(&[3], true).await?;
    }

    goals(&Goals {
        summary: &summary,
        idle_rss,
        loaded_rss,
        settled_rss,
        sustained,
        revision,
        checks: &checks,
    });
    println!("\nwhole run: {:.0} s", started.elapsed().as_secs_f64());
    if failed > 0 {
        bail!("{failed} call(s) failed during the run; see the first errors above");
    }
    Ok(())
}
