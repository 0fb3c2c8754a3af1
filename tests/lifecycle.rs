//! Plugin lifecycle, live: install, upgrade, enable, disable, remove, with an
//! MCP client connected throughout and calls running in a loop; persistence
//! across restarts; and an interrupted install leaving nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use toolhost_admin::admin as pb;
use toolhost_e2e::{
    AgentClient, Daemon, Scratch, TOKEN, TestConfig, agent, bin, call_tool, events, eventually,
    listed_names as names, outcome_code, testplug_dir,
};

const WAIT: Duration = Duration::from_secs(30);

/// A testplug plugin directory with a given id, version, mode and `msg`
/// length limit (the "schema" an upgrade changes).
fn kit(root: &Path, dir: &str, id: &str, version: &str, mode: &str, max_msg: u32) -> PathBuf {
    let d = testplug_dir(&root.join(dir), id, mode);
    let manifest = d.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_default();
    let text = text
        .replace("version = \"1.0.0\"", &format!("version = \"{version}\""))
        .replace("maxLength = 20", &format!("maxLength = {max_msg}"));
    std::fs::write(&manifest, text).expect("the step before failed");
    d
}

fn config(root: &Path, statics: &[PathBuf]) -> String {
    TestConfig::new(root, statics).build()
}

async fn admin(root: &Path) -> toolhost_admin::Client {
    let sock = root.join("state/admin.sock");
    eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await
}

