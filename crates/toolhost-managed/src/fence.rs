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
//!
//! Beside it, `catalog-last-good.pb` keeps the snapshot of that version as
//! the backend pushed it (the wire bytes of `toolhost.admin.v1.Snapshot`,
//! 0600). At start, before the backend has pushed, toolhost serves it
//! instead of nothing, offered like a push, but only when it is exactly
//! the version the fence names and the bytes the fence's digest names: a
//! crash between the two writes leaves a pair that does not match, and
//! then nothing is restored. The snapshot (megabytes for a large catalog)
//! is written without waiting for the disk, on every daemon of a fleet at
//! once; the fence (small, synced) is what makes a torn or old snapshot
//! after a power loss show.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use toolhost_base::files::{write_private, write_private_unsynced};
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

/// The fence file: the store's fence, and the SHA-256 of the last-good
/// snapshot written for it (absent in files from before the digest, whose
/// snapshot was synced to disk before the fence).
#[derive(serde::Serialize, serde::Deserialize)]
struct FenceFile {
    #[serde(flatten)]
    fence: Fence,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_good_sha256: Option<String>,
}

fn read_fence_file(path: &Path) -> Result<Option<FenceFile>, FenceError> {
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

/// The fence in `path`, if there is one.
pub fn load(path: &Path) -> Result<Option<Fence>, FenceError> {
    Ok(read_fence_file(path)?.map(|f| f.fence))
}

/// Writes the store's fence to `path` (a no-op before any version),
/// keeping the digest of the last-good snapshot already there.
pub fn persist(store: &Store, path: &Path) -> Result<(), FenceError> {
    let _one_at_a_time = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    write_fence_keeping_digest(store, path)
}

/// The fence rewritten with the digest of the snapshot already on disk:
/// for a write that brings no snapshot, so the one there stays checked.
fn write_fence_keeping_digest(store: &Store, path: &Path) -> Result<(), FenceError> {
    let digest = read_fence_file(path)
        .ok()
        .flatten()
        .and_then(|f| f.last_good_sha256);
    write_fence(store, path, digest)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The most a last-good snapshot may take on disk: more is not read.
pub const MAX_LAST_GOOD_BYTES: u64 = 64 * 1024 * 1024;

/// Where the last-good snapshot is kept: beside the fence at `fence`.
#[must_use]
pub fn last_good_path(fence: &Path) -> PathBuf {
    fence.with_file_name("catalog-last-good.pb")
}

/// After a push the store took: the pushed snapshot (`pushed`, its wire
/// bytes, of version `version`), then the fence, under one lock. The
/// snapshot is written only while it is still the store's version, so a
/// slower writer of an older push cannot put it back.
pub fn persist_push(
    store: &Store,
    path: &Path,
    pushed: &[u8],
    version: (&str, u64, u64),
) -> Result<(), FenceError> {
    let _one_at_a_time = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    let current = store
        .fence()
        .is_some_and(|f| (f.generation.as_str(), f.epoch, f.revision) == version);
    if !current {
        // A newer push wrote its snapshot and digest first.
        return write_fence_keeping_digest(store, path);
    }
    let last_good = last_good_path(path);
    write_private_unsynced(&last_good, pushed).map_err(|source| FenceError::Io {
        path: last_good.display().to_string(),
        source,
    })?;
    write_fence(store, path, Some(sha256_hex(pushed)))
}

/// The last-good snapshot beside the fence at `path`, if there is one.
pub fn load_last_good(path: &Path) -> Result<Option<toolhost_catalog::Snapshot>, FenceError> {
    use prost::Message as _;
    let last_good = last_good_path(path);
    let shown = last_good.display().to_string();
    let corrupt = |detail: String| FenceError::Corrupt {
        path: shown.clone(),
        detail,
    };
    let file = match std::fs::File::open(&last_good) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FenceError::Io {
                path: shown.clone(),
                source,
            });
        }
        Ok(f) => f,
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_LAST_GOOD_BYTES + 1),
        &mut bytes,
    )
    .map_err(|source| FenceError::Io {
        path: shown.clone(),
        source,
    })?;
    if bytes.len() as u64 > MAX_LAST_GOOD_BYTES {
        return Err(corrupt(format!("larger than {MAX_LAST_GOOD_BYTES} bytes")));
    }
    let named = read_fence_file(path)?.and_then(|f| f.last_good_sha256);
    if let Some(named) = named
        && named != sha256_hex(&bytes)
    {
        return Err(corrupt(
            "not the snapshot the catalog fence names (a write cut short by a crash)".to_owned(),
        ));
    }
    let proto = toolhost_proto::admin::Snapshot::decode(bytes.as_slice())
        .map_err(|e| corrupt(e.to_string()))?;
    crate::convert::snapshot_from_proto(proto)
        .map(Some)
        .map_err(|reasons| corrupt(reasons.join("; ")))
}

fn write_fence(
    store: &Store,
    path: &Path,
    last_good_sha256: Option<String>,
) -> Result<(), FenceError> {
    let Some(fence) = store.fence() else {
        return Ok(());
    };
    let err = |source| FenceError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = FenceFile {
        fence,
        last_good_sha256,
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| err(std::io::Error::other(e)))?;
    write_private(path, &bytes).map_err(err)
}
