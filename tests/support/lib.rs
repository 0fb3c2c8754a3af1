//! Helpers for the end-to-end tests: find the built binaries, make scratch
//! directories, and wait for conditions without sleeping blindly.
//!
//! The tests start the real `toolhost` binary and real plugin processes.
//! `scripts/test` builds every binary first (`cargo build --workspace
//! --bins`); a test that cannot find one says so instead of hanging.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect
#![forbid(unsafe_code)]

pub mod as_run;
pub mod asker;
pub mod auth_server;
pub mod nats;
pub mod registry;
pub mod sdk;
pub mod small_fs;
pub mod token_server;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The workspace root.
#[must_use]
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The directory cargo put this test's binaries in (`target/debug`).
#[must_use]
pub fn bin_dir() -> PathBuf {
    // The test executable lives in target/<profile>/deps/.
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(Path::parent).map(Path::to_path_buf))
        .unwrap_or_else(|| workspace_root().join("target/debug"))
}

/// Makes `command` (or the `cargo build --release` it runs, which inherits
/// its environment) build a Rust plugin cheaply: no optimisation, no LTO,
/// no debug info, and its dependencies' intermediate files in one build
/// directory every such test shares (`target/plugin-build`), so tokio,
/// tonic and the rest compile once per checkout, not once per plugin.
/// The final binaries still go where the plugin's README says (its own
/// `target/release/`), which is all the sandbox and `toolhost pack` see.
pub fn cheap_plugin_build(command: &mut std::process::Command) -> &mut std::process::Command {
    command
        .env(
            "CARGO_BUILD_BUILD_DIR",
            workspace_root().join("target/plugin-build"),
        )
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
}

