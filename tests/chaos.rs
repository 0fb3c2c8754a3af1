//! Chaos, bounded: while 32 agents call tools, plugins are killed, hung,
//! flooded, exit mid-call, and are upgraded, disabled and enabled; a
//! backend pushes revisions out of order, from retired generations and in
//! conflict. Afterwards the promises must hold: every call got exactly one
//! answer, none was dispatched twice, none was dispatched outside the
//! catalog version it was authorized in, the catalog is the greatest
//! accepted version, the daemon's file descriptors and memory came back,
//! and no plugin process or zombie is left.
//!
//! `CHAOS_SECONDS` (default 8) sets how long the faults run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_admin::admin as pb;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, agent, call_tool, events, eventually, open_fds,
    outcome_code, process_alive, rss_kib, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(30);

/// Warnings, plus the two records [`dispatched_outside_their_version`]
/// joins: every call's audit event and every catalog version applied.
const LOG_FILTER: &str = "warn,toolhost::audit=info,toolhost::catalog=debug";

/// Checks [`dispatched_outside_their_version`] once the daemon's log has
/// caught up with what the plugins recorded, and asserts no violation.
async fn assert_dispatched_within_their_version(d: &Daemon, plugins: &[(&str, PathBuf)]) {
    let (checked, violations) = eventually(WAIT, "an audit event for every dispatch", async || {
        let (checked, violations) = dispatched_outside_their_version(&d.logs(), plugins);
        let unlogged = violations
            .iter()
            .any(|v| v.contains("no authorization on record"));
        (!unlogged).then_some((checked, violations))
    })
    .await;
    println!(
        "chaos: {checked} dispatches checked against the catalog version they were authorized in"
    );
    assert!(checked > 0, "the plugins recorded dispatches");
    assert!(
        violations.is_empty(),
        "dispatched outside the version authorized: {violations:#?}"
    );
}

