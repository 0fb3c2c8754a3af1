//! A plugin author's tools against the daemon they stand in for: the
//! Python SDK's test harness (`toolhost_plugin.testing`, over `toolhost
//! harness`) answers a call exactly as a daemon answers an agent's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::json;
use toolhost_e2e::{Daemon, Scratch, TOKEN, TestConfig, agent, bin, call_tool, workspace_root};

/// What the harness says for `arguments` to the Python tickets example's
/// `tool`: the text an agent would read.
fn harness_text(tool: &str, arguments: &serde_json::Value) -> String {
    let script = format!(
        "import json\nfrom plugin import plugin\nfrom toolhost_plugin.testing import Harness\n\
         with Harness(plugin, config={{'api_token': 'test'}}) as h:\n    \
         print(json.dumps(h.call({tool:?}, json.loads({args:?})).text))\n",
        args = arguments.to_string()
    );
    let out = std::process::Command::new(workspace_root().join(".venv/bin/python"))
        .args(["-c", &script])
        .current_dir(workspace_root().join("plugins-example/tickets-py"))
        .env("TOOLHOST_BIN", bin("toolhost"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn the_harness_answers_as_the_daemon_answers_an_agent() {
    let root = Scratch::new("authoring");
    let secret = root.path().join("api-token");
    std::fs::write(&secret, "test\n").unwrap();
    let config = TestConfig::new(
        root.path(),
        &[workspace_root().join("plugins-example/tickets-py")],
    )
    .extra(&format!(
        "\n[plugin.\"tickets-py\".config]\napi_token_file = {:?}\n",
        secret.display().to_string()
    ))
    .build();
    let d = Daemon::start(root.path(), &config, &[]);
    let client = agent(&d.url, TOKEN).await;
    for (tool, arguments) in [
        // A nested object missing what its type requires, with a misspelt key.
        (
            "create_ticket",
            json!({"title": "x", "labels": [{"colour": "red"}]}),
        ),
        // The wrong type at the root, and an argument the tool lacks.
        ("list_tickets", json!({"limit": "ten", "page": 2})),
        // A ticket that does not exist: the tool's own error.
        ("close_ticket", json!({"id": 7})),
    ] {
        let exposed = format!("kandev_tickets_py_{tool}");
        let daemon = toolhost_e2e::eventually(
            std::time::Duration::from_secs(30),
            "the tool to be served",
            async || {
                let r = call_tool(&client, &exposed, arguments.clone()).await.ok()?;
                let text: String = r
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("\n");
                // Until the plugin is ready, the call says so.
                (!text.contains("plugin_unavailable")).then_some(text)
            },
        )
        .await;
        assert_eq!(harness_text(tool, &arguments), daemon, "{tool}");
    }
    client.cancel().await.unwrap();
}

/// The Python tickets example, copied to `root/tickets` with its launcher
/// on the checkout's virtualenv.
fn tickets_copy(root: &std::path::Path) -> std::path::PathBuf {
    let example = workspace_root().join("plugins-example/tickets-py");
    let dir = root.join("tickets");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    for f in ["plugin.py", "plugin.toml"] {
        std::fs::copy(example.join(f), dir.join(f)).unwrap();
    }
    for e in std::fs::read_dir(example.join("schemas")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("schemas").join(e.file_name())).unwrap();
    }
    toolhost_e2e::venv_launcher(&dir.join("bin/tickets-plugin"), "../plugin.py");
    dir
}

/// `serve --dev DIR` for the copy in `root`, its secret from a file.
fn serve_dev(root: &std::path::Path, dir: &std::path::Path) -> Daemon {
    serve_dev_as(root, dir, "")
}

/// `serve_dev` with more `[sandbox]` lines (`account`).
fn serve_dev_as(root: &std::path::Path, dir: &std::path::Path, account: &str) -> Daemon {
    serve_dev_reading(root, dir, account, &[])
}

/// `serve_dev_as` with more paths the plugin may read (`[sandbox] read`).
fn serve_dev_reading(
    root: &std::path::Path,
    dir: &std::path::Path,
    account: &str,
    more: &[std::path::PathBuf],
) -> Daemon {
    let secret = root.join("api-token");
    std::fs::write(&secret, "test\n").unwrap();
    let read: Vec<String> = toolhost_e2e::sandbox_read_paths()
        .iter()
        .chain(more)
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    let state = root.join("state");
    let set = format!("api_token=@{}", secret.display());
    Daemon::start(
        root,
        &format!("[sandbox]\nread = [{}]\n{account}\n", read.join(", ")),
        &[
            "--dev",
            dir.to_str().unwrap(),
            "--set",
            &set,
            "--state-dir",
            state.to_str().unwrap(),
        ],
    )
}

/// The token the banner gives (it follows the line `Daemon::start` waits
/// for).
async fn banner_token(d: &Daemon) -> String {
    toolhost_e2e::eventually(
        std::time::Duration::from_secs(10),
        "the banner's token",
        async || {
            let logs = d.logs();
            // The banner's last line: all of it is there.
            if !logs.contains("a change to its code or plugin.toml reloads it") {
                return None;
            }
            logs.lines()
                .find_map(|l| l.trim().strip_prefix("export TOOLHOST_TOKEN="))
                .map(str::to_owned)
        },
    )
    .await
}

async fn text_of(
    client: &toolhost_e2e::AgentClient,
    tool: &str,
    args: serde_json::Value,
) -> String {
    let r = call_tool(client, tool, args).await.unwrap();
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until `tool` with `args` answers a text holding `needle`; on
/// timeout, says what the daemon logged.
async fn until_served(
    d: &toolhost_e2e::Daemon,
    client: &toolhost_e2e::AgentClient,
    tool: &str,
    args: serde_json::Value,
    needle: &str,
    what: &str,
) {
    let served = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        toolhost_e2e::eventually(std::time::Duration::from_secs(3600), what, async || {
            text_of(client, tool, args.clone())
                .await
                .contains(needle)
                .then_some(())
        }),
    )
    .await;
    assert!(
        served.is_ok(),
        "timed out waiting for: {what}\n{}",
        d.logs()
    );
}

/// The author's loop: a code change and a manifest change reload the
/// plugin with the same token; a change that does not load is said, with
/// the plugin's own stderr, and the last good version keeps serving; the
/// next run of `serve --dev` in the directory keeps the token.
#[tokio::test]
async fn serve_dev_reloads_code_and_manifest_and_keeps_the_last_good_version() {
    use std::time::Duration;
    let root = Scratch::new("serve-dev");
    let dir = tickets_copy(root.path());
    let mut d = serve_dev(root.path(), &dir);
    let token = banner_token(&d).await;
    assert!(
        d.logs().contains(&format!(
            "the plugin's data directory: {}",
            root.path().join("state/data/tickets-py").display()
        )),
        "{}",
        d.logs()
    );
    let client = agent(&d.url, &token).await;
    let close = "kandev_tickets_py_close_ticket";
    let before =
        toolhost_e2e::eventually(Duration::from_secs(30), "the plugin to serve", async || {
            let t = text_of(&client, close, json!({"id": 9})).await;
            t.contains("there is no ticket 9").then_some(t)
        })
        .await;
    assert!(
        before.contains("list_tickets shows the open ones"),
        "{before}"
    );

    // The code changes: the new text is served, by the same token.
    let code = std::fs::read_to_string(dir.join("plugin.py")).unwrap();
    std::fs::write(
        dir.join("plugin.py"),
        code.replace("there is no ticket {id}", "ticket {id} was never opened"),
    )
    .unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the code change to load",
        async || {
            text_of(&client, close, json!({"id": 9}))
                .await
                .contains("ticket 9 was never opened")
                .then_some(())
        },
    )
    .await;

    // The manifest changes: a title appears in the listing.
    let manifest = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    let titled = manifest.replace(
        "name = \"close_ticket\"\n",
        "name = \"close_ticket\"\ntitle = \"Close a ticket\"\n",
    );
    assert_ne!(titled, manifest);
    std::fs::write(dir.join("plugin.toml"), &titled).unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the manifest change to load",
        async || {
            let tools = client.list_all_tools().await.ok()?;
            tools
                .iter()
                .any(|t| t.name == close && t.title.as_deref() == Some("Close a ticket"))
                .then_some(())
        },
    )
    .await;

    // A broken manifest, then code that cannot start: each is said, and
    // the last good version answers all along.
    std::fs::write(dir.join("plugin.toml"), format!("{titled}\nbroken = [\n")).unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the broken manifest to be said",
        async || d.logs().contains("[toml-syntax]").then_some(()),
    )
    .await;
    assert!(
        text_of(&client, close, json!({"id": 9}))
            .await
            .contains("was never opened")
    );
    std::fs::write(dir.join("plugin.toml"), &titled).unwrap();
    let working = std::fs::read_to_string(dir.join("plugin.py")).unwrap();
    std::fs::write(
        dir.join("plugin.py"),
        format!("raise SystemExit('boom: the author slipped')\n{working}"),
    )
    .unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the failed start to be said",
        async || {
            d.logs()
                .contains("did not load, and the last good version keeps serving")
                .then_some(())
                .filter(|()| d.logs().contains("boom: the author slipped"))
        },
    )
    .await;
    assert!(
        text_of(&client, close, json!({"id": 9}))
            .await
            .contains("was never opened")
    );
    // Code that drifted from its manifest (a type changed, no `schema
    // sync`) is refused as `check --start` refuses it, naming the place.
    let drifted = working.replacen("cursor: int = 0,", "cursor: str = \"0\",", 1);
    assert_ne!(drifted, working);
    std::fs::write(dir.join("plugin.py"), &drifted).unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the drifted reload to be refused",
        async || {
            let logs = d.logs();
            logs.contains("tool list_tickets: plugin.toml and the code disagree")
                .then_some(())
                .filter(|()| logs.contains("/properties/cursor"))
        },
    )
    .await;
    assert!(
        text_of(&client, close, json!({"id": 9}))
            .await
            .contains("was never opened"),
        "the last good version serves on"
    );
    client.cancel().await.unwrap();

    // The next run in the same directory keeps the token. Started on the
    // drifted code, with no last good version to keep, it serves what
    // plugin.toml declares and says the drift, naming the command.
    let _ = d.signal_and_wait(rustix::process::Signal::TERM);
    let again = serve_dev(root.path(), &dir);
    assert_eq!(banner_token(&again).await, token);
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the drift to be said at start",
        async || {
            let logs = again.logs();
            (logs.contains("serves what plugin.toml declares")
                && logs.contains("/properties/cursor")
                && logs.contains("toolhost schema sync"))
            .then_some(())
        },
    )
    .await;
}

