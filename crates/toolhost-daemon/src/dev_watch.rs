//! `serve --dev`'s watcher: it looks at the plugin's directory every
//! quarter second, and when what it holds changed and then stayed the same
//! for one more look (an editor's save, a build, is several writes), runs
//! the plugin's own build step and reloads it. A reload that does not load
//! (a manifest with a problem, code that does not start, code whose shapes
//! drifted from the manifest) is said, and the last good version serves on.
//!
//! What this module must not do: take what a build writes for a change of
//! its own (that would build for ever), or take a source saved while a
//! build runs for part of what was built (that change would never be
//! built): what a build reads and what it writes are kept apart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolhost_base::errln;

/// How often the plugin's directory is looked at.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The most files a look reads; a directory with more is watched in part.
const MAX_WATCHED_FILES: usize = 20_000;

/// Directories that are not the plugin's source: environments, caches,
/// history. A Rust plugin's build directory is looked at for its binaries
/// only (`target/debug`, `target/release`).
const UNWATCHED: [&str; 7] = [
    ".venv",
    "node_modules",
    "__pycache__",
    ".git",
    ".pytest_cache",
    ".mypy_cache",
    "vendor",
];

/// The build a plugin directory declares, which `serve --dev` runs before
/// each reload: `npm run build` where `package.json` has a `build` script
/// (the TypeScript template's), `cargo build --release` where there is a
/// `Cargo.toml` (the Rust template's launcher runs the release binary).
/// Python needs none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BuildStep {
    Npm,
    Cargo,
}

impl BuildStep {
    fn of(dir: &Path) -> Option<Self> {
        if dir.join("Cargo.toml").is_file() {
            return Some(Self::Cargo);
        }
        let package = std::fs::read(dir.join("package.json")).ok()?;
        let package: serde_json::Value = serde_json::from_slice(&package).ok()?;
        package
            .pointer("/scripts/build")
            .is_some()
            .then_some(Self::Npm)
    }

    /// Whether `path` is a source: what the author edits and the build or
    /// the reload reads. The manifest and its schemas; for TypeScript its
    /// `.ts` files (not declarations, nothing under the `outDir`
    /// `tsconfig.json` names), `package.json` and `tsconfig.json`; for Rust
    /// its `.rs` files and `Cargo.toml` outside `target/`. Everything else
    /// is taken for what the build writes: erring that way costs one missed
    /// rebuild, never a build that triggers itself for ever.
    fn reads(self, dir: &Path, out_dir: Option<&Path>, path: &Path) -> bool {
        let Ok(inside) = path.strip_prefix(dir) else {
            return false;
        };
        let name = inside
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if inside == Path::new("plugin.toml") || inside.starts_with("schemas") {
            return true;
        }
        match self {
            Self::Cargo => {
                !inside.starts_with("target") && (name.ends_with(".rs") || name == "Cargo.toml")
            }
            Self::Npm => {
                let in_out_dir = out_dir.is_some_and(|o| inside.starts_with(o));
                let source = [".ts", ".tsx", ".mts", ".cts"]
                    .iter()
                    .any(|e| name.ends_with(e))
                    && ![".d.ts", ".d.mts", ".d.cts"]
                        .iter()
                        .any(|e| name.ends_with(e));
                !in_out_dir && (source || name == "package.json" || name == "tsconfig.json")
            }
        }
    }

    /// The `outDir` a TypeScript build's `tsconfig.json` names, relative
    /// to the plugin's directory; read once per build, and only the first
    /// 64 KiB (a folder being served is not trusted to be small).
    fn out_dir(self, dir: &Path) -> Option<PathBuf> {
        use std::io::Read as _;
        if self != Self::Npm {
            return None;
        }
        let mut text = Vec::new();
        std::fs::File::open(dir.join("tsconfig.json"))
            .ok()?
            .take(64 * 1024)
            .read_to_end(&mut text)
            .ok()?;
        let config: serde_json::Value = serde_json::from_slice(&text).ok()?;
        let o = config.pointer("/compilerOptions/outDir")?.as_str()?;
        let o = o.trim_start_matches("./").trim_end_matches('/');
        (!o.is_empty() && o != ".").then(|| PathBuf::from(o))
    }

    /// What a build that read `before` and wrote `after` has served: its
    /// sources as they were when it started, everything else as it is now.
    /// A source saved during the build then differs from what was served,
    /// and the next look builds again.
    fn served(self, dir: &Path, before: &[Watched], after: &[Watched]) -> Vec<Watched> {
        let out_dir = self.out_dir(dir);
        let out_dir = out_dir.as_deref();
        let mut served: Vec<Watched> = after
            .iter()
            .filter(|w| !self.reads(dir, out_dir, &w.0))
            .chain(before.iter().filter(|w| self.reads(dir, out_dir, &w.0)))
            .cloned()
            .collect();
        served.sort();
        served
    }