fn seconds() -> Duration {
    Duration::from_secs(
        std::env::var("CHAOS_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8),
    )
}

fn config(root: &Path, plugins: &[PathBuf], extra: &str) -> String {
    TestConfig::new(root, plugins)
        .top("[log]\nlevel = \"warn\"\nformat = \"json\"")
        .http("max_sessions = 256")
        .supervisor("health_interval_ms = 200\nhealth_timeout_ms = 300\nbackoff_first_ms = 20\nbackoff_max_ms = 200\nmax_restarts = 100000\nstop_grace_ms = 1000")
        .extra(&format!("[limits]\nmax_calls_per_plugin = 64\n{extra}"))
        .build()
}

fn kill(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Outcome of a call, as a word.
fn outcome(r: &Result<rmcp::model::CallToolResult, rmcp::service::ServiceError>) -> String {
    match r {
        Ok(r) => outcome_code(r),
        Err(e) if e.to_string().contains("Unknown tool") => "unknown_tool".to_owned(),
        Err(_) => "protocol_error".to_owned(),
    }
}

/// The agents: `workers` sessions calling a mix of tools until `stop`.
/// Returns (calls sent, answers received, outcomes).
async fn agents(
    url: String,
    plugins: &'static [&'static str],
    workers: usize,
    stop: Arc<AtomicBool>,
) -> (u64, u64, BTreeMap<String, u64>) {
    let sent = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..workers {
        let (url, stop, sent, answered, outcomes) = (
            url.clone(),
            Arc::clone(&stop),
            Arc::clone(&sent),
            Arc::clone(&answered),
            Arc::clone(&outcomes),
        );
        set.spawn(async move {
            let c = agent(&url, TOKEN).await;
            let mut i = w;
            while !stop.load(Ordering::SeqCst) {
                i += 7;
                let plugin = plugins[i % plugins.len()];
                let (tool, args) = match i % 6 {
                    0 => ("echo", json!({ "msg": "hi", "n": 1 })),
                    1 => ("echo", json!({ "msg": 1 })),
                    2 => ("slow", json!({ "ms": 20 })),
                    3 => ("big", json!({ "bytes": 1_500_000 })),
                    4 => ("count", json!({})),
                    _ => ("nap", json!({ "ms": 1_000 })),
                };
                let name = format!("kandev_{plugin}_{tool}");
                sent.fetch_add(1, Ordering::SeqCst);
                let r =
                    tokio::time::timeout(Duration::from_secs(30), call_tool(&c, &name, args)).await;
                answered.fetch_add(1, Ordering::SeqCst);
                let o = match r {
                    Ok(r) => outcome(&r),
                    Err(_) => "no_answer".to_owned(),
                };
                if let Ok(mut m) = outcomes.lock() {
                    *m.entry(o).or_default() += 1;
                }
            }
            let _ = c.cancel().await;
        });
    }
    while set.join_next().await.is_some() {}
    let o = outcomes.lock().map(|m| m.clone()).unwrap_or_default();
    (
        sent.load(Ordering::SeqCst),
        answered.load(Ordering::SeqCst),
        o,
    )
}

/// The check that nothing was dispatched outside the catalog version it
/// was authorized against. The daemon logs (as JSON) a `toolhost::catalog`
/// event for every version that became current, with the names it added
/// and removed, and an audit event for every call with the version its
/// authorization saw. Replaying the first rebuilds each version's tool set;
/// every invocation a plugin recorded must have an audit event whose
/// version offered that tool. Returns (dispatches checked, violations).
fn dispatched_outside_their_version(
    logs: &str,
    plugins: &[(&str, PathBuf)],
) -> (usize, Vec<String>) {
    type Version = (String, u64);
    let mut tools: BTreeSet<String> = BTreeSet::new();
    let mut history: BTreeMap<Version, BTreeSet<String>> = BTreeMap::new();
    let mut authorized: BTreeMap<String, (String, Version)> = BTreeMap::new();
    for line in logs.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let f = &event["fields"];
        let version = |g: &str, r: &str| -> Option<Version> {
            Some((f[g].as_str()?.to_owned(), f[r].as_u64()?))
        };
        match (event["target"].as_str(), f["message"].as_str()) {
            (Some("toolhost::catalog"), Some("catalog applied")) => {
                let names = |k: &str| {
                    f[k].as_str()
                        .unwrap_or_default()
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                };
                for gone in names("removed") {
                    tools.remove(&gone);
                }
                tools.extend(names("added"));
                if let Some(v) = version("generation", "revision") {
                    history.insert(v, tools.clone());
                }
            }
            (Some("toolhost::audit"), Some("tool call")) => {
                if let (Some(id), Some(tool), Some(v)) = (
                    f["invocation_id"].as_str(),
                    f["tool"].as_str(),
                    version("catalog_generation", "catalog_revision"),
                ) {
                    authorized.insert(id.to_owned(), (tool.to_owned(), v));
                }
            }
            _ => {}
        }
    }
    let mut checked = 0;
    let mut violations = Vec::new();
    for (plugin, dir) in plugins {
        for line in events(dir, "invoked ") {
            let mut words = line.split(' ').skip(1);
            let (Some(local), Some(id)) = (words.next(), words.next()) else {
                continue;
            };
            checked += 1;
            let tool = format!("kandev_{plugin}_{local}");
            match authorized.get(id) {
                None => violations.push(format!(
                    "{id} ({tool}): dispatched with no authorization on record"
                )),
                Some((audited, _)) if *audited != tool => {
                    violations.push(format!(
                        "{id}: authorized as {audited}, dispatched as {tool}"
                    ));
                }
                Some((_, v)) => match history.get(v) {
                    None => violations.push(format!(
                        "{id} ({tool}): authorized against {v:?}, which never became current"
                    )),
                    Some(set) if !set.contains(&tool) => {
                        violations.push(format!(
                            "{id}: {tool} was not in {v:?} when it was authorized"
                        ));
                    }
                    Some(_) => {}
                },
            }
        }
    }
    (checked, violations)
}

