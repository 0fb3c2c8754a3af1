//! `--fleet N,...`: one nats-server with JetStream and N real daemons on
//! this machine, each with a small plugin and an MCP session, fed through
//! the group's key-value bucket as a backend would feed them (issue "One
//! backend, a thousand daemons").
//!
//! Measured per N:
//! - from the backend's write to each daemon having applied it, as the
//!   backend sees it (the daemon's status entry with the new revision,
//!   read from a live watch of `status.*`);
//! - from the write to `tools/list_changed` on each daemon's session;
//! - catch-up: every daemon stopped (SIGSTOP) while 10 revisions go by,
//!   then resumed: from the resume to each having applied the last one;
//! - idle CPU and resident memory per daemon, and of its plugin;
//! - a 10,000-tool revision over 313 plugins, sharded as `fleet push`
//!   writes it: its bytes, the time to all N and the CPU each daemon
//!   spends. One plugin is the daemons' own; each daemon reads that shard
//!   and none of the other 312, which is what sharding buys.

use crate::systems::{exe_dir, free_port, root, scratch, wait_line};
use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_bench::procs;

const TOKEN: &str = "fleet-bench-token-0123456789";
pub(crate) const EPOCH: u64 = 1_700_000_000_000;
/// The longest any one phase may take before the run fails.
pub(crate) const PHASE: Duration = Duration::from_secs(300);

/// Records when its session was told the tool list changed.
#[derive(Clone, Default)]
struct Told(Arc<Mutex<Option<Instant>>>);

impl Told {
    fn take(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|mut t| t.take())
    }
}

impl ClientHandler for Told {
    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        if let Ok(mut t) = self.0.lock() {
            t.get_or_insert_with(Instant::now);
        }
    }
}

/// A daemon of the benched fleet.
struct Member {
    child: Child,
    session: rmcp::service::RunningService<RoleClient, Told>,
}

/// What a run started, stopped and removed when the run ends however it
/// ends.
struct Cleanup {
    dir: PathBuf,
    pids: Vec<u32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for pid in &self.pids {
            if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The nats-server, stopped when dropped.
pub(crate) struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When each daemon's status entry first showed each revision, from a
/// live watch of `status.*`.
pub(crate) type Seen = Arc<Mutex<HashMap<(String, u64), Instant>>>;

/// Everything measured at one N.
struct Row {
    n: usize,
    apply: Vec<Duration>,
    told: Vec<Duration>,
    catch_up: Vec<Duration>,
    idle_cpu_pct: f64,
    daemon_rss_kib: u64,
    plugin_rss_kib: u64,
    big: Option<Big>,
    start: Duration,
}

/// The large snapshot's figures.
struct Big {
    bytes: usize,
    apply: Vec<Duration>,
    rss_kib: u64,
    /// CPU seconds per daemon from the write until every daemon applied it.
    cpu_s: f64,
}

/// Runs the fleet at each size and prints one table, a row as each is
/// done.
pub(crate) async fn report(sizes: &[usize], quick: bool) -> Result<()> {
    let big: usize = if quick { 1_000 } else { 10_000 };
    println!(
        "| daemons | start all | write to applied p50 / p99 / max | write to `list_changed` p50 / p99 / max | catch-up after a stop p50 / max | idle CPU per daemon | RSS per daemon (+ plugin) | {big}-tool revision over {} plugins, sharded (a daemon reads its own plugin's shard only): bytes, applied p50 / p99 / max, CPU per daemon | RSS per daemon after it |",
        big.div_ceil(32)
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        eprintln!("fleet: {n} daemons");
        let r = run(n, big, quick).await?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let q = |v: &[Duration], p: f64| ms(quantile(v, p));
        let mib = |kib: u64| kib as f64 / 1024.0;
        let big_cells = match &r.big {
            Some(b) => format!(
                "{:.2} MB, {:.0} / {:.0} / {:.0} ms, {:.0} ms CPU | {:.1} MiB",
                b.bytes as f64 / 1e6,
                q(&b.apply, 0.5),
                q(&b.apply, 0.99),
                q(&b.apply, 1.0),
                b.cpu_s * 1e3,
                mib(b.rss_kib)
            ),
            None => format!("not measured: {n} daemons would not fit this machine's memory | -"),
        };
        println!(
            "| {} | {:.1} s | {:.1} / {:.1} / {:.1} ms | {:.1} / {:.1} / {:.1} ms | {:.0} / {:.0} ms | {:.3} % of a core | {:.1} MiB (+ {:.1} MiB) | {big_cells} |",
            r.n,
            r.start.as_secs_f64(),
            q(&r.apply, 0.5),
            q(&r.apply, 0.99),
            q(&r.apply, 1.0),
            q(&r.told, 0.5),
            q(&r.told, 0.99),
            q(&r.told, 1.0),
            q(&r.catch_up, 0.5),
            q(&r.catch_up, 1.0),
            r.idle_cpu_pct,
            mib(r.daemon_rss_kib),
            mib(r.plugin_rss_kib),
        );
    }
    Ok(())
}

/// The memory available now, in KiB (`MemAvailable`).
pub(crate) fn available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn quantile(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i.min(v.len() - 1)]
}

pub(crate) fn start_nats(dir: &Path) -> Result<(Server, String)> {
    let exe = root().join(".venv/bin/nats-server");
    if !exe.is_file() {
        bail!("{} is missing: run scripts/setup-python", exe.display());
    }
    let port = free_port()?;
    let conf = dir.join("nats.conf");
    // A 10,000-tool snapshot is a few megabytes: over NATS's default
    // 1 MB payload.
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\nmax_payload: 16MB\nmax_pending: 256MB\njetstream {{ store_dir: {:?} }}\n",
            dir.join("js").display().to_string()
        ),
    )?;
    let child = Command::new(exe)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start nats-server")?;
    Ok((Server(child), format!("nats://127.0.0.1:{port}")))
}

