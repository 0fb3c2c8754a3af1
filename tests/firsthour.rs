//! A plugin author's first hour, as the author sees it: every message here
//! is checked as the command prints it.
//!
//! - a plugin that fails at start says why in its own words (the last
//!   lines of its stderr), in `check --start`, `plugins install`, `plugins
//!   show` and `status`, and the sandbox is blamed only when an access was
//!   denied;
//! - a plugin that prints on stdout before its handshake is told that
//!   stdout is the handshake's, and which line its protocol expects;
//! - a plugin in a crash loop is called that, by `status` and by a call;
//! - `check --start` starts a plugin with the values `--config` gives it,
//!   and fails when a plugin cannot start;
//! - values given to an install of a plugin already installed are refused,
//!   never dropped;
//! - `serve --dev` stops on SIGTERM after whoever read its output left;
//! - an output that breaks its schema is named as the output;
//! - `pack` refuses a schema that does not compile, and an install names
//!   the archive's files, not a staging directory;
//! - an admin command with no daemon says how to find one;
//! - a `[[http.tokens]]` entry names everything it lacks at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, agent, bin, call_tool, cli, cli_at, eventually,
    probeplug_dir,
};

const WAIT: Duration = Duration::from_secs(30);

/// A plugin whose launcher is `script` (a shell script body).
fn scripted(root: &Path, id: &str, script: &str, extra: &str) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin/run"), format!("#!/bin/sh\n{script}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join("bin/run"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"S\"\n[runtime]\ncommand = \"bin/run\"\nstartup_timeout_ms = 3000\n{extra}\n\
             [[tools]]\nname = \"count\"\ndescription = \"c\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\" }}\n"
        ),
    )
    .unwrap();
    dir
}

/// A Python-like crash at start: a traceback on stderr, exit 1.
const TRACEBACK: &str = "echo 'Traceback (most recent call last):' >&2\n\
                         echo '  File \"plugin.py\", line 3, in <module>' >&2\n\
                         echo \"ModuleNotFoundError: No module named 'frobnicate'\" >&2\n\
                         exit 1";

