//! The listing over the current catalog: its settings and caches.

use crate::{find, instructions, pages, tools};
use rmcp::ErrorData as McpError;
use rmcp::model::Tool;
use std::sync::{Arc, PoisonError, RwLock};
use toolhost_catalog::{Catalog, Store};
use toolhost_pipeline::{Binding, CallResult};

/// The default `tools/list` page: catalogs of ordinary size answer in one.
pub const DEFAULT_TOOLS_PAGE_SIZE: usize = 1000;

/// How long a 2026-07-28 client may treat a `tools/list` answer as fresh
/// by default, in milliseconds: catalogs change on an install or a push,
/// minutes apart at the most, and a session is told of each change
/// (`list_changed`) whatever this says.
pub const DEFAULT_LIST_TTL_MS: u64 = 60_000;

/// What agents are shown besides the catalog itself (`[mcp]`).
#[derive(Debug, Clone)]
pub struct AgentView {
    /// Most tools per `tools/list` page; 0: one page.
    pub tools_page_size: usize,
    /// The byte budget of the generated instructions.
    pub instructions_bytes: usize,
    /// Serve the built-in find tool under this exposed-name prefix.
    pub find_tools: Option<String>,
    /// How long a client may cache a `tools/list` answer (`ttlMs`), ms.
    pub list_ttl_ms: u64,
}

impl Default for AgentView {
    fn default() -> Self {
        Self {
            tools_page_size: DEFAULT_TOOLS_PAGE_SIZE,
            instructions_bytes: instructions::DEFAULT_BUDGET,
            find_tools: None,
            list_ttl_ms: DEFAULT_LIST_TTL_MS,
        }
    }
}

/// A page of a listing: its tools, the next page's cursor, and what the
/// whole listing shows of each contract.
pub type Page = (Vec<Tool>, Option<String>, Arc<toolhost_pipeline::Shown>);

/// The listings, instructions and find tool over a catalog store.
pub struct Listing {
    store: Arc<Store>,
    /// What each session was shown (the find tool's answers are listings too).
    pins: Arc<toolhost_pipeline::Pins>,
    view: RwLock<AgentView>,
    listings: tools::ListingCache,
    instructions: instructions::InstructionsCache,
}

impl std::fmt::Debug for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listing")
            .field("view", &self.view())
            .finish_non_exhaustive()
    }
}

impl Listing {
    /// Listings over `store`'s current catalog, with the default view.
    #[must_use]
    pub fn new(store: Arc<Store>, pins: Arc<toolhost_pipeline::Pins>) -> Arc<Self> {
        Arc::new(Self {
            store,
            pins,
            view: RwLock::new(AgentView::default()),
            listings: tools::ListingCache::default(),
            instructions: instructions::InstructionsCache::default(),
        })
    }

    /// Sets what agents are shown besides the catalog (at start).
    pub fn set_view(&self, view: AgentView) {
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = view;
    }

    /// What agents are shown besides the catalog.
    #[must_use]
    pub fn view(&self) -> AgentView {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The instructions a session on `surface` gets, from the current
    /// catalog.
    #[must_use]
    pub fn instructions_for(&self, surface: &str) -> Arc<str> {
        let budget = self.view().instructions_bytes;
        self.instructions
            .get(&self.store.current(), surface, budget)
    }

    /// The page of `surface`'s listing after `cursor` (the find tool in
    /// its place when it is served), the next page's cursor, and what the
    /// whole listing shows of each tool's contract (for the session's
    /// pins). A cursor this daemon did not make is refused.
    pub fn page(&self, surface: &str, cursor: Option<&str>) -> Result<Page, McpError> {
        let catalog = self.store.current();
        let view = self.view();
        let builtin = self
            .find_tool_name(&catalog)
            .zip(view.find_tools.as_deref())
            .map(|(_, prefix)| find::tool(prefix));
        let (tools, shown) = self.listings.listing(&catalog, surface, builtin);
        let (page, next) = pages::page(&tools, cursor, view.tools_page_size)?;
        Ok((page, next, shown))
    }

    /// The built-in find tool's exposed name, when it is served and no
    /// catalog tool has that name.
    fn find_tool_name(&self, catalog: &Catalog) -> Option<String> {
        // No clone of the view, and nothing made, when the tool is off (the
        // default): this runs for every call.
        let name = find::exposed_name(
            self.view
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .find_tools
                .as_deref()?,
        );
        catalog.get(&name).is_none().then_some(name)
    }
}

impl toolhost_calls::port::Builtin for Listing {
    fn claims(&self, name: &str) -> bool {
        let on = self
            .view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .find_tools
            .is_some();
        on && self
            .find_tool_name(&self.store.current())
            .is_some_and(|n| n == name)
    }

    fn answer(
        &self,
        binding: &Binding,
        name: &str,
        arguments: Option<serde_json::Value>,
    ) -> CallResult {
        find::run(&self.store.current(), binding, name, arguments, &self.pins)
    }
}