    fn shown(self) -> &'static str {
        match self {
            Self::Npm => "npm run build",
            Self::Cargo => "cargo build --release",
        }
    }

    /// Runs the build; its output's last lines when it fails.
    async fn run(self, dir: &Path) -> std::result::Result<(), String> {
        let mut command = match self {
            Self::Npm => {
                if !dir.join("node_modules").is_dir() {
                    return Err(
                        "node_modules is missing: run `npm install` in the plugin's directory"
                            .into(),
                    );
                }
                let mut c = tokio::process::Command::new("npm");
                c.args(["run", "build", "--silent"]);
                c
            }
            Self::Cargo => {
                let mut c = tokio::process::Command::new(
                    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
                );
                c.args(["build", "--release", "--message-format=short"]);
                c
            }
        };
        let out = command
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", self.shown()))?;
        if out.status.success() {
            return Ok(());
        }
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        Err(format!("{} failed ({}):\n{tail}", self.shown(), out.status))
    }
}

/// One file as a reload sees it: path, size, modification time.
type Watched = (PathBuf, u64, SystemTime);

/// What the directory holds, as far as a reload cares.
fn look(dir: &Path) -> Vec<Watched> {
    let mut out = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if out.len() >= MAX_WATCHED_FILES {
                return out;
            }
            let Ok(t) = e.file_type() else { continue };
            let name = e.file_name();
            let path = e.path();
            if t.is_dir() {
                let name = name.to_string_lossy();
                let in_target = d.file_name().is_some_and(|n| n == "target") && depth == 1;
                if UNWATCHED.contains(&name.as_ref()) || depth >= 8 {
                    continue;
                }
                if name == "target" && depth == 0 {
                    pending.push((path, 1));
                } else if in_target {
                    if name == "debug" || name == "release" {
                        // The binaries only, not the build's own files.
                        if let Ok(bins) = std::fs::read_dir(&path) {
                            for b in bins.flatten() {
                                if b.file_type().is_ok_and(|t| t.is_file())
                                    && let Ok(m) = b.metadata()
                                {
                                    out.push((
                                        b.path(),
                                        m.len(),
                                        m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                                    ));
                                }
                            }
                        }
                    }
                } else {
                    pending.push((path, depth + 1));
                }
            } else if t.is_file()
                && let Ok(m) = e.metadata()
            {
                out.push((
                    path,
                    m.len(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                ));
            }
        }
    }
    out.sort();
    out
}

/// What was built before this run may be older than its sources: builds
/// once at start, and reloads if that changed anything. What the directory
/// holds then, if the build ran.
async fn build_at_start(
    dir: &Path,
    id: &str,
    lifecycle: &toolhost_lifecycle::Lifecycle,
) -> Option<Vec<Watched>> {
    let step = BuildStep::of(dir)?;
    let before = {
        let d = dir.to_path_buf();
        tokio::task::spawn_blocking(move || look(&d))
            .await
            .unwrap_or_default()
    };
    errln!("toolhost: building {id} ({})", step.shown());
    if let Err(why) = step.run(dir).await {
        errln!(
            "toolhost: the build of {id} failed; what was built before serves:\n{}",
            toolhost_base::text::escaped(&why, 8192)
        );
        return None;
    }
    let now = {
        let d = dir.to_path_buf();
        tokio::task::spawn_blocking(move || look(&d))
            .await
            .unwrap_or_default()
    };
    if now != before {
        match lifecycle.reload(id).await {
            Ok(revision) => {
                errln!("toolhost: reloaded {id} as built (catalog revision {revision})")
            }
            Err(e) => errln!(
                "toolhost: {id} as built did not load, and the last good version keeps serving: {}",
                toolhost_base::text::escaped(&e.to_string(), 8192)
            ),
        }
    }
    Some(step.served(dir, &before, &now))
}