/// The checker itself: a dispatch authorized in a version that had
/// withdrawn its tool is caught, and so is one nobody audited.
#[test]
fn the_version_check_catches_a_dispatch_outside_its_version() {
    let root = Scratch::new("chaos-check");
    let dir = root.path().join("tp");
    std::fs::create_dir_all(&dir).expect("the step before failed");
    std::fs::write(
        dir.join("events.log"),
        "invoked echo i1 task=t\ninvoked echo i2 task=t\ninvoked slow i3 task=t\n",
    )
    .expect("the step before failed");
    let applied = |rev: u64, added: &str, removed: &str| {
        json!({ "target": "toolhost::catalog", "fields": { "message": "catalog applied",
            "generation": "g", "revision": rev, "added": added, "removed": removed } })
        .to_string()
    };
    let audit = |id: &str, tool: &str, rev: u64| {
        json!({ "target": "toolhost::audit", "fields": { "message": "tool call",
            "invocation_id": id, "tool": tool, "catalog_generation": "g", "catalog_revision": rev } })
        .to_string()
    };
    let logs = [
        "toolhost: serving MCP on http://127.0.0.1:1/mcp".to_owned(),
        applied(1, "kandev_tp_echo kandev_tp_slow", ""),
        applied(2, "", "kandev_tp_echo"),
        audit("i1", "kandev_tp_echo", 1),
        audit("i2", "kandev_tp_echo", 2),
    ]
    .join("\n");
    let (checked, violations) = dispatched_outside_their_version(&logs, &[("tp", dir)]);
    assert_eq!(checked, 3);
    assert_eq!(
        violations,
        [
            "i2: kandev_tp_echo was not in (\"g\", 2) when it was authorized",
            "i3 (kandev_tp_slow): dispatched with no authorization on record",
        ]
    );
}

fn invocation_ids(dirs: &[PathBuf]) -> (usize, usize) {
    let ids: Vec<String> = dirs
        .iter()
        .flat_map(|d| events(d, "invoked "))
        .filter_map(|l| l.split(' ').nth(2).map(str::to_owned))
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    (ids.len(), unique.len())
}

