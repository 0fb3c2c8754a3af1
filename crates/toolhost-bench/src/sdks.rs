//! A call's cost through each SDK: one toolhost serving the same `echo`
//! tool from a Rust plugin (testplug, on the Rust SDK), a Python plugin (on
//! sdk/python) and a TypeScript plugin (on sdk/typescript), each declared
//! for plugin protocol 2. Calls go through toolhost over MCP, as an agent
//! makes them; the CPU charged is the plugin process's alone.

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use toolhost_bench::procs;

const TOOL: &str = r#"
[[tools]]
name = "echo"
description = "Echoes its arguments."
surfaces = ["chat"]
input_schema = { type = "object", required = ["msg", "n"], properties = { msg = { type = "string", maxLength = 20 }, n = { type = "integer", minimum = 0, maximum = 10 } } }
annotations = { read_only = true, open_world = false }
"#;

const PYTHON: &str = r#"from toolhost_plugin import Plugin

plugin = Plugin()


@plugin.tool("echo")
async def echo(call):
    return {"arguments": call.arguments}


plugin.run()
"#;

const TYPESCRIPT: &str = r#"import { Plugin } from "SDK";

new Plugin().tool("echo", (call) => ({ arguments: call.arguments })).run();
"#;

fn write_exe(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// A plugin directory `id` whose `command` is `launcher`.
fn plugin(dir: &Path, id: &str, command: &str) -> Result<PathBuf> {
    let p = dir.join(id);
    std::fs::create_dir_all(p.join("bin"))?;
    std::fs::write(
        p.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"{id}\"\n\n[runtime]\ncommand = \"{command}\"\nstartup_timeout_ms = 30000\nprotocol = 2\n{TOOL}"
        ),
    )?;
    Ok(p)
}

/// The plugin process running in `dir` (its working directory), among the
/// children of `parent`.
fn pid_in(parent: u32, dir: &Path) -> Option<u32> {
    let dir = std::fs::canonicalize(dir).ok()?;
    procs::children(parent)
        .into_iter()
        .find(|p| std::fs::read_link(format!("/proc/{p}/cwd")).is_ok_and(|c| c == dir))
}

/// Prints the table.
pub async fn report(quick: bool) -> Result<()> {
    let root = crate::systems::root();
    let python = root.join(".venv/bin/python");
    let ts_sdk = root.join("sdk/typescript/dist/index.js");
    if !python.is_file() || !ts_sdk.is_file() {
        bail!("the SDKs are not set up: scripts/setup-python and scripts/setup-node");
    }
    let dir = crate::systems::scratch("sdks")?;
    let rust = crate::systems::plugin_dir_for(&dir, 2)?;
    let py = plugin(&dir, "py", "bin/plugin")?;
    std::fs::write(py.join("plugin.py"), PYTHON)?;
    write_exe(
        &py.join("bin/plugin"),
        &format!(
            "#!/bin/sh\nexec {} \"$(dirname \"$0\")/../plugin.py\"\n",
            python.display()
        ),
    )?;
    let ts = plugin(&dir, "ts", "bin/plugin")?;
    std::fs::write(
        ts.join("plugin.mjs"),
        TYPESCRIPT.replace(
            "\"SDK\"",
            &format!("{:?}", format!("file://{}", ts_sdk.display())),
        ),
    )?;
    write_exe(
        &ts.join("bin/plugin"),
        "#!/bin/sh\nexec node \"$(dirname \"$0\")/../plugin.mjs\"\n",
    )?;

    let config = dir.join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "plugins = [{:?}, {:?}, {:?}]\nstate_dir = {:?}\n[limits]\nstate_reserve_mb = 1\n[log]\nlevel = \"warn\"\n[[http.tokens]]\ntoken = \"{}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n{}",
            rust.display().to_string(),
            py.display().to_string(),
            ts.display().to_string(),
            dir.join("state").display().to_string(),
            crate::systems::TOKEN,
            procs::sandbox_section(&root, crate::systems::exe_dir().parent().unwrap_or(&root)),
        ),
    )?;
    let mut child = Command::new(crate::systems::toolhost_exe())
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("TOKIO_WORKER_THREADS", crate::systems::WORKERS)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start toolhost")?;
    let stderr = child.stderr.take().context("stderr")?;
    let daemon = child.id();
    let _guard = crate::systems::Procs(vec![child]);
    let url = crate::systems::wait_line(stderr, "toolhost: serving MCP on ")?;

    let mut systems = Vec::new();
    for (name, id, plugin_dir) in [
        ("Rust SDK (testplug)", "bench", &rust),
        ("Python SDK", "py", &py),
        ("TypeScript SDK", "ts", &ts),
    ] {
        let ep = crate::load::Endpoint {
            url: url.clone(),
            token: Some(crate::systems::TOKEN.into()),
            tool: format!("kandev_{id}_echo"),
            session: true,
        };
        crate::systems::ready_http(&ep).await?;
        let pid = pid_in(daemon, plugin_dir).with_context(|| format!("no process for {name}"))?;
        systems.push(crate::systems::System {
            name,
            target: crate::systems::Target::Http(ep),
            pids: vec![pid],
            main_pid: pid,
            _procs: crate::systems::Procs(Vec::new()),
        });
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let duration = std::time::Duration::from_millis(if quick { 1000 } else { 5000 });
    println!(
        "| plugin | concurrency | p50 ms | calls/s | plugin CPU µs/call | errors |\n|---|---|---|---|---|---|"
    );
    for sys in &systems {
        for c in [1usize, 16] {
            let m = crate::measure::measure(sys, c, duration, &http).await?;
            println!(
                "| {} | {c} | {:.3} | {:.0} | {:.0} | {} |",
                sys.name,
                m.p50.as_secs_f64() * 1e3,
                m.throughput,
                m.server_cpu_us,
                m.errors
            );
            if let Some(e) = &m.first_error {
                println!("|  first error: {} | | | | | |", e.replace('|', "/"));
            }
        }
    }
    Ok(())
}