/// The first start has no last good version to keep serving, so code
/// whose shapes drifted from `plugin.toml` is served as the manifest says,
/// and said here once, as loudly as a refused reload: an agent's call with
/// a parameter only the code declares otherwise reads just "unexpected
/// argument".
async fn say_drift_at_start(
    id: String,
    lifecycle: Arc<toolhost_lifecycle::Lifecycle>,
    stop: tokio_util::sync::CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while tokio::time::Instant::now() < deadline {
        if let Some(drift) = lifecycle.drift_of(&id) {
            if !drift.is_empty() {
                errln!(
                    "toolhost: {id} serves what plugin.toml declares, and its code states other shapes; calls use plugin.toml's until you sync:\n{}",
                    toolhost_base::text::escaped(&drift.join("\n"), 8192)
                );
            }
            return;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Reloads the plugin `id` served from `dir` whenever what the directory
/// holds changes and then stays the same for one more look (an editor's
/// save, a build, is several writes), until `stop`.
pub async fn watch(
    dir: PathBuf,
    id: String,
    lifecycle: Arc<toolhost_lifecycle::Lifecycle>,
    stop: tokio_util::sync::CancellationToken,
) {
    let looked = |d: PathBuf| async move {
        tokio::task::spawn_blocking(move || look(&d))
            .await
            .unwrap_or_default()
    };
    let mut served = looked(dir.clone()).await;
    tokio::spawn(say_drift_at_start(
        id.clone(),
        Arc::clone(&lifecycle),
        stop.clone(),
    ));
    if let Some(now) = build_at_start(&dir, &id, &lifecycle).await {
        served = now;
    }
    let mut seen = served.clone();
    let mut saved_during_builds = 0u32;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let now = looked(dir.clone()).await;
        let settled = now == seen;
        seen = now;
        if !settled || seen == served {
            continue;
        }
        // Build what runs: a change to TypeScript or Rust sources means
        // nothing until it is built. What the build writes is not a change
        // of its own.
        if let Some(step) = BuildStep::of(&dir) {
            errln!(
                "toolhost: {} changed; building {id} ({})",
                dir.display(),
                step.shown()
            );
            let built = step.run(&dir).await;
            let before = std::mem::take(&mut seen);
            seen = looked(dir.clone()).await;
            served = step.served(&dir, &before, &seen);
            // A build that rewrites its own sources (a code generator in
            // the build script) would look like an edit made during it
            // every time: twice in a row, and what it left is served.
            saved_during_builds = if served == seen {
                0
            } else {
                saved_during_builds + 1
            };
            if saved_during_builds >= 2 {
                served = seen.clone();
                saved_during_builds = 0;
            }
            if let Err(why) = built {
                errln!(
                    "toolhost: the build of {id} failed, and the last good version keeps serving:\n{}",
                    toolhost_base::text::escaped(&why, 8192)
                );
                continue;
            }
        } else {
            served = seen.clone();
        }
        errln!("toolhost: {} changed; reloading {id}", dir.display());
        match lifecycle.reload(&id).await {
            Ok(revision) => errln!("toolhost: reloaded {id} (catalog revision {revision})"),
            Err(e) => errln!(
                "toolhost: the change to {id} did not load, and the last good version keeps serving: {}",
                toolhost_base::text::escaped(&e.to_string(), 8192)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source saved while the build ran is not taken for built: what
    /// was served keeps the source as the build read it, so the next look
    /// builds again; what the build wrote is served as written.
    #[test]
    fn a_source_saved_during_a_build_is_built_again() {
        let dir = Path::new("/p");
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let before = vec![
            (dir.join("dist/tickets.js"), 10, at(1)),
            (dir.join("tickets.ts"), 5, at(1)),
        ];
        let after = vec![
            (dir.join("dist/tickets.js"), 11, at(2)),
            (dir.join("tickets.ts"), 6, at(2)),
        ];
        let served = BuildStep::Npm.served(dir, &before, &after);
        assert_ne!(served, after, "the saved source must count as a change");
        assert_eq!(
            served,
            vec![
                (dir.join("dist/tickets.js"), 11, at(2)),
                (dir.join("tickets.ts"), 5, at(1)),
            ]
        );
        // Nothing saved during the build: what was served is what is there.
        let quiet = vec![
            (dir.join("dist/tickets.js"), 11, at(2)),
            (dir.join("tickets.ts"), 5, at(1)),
        ];
        assert_eq!(BuildStep::Npm.served(dir, &before, &quiet), quiet);
        assert!(!BuildStep::Cargo.reads(dir, None, &dir.join("target/release/tickets")));
        assert!(BuildStep::Cargo.reads(dir, None, &dir.join("src/main.rs")));
        assert!(!BuildStep::Npm.reads(dir, None, &dir.join("tsconfig.tsbuildinfo")));
        // Without an outDir tsc writes beside the sources: its .js and
        // .d.ts are not sources, so a build never triggers itself.
        assert!(!BuildStep::Npm.reads(dir, None, &dir.join("tickets.js")));
        assert!(!BuildStep::Npm.reads(dir, None, &dir.join("tickets.d.ts")));
        assert!(BuildStep::Npm.reads(dir, None, &dir.join("tickets.ts")));
        assert!(BuildStep::Npm.reads(dir, None, &dir.join("plugin.toml")));
        assert!(BuildStep::Npm.reads(dir, None, &dir.join("schemas/list_tickets.json")));
    }
}