/// The path of a workspace binary, panicking with the fix if it is not built.
#[must_use]
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --workspace --bins` (scripts/test does)",
        p.display()
    );
    p
}

/// Runs the `toolhost` CLI against the daemon whose admin socket is
/// `admin`, as an operator would: (success, stdout and stderr).
#[must_use]
pub fn cli_at(admin: &Path, args: &[&str]) -> (bool, String) {
    let admin = admin.display().to_string();
    cli(&[args, &["--admin", &admin]].concat())
}

/// Runs the `toolhost` CLI: (success, stdout and stderr).
#[must_use]
pub fn cli(args: &[&str]) -> (bool, String) {
    cli_env(&[], args)
}

/// [`cli`] with `env` set for it.
#[must_use]
pub fn cli_env(env: &[(&str, &Path)], args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin("toolhost"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run the CLI");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A fresh scratch directory, removed when dropped.
#[derive(Debug)]
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    /// Creates a fresh `$TMPDIR/th-<tag>-XXXXXX`, removed when dropped.
    #[must_use]
    pub fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("th-{tag}-"))
            .tempdir()
            .expect("a scratch directory");
        Self(dir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    /// A daemon its test killed leaves the disk images it mounted for its
    /// plugins (a daemon that stops unmounts them; one killed cannot), and
    /// nothing will start again on this state to clean them: unmount what
    /// is still mounted beneath the directory, deepest first, before it is
    /// removed. Each mount ties up a loop device, of which a machine has
    /// few.
    fn drop(&mut self) {
        let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let root = self.0.path();
        let mut beneath: Vec<&str> = table
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(root))
            .collect();
        beneath.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in beneath {
            let _ = std::process::Command::new("umount")
                .args(["--lazy", point])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Polls `cond` until it returns `Some`, or panics with `what` after
/// `timeout`. The poll interval starts at 1 ms and backs off to 50 ms.
pub async fn eventually<T>(
    timeout: Duration,
    what: &str,
    mut cond: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Writes `launcher`, an executable that runs `script` (relative to the
/// launcher's own directory) on the checkout's virtualenv Python.
pub fn venv_launcher(launcher: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = launcher.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let text = format!(
        "#!/bin/sh\nexec {} \"$(dirname \"$0\")/{script}\"\n",
        workspace_root().join(".venv/bin/python").display()
    );
    if let Err(e) = std::fs::write(launcher, text)
        .and_then(|()| std::fs::set_permissions(launcher, std::fs::Permissions::from_mode(0o755)))
    {
        panic!("cannot write {}: {e}", launcher.display());
    }
}

/// Writes a plugin directory for `testplug` (started with `--mode MODE`)
/// declaring its tools, and returns the directory.
#[must_use]
pub fn testplug_dir(root: &Path, id: &str, mode: &str) -> PathBuf {
    let dir = root.join(id);
    // (name, input schema, annotations, timeout_ms, extra manifest lines)
    let tools: [(&str, &str, &str, u32, &str); 11] = [
        (
            "env",
            r#"{ type = "object" }"#,
            "read_only = true",
            10_000,
            "",
        ),
        (
            "flood",
            r#"{ type = "object", properties = { lines = { type = "integer" } } }"#,
            "read_only = true",
            30_000,
            "",
        ),
        (
            "echo",
            r#"{ type = "object", required = ["msg", "n"], properties = { msg = { type = "string", maxLength = 20 }, n = { type = "integer", minimum = 0, maximum = 10 }, mode = { enum = ["fast", "slow"] }, settings = { type = "object", additionalProperties = { type = "string" } }, max_results = { type = "integer" } } }"#,
            "read_only = true, open_world = false",
            10_000,
            r#"aliases = { limit = "max_results", top_k = "max_results" }"#,
        ),
        (
            "echo_report",
            r#"{ type = "object", properties = { q = { type = "string" } } }"#,
            "read_only = true, idempotent = true",
            10_000,
            // A closed output schema: report mode must not break it.
            r#"unknown_arguments = "report"
output_schema = { type = "object", additionalProperties = false, required = ["arguments"], properties = { arguments = { type = "object" }, context = { type = "object" }, invocation_id = { type = "string" } } }"#,
        ),
        (
            "slow",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 }, note = { type = "string" } } }"#,
            "read_only = true",
            60_000,
            "",
        ),
        (
            "nap",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 }, note = { type = "string" } } }"#,
            "read_only = true",
            500,
            "",
        ),
        (
            "crash",
            r#"{ type = "object", properties = { note = { type = "string" } } }"#,
            "destructive = false",
            10_000,
            "",
        ),
        (
            "count",
            r#"{ type = "object" }"#,
            "read_only = true",
            10_000,
            "",
        ),
        (
            "big",
            r#"{ type = "object", properties = { bytes = { type = "integer" }, note = { type = "string" } } }"#,
            "read_only = true",
            10_000,
            "",
        ),
        (
            "bad_output",
            r#"{ type = "object", properties = { note = { type = "string" } } }"#,
            "read_only = true",
            10_000,
            r#"output_schema = { type = "object", properties = { count = { type = "integer" } } }"#,
        ),
        (
            "only_task",
            r#"{ type = "object" }"#,
            "read_only = true",
            10_000,
            "",
        ),
    ];
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Test plugin\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\nstartup_timeout_ms = 5000\n",
        bin("testplug").display()
    );
    for (name, schema, hints, timeout, extra) in tools {
        // `only_task` is offered on one surface only: sessions elsewhere must
        // not learn it exists.
        let surfaces = if name == "only_task" {
            r#"["kanban-task"]"#
        } else {
            r#"["kanban-task", "chat"]"#
        };
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"{name}\"\ndescription = \"testplug {name}\"\nsurfaces = {surfaces}\ntimeout_ms = {timeout}\ninput_schema = {schema}\nannotations = {{ {hints} }}\n{extra}\n"
        ));
    }
    if let Err(e) =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("plugin.toml"), toml))
    {
        panic!("cannot write {}: {e}", dir.display());
    }
    dir
}

/// Writes a plugin directory for `testplug` declaring `count`, `config` and
/// the sandbox probes (`read_file`, `write_file`, `spawn_many`, `alloc`,
/// `connect`, `connect_unix`, `caps`, `mknod`), plus `declarations` (TOML: `[[config]]` items,
/// `[capabilities]`) after the runtime; returns the directory.
#[must_use]
pub fn probeplug_dir(root: &Path, id: &str, declarations: &str) -> PathBuf {
    let dir = root.join(id);
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Probe plugin\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"normal\"]\nstartup_timeout_ms = 5000\n\n{declarations}\n",
        bin("testplug").display()
    );
    for (name, props) in [
        ("count", "{}"),
        (
            "config",
            "{ names = { type = \"array\", items = { type = \"string\" } } }",
        ),
        ("read_file", "{ path = { type = \"string\" } }"),
        ("write_file", "{ path = { type = \"string\" } }"),
        (
            "fill",
            "{ dir = { type = \"string\" }, mb = { type = \"integer\", minimum = 1, maximum = 4096 }, files = { type = \"integer\", minimum = 1, maximum = 100000 }, clear = { type = \"boolean\" } }",
        ),
        (
            "hog",
            "{ dir = { type = \"string\" }, kind = { type = \"string\" }, detach = { type = \"boolean\" } }",
        ),
        (
            "links",
            "{ count = { type = \"integer\", minimum = 1, maximum = 2000000 }, mb = { type = \"integer\", minimum = 0, maximum = 1024 } }",
        ),
        ("serve_unix", "{ path = { type = \"string\" } }"),
        ("stderr_bytes", "{}"),
        (
            "spawn_many",
            "{ max = { type = \"integer\", minimum = 1, maximum = 1000 } }",
        ),
        (
            "alloc",
            "{ mb = { type = \"integer\", minimum = 1, maximum = 65536 } }",
        ),
        (
            "connect",
            "{ port = { type = \"integer\", minimum = 1, maximum = 65535 } }",
        ),
        ("connect_unix", "{ path = { type = \"string\" } }"),
        (
            "call_api",
            "{ port = { type = \"integer\", minimum = 1, maximum = 65535 }, audience = { type = \"string\" } }",
        ),
        ("caps", "{}"),
        ("mknod", "{ path = { type = \"string\" } }"),
        ("call_socket", "{ path = { type = \"string\" } }"),
        (
            "net_probe",
            "{ kind = { type = \"string\" }, port = { type = \"integer\", minimum = 1, maximum = 65535 } }",
        ),
        (
            "admin_attack",
            "{ kind = { type = \"string\" }, path = { type = \"string\" } }",
        ),
    ] {
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"{name}\"\ndescription = \"testplug {name}\"\nsurfaces = [\"kanban-task\", \"chat\"]\ntimeout_ms = 20000\ninput_schema = {{ type = \"object\", properties = {props} }}\nannotations = {{ read_only = true }}\n"
        ));
    }
    if let Err(e) =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("plugin.toml"), toml))
    {
        panic!("cannot write {}: {e}", dir.display());
    }
    dir
}

/// Writes a plugin directory for `testplug` speaking plugin protocol 2,
/// declaring its protocol-2 tools plus `echo` and `slow`, and returns the
/// directory.
#[must_use]
pub fn richplug_dir(root: &Path, id: &str) -> PathBuf {
    let dir = root.join(id);
    let tools: [(&str, &str, u32, &str); 11] = [
        ("bad_question", r#"{ type = "object" }"#, 10_000, ""),
        ("two_questions", r#"{ type = "object" }"#, 10_000, ""),
        (
            "huge",
            r#"{ type = "object", properties = { bytes = { type = "integer", minimum = 0 } } }"#,
            10_000,
            "",
        ),
        ("media", r#"{ type = "object" }"#, 10_000, ""),
        (
            "steps",
            r#"{ type = "object", properties = { steps = { type = "integer", minimum = 0 }, pause_ms = { type = "integer", minimum = 0 }, note = { type = "string" } } }"#,
            30_000,
            "",
        ),
        (
            "confirm",
            r#"{ type = "object", properties = { note = { type = "string" } } }"#,
            3_000,
            "",
        ),
        ("bad_block", r#"{ type = "object" }"#, 10_000, ""),
        (
            "rolling",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            400,
            "reset_timeout_on_progress = true",
        ),
        (
            "still",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            400,
            "",
        ),
        (
            "echo",
            r#"{ type = "object", properties = { msg = { type = "string" }, n = { type = "integer" } } }"#,
            10_000,
            "",
        ),
        (
            "slow",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            60_000,
            "",
        ),
    ];
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Rich test plugin\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"normal\"]\nstartup_timeout_ms = 5000\nprotocol = 2\n",
        bin("testplug").display()
    );
    for (name, schema, timeout, extra) in tools {
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"{name}\"\ndescription = \"testplug {name}\"\nsurfaces = [\"kanban-task\", \"chat\"]\ntimeout_ms = {timeout}\ninput_schema = {schema}\nannotations = {{ read_only = true }}\n{extra}\n"
        ));
    }
    if let Err(e) =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("plugin.toml"), toml))
    {
        panic!("cannot write {}: {e}", dir.display());
    }
    dir
}

/// The lines of a plugin's `events.log` that start with `prefix`.
#[must_use]
pub fn events(data_dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(data_dir.join("events.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// A running `toolhost serve`, killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT/mcp`, when serving HTTP.
    pub url: String,
    logs: std::sync::Arc<std::sync::Mutex<String>>,
}

