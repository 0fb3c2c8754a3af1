//! `toolhost pack DIR [-o FILE]`: an installable `.tar.gz` of a plugin
//! with what it needs at run time, and nothing else.
//!
//! A development tree is not an installable plugin: it holds build outputs
//! of hundreds of megabytes (`target/`), links into a virtual environment
//! (`.venv`) and links to build tools (`node_modules/.bin`), while what
//! the plugin runs on may live outside it (a venv's interpreter). `pack`
//! builds the plugin the way its language does and lays it out the way
//! the launcher `toolhost new` writes expects:
//!
//! - Rust (`Cargo.toml`): `cargo build --release`, the binaries in `dist/`;
//! - Python (`requirements.txt`, `pyproject.toml` or `*.py`): the code, and
//!   its dependencies installed into `vendor/` by the system interpreter
//!   that will run it (`/usr/bin/python3`, else `/usr/local/bin/python3`;
//!   `TOOLHOST_PACK_PYTHON` overrides), which the default sandbox lets a
//!   plugin run;
//! - TypeScript or JavaScript (`package.json`): `npm run build` if there is
//!   one, the built `dist/`, and the production `node_modules` installed
//!   without bin links;
//! - anything else: the files as they are.
//!
//! The sources are the directory's files less what `.gitignore` and
//! `.toolhostignore` leave out (no git repository needed), less version
//! control and the build trees above, which pack makes afresh. The result
//! is checked as `toolhost check` would and against the daemon's default
//! archive limits before it is written, so what pack writes installs.

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use toolhost_base::{errln, outln};
use toolhost_lifecycle::ArchiveLimits;
use toolhost_manifest::Manifest;

/// The flags of `toolhost pack`.
#[derive(Debug, clap::Args)]
pub struct PackArgs {
    /// The plugin directory (holding plugin.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The archive to write (default: ./ID-VERSION.tar.gz).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// A configuration value the packed plugin needs to start (it is
    /// started once, to compare the shapes its code states with its
    /// manifest): `NAME=VALUE`, or `NAME=@FILE`. Repeatable; nothing of it
    /// goes into the archive.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Sign the package's statement (its files, its tools' contracts and
    /// its asks of the sandbox) with this minisign secret key (from
    /// `toolhost keygen`, or `minisign -G`); the signature goes beside the
    /// archive as ARCHIVE.minisig.
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
}

/// How a plugin is built, told by the files at its top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rust,
    Python,
    Node,
    Plain,
}

impl Kind {
    fn of(dir: &Path) -> Self {
        let has = |name: &str| dir.join(name).is_file();
        if has("Cargo.toml") {
            Self::Rust
        } else if has("package.json") {
            Self::Node
        } else if has("requirements.txt")
            || has("pyproject.toml")
            || std::fs::read_dir(dir).is_ok_and(|entries| {
                entries
                    .filter_map(Result::ok)
                    .any(|e| e.path().extension().is_some_and(|x| x == "py"))
            })
        {
            Self::Python
        } else {
            Self::Plain
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Rust => "Rust",
            Self::Python => "Python",
            Self::Node => "Node",
            Self::Plain => "plain files",
        }
    }

    /// Top-level directories of the development tree that pack leaves out
    /// because it makes them afresh (or because they are only for
    /// building).
    fn rebuilt(self) -> &'static [&'static str] {
        match self {
            Self::Rust => &["target", "dist"],
            Self::Python => &[".venv", "venv", "vendor"],
            Self::Node => &["node_modules", "dist"],
            Self::Plain => &[],
        }
    }
}

/// Left out at any depth: version control and caches.
const NEVER: [&str; 4] = [".git", ".hg", ".svn", "__pycache__"];

