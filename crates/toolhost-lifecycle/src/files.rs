//! File operations: staging, the state file, copying and unpacking.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use toolhost_package::archive::ArchiveLimits;

/// Creates `dir` (and its parents) private (`toolhost_base::files`'s one
/// rule): the state directory and plugin data hold agent text.
pub use toolhost_base::files::private_dir;

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// `<state_dir>/plugins.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    /// Installed (not static) plugins: id -> version.
    #[serde(default)]
    pub installed: BTreeMap<String, String>,
    /// Disabled plugins (installed or static).
    #[serde(default)]
    pub disabled: BTreeSet<String>,
    /// Installed plugins a trusted key signed: id -> the whole public key
    /// (base64; a record made before keys were stored whole holds its id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signers: BTreeMap<String, String>,
    /// Installed plugins pulled from a registry: id -> the reference pinned
    /// to the manifest's digest (`REGISTRY/REPO@sha256:HEX`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
    /// Installed plugins a placement placed: a later placement that does
    /// not name one removes it (and nothing else).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub placed: BTreeSet<String>,
    /// Upgrades placed but held for the operator: id -> the held version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub held: BTreeMap<String, HeldUpgrade>,
    /// In managed mode, the pushed contract the operator accepted per tool
    /// whose plugin's contract changes are held: exposed name -> contract
    /// fingerprint.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accepted_contracts: BTreeMap<String, String>,
}

/// An upgrade placed in its version directory and held for the operator
/// (`contract_changes = "hold"`, or a changed sandbox ask) while the
/// installed version keeps serving.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct HeldUpgrade {
    /// The held version.
    pub version: String,
    /// The key that signed it, if one did.
    #[serde(default)]
    pub signer: Option<String>,
    /// The registry reference it was pulled from, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why it is held.
    pub why: String,
    /// What it changes (`crate::contract::changes`), texts escaped.
    #[serde(default)]
    pub changes: Vec<String>,
    /// The digest of its statement (`sha256:HEX`), recomputed from what was
    /// placed: what the operator reviews and names to accept it.
    #[serde(default)]
    pub statement: String,
    /// It goes back in version: the operator allowed it for this upgrade.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub downgrade: bool,
}

impl StateFile {
    pub(crate) fn load(path: &Path) -> std::io::Result<Self> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Written whole and privately (`toolhost_base::files::write_private`):
    /// a crash leaves the old state or the new.
    pub(crate) fn save(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        toolhost_base::files::write_private(path, &bytes)
    }
}

/// The directory of an installed version.
pub(crate) fn version_dir(install_dir: &Path, id: &str, version: &str) -> PathBuf {
    install_dir.join(format!("{id}@{version}"))
}

/// A fresh staging directory inside `install_dir` (same file system, so the
/// final move is one rename).
pub(crate) fn staging_dir(install_dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(install_dir)?;
    let dir = install_dir.join(format!(".staging-{:016x}", fastrand::u64(..)));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// Copies a plugin directory (or unpacks a `.tar.gz` of one) into `to`,
/// then normalizes every mode. Symlinks are refused: a plugin must not
/// reach outside its directory.
pub(crate) fn stage(from: &Path, to: &Path, limits: ArchiveLimits) -> std::io::Result<()> {
    let name = from
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if from.is_file() && (name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
        unpack(from, to, limits)?;
    } else {
        copy(from, to, limits)?;
    }
    normalize_modes(to)
}

/// Installed files are nobody else's to change: no write bit for group or
/// other, no setuid, setgid or sticky bit. The owner keeps read and write
/// (and search, on directories); execute bits are kept as packaged.
fn normalize_modes(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        let mode = entry.metadata()?.permissions().mode();
        let floor = if kind.is_dir() { 0o700 } else { 0o600 };
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode((mode & 0o755) | floor),
        )?;
        if kind.is_dir() {
            normalize_modes(&path)?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

fn copy(from: &Path, to: &Path, limits: ArchiveLimits) -> std::io::Result<()> {
    if !from.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is neither a plugin directory nor a .tar.gz of one",
                from.display()
            ),
        ));
    }
    let mut budget = Budget {
        limits,
        entries: 0,
        bytes: 0,
    };
    copy_dir(from, from, to, &mut budget)
}

/// Left out when a plugin directory is installed as it is: version
/// control and caches; and links to build tools (`.bin` in any
/// `node_modules`), which a plugin does not run. Nothing the plugin needs at run time.
const LEFT_OUT: [&str; 4] = [".git", ".hg", ".svn", "__pycache__"];

/// Build trees that make a directory a development tree, not a plugin: the
/// plugin runs on what is in them (a binary in `target/`, an interpreter
/// a venv links to outside the directory), so leaving them out would
/// install a plugin that cannot start, and copying them would copy
/// hundreds of megabytes. `toolhost pack` makes the plugin out of them.
const BUILD_TREES: [&str; 3] = ["target", ".venv", "venv"];

/// What has been copied so far, against the archive limits.
struct Budget {
    limits: ArchiveLimits,
    entries: u64,
    bytes: u64,
}

fn pack_hint(root: &Path) -> String {
    format!(
        "run `toolhost pack {}` and install the .tar.gz it writes: it holds what the plugin needs at run time",
        root.display()
    )
}

