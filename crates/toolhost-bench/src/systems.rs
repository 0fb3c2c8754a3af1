//! The systems a benchmark measures, started and stopped: toolhost in its
//! modes, the floor, the direct gRPC call and the FastMCP peer; and the
//! helpers that start them (scratch directories, configurations, ports).

use crate::load::{Endpoint, Session};
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toolhost_bench::procs;
use toolhost_proto::contract;
use toolhost_proto::plugin::plugin_client::PluginClient;

pub(crate) const TOKEN: &str = "bench-token-0123456789";

/// Every Rust system under test (toolhost, its plugin, the floor, the plugin
/// alone) runs with the same number of Tokio workers: toolhost's default on
/// this 2-core machine (one per two cores).
pub(crate) const WORKERS: &str = "1";

/// A process tree under test; killed when dropped.
pub(crate) struct Procs(pub(crate) Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) enum Target {
    Http(Endpoint),
    Grpc(PluginClient<tonic::transport::Channel>),
}

pub(crate) struct System {
    pub(crate) name: &'static str,
    pub(crate) target: Target,
    /// The server processes whose CPU is charged to this system.
    pub(crate) pids: Vec<u32>,
    pub(crate) main_pid: u32,
    pub(crate) _procs: Procs,
}

pub(crate) fn exe_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

/// The daemon under test: this build's, or the one `BENCH_TOOLHOST`
/// names (an older build, for a before and after from the same harness).
pub(crate) fn toolhost_exe() -> PathBuf {
    std::env::var_os("BENCH_TOOLHOST").map_or_else(|| exe_dir().join("toolhost"), PathBuf::from)
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads lines of `r` until one starts with `prefix`; returns the rest.
pub(crate) fn wait_line(
    r: impl std::io::Read + Send + 'static,
    prefix: &'static str,
) -> Result<String> {
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

pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn echo_args() -> Value {
    json!({ "msg": "hello", "n": 3 })
}

pub(crate) fn scratch(tag: &str) -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("toolhost-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// A plugin directory for testplug with the `echo` tool only.
pub(crate) fn plugin_dir(dir: &Path) -> Result<PathBuf> {
    plugin_dir_for(dir, 1)
}

/// A plugin directory for testplug speaking plugin protocol `protocol`,
/// with `echo` (and, for protocol 2, `steps`, which reports progress).
pub(crate) fn plugin_dir_for(dir: &Path, protocol: u32) -> Result<PathBuf> {
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
pub(crate) fn toolhost_config(
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
            "plugins = [{:?}]\nstate_dir = {:?}\n[limits]\nstate_reserve_mb = 1\n[log]\nlevel = \"warn\"\n[http]\nstateless_json = {stateless}\ndirect_calls = {direct}\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n[backend]\nmanaged = {managed}\n[plugin.bench]\npass_env = [\"TOKIO_WORKER_THREADS\"]\n",
            plugins.display().to_string(),
            dir.join("state").display().to_string()
        ),
    )?;
    Ok(file)
}

pub(crate) async fn ready_http(ep: &Endpoint) -> Result<()> {
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
pub(crate) struct Spawned {
    pub(crate) dir: PathBuf,
    pub(crate) url: String,
    pub(crate) procs: Procs,
}

impl Spawned {
    pub(crate) fn pid(&self) -> u32 {
        self.procs.0.first().map_or(0, Child::id)
    }
}

/// Starts toolhost (HTTP on a free port) and waits for its serving line.
pub(crate) fn spawn_toolhost(tag: &str, stateless: bool, managed: bool) -> Result<Spawned> {
    spawn_toolhost_for(tag, stateless, true, managed, 1)
}

/// Extra environment for the `toolhost` processes only, from
/// `TOOLHOST_BENCH_ENV="K=V K2=V2"`: for experiments such as an allocator
/// preloaded into toolhost alone (`LD_PRELOAD=...`) or glibc tunables,
/// without touching the floor, the plugin or the load generator.
pub(crate) fn toolhost_env() -> Vec<(String, String)> {
    std::env::var("TOOLHOST_BENCH_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// [`spawn_toolhost`] with the bench plugin speaking `protocol`.
pub(crate) fn spawn_toolhost_for(
    tag: &str,
    stateless: bool,
    direct: bool,
    managed: bool,
    protocol: u32,
) -> Result<Spawned> {
    let dir = scratch(tag)?;
    let plugins = plugin_dir_for(&dir, protocol)?;
    let config = toolhost_config(&dir, &plugins, stateless, direct, managed)?;
    spawn_config(dir, &config)
}

/// Starts toolhost on `config` (HTTP on a free port), its scratch
/// directory `dir`, and waits for its serving line.
pub(crate) fn spawn_config(dir: PathBuf, config: &Path) -> Result<Spawned> {
    spawn_config_with(&toolhost_exe(), dir, config)
}

/// [`spawn_config`] with the `toolhost` binary at `toolhost`.
pub(crate) fn spawn_config_with(toolhost: &Path, dir: PathBuf, config: &Path) -> Result<Spawned> {
    let mut child = Command::new(toolhost)
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(config)
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
pub(crate) async fn start_toolhost(stateless: bool, direct: bool, protocol: u32) -> Result<System> {
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

pub(crate) async fn start_floor(json_mode: bool) -> Result<System> {
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

pub(crate) async fn start_direct_grpc() -> Result<System> {
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
pub(crate) async fn admin_client(sock: &Path) -> Result<toolhost_admin::Client> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match toolhost_admin::connect_unix(sock).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

pub(crate) async fn wait_port(port: u16) -> Result<()> {
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

pub(crate) async fn start_fastmcp() -> Result<System> {
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