/// The token the helpers configure.
pub const TOKEN: &str = "test-token-0123456789";

/// The daemon's log filter in [`Daemon::start`]: its own lines at info,
/// and every audit event (tests read them to see what a call did).
pub const AUDIT_LOG_FILTER: &str = "info,toolhost::audit=trace";

impl Daemon {
    /// Writes `config` to `dir/toolhost.toml` and starts `toolhost serve
    /// --config ... --http 127.0.0.1:0 EXTRA...`, waiting until it serves.
    #[must_use]
    pub fn start(dir: &Path, config: &str, extra: &[&str]) -> Self {
        Self::start_logging(dir, config, extra, AUDIT_LOG_FILTER)
    }

    /// As [`Daemon::start`], with `RUST_LOG` set to `filter`.
    #[must_use]
    pub fn start_logging(dir: &Path, config: &str, extra: &[&str], filter: &str) -> Self {
        Self::start_with(dir, config, extra, filter, |_| {})
    }

    /// As [`Daemon::start_logging`], with the command adjusted by `setup`
    /// first (its environment, limits, umask).
    #[must_use]
    pub fn start_with(
        dir: &Path,
        config: &str,
        extra: &[&str],
        filter: &str,
        setup: impl FnOnce(&mut std::process::Command),
    ) -> Self {
        Self::start_on(dir, config, "127.0.0.1:0", extra, filter, setup)
    }

