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
use toolhost_e2e::{Daemon, Scratch, TestConfig, bin, events, eventually, workspace_root};

/// One call of `name` with `args`.
async fn call(
    c: &toolhost_e2e::asker::Client,
    name: &str,
    args: Value,
) -> rmcp::model::CallToolResult {
    call_params(c, params(name, args)).await
}

const WAIT: Duration = Duration::from_secs(30);

const MANIFEST_TOOLS: &str = r#"
[[tools]]
name = "hello"
description = "Greets."
surfaces = ["chat"]
input_schema = { type = "object", properties = { name = { type = "string" } } }
annotations = { read_only = true }

[[tools]]
name = "fail"
description = "Fails the way a tool fails."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "slow"
description = "Waits until cancelled."
surfaces = ["chat"]
timeout_ms = 60000
input_schema = { type = "object" }
annotations = { read_only = true }

[[tools]]
name = "rich"
description = "Progress, a log message, a question, an image."
surfaces = ["chat"]
input_schema = { type = "object" }
annotations = { read_only = true }
"#;

const PYTHON: &str = r#"import asyncio
import os

from toolhost_plugin import Content, LogLevel, Plugin, Question, ToolError

plugin = Plugin()


def event(line):
    with open(os.path.join(Plugin.data_dir(), "events.log"), "a") as f:
        f.write(line + "\n")


@plugin.tool("hello")
async def hello(call):
    return f"hello, {call.arguments.get('name', 'world')}"


@plugin.tool("fail")
def fail(call):
    raise ToolError("the thing is missing; create it first")


@plugin.tool("slow")
async def slow(call):
    event(f"started {call.invocation_id}")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        event(f"cancelled {call.invocation_id}")
        raise
    return "woke"


@plugin.tool("rich")
async def rich(call):
    for i in range(1, 4):
        call.progress(i, 3, f"step {i}")
    call.log(LogLevel.WARNING, "careful")
    answer = await call.ask(Question("Proceed?").boolean("ok", "OK").require("ok"))
    return ["done" if answer.flag("ok") else "stopped", Content.image(b"\x89PNG", "image/png")]


plugin.run()
"#;

const TYPESCRIPT: &str = r#"import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { Content, LogLevel, Plugin, Question, ToolError } from "SDK";

const event = (line) => appendFileSync(join(Plugin.dataDir(), "events.log"), line + "\n");

new Plugin()
  .tool("hello", (call) => `hello, ${call.arguments.name ?? "world"}`)
  .tool("fail", () => {
    throw new ToolError("the thing is missing; create it first");
  })
  .tool("slow", (call) => {
    event(`started ${call.invocationId}`);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve("woke"), 30000);
      call.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        event(`cancelled ${call.invocationId}`);
        reject(new Error("cancelled"));
      });
    });
  })
  .tool("rich", async (call) => {
    for (let i = 1; i <= 3; i++) call.progress(i, 3, `step ${i}`);
    call.log(LogLevel.Warning, "careful");
    const answer = await call.ask(new Question("Proceed?").boolean("ok", "OK").require("ok"));
    return [answer.action === "accept" && answer.values.ok === true ? "done" : "stopped", Content.image(new Uint8Array([0x89, 0x50]), "image/png")];
  })
  .run();
"#;

fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A protocol-2 plugin `id` on the Python or TypeScript SDK.
fn sdk_plugin(root: &Path, id: &str, lang: &str) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let launcher = match lang {
        "python" => {
            std::fs::write(dir.join("plugin.py"), PYTHON).unwrap();
            format!(
                "#!/bin/sh\nexec {} \"$(dirname \"$0\")/../plugin.py\"\n",
                workspace_root().join(".venv/bin/python").display()
            )
        }
        _ => {
            let sdk = workspace_root().join("sdk/typescript/dist/index.js");
            let code = TYPESCRIPT.replace(
                "\"SDK\"",
                &format!("{:?}", format!("file://{}", sdk.display())),
            );
            std::fs::write(dir.join("plugin.mjs"), code).unwrap();
            "#!/bin/sh\nexec node \"$(dirname \"$0\")/../plugin.mjs\"\n".to_owned()
        }
    };
    write_exe(&dir.join("bin/plugin"), &launcher);
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"{id}\"\n\n[runtime]\ncommand = \"bin/plugin\"\nstartup_timeout_ms = 20000\nprotocol = 2\n\n[capabilities]\nnetwork = {{ connect = [443] }}\n{MANIFEST_TOOLS}"
        ),
    )
    .unwrap();
    dir
}

