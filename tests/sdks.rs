//! The Python and TypeScript SDKs end to end, and `toolhost new`: the real
//! daemon, plugins written on each SDK, and rmcp's client in both protocol
//! eras. Each plugin records what it saw in `events.log` in its data
//! directory, so "the handler was cancelled" is read from the plugin.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolhost_e2e::asker::{Asker, ERAS, Reply, call as call_params, connect, params, texts};
use toolhost_e2e::sdk::sdk_plugin;
use toolhost_e2e::{
    AUDIT_LOG_FILTER, Daemon, Scratch, TestConfig, bin, events, eventually, workspace_root,
};

/// One call of `name` with `args`.
async fn call(
    c: &toolhost_e2e::asker::Client,
    name: &str,
    args: Value,
) -> rmcp::model::CallToolResult {
    call_params(c, params(name, args)).await
}

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn python_and_typescript_plugins_serve_through_mcp_in_both_eras() {
    let root = Scratch::new("sdks");
    let plugins = [
        sdk_plugin(root.path(), "py", "python", 2),
        sdk_plugin(root.path(), "ts", "typescript", 2),
    ];
    // Granted network, each plugin's listen() on its own socket is made
    // by the daemon (the sandbox refuses TCP listeners): it must serve.
    let config = TestConfig::new(root.path(), &plugins)
        .extra("[plugin.py]\ngrant = [\"network\"]\n\n[plugin.ts]\ngrant = [\"network\"]\n")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    for p in ["py", "ts"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    for p in ["py", "ts"] {
        let data = root.path().join(format!("state/data/{p}"));
        for era in ERAS {
            let asker = Asker::new(true);
            asker.answer(Reply::Accept(json!({"ok": true})));
            let c = Arc::new(connect(&d.url, asker.clone(), era).await);
            let r = call(&c, &format!("kandev_{p}_hello"), json!({"name": "ada"})).await;
            assert_eq!(texts(&r), ["hello, ada"], "{p} {era:?}");

            // The error path: the tool's message, as a tool error.
            let r = call(&c, &format!("kandev_{p}_fail"), json!({})).await;
            assert_eq!(r.is_error, Some(true), "{p} {era:?}");
            assert_eq!(texts(&r), ["the thing is missing; create it first"]);

            // Protocol 2: progress, a question, an image.
            let r = call(&c, &format!("kandev_{p}_rich"), json!({})).await;
            assert_eq!(texts(&r), ["done"], "{p} {era:?}: {r:?}");
            assert_eq!(
                serde_json::to_value(&r.content[1]).unwrap()["mimeType"],
                "image/png"
            );
            assert_eq!(asker.asked.load(Ordering::SeqCst), 1);
            let last = asker.progress.lock().unwrap().last().cloned();
            assert_eq!(
                last.map(|p| (p.progress, p.total)),
                Some((3.0, Some(3.0))),
                "{p} {era:?}"
            );

            // A second question composed while the first was open is
            // refused, even when it arrives after the first answer: the
            // plugin said it had seen no answer.
            let r = call(&c, &format!("kandev_{p}_late"), json!({})).await;
            assert_eq!(r.is_error, Some(true), "{p} {era:?}: {r:?}");
            assert!(
                texts(&r)[0].contains("second question"),
                "{p} {era:?}: {r:?}"
            );
            assert_eq!(asker.asked.load(Ordering::SeqCst), 2, "{p} {era:?}");

            // Cancellation reaches the handler.
            let before = events(&data, "cancelled").len();
            let pending = {
                let c = Arc::clone(&c);
                let name = format!("kandev_{p}_slow");
                tokio::spawn(async move { c.call_tool(params(&name, json!({}))).await })
            };
            let started = events(&data, "started").len();
            eventually(WAIT, "the slow call starts", async || {
                (events(&data, "started").len() > started).then_some(())
            })
            .await;
            pending.abort();
            eventually(WAIT, "the handler sees the cancellation", async || {
                (events(&data, "cancelled").len() > before).then_some(())
            })
            .await;
            if let Ok(c) = Arc::try_unwrap(c) {
                let _ = c.cancel().await;
            }
        }
    }
}

/// The SDKs as `scripts/package-sdks` packages them (scripts/test runs it
/// first): what a plugin author outside the checkout builds against.
fn sdk_artifacts() -> PathBuf {
    let dir = workspace_root().join("target/sdk-dist");
    assert!(
        dir.join("rust").is_dir(),
        "the SDK artifacts are not built: run scripts/package-sdks (scripts/test does)"
    );
    dir
}

/// Runs `cmd` in `dir`, asserting it succeeds; returns stdout and stderr.
fn run_in(dir: &Path, cmd: &mut std::process::Command) -> String {
    let out = cmd.current_dir(dir).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}:\n{text}");
    text
}

