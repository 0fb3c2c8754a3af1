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
//! and `--profile SECONDS [--json [--through-rmcp]]` (one toolhost under
//! load, its pid printed, for `perf record -p`).

mod argcheck;
mod load;
mod progress;
mod scale;
mod sdks;
mod soak;
mod upgrade;

use anyhow::{Context as _, Result, bail};
use load::{Endpoint, Run, Session, drive};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolhost_bench::procs;
use toolhost_proto::contract;
use toolhost_proto::plugin::plugin_client::PluginClient;
use toolhost_proto::plugin::{AgentToolContext, AgentToolRequest};

const TOKEN: &str = "bench-token-0123456789";

/// Every Rust system under test (toolhost, its plugin, the floor, the plugin
/// alone) runs with the same number of Tokio workers: toolhost's default on
/// this 2-core machine (one per two cores).
const WORKERS: &str = "1";

/// A process tree under test; killed when dropped.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

enum Target {
    Http(Endpoint),
    Grpc(PluginClient<tonic::transport::Channel>),
}

struct System {
    name: &'static str,
    target: Target,
    /// The server processes whose CPU is charged to this system.
    pids: Vec<u32>,
    main_pid: u32,
    _procs: Procs,
}

fn exe_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads lines of `r` until one starts with `prefix`; returns the rest.
fn wait_line(r: impl std::io::Read + Send + 'static, prefix: &'static str) -> Result<String> {
    use std::io::BufRead as _;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(prefix) {
                let _ = tx.send(rest.to_owned());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .with_context(|| format!("no line starting {prefix:?}"))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn echo_args() -> Value {
    json!({ "msg": "hello", "n": 3 })
}

fn scratch(tag: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("toolhost-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// A plugin directory for testplug with the `echo` tool only.
fn plugin_dir(dir: &Path) -> Result<PathBuf> {
    plugin_dir_for(dir, 1)
}

/// A plugin directory for testplug speaking plugin protocol `protocol`,
/// with `echo` (and, for protocol 2, `steps`, which reports progress).
fn plugin_dir_for(dir: &Path, protocol: u32) -> Result<PathBuf> {
    let p = dir.join("bench");
    std::fs::create_dir_all(&p)?;
    let testplug = exe_dir().join("testplug");
    if !testplug.is_file() {
        bail!(
            "{} is not built: cargo build --release --workspace --bins",
            testplug.display()
        );
    }
    std::fs::write(
        p.join("plugin.toml"),
        format!(
            r#"id = "bench"
version = "1.0.0"
name = "Bench"

[runtime]
command = "{}"
env = {{ TESTPLUG_QUIET = "1" }}
protocol = {protocol}

[[tools]]
name = "echo"
description = "Echoes its arguments."
surfaces = ["chat"]
input_schema = {{ type = "object", required = ["msg", "n"], properties = {{ msg = {{ type = "string", maxLength = 20 }}, n = {{ type = "integer", minimum = 0, maximum = 10 }} }} }}
annotations = {{ read_only = true, open_world = false }}
{}"#,
            testplug.display(),
            if protocol >= 2 {
                r#"
[[tools]]
name = "steps"
description = "Reports progress steps times, as fast as it can."
surfaces = ["chat"]
timeout_ms = 120000
input_schema = { type = "object", properties = { steps = { type = "integer", minimum = 0 }, pause_ms = { type = "integer", minimum = 0 } } }
annotations = { read_only = true, open_world = false }
"#
            } else {
                ""
            }
        ),
    )?;
    Ok(p)
}

/// `direct`: whether stateless JSON mode answers plain calls on toolhost's
/// direct path (the default) or sends them through rmcp, for comparison.
fn toolhost_config(
    dir: &Path,
    plugins: &Path,
    stateless: bool,
    direct: bool,
    managed: bool,
) -> Result<PathBuf> {
    let file = dir.join("toolhost.toml");
    std::fs::write(
        &file,
        format!(
            "plugins = [{:?}]\nstate_dir = {:?}\n[log]\nlevel = \"warn\"\n[http]\nstateless_json = {stateless}\ndirect_calls = {direct}\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n[backend]\nmanaged = {managed}\n[plugin.bench]\npass_env = [\"TOKIO_WORKER_THREADS\"]\n",
            plugins.display().to_string(),
            dir.join("state").display().to_string()
        ),
    )?;
    Ok(file)
}

async fn ready_http(ep: &Endpoint) -> Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = async {
            Session::open(http.clone(), ep.clone())
                .await?
                .call(&echo_args())
                .await
        }
        .await;
        match r {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("{} never answered", ep.url)));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A `toolhost serve` of the bench plugin in a fresh scratch directory,
/// killed when dropped.
struct Spawned {
    dir: PathBuf,
    url: String,
    procs: Procs,
}

impl Spawned {
    fn pid(&self) -> u32 {
        self.procs.0.first().map_or(0, Child::id)
    }
}

/// Starts toolhost (HTTP on a free port) and waits for its serving line.
fn spawn_toolhost(tag: &str, stateless: bool, managed: bool) -> Result<Spawned> {
    spawn_toolhost_for(tag, stateless, true, managed, 1)
}

/// Extra environment for the `toolhost` processes only, from
/// `TOOLHOST_BENCH_ENV="K=V K2=V2"`: for experiments such as an allocator
/// preloaded into toolhost alone (`LD_PRELOAD=...`) or glibc tunables,
/// without touching the floor, the plugin or the load generator.
fn toolhost_env() -> Vec<(String, String)> {
    std::env::var("TOOLHOST_BENCH_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// [`spawn_toolhost`] with the bench plugin speaking `protocol`.
fn spawn_toolhost_for(
    tag: &str,
    stateless: bool,
    direct: bool,
    managed: bool,
    protocol: u32,
) -> Result<Spawned> {
    let dir = scratch(tag)?;
    let plugins = plugin_dir_for(&dir, protocol)?;
    let config = toolhost_config(&dir, &plugins, stateless, direct, managed)?;
    let mut child = Command::new(exe_dir().join("toolhost"))
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("TOKIO_WORKER_THREADS", WORKERS)
        .envs(toolhost_env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start toolhost (cargo build --release --workspace --bins)")?;
    let stderr = child.stderr.take().context("stderr")?;
    let procs = Procs(vec![child]);
    let url = wait_line(stderr, "toolhost: serving MCP on ")?;
    Ok(Spawned { dir, url, procs })
}

/// `direct: false` is stateless JSON mode with every request through rmcp:
/// what the direct path buys, measured in the same run.
async fn start_toolhost(stateless: bool, direct: bool, protocol: u32) -> Result<System> {
    let (tag, name) = match (stateless, direct, protocol) {
        (_, _, 2) => ("toolhost-v2", "toolhost, plugin protocol 2"),
        (true, true, _) => ("toolhost-json", "toolhost (stateless JSON)"),
        (true, false, _) => (
            "toolhost-json-rmcp",
            "toolhost (stateless JSON, direct_calls off: all through rmcp)",
        ),
        (false, _, _) => ("toolhost", "toolhost"),
    };
    let Spawned {
        url, procs: guard, ..
    } = spawn_toolhost_for(tag, stateless, direct, false, protocol)?;
    let ep = Endpoint {
        url,
        token: Some(TOKEN.into()),
        tool: "kandev_bench_echo".into(),
        session: !stateless,
    };
    ready_http(&ep).await?;
    let pid = guard.0.first().map_or(0, Child::id);
    let mut pids = vec![pid];
    pids.extend(procs::children(pid));
    Ok(System {
        name,
        target: Target::Http(ep),
        pids,
        main_pid: pid,
        _procs: guard,
    })
}

async fn start_floor(json_mode: bool) -> Result<System> {
    let mut cmd = Command::new(exe_dir().join("floor"));
    cmd.env("TOKIO_WORKER_THREADS", WORKERS);
    if json_mode {
        cmd.arg("--json");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start floor")?;
    let url = wait_line(
        child.stderr.take().context("stderr")?,
        "floor: serving MCP on ",
    )?;
    let ep = Endpoint {
        url,
        token: None,
        tool: "echo".into(),
        session: !json_mode,
    };
    ready_http(&ep).await?;
    let pid = child.id();
    Ok(System {
        name: if json_mode {
            "floor: in-process rmcp (stateless JSON)"
        } else {
            "floor: in-process rmcp"
        },
        target: Target::Http(ep),
        pids: vec![pid],
        main_pid: pid,
        _procs: Procs(vec![child]),
    })
}

async fn start_direct_grpc() -> Result<System> {
    let dir = scratch("grpc")?;
    let mut child = Command::new(exe_dir().join("testplug"))
        .env(contract::MAGIC_COOKIE_KEY, contract::MAGIC_COOKIE_VALUE)
        .env(contract::PROTOCOL_VERSIONS_KEY, contract::PROTOCOL_VERSION)
        .env(contract::DATA_DIR_KEY, &dir)
        .env("TESTPLUG_QUIET", "1")
        .env("TOKIO_WORKER_THREADS", WORKERS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    // The first line a plugin prints is its handshake.
    let line = wait_line(child.stdout.take().context("stdout")?, "")?;
    let socket = contract::handshake::parse(&line)
        .map_err(|e| anyhow::anyhow!("testplug's handshake: {e}"))?
        .socket;
    let channel = contract::connect_unix(
        tonic::transport::Endpoint::from_static("http://plugin.invalid"),
        socket,
    )
    .await?;
    let pid = child.id();
    Ok(System {
        name: "grpc-direct: the plugin alone",
        target: Target::Grpc(PluginClient::new(channel)),
        pids: vec![pid],
        main_pid: pid,
        _procs: Procs(vec![child]),
    })
}

/// The admin API of a daemon that has just started: its socket appears a
/// moment after the HTTP listener.
async fn admin_client(
    sock: &Path,
) -> Result<toolhost_proto::admin::admin_client::AdminClient<tonic::transport::Channel>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match toolhost_admin::connect_unix(sock).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn wait_port(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("nothing listens on port {port}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn start_fastmcp() -> Result<System> {
    let python = root().join(".venv/bin/python");
    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("peer");
    let (up, gw) = (free_port()?, free_port()?);
    let upstream = Command::new(&python)
        .arg(peer.join("upstream.py"))
        .arg(up.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start the FastMCP upstream (scripts/bench installs fastmcp)")?;
    wait_port(up).await?;
    let gateway = Command::new(&python)
        .arg(peer.join("proxy.py"))
        .arg(format!("http://127.0.0.1:{up}/mcp"))
        .arg(gw.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    wait_port(gw).await?;
    let ep = Endpoint {
        url: format!("http://127.0.0.1:{gw}/mcp"),
        token: None,
        tool: "up_echo".into(),
        session: true,
    };
    ready_http(&ep).await?;
    let pids = vec![gateway.id(), upstream.id()];
    let main_pid = gateway.id();
    Ok(System {
        name: "fastmcp-proxy: FastMCP gateway -> FastMCP upstream",
        target: Target::Http(ep),
        pids,
        main_pid,
        _procs: Procs(vec![gateway, upstream]),
    })
}

/// One measurement of one system at one concurrency.
#[derive(Debug, Clone, Default)]
struct Measured {
    p50: Duration,
    p99: Duration,
    throughput: f64,
    server_cpu_us: f64,
    /// The system's first process alone (toolhost without its plugin).
    main_cpu_us: f64,
    client_cpu_us: f64,
    errors: u64,
    first_error: Option<String>,
}

async fn measure(
    sys: &System,
    concurrency: usize,
    duration: Duration,
    http: &reqwest::Client,
) -> Result<Measured> {
    let server0 = procs::cpu_of(&sys.pids);
    let main0 = procs::cpu_seconds(sys.main_pid);
    let me = std::process::id();
    let client0 = procs::cpu_seconds(me);
    let (mut run, sessions): (Run, Vec<Session>) = match &sys.target {
        Target::Http(ep) => {
            let (http, ep) = (http.clone(), ep.clone());
            let (run, sessions) = drive(
                concurrency,
                duration,
                || Session::open(http.clone(), ep.clone()),
                |mut s: Session| {
                    Box::pin(async move {
                        let r = s.call(&echo_args()).await;
                        (s, r)
                    })
                },
            )
            .await?;
            (run, sessions)
        }
        Target::Grpc(client) => {
            let client = client.clone();
            let (run, _) = drive(
                concurrency,
                duration,
                || {
                    let c = client.clone();
                    async move { Ok(c) }
                },
                |mut c: PluginClient<tonic::transport::Channel>| {
                    Box::pin(async move {
                        let req = AgentToolRequest {
                            invocation_id: "bench".into(),
                            name: "echo".into(),
                            arguments: echo_args()
                                .as_object()
                                .map(toolhost_proto::json::struct_from_json),
                            context: Some(AgentToolContext {
                                task_id: "t".into(),
                                session_id: "s".into(),
                                workspace_id: String::new(),
                                surface: "chat".into(),
                            }),
                        };
                        let r = c
                            .invoke_agent_tool(req)
                            .await
                            .map(|_| ())
                            .map_err(anyhow::Error::from);
                        (c, r)
                    })
                },
            )
            .await?;
            (run, Vec::new())
        }
    };
    let server = procs::cpu_of(&sys.pids) - server0;
    let main = procs::cpu_seconds(sys.main_pid) - main0;
    for s in sessions {
        s.close().await;
    }
    let client = procs::cpu_seconds(me) - client0;
    let calls = run.calls.max(1) as f64;
    Ok(Measured {
        p50: run.percentile(0.50),
        p99: run.percentile(0.99),
        throughput: run.throughput(),
        server_cpu_us: server / calls * 1e6,
        main_cpu_us: main / calls * 1e6,
        client_cpu_us: client / calls * 1e6,
        errors: run.errors,
        first_error: run.first_error.take(),
    })
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `--profile SECONDS [--json] [--concurrency N]`: one toolhost under load
/// at concurrency N (64 unless given) for SECONDS, its pids printed first,
/// so a profiler can attach:
/// `perf record -p PID -- sleep 20`.
async fn profile_target(
    seconds: u64,
    stateless: bool,
    direct: bool,
    concurrency: usize,
) -> Result<()> {
    let sys = start_toolhost(stateless, direct, 1).await?;
    println!(
        "toolhost pid {}; server pids {:?}; driving concurrency {concurrency} for {seconds} s",
        sys.main_pid, sys.pids
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()?;
    let idle = procs::rss_kib(sys.main_pid);
    let m = measure(&sys, concurrency, Duration::from_secs(seconds), &http).await?;
    let loaded = procs::rss_kib(sys.main_pid);
    let calm = settled(sys.main_pid).await;
    println!(
        "toolhost RSS idle {:.1} MiB, as the load ends {:.1} MiB, settled {:.1} MiB",
        idle as f64 / 1024.0,
        loaded as f64 / 1024.0,
        calm as f64 / 1024.0
    );
    println!(
        "{:.0} calls/s, p50 {:.3} ms, server CPU {:.0} µs/call (toolhost alone {:.0}), errors {}",
        m.throughput,
        ms(m.p50),
        m.server_cpu_us,
        m.main_cpu_us,
        m.errors
    );
    Ok(())
}

/// The lowest resident memory of `pid` over the next 6 s: what a load
/// leaves behind once the daemon has had its quiet moment (it gives
/// freed memory back on the first quiet tick after a load).
async fn settled(pid: u32) -> u64 {
    let mut lowest = procs::rss_kib(pid);
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(250)).await;
        lowest = lowest.min(procs::rss_kib(pid));
    }
    lowest
}

/// One system at one concurrency: the medians of its rounds.
#[derive(Debug, Clone, Copy)]
struct Summary {
    p50: f64,
    p99: f64,
    throughput: f64,
    /// Every process of the system, µs per call.
    cpu: f64,
    /// Its first process alone (toolhost without its plugin), µs per call.
    main_cpu: f64,
}

/// What the goal table is made of, all from one run.
struct Goals<'a> {
    /// Indexed as `systems` in `main`: toolhost default, toolhost stateless,
    /// floor default, floor stateless, grpc-direct, ...; then concurrency
    /// 1 and 64.
    summary: &'a [Vec<Summary>],
    idle_rss: [u64; 2],
    loaded_rss: [u64; 2],
    settled_rss: [u64; 2],
    sustained: Duration,
    revision: Duration,
    checks: &'a [argcheck::Timed],
}

/// The table of the performance goals, each row beside its goal.
fn goals(g: &Goals<'_>) {
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

/// The modes and their options.
#[derive(Debug, clap::Parser)]
#[command(about = "toolhost's costs next to the floor and a peer, in one run")]
struct Args {
    /// The CI form: one short round.
    #[arg(long)]
    quick: bool,
    /// Leave out the FastMCP peer.
    #[arg(long)]
    no_peer: bool,
    /// Only a live upgrade under load.
    #[arg(long)]
    upgrade: bool,
    /// Only a soak of this many seconds.
    #[arg(long, value_name = "SECONDS")]
    soak: Option<u64>,
    /// Only one toolhost under load for this many seconds, for a profiler.
    #[arg(long, value_name = "SECONDS")]
    profile: Option<u64>,
    /// With --profile: stateless JSON mode.
    #[arg(long)]
    json: bool,
    /// With --profile --json: every request through rmcp (`direct_calls =
    /// false`), to compare with toolhost's direct path.
    #[arg(long)]
    through_rmcp: bool,
    /// With --profile: how many calls at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Only progress forwarding, with this many updates.
    #[arg(long, value_name = "STEPS")]
    progress: Option<u64>,
    /// Only a call's cost through each SDK's plugin.
    #[arg(long)]
    sdks: bool,
    /// Only the catalog at scale (revisions, listing, fan-out).
    #[arg(long)]
    scale: bool,
    /// Only argument checking against jsonschema's `is_valid`.
    #[arg(long)]
    argcheck: bool,
}

/// Kept whole on purpose: the bench's table of contents; each mode is a
/// call, and the order here is the order of the report.
#[tokio::main]
async fn main() -> Result<()> {
    let args = <Args as clap::Parser>::parse();
    if args.upgrade {
        println!("## A live upgrade under load (8 agents)\n");
        return upgrade::report().await;
    }
    if args.sdks {
        println!("## A call through each SDK (plugin protocol 2)\n");
        return sdks::report(args.quick).await;
    }
    if args.scale {
        println!("## The catalog at scale\n");
        return scale::report(if args.quick { 200 } else { 1_000 })
            .await
            .map(drop);
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
    if !skip_peer {
        match start_fastmcp().await {
            Ok(s) => systems.push(s),
            Err(e) => println!("(peer not measured: {e:#})\n"),
        }
    }
    let idle_rss = [
        procs::rss_kib(systems[0].main_pid),
        procs::rss_kib(systems[1].main_pid),
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
    if systems.len() > 6 {
        println!(
            "| toolhost p50 / FastMCP proxy p50, concurrency 1 | {:.2} |",
            ratio(summary[0][0].p50, summary[6][0].p50)
        );
        println!(
            "| toolhost throughput / FastMCP proxy throughput, concurrency 64 | {:.2} |",
            ratio(summary[0][1].throughput, summary[6][1].throughput)
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
    match scale::rss_with_tools(if quick { 2_000 } else { 10_000 }).await {
        Ok((n, kib)) => println!(
            "| toolhost with {n} tools in its catalog | {:.1} MiB |",
            mib(kib)
        ),
        Err(e) => println!("| toolhost with many tools | not measured: {e:#} |"),
    }

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
