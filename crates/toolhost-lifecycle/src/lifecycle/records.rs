//! The plugins as recorded: each one's manifest, origin, whether it is
//! enabled, its process and its resolved configuration; and the state file
//! (`<state_dir>/plugins.json`), the commit point of every operation. A
//! version directory is placed (one rename from `.staging-*`) before it is
//! recorded, and anything the state file does not name is deleted at
//! start-up ([`clean`]), so nothing is ever half-installed.

use crate::files::StateFile;
use crate::settings::Resolved;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use toolhost_manifest::Manifest;
use toolhost_runtime::PluginHandle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Static,
    Installed,
}

#[derive(Debug)]
pub(super) struct Record {
    pub(super) manifest: Manifest,
    pub(super) origin: Origin,
    pub(super) enabled: bool,
    pub(super) handle: Option<Arc<PluginHandle>>,
    /// Its configuration, resolved; a plugin with a required item missing
    /// is not started.
    pub(super) resolved: Resolved,
    /// Its tools may be listed: it was present at start-up, or has been ready
    /// since it was installed or enabled.
    pub(super) listable: bool,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) records: BTreeMap<String, Record>,
    pub(super) file: StateFile,
    pub(super) generation: String,
    pub(super) revision: u64,
    /// (id, version) of the plugins in the last published snapshot.
    pub(super) listed: Option<Vec<(String, String)>>,
    /// Configuration values given with an upgrade that was held, for its
    /// acceptance; in memory only (they may be secrets).
    pub(super) held_values: BTreeMap<String, BTreeMap<String, String>>,
}

/// Removes staging directories and installed versions the state file does
/// not name: the leftovers of an interrupted install or upgrade.
pub(super) fn clean(install_dir: &Path, file: &StateFile) {
    let Ok(entries) = std::fs::read_dir(install_dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let keep = name.split_once('@').is_some_and(|(id, v)| {
            file.installed.get(id).is_some_and(|iv| iv == v)
                || file.held.get(id).is_some_and(|h| h.version == v)
        });
        if !keep {
            tracing::warn!(leftover = %name, "removing what an interrupted install or upgrade left behind");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

    use super::super::fixture::{Scratch, config, open, plugin};
    use super::*;
    use crate::files::version_dir;

    #[test]
    fn start_up_deletes_what_the_state_file_does_not_name() {
        let state = Scratch::new("clean");
        let installed = state.0.join("plugins");
        std::fs::create_dir_all(&installed).unwrap();
        // An interrupted install: a staging directory, and a version
        // directory placed but never recorded.
        std::fs::create_dir_all(installed.join(".staging-123")).unwrap();
        let placed = version_dir(&installed, "tp", "1.0.0");
        std::fs::create_dir_all(&placed).unwrap();
        let file = StateFile::default();
        clean(&installed, &file);
        assert!(!placed.exists(), "an unrecorded version directory is gone");
        assert!(!installed.join(".staging-123").exists());
        // A recorded one stays.
        let recorded = StateFile {
            installed: BTreeMap::from([("tp".to_owned(), "1.0.0".to_owned())]),
            ..StateFile::default()
        };
        std::fs::create_dir_all(&placed).unwrap();
        clean(&installed, &recorded);
        assert!(placed.exists());
    }

    #[tokio::test]
    async fn a_recorded_plugin_is_loaded_with_its_state_and_origin() {
        let state = Scratch::new("records");
        let installed = state.0.join("plugins");
        let source = plugin(&state.0, "tp", "1.0.0");
        let placed = version_dir(&installed, "tp", "1.0.0");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::rename(&source, &placed).unwrap();
        let file = StateFile {
            installed: BTreeMap::from([("tp".to_owned(), "1.0.0".to_owned())]),
            disabled: ["tp".to_owned()].into(),
            ..StateFile::default()
        };
        file.save(&state.0.join("plugins.json")).unwrap();
        let (lc, _store, warnings) = open(config(&state.0));
        assert!(warnings.is_empty(), "{warnings:?}");
        let list = lc.list();
        assert_eq!(list.len(), 1);
        assert_eq!(
            (list[0].id.as_str(), list[0].origin, list[0].enabled),
            ("tp", "installed", false)
        );
        // What is saved is what was loaded.
        lc.save(&lc.lock()).unwrap();
        let again = StateFile::load(&state.0.join("plugins.json")).unwrap();
        assert_eq!(again.installed, file.installed);
        assert_eq!(again.disabled, file.disabled);
    }
}