fn plugin(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("fleetplug");
    std::fs::create_dir_all(&p)?;
    let testplug = exe_dir().join("testplug");
    if !testplug.is_file() {
        bail!("{} is not built", testplug.display());
    }
    let mut toml = format!(
        "id = \"fleetplug\"\nversion = \"1.0.0\"\nname = \"Fleet\"\n[runtime]\ncommand = {:?}\nenv = {{ TESTPLUG_QUIET = \"1\" }}\n",
        testplug.display().to_string()
    );
    for t in ["echo", "add", "fail"] {
        toml.push_str(&format!(
            "[[tools]]\nname = \"{t}\"\ndescription = \"The {t} tool.\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\", properties = {{ msg = {{ type = \"string\", maxLength = 20 }} }} }}\n"
        ));
    }
    std::fs::write(p.join("plugin.toml"), toml)?;
    Ok(p)
}

fn snapshot_bytes(manifest: &toolhost_manifest::Manifest, revision: u64, tools: usize) -> Vec<u8> {
    let mut s = toolhost_catalog::Snapshot::from_manifests("kandev", "bench", revision, [manifest]);
    s.epoch = EPOCH;
    s.tools.truncate(tools);
    prost::Message::encode_to_vec(&toolhost_managed::snapshot_to_proto(&s))
}

pub(crate) fn start_daemon(
    dir: &Path,
    plugins: &[PathBuf],
    url: &str,
    id: &str,
) -> Result<(Child, String)> {
    let d = dir.join(id);
    let plugins: Vec<String> = plugins
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    std::fs::create_dir_all(&d)?;
    let file = d.join("toolhost.toml");
    std::fs::write(
        &file,
        format!(
            "plugins = [{}]\nstate_dir = {:?}\n[limits]\nstate_reserve_mb = 1\n[log]\nlevel = \"warn\"\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n[backend.nats]\nurl = \"{url}\"\ngroup = \"bench\"\ndaemon = \"{id}\"\n",
            plugins.join(", "),
            d.join("state").display().to_string()
        ),
    )?;
    let mut child = Command::new(crate::systems::toolhost_exe())
        .args(["serve", "--config"])
        .arg(&file)
        .args(["--http", "127.0.0.1:0"])
        .envs(crate::systems::toolhost_env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start toolhost")?;
    let stderr = child.stderr.take().context("toolhost's stderr")?;
    let mcp = wait_line(stderr, "toolhost: serving MCP on ")?;
    Ok((child, mcp))
}

async fn connect(url: &str) -> Result<rmcp::service::RunningService<RoleClient, Told>> {
    let t = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        )
        .auth_header(TOKEN.to_owned()),
    );
    Ok(Told::default().serve(t).await?)
}