fn run(args: &[&str], dir: &Path) -> (bool, String) {
    let out = std::process::Command::new(bin("toolhost"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn a_plugin_that_fails_at_start_says_why_in_its_own_words_everywhere() {
    let root = Scratch::new("fh-crash");
    let broken = scripted(root.path(), "broken", TRACEBACK, "");
    // check --start
    let (ok, out) = run(
        &["check", "--start", &broken.display().to_string()],
        root.path(),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("No module named 'frobnicate'"), "{out}");
    assert!(
        !out.contains("must be granted"),
        "a missing module blamed on the sandbox: {out}"
    );
    // plugins install, then show and status.
    let keep = probeplug_dir(root.path(), "keep", "");
    let config = TestConfig::new(root.path(), &[keep])
        .supervisor("backoff_first_ms = 50\nmax_restarts = 2\nrestart_window_ms = 60000")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    let (ok, out) = cli_at(
        &admin,
        &["plugins", "install", &broken.display().to_string()],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("No module named 'frobnicate'"),
        "install: {out}"
    );
    for args in [&["plugins", "show", "broken"][..], &["status"][..]] {
        let out = eventually(WAIT, "the traceback in the listing", async || {
            let (_, out) = cli_at(&admin, args);
            out.contains("frobnicate").then_some(out)
        })
        .await;
        assert!(out.contains("ModuleNotFoundError"), "{args:?}: {out}");
    }
    drop(d);

    // An access denied is what points at the sandbox.
    let denied = scripted(
        root.path(),
        "denied",
        "cat /etc/shadow > /dev/null || { echo 'cat: /etc/shadow: Permission denied' >&2; exit 1; }\nexit 1",
        "",
    );
    let (ok, out) = run(
        &["check", "--start", &denied.display().to_string()],
        root.path(),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("Permission denied") && out.contains("must be granted"),
        "{out}"
    );
}

#[tokio::test]
async fn stdout_before_the_handshake_is_said_to_be_the_handshakes() {
    let root = Scratch::new("fh-stdout");
    let chatty = scripted(
        root.path(),
        "chatty",
        "echo 'starting up, hello!'\nsleep 5",
        "protocol = 2",
    );
    let (ok, out) = run(
        &["check", "--start", &chatty.display().to_string()],
        root.path(),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("stdout is the handshake channel"), "{out}");
    assert!(out.contains("`1|2|unix|<socket path>|grpc`"), "{out}");
    assert!(out.contains("protocol 2 its manifest declares"), "{out}");
}

#[tokio::test]
async fn a_crash_loop_is_called_a_crash_loop() {
    let root = Scratch::new("fh-loop");
    let looping = scripted(root.path(), "looping", TRACEBACK, "");
    let config = TestConfig::new(root.path(), &[looping])
        // Restarts never run out while the test looks: it is the loop, not
        // the failure after it, that must be named.
        .supervisor("backoff_first_ms = 20\nbackoff_max_ms = 200\nmax_restarts = 100000")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    let out = eventually(WAIT, "CRASH LOOP in status", async || {
        let (_, out) = cli_at(&admin, &["status"]);
        out.contains("CRASH LOOP").then_some(out)
    })
    .await;
    assert!(out.contains("frobnicate"), "{out}");
    let c = agent(&d.url, TOKEN).await;
    let r = call_tool(&c, "kandev_looping_count", json!({}))
        .await
        .unwrap();
    let text = format!("{r:?}");
    assert!(text.contains("crash loop"), "{text}");
    assert!(!text.contains("try again in a moment"), "{text}");
}

#[tokio::test]
async fn check_start_uses_the_values_it_is_given_and_fails_when_a_plugin_cannot_start() {
    let root = Scratch::new("fh-check-config");
    let needs = probeplug_dir(
        root.path(),
        "needs",
        "[[config]]\nname = \"api_token\"\ntype = \"string\"\ndescription = \"A token\"\nrequired = true\nsecret = true\n",
    );
    let path = needs.display().to_string();
    // Without the value: it cannot start, and that is a failure.
    let (ok, out) = run(&["check", "--start", &path], root.path());
    assert!(!ok, "{out}");
    assert!(out.contains("could not start: it needs api_token"), "{out}");
    assert!(!out.contains("ok:"), "{out}");
    // With it, from --config: it starts.
    std::fs::write(root.path().join("token"), "s3cret\n").unwrap();
    let config = root.path().join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "plugins = [{path:?}]\nstate_dir = {:?}\n[plugin.needs.config]\napi_token_file = {:?}\n",
            root.path().join("state").display().to_string(),
            root.path().join("token").display().to_string()
        ),
    )
    .unwrap();
    let (ok, out) = run(
        &[
            "check",
            "--start",
            "--config",
            &config.display().to_string(),
        ],
        root.path(),
    );
    assert!(ok, "{out}");
    assert!(out.contains("needs: started"), "{out}");
    assert!(!out.contains("s3cret"), "{out}");
}

#[tokio::test]
async fn values_given_to_an_install_of_an_installed_plugin_are_refused_not_dropped() {
    let root = Scratch::new("fh-reinstall");
    let keep = probeplug_dir(root.path(), "keep", "");
    let config = TestConfig::new(root.path(), &[keep]).build();
    let _d = Daemon::start(root.path(), &config, &[]);
    let admin = root.path().join("state/admin.sock");
    let needs = probeplug_dir(
        &root.path().join("src"),
        "needs",
        "[[config]]\nname = \"api_token\"\ntype = \"string\"\ndescription = \"A token\"\nrequired = true\nsecret = true\n",
    );
    let path = needs.display().to_string();
    let (ok, out) = cli_at(&admin, &["plugins", "install", &path]);
    assert!(
        ok && out.contains("starts once its configuration is set"),
        "{out}"
    );
    std::fs::write(root.path().join("token"), "s3cret\n").unwrap();
    let token = format!("api_token=@{}", root.path().join("token").display());
    for values in [&token[..], "bogus=1"] {
        let (ok, out) = cli_at(&admin, &["plugins", "install", &path, values]);
        assert!(!ok, "{values}: {out}");
        assert!(
            out.contains("already installed") && out.contains("were not stored"),
            "{values}: {out}"
        );
        assert!(out.contains("toolhost plugins config needs"), "{out}");
    }
    let (_, out) = cli_at(&admin, &["plugins", "show", "needs"]);
    assert!(out.contains("api_token secret: missing"), "{out}");
}

#[tokio::test]
async fn serve_dev_stops_on_sigterm_after_its_reader_has_gone() {
    use std::io::BufRead as _;
    let root = Scratch::new("fh-dev");
    let plugin = probeplug_dir(root.path(), "devp", "");
    let mut child = std::process::Command::new(bin("toolhost"))
        .args(["serve", "--dev"])
        .arg(&plugin)
        .args(["--http", "127.0.0.1:0"])
        .env("XDG_STATE_HOME", root.path().join("dev-state"))
        .current_dir(root.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read until it serves, then close both pipes, as `| head` does.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("serving MCP") {
        line.clear();
    }
    drop(stderr);
    drop(child.stdout.take());
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let gone = eventually(WAIT, "serve --dev to exit on SIGTERM", async || {
        child.try_wait().ok().flatten()
    })
    .await;
    assert!(gone.success(), "{gone:?}");
}

#[tokio::test]
async fn a_result_that_breaks_its_output_schema_is_named_as_the_output() {
    let root = Scratch::new("fh-output");
    let tp = toolhost_e2e::testplug_dir(root.path(), "tp", "normal");
    let d = Daemon::start(
        root.path(),
        &TestConfig::new(root.path(), &[tp]).build(),
        &[],
    );
    d.wait_metric("toolhost_plugin_state{plugin=\"tp\",state=\"ready\"}", 1.0)
        .await;
    let c = agent(&d.url, TOKEN).await;
    let r = call_tool(&c, "kandev_tp_bad_output", json!({}))
        .await
        .unwrap();
    let text = format!("{:?}", r.content);
    assert!(text.contains("output schema"), "{text}");
    assert!(!text.contains("argument"), "{text}");
}

#[tokio::test]
async fn pack_refuses_a_schema_that_does_not_compile_and_install_names_the_archive() {
    let root = Scratch::new("fh-pack");
    let dir = scripted(root.path(), "badschema", "exit 0", "");
    let manifest = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace(
            "input_schema = { type = \"object\" }",
            "input_schema = { type = \"object\", properties = { a = { type = \"string\", pattern = \"([\" } } }",
        ),
    )
    .unwrap();
    let (ok, out) = run(
        &[
            "pack",
            &dir.display().to_string(),
            "-o",
            &root.path().join("b.tar.gz").display().to_string(),
        ],
        root.path(),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("pattern") && out.contains("nothing written"),
        "{out}"
    );
    assert!(!root.path().join("b.tar.gz").exists());
    // An archive made by hand: the install's error names it.
    let archive = root.path().join("hand.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(root.path())
        .arg("badschema")
        .status()
        .unwrap();
    assert!(status.success());
    let keep = probeplug_dir(root.path(), "keep", "");
    let _d = Daemon::start(
        root.path(),
        &TestConfig::new(root.path(), &[keep]).build(),
        &[],
    );
    let (ok, out) = cli_at(
        &root.path().join("state/admin.sock"),
        &["plugins", "install", &archive.display().to_string()],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("hand.tar.gz"), "{out}");
    assert!(!out.contains(".staging-"), "{out}");
}

#[tokio::test]
async fn an_admin_command_with_no_daemon_and_an_incomplete_token_say_what_to_do() {
    let root = Scratch::new("fh-nodaemon");
    let (ok, out) = cli(&[
        "status",
        "--admin",
        &root.path().join("nowhere.sock").display().to_string(),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("--config FILE") && out.contains("--admin SOCKET"),
        "{out}"
    );
    let config = root.path().join("toolhost.toml");
    std::fs::write(
        &config,
        "[http]\nlisten = \"127.0.0.1:0\"\n[[http.tokens]]\nsurface = \"chat\"\n",
    )
    .unwrap();
    let (ok, out) = cli(&["serve", "--config", &config.display().to_string()]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("no task_id, no session_id") && out.contains("exactly one of `token`"),
        "{out}"
    );
}
