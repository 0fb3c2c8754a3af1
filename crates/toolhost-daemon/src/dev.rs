//! `toolhost serve --dev DIR`: one plugin directory served for its
//! author, with no configuration file. The token is the directory's own
//! (made once, kept in the state directory, so a restarted `serve --dev`
//! keeps the client's token working) and printed with a call line that
//! works as printed; the plugin runs under the default sandbox, with one
//! allowance a development tree needs (the Python a `.venv` in it is built
//! on, see [`venv_base`]). Values the plugin needs come on the command
//! line (`--set NAME=VALUE`, `NAME=@FILE`), for the run only.
//!
//! While it serves, [`watch`] keeps up with the author: a change to the
//! code reloads the plugin, a change to the manifest or a schema reloads
//! its declarations, and a change that does not load (a manifest with a
//! problem, code that does not start) is said, with the plugin's own
//! stderr, while the last good version keeps serving.

use crate::config::BindingConfig;
use anyhow::{Context as _, Result, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use toolhost_base::errln;

/// `serve --dev`: the token made for this run and what it is bound to.
#[derive(Debug, Clone)]
pub struct DevSession {
    /// The plugin directory served.
    pub dir: PathBuf,
    /// The plugin's id, when its manifest reads.
    pub id: Option<String>,
    /// The bearer token made for this run.
    pub token: String,
    /// The surface it is bound to.
    pub surface: String,
    /// A tool the plugin declares on that surface, for the call line.
    pub example_tool: Option<String>,
    /// The Python installation a `.venv` in the plugin directory is built
    /// on, granted read for this run (see [`venv_base`]).
    pub venv_base: Option<PathBuf>,
    /// Configuration values from the command line (`--set`), by item.
    pub values: BTreeMap<String, String>,
}

/// The Python installation the virtual environment `dir/.venv` is built
/// on (the parent of `home` in its `pyvenv.cfg`), when there is one.
///
/// A venv's interpreter is a link to that installation, often outside the
/// system paths (pyenv, a Python built into the home directory), which the
/// sandbox does not let a plugin run. `serve --dev` and `check --start`
/// grant it read for their run, so the README's development loop works
/// with the default sandbox everywhere; an installed plugin gets no such
/// grant, and `toolhost pack` vendors its dependencies for the system
/// interpreter instead.
///
/// The file is the plugin's, and a plugin folder may be someone else's
/// code, just cloned: `home` is resolved first (symbolic links and `..`:
/// `/tmp/../bin` is `/bin`, whose parent is `/`), and only a Python
/// installation at a place of its own is granted: never `/`, the user's
/// home directory or any directory holding it, the plugin's directory or
/// any directory holding it.
#[must_use]
pub fn venv_base(dir: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(dir.join(".venv/pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    if !home.is_absolute() {
        return None;
    }
    let home = std::fs::canonicalize(&home).ok()?;
    let base = if home.ends_with("bin") {
        home.parent()?.to_path_buf()
    } else {
        home
    };
    let is_installation = std::fs::read_dir(base.join("bin")).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("python3"))
    }) && std::fs::read_dir(base.join("lib")).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            e.file_name().to_string_lossy().starts_with("python3")
                && e.path().join("os.py").is_file()
        })
    });
    (is_installation && may_grant(&base, dir)).then_some(base)
}

/// Whether `base` (resolved) may be granted read for the plugin in `dir`:
/// not the root, and holding neither the user's home directory nor the
/// plugin's (a grant of a parent is a grant of everything in it).
fn may_grant(base: &Path, dir: &Path) -> bool {
    if base.parent().is_none() {
        return false;
    }
    let resolved = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let home = std::env::var_os("HOME").map(|h| resolved(Path::new(&h)));
    let plugin = resolved(dir);
    let holds = |inner: &Path| inner.starts_with(base);
    !plugin.as_path().ancestors().any(|a| a == base)
        && !holds(&plugin)
        && !home.as_deref().is_some_and(holds)
}

