//! Start-up: one ordered sequence. Read the state file, delete what an
//! interrupted operation left behind, validate the whole set, start every
//! enabled plugin that has its configuration, and (without a backend)
//! publish the first catalog revision and start the authority.

use super::core::{Lifecycle, LifecycleConfig, LifecycleError, io, resolve_for};
use super::records::{Inner, Origin, Record, clean};
use crate::files::{StateFile, private_dir, version_dir};
use crate::settings::Stored;
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use toolhost_catalog::Store;
use toolhost_manifest::{check_set, expand_plugin_dirs};
use toolhost_runtime::Plugins;

impl Lifecycle {
    /// Loads what is installed, removes what an interrupted operation left
    /// behind, starts every enabled plugin, and (embedded mode) publishes the
    /// first catalog revision. Returns the lifecycle and the problems of
    /// plugins that were not loaded.
    ///
    /// Kept whole on purpose: start-up is one ordered sequence (read the state,
    /// clean leftovers, validate the set, start, publish), and each step
    /// feeds the next.
    pub fn open(
        cfg: LifecycleConfig,
        store: Arc<Store>,
        plugins: Arc<Plugins>,
    ) -> Result<(Arc<Self>, Vec<String>), LifecycleError> {
        // Plugin data holds agent text: nobody else may read the state.
        private_dir(&cfg.state_dir)
            .map_err(io("cannot create the state directory", &cfg.state_dir))?;
        let state_path = cfg.state_dir.join("plugins.json");
        let file = StateFile::load(&state_path)
            .map_err(io("cannot read the plugin state", &state_path))?;
        let install_dir = cfg.state_dir.join("plugins");
        clean(&install_dir, &file);

        let (static_dirs, mut problems) = expand_plugin_dirs(&cfg.static_paths);
        let installed_dirs: Vec<PathBuf> = file
            .installed
            .iter()
            .map(|(id, v)| version_dir(&install_dir, id, v))
            .collect();
        let all: Vec<PathBuf> = static_dirs
            .iter()
            .cloned()
            .chain(installed_dirs.iter().cloned())
            .collect();
        let set = check_set(&cfg.prefix, &all);
        // A configured or installed plugin with a broken schema serves its
        // other tools; the broken one is withheld by the catalog.
        for m in &set.plugins {
            for d in &m.defects {
                tracing::error!(plugin = %m.id, "tool withheld: {d}");
            }
        }
        let mut warnings: Vec<String> = problems
            .drain(..)
            .chain(set.problems)
            .map(|p| p.to_string())
            .collect();
        let mut records = BTreeMap::new();
        for m in set.plugins {
            let origin = if installed_dirs.contains(&m.dir) {
                Origin::Installed
            } else {
                Origin::Static
            };
            let enabled = !file.disabled.contains(&m.id);
            let resolved = resolve_for(&cfg, &m, &mut warnings);
            records.insert(
                m.id.clone(),
                Record {
                    manifest: m,
                    origin,
                    enabled,
                    handle: None,
                    resolved,
                    listable: true,
                },
            );
        }
        for id in file.installed.keys() {
            if !records.contains_key(id) {
                warnings.push(format!("installed plugin {id} could not be loaded"));
            }
        }
        let installed = Arc::new(ArcSwap::from_pointee(super::core::judged_against(
            &cfg,
            records.values().map(|r| &r.manifest),
            &file,
        )));
        let (tx, rx) = mpsc::unbounded_channel();
        let lc_state_dir = cfg.state_dir.clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let lc = Arc::new(Self {
            inner: Mutex::new(Inner {
                records,
                file,
                generation: format!("embedded-{now}-{}", std::process::id()),
                revision: 0,
                listed: None,
                held_values: BTreeMap::new(),
            }),
            cfg,
            store,
            plugins,
            installed,
            ops: tokio::sync::Mutex::new(()),
            publishing: Mutex::new(()),
            recompute: tx,
            stored: Stored::new(&lc_state_dir),
            disk: Mutex::new(super::disk::DiskBook::default()),
            closing: std::sync::atomic::AtomicBool::new(false),
            placed: std::sync::Mutex::new(super::placed::PlacementBook::default()),
            placing: tokio::sync::Mutex::new(()),
        });
        tokio::spawn(super::quota::watch(Arc::downgrade(&lc)));
        {
            let mut inner = lc.lock();
            let ids: Vec<String> = inner
                .records
                .iter()
                .filter(|(_, r)| r.enabled)
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                if let Some(r) = inner.records.get_mut(&id) {
                    if r.resolved.missing.is_empty() {
                        r.handle = Some(lc.start(&r.manifest, &r.resolved));
                    } else {
                        tracing::warn!(plugin = %id, missing = ?r.resolved.missing, "plugin not started: it needs configuration");
                        lc.plugins.set_needs_config(&id, &r.resolved.missing);
                    }
                }
            }
        }
        if !lc.cfg.managed {
            lc.publish();
            tokio::spawn(super::authority::run(Arc::clone(&lc), rx));
        }
        Ok((lc, warnings))
    }
}