/// The CLI against the daemon whose state is in `state`: (success, output).
fn cli(state: &Path, args: &[&str]) -> (bool, String) {
    toolhost_e2e::cli_at(&state.join("admin.sock"), args)
}

/// Builds a plugin `toolhost new` wrote, with the command its README gives.
fn build(dir: &Path, lang: &str) {
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let step = readme
        .lines()
        .find_map(|l| l.strip_prefix("1. Build: `"))
        .and_then(|l| l.strip_suffix('`'))
        .unwrap();
    if lang == "rust" {
        // The versions the workspace was tested with (and has fetched).
        // The build goes to the plugin's own target/, as the README's:
        // the sandbox lets a plugin run only what is in its directory.
        std::fs::copy(workspace_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    }
    run_in(
        dir,
        toolhost_e2e::cheap_plugin_build(
            std::process::Command::new("sh")
                .args(["-c", step])
                .env_remove("CARGO_TARGET_DIR")
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        ),
    );
}

/// Runs the test the README gives, when it gives one: the template's tool
/// through the SDK's harness, with this build's `toolhost` on PATH.
fn test_with_harness(dir: &Path) {
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let Some(step) = readme
        .lines()
        .find_map(|l| l.split_once("Test: `").map(|(_, rest)| rest))
        .and_then(|l| l.strip_suffix('`'))
    else {
        return;
    };
    let path = format!(
        "{}:{}",
        toolhost_e2e::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_in(
        dir,
        toolhost_e2e::cheap_plugin_build(
            std::process::Command::new("sh")
                .args(["-c", step])
                .env("PATH", path)
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        ),
    );
}

/// `toolhost pack DIR`, as the README says; returns the archive.
fn pack(dir: &Path, id: &str, version: &str) -> PathBuf {
    let out = run_in(
        dir,
        toolhost_e2e::cheap_plugin_build(
            std::process::Command::new(bin("toolhost"))
                .args(["pack", "."])
                .env_remove("CARGO_TARGET_DIR"),
        ),
    );
    let archive = dir.join(format!("{id}-{version}.tar.gz"));
    assert!(
        out.contains(&format!("wrote {}", archive.display())),
        "{out}"
    );
    archive
}

/// The tool `toolhost new` writes, called as an agent would.
async fn hello_of(url: &str, tool: &str) -> Vec<String> {
    let c = connect(url, Asker::new(false), toolhost_e2e::asker::Era::Sessions).await;
    let r = call(&c, tool, json!({"name": "Ada"})).await;
    let _ = c.cancel().await;
    texts(&r)
}

const NEW_SECRET: &str = r#"
[[config]]
name = "api_token"
description = "The tickets service's API token."
type = "string"
required = true
secret = true
"#;

/// Issue 29's path for each language, all outside the checkout and with
/// nothing from it but the binary and the packaged SDKs: `toolhost new`,
/// the README's build, `check --start`, `serve --dev`, `toolhost pack`,
/// install into a daemon with the default sandbox and no grants, a call,
/// and an upgrade to a version with a new required secret given in the
/// same step, with calls running throughout and none failing.
#[tokio::test]
async fn from_toolhost_new_to_an_installed_plugin_outside_the_checkout_in_each_language() {
    let root = Scratch::new("authors");
    let sdk = sdk_artifacts();
    let state = root.path().join("state");
    // No plugin paths, no [sandbox] read, no grants: the defaults.
    let config = format!(
        "state_dir = {:?}\n\n[[http.tokens]]\ntoken = \"{}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n",
        state.display().to_string(),
        toolhost_e2e::TOKEN
    );
    let d = Daemon::start(root.path(), &config, &[]);
    for lang in ["rust", "python", "typescript"] {
        let id = format!("tickets-{lang}");
        let tool = format!("kandev_tickets_{lang}_hello");
        let dir = root.path().join(&id);
        run_in(
            root.path(),
            std::process::Command::new(bin("toolhost"))
                .args(["new", &id, "--lang", lang, "--sdk"])
                .arg(&sdk)
                .arg(&dir),
        );
        build(&dir, lang);
        test_with_harness(&dir);

        // The code and the manifest are compared: a declared tool without
        // a handler fails `check --start`, naming it.
        let manifest = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
        let bye = manifest.replace("name = \"hello\"", "name = \"bye\"");
        let bye = &bye[bye.find("[[tools]]").unwrap()..];
        std::fs::write(dir.join("plugin.toml"), format!("{manifest}\n{bye}")).unwrap();
        let out = std::process::Command::new(bin("toolhost"))
            .args(["check", "--start", "."])
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lang}: {text}");
        assert!(
            text.contains("tools declared in plugin.toml but not implemented by its code: bye"),
            "{lang}: {text}"
        );
        std::fs::write(dir.join("plugin.toml"), &manifest).unwrap();
        let started = run_in(
            &dir,
            std::process::Command::new(bin("toolhost")).args(["check", "--start", "."]),
        );
        assert!(
            started.contains("its code implements hello"),
            "{lang}: {started}"
        );

        if lang == "typescript" {
            // `serve --dev`: no config file; the token it prints works.
            let dev_state = root.path().join("dev-state");
            let dev = Daemon::start(
                root.path(),
                "",
                &[
                    "--dev",
                    &dir.display().to_string(),
                    "--state-dir",
                    &dev_state.display().to_string(),
                ],
            );
            let token = dev_token(&dev).await;
            let logs = dev.logs();
            assert!(
                logs.contains(&format!("toolhost call {tool} '{{}}'")),
                "{logs}"
            );
            // The banner's sample call works as printed.
            let sample = logs
                .lines()
                .find_map(|l| l.trim().strip_prefix("toolhost call "))
                .unwrap_or_default();
            let (name, args) = sample.split_once(' ').unwrap_or_default();
            run_in(
                &dir,
                std::process::Command::new(bin("toolhost"))
                    .args(["call", name, args.trim_matches('\''), "--url", &dev.url])
                    .env("TOOLHOST_TOKEN", &token),
            );
            let out = run_in(
                &dir,
                std::process::Command::new(bin("toolhost"))
                    .args(["call", &tool, r#"{"name": "Ada"}"#, "--url", &dev.url])
                    .env("TOOLHOST_TOKEN", &token),
            );
            assert_eq!(out.trim(), "Hello, Ada!");
        }
        if lang == "python" {
            // A development tree with a venv is refused, saying what to do.
            let (ok, out) = cli(&state, &["plugins", "install", &dir.display().to_string()]);
            assert!(!ok);
            assert!(
                out.contains(".venv/ is a build tree")
                    && out.contains(&format!("run `toolhost pack {}`", dir.display())),
                "{out}"
            );
        }

        let archive = pack(&dir, &id, "0.1.0");
        let (ok, out) = cli(
            &state,
            &["plugins", "install", &archive.display().to_string()],
        );
        assert!(ok, "{lang}: {out}");
        assert_eq!(hello_of(&d.url, &tool).await, ["Hello, Ada!"], "{lang}");
        // The SDK told the daemon what it implements: all that is declared.
        let (ok, out) = cli(&state, &["plugins", "show", &id]);
        let sdk_name = match lang {
            "rust" => "toolhost-plugin-sdk 0.1.0",
            "python" => "toolhost-plugin 0.1.0",
            _ => "@toolhost/plugin 0.1.0",
        };
        assert!(
            ok && out.contains(&format!("built on {sdk_name}")),
            "{lang}: {out}"
        );
        assert!(!out.contains("not implemented"), "{lang}: {out}");

        // Version 0.2.0 needs a secret the running version does not.
        std::fs::write(
            dir.join("plugin.toml"),
            format!(
                "{}{NEW_SECRET}",
                manifest.replace("version = \"0.1.0\"", "version = \"0.2.0\"")
            ),
        )
        .unwrap();
        let newer = pack(&dir, &id, "0.2.0");
        let (ok, out) = cli(
            &state,
            &["plugins", "upgrade", &newer.display().to_string()],
        );
        assert!(!ok, "{lang}: {out}");
        assert!(
            out.contains(
                "give it with the upgrade (toolhost plugins upgrade PATH api_token=@FILE)"
            ) && out.contains("the old version keeps serving"),
            "{lang}: {out}"
        );
        let secret = root.path().join(format!("{id}.token"));
        std::fs::write(&secret, "tk-0123456789\n").unwrap();

        // Calls run throughout the upgrade; none may fail.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let made = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let calls = {
            let (url, tool) = (d.url.clone(), tool.clone());
            let (stop, made) = (Arc::clone(&stop), Arc::clone(&made));
            tokio::spawn(async move {
                let c = connect(&url, Asker::new(false), toolhost_e2e::asker::Era::Sessions).await;
                let mut failed = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let r = call(&c, &tool, json!({"name": "Ada"})).await;
                    made.fetch_add(1, Ordering::SeqCst);
                    if texts(&r) != ["Hello, Ada!"] {
                        failed.push(format!("{r:?}"));
                    }
                }
                let _ = c.cancel().await;
                failed
            })
        };
        eventually(WAIT, "calls are being made", async || {
            (made.load(Ordering::SeqCst) > 0).then_some(())
        })
        .await;
        let given = format!("api_token=@{}", secret.display());
        let upgrade = {
            let (state, newer) = (state.clone(), newer.display().to_string());
            tokio::task::spawn_blocking(move || {
                cli(&state, &["plugins", "upgrade", &newer, &given])
            })
        };
        let (ok, out) = upgrade.await.unwrap();
        assert!(ok, "{lang}: {out}");
        stop.store(true, Ordering::SeqCst);
        let failed = calls.await.unwrap();
        let made = made.load(Ordering::SeqCst);
        assert!(
            made > 0 && failed.is_empty(),
            "{lang}: {made} calls, failed: {failed:?}"
        );
        let (ok, out) = cli(&state, &["plugins", "list"]);
        assert!(
            ok && out.lines().any(|l| l.contains(&id) && l.contains("0.2.0")),
            "{out}"
        );
        assert_eq!(hello_of(&d.url, &tool).await, ["Hello, Ada!"], "{lang}");

        if lang == "rust" {
            dev_rebuilds_a_rust_plugin(root.path(), &dir, &tool, &secret).await;
        }
    }
}

/// The token `serve --dev`'s banner gives. The banner is one write; its
/// last line says it is whole.
async fn dev_token(dev: &Daemon) -> String {
    eventually(WAIT, "the dev banner", async || {
        let logs = dev.logs();
        if !logs.contains("the token stays the same across runs") {
            return None;
        }
        logs.lines()
            .find_map(|l| l.trim().strip_prefix("export TOOLHOST_TOKEN="))
            .map(str::to_owned)
    })
    .await
}

/// `serve --dev` builds what it runs: a change to a Rust plugin's source is
/// built (`cargo build --release`, the template launcher's binary) before
/// the reload, and the next call answers from the new code.
async fn dev_rebuilds_a_rust_plugin(root: &Path, dir: &Path, tool: &str, secret: &Path) {
    let dev_state = root.join("dev-state-rust");
    let set = format!("api_token=@{}", secret.display());
    let dev = Daemon::start_with(
        root,
        "",
        &[
            "--dev",
            &dir.display().to_string(),
            "--set",
            &set,
            "--state-dir",
            &dev_state.display().to_string(),
        ],
        AUDIT_LOG_FILTER,
        |command| {
            toolhost_e2e::cheap_plugin_build(command);
        },
    );
    let token = dev_token(&dev).await;
    let hello = |who: &'static str| {
        let (url, token, tool) = (dev.url.clone(), token.clone(), tool.to_owned());
        async move {
            let out = tokio::process::Command::new(bin("toolhost"))
                .args([
                    "call",
                    &tool,
                    &format!("{{\"name\": \"{who}\"}}"),
                    "--url",
                    &url,
                ])
                .env("TOOLHOST_TOKEN", &token)
                .output()
                .await
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    assert_eq!(hello("Ada").await, "Hello, Ada!", "{}", dev.logs());
    let main = dir.join("src/main.rs");
    let source = std::fs::read_to_string(&main).unwrap();
    let changed = source.replace("\"Hello, {}!\"", "\"Howdy, {}!\"");
    assert_ne!(changed, source, "the template's greeting moved");
    std::fs::write(&main, changed).unwrap();
    // A release build of one crate: minutes on a loaded 2-core machine.
    let rebuilt = tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            if hello("Ada").await == "Howdy, Ada!" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let logs = dev.logs();
    assert!(
        rebuilt.is_ok(),
        "the source change was not built and served:\n{logs}"
    );
    assert!(
        logs.contains("building tickets-rust (cargo build --release)"),
        "{logs}"
    );
}

/// A handler that blocks where its SDK cannot interrupt it (Python: a
/// sleep in C, in a thread of its own; TypeScript: a busy event loop)
/// times out for the agent, and its plugin is restarted: the Python SDK
/// reports itself unhealthy once the handler outlives its call by the
/// grace, the TypeScript plugin stops answering its health probes. `plugins
/// show` says why, with the plugin's own last words.
#[tokio::test]
async fn a_plugin_whose_handler_is_stuck_is_restarted_and_says_why() {
    let root = Scratch::new("stuck");
    let plugins = [
        sdk_plugin(root.path(), "py", "python", 2),
        sdk_plugin(root.path(), "ts", "typescript", 2),
    ];
    let config = TestConfig::new(root.path(), &plugins)
        .supervisor("health_interval_ms = 300\nhealth_timeout_ms = 500\nbackoff_first_ms = 50\nstop_grace_ms = 1000")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    for p in ["py", "ts"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{p}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    let shown = |id: &str| {
        let (ok, out) = toolhost_e2e::cli_at(&admin, &["plugins", "show", id, "--format", "json"]);
        assert!(ok, "{out}");
        serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    for (p, why) in [("py", "still running"), ("ts", "health probes")] {
        let before = shown(p);
        let pid = before["pid"].clone();
        let asker = Asker::new(false);
        let c = connect(&d.url, asker, ERAS[0]).await;
        let r = call(&c, &format!("kandev_{p}_stuck"), json!({})).await;
        let text = texts(&r).join("");
        assert_eq!(r.is_error, Some(true), "{p}: {text}");
        assert!(
            text.contains("did not answer within 1000 ms"),
            "{p}: {text}"
        );
        let after = eventually(
            Duration::from_secs(60),
            "the stuck plugin restarted",
            async || {
                let s = shown(p);
                let status = &s;
                (status["state"] == "ready"
                    && status["pid"] != pid
                    && status["restarts"].as_u64() >= Some(1))
                .then_some(s)
            },
        )
        .await;
        let last = after["last_error"].as_str().unwrap_or_default().to_owned();
        assert!(last.contains(why), "{p}: {last}");
        // It serves again.
        let r = call(&c, &format!("kandev_{p}_hello"), json!({"name": "ada"})).await;
        assert_eq!(texts(&r), ["hello, ada"], "{p}");
    }
}

/// What a client may cache: a 2026-07-28 client's `tools/list` carries the
/// configured `ttlMs` and the `private` scope (a listing is the caller's
/// surface's); a 2025-era session's answer carries neither, as before.
#[tokio::test]
async fn tools_list_tells_a_modern_client_how_long_it_may_cache_it() {
    let root = Scratch::new("list-ttl");
    let plugins = [sdk_plugin(root.path(), "py", "python", 2)];
    let config = TestConfig::new(root.path(), &plugins)
        .top("")
        .extra("\n[mcp]\nlist_ttl_ms = 45000\n")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric("toolhost_plugin_state{plugin=\"py\",state=\"ready\"}", 1.0)
        .await;
    for era in ERAS {
        let c = connect(&d.url, Asker::new(false), era).await;
        let listed = c.list_tools(None).await.unwrap();
        assert!(listed.tools.iter().any(|t| t.name == "kandev_py_hello"));
        if era == ERAS[1] {
            assert_eq!(listed.ttl_ms, Some(45_000));
            assert_eq!(listed.cache_scope, Some(rmcp::model::CacheScope::Private));
        } else {
            assert_eq!(
                (listed.ttl_ms, listed.cache_scope),
                (None, None),
                "2025-era answers are unchanged"
            );
        }
    }
}