#[tokio::test]
async fn python_and_typescript_plugins_serve_through_mcp_in_both_eras() {
    let root = Scratch::new("sdks");
    let plugins = [
        sdk_plugin(root.path(), "py", "python"),
        sdk_plugin(root.path(), "ts", "typescript"),
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

/// Builds a plugin `toolhost new` wrote, the way its README says.
fn build(dir: &Path, lang: &str) {
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.current_dir(dir).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    match lang {
        "rust" => {
            // The workspace's lockfile and target: the dependencies are
            // already built there.
            std::fs::copy(workspace_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
            let target = workspace_root().join("target/new-plugins");
            run(std::process::Command::new("cargo")
                .args(["build", "--offline", "--quiet"])
                .env("CARGO_TARGET_DIR", &target));
            std::os::unix::fs::symlink(&target, dir.join("target")).unwrap();
        }
        "typescript" => {
            run(std::process::Command::new("npm").args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--loglevel=error",
            ]));
            run(std::process::Command::new("npx").args(["tsc", "-p", "tsconfig.json"]));
        }
        _ => {}
    }
}

#[tokio::test]
async fn toolhost_new_writes_a_plugin_that_checks_builds_and_serves_in_each_language() {
    // Inside the checkout, so the templates use the SDKs by path.
    let root = workspace_root().join("target/e2e-new");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let mut dirs = Vec::new();
    for lang in ["rust", "python", "typescript"] {
        let dir = root.join(format!("hello-{lang}"));
        let out = std::process::Command::new(bin("toolhost"))
            .args(["new", &format!("hello-{lang}"), "--lang", lang])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let code_lines = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                matches!(
                    e.path().extension().and_then(|x| x.to_str()),
                    Some("py" | "ts")
                )
            })
            .map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .count()
            })
            .sum::<usize>();
        assert!(code_lines <= 15, "{lang}: {code_lines} lines");
        let check = std::process::Command::new(bin("toolhost"))
            .arg("check")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{lang}: {}",
            String::from_utf8_lossy(&check.stdout)
        );
        build(&dir, lang);
        dirs.push(dir);
    }
    // A second `new` into a non-empty directory is refused.
    let again = std::process::Command::new(bin("toolhost"))
        .args(["new", "hello-rust", "--lang", "rust"])
        .arg(&dirs[0])
        .output()
        .unwrap();
    assert!(!again.status.success());

    let scratch = Scratch::new("new-serve");
    let config = TestConfig::new(scratch.path(), &dirs)
        .extra("\n[plugin.hello-python]\npass_env = [\"TOOLHOST_PYTHON\"]\n")
        .build();
    let d = Daemon::start_with(scratch.path(), &config, &[], "info", |c| {
        c.env("TOOLHOST_PYTHON", workspace_root().join(".venv/bin/python"));
    });
    let c = connect(
        &d.url,
        Asker::new(false),
        toolhost_e2e::asker::Era::Sessions,
    )
    .await;
    for lang in ["rust", "python", "typescript"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"hello-{lang}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
        let r = call(
            &c,
            &format!("kandev_hello_{lang}_hello"),
            json!({"name": "Ada"}),
        )
        .await;
        assert_eq!(texts(&r), ["Hello, Ada!"], "{lang}");
    }
    let _ = c.cancel().await;
    let _ = std::fs::remove_dir_all(&root);
}