impl DevSession {
    /// The token's binding: surface from the flag, else the plugin's first
    /// declared surface.
    pub fn new(dir: &Path, prefix: &str, surface_flag: Option<&str>) -> Result<Self> {
        let manifest = toolhost_manifest::Manifest::load(dir).ok();
        let declared = manifest.as_ref().and_then(|m| {
            m.tools
                .iter()
                .flat_map(|t| t.surfaces.first())
                .next()
                .cloned()
        });
        let surface = surface_flag
            .map(str::to_owned)
            .or(declared)
            .unwrap_or_else(|| "chat".to_owned());
        let example_tool = manifest.as_ref().and_then(|m| {
            // A call that works as printed: a read-only tool with nothing
            // required first, and arguments for what is required.
            let on_surface = m.tools.iter().filter(|t| t.surfaces.contains(&surface));
            let t = on_surface.min_by_key(|t| {
                (
                    t.annotations.destructive,
                    !t.annotations.read_only,
                    required_count(&t.input_schema),
                )
            })?;
            Some(format!(
                "{} '{}'",
                toolhost_manifest::naming::exposed(prefix, &m.id, &t.name),
                sample_arguments(&t.input_schema)
            ))
        });
        Ok(Self {
            dir: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
            id: manifest.as_ref().map(|m| m.id.clone()),
            venv_base: venv_base(dir),
            // Made for the run here; `settings` puts the directory's own
            // in its place once the state directory is known.
            token: toolhost_base::ids::unguessable_id().context("no randomness for a token")?,
            surface,
            example_tool,
            values: BTreeMap::new(),
        })
    }

    /// The values `--set` gives, each an item the manifest declares.
    pub fn with_values(mut self, values: BTreeMap<String, String>) -> Result<Self> {
        if !values.is_empty() {
            let declared: Vec<String> = toolhost_manifest::Manifest::load(&self.dir)
                .map(|m| m.config.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            for name in values.keys() {
                if !declared.contains(name) {
                    bail!(
                        "--set {name}: plugin.toml declares no [[config]] item {name:?}{}",
                        if declared.is_empty() {
                            String::new()
                        } else {
                            format!(" (it declares {})", declared.join(", "))
                        }
                    );
                }
            }
        }
        self.values = values;
        Ok(self)
    }

    /// What a developer needs to call the plugin `serve --dev` serves, on
    /// stderr (stdout stays free): the token, and a call line that works as
    /// printed.
    pub fn banner(&self, local: std::net::SocketAddr, admin: &std::path::Path, state_dir: &Path) {
        use std::fmt::Write as _;
        let url = format!("http://{local}/mcp");
        let default_url = local.ip().is_loopback() && local.port() == 7010;
        // One write for the whole banner: a log line from the plugin or
        // from tracing never lands in the middle of it, and whoever reads
        // stderr sees all of it or none.
        let mut text = format!(
            "toolhost: serving {} for development; the token below is bound to surface {:?}\n",
            self.dir.display(),
            self.surface
        );
        if let Some(base) = &self.venv_base {
            let _ = writeln!(
                text,
                "  (for this run the plugin may also read {}, the Python its .venv is built on; an installed plugin may not: `toolhost pack` vendors for the system Python)",
                base.display()
            );
        }
        let _ = writeln!(text, "  export TOOLHOST_TOKEN={}", self.token);
        if !default_url {
            let _ = writeln!(text, "  export TOOLHOST_URL={url}");
        }
        if let Some(tool) = &self.example_tool {
            let _ = writeln!(text, "  toolhost call {tool}");
        }
        let _ = writeln!(
            text,
            "  MCP clients: {url} with `Authorization: Bearer <the token>`; the plugin's state: toolhost status --admin {}",
            admin.display()
        );
        if let Some(id) = &self.id {
            let _ = writeln!(
                text,
                "  the plugin's data directory: {}",
                state_dir.join("data").join(id).display()
            );
        }
        text.push_str(
            "  a change to its code or plugin.toml reloads it; the token stays the same across runs in this directory",
        );
        errln!("{text}");
    }

    /// The directory's own token: read from `state_dir`, or made and kept
    /// there (private) on the first run.
    pub fn keep_token(&mut self, state_dir: &Path) -> Result<()> {
        use sha2::Digest as _;
        let key = sha2::Sha256::digest(self.dir.as_os_str().as_encoded_bytes());
        let hex: String = key[..12].iter().map(|b| format!("{b:02x}")).collect();
        let tokens = state_dir.join("dev-tokens");
        let file = tokens.join(hex);
        if let Ok(token) = std::fs::read_to_string(&file)
            && token.trim().len() == 32
            && token.trim().bytes().all(|b| b.is_ascii_hexdigit())
        {
            self.token = token.trim().to_owned();
            return Ok(());
        }
        toolhost_base::files::private_dir(state_dir)
            .and_then(|()| toolhost_base::files::private_dir(&tokens))
            .and_then(|()| toolhost_base::files::write_private(&file, self.token.as_bytes()))
            .with_context(|| format!("cannot keep the development token in {}", file.display()))
    }

    /// The binding of the token: one task and session for the whole run.
    pub fn binding(&self) -> BindingConfig {
        BindingConfig {
            surface: self.surface.clone(),
            task_id: "dev-task".to_owned(),
            session_id: "dev-session".to_owned(),
            workspace_id: None,
        }
    }
}

/// One `--set NAME=VALUE` (or `NAME=@FILE`, the value read from a file, its
/// one trailing newline dropped): a configuration value given on the
/// command line.
pub fn parse_set(arg: &str) -> Result<(String, String)> {
    let Some((name, value)) = arg.split_once('=') else {
        bail!("--set takes NAME=VALUE or NAME=@FILE, not {arg:?}");
    };
    if name.is_empty() {
        bail!("--set {arg:?}: the item's name is empty");
    }
    let value = match value.strip_prefix('@') {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--set {name}=@{file}: cannot read {file}"))?;
            text.strip_suffix('\n').unwrap_or(&text).to_owned()
        }
        None => value.to_owned(),
    };
    Ok((name.to_owned(), value))
}

