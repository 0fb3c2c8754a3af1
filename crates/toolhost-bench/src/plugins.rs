//! Many plugins in one daemon: for each count, how long until every one
//! is ready, what the daemon and the plugins hold then, and how long a
//! SIGTERM takes to stop them all. Each plugin is a small `testplug` (one
//! Tokio worker) in the default sandbox.

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use toolhost_bench::procs;

fn small_plugin(root: &Path, id: &str, testplug: &Path) -> Result<PathBuf> {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Small\"\n\n[runtime]\ncommand = {:?}\nargs = [\"--mode\", \"normal\"]\nenv = {{ TOKIO_WORKER_THREADS = \"1\" }}\nstartup_timeout_ms = 60000\n\n\
             [capabilities]\nmemory_mb = 256\nprocesses = 16\n\n\
             [[tools]]\nname = \"count\"\ndescription = \"c\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\" }}\nannotations = {{ read_only = true }}\n",
            testplug.display().to_string()
        ),
    )?;
    Ok(dir)
}

/// (ready, listed) plugins, through the admin API.
pub(crate) async fn ready(admin: &mut toolhost_admin::Client) -> (usize, usize) {
    match admin
        .list_plugins(toolhost_admin::admin::ListPluginsRequest::default())
        .await
    {
        Ok(r) => {
            let all = r.into_inner().plugins;
            (all.iter().filter(|p| p.state == "ready").count(), all.len())
        }
        Err(_) => (0, 0),
    }
}

/// `toolhost` (the binary at `toolhost`) serving the plugins in `dirs`,
/// from scratch directory `dir`, once every one is ready; and its admin
/// socket.
pub(crate) async fn start_all_ready(
    toolhost: &Path,
    dir: &Path,
    dirs: &[PathBuf],
) -> Result<(crate::systems::Spawned, PathBuf)> {
    let n = dirs.len();
    let list: Vec<String> = dirs
        .iter()
        .map(|d| format!("{:?}", d.display().to_string()))
        .collect();
    let config = dir.join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "plugins = [{}]\nstate_dir = {:?}\n[limits]\nstate_reserve_mb = 1\n[log]\nlevel = \"warn\"\n[[http.tokens]]\ntoken = \"{}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n[supervisor]\nstop_grace_ms = 3000\n",
            list.join(", "),
            dir.join("state").display().to_string(),
            crate::systems::TOKEN
        ),
    )?;
    let daemon = crate::systems::spawn_config_with(toolhost, dir.to_path_buf(), &config)?;
    let admin = dir.join("state/admin.sock");
    let mut client = crate::systems::admin_client(&admin).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (ok, all) = ready(&mut client).await;
        if all == n && ok == n {
            return Ok((daemon, admin));
        }
        if Instant::now() > deadline {
            bail!("{n} plugins: only {ok} of {all} ready after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One row per count in `counts`.
pub async fn report(counts: &[usize]) -> Result<()> {
    let testplug = crate::systems::exe_dir().join("testplug");
    if !testplug.is_file() {
        bail!(
            "{} is not built (cargo build --workspace --bins)",
            testplug.display()
        );
    }
    println!(
        "| plugins | start to all ready | daemon RSS | daemon descriptors | plugins' RSS (sum) | SIGTERM to exit |"
    );
    println!("|---|---|---|---|---|---|");
    for &n in counts {
        let dir = crate::systems::scratch(&format!("plugins-{n}"))?;
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| small_plugin(&dir, &format!("p{i:04}"), &testplug))
            .collect::<Result<_>>()?;
        let started = Instant::now();
        let (mut daemon, _admin) =
            start_all_ready(&crate::systems::toolhost_exe(), &dir, &dirs).await?;
        let to_ready = started.elapsed();
        let pid = daemon.pid();
        let rss = procs::rss_kib(pid);
        let fds = procs::open_fds(pid);
        let plugins_rss: u64 = procs::children(pid).into_iter().map(procs::rss_kib).sum();
        let stopping = Instant::now();
        let child = daemon.procs.0.first_mut().context("no daemon")?;
        if let Some(p) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        child.wait()?;
        let to_stop = stopping.elapsed();
        println!(
            "| {n} | {:.1} s | {:.1} MiB | {fds} | {:.0} MiB | {:.2} s |",
            to_ready.as_secs_f64(),
            f64::from(u32::try_from(rss).unwrap_or(u32::MAX)) / 1024.0,
            f64::from(u32::try_from(plugins_rss).unwrap_or(u32::MAX)) / 1024.0,
            to_stop.as_secs_f64()
        );
    }
    Ok(())
}
