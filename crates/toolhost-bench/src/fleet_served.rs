//! `--fleet-served N,...`: the fleet's large revision with its tools
//! served. `--fleet` measures a 10,000-tool revision whose plugins no
//! daemon has, so every tool is judged and withheld; here every daemon has
//! the plugins installed and running (313 small `testplug` processes of 32
//! tools each, in the default sandbox), so each tool is judged against its
//! declaration, its schema compiled (once per distinct schema) and served.
//!
//! Measured per N, from the backend's write of the revision: the time to
//! each daemon having applied it (its status entry, from a live watch),
//! the CPU each daemon spent on it, its resident memory after, and that
//! none of the tools was withheld. Fewer daemons than `--fleet` runs:
//! each carries 313 plugin processes (about 2 GiB with their memory).

use crate::fleet::{EPOCH, PHASE, Seen, applied, available_kib, bucket, quantile, start_nats};
use crate::systems::{exe_dir, scratch};
use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_bench::procs;

/// Tools a plugin declares at most.
const PER_PLUGIN: usize = 32;

/// A plugin declaring `tools` (its share of the revision), in the shapes
/// the withheld row pushes: a title, a description and a schema of its own
/// per tool.
fn plugin(
    root: &Path,
    index: usize,
    tools: std::ops::Range<usize>,
    testplug: &Path,
) -> Result<PathBuf> {
    let id = format!("p{index:04}");
    let dir = root.join(&id);
    std::fs::create_dir_all(&dir)?;
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Served\"\n\n[runtime]\ncommand = {:?}\nargs = [\"--mode\", \"normal\"]\nenv = {{ TOKIO_WORKER_THREADS = \"1\", TESTPLUG_QUIET = \"1\" }}\nstartup_timeout_ms = 120000\n\n[capabilities]\nmemory_mb = 256\nprocesses = 16\n",
        testplug.display().to_string()
    );
    for i in tools {
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"tool_{i}\"\ntitle = \"Tool {i}\"\ndescription = \"Does thing number {i} for the task.\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\", properties = {{ arg_{i} = {{ type = \"string\", maxLength = 100 }}, count = {{ type = \"integer\" }} }}, required = [\"arg_{i}\"] }}\n"
        ));
    }
    std::fs::write(dir.join("plugin.toml"), toml)?;
    Ok(dir)
}

/// The revision: every tool of these manifests, as a backend would push it.
fn snapshot(manifests: &[toolhost_manifest::Manifest], revision: u64, tools: usize) -> Vec<u8> {
    let mut s = toolhost_catalog::Snapshot::from_manifests("kandev", "bench", revision, manifests);
    s.epoch = EPOCH;
    s.tools.truncate(tools);
    prost::Message::encode_to_vec(&toolhost_managed::snapshot_to_proto(&s))
}

/// One row per N in `sizes`.
pub(crate) async fn report(sizes: &[usize], quick: bool) -> Result<()> {
    let tools = if quick { 1_000 } else { 10_000 };
    println!(
        "| daemons | plugins per daemon | {tools}-tool revision, served: bytes | applied p50 / p99 / max | CPU per daemon | withheld | daemon RSS before / after |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &n in sizes {
        eprintln!("fleet, served: {n} daemons");
        run(n, tools).await?;
    }
    Ok(())
}

