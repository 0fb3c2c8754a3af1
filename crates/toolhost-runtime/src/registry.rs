//! The running-plugin registry: which plugin processes this daemon
//! supervises, in which state, and which processes are theirs.
//!
//! The lifecycle writes it (a plugin started, replaced, removed, or held
//! back for configuration); the pipeline reads it at call time; the admin
//! socket asks it whether a peer is a plugin's process.
//!
//! During an upgrade two versions of a plugin run side by side: calls
//! authorized against the old declaration go to the old process, calls
//! against the new one to the new, so the switch fails no call the rules do
//! not say must fail. Hence the registry is keyed by id *and* version.
//!
//! Readers never lock: the maps are replaced whole on every change. The
//! set of process-group leaders ([`Leaders`]) is the registry's too.

use crate::client::PluginClient;
use crate::leaders::Leaders;
use crate::spec::PluginSpec;
use crate::supervisor::{Phase, PluginHandle, SupervisorConfig};
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;

/// Why no client for a plugin could be had. Each message is written for
/// the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginUnavailable {
    /// No process of this plugin is supervised.
    #[error("plugin {0} is not running")]
    NotRunning(String),
    /// This version is not (or no longer) running.
    #[error("plugin {0} is being upgraded; try again shortly")]
    Upgrading(String),
    /// Starting.
    #[error("plugin {0} is starting; try again shortly")]
    Starting(String),
    /// Waiting out a restart backoff.
    #[error("plugin {0} is restarting after a failure; try again shortly")]
    Restarting(String),
    /// Failing to start or crashing again and again.
    #[error(
        "plugin {id} is in a crash loop ({failures} failures in a row); it is not worth retrying until an operator has looked at it (`toolhost status`)"
    )]
    CrashLoop {
        /// The plugin.
        id: String,
        /// Failures since it was last ready.
        failures: u32,
    },
    /// Stopped on purpose.
    #[error("plugin {0} is stopped")]
    Stopped(String),
    /// Gave up after too many restarts.
    #[error("plugin {0} has failed and is not running")]
    Failed(String),
    /// Still not ready when the call's deadline ran out.
    #[error("plugin {id} did not become ready within the call's deadline of {ms} ms")]
    NotReadyInTime {
        /// The plugin.
        id: String,
        /// The deadline.
        ms: u128,
    },
    /// Not started: a required configuration value is missing.
    #[error("plugin {0} is not configured yet; an operator must supply its settings")]
    NeedsConfig(String),
    /// The caller cancelled while waiting.
    #[error("the call was cancelled by the client")]
    Cancelled,
}

/// Supervised plugins by id (and version). Readers never lock; the map is
/// replaced whole on every change.
#[derive(Debug, Default)]
pub struct Plugins {
    map: ArcSwap<HashMap<String, Vec<Arc<PluginHandle>>>>,
    /// Plugins held back for missing configuration: id -> missing items.
    needs_config: ArcSwap<std::collections::BTreeMap<String, Vec<String>>>,
    /// The process-group leaders of every process supervised through
    /// [`Plugins::supervise`].
    leaders: Leaders,
}

impl Plugins {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts supervising a plugin whose processes count as this
    /// registry's ([`Plugins::is_plugin_process`]). The handle is not
    /// registered: [`Plugins::insert`] does that when it should take calls.
    #[must_use]
    pub fn supervise(&self, spec: PluginSpec, config: SupervisorConfig) -> Arc<PluginHandle> {
        Arc::new(crate::supervisor::supervise_among(
            spec,
            config,
            self.leaders.clone(),
        ))
    }

    /// Whether `pid` is a process of one of these plugins, or one such a
    /// process started: the admin socket refuses such peers.
    #[must_use]
    pub fn is_plugin_process(&self, pid: u32) -> bool {
        self.leaders.is_plugin_process(pid)
    }

