//! Operating a large daemon: what `toolhost status`, `toolhost plugins
//! list`, `plugins show` and `/metrics` cost at N plugins of 32 tools each
//! (1,000 plugins: 32,000 tools): the bytes each answer is, and the
//! daemon's CPU and the wall time per call.
//!
//! The commands are the `toolhost` binary beside this one, run as an
//! operator runs them; `BENCH_TOOLHOST` names another build (an older one,
//! for a before-and-after: a command it does not know is reported as such).

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use toolhost_bench::procs;

/// The tools each plugin declares and serves (testplug's, by name).
const TOOLS: [&str; 32] = [
    "env",
    "echo",
    "echo_report",
    "nap",
    "only_task",
    "flood",
    "slow",
    "crash",
    "count",
    "big",
    "bad_output",
    "config",
    "read_file",
    "write_file",
    "fill",
    "hog",
    "links",
    "serve_unix",
    "stderr_bytes",
    "call_api",
    "spawn_many",
    "alloc",
    "connect",
    "connect_unix",
    "caps",
    "mknod",
    "call_socket",
    "net_probe",
    "admin_attack",
    "steps",
    "media",
    "confirm",
];

fn plugin(root: &Path, id: &str, testplug: &Path) -> Result<PathBuf> {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir)?;
    let mut manifest = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Large\"\n\n[runtime]\ncommand = {:?}\nargs = [\"--mode\", \"normal\"]\nenv = {{ TOKIO_WORKER_THREADS = \"1\", TESTPLUG_TOOLS = \"{}\" }}\nstartup_timeout_ms = 60000\n\n\
         [capabilities]\nmemory_mb = 256\nprocesses = 16\n",
        testplug.display().to_string(),
        TOOLS.join(",")
    );
    for t in TOOLS {
        manifest.push_str(&format!(
            "\n[[tools]]\nname = \"{t}\"\ndescription = \"The {t} tool of a large daemon.\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\", properties = {{ note = {{ type = \"string\" }} }} }}\nannotations = {{ read_only = true }}\n"
        ));
    }
    std::fs::write(dir.join("plugin.toml"), manifest)?;
    Ok(dir)
}

/// One command's cost: its output's bytes, the daemon's CPU and the wall
/// time per run.
struct Cost {
    bytes: usize,
    daemon_cpu_ms: f64,
    wall_ms: f64,
}

/// Runs `args` against the daemon until 2 s have passed (at least 3
/// times); `None` when the binary does not know the command.
fn measure(toolhost: &Path, admin: &Path, daemon: u32, args: &[&str]) -> Result<Option<Cost>> {
    let run = || {
        Command::new(toolhost)
            .args(args)
            .arg("--admin")
            .arg(admin)
            .output()
    };
    let first = run().with_context(|| format!("cannot run {}", toolhost.display()))?;
    if !first.status.success() {
        return Ok(None);
    }
    let bytes = first.stdout.len();
    let cpu = procs::cpu_seconds(daemon);
    let started = Instant::now();
    let mut runs = 0u32;
    while runs < 3 || started.elapsed() < Duration::from_secs(2) {
        let out = run()?;
        if !out.status.success() {
            bail!("toolhost {} failed on run {runs}", args.join(" "));
        }
        runs += 1;
    }
    let n = f64::from(runs);
    Ok(Some(Cost {
        bytes,
        daemon_cpu_ms: (procs::cpu_seconds(daemon) - cpu) * 1000.0 / n,
        wall_ms: started.elapsed().as_secs_f64() * 1000.0 / n,
    }))
}

/// `/metrics`: bytes, the daemon's CPU and the wall time per scrape.
async fn metrics(base: &str, daemon: u32) -> Result<Cost> {
    let http = reqwest::Client::new();
    let get = || async {
        http.get(format!("{base}/metrics"))
            .bearer_auth(crate::systems::TOKEN)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await
    };
    let bytes = get().await?.len();
    let cpu = procs::cpu_seconds(daemon);
    let started = Instant::now();
    let mut runs = 0u32;
    while runs < 20 || started.elapsed() < Duration::from_secs(2) {
        get().await?;
        runs += 1;
    }
    let n = f64::from(runs);
    Ok(Cost {
        bytes,
        daemon_cpu_ms: (procs::cpu_seconds(daemon) - cpu) * 1000.0 / n,
        wall_ms: started.elapsed().as_secs_f64() * 1000.0 / n,
    })
}