    /// As [`Daemon::start_with`], serving HTTP on `addr` (a test that must
    /// know its URL before the daemon starts, to write it in the config).
    #[must_use]
    pub fn start_on(
        dir: &Path,
        config: &str,
        addr: &str,
        extra: &[&str],
        filter: &str,
        setup: impl FnOnce(&mut std::process::Command),
    ) -> Self {
        use std::io::BufRead as _;
        let file = dir.join("toolhost.toml");
        if let Err(e) = std::fs::write(&file, config) {
            panic!("cannot write {}: {e}", file.display());
        }
        let mut command = std::process::Command::new(bin("toolhost"));
        command
            .args(["serve", "--config"])
            .arg(&file)
            .args(["--http", addr])
            .args(extra)
            .env("RUST_LOG", filter)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        setup(&mut command);
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start toolhost: {e}"),
        };
        let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let logs = std::sync::Arc::clone(&logs);
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    if let Some(url) = line.strip_prefix("toolhost: serving MCP on ") {
                        let _ = tx.send(url.to_owned());
                    }
                    if let Ok(mut l) = logs.lock() {
                        l.push_str(&line);
                        l.push('\n');
                    }
                }
            });
        }
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                let logs = logs.lock().map(|l| l.clone()).unwrap_or_default();
                panic!("toolhost did not start serving:\n{logs}");
            }
        };
        Self { child, url, logs }
    }

    /// The daemon's pid.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    #[must_use]
    pub fn logs(&self) -> String {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Its log once it holds every one of `needles`, or after 30 s as it
    /// is then (for the caller's assertion to show). Lines reach the log
    /// through a reader of the daemon's stderr, a moment after the daemon
    /// wrote them: a test that read once could miss one on a busy machine.
    pub async fn logs_with(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut pause = Duration::from_millis(1);
        loop {
            let logs = self.logs();
            if needles.iter().all(|n| logs.contains(n)) || Instant::now() >= deadline {
                return logs;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:PORT` without the `/mcp`.
    #[must_use]
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// Sends a signal and waits for the daemon to exit.
    pub fn signal_and_wait(&mut self, signal: rustix::process::Signal) -> std::process::ExitStatus {
        if let Some(p) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(p, signal);
        }
        match self.child.wait() {
            Ok(s) => s,
            Err(e) => panic!("cannot wait for toolhost: {e}"),
        }
    }

    /// One metric's value from `/metrics` (the first line starting with
    /// `name`), or `None`.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let (status, body) = http_request(
            &self.base(),
            "GET",
            "/metrics",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            "",
        )
        .await;
        if status != 200 {
            return None;
        }
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
    }

    /// Waits until `/metrics` shows `name` at `value`.
    pub async fn wait_metric(&self, name: &str, value: f64) {
        eventually(
            Duration::from_secs(20),
            &format!("{name} == {value}"),
            async || (self.metric(name).await == Some(value)).then_some(()),
        )
        .await;
    }

    /// Pids of the daemon's direct children (its plugins).
    #[must_use]
    pub fn children(&self) -> Vec<u32> {
        children_of(self.child.id())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub use toolhost_bench::procs::{
    children as children_of, open_fds, peak_rss_kib, pids_with_cmdline, process_alive, rss_kib,
};

/// `text` with every run of exactly 32 hex digits (an invocation id) as
/// `<id>`: answers that differ only in their random ids compare equal.
#[must_use]
pub fn mask_ids(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if run == 32 {
            out.push_str("<id>");
            i += run;
        } else if run > 0 {
            out.push_str(&text[i..i + run]);
            i += run;
        } else {
            let Some(c) = text[i..].chars().next() else {
                break;
            };
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The payload of a chunked HTTP/1.1 body.
#[must_use]
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs the official Python SDK client `tests/support/<script>` with
/// `args` on the checkout's virtualenv, and reads the JSON line it prints
/// last.
pub async fn python_client(script: &str, args: &[&str]) -> serde_json::Value {
    let python = workspace_root().join(".venv/bin/python");
    let script = workspace_root().join("tests/support").join(script);
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (scripts/setup-python): {e}",
                python.display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python client {} failed ({args:?}):\n{stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A loopback port free a moment ago (for a server that must know its
/// URL before it starts).
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// A minimal HTTP/1.1 request over a fresh connection: (status, body).
pub async fn http_request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let (status, _, body) = http_exchange(base, method, path, headers, body).await;
    (status, body)
}

/// A minimal HTTP/1.1 request over a fresh connection: (status, the head
/// with its status line and headers, the body as sent). `Host` is the
/// server's unless `headers` name one. Status 0: no connection or no answer.
pub async fn http_exchange(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = base.trim_start_matches("http://");
    let Ok(mut stream) = tokio::net::TcpStream::connect(authority).await else {
        return (0, String::new(), String::new());
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    if !matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.write_all(req.as_bytes())).await,
        Ok(Ok(()))
    ) {
        return (0, String::new(), String::new());
    }
    let mut raw = Vec::new();
    // A server that neither answers nor closes must not hang a test.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// An agent for the tests: counts the `tools/list_changed` notifications it
/// receives (sessions of 2025-11-25 and older).
#[derive(Clone, Default)]
pub struct Agent {
    /// Notifications received.
    pub list_changed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Agent {
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.list_changed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A connected test agent.
pub type AgentClient = rmcp::service::RunningService<rmcp::RoleClient, Agent>;

/// Connects an [`Agent`] over streamable HTTP with `token`.
pub async fn agent(url: &str, token: &str) -> AgentClient {
    use rmcp::ServiceExt as _;
    toolhost_registry::use_ring_for_tls();
    let t = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        )
        .auth_header(token.to_owned()),
    );
    match Agent::default().serve(t).await {
        Ok(c) => c,
        Err(e) => panic!("cannot connect to {url}: {e}"),
    }
}

/// The names a client lists, sorted.
pub async fn listed_names(c: &AgentClient) -> Vec<String> {
    let tools = c.list_all_tools().await.unwrap_or_default();
    let mut names: Vec<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
    names.sort();
    names
}

/// A call's outcome as the pipeline names it: `ok`, or the
/// `structuredContent.error.code` of a failure.
#[must_use]
pub fn outcome_code(r: &rmcp::model::CallToolResult) -> String {
    let from_meta = r
        .meta
        .as_ref()
        .and_then(|m| m.0.get("error"))
        .and_then(|e| e.get("code"))
        .and_then(serde_json::Value::as_str);
    let from_structured = r
        .structured_content
        .as_ref()
        .and_then(|s| s.pointer("/error/code"))
        .and_then(serde_json::Value::as_str);
    if let (Some(m), Some(s)) = (from_meta, from_structured) {
        assert_eq!(m, s, "_meta.error and structuredContent.error disagree");
    }
    from_meta.or(from_structured).unwrap_or("ok").to_owned()
}

/// toolhost's error object of a failed call: `_meta.error` (every failure
/// has it; `structuredContent.error` only where the tool declares no
/// output schema).
#[must_use]
pub fn error_of(r: &rmcp::model::CallToolResult) -> serde_json::Value {
    r.meta
        .as_ref()
        .and_then(|m| m.0.get("error"))
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// Calls `name` with `args` (a JSON object; anything else sends no
/// arguments).
pub async fn call_tool(
    c: &AgentClient,
    name: &str,
    args: serde_json::Value,
) -> Result<rmcp::model::CallToolResult, rmcp::service::ServiceError> {
    let p = rmcp::model::CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    c.call_tool(p).await
}

/// A toolhost configuration for a test: its plugins, its state under
/// `root/state`, [`TOKEN`] bound on surface `chat`, and quick supervision.
/// Each suite adds what it needs: lines under `[http]` or `[supervisor]`,
/// a `[stdio]` binding, or whole sections after everything else.
#[derive(Debug, Clone)]
pub struct TestConfig {
    plugins: Vec<PathBuf>,
    state: PathBuf,
    ids: (String, String),
    http: Vec<String>,
    supervisor: Vec<String>,
    stdio: Option<(String, String)>,
    top: Vec<String>,
    extra: Vec<String>,
    sandbox: Vec<String>,
}

impl TestConfig {
    /// `plugins`, state in `root/state`, token ids `t`/`s`, backoff 50 ms,
    /// stop grace 2 s.
    #[must_use]
    pub fn new(root: &Path, plugins: &[PathBuf]) -> Self {
        Self {
            plugins: plugins.to_vec(),
            state: root.join("state"),
            ids: ("t".into(), "s".into()),
            http: Vec::new(),
            supervisor: vec![
                "backoff_first_ms = 50".into(),
                "stop_grace_ms = 2000".into(),
            ],
            stdio: None,
            top: Vec::new(),
            extra: Vec::new(),
            sandbox: Vec::new(),
        }
    }

    /// The state directory, instead of `root/state`.
    #[must_use]
    pub fn state(mut self, dir: &Path) -> Self {
        self.state = dir.to_path_buf();
        self
    }

    /// The task and session ids the token's binding carries.
    #[must_use]
    pub fn ids(mut self, task: &str, session: &str) -> Self {
        self.ids = (task.into(), session.into());
        self
    }

    /// Lines under `[http]`.
    #[must_use]
    pub fn http(mut self, lines: &str) -> Self {
        self.http.push(lines.into());
        self
    }

    /// The `[supervisor]` lines, instead of the defaults.
    #[must_use]
    pub fn supervisor(mut self, lines: &str) -> Self {
        self.supervisor = vec![lines.into()];
        self
    }

    /// A `[stdio]` binding on `chat`.
    #[must_use]
    pub fn stdio(mut self, task: &str, session: &str) -> Self {
        self.stdio = Some((task.into(), session.into()));
        self
    }

    /// Top-level keys, before any section.
    #[must_use]
    pub fn top(mut self, lines: &str) -> Self {
        self.top.push(lines.into());
        self
    }

    /// Text after everything else: more `[supervisor]` keys first, then
    /// whole sections.
    #[must_use]
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push(toml.into());
        self
    }

    /// The TOML.
    #[must_use]
    pub fn build(&self) -> String {
        let list: Vec<String> = self
            .plugins
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        let mut t = format!(
            "plugins = [{}]\nstate_dir = {:?}\n{}\n",
            list.join(", "),
            self.state.display().to_string(),
            self.top.join("\n")
        );
        if let Some((task, session)) = &self.stdio {
            t.push_str(&format!(
                "\n[stdio]\nsurface = \"chat\"\ntask_id = \"{task}\"\nsession_id = \"{session}\"\n"
            ));
        }
        if !self.http.is_empty() {
            t.push_str(&format!("\n[http]\n{}\n", self.http.join("\n")));
        }
        t.push_str(&format!(
            "\n[[http.tokens]]\ntoken = \"{TOKEN}\"\nsurface = \"chat\"\ntask_id = \"{}\"\nsession_id = \"{}\"\n",
            self.ids.0, self.ids.1
        ));
        t.push_str(&format!(
            "\n[supervisor]\n{}\n{}\n",
            self.supervisor.join("\n"),
            self.extra.join("\n")
        ));
        let read: Vec<String> = sandbox_read_paths()
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect();
        t.push_str(&format!(
            "\n[sandbox]\nread = [{}]\n{}\n",
            read.join(", "),
            self.sandbox.join("\n")
        ));
        t
    }

    /// Lines under `[sandbox]` (after `read`, which every test config has).
    #[must_use]
    pub fn sandbox(mut self, lines: &str) -> Self {
        self.sandbox.push(lines.into());
        self
    }
}

/// What the example and SDK plugins run on outside their own directories,
/// granted read and execute the way an operator would (`[sandbox] read`).
#[must_use]
pub fn sandbox_read_paths() -> Vec<PathBuf> {
    let target = bin_dir()
        .parent()
        .map_or_else(|| workspace_root().join("target"), Path::to_path_buf);
    toolhost_bench::procs::sandbox_read_paths(&workspace_root(), &target)
}
