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
use std::process::ExitCode;
use toolhost_base::{errln, outln};
use toolhost_manifest::Manifest;
use toolhost_package::ArchiveLimits;

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
    /// Push the package (and its signature) to an OCI registry once it is
    /// written: REGISTRY/REPO:TAG, as `toolhost push` does.
    #[arg(long, value_name = "REF")]
    pub push: Option<String>,
}

/// The files and folders at a plugin's top that `pack` reads by name
/// (to tell how it is built, and to build it): each must be the plugin's
/// own, never a link. A cloned plugin's `dist` linked to the author's home
/// would otherwise be copied into the package.
const READ_BY_NAME: [&str; 8] = [
    "Cargo.toml",
    "package.json",
    "package-lock.json",
    ".npmrc",
    "requirements.txt",
    "pyproject.toml",
    "dist",
    "node_modules",
];

/// Refuses a plugin whose top holds a link where `pack` reads by name.
fn refuse_links(dir: &Path) -> Result<()> {
    for name in READ_BY_NAME {
        if std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "{name} is a symlink: toolhost pack reads only the plugin's own files (a link may point anywhere on this machine). Replace it with what it points to"
            );
        }
    }
    Ok(())
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
    run_to(args).map(|(code, _)| code)
}

/// [`run`], with the archive it wrote (`None` when nothing was).
///
/// # Errors
/// As [`run`].
pub fn run_to(args: &PackArgs) -> Result<(ExitCode, Option<PathBuf>)> {
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
            return Ok((ExitCode::from(1), None));
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
    refuse_links(&dir)?;
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
        Kind::Rust => crate::build::build_rust(&dir, &root)?,
        Kind::Python => crate::build::vendor_python(&dir, &root)?,
        Kind::Node => crate::build::build_node(&dir, &root, &scratch.0)?,
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
    refuse_unless_code_agrees(&packed, &args.set, &dir)?;
    write_package(&scratch.0, &packed, &output, key.as_ref())?;
    if args.push.is_none() {
        outln!("install it: toolhost plugins install {}", output.display());
    }
    Ok((ExitCode::SUCCESS, Some(output)))
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
    // The statement lists files, and an installer refuses a folder that
    // holds none of them: empty folders are left out (innermost first).
    for folder in toolhost_package::statement::empty_folders(&root)? {
        std::fs::remove_dir(root.join(&folder))
            .with_context(|| format!("cannot leave out the empty folder {folder}"))?;
    }
    // The statement names exactly what the archive holds: written last,
    // once nothing else will change in the tree.
    let statement = crate::sign::write_statement(&root, packed)?;
    let signature = crate::sign::with_suffix(output, toolhost_package::statement::SIGNATURE_SUFFIX);
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
fn code_agrees(packed: &Manifest, set: &[String], source: &Path) -> Result<Compared> {
    let values = crate::code::parse_sets(set)?;
    let mut agrees = Compared::Agrees;
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
                    .map(|d| toolhost_lifecycle::drift::drift(m, &d.shapes, source))
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
                if !drift.is_empty() || !s.unimplemented.is_empty() {
                    agrees = Compared::Drifts;
                } else if s.described.is_some() {
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
                agrees = Compared::DoesNotStart;
            }
        },
    )?;
    Ok(agrees)
}

/// Nothing is written unless the packed plugin starts and its code states
/// what its manifest declares.
fn refuse_unless_code_agrees(packed: &Manifest, set: &[String], source: &Path) -> Result<()> {
    match code_agrees(packed, set, source)? {
        Compared::Agrees => Ok(()),
        Compared::Drifts => {
            bail!("the packed plugin's code and its manifest disagree; nothing written")
        }
        Compared::DoesNotStart => bail!(
            "the packed plugin does not start (its error is above: a dependency the package lacks, \
             or one its build did not vendor?); nothing written"
        ),
    }
}

/// What starting the packed plugin found.
enum Compared {
    /// Its code states what its manifest declares (or it was not compared).
    Agrees,
    /// They differ, or a declared tool has no handler.
    Drifts,
    /// It did not start.
    DoesNotStart,
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
        toolhost_package::archive::check(&tmp, limits).map(|_| ())
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

    /// A cloned plugin whose `dist` is a link to the author's home: pack
    /// refuses before it reads through it.
    #[test]
    fn a_link_where_pack_reads_by_name_is_refused() {
        let secret = scratch_tree(&[("id_ed25519", "PRIVATE")]);
        for name in READ_BY_NAME {
            let src = scratch_tree(&[("plugin.py", "")]);
            std::os::unix::fs::symlink(&secret.0, src.0.join(name)).unwrap();
            let err = refuse_links(&src.0).unwrap_err().to_string();
            assert!(err.contains(&format!("{name} is a symlink")), "{err}");
        }
        let plain = scratch_tree(&[("plugin.py", ""), ("dist/x.js", "")]);
        assert!(refuse_links(&plain.0).is_ok());
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