/// A copy of the Rust tickets example in `root`, its launcher running the
/// binary `cargo build --workspace --bins` built (a path every account can
/// reach, unlike an interpreter in root's home).
fn tickets_rs_copy(root: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let example = workspace_root().join("plugins-example/tickets-rs");
    let dir = root.join("tickets-rs");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    std::fs::copy(example.join("plugin.toml"), dir.join("plugin.toml")).unwrap();
    for e in std::fs::read_dir(example.join("schemas")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("schemas").join(e.file_name())).unwrap();
    }
    let launcher = dir.join("bin/tickets-plugin");
    let binary = bin("tickets-plugin");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nexec {:?} \"$@\"\n",
            binary.display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The dev loop where it meets `[sandbox] user`: under a root daemon the
/// plugin runs as `nobody`, and each reload (a code change, a manifest
/// change) starts it again under that account with its data directory
/// handed over, so the tickets written before are still there and the
/// directory is still writable after.
#[tokio::test]
async fn serve_dev_under_a_separate_account_keeps_the_data_across_reloads() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;
    let root = Scratch::new("serve-dev-user");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tickets_rs_copy(root.path());
    let account = if rustix::process::geteuid().is_root() {
        "user = \"nobody\""
    } else {
        ""
    };
    let d = serve_dev_as(root.path(), &dir, account);
    let client = agent(&d.url, &banner_token(&d).await).await;
    let create = "kandev_tickets_rs_create_ticket";
    let opened = async |title: &str, id: u32| {
        let t = text_of(&client, create, json!({"title": title})).await;
        (t.contains(&format!("\"id\":{id}")) || t.contains(&format!("\"id\": {id}"))).then_some(t)
    };
    toolhost_e2e::eventually(Duration::from_secs(30), "the first ticket", async || {
        opened("before", 1).await
    })
    .await;

    // A code change: the launcher is rewritten.
    let launcher = std::fs::read_to_string(dir.join("bin/tickets-plugin")).unwrap();
    std::fs::write(
        dir.join("bin/tickets-plugin"),
        format!("{launcher}# edited\n"),
    )
    .unwrap();
    toolhost_e2e::eventually(Duration::from_secs(30), "the restart", async || {
        d.logs().contains("reloaded").then_some(())
    })
    .await;
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "a ticket after the restart",
        async || opened("after the code", 2).await,
    )
    .await;

    // A manifest change: a title.
    let manifest = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    let titled = manifest.replace(
        "name = \"create_ticket\"\n",
        "name = \"create_ticket\"\ntitle = \"Open a ticket\"\n",
    );
    assert_ne!(titled, manifest);
    std::fs::write(dir.join("plugin.toml"), &titled).unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "the manifest change to load",
        async || {
            let tools = client.list_all_tools().await.ok()?;
            tools
                .iter()
                .any(|t| t.title.as_deref() == Some("Open a ticket"))
                .then_some(())
        },
    )
    .await;
    toolhost_e2e::eventually(
        Duration::from_secs(30),
        "a ticket after the reload",
        async || opened("after the manifest", 3).await,
    )
    .await;
    client.cancel().await.unwrap();
}

