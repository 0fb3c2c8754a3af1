//! The examples ship: `toolhost pack` of each example plugin makes an
//! archive that a daemon outside the checkout installs and serves, with
//! the default sandbox and no grants at all (no `[sandbox] read` of the
//! checkout's builds, virtualenv or SDKs): what the archive holds is what
//! the plugin runs on.
//!
//! The Rust example is packed with cheap release settings into a target
//! directory of its own (`target/pack-test`), so the test does not rebuild
//! the workspace's release artifacts; its dependencies are built where the
//! SDK tests' Rust plugin finds them (`cheap_plugin_build`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, agent, bin, call_tool, cheap_plugin_build, cli_at, eventually,
    workspace_root,
};

/// Packs `example` into `out`; the archive's path.
fn pack(example: &str, out: &Path) -> PathBuf {
    let archive = out.join(format!("{example}.tar.gz"));
    let mut cmd = std::process::Command::new(bin("toolhost"));
    cmd.arg("pack")
        .arg(workspace_root().join("plugins-example").join(example))
        .arg("-o")
        .arg(&archive)
        .env(
            "CARGO_TARGET_DIR",
            workspace_root().join("target/pack-test"),
        );
    cheap_plugin_build(&mut cmd);
    let done = cmd.output().unwrap();
    assert!(
        done.status.success(),
        "pack {example}: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    archive
}

#[tokio::test]
async fn each_example_packs_installs_and_serves_outside_the_checkout_with_no_grants() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = Scratch::new("examples");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let archives: Vec<(&str, PathBuf)> = [
        "notes",
        "textkit",
        "jsonkit",
        "tickets-py",
        "tickets-ts",
        "tickets-rs",
    ]
    .into_iter()
    .map(|e| (e, pack(e, root.path())))
    .collect();
    // A daemon with nothing but its own defaults: no plugin paths, no read
    // grants, the default sandbox.
    let account = if rustix::process::geteuid().is_root() {
        "[sandbox]\nuser = \"nobody\"\n"
    } else {
        ""
    };
    let config = format!(
        "state_dir = {:?}\n\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"t\"\nsession_id = \"s\"\n\n{account}",
        root.path().join("state").display().to_string()
    );
    let d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    let secret = root.path().join("api-token");
    std::fs::write(&secret, "test\n").unwrap();
    let token_value = format!("api_token=@{}", secret.display());
    for (example, archive) in &archives {
        let archive = archive.display().to_string();
        // The tickets examples need their secret to start.
        let mut args = vec!["plugins", "install", archive.as_str()];
        if example.starts_with("tickets") {
            args.push(&token_value);
        }
        let (ok, out) = cli_at(&admin, &args);
        assert!(ok, "{example}: {out}");
    }
    let c = agent(&d.url, TOKEN).await;
    for (tool, args, want) in [
        ("kandev_notes_ping", json!({}), "pong"),
        (
            "kandev_textkit_word_count",
            json!({"text": "one two three"}),
            "3",
        ),
        (
            "kandev_jsonkit_stats",
            json!({"json": "{\"a\": [1, 2]}"}),
            "",
        ),
        (
            "kandev_tickets_py_create_ticket",
            json!({"title": "from Python"}),
            "from Python",
        ),
        (
            "kandev_tickets_ts_create_ticket",
            json!({"title": "from TypeScript"}),
            "from TypeScript",
        ),
        (
            "kandev_tickets_rs_create_ticket",
            json!({"title": "from Rust"}),
            "from Rust",
        ),
    ] {
        let r = eventually(Duration::from_secs(60), tool, async || {
            call_tool(&c, tool, args.clone())
                .await
                .ok()
                .filter(|r| r.is_error != Some(true))
        })
        .await;
        let text: String = r
            .content
            .iter()
            .filter_map(|b| b.as_text().map(|t| t.text.clone()))
            .collect();
        assert!(text.contains(want), "{tool}: {text}");
    }
}
