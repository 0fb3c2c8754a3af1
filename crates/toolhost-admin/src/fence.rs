//! The catalog fence, kept across restarts (managed mode).
//!
//! A backend's generations are fenced by their epoch (docs/CONTRACT.md §2):
//! a new generation must carry a greater epoch than the current one. The
//! store knows the current version only while it runs, so after every
//! accepted push the version is written to `<state_dir>/catalog-fence.json`
//! (0600, written whole and renamed into place), and read back at start.
//! Without it, a delayed push from a dead backend could take over a freshly
//! restarted toolhost.
//!
//! To reset the fence on purpose (a backend whose epochs restarted from a
//! lower number), stop toolhost and delete the file.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use toolhost_catalog::{Fence, Store};

/// Why the fence file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// Reading or writing failed.
    #[error("catalog fence {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a fence.
    #[error(
        "catalog fence {path} is unreadable ({detail}); to reset the fence on purpose, stop toolhost and delete it"
    )]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
}

/// Serializes writers, so the file never goes back to an older version.
static WRITING: Mutex<()> = Mutex::new(());

/// The fence in `path`, if there is one.
pub fn load(path: &Path) -> Result<Option<Fence>, FenceError> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FenceError::Io {
            path: path.display().to_string(),
            source,
        }),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| FenceError::Corrupt {
                path: path.display().to_string(),
                detail: e.to_string(),
            }),
    }
}

/// Writes the store's fence to `path` (a no-op before any version).
pub fn persist(store: &Store, path: &Path) -> Result<(), FenceError> {
    let _one_at_a_time = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(fence) = store.fence() else {
        return Ok(());
    };
    let err = |source| FenceError::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(&fence).map_err(|e| err(std::io::Error::other(e)))?;
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(err)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
        f.write_all(&bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)
}
