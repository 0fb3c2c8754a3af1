//! A JSON document in the plugin's data directory, for a plugin whose
//! state is small enough to read and write whole.
//!
//! Two things go wrong when every plugin writes this by hand: concurrent
//! calls each read the file, change their copy and write it back, so one
//! call's change is lost; and a crash in the middle of a write leaves half a
//! file, which the next read takes for "no data". [`DataFile::update`]
//! holds one lock (for every data file of the process) from the read to the
//! write, and every write goes to a temporary file that is synced and then
//! renamed over the old one, so a reader sees the old document or the new,
//! never a mix.
//!
//! ```no_run
//! use toolhost_plugin_sdk::{DataFile, ToolError};
//!
//! static COUNTS: DataFile = DataFile::new("counts.json");
//!
//! fn bump() -> Result<u64, ToolError> {
//!     COUNTS.update(|n: &mut u64| {
//!         *n += 1;
//!         Ok(*n)
//!     })
//! }
//! ```
//!
//! The lock is held while the closure runs, so the closure must not wait
//! for anything slow: ask the user a question before the update, not inside
//! it. The file's path is the data directory toolhost names
//! (`ToolCall::data_dir`), or the working directory when there is none (a
//! plugin run by a test).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::output::ToolError;

/// One lock for every data file: updates are rare and short, and one lock
/// cannot be taken in two orders.
static WRITING: Mutex<()> = Mutex::new(());

#[cfg(not(test))]
fn data_dir() -> Option<PathBuf> {
    crate::call::ToolCall::data_dir()
}

/// The tests' data directory: the process's is set once, and tests run side
/// by side.
#[cfg(test)]
static TEST_DATA_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

#[cfg(test)]
fn data_dir() -> Option<PathBuf> {
    TEST_DATA_DIR.lock().ok().and_then(|dir| dir.clone())
}

/// A JSON document named `name` in the plugin's data directory.
#[derive(Debug, Clone, Copy)]
pub struct DataFile {
    name: &'static str,
}

impl DataFile {
    /// The document `name`: a plain file name, without a directory.
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }

    /// Where the document lives.
    ///
    /// # Errors
    /// When the name is not a plain file name (it names a directory, or
    /// climbs out of the data directory).
    pub fn path(&self) -> Result<PathBuf, ToolError> {
        let plain = !self.name.is_empty()
            && self.name != "."
            && self.name != ".."
            && !self.name.contains(['/', '\\', '\0']);
        if !plain {
            return Err(ToolError::new(format!(
                "the plugin's data file name {:?} is not a plain file name",
                self.name
            )));
        }
        Ok(data_dir()
            .unwrap_or_else(|| PathBuf::from("."))
            .join(self.name))
    }

    /// The document, or `T::default()` when it has never been written.
    ///
    /// # Errors
    /// When the file cannot be read or does not hold a `T`: the error says
    /// which file, so the plugin's operator can look at it; the plugin does
    /// not start again from nothing over data it could not read.
    pub fn load<T: DeserializeOwned + Default>(&self) -> Result<T, ToolError> {
        let path = self.path()?;
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
            Err(e) => return Err(self.failed("read", &e)),
        };
        serde_json::from_slice(&text).map_err(|e| self.failed("understand", &e))
    }

    /// Replaces the document with `value`, whole.
    ///
    /// # Errors
    /// When the new document cannot be written; the old one is then left
    /// as it was.
    pub fn save<T: Serialize>(&self, value: &T) -> Result<(), ToolError> {
        let _writing = WRITING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.replace(value)
    }

    /// Reads the document, lets `change` change it, and writes it back when
    /// `change` succeeds, with no other update in between. What `change`
    /// returns is the result; when it fails, nothing is written.
    ///
    /// # Errors
    /// `change`'s error, or the document could not be read or written.
    pub fn update<T, R>(
        &self,
        change: impl FnOnce(&mut T) -> Result<R, ToolError>,
    ) -> Result<R, ToolError>
    where
        T: Serialize + DeserializeOwned + Default,
    {
        let _writing = WRITING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut document = self.load()?;
        let result = change(&mut document)?;
        self.replace(&document)?;
        Ok(result)
    }

    fn replace<T: Serialize>(&self, value: &T) -> Result<(), ToolError> {
        let path = self.path()?;
        let text = serde_json::to_vec(value).map_err(|e| self.failed("encode", &e))?;
        let temporary = path.with_file_name(format!(".{}.writing", self.name));
        let written = std::fs::File::create(&temporary)
            .and_then(|mut file| {
                file.write_all(&text)?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, &path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            self.failed("write", &e)
        })
    }

    fn failed(&self, doing: &str, error: &dyn std::fmt::Display) -> ToolError {
        ToolError::new(format!(
            "the plugin could not {doing} its data file {}: {error}",
            self.name
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests say what they expect

    use super::*;

    /// Runs `f` with a fresh data directory, one test at a time.
    fn in_temp_dir<R>(f: impl FnOnce(&std::path::Path) -> R) -> R {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _one = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = std::env::temp_dir().join(format!("sdk-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        *TEST_DATA_DIR.lock().unwrap() = Some(dir.clone());
        let out = f(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    #[test]
    fn a_document_never_written_is_the_default_and_an_update_is_kept() {
        in_temp_dir(|_| {
            let file = DataFile::new("counts.json");
            assert_eq!(file.load::<Vec<u32>>().unwrap(), Vec::<u32>::new());
            let n = file
                .update(|v: &mut Vec<u32>| {
                    v.push(7);
                    Ok(v.len())
                })
                .unwrap();
            assert_eq!(n, 1);
            assert_eq!(file.load::<Vec<u32>>().unwrap(), vec![7]);
        });
    }

    #[test]
    fn a_failed_change_writes_nothing_and_concurrent_updates_lose_nothing() {
        in_temp_dir(|_| {
            let file = DataFile::new("many.json");
            let refused = file.update(|v: &mut Vec<u32>| -> Result<(), ToolError> {
                v.push(1);
                Err(ToolError::new("no"))
            });
            assert!(refused.is_err());
            assert!(!file.path().unwrap().exists());
            std::thread::scope(|s| {
                for i in 0..8 {
                    s.spawn(move || {
                        for j in 0..25 {
                            file.update(|v: &mut Vec<u32>| {
                                v.push(i * 100 + j);
                                Ok(())
                            })
                            .unwrap();
                        }
                    });
                }
            });
            assert_eq!(file.load::<Vec<u32>>().unwrap().len(), 200);
        });
    }

    #[test]
    fn a_damaged_document_is_an_error_that_names_the_file_and_is_not_replaced() {
        in_temp_dir(|dir| {
            std::fs::write(dir.join("broken.json"), b"[1, 2").unwrap();
            let file = DataFile::new("broken.json");
            let err = file.load::<Vec<u32>>().unwrap_err();
            assert!(
                err.message
                    .contains("could not understand its data file broken.json")
            );
            assert!(file.update(|v: &mut Vec<u32>| Ok(v.len())).is_err());
            assert_eq!(std::fs::read(dir.join("broken.json")).unwrap(), b"[1, 2");
        });
    }

    #[test]
    fn a_name_that_leaves_the_data_directory_is_refused() {
        for name in ["", ".", "..", "../x.json", "a/b.json", "a\\b"] {
            assert!(DataFile::new(name).path().is_err(), "{name:?}");
        }
    }
}