/// A private directory under the temporary directory, removed when
/// dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new() -> Result<Self> {
        let id = toolhost_base::ids::unguessable_id().context("no randomness")?;
        let dir = std::env::temp_dir().join(format!("toolhost-pack-{id}"));
        toolhost_lifecycle::private_dir(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds and packs the plugin.
pub fn run(args: &PackArgs) -> Result<ExitCode> {
    let dir = std::path::absolute(&args.dir)
        .with_context(|| format!("cannot resolve {}", args.dir.display()))?;
    // A schema that would be withheld (a defect) refuses the pack, as it
    // refuses an install.
    let loaded = Manifest::load(&dir).and_then(|m| {
        if m.defects.is_empty() {
            Ok(m)
        } else {
            Err(m.defects)
        }
    });
    let manifest = match loaded {
        Ok(m) => m,
        Err(problems) => {
            for p in &problems {
                errln!("error: {p}");
            }
            errln!(
                "toolhost pack: {} is not a valid plugin; nothing written",
                dir.display()
            );
            return Ok(ExitCode::from(1));
        }
    };
    let output =
        std::path::absolute(args.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!("{}-{}.tar.gz", manifest.id, manifest.version))
        }))?;
    // A key that cannot sign fails the pack before anything is built.
    let key = args
        .sign
        .as_deref()
        .map(crate::sign::secret_key)
        .transpose()?;
    let kind = Kind::of(&dir);
    let scratch = Scratch::new()?;
    let root = scratch.0.join(&manifest.id);
    errln!(
        "toolhost pack: {} {} ({})",
        manifest.id,
        manifest.version,
        kind.name()
    );
    copy_sources(&dir, &root, kind, &output)?;
    match kind {
        Kind::Rust => build_rust(&dir, &root)?,
        Kind::Python => vendor_python(&dir, &root)?,
        Kind::Node => build_node(&dir, &root, &scratch.0)?,
        Kind::Plain => {}
    }
    // The packed tree must be a valid plugin on its own: a launcher or a
    // schema file the ignore rules left out shows here, not at install.
    let packed = match Manifest::load(&root).and_then(|m| {
        if m.defects.is_empty() {
            Ok(m)
        } else {
            Err(m.defects)
        }
    }) {
        Ok(m) => m,
        Err(problems) => {
            for p in &problems {
                errln!("error: {p}");
            }
            bail!(
                "the packed plugin is not valid (did .gitignore or .toolhostignore leave out a file it needs?); nothing written"
            );
        }
    };
    if !code_agrees(&packed, &args.set)? {
        bail!("the packed plugin's code and its manifest disagree; nothing written");
    }
    write_package(&scratch.0, &packed, &output, key.as_ref())?;
    outln!("install it: toolhost plugins install {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes the statement into the packed tree, the archive, and with `key`
/// the signature beside it.
fn write_package(
    scratch: &Path,
    packed: &Manifest,
    output: &Path,
    key: Option<&minisign::SecretKey>,
) -> Result<()> {
    let id = &packed.id;
    let root = scratch.join(id);
    // The statement names exactly what the archive holds: written last,
    // once nothing else will change in the tree.
    let statement = crate::sign::write_statement(&root, packed)?;
    let signature = crate::sign::with_suffix(output, toolhost_lifecycle::package::SIGNATURE_SUFFIX);
    // A signature left from an earlier pack would not match this archive.
    let _ = std::fs::remove_file(&signature);
    let (entries, bytes) = write_archive(scratch, id, output)?;
    outln!(
        "wrote {} ({entries} entries, {:.1} MB unpacked)",
        output.display(),
        bytes as f64 / 1e6
    );
    if let Some(key) = key {
        let id = crate::sign::sign_into(&statement, key, &signature)?;
        outln!("signed with key {id}: {}", signature.display());
    }
    Ok(())
}

/// Starts the packed plugin once, as `check --start` would, and compares
/// the shapes its code states with its manifest: install runs no code, so
/// a package is checked against its own code here, on exactly what the
/// archive holds. A plugin that needs a value nobody gave it to start is
/// not compared (said, with what to pass); one that does not start, or
/// whose code and manifest disagree, is not packed.
fn code_agrees(packed: &Manifest, set: &[String]) -> Result<bool> {
    let values = crate::code::parse_sets(set)?;
    let mut agrees = true;
    crate::code::start_each(
        std::slice::from_ref(packed),
        None,
        &values,
        true,
        |m, started| match started {
            Ok(s) => {
                let drift: Vec<String> = s
                    .described
                    .as_ref()
                    .map(|d| crate::drift::drift(m, &d.shapes))
                    .unwrap_or_default();
                for p in &drift {
                    errln!("error: {p}");
                }
                if !s.unimplemented.is_empty() {
                    errln!(
                        "error: {}: tools declared in plugin.toml but not implemented by its code: {}",
                        m.id,
                        s.unimplemented.join(", ")
                    );
                }
                agrees = drift.is_empty() && s.unimplemented.is_empty();
                if agrees && s.described.is_some() {
                    errln!(
                        "toolhost pack: started the packed plugin; its code agrees with its manifest"
                    );
                }
            }
            Err(problem) if problem.contains("could not start: it needs") => {
                errln!("warning: its code was not compared with its manifest: {problem}")
            }
            Err(problem) => {
                errln!("error: the packed plugin does not start: {problem}");
                agrees = false;
            }
        },
    )?;
    Ok(agrees)
}

/// Copies the plugin's sources: its files less the ignore rules, version
/// control, and the build trees pack makes afresh.
fn copy_sources(dir: &Path, to: &Path, kind: Kind, output: &Path) -> Result<()> {
    let rebuilt = kind.rebuilt();
    let top = dir.to_path_buf();
    let walker = ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .add_custom_ignore_filename(".toolhostignore")
        .follow_links(false)
        .sort_by_file_name(std::ffi::OsStr::cmp)
        .filter_entry(move |e| {
            let name = e.file_name().to_string_lossy();
            let rebuilt_here = e.depth() == 1 && rebuilt.contains(&name.as_ref());
            !(NEVER.contains(&name.as_ref()) || rebuilt_here)
        })
        .build();
    for entry in walker {
        let entry = entry.context("cannot read the plugin directory")?;
        let path = entry.path();
        if path == output {
            continue;
        }
        let rel = path.strip_prefix(&top).unwrap_or(path);
        let target = to.join(rel);
        let kind = entry
            .file_type()
            .context("an entry without a file type (stdin?)")?;
        if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .with_context(|| format!("cannot create {}", target.display()))?;
        } else if kind.is_file() {
            std::fs::copy(path, &target)
                .with_context(|| format!("cannot copy {}", path.display()))?;
        } else {
            bail!(
                "{} is a symlink or special file: a plugin is plain files. Copy what it points to, or leave it out with .toolhostignore",
                rel.display()
            );
        }
    }
    Ok(())
}