/// Every `--set`, by name; a name given twice is refused.
pub fn parse_sets(args: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for a in args {
        let (name, value) = parse_set(a)?;
        if out.insert(name.clone(), value).is_some() {
            bail!("--set gives {name} twice");
        }
    }
    Ok(out)
}

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

    /// Whether `path` is something this build writes rather than reads:
    /// TypeScript's `outDir` (`dist` unless `tsconfig.json` says other)
    /// and its `.tsbuildinfo`, Cargo's `target/`. A source saved while the
    /// build runs must not be taken for part of what was built.
    fn writes(self, dir: &Path, path: &Path) -> bool {
        let Ok(inside) = path.strip_prefix(dir) else {
            return false;
        };
        match self {
            Self::Cargo => inside.starts_with("target"),
            Self::Npm => {
                let out_dir = std::fs::read(dir.join("tsconfig.json"))
                    .ok()
                    .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
                    .and_then(|t| {
                        t.pointer("/compilerOptions/outDir")
                            .and_then(|o| o.as_str())
                            .map(|o| o.trim_start_matches("./").trim_end_matches('/').to_owned())
                    })
                    .filter(|o| !o.is_empty() && o != ".")
                    .unwrap_or_else(|| "dist".to_owned());
                inside.starts_with(&out_dir)
                    || inside.extension().is_some_and(|e| e == "tsbuildinfo")
            }
        }
    }

    /// What a build that read `before` and wrote `after` has served: its
    /// outputs as they are now, its inputs as they were when it started.
    /// A source changed during the build then differs from what was
    /// served, and the next look builds again.
    fn served(self, dir: &Path, before: &[Watched], after: &[Watched]) -> Vec<Watched> {
        let mut served: Vec<Watched> = after
            .iter()
            .filter(|w| self.writes(dir, &w.0))
            .chain(before.iter().filter(|w| !self.writes(dir, &w.0)))
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

/// How many properties a schema requires.
fn required_count(schema: &serde_json::Value) -> usize {
    schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len)
}

/// Arguments that satisfy `schema`'s required properties, for the dev
/// banner's sample call: each property's first enum value, default or
/// minimum, else a value of its type.
fn sample_arguments(schema: &serde_json::Value) -> String {
    let mut args = serde_json::Map::new();
    let required = schema
        .get("required")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    for name in required.iter().filter_map(serde_json::Value::as_str) {
        let p = schema
            .pointer(&format!("/properties/{name}"))
            .cloned()
            .unwrap_or_default();
        let value = p
            .get("enum")
            .and_then(|e| e.get(0).cloned())
            .or_else(|| p.get("default").cloned())
            .or_else(|| p.get("minimum").cloned())
            .unwrap_or_else(|| match p.get("type").and_then(serde_json::Value::as_str) {
                Some("integer" | "number") => serde_json::json!(1),
                Some("boolean") => serde_json::json!(false),
                Some("array") => serde_json::json!([]),
                Some("object") => serde_json::json!({}),
                _ => serde_json::json!("example"),
            });
        args.insert(name.to_owned(), value);
    }
    // Shown in single quotes on a shell line: a quote inside is escaped.
    serde_json::Value::Object(args)
        .to_string()
        .replace('\'', "'\\''")
}

