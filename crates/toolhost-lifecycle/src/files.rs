//! File operations: staging, the state file, copying and unpacking.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// `<state_dir>/plugins.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    /// Installed (not static) plugins: id -> version.
    #[serde(default)]
    pub installed: BTreeMap<String, String>,
    /// Disabled plugins (installed or static).
    #[serde(default)]
    pub disabled: BTreeSet<String>,
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

    /// Written to a temporary file, synced, renamed over the old one, and
    /// the directory synced: a crash leaves the old state or the new.
    pub(crate) fn save(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".plugins.json.{}.tmp", std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
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

/// Copies a plugin directory (or unpacks a `.tar.gz` of one) into `to`.
/// Symlinks are refused: a plugin must not reach outside its directory.
pub(crate) fn stage(from: &Path, to: &Path) -> std::io::Result<()> {
    let name = from
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if from.is_file() && (name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
        return unpack(from, to);
    }
    if !from.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is neither a plugin directory nor a .tar.gz of one",
                from.display()
            ),
        ));
    }
    copy_dir(from, to)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is a symlink or special file; plugins must be plain files",
                    entry.path().display()
                ),
            ));
        }
    }
    Ok(())
}

/// Unpacks a `.tar.gz`. If it holds a single top directory with a
/// `plugin.toml`, that directory is the plugin. Entries escaping the target
/// (absolute paths, `..`) and links are refused.
fn unpack(archive: &Path, to: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(archive)?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let raw = to.join(".unpacked");
    std::fs::create_dir_all(&raw)?;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "archives may hold only files and directories",
            ));
        }
        // `unpack_in` refuses paths that escape `raw`.
        if !entry.unpack_in(&raw)? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an archive entry points outside the plugin",
            ));
        }
    }
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
