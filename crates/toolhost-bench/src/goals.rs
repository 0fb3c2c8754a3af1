//! The goal table: every goal of the harness, from one run.

use crate::argcheck;
use std::time::Duration;

/// One system at one concurrency: the medians of its rounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) throughput: f64,
    /// Every process of the system, µs per call.
    pub(crate) cpu: f64,
    /// Its first process alone (toolhost without its plugin), µs per call.
    pub(crate) main_cpu: f64,
}

/// What the goal table is made of, all from one run.
pub(crate) struct Goals<'a> {
    /// Indexed as `systems` in `main`: toolhost default, toolhost stateless,
    /// floor default, floor stateless, grpc-direct, ...; then concurrency
    /// 1 and 64.
    pub(crate) summary: &'a [Vec<Summary>],
    pub(crate) idle_rss: [u64; 2],
    pub(crate) loaded_rss: [u64; 2],
    pub(crate) settled_rss: [u64; 2],
    pub(crate) sustained: Duration,
    pub(crate) revision: Duration,
    pub(crate) checks: &'a [argcheck::Timed],
}

/// The table of the performance goals, each row beside its goal.
pub(crate) fn goals(g: &Goals<'_>) {
    let s = g.summary;
    let met = |ok: bool| if ok { "met" } else { "missed" };
    println!("\n## The goals, from this run\n");
    println!("| measure | toolhost | floor + hop, or the reference | ratio | goal | |");
    println!("|---|---|---|---|---|---|");
    let hop = s[4][0].p50;
    for (i, mode, floor) in [(0, "default mode", 2), (1, "stateless JSON", 3)] {
        let base = s[floor][0].p50 + hop;
        let r = s[i][0].p50 / base;
        println!(
            "| p50 at concurrency 1, {mode}, vs floor p50 + grpc-direct p50 | {:.3} ms | {:.3} + {hop:.3} = {base:.3} ms | {r:.2}x | <= 1.15x | {} |",
            s[i][0].p50,
            s[floor][0].p50,
            met(r <= 1.15)
        );
    }
    for (i, mode, floor) in [(0, "default mode", 2), (1, "stateless JSON", 3)] {
        let r = s[i][1].throughput / s[floor][1].throughput;
        let mut ok = r >= 0.75;
        let mut goal = ">= 0.75x".to_owned();
        if i == 1 {
            ok &= s[1][1].throughput >= s[0][1].throughput;
            goal.push_str(&format!(
                ", and >= default mode ({:.0}/s)",
                s[0][1].throughput
            ));
        }
        println!(
            "| calls/s at concurrency 64, {mode}, vs the floor | {:.0} | {:.0} | {r:.2}x | {goal} | {} |",
            s[i][1].throughput,
            s[floor][1].throughput,
            met(ok)
        );
    }
    for (i, mode) in [(0, "default mode"), (1, "stateless JSON")] {
        println!(
            "| toolhost CPU per call, toolhost process only, concurrency 64, {mode} | {:.0} µs | plugin: {:.0} µs | | <= 30 µs | {} |",
            s[i][1].main_cpu,
            s[i][1].cpu - s[i][1].main_cpu,
            met(s[i][1].main_cpu <= 30.0)
        );
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    for (i, mode) in [(0, "default mode"), (1, "stateless JSON")] {
        let (idle, loaded, settled) = (
            mib(g.idle_rss[i]),
            mib(g.loaded_rss[i]),
            mib(g.settled_rss[i]),
        );
        println!(
            "| RSS idle, {mode} | {idle:.1} MiB | | | <= 10 MiB | {} |",
            met(idle <= 10.0)
        );
        println!(
            "| RSS after {} s at concurrency 64, {mode}: as it ends / settled | {loaded:.1} / {settled:.1} MiB | idle {idle:.1} MiB | +{:.1} / +{:.1} MiB | <= idle + 5 MiB | {} |",
            g.sustained.as_secs(),
            loaded - idle,
            settled - idle,
            match (loaded <= idle + 5.0, settled <= idle + 5.0) {
                (true, _) => "met",
                (false, true) => "met once settled",
                (false, false) => "missed",
            }
        );
    }
    let rev = g.revision.as_secs_f64() * 1000.0;
    println!(
        "| one-tool revision of a 10,000-tool catalog, tools in another order (median of 5) | {rev:.2} ms | | | <= 2 ms | {} |",
        met(rev <= 2.0)
    );
    for c in g.checks {
        println!(
            "| argument check, valid arguments, {} schema, vs `is_valid` | {:.0} ns | {:.0} ns | {:.2}x | <= 1.2x | {} |",
            c.name,
            c.check_ns,
            c.is_valid_ns,
            c.ratio(),
            met(c.ratio() <= 1.2)
        );
    }
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::metadata(p.with_file_name("toolhost")).ok())
        .map_or(0, |m| m.len());
    println!(
        "| the `toolhost` binary beside this one | {:.1} MB | | | report | |",
        binary as f64 / 1e6
    );
}