fn copy_dir(root: &Path, from: &Path, to: &Path, budget: &mut Budget) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let mut entries: Vec<_> = std::fs::read_dir(from)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let kind = entry.file_type()?;
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let rel_text = rel.to_string_lossy();
        let name = entry.file_name();
        let bin_links = name == ".bin" && from.file_name().is_some_and(|p| p == "node_modules");
        if bin_links || LEFT_OUT.contains(&name.to_string_lossy().as_ref()) {
            continue;
        }
        if kind.is_dir() && BUILD_TREES.contains(&rel_text.as_ref()) {
            return Err(invalid(format!(
                "{}/ is a build tree, not part of an installable plugin; {}",
                rel.display(),
                pack_hint(root)
            )));
        }
        budget.entries += 1;
        if budget.entries > budget.limits.max_entries {
            return Err(invalid(format!(
                "the directory holds more than {} entries (the limit); {}",
                budget.limits.max_entries,
                pack_hint(root)
            )));
        }
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(root, &path, &target, budget)?;
        } else if kind.is_file() {
            budget.bytes = budget.bytes.saturating_add(entry.metadata()?.len());
            if budget.bytes > budget.limits.max_bytes {
                return Err(invalid(format!(
                    "the directory holds more than {} bytes (the limit); {}",
                    budget.limits.max_bytes,
                    pack_hint(root)
                )));
            }
            std::fs::copy(&path, &target)?;
        } else {
            return Err(invalid(format!(
                "{} is a symlink or special file; plugins must be plain files, so {}",
                rel.display(),
                pack_hint(root)
            )));
        }
    }
    Ok(())
}

/// Unpacks a `.tar.gz` (`toolhost_package::archive`: every header bounded before
/// it is read, the caps counted from the size each entry's data will be
/// read with). If it holds a single top directory with a `plugin.toml`,
/// that directory is the plugin.
fn unpack(archive: &Path, to: &Path, limits: ArchiveLimits) -> std::io::Result<()> {
    let raw = to.join(".unpacked");
    std::fs::create_dir_all(&raw)?;
    toolhost_package::archive::unpack(archive, &raw, limits)?;
    let root = if raw.join("plugin.toml").is_file() {
        raw.clone()
    } else {
        let dirs: Vec<PathBuf> = std::fs::read_dir(&raw)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        match dirs.as_slice() {
            [one] if one.join("plugin.toml").is_file() => one.clone(),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the archive holds no plugin.toml",
                ));
            }
        }
    };
    for entry in std::fs::read_dir(&root)? {
        let entry = entry?;
        std::fs::rename(entry.path(), to.join(entry.file_name()))?;
    }
    std::fs::remove_dir_all(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory with `files` in it.
    fn tree(name: &str, files: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lc-copy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for f in files {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        dir
    }

    #[test]
    fn a_directory_installs_without_version_control_caches_or_bin_links() {
        let src = tree(
            "leave-out",
            &[
                "plugin.toml",
                ".git/HEAD",
                "pkg/__pycache__/m.pyc",
                "node_modules/a/index.js",
            ],
        );
        std::fs::create_dir_all(src.join("node_modules/.bin")).unwrap();
        std::os::unix::fs::symlink("../a/index.js", src.join("node_modules/.bin/a")).unwrap();
        let to = src.with_extension("out");
        let _ = std::fs::remove_dir_all(&to);
        copy(&src, &to, ArchiveLimits::default()).unwrap();
        assert!(to.join("plugin.toml").is_file());
        assert!(to.join("node_modules/a/index.js").is_file());
        for gone in [".git", "pkg/__pycache__", "node_modules/.bin"] {
            assert!(!to.join(gone).exists(), "{gone}");
        }
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&to);
    }

    #[test]
    fn a_build_tree_or_a_link_is_refused_with_what_to_do() {
        for (name, files) in [
            ("target", &["plugin.toml", "target/release/big"][..]),
            ("venv", &["plugin.toml", ".venv/pyvenv.cfg"][..]),
        ] {
            let src = tree(name, files);
            let to = src.with_extension("out");
            let err = copy(&src, &to, ArchiveLimits::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("is a build tree"), "{err}");
            assert!(
                err.contains(&format!("run `toolhost pack {}`", src.display())),
                "{err}"
            );
            let _ = std::fs::remove_dir_all(&src);
            let _ = std::fs::remove_dir_all(&to);
        }
        let src = tree("link", &["plugin.toml"]);
        std::os::unix::fs::symlink("/etc", src.join("etc")).unwrap();
        let to = src.with_extension("out");
        let err = copy(&src, &to, ArchiveLimits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("etc is a symlink or special file"), "{err}");
        assert!(err.contains("toolhost pack"), "{err}");
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&to);
    }

    #[test]
    fn a_directory_over_the_limits_is_refused_before_it_is_all_copied() {
        let src = tree("limits", &["plugin.toml", "a", "b", "c"]);
        let to = src.with_extension("out");
        let few = ArchiveLimits {
            max_bytes: 1 << 20,
            max_entries: 2,
        };
        let err = copy(&src, &to, few).unwrap_err().to_string();
        assert!(err.contains("more than 2 entries"), "{err}");
        let small = ArchiveLimits {
            max_bytes: 2,
            max_entries: 100,
        };
        let _ = std::fs::remove_dir_all(&to);
        let err = copy(&src, &to, small).unwrap_err().to_string();
        assert!(err.contains("more than 2 bytes"), "{err}");
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&to);
    }

    #[test]
    fn the_state_file_round_trips_and_a_missing_one_is_empty() {
        let dir = std::env::temp_dir().join(format!("lc-state-{}", std::process::id()));
        let path = dir.join("plugins.json");
        assert_eq!(StateFile::load(&path).ok(), Some(StateFile::default()));
        let mut s = StateFile::default();
        s.installed.insert("notes".into(), "1.0.0".into());
        s.disabled.insert("x".into());
        assert!(s.save(&path).is_ok());
        assert_eq!(StateFile::load(&path).ok(), Some(s));
        let _ = std::fs::remove_dir_all(dir);
    }
}
