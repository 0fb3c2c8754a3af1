//! What a placement is, and the daemon's record of it: the types
//! `placement.rs` converges with and the lifecycle keeps.

use crate::contract::OnChange;
use std::collections::{BTreeMap, BTreeSet};

/// One plugin of a placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedPlugin {
    /// The id its package must carry.
    pub id: String,
    /// `REGISTRY/REPO@sha256:DIGEST`.
    pub reference: String,
    /// Values of its non-secret configuration items.
    pub values: BTreeMap<String, String>,
    /// Its contract policy, when the placement names one.
    pub contract_changes: Option<OnChange>,
}

/// What a backend places.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Increases with each placement.
    pub revision: u64,
    /// The plugins.
    pub plugins: Vec<PlacedPlugin>,
}

/// Where one placed plugin stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedState {
    /// The plugin.
    pub id: String,
    /// The digest placed.
    pub desired: String,
    /// The digest installed (empty: none).
    pub installed: String,
    /// `pulling`, `held`, `ready`, `starting`, `failed`, `removed`.
    pub phase: String,
    /// Why, for `held` and `failed`.
    pub reason: String,
}

/// Where the daemon stands against the last placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementStatus {
    /// The placement applied (0: none).
    pub revision: u64,
    /// Each placed plugin, and those removed by the last placement.
    pub plugins: Vec<PlacedState>,
    /// Why a placement was refused or ignored.
    pub refused: String,
}

/// The daemon's record of placement: what was placed, and each plugin's
/// last failure for the digest placed.
#[derive(Debug, Default)]
pub(crate) struct PlacementBook {
    pub(crate) placement: Placement,
    pub(crate) failed: BTreeMap<String, String>,
    pub(crate) removed: BTreeSet<String>,
    pub(crate) pulling: Option<String>,
    pub(crate) refused: String,
}
