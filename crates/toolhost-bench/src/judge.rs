//! One daemon's work for a large pushed revision whose plugins it does not
//! have, step by step and in-process: what each of a fleet's daemons pays
//! when the bucket's catalog changes, without NATS or the other daemons.
//! The fleet row (`--fleet`) is this times the daemons on a core.

use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_catalog::{Installed, Store};

/// The median of each step over `rounds` revisions of `n` tools.
pub async fn report(n: usize, rounds: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("toolhost-bench-judge-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = Arc::new(Store::new("kandev"));
    let installed = Arc::new(arc_swap::ArcSwap::from_pointee(Installed::default()));
    let managed = toolhost_managed::Managed::open(
        Arc::clone(&store),
        installed,
        Some(dir.join("catalog-fence.json")),
    )?;
    let (mut decode, mut apply) = (Vec::new(), Vec::new());
    let mut size = 0;
    for revision in 1..=rounds {
        let mut s = crate::scale::snapshot(n, revision);
        s.generation = "bench".to_owned();
        let bytes = prost::Message::encode_to_vec(&toolhost_managed::snapshot_to_proto(&s));
        size = bytes.len();
        drop(s);
        let t = Instant::now();
        let pushed = <toolhost_proto::admin::Snapshot as prost::Message>::decode(bytes.as_slice())?;
        decode.push(t.elapsed());
        let t = Instant::now();
        let answer = managed.offer(pushed)?;
        apply.push(t.elapsed());
        anyhow::ensure!(
            answer.revision == revision && answer.defects_total as usize == n,
            "revision {revision}: outcome {} with {} withheld",
            answer.outcome,
            answer.defects_total
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ms = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1000.0
    };
    println!(
        "| {n} pushed tools, all withheld ({size} bytes), median of {rounds} | time |\n|---|---|"
    );
    println!("| in-process: decode the protobuf | {:.1} ms |", ms(decode));
    println!(
        "| in-process: convert, judge, swap and keep on disk | {:.1} ms |",
        ms(apply)
    );
    let (wall, cpu) = daemon(n, rounds).await?;
    println!(
        "| a managed daemon, pushed over the admin API: until answered (median) | {wall:.1} ms |"
    );
    println!("| the same daemon's CPU per push (mean; /proc's 10 ms ticks) | {cpu:.1} ms |");
    Ok(())
}

/// The same revisions pushed to a real managed daemon over its admin API,
/// one at a time: the wall time until it answers (median), and its CPU
/// per push read from /proc over all of them (including what the push
/// leaves for later, within 200 ms of the answer).
async fn daemon(n: usize, rounds: u64) -> Result<(f64, f64)> {
    let daemon = crate::systems::spawn_toolhost("judge", false, true)?;
    let admin = crate::systems::admin_client(&daemon.dir.join("state/admin.sock")).await?;
    let pid = daemon.pid();
    let mut walls = Vec::new();
    let mut cpu = 0.0;
    for revision in 1..=rounds {
        let mut s = crate::scale::snapshot(n, revision);
        s.generation = "bench".to_owned();
        let request = toolhost_admin::admin::PushCatalogRequest {
            snapshot: Some(toolhost_managed::snapshot_to_proto(&s)),
        };
        drop(s);
        let mut admin = admin.clone();
        let c0 = toolhost_bench::procs::cpu_seconds(pid);
        let t = Instant::now();
        let answer = admin.push_catalog(request).await?.into_inner();
        walls.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
        cpu += toolhost_bench::procs::cpu_seconds(pid) - c0;
        anyhow::ensure!(
            answer.revision == revision,
            "revision {revision}: outcome {}",
            answer.outcome
        );
    }
    walls.sort();
    let wall = walls[walls.len() / 2].as_secs_f64() * 1000.0;
    Ok((wall, cpu * 1000.0 / rounds as f64))
}