async fn run(n: usize, tools: usize) -> Result<()> {
    let testplug = exe_dir().join("testplug");
    if !testplug.is_file() {
        bail!("{} is not built", testplug.display());
    }
    let count = tools.div_ceil(PER_PLUGIN);
    // A testplug holds about 6 MiB: leave the machine a third of its memory.
    let need_kib = (n * count) as u64 * 6 * 1024;
    if need_kib * 3 > available_kib() * 2 {
        println!(
            "| {n} | {count} | not measured: {n} x {count} plugin processes would not fit this machine's memory | | | | |"
        );
        return Ok(());
    }
    let dir = scratch(&format!("fleet-served-{n}"))?;
    let (_server, url) = start_nats(&dir)?;
    let dirs: Vec<PathBuf> = (0..count)
        .map(|p| {
            let end = ((p + 1) * PER_PLUGIN).min(tools);
            plugin(&dir.join("plugins"), p, p * PER_PLUGIN..end, &testplug)
        })
        .collect::<Result<_>>()?;
    let manifests: Vec<toolhost_manifest::Manifest> = dirs
        .iter()
        .map(|d| {
            toolhost_manifest::Manifest::load(d)
                .map_err(|p| anyhow::anyhow!("the bench plugin's manifest: {p:?}"))
        })
        .collect::<Result<_>>()?;

    let kv = bucket(&url, "toolhost_bench").await?;
    let seen: Seen = Arc::default();
    let withheld: Arc<Mutex<HashMap<(String, u64), usize>>> = Arc::default();
    let mut watch = kv.watch("status.*").await?;
    {
        let (seen, withheld) = (Arc::clone(&seen), Arc::clone(&withheld));
        tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let Ok(s) = serde_json::from_slice::<toolhost_fleet::StatusEntry>(&e.value) else {
                    continue;
                };
                if let Ok(mut w) = withheld.lock() {
                    w.insert((s.daemon.clone(), s.revision), s.withheld_total);
                }
                if let Ok(mut m) = seen.lock() {
                    m.entry((s.daemon, s.revision)).or_insert_with(Instant::now);
                }
            }
        });
    }
    kv.put("catalog", snapshot(&manifests, 1, 8).into()).await?;

    // The daemons one at a time: each spawns `count` sandboxed plugins.
    let ids: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
    let mut children = Vec::with_capacity(n);
    for id in &ids {
        let (d, dirs, url, id2) = (dir.clone(), dirs.clone(), url.clone(), id.clone());
        let (child, _mcp) =
            tokio::task::spawn_blocking(move || crate::fleet::start_daemon(&d, &dirs, &url, &id2))
                .await??;
        children.push(child);
        let mut admin =
            crate::systems::admin_client(&dir.join(id).join("state/admin.sock")).await?;
        let deadline = Instant::now() + PHASE;
        loop {
            let (ok, all) = crate::plugins::ready(&mut admin).await;
            if ok == count && all == count {
                break;
            }
            if Instant::now() > deadline {
                bail!("daemon {id}: only {ok} of {all} plugins ready within {PHASE:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    applied(&seen, &ids, 1, Instant::now()).await?;
    let daemons: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    let rss = |pids: &[u32]| {
        pids.iter().map(|p| procs::rss_kib(*p)).sum::<u64>() / pids.len().max(1) as u64
    };
    let before = rss(&daemons);

    let bytes = snapshot(&manifests, 2, tools);
    let size = bytes.len();
    let cpu0 = procs::cpu_of(&daemons);
    let t0 = Instant::now();
    kv.put("catalog", bytes.into()).await?;
    let apply = applied(&seen, &ids, 2, t0).await?;
    let cpu_s = (procs::cpu_of(&daemons) - cpu0) / n.max(1) as f64;
    let after = rss(&daemons);
    let held: usize = {
        let w = withheld.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        ids.iter()
            .map(|id| w.get(&(id.clone(), 2)).copied().unwrap_or(0))
            .sum()
    };

    for mut child in children {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = child.wait().context("wait for a daemon")?;
    }
    let _ = std::fs::remove_dir_all(&dir);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| {n} | {count} | {:.2} MB | {:.0} / {:.0} / {:.0} ms | {:.0} ms | {held} | {:.1} / {:.1} MiB |",
        size as f64 / 1e6,
        ms(quantile(&apply, 0.5)),
        ms(quantile(&apply, 0.99)),
        ms(quantile(&apply, 1.0)),
        cpu_s * 1e3,
        mib(before),
        mib(after),
    );
    Ok(())
}
