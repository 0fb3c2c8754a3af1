//! A placement on the wire (`toolhost.admin.v1.Placement`), checked into
//! the lifecycle's terms, and where the daemon stands back out. The admin
//! API's `PlacePlugins` and the fleet's placement key share it.

use toolhost_lifecycle::contract::OnChange;
use toolhost_lifecycle::{PlacedPlugin, Placement, PlacementStatus};
use toolhost_proto::admin as pb;

/// The most plugins one placement may name.
pub const MAX_PLACED: usize = 1024;

/// A placement from the wire, or why it is not one: every plugin's id,
/// reference and policy checked, values bounded as an install's are.
///
/// # Errors
/// Naming the plugin and what is wrong, never a value.
pub fn from_proto(p: pb::Placement) -> Result<Placement, String> {
    if p.plugins.len() > MAX_PLACED {
        return Err(format!(
            "a placement names at most {MAX_PLACED} plugins; this one names {}",
            p.plugins.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut plugins = Vec::with_capacity(p.plugins.len());
    for placed in p.plugins {
        let id = toolhost_base::term::one_line(&placed.id.chars().take(80).collect::<String>())
            .into_owned();
        if !toolhost_manifest::is_valid_plugin_id(&placed.id) {
            return Err(format!("{id:?} is not a plugin id"));
        }
        if !seen.insert(placed.id.clone()) {
            return Err(format!("plugin {id} is placed twice"));
        }
        if placed.reference.len() > 512 {
            return Err(format!(
                "plugin {id}: the reference is longer than 512 characters"
            ));
        }
        let contract_changes = match placed.contract_changes.as_str() {
            "" => None,
            v => Some(OnChange::parse(v).ok_or_else(|| {
                format!("plugin {id}: contract_changes is \"accept\" or \"hold\"")
            })?),
        };
        if placed.values.len() > 128 || placed.values.keys().any(|n| n.len() > 64) {
            return Err(format!(
                "plugin {id}: item names are at most 64 bytes, and at most 128 items"
            ));
        }
        plugins.push(PlacedPlugin {
            id: placed.id,
            reference: placed.reference,
            values: placed.values.into_iter().collect(),
            contract_changes,
        });
    }
    Ok(Placement {
        revision: p.revision,
        plugins,
    })
}

/// Where the daemon stands, for the wire.
#[must_use]
pub fn to_proto(s: PlacementStatus) -> pb::PlacementStatus {
    pb::PlacementStatus {
        revision: s.revision,
        refused: s.refused,
        plugins: s
            .plugins
            .into_iter()
            .map(|p| pb::PlacedState {
                id: p.id,
                desired: p.desired,
                installed: p.installed,
                phase: p.phase,
                reason: p.reason,
            })
            .collect(),
    }
}