#[cfg(test)]
mod tests {

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
        assert!(BuildStep::Cargo.writes(dir, &dir.join("target/release/tickets")));
        assert!(!BuildStep::Cargo.writes(dir, &dir.join("src/main.rs")));
        assert!(BuildStep::Npm.writes(dir, &dir.join("tsconfig.tsbuildinfo")));
    }

    #[test]
    fn the_banners_sample_call_fills_what_is_required() {
        let schema = serde_json::json!({
            "type": "object",
            "required": ["id", "confirm", "kind", "it's"],
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "confirm": {"type": "boolean"},
                "kind": {"enum": ["bug", "idea"]},
                "it's": {"type": "string"},
                "note": {"type": "string"}
            }
        });
        assert_eq!(required_count(&schema), 4);
        assert_eq!(
            sample_arguments(&schema),
            r#"{"confirm":false,"id":1,"it'\''s":"example","kind":"bug"}"#
        );
        assert_eq!(
            sample_arguments(&serde_json::json!({"type": "object"})),
            "{}"
        );
    }

    use super::*;

    /// A directory removed when the test ends.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> std::io::Result<Self> {
            let id = toolhost_base::ids::unguessable_id()?;
            let dir = std::env::temp_dir().join(format!("toolhost-dev-test-{id}"));
            std::fs::create_dir_all(&dir)?;
            Ok(Self(dir))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn venv(home: &str) -> Scratch {
        let d = Scratch::new().unwrap();
        std::fs::create_dir_all(d.0.join(".venv")).unwrap();
        std::fs::write(
            d.0.join(".venv/pyvenv.cfg"),
            format!("home = {home}\nversion = 3.11.7\n"),
        )
        .unwrap();
        d
    }

    #[test]
    fn only_a_python_installation_is_granted() {
        // A Python installation, as pyenv lays one out.
        let install = Scratch::new().unwrap();
        std::fs::create_dir_all(install.0.join("bin")).unwrap();
        std::fs::write(install.0.join("bin/python3.11"), "").unwrap();
        std::fs::create_dir_all(install.0.join("lib/python3.11")).unwrap();
        std::fs::write(install.0.join("lib/python3.11/os.py"), "").unwrap();
        let plugin = venv(&install.0.join("bin").display().to_string());
        assert_eq!(venv_base(&plugin.0), Some(install.0.clone()));
        // Anything else `home` names is not: the root, a home directory
        // with a bin/ but no standard library, a relative path.
        let home_dir = Scratch::new().unwrap();
        std::fs::create_dir_all(home_dir.0.join("bin")).unwrap();
        std::fs::write(home_dir.0.join("bin/python3"), "").unwrap();
        for home in [
            "/",
            "relative/bin",
            &home_dir.0.join("bin").display().to_string(),
        ] {
            assert_eq!(venv_base(&venv(home).0), None, "{home}");
        }
    }

    /// What a grant may never be: the root, or a directory holding the
    /// user's home directory.
    fn harmless(got: Option<&Path>) -> bool {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        got.is_none_or(|p| {
            p.parent().is_some()
                && !home
                    .as_deref()
                    .and_then(|h| std::fs::canonicalize(h).ok())
                    .is_some_and(|h| h.starts_with(p))
        })
    }

    /// A hostile plugin folder's `pyvenv.cfg` points `home` at a path
    /// whose text is not `/` but which resolves to it, or through a link:
    /// resolved first, it is refused.
    #[test]
    fn a_home_that_resolves_to_the_root_or_a_parent_of_home_is_not_granted() {
        // Resolved, these are the system's Python (already readable by
        // every plugin) or nothing: never the root `/tmp/..` spells.
        for home in [
            "/tmp/../bin",
            "/usr/../bin",
            "/tmp/../usr/../bin",
            "//bin",
            "/bin",
        ] {
            let got = venv_base(&venv(home).0);
            assert!(harmless(got.as_deref()), "{home}: {got:?}");
            assert_ne!(got.as_deref(), Some(Path::new("/")), "{home}");
        }
        // A link to the root, inside the plugin.
        let plugin = venv("/placeholder");
        std::os::unix::fs::symlink("/", plugin.0.join("root")).unwrap();
        std::fs::write(
            plugin.0.join(".venv/pyvenv.cfg"),
            format!("home = {}/root/bin\n", plugin.0.display()),
        )
        .unwrap();
        let got = venv_base(&plugin.0);
        assert!(
            harmless(got.as_deref()) && got.as_deref() != Some(Path::new("/")),
            "{got:?}"
        );
        // A Python installation that holds the plugin's folder: never.
        let install = Scratch::new().unwrap();
        std::fs::create_dir_all(install.0.join("bin")).unwrap();
        std::fs::write(install.0.join("bin/python3"), "").unwrap();
        std::fs::create_dir_all(install.0.join("lib/python3.11")).unwrap();
        std::fs::write(install.0.join("lib/python3.11/os.py"), "").unwrap();
        let inner = install.0.join("work/plugin");
        std::fs::create_dir_all(inner.join(".venv")).unwrap();
        std::fs::write(
            inner.join(".venv/pyvenv.cfg"),
            format!("home = {}/bin\n", install.0.display()),
        )
        .unwrap();
        assert_eq!(venv_base(&inner), None);
    }
}
