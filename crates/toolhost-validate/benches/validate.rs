//! Argument checking next to the floor: jsonschema's own `is_valid` on the
//! same compiled schema and instance. `check_arguments` adds the bounds walk,
//! alias renaming and the closed-root key check on top of it.
//!
//! Run: `cargo bench -p toolhost-validate --bench validate`

#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{BatchSize, Criterion, black_box, criterion_group, criterion_main};
use std::collections::BTreeMap;
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};

/// The schemas and valid instances, shared with `toolhost-bench`'s goal table.
mod cases;
use cases::{large, medium, small};

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