#[tokio::test]
async fn plugins_misbehave_while_agents_work() {
    let root = Scratch::new("chaos");
    let plugins = [
        testplug_dir(root.path(), "a", "normal"),
        testplug_dir(root.path(), "b", "normal"),
    ];
    let mut d = Daemon::start_logging(
        root.path(),
        &config(root.path(), &plugins, ""),
        &[],
        LOG_FILTER,
    );
    let sock = root.path().join("state/admin.sock");
    let mut admin = eventually(WAIT, "admin", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;
    let kit1 = testplug_dir(&root.path().join("v1"), "kit", "normal");
    let kit2 = testplug_dir(&root.path().join("v2"), "kit", "normal");
    let text = std::fs::read_to_string(kit2.join("plugin.toml")).unwrap_or_default();
    std::fs::write(
        kit2.join("plugin.toml"),
        text.replace("version = \"1.0.0\"", "version = \"2.0.0\""),
    )
    .expect("the step before failed");
    assert!(
        admin
            .install_plugin(pb::InstallPluginRequest {
                values: Default::default(),
                path: kit1.display().to_string(),
                ..Default::default()
            })
            .await
            .is_ok()
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"a\",state=\"ready\"}", 1.0)
        .await;
    d.wait_metric("toolhost_plugin_state{plugin=\"b\",state=\"ready\"}", 1.0)
        .await;
    // Baseline after warm-up: a first session has come and gone.
    let warm = agent(&d.url, TOKEN).await;
    let _ = warm
        .call_tool(CallToolRequestParams::new("kandev_a_count"))
        .await;
    let _ = warm.cancel().await;
    let (fd0, rss0) = (open_fds(d.pid()), rss_kib(d.pid()));

    let stop = Arc::new(AtomicBool::new(false));
    let driver = tokio::spawn(agents(
        d.url.clone(),
        &["a", "b", "kit"],
        32,
        Arc::clone(&stop),
    ));
    let until = Instant::now() + seconds();
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut version = 1;
    let mut round = 0u64;
    while Instant::now() < until {
        round += 1;
        let kids = d.children();
        match round % 6 {
            3 => {
                // The plugin exits in the middle of the call: the connection
                // closes mid-call, and the call fails as unavailable.
                let c = agent(&d.url, TOKEN).await;
                let victim = if round % 12 == 3 { "a" } else { "b" };
                let r = call_tool(&c, &format!("kandev_{victim}_crash"), json!({})).await;
                let _ = c.cancel().await;
                assert_eq!(
                    outcome(&r),
                    "plugin_unavailable",
                    "a call whose plugin exits mid-call"
                );
                *faults.entry("closed_mid_call").or_default() += 1;
            }
            0 => {
                if let Some(k) = kids.get(usize::try_from(round).unwrap_or(0) % kids.len().max(1)) {
                    kill(*k, rustix::process::Signal::KILL);
                    *faults.entry("sigkill").or_default() += 1;
                }
            }
            1 => {
                if let Some(k) = kids.first() {
                    kill(*k, rustix::process::Signal::STOP);
                    *faults.entry("hang").or_default() += 1;
                }
            }
            2 => {
                let c = agent(&d.url, TOKEN).await;
                let _ = call_tool(&c, "kandev_b_flood", json!({ "lines": 20_000 })).await;
                let _ = c.cancel().await;
                *faults.entry("stdout_flood").or_default() += 1;
            }
            4 => {
                let src = if version == 1 { &kit2 } else { &kit1 };
                // Upgrades need a different version each time.
                let text = std::fs::read_to_string(src.join("plugin.toml")).unwrap_or_default();
                let next = format!("{}.0.0", version + 1);
                let patched = text
                    .lines()
                    .map(|l| {
                        if l.starts_with("version = ") {
                            format!("version = \"{next}\"")
                        } else {
                            l.to_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                std::fs::write(src.join("plugin.toml"), patched).expect("the step before failed");
                if admin
                    .upgrade_plugin(pb::UpgradePluginRequest {
                        dry_run: false,
                        values: Default::default(),
                        path: src.display().to_string(),
                        ..Default::default()
                    })
                    .await
                    .is_ok()
                {
                    version += 1;
                    *faults.entry("upgrade").or_default() += 1;
                }
            }
            _ => {
                let _ = admin
                    .disable_plugin(pb::PluginRef { id: "kit".into() })
                    .await;
                let _ = admin
                    .enable_plugin(pb::PluginRef { id: "kit".into() })
                    .await;
                *faults.entry("disable_enable").or_default() += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let (sent, answered, outcomes) = driver.await.unwrap_or_default();
    println!("chaos: faults {faults:?}; calls {sent}, answers {answered}; outcomes {outcomes:?}");
    assert!(sent > 100, "the agents ran: {sent}");
    assert_eq!(sent, answered, "every call got exactly one answer");
    assert_eq!(outcomes.get("no_answer"), None, "no call went unanswered");
    assert_eq!(
        outcomes.get("protocol_error"),
        None,
        "no protocol errors: {outcomes:?}"
    );
    let data: Vec<PathBuf> = ["a", "b", "kit"]
        .iter()
        .map(|p| root.path().join("state/data").join(p))
        .collect();
    let (total, unique) = invocation_ids(&data);
    assert_eq!(total, unique, "no call was dispatched twice");
    let named: Vec<(&str, PathBuf)> = ["a", "b", "kit"].into_iter().zip(data).collect();
    assert_dispatched_within_their_version(&d, &named).await;

    // Calm: every plugin ready again, resources back near the baseline.
    for p in ["a", "b", "kit"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    let fd1 = eventually(WAIT, "file descriptors back to baseline", async || {
        let n = open_fds(d.pid());
        (n <= fd0 + 8).then_some(n)
    })
    .await;
    let rss1 = rss_kib(d.pid());
    println!("chaos: fds {fd0} -> {fd1}, rss {rss0} KiB -> {rss1} KiB");
    assert!(
        rss1 < rss0 * 3 + 20_000,
        "memory came back: {rss0} -> {rss1} KiB"
    );
    let kids = d.children();
    let status = d.signal_and_wait(rustix::process::Signal::TERM);
    assert!(status.success());
    eventually(WAIT, "no plugin left", async || {
        kids.iter().all(|k| !process_alive(*k)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_racing_backend_ends_at_the_greatest_accepted_version() {
    let root = Scratch::new("chaos-push");
    let tp = testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start_logging(
        root.path(),
        &config(
            root.path(),
            std::slice::from_ref(&tp),
            "[backend]\nmanaged = true\n",
        ),
        &[],
        LOG_FILTER,
    );
    let sock = root.path().join("state/admin.sock");
    let admin = eventually(WAIT, "admin", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;
    let m = toolhost_manifest::Manifest::load(&tp).expect("the step before failed");
    let mut full = toolhost_catalog::Snapshot::from_manifests("kandev", "g-old", 1, [&m]);
    full.epoch = 1;
    let push = |s: &toolhost_catalog::Snapshot| pb::PushCatalogRequest {
        snapshot: Some(toolhost_managed::snapshot_to_proto(s)),
    };
    // A generation that will be retired.
    let mut a0 = admin.clone();
    assert!(a0.push_catalog(push(&full)).await.is_ok());
    let best = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = tokio::spawn(agents(d.url.clone(), &["tp"], 16, Arc::clone(&stop)));
    let mut pushers = tokio::task::JoinSet::new();
    for p in 0..4u64 {
        let (mut a, full, best) = (admin.clone(), full.clone(), Arc::clone(&best));
        pushers.spawn(async move {
            let mut rng = p * 7919 + 13;
            let started = Instant::now();
            let until = started + seconds() / 2;
            let mut outcomes: BTreeMap<i32, u64> = BTreeMap::new();
            while Instant::now() < until {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let mut s = full.clone();
                // The new generation's epoch is greater: it fences the old.
                (s.generation, s.epoch) = if rng % 10 == 0 {
                    ("g-old".into(), 1)
                } else {
                    ("g-new".into(), 2)
                };
                // Mostly forward, a few milliseconds apart, so that many
                // revisions are accepted; the pushers overtake each other,
                // so many are also stale, and equal revisions with
                // different truncations conflict.
                let tick = u64::try_from(started.elapsed().as_millis()).unwrap_or(0) / 4;
                s.revision = tick + rng % 6;
                if rng % 3 == 0 {
                    s.tools.truncate(usize::try_from(rng % 5).unwrap_or(0) + 1);
                }
                let Ok(r) = a
                    .push_catalog(pb::PushCatalogRequest {
                        snapshot: Some(toolhost_managed::snapshot_to_proto(&s)),
                    })
                    .await
                else {
                    continue;
                };
                let r = r.into_inner();
                *outcomes.entry(r.outcome).or_default() += 1;
                let accepted = matches!(
                    pb::PushOutcome::try_from(r.outcome),
                    Ok(pb::PushOutcome::Accepted | pb::PushOutcome::Unchanged)
                );
                if accepted
                    && s.generation == "g-new"
                    && let Ok(mut b) = best.lock()
                {
                    *b = (*b).max(s.revision);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            outcomes
        });
    }
    let mut all: BTreeMap<i32, u64> = BTreeMap::new();
    while let Some(Ok(o)) = pushers.join_next().await {
        for (k, v) in o {
            *all.entry(k).or_default() += v;
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (sent, answered, outcomes) = driver.await.unwrap_or_default();
    println!("pushes by outcome {all:?}; calls {sent} answered {answered}; {outcomes:?}");
    assert_eq!(sent, answered);
    assert_dispatched_within_their_version(&d, &[("tp", root.path().join("state/data/tp"))]).await;
    let st = a0
        .get_status(pb::GetStatusRequest {})
        .await
        .expect("the step before failed")
        .into_inner();
    let best = best.lock().map(|b| *b).unwrap_or(0);
    assert_eq!(
        (st.generation.as_str(), st.revision),
        ("g-new", best),
        "the greatest accepted version wins"
    );
    assert!(
        all.get(&(pb::PushOutcome::Stale as i32))
            .copied()
            .unwrap_or(0)
            > 0
    );
    assert_eq!(
        outcomes.get("protocol_error").copied().unwrap_or(0)
            + outcomes.get("no_answer").copied().unwrap_or(0),
        0,
        "{outcomes:?}"
    );
}
