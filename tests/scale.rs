//! A thousand plugins in one daemon: all start and become ready, a crashed
//! one comes back, calls reach any of them, the operator's view of them
//! stays a screen (`status`) and a page (`plugins list`), and all stop
//! within the grace period, with no plugin process left.
//!
//! Each plugin is a small `testplug` (one Tokio worker) in the default
//! sandbox, under `[sandbox] user = "nobody"` when the test runs as root.
//! `TOOLHOST_SCALE` sets how many (1,000 by default); `toolhost-bench
//! --plugins` measures the same at 250, 500 and 1,000 (BENCHMARKS.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use toolhost_e2e::{Daemon, Scratch, TOKEN, TestConfig, agent, bin, call_tool, cli_at, eventually};

fn how_many() -> usize {
    std::env::var("TOOLHOST_SCALE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// A small plugin: `count` and `crash`, one worker thread; with `needy`,
/// it also requires a configuration value nobody gave, so it waits for
/// the operator instead of starting: the plugin `status` must name among
/// a thousand.
fn small_plugin(root: &Path, id: &str, needy: bool) -> PathBuf {
    let config = if needy {
        "[[config]]\nname = \"region\"\ndescription = \"Which region.\"\ntype = \"string\"\nrequired = true\n\n"
    } else {
        ""
    };
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Small\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"normal\"]\nenv = {{ TOKIO_WORKER_THREADS = \"1\" }}\nstartup_timeout_ms = 60000\n\n\
             [capabilities]\nmemory_mb = 256\nprocesses = 16\n\n{config}\
             [[tools]]\nname = \"count\"\ndescription = \"c\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\" }}\nannotations = {{ read_only = true }}\n\n\
             [[tools]]\nname = \"crash\"\ndescription = \"c\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\", properties = {{ note = {{ type = \"string\" }} }} }}\nannotations = {{ destructive = false }}\n",
            bin("testplug").display()
        ),
    )
    .unwrap();
    dir
}

/// (ready, total) from `toolhost status --format json`.
fn ready_count(admin: &Path) -> (usize, usize) {
    let (ok, out) = cli_at(admin, &["status", "--format", "json"]);
    if !ok {
        return (0, 0);
    }
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    let plugins = v["plugins"].as_array().cloned().unwrap_or_default();
    let ready = plugins.iter().filter(|p| p["state"] == "ready").count();
    (ready, plugins.len())
}

#[tokio::test]
async fn a_thousand_plugins_start_serve_restart_and_stop_in_bounded_time() {
    use std::os::unix::fs::PermissionsExt as _;
    let n = how_many();
    let root = Scratch::new("scale");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    // One plugin waiting for its configuration: what `status` must still
    // show among a thousand.
    let odd = n / 3;
    let dirs: Vec<PathBuf> = (0..n)
        .map(|i| small_plugin(root.path(), &format!("p{i:04}"), i == odd))
        .collect();
    let account = if rustix::process::geteuid().is_root() {
        "user = \"nobody\""
    } else {
        ""
    };
    let config = TestConfig::new(root.path(), &dirs)
        .supervisor("backoff_first_ms = 50\nstop_grace_ms = 3000")
        .sandbox(account)
        .build();
    let started = Instant::now();
    let mut d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    let limit = Duration::from_secs(u64::try_from(n).unwrap_or(1000) / 2 + 60);
    eventually(limit, "every plugin ready", async || {
        let (ready, total) = ready_count(&admin);
        (total == n && ready == n - 1).then_some(())
    })
    .await;
    println!("{n} plugins ready in {:?}", started.elapsed());
    let logs = d.logs();
    assert!(
        !logs.contains("Too many open files"),
        "a start ran out of descriptors"
    );
    let c = agent(&d.url, TOKEN).await;
    // Calls reach the first, the middle and the last.
    for i in [0, n / 2, n - 1] {
        let r = call_tool(&c, &format!("kandev_p{i:04}_count"), json!({}))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true), "p{i:04}: {r:?}");
    }
    // Ten crash; each comes back.
    let crashed: Vec<usize> = (0..10).map(|k| k * n / 10).collect();
    for i in &crashed {
        let _ = call_tool(&c, &format!("kandev_p{i:04}_crash"), json!({})).await;
    }
    eventually(
        Duration::from_secs(60),
        "the crashed ones ready again",
        async || {
            let (ready, total) = ready_count(&admin);
            (total == n && ready == n - 1).then_some(())
        },
    )
    .await;
    for i in &crashed {
        let r = call_tool(&c, &format!("kandev_p{i:04}_count"), json!({}))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true), "p{i:04} after its crash: {r:?}");
    }
    let _ = c.cancel().await;
    the_operators_view_stays_small(&admin, n, odd);
    // Stop: in parallel, within the grace period and a margin.
    let pids = d.children();
    assert_eq!(pids.len(), n - 1, "one process per plugin that may start");
    let stopping = Instant::now();
    let status = d.signal_and_wait(rustix::process::Signal::TERM);
    let took = stopping.elapsed();
    println!("{n} plugins stopped in {took:?}");
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(15), "stopping took {took:?}");
    assert!(
        !d.logs().contains("did not stop in time"),
        "{}",
        d.logs()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    for pid in pids {
        assert!(
            !toolhost_e2e::process_alive(pid),
            "plugin {pid} outlived the daemon"
        );
    }
}

/// `status` is a screen and `plugins list` a page at any size; the one
/// plugin that needs a look is named, the rest are counted.
fn the_operators_view_stays_small(admin: &Path, n: usize, odd: usize) {
    let odd = format!("p{odd:04}");
    let (ok, text) = cli_at(admin, &["status"]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!(
            "plugins   {n} installed: {} ready, 1 needs_config",
            n - 1
        )),
        "{text}"
    );
    assert!(
        text.contains(&odd) && text.contains("needs configuration: region"),
        "{text}"
    );
    if n > 50 {
        assert!(text.lines().count() < 40, "{text}");
        assert!(
            text.contains(&format!("{} in good order, not listed", n - 1)),
            "{text}"
        );
    }
    let (ok, out) = cli_at(admin, &["status", "--format", "json"]);
    assert!(ok, "{out}");
    // A few hundred bytes a plugin, whatever it declares.
    assert!(out.len() < 600 * n + 4096, "{} bytes", out.len());
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plugin_states"]["ready"], n - 1, "{}", v["plugin_states"]);
    let look: Vec<&str> = v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["needs_a_look"] == true)
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(look, [odd.as_str()]);
    if n > 100 {
        let (ok, out) = cli_at(
            admin,
            &["plugins", "list", "--limit", "100", "--format", "json"],
        );
        assert!(
            ok && out.contains("toolhost plugins list --after p0099"),
            "{out}"
        );
        let (ok, out) = cli_at(
            admin,
            &["plugins", "list", "--after", "p0099", "--limit", "1"],
        );
        assert!(ok && out.starts_with("p0100 "), "{out}");
    }
    let (ok, out) = cli_at(admin, &["plugins", "show", "p0001", "--format", "json"]);
    assert!(ok, "{out}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        shown["policies"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );
    let (ok, out) = cli_at(admin, &["plugins", "show", &odd, "--format", "json"]);
    let shown: Value = serde_json::from_str(&out).unwrap_or_default();
    assert!(ok && shown["missing_config"][0] == "region", "{out}");
}
