//! The running plugins, by id, as the pipeline sees them at call time.

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_runtime::{Phase, PluginClient, PluginHandle};

/// Supervised plugins by id. Readers never lock; the set is replaced whole
/// when a plugin is added or removed.
#[derive(Debug, Default)]
pub struct Plugins {
    map: ArcSwap<HashMap<String, Arc<PluginHandle>>>,
}

impl Plugins {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the plugin with this handle's id.
    pub fn insert(&self, handle: Arc<PluginHandle>) {
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(handle.id().to_owned(), Arc::clone(&handle));
            m
        });
    }

    /// Removes a plugin, returning its handle.
    pub fn remove(&self, id: &str) -> Option<Arc<PluginHandle>> {
        let mut removed = None;
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            removed = m.remove(id);
            m
        });
        removed
    }

    /// The handle of a plugin.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<Arc<PluginHandle>> {
        self.map.load().get(id).cloned()
    }

    /// All handles, sorted by id.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<PluginHandle>> {
        let mut v: Vec<_> = self.map.load().values().cloned().collect();
        v.sort_by(|a, b| a.id().cmp(b.id()));
        v
    }

    /// A client for `id` running `version`, or why there is none, in words
    /// for the model.
    pub fn client(&self, id: &str, version: &str) -> Result<PluginClient, String> {
        let Some(h) = self.get(id) else {
            return Err(format!("plugin {id} is not installed"));
        };
        if h.version() != version {
            return Err(format!("plugin {id} is being upgraded; try again shortly"));
        }
        let state = h.state();
        match (state.phase, state.client) {
            (Phase::Ready, Some(c)) if !c.is_gone() => Ok(c),
            (Phase::Starting | Phase::Ready, _) => {
                Err(format!("plugin {id} is starting; try again shortly"))
            }
            (Phase::Restarting, _) => Err(format!(
                "plugin {id} is restarting after a failure; try again shortly"
            )),
            (Phase::Stopped, _) => Err(format!("plugin {id} is stopped")),
            (Phase::Failed, _) => Err(format!("plugin {id} has failed and is not running")),
        }
    }
}