/// `toolhost status --format json`, again and again from the moment the
/// admin socket answers until every plugin is ready: how many runs, and
/// the slowest.
async fn status_during_start(toolhost: &Path, admin: &Path) -> Result<(u32, Duration)> {
    let (toolhost, admin) = (toolhost.to_path_buf(), admin.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(600);
        let (mut runs, mut slowest) = (0u32, Duration::ZERO);
        while Instant::now() < deadline {
            let started = Instant::now();
            let out = Command::new(&toolhost)
                .args(["status", "--format", "json", "--admin"])
                .arg(&admin)
                .output()?;
            let took = started.elapsed();
            if !out.status.success() {
                // Not answering yet.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            runs += 1;
            slowest = slowest.max(took);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let plugins = v["plugins"].as_array().map_or(&[][..], Vec::as_slice);
            if !plugins.is_empty() && plugins.iter().all(|p| p["state"] == "ready") {
                break;
            }
        }
        Ok((runs, slowest))
    })
    .await?
}

/// One table for `n` plugins.
pub async fn report(n: usize) -> Result<()> {
    let testplug = crate::systems::exe_dir().join("testplug");
    let toolhost = crate::systems::toolhost_exe();
    if !testplug.is_file() || !toolhost.is_file() {
        bail!("testplug or toolhost is not built (cargo build --workspace --bins)");
    }
    let dir = crate::systems::scratch(&format!("operate-{n}"))?;
    let dirs = (0..n)
        .map(|i| plugin(&dir, &format!("p{i:04}"), &testplug))
        .collect::<Result<Vec<_>>>()?;
    // `status` while the thousand start: the moment an operator looks.
    let socket = dir.join("state/admin.sock");
    let during = status_during_start(&toolhost, &socket);
    let (started, during) = tokio::join!(
        crate::plugins::start_all_ready(&toolhost, &dir, &dirs),
        during
    );
    let (daemon, admin) = started?;
    let pid = daemon.pid();
    let (runs, slowest) = during?;
    let middle = format!("p{:04}", n / 2);
    let commands: [(&str, Vec<&str>); 8] = [
        ("status", vec!["status"]),
        ("status --format json", vec!["status", "--format", "json"]),
        (
            "status --format json --detail",
            vec!["status", "--format", "json", "--detail"],
        ),
        ("plugins list", vec!["plugins", "list"]),
        (
            "plugins list --format json",
            vec!["plugins", "list", "--format", "json"],
        ),
        (
            "plugins list --limit 100 --format json",
            vec!["plugins", "list", "--limit", "100", "--format", "json"],
        ),
        (
            "plugins list --detail --format json",
            vec!["plugins", "list", "--detail", "--format", "json"],
        ),
        (
            "plugins show ID --format json",
            vec!["plugins", "show", &middle, "--format", "json"],
        ),
    ];
    println!(
        "{n} plugins, {} tools; `toolhost` is {}\n",
        n * TOOLS.len(),
        toolhost.display()
    );
    println!(
        "`toolhost status --format json` while they started: {runs} runs, the slowest {:.0} ms\n",
        slowest.as_secs_f64() * 1000.0
    );
    println!("| request | bytes | daemon CPU per call | wall per call |");
    println!("|---|---|---|---|");
    for (name, args) in &commands {
        match measure(&toolhost, &admin, pid, args)? {
            Some(c) => println!(
                "| `toolhost {name}` | {} | {:.1} ms | {:.1} ms |",
                c.bytes, c.daemon_cpu_ms, c.wall_ms
            ),
            None => println!("| `toolhost {name}` | not known to this build | | |"),
        }
    }
    let base = daemon
        .url
        .strip_suffix("/mcp")
        .unwrap_or(&daemon.url)
        .to_owned();
    let m = metrics(&base, pid).await?;
    println!(
        "| `GET /metrics` | {} | {:.1} ms | {:.1} ms |",
        m.bytes, m.daemon_cpu_ms, m.wall_ms
    );
    Ok(())
}