/// Runs `cmd` in `dir`, its output shown; fails naming the command.
fn run_step(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {what} ({cmd:?})"))?;
    if !status.success() {
        bail!("{what} failed ({status}); nothing written");
    }
    Ok(())
}

/// `cargo build --release`, and every binary it built into `dist/`.
fn build_rust(dir: &Path, root: &Path) -> Result<()> {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo (is Rust installed?)")?;
    if !out.status.success() {
        bail!("cargo build --release failed; nothing written");
    }
    let mut built = Vec::new();
    for line in out.stdout.split(|b| *b == b'\n') {
        let Ok(message) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let is_bin = message["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bin"));
        if message["reason"] == "compiler-artifact"
            && is_bin
            && let Some(exe) = message["executable"].as_str()
        {
            built.push(PathBuf::from(exe));
        }
    }
    if built.is_empty() {
        bail!("cargo built no binary; a Rust plugin needs a [[bin]] (src/main.rs)");
    }
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist)?;
    for exe in built {
        let name = exe.file_name().context("a binary without a name")?;
        std::fs::copy(&exe, dist.join(name))
            .with_context(|| format!("cannot copy {}", exe.display()))?;
    }
    Ok(())
}

/// The interpreter a packed Python plugin runs on: the one its launcher
/// picks, which the default sandbox can reach.
fn system_python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TOOLHOST_PACK_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("no system Python (/usr/bin/python3 or /usr/local/bin/python3) to vendor for; set TOOLHOST_PACK_PYTHON")
}

