//! Argument checking next to the floor: jsonschema's own `is_valid` on the
//! same compiled schema and instance. `check_arguments` adds the bounds walk,
//! alias renaming and the closed-root key check on top of it.
//!
//! Run: `cargo bench -p toolhost-validate --bench validate`

#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{BatchSize, Criterion, black_box, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};

fn small() -> (Value, Value) {
    (
        json!({ "type": "object", "properties": { "text": { "type": "string", "maxLength": 100 }, "n": { "type": "integer" } }, "required": ["text"] }),
        json!({ "text": "hello", "n": 3 }),
    )
}

fn medium() -> (Value, Value) {
    let mut props = serde_json::Map::new();
    let mut inst = serde_json::Map::new();
    for i in 0..12 {
        props.insert(
            format!("s{i}"),
            json!({ "type": "string", "maxLength": 64, "pattern": "^[a-z0-9 ]*$" }),
        );
        inst.insert(format!("s{i}"), json!("some words here"));
    }
    props.insert("tags".into(), json!({ "type": "array", "items": { "type": "string" }, "maxItems": 10, "uniqueItems": true }));
    inst.insert("tags".into(), json!(["a", "b", "c", "d"]));
    props.insert("mode".into(), json!({ "enum": ["fast", "slow", "auto"] }));
    inst.insert("mode".into(), json!("auto"));
    props.insert("limits".into(), json!({ "type": "object", "properties": { "min": { "type": "integer" }, "max": { "type": "integer" } } }));
    inst.insert("limits".into(), json!({ "min": 1, "max": 9 }));
    (
        json!({ "type": "object", "properties": props, "required": ["s0", "s1", "mode"] }),
        Value::Object(inst),
    )
}

fn large() -> (Value, Value) {
    let item = json!({
        "type": "object",
        "properties": {
            "id": { "type": "integer", "minimum": 0 },
            "title": { "type": "string", "maxLength": 200 },
            "labels": { "type": "array", "items": { "type": "string", "pattern": "^[a-z-]+$" } },
            "meta": { "type": "object", "additionalProperties": { "type": "string" } }
        },
        "required": ["id", "title"]
    });
    let mut props = serde_json::Map::new();
    for i in 0..40 {
        props.insert(
            format!("f{i}"),
            json!({ "type": ["string", "null"], "maxLength": 500 }),
        );
    }
    props.insert(
        "items".into(),
        json!({ "type": "array", "items": item, "maxItems": 500 }),
    );
    let items: Vec<Value> = (0..100)
        .map(|i| json!({ "id": i, "title": format!("item number {i}"), "labels": ["alpha", "beta-two"], "meta": { "k": "v", "owner": "someone" } }))
        .collect();
    let mut inst: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("f{i}"), json!("a value")))
        .collect();
    inst.insert("items".into(), Value::Array(items));
    (
        json!({ "type": "object", "properties": props }),
        Value::Object(inst),
    )
}

fn bench(c: &mut Criterion) {
    let aliases = BTreeMap::new();
    let policy = ToolPolicy {
        aliases: &aliases,
        unknown: UnknownArguments::Reject,
    };
    for (name, (schema, instance)) in [("small", small()), ("medium", medium()), ("large", large())]
    {
        let compiled = match CompiledSchema::compile(&schema) {
            Ok(c) => c,
            Err(p) => panic!("{name}: {p:?}"),
        };
        assert!(
            check_arguments(&compiled, &policy, Some(instance.clone())).is_ok(),
            "{name} must be valid"
        );
        let mut g = c.benchmark_group(format!("validate/{name}"));
        // Both sides get a fresh copy of the arguments per call (as the
        // pipeline does), so both pay the same memory traffic.
        g.bench_function("jsonschema_is_valid", |b| {
            b.iter_batched_ref(
                || instance.clone(),
                |args| black_box(compiled.is_valid_raw(args)),
                BatchSize::SmallInput,
            );
        });
        g.bench_function("jsonschema_is_valid_hot", |b| {
            b.iter(|| black_box(compiled.is_valid_raw(black_box(&instance))))
        });
        g.bench_function("check_arguments", |b| {
            // The pipeline owns its arguments; cloning them is setup, not checking.
            b.iter_batched(
                || Some(instance.clone()),
                |args| black_box(check_arguments(&compiled, &policy, args)),
                BatchSize::SmallInput,
            );
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