    /// Adds a handle, replacing one of the same id and version.
    pub fn insert(&self, handle: Arc<PluginHandle>) {
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            let versions = m.entry(handle.id().to_owned()).or_default();
            versions.retain(|h| h.version() != handle.version());
            versions.push(Arc::clone(&handle));
            m
        });
    }

    /// Removes one version of a plugin.
    pub fn remove_version(&self, id: &str, version: &str) {
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            if let Some(v) = m.get_mut(id) {
                v.retain(|h| h.version() != version);
                if v.is_empty() {
                    m.remove(id);
                }
            }
            m
        });
    }

    /// Records that `id` is not started for want of these configuration
    /// items (none: it no longer waits).
    pub fn set_needs_config(&self, id: &str, missing: &[String]) {
        self.needs_config.rcu(|m| {
            let mut m = std::collections::BTreeMap::clone(m);
            if missing.is_empty() {
                m.remove(id);
            } else {
                m.insert(id.to_owned(), missing.to_vec());
            }
            m
        });
    }

    /// Plugins waiting for configuration, and the items each misses.
    #[must_use]
    pub fn needs_config(&self) -> Arc<std::collections::BTreeMap<String, Vec<String>>> {
        self.needs_config.load_full()
    }

    /// The newest handle of a plugin.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<Arc<PluginHandle>> {
        self.map.load().get(id).and_then(|v| v.last().cloned())
    }

    /// Every handle (all versions), sorted by id.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<PluginHandle>> {
        let mut v: Vec<_> = self.map.load().values().flatten().cloned().collect();
        v.sort_by(|a, b| a.id().cmp(b.id()));
        v
    }

    /// A client for `id` running `version`, waiting up to `wait` while the
    /// plugin is starting or restarting: a model is never told to retry
    /// what the host can wait for. Fails at once when the plugin is stopped,
    /// failed or gone, and when `cancel` fires.
    pub async fn client_within(
        &self,
        id: &str,
        version: &str,
        wait: std::time::Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<PluginClient, PluginUnavailable> {
        let first = self.client(id, version);
        let handle = match &first {
            Ok(_) => return first,
            Err(_) => self
                .map
                .load()
                .get(id)
                .and_then(|v| v.iter().find(|h| h.version() == version).cloned()),
        };
        let Some(handle) = handle else { return first };
        // A plugin in a crash loop is not waited for: the call would only
        // run out its deadline.
        if !matches!(
            handle.state().phase,
            Phase::Starting | Phase::Restarting | Phase::Ready
        ) || matches!(first, Err(PluginUnavailable::CrashLoop { .. }))
        {
            return first;
        }
        let mut states = handle.subscribe();
        // A start that fails into a crash loop while the call waits ends the
        // wait too: the call is told "crash loop" at once rather than
        // running out its deadline across the loop's restarts.
        let settled = states.wait_for(|s| match (s.phase, &s.client) {
            (Phase::Ready, Some(c)) => !c.is_gone(),
            (Phase::Stopped | Phase::Failed, _) => true,
            (Phase::Restarting, _) => s.failures >= crate::supervisor::CRASH_LOOP,
            _ => false,
        });
        tokio::select! {
            () = cancel.cancelled() => Err(PluginUnavailable::Cancelled),
            r = tokio::time::timeout(wait, settled) => match r {
                Ok(Ok(_)) => self.client(id, version),
                Ok(Err(_)) => Err(PluginUnavailable::NotRunning(id.to_owned())),
                Err(_) => Err(PluginUnavailable::NotReadyInTime {
                    id: id.to_owned(),
                    ms: wait.as_millis(),
                }),
            },
        }
    }

    /// A client for `id` running `version`, or why there is none, in words
    /// for the model.
    pub fn client(&self, id: &str, version: &str) -> Result<PluginClient, PluginUnavailable> {
        let map = self.map.load();
        let Some(versions) = map.get(id) else {
            if self.needs_config.load().contains_key(id) {
                return Err(PluginUnavailable::NeedsConfig(id.to_owned()));
            }
            return Err(PluginUnavailable::NotRunning(id.to_owned()));
        };
        let Some(h) = versions.iter().find(|h| h.version() == version) else {
            return Err(PluginUnavailable::Upgrading(id.to_owned()));
        };
        // Read in place, and the id copied only into an error: this runs
        // for every call.
        h.read_state(|state| match (state.phase, &state.client) {
            (Phase::Ready, Some(c)) if !c.is_gone() => Ok(c.clone()),
            (Phase::Starting | Phase::Ready, _) => Err(PluginUnavailable::Starting(id.to_owned())),
            (Phase::Restarting, _) if state.failures >= crate::supervisor::CRASH_LOOP => {
                Err(PluginUnavailable::CrashLoop {
                    id: id.to_owned(),
                    failures: state.failures,
                })
            }
            (Phase::Restarting, _) => Err(PluginUnavailable::Restarting(id.to_owned())),
            (Phase::Stopped, _) => Err(PluginUnavailable::Stopped(id.to_owned())),
            (Phase::Failed, _) => Err(PluginUnavailable::Failed(id.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_without_a_process_says_why() {
        let plugins = Plugins::new();
        assert_eq!(
            plugins.client("notes", "1.0.0").err(),
            Some(PluginUnavailable::NotRunning("notes".into()))
        );
        plugins.set_needs_config("notes", &["token".to_owned()]);
        assert_eq!(
            plugins.client("notes", "1.0.0").err(),
            Some(PluginUnavailable::NeedsConfig("notes".into()))
        );
        assert_eq!(
            plugins.needs_config().get("notes"),
            Some(&vec!["token".to_owned()])
        );
        plugins.set_needs_config("notes", &[]);
        assert!(plugins.needs_config().is_empty());
        assert!(plugins.all().is_empty());
    }
}