/// The dependencies, installed into `vendor/` by the interpreter that will
/// run them (compiled extensions must match it).
fn vendor_python(dir: &Path, root: &Path) -> Result<()> {
    let vendor = root.join("vendor");
    std::fs::create_dir_all(&vendor)?;
    let what: Vec<String> = if dir.join("requirements.txt").is_file() {
        vec!["-r".into(), "requirements.txt".into()]
    } else if dir.join("pyproject.toml").is_file() {
        vec![".".into()]
    } else {
        return Ok(());
    };
    let python = system_python()?;
    let version = Command::new(&python)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    errln!(
        "toolhost pack: vendoring for {} ({})",
        python.display(),
        String::from_utf8_lossy(&version.stdout).trim()
    );
    run_step(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .args(["--no-warn-script-location", "--target"])
            .arg(&vendor)
            .args(&what)
            .current_dir(dir),
        &format!(
            "{} -m pip install (is pip installed for it?)",
            python.display()
        ),
    )?;
    // Console scripts name the packing machine's interpreter; a plugin
    // does not run them.
    let _ = std::fs::remove_dir_all(vendor.join("bin"));
    Ok(())
}

/// `npm run build` (installing first if needed), the built `dist/`, and
/// the production dependencies without bin links.
fn build_node(dir: &Path, root: &Path, scratch: &Path) -> Result<()> {
    let has_lock = dir.join("package-lock.json").is_file();
    let package: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("package.json")).context("cannot read package.json")?,
    )
    .context("package.json is not JSON")?;
    let quiet = ["--no-audit", "--no-fund", "--loglevel=error"];
    if package["scripts"]["build"].is_string() {
        if !dir.join("node_modules").is_dir() {
            run_step(
                Command::new("npm")
                    .arg(if has_lock { "ci" } else { "install" })
                    .args(quiet)
                    .current_dir(dir),
                "npm install",
            )?;
        }
        run_step(
            Command::new("npm").args(["run", "build"]).current_dir(dir),
            "npm run build",
        )?;
    }
    if dir.join("dist").is_dir() {
        copy_tree(&dir.join("dist"), &root.join("dist"))?;
    }
    // The production dependencies, installed apart so the development
    // tree keeps its build tools.
    let deps = scratch.join("npm");
    std::fs::create_dir_all(&deps)?;
    for file in ["package.json", "package-lock.json"] {
        if dir.join(file).is_file() {
            let text = std::fs::read(dir.join(file))?;
            let mut json: serde_json::Value =
                serde_json::from_slice(&text).with_context(|| format!("{file} is not JSON"))?;
            anchor_local_specs(&mut json, dir);
            std::fs::write(deps.join(file), serde_json::to_vec_pretty(&json)?)?;
        }
    }
    if dir.join(".npmrc").is_file() {
        std::fs::copy(dir.join(".npmrc"), deps.join(".npmrc"))?;
    }
    // A local directory dependency (`file:../sdk`) is copied in, not
    // linked (`--install-links`): a packed plugin is plain files. Its lock
    // entry is a link, which `npm ci` cannot reconcile with a copy, so such
    // a package is installed from its package.json (the lock still pins
    // what it can).
    let local_dirs = package["dependencies"].as_object().is_some_and(|deps| {
        deps.values().any(|spec| {
            spec.as_str()
                .and_then(|s| s.strip_prefix("file:"))
                .is_some_and(|p| dir.join(p).is_dir())
        })
    });
    run_step(
        Command::new("npm")
            .arg(if has_lock && !local_dirs {
                "ci"
            } else {
                "install"
            })
            .args(["--omit=dev", "--no-bin-links", "--install-links"])
            .args(quiet)
            .current_dir(&deps),
        "npm install --omit=dev",
    )?;
    if deps.join("node_modules").is_dir() {
        std::fs::rename(deps.join("node_modules"), root.join("node_modules"))
            .or_else(|_| copy_tree(&deps.join("node_modules"), &root.join("node_modules")))?;
    }
    Ok(())
}