/// Waits until every daemon's status showed `revision`; each one's time
/// from `from`.
pub(crate) async fn applied(
    seen: &Seen,
    ids: &[String],
    revision: u64,
    from: Instant,
) -> Result<Vec<Duration>> {
    let deadline = Instant::now() + PHASE;
    loop {
        let got: Option<Vec<Duration>> = {
            let s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            ids.iter()
                .map(|id| {
                    s.get(&(id.clone(), revision))
                        .map(|t| t.saturating_duration_since(from))
                })
                .collect()
        };
        if let Some(v) = got {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("not every daemon applied revision {revision} within {PHASE:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until every session was told; each one's time from `from`.
async fn told(members: &[Member], from: Instant) -> Result<Vec<Duration>> {
    let deadline = Instant::now() + PHASE;
    let mut out: Vec<Option<Duration>> = vec![None; members.len()];
    loop {
        for (m, o) in members.iter().zip(out.iter_mut()) {
            if o.is_none()
                && let Some(t) = m.session.service().take()
            {
                *o = Some(t.saturating_duration_since(from));
            }
        }
        if out.iter().all(Option::is_some) {
            return Ok(out.into_iter().flatten().collect());
        }
        if Instant::now() > deadline {
            bail!("not every session was told within {PHASE:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn signal_all(members: &[Member], signal: rustix::process::Signal) {
    for m in members {
        if let Some(pid) = rustix::process::Pid::from_raw(m.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// The group's bucket on the nats-server at `url`, once it answers.
pub(crate) async fn bucket(url: &str, name: &str) -> Result<async_nats::jetstream::kv::Store> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match async_nats::connect(url).await {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => bail!("nats-server: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let js = async_nats::jetstream::new(client);
    Ok(js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: name.to_owned(),
            history: 1,
            max_value_size: 16 * 1024 * 1024,
            ..Default::default()
        })
        .await?)
}

async fn run(n: usize, big: usize, quick: bool) -> Result<Row> {
    let dir = scratch(&format!("fleet-{n}"))?;
    // A run that fails part way still stops its daemons and removes their
    // state (each holds a reserve on the disk).
    let mut cleanup = Cleanup {
        dir: dir.clone(),
        pids: Vec::new(),
    };
    let (_server, url) = start_nats(&dir)?;
    let plugin = plugin(&dir)?;
    let manifest = toolhost_manifest::Manifest::load(&plugin)
        .map_err(|p| anyhow::anyhow!("the bench plugin's manifest: {p:?}"))?;
    let kv = bucket(&url, "toolhost_bench").await?;
    let seen: Seen = Arc::default();
    let mut watch = kv.watch("status.*").await?;
    {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let Ok(s) = serde_json::from_slice::<toolhost_fleet::StatusEntry>(&e.value) else {
                    continue;
                };
                if let Ok(mut m) = seen.lock() {
                    m.entry((s.daemon, s.revision)).or_insert_with(Instant::now);
                }
            }
        });
    }
    kv.put("catalog", snapshot_bytes(&manifest, 1, 3).into())
        .await?;

    // Start the daemons a few at a time, then a session on each.
    let started = Instant::now();
    let ids: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
    let mut members = Vec::with_capacity(n);
    for chunk in ids.chunks(8) {
        let mut starting = Vec::new();
        for id in chunk {
            let (dir, plugin, url, id) = (dir.clone(), plugin.clone(), url.clone(), id.clone());
            starting.push(tokio::task::spawn_blocking(move || {
                start_daemon(&dir, std::slice::from_ref(&plugin), &url, &id)
            }));
        }
        for s in starting {
            let (child, mcp) = s.await??;
            let session = connect(&mcp).await?;
            cleanup.pids.push(child.id());
            members.push(Member { child, session });
        }
    }
    applied(&seen, &ids, 1, started).await?;
    let start = started.elapsed();

    // Revisions 2..: the tool list alternates between 2 and 3 tools, so
    // every session is told each time.
    let rounds: u64 = if quick { 2 } else { 5 };
    let (mut apply, mut told_after) = (Vec::new(), Vec::new());
    for r in 2..2 + rounds {
        for m in &members {
            m.session.service().take();
        }
        let bytes = snapshot_bytes(&manifest, r, if r % 2 == 0 { 2 } else { 3 });
        let t0 = Instant::now();
        kv.put("catalog", bytes.into()).await?;
        apply.extend(applied(&seen, &ids, r, t0).await?);
        told_after.extend(told(&members, t0).await?);
    }

    // Every daemon stopped while 10 revisions go by, then resumed.
    let mut revision = 1 + rounds;
    signal_all(&members, rustix::process::Signal::STOP);
    for _ in 0..10 {
        revision += 1;
        kv.put("catalog", snapshot_bytes(&manifest, revision, 3).into())
            .await?;
    }
    let t0 = Instant::now();
    signal_all(&members, rustix::process::Signal::CONT);
    let catch_up = applied(&seen, &ids, revision, t0).await?;

    // Idle: no writes, sessions open; CPU over a window, memory after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let daemons: Vec<u32> = members.iter().map(|m| m.child.id()).collect();
    let plugins: Vec<u32> = daemons.iter().flat_map(|p| procs::children(*p)).collect();
    let window = Duration::from_secs(if quick { 3 } else { 20 });
    let cpu0 = procs::cpu_of(&daemons);
    tokio::time::sleep(window).await;
    let cpu = procs::cpu_of(&daemons) - cpu0;
    let idle_cpu_pct = cpu / window.as_secs_f64() / n as f64 * 100.0;
    let rss = |pids: &[u32]| {
        pids.iter().map(|p| procs::rss_kib(*p)).sum::<u64>() / pids.len().max(1) as u64
    };
    let (daemon_rss_kib, plugin_rss_kib) = (rss(&daemons), rss(&plugins));

    // A large revision, sharded as `fleet push` writes it: 313 plugins of
    // 32 tools (for 10,000), one of them the daemons' own plugin. Each
    // daemon reads, checks and judges that one shard; the other 312 it
    // never reads. The shards go up first; what is timed is from the
    // header's write (which switches the revision) to every daemon having
    // applied it.
    let need_kib = (n as u64) * 32 * 2 + 64 * 1024;
    let big = if need_kib * 10 < available_kib() * 7 {
        revision += 1;
        let mut s = crate::scale::snapshot(big, revision);
        s.epoch = EPOCH;
        s.generation = "bench".to_owned();
        for t in s.tools.iter_mut().filter(|t| t.plugin_id == "p0") {
            t.plugin_id = "fleetplug".to_owned();
            t.exposed_name =
                toolhost_manifest::naming::exposed("kandev", "fleetplug", &t.local_name);
        }
        let (header, shards) =
            toolhost_fleet::shard_snapshot(toolhost_managed::snapshot_to_proto(&s));
        let mut size = 0;
        for (key, bytes) in shards {
            size += bytes.len();
            kv.put(key.as_str(), bytes.into()).await?;
        }
        let header = prost::Message::encode_to_vec(&header);
        size += header.len();
        let cpu0 = procs::cpu_of(&daemons);
        let t0 = Instant::now();
        kv.put("catalog", header.into()).await?;
        let apply = applied(&seen, &ids, revision, t0).await?;
        let cpu_s = (procs::cpu_of(&daemons) - cpu0) / n.max(1) as f64;
        Some(Big {
            bytes: size,
            apply,
            rss_kib: rss(&daemons),
            cpu_s,
        })
    } else {
        None
    };

    for m in members {
        let _ = m.session.cancel().await;
        let mut child = m.child;
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = child.wait();
    }
    cleanup.pids.clear();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Row {
        n,
        apply,
        told: told_after,
        catch_up,
        idle_cpu_pct,
        daemon_rss_kib,
        plugin_rss_kib,
        big,
        start,
    })
}
