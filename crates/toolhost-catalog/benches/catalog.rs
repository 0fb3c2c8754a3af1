//! The catalog at scale: applying a 10,000-tool snapshot from cold (served,
//! and pushed to a daemon that withholds every tool), and applying a
//! revision of it that changes one tool.
//!
//! Run: `cargo bench -p toolhost-catalog --bench catalog`

#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::cell::Cell;
use std::collections::BTreeMap;
use toolhost_catalog::{Descriptor, Outcome, Snapshot, Store};
use toolhost_manifest::{Annotations, naming};
use toolhost_validate::UnknownArguments;

const TOOLS: usize = 10_000;

fn tool(i: usize) -> Descriptor {
    let plugin = format!("plugin{}", i / 32);
    let local = format!("tool_{i}");
    Descriptor {
        exposed_name: naming::exposed("kandev", &plugin, &local),
        plugin_id: plugin,
        plugin_version: "1.0.0".to_owned(),
        local_name: local,
        title: Some(format!("Tool {i}")),
        description: format!("Does thing number {i} for the task."),
        instructions: None,
        surfaces: vec!["chat".to_owned(), format!("surface-{}", i % 8)],
        // Distinct schemas: the worst case for compilation.
        input_schema: json!({
            "type": "object",
            "properties": {
                format!("arg_{i}"): { "type": "string", "maxLength": 100 },
                "count": { "type": "integer", "minimum": 0 }
            },
            "required": [format!("arg_{i}")]
        })
        .into(),
        output_schema: None,
        annotations: Annotations::default(),
        timeout_ms: 30_000,
        aliases: BTreeMap::new(),
        unknown_arguments: UnknownArguments::Reject,
        reset_timeout_on_progress: false,
        task: toolhost_manifest::TaskSupport::Never,
        task_timeout_ms: None,
        call_policy: Default::default(),
        fingerprint: toolhost_catalog::Fingerprint::UNSEALED,
    }
}

fn snapshot(revision: u64) -> Snapshot {
    Snapshot {
        epoch: 1,
        generation: "g".to_owned(),
        revision,
        tools: (0..TOOLS).map(tool).collect(),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("catalog");
    g.sample_size(10);
    g.bench_function("apply_10k_from_cold", |b| {
        b.iter_batched(
            || (Store::new("kandev"), snapshot(1)),
            |(store, snap)| {
                assert_eq!(store.offer(snap).outcome, Outcome::Accepted);
                store
            },
            BatchSize::PerIteration,
        );
    });

    // A fleet's catalog on a daemon that has none of its plugins: every
    // tool is judged and withheld, and none compiled.
    g.bench_function("apply_10k_managed_all_withheld_from_cold", |b| {
        b.iter_batched(
            || (Store::new("kandev"), snapshot(1)),
            |(store, snap)| {
                let r = store.offer_managed(snap, &toolhost_catalog::Installed::default());
                assert_eq!(r.outcome, Outcome::Accepted);
                store
            },
            BatchSize::PerIteration,
        );
    });

    let store = Store::new("kandev");
    assert_eq!(store.offer(snapshot(1)).outcome, Outcome::Accepted);
    let revision = Cell::new(1u64);
    g.sample_size(50);
    // The second case has the tools already in name order, as GetCatalog
    // returns them: normalizing is then one pass instead of a sort.
    for (name, in_order) in [
        ("apply_10k_one_tool_changed", false),
        ("apply_10k_one_tool_changed_in_name_order", true),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    revision.set(revision.get() + 1);
                    let mut s = snapshot(revision.get());
                    s.tools[4321].description = format!("changed in revision {}", revision.get());
                    if in_order {
                        s.tools.sort_by(|a, b| a.exposed_name.cmp(&b.exposed_name));
                    }
                    // Sealed as a decoder seals: applying is what is timed.
                    s.sealed()
                },
                |snap| assert_eq!(store.offer(snap).outcome, Outcome::Accepted),
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

/// What a call pays to read the catalog: the plain lock-free load, and the
/// load inside a counted reading (the grace period an upgrade's drain
/// waits out), alone and with the other core reading too.
fn reading(c: &mut Criterion) {
    let store = std::sync::Arc::new(Store::new("kandev"));
    assert_eq!(store.offer(snapshot(1)).outcome, Outcome::Accepted);
    let mut g = c.benchmark_group("catalog_read");
    g.bench_function("current", |b| b.iter(|| store.current()));
    g.bench_function("read_for_call", |b| b.iter(|| store.read_for_call()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = std::thread::spawn({
        let (store, stop) = (std::sync::Arc::clone(&store), std::sync::Arc::clone(&stop));
        move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop(store.read_for_call());
            }
        }
    });
    g.bench_function("read_for_call_contended", |b| {
        b.iter(|| store.read_for_call());
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = other.join();
    g.finish();
}

criterion_group!(benches, bench, reading);
criterion_main!(benches);