/// Makes every relative `file:` specifier (a local tarball or directory)
/// absolute against `dir`, so the production install made elsewhere finds
/// what the project's own install found.
fn anchor_local_specs(value: &mut serde_json::Value, dir: &Path) {
    match value {
        serde_json::Value::String(s) => {
            if let Some(rel) = s.strip_prefix("file:")
                && !rel.starts_with('/')
            {
                *s = format!("file:{}", dir.join(rel).display());
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                anchor_local_specs(v, dir);
            }
        }
        serde_json::Value::Object(map) => {
            for v in map.values_mut() {
                anchor_local_specs(v, dir);
            }
        }
        _ => {}
    }
}

/// A plain recursive copy; links are refused (a plugin is plain files).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else {
            bail!(
                "{} is a symlink or special file: a plugin is plain files",
                entry.path().display()
            );
        }
    }
    Ok(())
}

/// Writes `scratch/<id>` as `<id>/...` into a gzipped tar at `output`
/// (through a temporary file, so a failed pack leaves no half archive).
/// Entries are sorted and their metadata made deterministic. Returns the
/// entries and unpacked bytes, refused over the daemon's default limits.
fn write_archive(scratch: &Path, id: &str, output: &Path) -> Result<(u64, u64)> {
    let limits = ArchiveLimits::default();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut paths = Vec::new();
    collect(&scratch.join(id), &mut paths)?;
    for (path, is_dir) in &paths {
        entries += 1;
        if !is_dir {
            bytes += std::fs::symlink_metadata(path)?.len();
        }
    }
    if entries > limits.max_entries || bytes > limits.max_bytes {
        bail!(
            "the packed plugin holds {entries} entries and {bytes} bytes; a daemon installs at most {} entries and {} bytes by default. Leave files out with .toolhostignore, or raise [limits] max_archive_entries and max_archive_bytes on the daemon",
            limits.max_entries,
            limits.max_bytes
        );
    }
    let tmp = output.with_extension("tmp");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::default(),
    ));
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let written = (|| -> std::io::Result<()> {
        for (path, _) in &paths {
            let name = path.strip_prefix(scratch).unwrap_or(path);
            tar.append_path_with_name(path, name)?;
        }
        tar.into_inner()?.finish()?.sync_all()?;
        // What an install reads, read the same way: every header bounded,
        // the sizes as the reader counts them, the daemon's default caps.
        toolhost_lifecycle::archive::check(&tmp, limits).map(|_| ())
    })();
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, output)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", output.display()));
    }
    Ok((entries, bytes))
}

