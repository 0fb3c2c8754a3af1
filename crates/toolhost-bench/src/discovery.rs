//! What agents are shown of a large catalog: a `tools/list` page, a find
//! query, and the instructions, over 10,000 tools, through a real rmcp
//! client over an in-memory pipe; plus the instructions of the example
//! plugins.

use anyhow::Result;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost_catalog::{Descriptor, Outcome, Store};
use toolhost_listing::AgentView;
use toolhost_mcp::Hub;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn hub(store: &Arc<Store>, view: AgentView) -> Arc<Hub> {
    let hub = Hub::without_plugins(Arc::clone(store));
    hub.set_max_sessions_per_token(0);
    hub.set_agent_view(view);
    hub
}

/// Every one of `n` tools with a nested required shape, for the worst
/// case of the instructions.
fn nested(mut d: Descriptor) -> Descriptor {
    d.input_schema = json!({
        "type": "object",
        "properties": { "steps": { "type": "array", "items": {
            "type": "object", "required": ["file", "line", "text"],
            "properties": { "file": {"type": "string"}, "line": {"type": "integer"}, "text": {"type": "string"} }
        } } },
        "required": ["steps"]
    }).into();
    d
}

/// The example plugins of this checkout.
pub(crate) fn examples_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins-example")
}

pub(crate) async fn report(examples: &std::path::Path) -> Result<()> {
    let store = Arc::new(Store::new("kandev"));
    let r = store.offer(crate::scale::snapshot(10_000, 1));
    anyhow::ensure!(r.outcome == Outcome::Accepted, "{:?}", r.reasons);
    let view = AgentView {
        find_tools: Some("kandev".into()),
        ..AgentView::default()
    };
    let hub = hub(&store, view);
    let counter = crate::scale::Counter::default();
    let client = crate::scale::connect(&hub, &counter).await?;
    let peer = client.peer();

    println!("| measurement (10,000 tools) | time | bytes |\n|---|---|---|");
    let _ = peer.list_tools(None).await?;
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..21 {
        let t = Instant::now();
        let page = peer.list_tools(None).await?;
        times.push(t.elapsed());
        bytes = serde_json::to_vec(&page)?.len();
    }
    println!(
        "| tools/list, one page of 1,000 (the default; median of 21) | {:.2} ms | {bytes} |",
        median(times)
    );
    let mut times = Vec::new();
    let mut pages = 0;
    let t = Instant::now();
    let mut cursor = None;
    loop {
        let p = Instant::now();
        let page = peer
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
            ))
            .await?;
        times.push(p.elapsed());
        pages += 1;
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    println!(
        "| tools/list, every page ({pages}) | {:.1} ms in all, {:.2} ms a page (median) | |",
        t.elapsed().as_secs_f64() * 1000.0,
        median(times)
    );
    let mut times = Vec::new();
    let mut bytes = 0;
    for query in ["thing number 4242", "does thing", "tool 9999 task"] {
        for _ in 0..7 {
            let mut p = rmcp::model::CallToolRequestParams::new("kandev_toolhost_find_tools");
            p = p.with_arguments(
                json!({ "query": query })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
            let t = Instant::now();
            let r = peer.call_tool(p).await?;
            times.push(t.elapsed());
            anyhow::ensure!(r.is_error != Some(true), "find failed: {r:?}");
            bytes = bytes.max(serde_json::to_vec(&r)?.len());
        }
    }
    println!(
        "| a find query (5 best of 10,000; median of 21, 3 queries) | {:.2} ms | at most {bytes} |",
        median(times)
    );
    let _ = client.cancel().await;

    // The instructions: the examples, 10,000 flat tools, 10,000 nested.
    println!("\n| instructions | bytes | tools with a line |\n|---|---|---|");
    let manifests: Vec<toolhost_manifest::Manifest> = std::fs::read_dir(examples)?
        .filter_map(Result::ok)
        .filter_map(|e| toolhost_manifest::Manifest::load(&e.path()).ok())
        .collect();
    let examples_store = Store::new("kandev");
    examples_store
        .offer(toolhost_catalog::Snapshot::from_manifests("kandev", "g", 1, &manifests).sealed());
    for surface in ["kanban-task", "chat"] {
        let text = toolhost_listing::generate(
            &examples_store.current(),
            surface,
            toolhost_listing::DEFAULT_INSTRUCTIONS_BYTES,
        );
        println!(
            "| the example plugins, surface {surface} | {} | {} |",
            text.len(),
            text.lines().filter(|l| l.starts_with("- `")).count()
        );
    }
    let text = toolhost_listing::generate(
        &store.current(),
        "chat",
        toolhost_listing::DEFAULT_INSTRUCTIONS_BYTES,
    );
    println!("| 10,000 tools, none nested | {} | 0 |", text.len());
    let nested_store = Store::new("kandev");
    let mut snap = crate::scale::snapshot(10_000, 1);
    snap.tools = snap.tools.into_iter().map(nested).collect();
    nested_store.offer(snap.sealed());
    let t = Instant::now();
    let text = toolhost_listing::generate(
        &nested_store.current(),
        "chat",
        toolhost_listing::DEFAULT_INSTRUCTIONS_BYTES,
    );
    let took = t.elapsed();
    println!(
        "| 10,000 tools, every one nested (8 KiB budget; built in {:.1} ms, once per change) | {} | {} (the rest counted) |",
        took.as_secs_f64() * 1000.0,
        text.len(),
        text.lines().filter(|l| l.starts_with("- `")).count()
    );
    Ok(())
}
