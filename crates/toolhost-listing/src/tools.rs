//! Catalog entries as MCP `Tool`s, built once per surface per change.

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use toolhost_catalog::{Catalog, Entry};
use toolhost_pipeline::Shown;

/// One descriptor as MCP shows it: schemas exactly as declared (no alias,
/// no added `additionalProperties`), title, and the four hints.
pub fn to_tool(e: &Entry) -> Tool {
    let d = &e.descriptor;
    let schema =
        |v: &serde_json::Value| -> JsonObject { v.as_object().cloned().unwrap_or_default() };
    let mut t = Tool::new(
        d.exposed_name.clone(),
        d.description.clone(),
        Arc::new(schema(&d.input_schema)),
    )
    .with_annotations(
        ToolAnnotations::new()
            .read_only(d.annotations.read_only)
            .destructive(d.annotations.destructive)
            .idempotent(d.annotations.idempotent)
            .open_world(d.annotations.open_world),
    );
    if let Some(title) = &d.title {
        t = t.with_title(title.clone());
    }
    if let Some(out) = &d.output_schema {
        t = t.with_raw_output_schema(Arc::new(schema(out)));
    }
    // An agent may pin what it listed: the same fingerprint means the same
    // contract, whatever version of the plugin serves it.
    let mut meta = JsonObject::new();
    meta.insert(
        CONTRACT_META.to_owned(),
        serde_json::Value::String(e.contract_fingerprint()),
    );
    t.meta = Some(rmcp::model::MetaObject(meta));
    t
}

/// The `_meta` key of a listed tool's contract fingerprint.
pub const CONTRACT_META: &str = "toolhost/contract";

/// Listings by surface, rebuilt only when that surface's list changed. A
/// listing is always built from one catalog, so it is consistent with one
/// snapshot.
#[derive(Default)]
pub(crate) struct ListingCache {
    by_surface: Mutex<HashMap<String, Listing>>,
}

/// A surface's listing, the surface epoch it was built at, and what it
/// shows of each contract.
type Listing = (u64, Arc<Vec<Tool>>, Arc<Shown>);

impl ListingCache {
    /// The listing of `surface`, with `builtin` (the find tool, when it is
    /// served) in its place in name order, and what it shows of each
    /// tool's contract.
    pub(crate) fn listing(
        &self,
        catalog: &Catalog,
        surface: &str,
        builtin: Option<Tool>,
    ) -> (Arc<Vec<Tool>>, Arc<Shown>) {
        let epoch = catalog.surface_epoch(surface);
        if let Some((e, tools, shown)) = self
            .by_surface
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(surface)
            && *e == epoch
        {
            return (Arc::clone(tools), Arc::clone(shown));
        }
        let mut tools: Vec<Tool> = catalog.visible(surface).map(|e| to_tool(e)).collect();
        let shown = Arc::new(Shown::of(catalog.visible(surface)));
        if let Some(b) = builtin {
            let at = tools.partition_point(|t| t.name < b.name);
            tools.insert(at, b);
        }
        let tools = Arc::new(tools);
        let mut cache = self
            .by_surface
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A concurrent builder may have stored a newer epoch; keep the newest.
        match cache.get(surface) {
            Some((e, _, _)) if *e > epoch => {}
            _ => {
                cache.insert(
                    surface.to_owned(),
                    (epoch, Arc::clone(&tools), Arc::clone(&shown)),
                );
            }
        }
        (tools, shown)
    }
}
