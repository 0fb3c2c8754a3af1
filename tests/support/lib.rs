//! Helpers for the end-to-end tests: find the built binaries, make scratch
//! directories, and wait for conditions without sleeping blindly.
//!
//! The tests start the real `toolhost` binary and real plugin processes.
//! `scripts/test` builds every binary first (`cargo build --workspace
//! --bins`); a test that cannot find one says so instead of hanging.

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

/// A fresh scratch directory, removed when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates `$TMPDIR/toolhost-e2e-<tag>-<pid>-<n>`.
    #[must_use]
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("th-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        if let Err(e) = std::fs::create_dir_all(&p) {
            panic!("cannot create {}: {e}", p.display());
        }
        Self(p)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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

/// Whether a process with this pid exists and is not a zombie.
#[must_use]
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command.
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Pids of every process whose command line contains `needle`.
#[must_use]
pub fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Writes a plugin directory for `testplug` (started with `--mode MODE`)
/// declaring its tools, and returns the directory.
#[must_use]
pub fn testplug_dir(root: &Path, id: &str, mode: &str) -> PathBuf {
    let dir = root.join(id);
    let schemas = [
        (
            "echo",
            r#"{ type = "object", properties = { msg = { type = "string" }, n = { type = "integer" } } }"#,
            "read_only = true, open_world = false",
        ),
        (
            "slow",
            r#"{ type = "object", properties = { ms = { type = "integer", minimum = 0 } } }"#,
            "read_only = true, open_world = false",
        ),
        ("crash", r#"{ type = "object" }"#, "destructive = false"),
        ("count", r#"{ type = "object" }"#, "read_only = true"),
        (
            "big",
            r#"{ type = "object", properties = { bytes = { type = "integer" } } }"#,
            "read_only = true",
        ),
        ("bad_output", r#"{ type = "object" }"#, "read_only = true"),
    ];
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Test plugin\"\n\n[runtime]\ncommand = \"{}\"\nargs = [\"--mode\", \"{mode}\"]\nstartup_timeout_ms = 5000\n",
        bin("testplug").display()
    );
    for (name, schema, hints) in schemas {
        let timeout = if name == "slow" { 60_000 } else { 10_000 };
        let output = if name == "bad_output" {
            "output_schema = { type = \"object\", properties = { count = { type = \"integer\" } } }\n"
        } else {
            ""
        };
        toml.push_str(&format!(
            "\n[[tools]]\nname = \"{name}\"\ndescription = \"testplug {name}\"\nsurfaces = [\"kanban-task\", \"chat\"]\ntimeout_ms = {timeout}\ninput_schema = {schema}\n{output}annotations = {{ {hints} }}\n"
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
