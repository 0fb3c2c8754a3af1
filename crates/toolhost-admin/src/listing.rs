//! `ListPlugins` and the plugin counts of `GetStatus`: what a daemon with
//! a thousand plugins and tens of thousands of tools answers, at a cost
//! that follows the page asked for, not the catalog.
//!
//! A summary is the default. It leaves out what grows with a plugin's
//! tools: each tool's policy, and past the first ten, the names of its
//! withheld tools (their count stays); and what each enforced sandbox rule
//! holds (why a rule is not enforced stays). `detail` brings them back,
//! for one plugin (`plugins show`) or a page. Pages are keyed by id
//! (`after`), so a plugin installed or removed between two pages neither
//! repeats nor skips another.
//!
//! What this module must not do: walk the catalog once per plugin (at
//! 1,000 plugins of 32 tools that was 32 million steps a `status`), or
//! decide anything; it reads the state of the moment and translates it.

use crate::status::{plugin_status, state_of};
use std::collections::{HashMap, HashSet};
use tonic::Status;
use toolhost_catalog::{Entry, Store};
use toolhost_lifecycle::{Lifecycle, PluginInfo};
use toolhost_policy::OperatorPolicy;
use toolhost_proto::admin as pb;
use toolhost_runtime::Plugins;

/// What a listing reads: the daemon's state of the moment.
pub(crate) struct Sources<'a> {
    pub(crate) lifecycle: &'a Lifecycle,
    pub(crate) plugins: &'a Plugins,
    pub(crate) store: &'a Store,
    pub(crate) policy: &'a OperatorPolicy,
}

/// How many of a plugin's withheld tools a summary names (`withheld_total`
/// counts them all): enough to see what is wrong, bounded however many
/// tools a plugin has.
const SUMMARY_WITHHELD: usize = 10;

/// The plugins `r` asks for, and the `after` of the page that follows.
fn page_of(
    lifecycle: &Lifecycle,
    r: &pb::ListPluginsRequest,
) -> Result<(Vec<PluginInfo>, String), Status> {
    if !r.id.is_empty() {
        let info = lifecycle.info(&r.id).ok_or_else(|| {
            Status::not_found(format!(
                "no plugin {:?} is installed",
                toolhost_base::term::one_line(&r.id)
            ))
        })?;
        return Ok((vec![info], String::new()));
    }
    let limit = match usize::try_from(r.page_size) {
        Ok(0) | Err(_) => usize::MAX,
        Ok(n) => n,
    };
    let after = (!r.after.is_empty()).then_some(r.after.as_str());
    // One more than the page, to know whether another follows.
    let mut infos = lifecycle.page(after, limit.saturating_add(1));
    let mut next_after = String::new();
    if infos.len() > limit {
        infos.truncate(limit);
        next_after = infos.last().map(|i| i.id.clone()).unwrap_or_default();
    }
    Ok((infos, next_after))
}

/// The answer to one `ListPlugins` request.
pub(crate) fn list_plugins(
    state: &Sources<'_>,
    r: &pb::ListPluginsRequest,
) -> Result<pb::ListPluginsResponse, Status> {
    let lifecycle = state.lifecycle;
    let (infos, next_after) = page_of(lifecycle, r)?;
    let catalog = state.store.current();
    let on_page: HashSet<&str> = infos.iter().map(|i| i.id.as_str()).collect();
    // One pass over what is withheld, one over the catalog when the
    // policies are asked for: never once per plugin.
    let mut withheld: HashMap<&str, Vec<&toolhost_catalog::Defect>> = HashMap::new();
    for d in catalog.withheld() {
        if let Some(e) = catalog.get(&d.tool)
            && on_page.contains(e.descriptor.plugin_id.as_str())
        {
            withheld
                .entry(e.descriptor.plugin_id.as_str())
                .or_default()
                .push(d);
        }
    }
    let mut tools: HashMap<&str, Vec<&Entry>> = HashMap::new();
    if r.detail {
        for e in catalog.entries() {
            if on_page.contains(e.descriptor.plugin_id.as_str()) {
                tools
                    .entry(e.descriptor.plugin_id.as_str())
                    .or_default()
                    .push(e);
            }
        }
    }
    let mut plugins = Vec::with_capacity(infos.len());
    for info in &infos {
        let handle = state.plugins.get(&info.id);
        let mut st = plugin_status(info.clone(), handle.as_ref());
        let mine = withheld
            .get(info.id.as_str())
            .map_or(&[][..], Vec::as_slice);
        st.withheld_total = u32::try_from(mine.len()).unwrap_or(u32::MAX);
        let named = if r.detail {
            toolhost_catalog::MAX_LISTED
        } else {
            SUMMARY_WITHHELD
        };
        st.withheld = mine
            .iter()
            .take(named)
            .map(|d| pb::Defect {
                tool: d.tool.clone(),
                reason: d.reason.clone(),
            })
            .collect();
        if r.detail {
            let own = tools.get(info.id.as_str()).map_or(&[][..], Vec::as_slice);
            st.policies = crate::policy::tool_policies(state.policy, own.iter().copied());
        } else {
            // What an enforced rule holds reads the same for every plugin
            // and was three quarters of a summary; why a rule is not
            // enforced is what the operator needs, and stays.
            for rule in &mut st.sandbox {
                if rule.state == "enforced" {
                    rule.detail.clear();
                }
            }
        }
        plugins.push(st);
    }
    Ok(pb::ListPluginsResponse {
        plugins,
        total: u32::try_from(lifecycle.count()).unwrap_or(u32::MAX),
        next_after,
    })
}

/// How many installed plugins are in each state, for `GetStatus`.
pub(crate) fn plugin_states(state: &Sources<'_>) -> HashMap<String, u32> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    for s in state.lifecycle.standings() {
        let handle = state.plugins.get(&s.id);
        *counts
            .entry(state_of(s.enabled, s.needs_config, handle.as_ref()))
            .or_default() += 1;
    }
    counts
}