/// Every path under `dir` (itself included), sorted, each marked when a
/// directory.
fn collect(dir: &Path, out: &mut Vec<(PathBuf, bool)>) -> Result<()> {
    out.push((dir.to_path_buf(), true));
    let mut children: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    children.sort_by_key(std::fs::DirEntry::file_name);
    for child in children {
        let kind = child.file_type()?;
        if kind.is_dir() {
            collect(&child.path(), out)?;
        } else if kind.is_file() {
            out.push((child.path(), false));
        } else {
            bail!(
                "{} is a symlink or special file: a plugin is plain files",
                child.path().display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_tree(files: &[(&str, &str)]) -> Scratch {
        let s = Scratch::new().unwrap();
        for (path, text) in files {
            let p = s.0.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        s
    }

    #[test]
    fn relative_local_packages_are_anchored_to_the_project() {
        let mut lock = serde_json::json!({
            "dependencies": { "a": "file:../sdk/a.tgz", "b": "^1.0.0", "c": "file:/abs/c.tgz" },
            "packages": { "node_modules/a": { "resolved": "file:../sdk/a.tgz" } }
        });
        anchor_local_specs(&mut lock, Path::new("/home/me/plugin"));
        assert_eq!(
            lock["dependencies"]["a"],
            "file:/home/me/plugin/../sdk/a.tgz"
        );
        assert_eq!(lock["dependencies"]["b"], "^1.0.0");
        assert_eq!(lock["dependencies"]["c"], "file:/abs/c.tgz");
        assert_eq!(
            lock["packages"]["node_modules/a"]["resolved"],
            "file:/home/me/plugin/../sdk/a.tgz"
        );
    }

    #[test]
    fn the_kind_is_told_by_the_files_at_the_top() {
        let rust = scratch_tree(&[("Cargo.toml", ""), ("plugin.py", "")]);
        assert_eq!(Kind::of(&rust.0), Kind::Rust);
        let node = scratch_tree(&[("package.json", "{}")]);
        assert_eq!(Kind::of(&node.0), Kind::Node);
        let python = scratch_tree(&[("plugin.py", "")]);
        assert_eq!(Kind::of(&python.0), Kind::Python);
        let plain = scratch_tree(&[("bin/run", "")]);
        assert_eq!(Kind::of(&plain.0), Kind::Plain);
    }

    #[test]
    fn sources_leave_out_ignored_files_version_control_and_build_trees() {
        let src = scratch_tree(&[
            ("plugin.py", "code"),
            ("notes.txt", "kept"),
            ("secret.env", "TOKEN=1"),
            (".gitignore", "*.env\n/build/\n"),
            (".toolhostignore", "notes.txt\n"),
            ("build/x", "ignored by .gitignore"),
            (".git/config", "vcs"),
            (".venv/pyvenv.cfg", "a venv"),
            ("pkg/__pycache__/m.pyc", "cache"),
            ("pkg/m.py", "module"),
        ]);
        let out = Scratch::new().unwrap();
        copy_sources(&src.0, &out.0, Kind::Python, Path::new("/nowhere")).unwrap();
        let mut got = Vec::new();
        collect(&out.0, &mut got).unwrap();
        let mut got: Vec<String> = got
            .iter()
            .filter(|(_, d)| !d)
            .map(|(p, _)| p.strip_prefix(&out.0).unwrap().display().to_string())
            .collect();
        got.sort();
        assert_eq!(
            got,
            [".gitignore", ".toolhostignore", "pkg/m.py", "plugin.py"]
        );
    }

    #[test]
    fn a_link_in_the_sources_is_refused_with_what_to_do() {
        let src = scratch_tree(&[("plugin.py", "")]);
        std::os::unix::fs::symlink("/etc/passwd", src.0.join("passwd")).unwrap();
        let out = Scratch::new().unwrap();
        let err = copy_sources(&src.0, &out.0, Kind::Python, Path::new("/nowhere"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("passwd is a symlink"), "{err}");
        assert!(err.contains(".toolhostignore"), "{err}");
    }

    #[test]
    fn the_archive_is_the_plugin_under_its_id_and_deterministic() {
        let tree = scratch_tree(&[("demo/plugin.toml", "x"), ("demo/bin/run", "#!/bin/sh\n")]);
        let out = Scratch::new().unwrap();
        let (a, b) = (out.0.join("a.tar.gz"), out.0.join("b.tar.gz"));
        let (entries, bytes) = write_archive(&tree.0, "demo", &a).unwrap();
        write_archive(&tree.0, "demo", &b).unwrap();
        assert_eq!((entries, bytes), (4, 11));
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        let mut names: Vec<String> = tar::Archive::new(flate2::read::GzDecoder::new(
            std::fs::File::open(&a).unwrap(),
        ))
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
        names.sort();
        assert_eq!(
            names,
            ["demo", "demo/bin", "demo/bin/run", "demo/plugin.toml"]
        );
    }
}