fn installed_dirs(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("state/plugins"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn code(r: &Result<rmcp::model::CallToolResult, rmcp::service::ServiceError>) -> String {
    match r {
        Ok(r) => outcome_code(r),
        Err(e) if e.to_string().contains("Unknown tool") => "unknown_tool".to_owned(),
        Err(e) => format!("protocol: {e}"),
    }
}

async fn echo(c: &AgentClient, msg: &str) -> String {
    code(&call_tool(c, "kandev_kit_echo", json!({ "msg": msg, "n": 1 })).await)
}

#[tokio::test]
async fn install_upgrade_disable_enable_remove_while_agents_work() {
    let root = Scratch::new("lifecycle");
    let base = testplug_dir(&root.path().join("static"), "my-kit", "normal");
    let d = Daemon::start(
        root.path(),
        &config(root.path(), std::slice::from_ref(&base)),
        &[],
    );
    let mut a = admin(root.path()).await;
    let c = agent(&d.url, TOKEN).await;
    d.wait_metric("toolhost_mcp_listeners", 1.0).await;
    let told = c.service().list_changed.clone();
    let before = told.load(Ordering::SeqCst);

    // Install: clients are told, the new tools are callable.
    let v1 = kit(root.path(), "src1", "kit", "1.0.0", "normal", 20);
    let r = a
        .install_plugin(pb::InstallPluginRequest {
            values: Default::default(),
            path: v1.display().to_string(),
            ..Default::default()
        })
        .await;
    let rev1 = r.expect("install").into_inner().revision;
    eventually(WAIT, "list_changed after install", async || {
        (told.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    assert!(names(&c).await.contains(&"kandev_kit_echo".to_owned()));
    assert_eq!(echo(&c, "hello there").await, "ok");
    assert_eq!(installed_dirs(root.path()), ["kit@1.0.0"]);

    // A colliding install is refused, naming both; nothing changes.
    let clash = kit(root.path(), "src-clash", "my_kit", "1.0.0", "normal", 20);
    let r = a
        .install_plugin(pb::InstallPluginRequest {
            values: Default::default(),
            path: clash.display().to_string(),
            ..Default::default()
        })
        .await;
    let e = r.err().map(|s| s.message().to_owned()).unwrap_or_default();
    assert!(
        e.contains("\"my_kit\"") && e.contains("\"my-kit\"") && e.contains("collides"),
        "{e}"
    );
    assert_eq!(
        installed_dirs(root.path()),
        ["kit@1.0.0"],
        "no staging left, nothing installed"
    );
    let st = a
        .get_status(pb::GetStatusRequest {})
        .await
        .expect("the step before failed")
        .into_inner();
    assert_eq!(st.revision, rev1, "the catalog did not change");

    // Calls in a loop from here on, counting every outcome.
    let outcomes: Arc<std::sync::Mutex<BTreeMap<String, usize>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let looper = {
        let (c2, outcomes, stop) = (
            agent(&d.url, TOKEN).await,
            Arc::clone(&outcomes),
            Arc::clone(&stop),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let o = echo(&c2, "ok").await;
                if let Ok(mut m) = outcomes.lock() {
                    *m.entry(o).or_default() += 1;
                }
            }
            let _ = c2.cancel().await;
        })
    };
    eventually(WAIT, "the loop to run", async || {
        (outcomes
            .lock()
            .map(|m| m.values().sum::<usize>())
            .unwrap_or(0)
            > 20)
            .then_some(())
    })
    .await;

    // Upgrade with a changed schema: clients told, new schema enforced.
    let told_before = told.load(Ordering::SeqCst);
    let v2 = kit(root.path(), "src2", "kit", "2.0.0", "normal", 5);
    let r = a
        .upgrade_plugin(pb::UpgradePluginRequest {
            dry_run: false,
            values: Default::default(),
            path: v2.display().to_string(),
            ..Default::default()
        })
        .await;
    assert!(r.is_ok(), "upgrade: {r:?}");
    eventually(WAIT, "list_changed after upgrade", async || {
        (told.load(Ordering::SeqCst) > told_before).then_some(())
    })
    .await;
    // Told, the client lists again, as clients do: the new schema is what
    // its session was shown, so its call is judged by it (a session that
    // calls without listing is refused once first, docs/CONTRACT.md §4).
    assert!(names(&c).await.contains(&"kandev_kit_echo".to_owned()));
    assert_eq!(
        echo(&c, "too long now").await,
        "invalid_arguments",
        "calls validate against the new schema"
    );
    assert_eq!(
        installed_dirs(root.path()),
        ["kit@2.0.0"],
        "the old version's files are gone"
    );

    // A version that cannot start leaves the old one serving.
    let v3 = kit(root.path(), "src3", "kit", "3.0.0", "exit-early", 5);
    let r = a
        .upgrade_plugin(pb::UpgradePluginRequest {
            dry_run: false,
            values: Default::default(),
            path: v3.display().to_string(),
            ..Default::default()
        })
        .await;
    let e = r.err().map(|s| s.message().to_owned()).unwrap_or_default();
    assert!(
        e.contains("did not start") && e.contains("old version keeps serving"),
        "{e}"
    );
    assert_eq!(echo(&c, "ok").await, "ok");
    assert_eq!(installed_dirs(root.path()), ["kit@2.0.0"]);

    stop.store(true, Ordering::SeqCst);
    let _ = looper.await;
    let outcomes = outcomes.lock().map(|m| m.clone()).unwrap_or_default();
    let failed: Vec<(&String, &usize)> = outcomes
        .iter()
        .filter(|(k, _)| k.as_str() != "ok" && k.as_str() != "tool_unavailable")
        .filter(|(k, n)| !(k.as_str() == "contract_changed" && **n <= 1))
        .collect();
    // The upgrade changed echo's schema: a session that listed it before
    // is refused once (docs/CONTRACT.md §4), and only once.
    assert!(
        failed.is_empty(),
        "only calls caught by the switch may fail (tool_unavailable), and one call of a session that listed \
         the old contract (contract_changed): {outcomes:?}"
    );
    assert!(
        outcomes.get("ok").copied().unwrap_or(0) > 20,
        "{outcomes:?}"
    );
    let data = root.path().join("state/data/kit");
    let ids: Vec<String> = events(&data, "invoked echo ")
        .iter()
        .filter_map(|l| l.split(' ').nth(2).map(str::to_owned))
        .collect();
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no call was dispatched twice");

    // Disable: withdrawn, calls in flight cancelled, and calls fail closed.
    let told_before = told.load(Ordering::SeqCst);
    let kit_data = root.path().join("state/data/kit");
    let slow_before = events(&kit_data, "invoked slow").len();
    let busy = agent(&d.url, TOKEN).await;
    let in_flight = tokio::spawn(async move {
        let r = call_tool(&busy, "kandev_kit_slow", json!({ "ms": 60_000 })).await;
        let _ = busy.cancel().await;
        code(&r)
    });
    eventually(WAIT, "the slow call to reach kit", async || {
        (events(&kit_data, "invoked slow").len() > slow_before).then_some(())
    })
    .await;
    assert!(
        a.disable_plugin(pb::PluginRef { id: "kit".into() })
            .await
            .is_ok()
    );
    let r = tokio::time::timeout(WAIT, in_flight).await;
    assert_eq!(
        r.ok().and_then(Result::ok).as_deref(),
        Some("plugin_unavailable"),
        "a call in flight fails at once when its plugin is disabled"
    );
    eventually(WAIT, "list_changed after disable", async || {
        (told.load(Ordering::SeqCst) > told_before).then_some(())
    })
    .await;
    assert!(!names(&c).await.iter().any(|n| n.starts_with("kandev_kit_")));
    // Still refused, and now with the reason: the operator disabled it.
    assert_eq!(echo(&c, "ok").await, "tool_unavailable");
    // Enable: back.
    assert!(
        a.enable_plugin(pb::PluginRef { id: "kit".into() })
            .await
            .is_ok()
    );
    assert_eq!(echo(&c, "ok").await, "ok");

    // Remove: files gone, data kept. Static plugins cannot be removed.
    let r = a
        .remove_plugin(pb::RemovePluginRequest {
            id: "my-kit".into(),
            purge: false,
        })
        .await;
    assert_eq!(
        r.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );
    assert!(
        a.remove_plugin(pb::RemovePluginRequest {
            id: "kit".into(),
            purge: false
        })
        .await
        .is_ok()
    );
    assert!(installed_dirs(root.path()).is_empty());
    assert!(
        data.join("events.log").is_file(),
        "the data directory is kept"
    );
    assert!(!names(&c).await.iter().any(|n| n.starts_with("kandev_kit_")));
    let _ = c.cancel().await;
}

#[tokio::test]
async fn what_is_installed_and_enabled_survives_a_restart() {
    let root = Scratch::new("persist");
    let base = testplug_dir(&root.path().join("static"), "base", "normal");
    let cfg = config(root.path(), std::slice::from_ref(&base));
    {
        let _d = Daemon::start(root.path(), &cfg, &[]);
        let mut a = admin(root.path()).await;
        let v1 = kit(root.path(), "src1", "kit", "1.0.0", "normal", 20);
        assert!(
            a.install_plugin(pb::InstallPluginRequest {
                values: Default::default(),
                path: v1.display().to_string(),
                ..Default::default()
            })
            .await
            .is_ok()
        );
        assert!(
            a.disable_plugin(pb::PluginRef { id: "base".into() })
                .await
                .is_ok()
        );
    }
    let d = Daemon::start(root.path(), &cfg, &[]);
    let mut a = admin(root.path()).await;
    let list = a
        .list_plugins(pb::ListPluginsRequest::default())
        .await
        .expect("the step before failed")
        .into_inner()
        .plugins;
    let summary: Vec<(String, String, bool)> = list
        .iter()
        .map(|p| (p.id.clone(), p.origin.clone(), p.enabled))
        .collect();
    assert_eq!(
        summary,
        [
            ("base".to_owned(), "static".to_owned(), false),
            ("kit".to_owned(), "installed".to_owned(), true)
        ]
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"kit\",state=\"ready\"}", 1.0)
        .await;
    let c = agent(&d.url, TOKEN).await;
    let n = names(&c).await;
    assert!(
        n.contains(&"kandev_kit_echo".to_owned())
            && !n.iter().any(|x| x.starts_with("kandev_base_")),
        "{n:?}"
    );
    let _ = c.cancel().await;
}

#[tokio::test]
async fn an_interrupted_install_leaves_nothing_half_installed() {
    let root = Scratch::new("interrupted");
    let base = testplug_dir(&root.path().join("static"), "base", "normal");
    let cfg = config(root.path(), std::slice::from_ref(&base));
    // What a daemon killed mid-install leaves: a staging directory and a
    // placed version the state file never recorded.
    let plugins = root.path().join("state/plugins");
    std::fs::create_dir_all(plugins.join(".staging-0123456789abcdef"))
        .expect("the step before failed");
    let half = kit(root.path(), "src-half", "kit", "1.0.0", "normal", 20);
    std::fs::rename(&half, plugins.join("kit@1.0.0")).expect("the step before failed");
    {
        let d = Daemon::start(root.path(), &cfg, &[]);
        let mut a = admin(root.path()).await;
        assert!(
            installed_dirs(root.path()).is_empty(),
            "leftovers removed: {:?}",
            installed_dirs(root.path())
        );
        let list = a
            .list_plugins(pb::ListPluginsRequest::default())
            .await
            .expect("the step before failed")
            .into_inner()
            .plugins;
        assert_eq!(list.len(), 1);
        // Now kill toolhost for real in the middle of an install.
        let v1 = kit(root.path(), "src1", "kit", "1.0.0", "normal", 20);
        let mut a2 = a.clone();
        let pending = tokio::spawn(async move {
            a2.install_plugin(pb::InstallPluginRequest {
                values: Default::default(),
                path: v1.display().to_string(),
                ..Default::default()
            })
            .await
        });
        let mut d = d;
        d.signal_and_wait(rustix::process::Signal::KILL);
        let _ = pending.await;
    }
    let d = Daemon::start(root.path(), &cfg, &[]);
    let mut a = admin(root.path()).await;
    let list = a
        .list_plugins(pb::ListPluginsRequest::default())
        .await
        .expect("the step before failed")
        .into_inner()
        .plugins;
    let dirs = installed_dirs(root.path());
    let kit_listed = list.iter().any(|p| p.id == "kit");
    // Either the install committed (state file, directory, running plugin)
    // or nothing of it is left.
    if kit_listed {
        assert_eq!(dirs, ["kit@1.0.0"]);
        d.wait_metric("toolhost_plugin_state{plugin=\"kit\",state=\"ready\"}", 1.0)
            .await;
    } else {
        assert!(dirs.is_empty(), "{dirs:?}");
    }
    let (code, out, err) = {
        let o = std::process::Command::new(bin("toolhost"))
            .args(["plugins", "list", "--admin"])
            .arg(root.path().join("state/admin.sock"))
            .output()
            .expect("the step before failed");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("base") && out.contains("static"), "{out}");
}

/// Every lifecycle operation, with a call loop on another plugin that
/// writes its data directory on every call: not one call fails. Under a
/// root daemon the plugins run as `[sandbox] user = "nobody"`, where each
/// operation used to reset the state directory or the data root to 0700
/// and lock the running plugins out of their data.
#[tokio::test]
async fn every_lifecycle_operation_under_load_fails_no_call_of_another_plugin() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = Scratch::new("lc-under-load");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let busy = toolhost_e2e::probeplug_dir(root.path(), "busy", "");
    let account = if rustix::process::geteuid().is_root() {
        "user = \"nobody\""
    } else {
        ""
    };
    let config = TestConfig::new(root.path(), &[busy])
        .sandbox(account)
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"busy\",state=\"ready\"}",
        1.0,
    )
    .await;
    // The plugins to operate on: one that needs nothing, one that needs a
    // value, and a second version of the first that needs one.
    let greeting = "[[config]]\nname = \"greeting\"\ntype = \"string\"\ndescription = \"What to say\"\nrequired = true\n";
    let extra = toolhost_e2e::probeplug_dir(&root.path().join("src1"), "extra", "");
    let needy = toolhost_e2e::probeplug_dir(&root.path().join("src2"), "needy", greeting);
    let extra2 = toolhost_e2e::probeplug_dir(&root.path().join("src3"), "extra", greeting);
    // Versions 3 and 4 ask the sandbox for more memory: each is held for
    // the operator, one accepted and one rejected.
    let more = |v: u32| format!("{greeting}\n[capabilities]\nmemory_mb = {}\n", 512 * v);
    let extra3 = toolhost_e2e::probeplug_dir(&root.path().join("src4"), "extra", &more(3));
    let extra4 = toolhost_e2e::probeplug_dir(&root.path().join("src5"), "extra", &more(4));
    for (dir, version) in [(&extra2, "2.0.0"), (&extra3, "3.0.0"), (&extra4, "4.0.0")] {
        let manifest = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(
            &manifest,
            text.replace("version = \"1.0.0\"", &format!("version = \"{version}\"")),
        )
        .unwrap();
    }

    // The load: four agents writing busy's data directory without pause.
    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = Vec::new();
    for n in 0..4 {
        let c = agent(&d.url, TOKEN).await;
        let stop = Arc::clone(&stop);
        let file = root
            .path()
            .join(format!("state/data/busy/loop-{n}.txt"))
            .display()
            .to_string();
        loops.push(tokio::spawn(async move {
            let (mut calls, mut failed) = (0u64, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let r = call_tool(&c, "kandev_busy_write_file", json!({ "path": file })).await;
                calls += 1;
                match r {
                    Ok(r) if r.is_error != Some(true) => {}
                    other => failed.push(format!("{other:?}")),
                }
            }
            let _ = c.cancel().await;
            (calls, failed)
        }));
    }
    let sock = root.path().join("state/admin.sock");
    let run = |args: &[&str]| {
        let (ok, out) = toolhost_e2e::cli_at(&sock, args);
        assert!(ok, "{args:?}: {out}");
        out
    };
    let path = |p: &PathBuf| p.display().to_string();
    let data = root.path().join("state/data/busy");
    // After each operation, calls go on being answered before the next.
    let answered_after = async |what: &str| {
        let before = events(&data, "invoked write_file").len();
        eventually(WAIT, &format!("calls answered after {what}"), async || {
            (events(&data, "invoked write_file").len() >= before + 8).then_some(())
        })
        .await;
    };
    run(&["plugins", "install", &path(&extra)]);
    answered_after("install").await;
    let out = run(&["plugins", "install", &path(&needy)]);
    assert!(
        out.contains("starts once its configuration is set"),
        "{out}"
    );
    answered_after("an install that needs configuration").await;
    run(&["plugins", "upgrade", &path(&extra2), "greeting=hello"]);
    answered_after("an upgrade with values").await;
    run(&["plugins", "config", "extra", "greeting=bye"]);
    run(&["plugins", "config", "needy", "greeting=at last"]);
    answered_after("config").await;
    run(&["plugins", "disable", "extra"]);
    answered_after("disable").await;
    run(&["plugins", "enable", "extra"]);
    answered_after("enable").await;
    run(&["plugins", "restart", "extra"]);
    answered_after("restart").await;
    let out = run(&["plugins", "upgrade", &path(&extra3)]);
    assert!(out.contains("held: version 3.0.0"), "{out}");
    answered_after("a held upgrade").await;
    run(&["plugins", "accept", "extra", "--version", "3.0.0"]);
    answered_after("accept").await;
    let out = run(&["plugins", "upgrade", &path(&extra4)]);
    assert!(out.contains("held: version 4.0.0"), "{out}");
    run(&["plugins", "reject", "extra"]);
    answered_after("reject").await;
    let out = run(&["plugins", "show", "extra"]);
    assert!(
        out.starts_with("extra 3.0.0") && !out.contains("held:"),
        "{out}"
    );
    run(&["plugins", "remove", "needy"]);
    answered_after("remove").await;
    run(&["plugins", "remove", "extra", "--purge"]);
    answered_after("remove --purge").await;
    run(&["plugins", "install", &path(&extra)]);
    answered_after("install again").await;
    stop.store(true, Ordering::SeqCst);
    let (mut calls, mut failed) = (0, Vec::new());
    for l in loops {
        let (c, f) = l.await.unwrap();
        calls += c;
        failed.extend(f);
    }
    println!(
        "{calls} calls during every lifecycle operation, {} failed",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {calls} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

/// The races a live upgrade must not lose. A call reads the catalog (still
/// naming 1.0.0), then its thread is descheduled before it takes hold of
/// the plugin's process; meanwhile the upgrade publishes 2.0.0 and drains
/// 1.0.0. Here the call is held at exactly that point (resolved, not yet
/// admitted) while the upgrade runs: the drain must wait for its catalog
/// reading, and the call, admitted after the switch, must be neither
/// refused ("list the tools again": the declaration did not change) nor
/// sent to a process that is stopping; it goes to 2.0.0, which serves the
/// same declaration now. A call that already holds 1.0.0's process (with
/// no place among its calls in flight yet) keeps it until it is done.
/// In-process, with the daemon's own lifecycle, store, registry and
/// pipeline, and real plugin processes.
#[tokio::test]
async fn a_call_that_read_the_catalog_before_an_upgrade_is_neither_refused_nor_lost() {
    use toolhost_catalog::Store;
    use toolhost_lifecycle::{Lifecycle, LifecycleConfig};
    use toolhost_pipeline::{Binding, CallMode, Limits, Pipeline, PluginPort, Resolution, Silent};
    use toolhost_runtime::Plugins;

    let root = Scratch::new("upgrade-race");
    let v1 = kit(root.path(), "v1", "kit", "1.0.0", "normal", 20);
    let v2 = kit(root.path(), "v2", "kit", "2.0.0", "normal", 20);
    let store = Arc::new(Store::new("kandev"));
    let plugins = Arc::new(Plugins::new());
    let cfg = LifecycleConfig {
        prefix: "kandev".into(),
        state_dir: root.path().join("state"),
        static_paths: Vec::new(),
        supervisor: toolhost_runtime::SupervisorConfig::default(),
        managed: false,
        drain_timeout: WAIT,
        archive_limits: toolhost_package::archive::ArchiveLimits::default(),
        trust: toolhost_package::statement::TrustPolicy::default(),
        contracts: toolhost_lifecycle::contract::ContractPolicy::default(),
        operators: BTreeMap::new(),
        sandbox: toolhost_lifecycle::settings::SandboxConfig::default(),
        registry: toolhost_lifecycle::RegistryConfig::default(),
    };
    let (lc, problems) = Lifecycle::open(cfg, Arc::clone(&store), Arc::clone(&plugins)).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    lc.install(&v1, &BTreeMap::new()).await.unwrap();
    let pipeline = Pipeline::new(Arc::clone(&store), plugins.clone(), Limits::default());
    let binding = Binding::new("chat", "task-1", "session-1", None);
    let tool = "kandev_kit_echo";
    let version_of = |s: &Store| {
        s.current()
            .get(tool)
            .map(|e| e.descriptor.plugin_version.clone())
    };

    let Resolution::Found(found) = pipeline.resolve(&binding, tool) else {
        panic!("{tool} is not served");
    };
    assert_eq!(found.entry().descriptor.plugin_version, "1.0.0");
    let upgrade = tokio::spawn({
        let (lc, v2) = (Arc::clone(&lc), v2.clone());
        async move { lc.upgrade(&v2, &BTreeMap::new()).await }
    });
    eventually(WAIT, "the catalog to name 2.0.0", async || {
        (version_of(&store).as_deref() == Some("2.0.0")).then_some(())
    })
    .await;
    // Switched, and draining: the process the call read is kept for it.
    assert!(
        plugins.client("kit", "1.0.0").is_ok(),
        "1.0.0 was stopped under a call that read it"
    );
    assert!(
        !upgrade.is_finished(),
        "the drain did not wait for the call"
    );
    // A call that holds the old process but has no place among its calls
    // in flight yet keeps it too.
    let held = PluginPort::ready(&*plugins, "kit", "1.0.0").unwrap();
    let old = plugins.client("kit", "1.0.0").unwrap();
    assert_eq!((old.in_flight(), old.busy()), (0, 1));

    let stage = pipeline
        .admit(
            &binding,
            &found,
            Some(json!({ "msg": "hi", "n": 1 })),
            &Silent,
            tokio_util::sync::CancellationToken::new(),
            CallMode::Direct,
        )
        .await;
    let in_flight = |v: &str| plugins.client("kit", v).map(|c| c.in_flight()).ok();
    assert!(matches!(stage, toolhost_pipeline::Stage::Ready(_)));
    assert_eq!(
        (in_flight("1.0.0"), in_flight("2.0.0")),
        (Some(0), Some(1)),
        "the call was not admitted on the version serving it now"
    );
    let result = stage.run_to_end(None).await;
    assert!(!result.is_error, "{}", result.text());
    drop(found);
    assert!(
        !upgrade.is_finished(),
        "the drain did not wait for the hold"
    );
    let slot = held.try_reserve(8).unwrap();
    let arguments = json!({ "msg": "hi", "n": 1 });
    let request = toolhost_proto::request::ToolRequestRef {
        invocation_id: "held-1",
        name: "echo",
        arguments: arguments.as_object().unwrap(),
        context: toolhost_proto::request::ContextRef {
            task_id: "t",
            session_id: "s",
            workspace_id: "",
            surface: "chat",
            credentials: &[],
        },
    };
    let answer = held.invoke(slot, &request, WAIT, 1 << 20).await;
    assert!(answer.is_ok_and(|a| !a.is_error), "the held call failed");
    drop((held, old));
    upgrade.await.unwrap().unwrap();
    assert!(plugins.client("kit", "1.0.0").is_err(), "1.0.0 still runs");
    lc.shutdown().await;
}