/// `serve --dev` builds what it runs: a change to a TypeScript plugin's
/// sources is built (`npm run build`) before the reload, and a build that
/// fails is said, with the compiler's words, while the last good version
/// keeps serving.
#[tokio::test]
async fn serve_dev_builds_a_typescript_plugin_before_it_reloads() {
    use std::time::Duration;
    let root = Scratch::new("serve-dev-ts");
    let example = workspace_root().join("plugins-example/tickets-ts");
    let dir = root.path().join("tickets-ts");
    for sub in ["", "bin", "schemas", "dist"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for e in std::fs::read_dir(example.join(sub)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), dir.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
    std::os::unix::fs::symlink(example.join("node_modules"), dir.join("node_modules")).unwrap();
    let d = serve_dev_reading(root.path(), &dir, "", &[example.join("node_modules")]);
    let token = banner_token(&d).await;
    let client = agent(&d.url, &token).await;
    let close = "kandev_tickets_ts_close_ticket";
    until_served(
        &d,
        &client,
        close,
        json!({"id": 9}),
        "there is no ticket 9",
        "the plugin to serve",
    )
    .await;

    // A change to the source, not to dist/: built, then served.
    let source = std::fs::read_to_string(dir.join("tickets.ts")).unwrap();
    let changed = source.replace("there is no ticket ${id}", "ticket ${id} was never opened");
    assert_ne!(changed, source);
    std::fs::write(dir.join("tickets.ts"), &changed).unwrap();
    until_served(
        &d,
        &client,
        close,
        json!({"id": 9}),
        "ticket 9 was never opened",
        "the source change built and served",
    )
    .await;
    assert!(
        d.logs().contains("building tickets-ts (npm run build)"),
        "{}",
        d.logs()
    );

    // A source that does not compile: said, and the last good version serves.
    std::fs::write(
        dir.join("tickets.ts"),
        format!("{changed}\nconst broken: number = \"not a number\";\n"),
    )
    .unwrap();
    toolhost_e2e::eventually(
        Duration::from_secs(60),
        "the failed build to be said",
        async || {
            let logs = d.logs();
            (logs.contains("the build of tickets-ts failed") && logs.contains("TS2322"))
                .then_some(())
        },
    )
    .await;
    assert!(
        text_of(&client, close, json!({"id": 9}))
            .await
            .contains("ticket 9 was never opened")
    );
    client.cancel().await.unwrap();
}
