//! Argument checking next to its floor, jsonschema's `is_valid` on the same
//! compiled schema and instance, timed here so that the goal table comes
//! from one run. The criterion bench in `toolhost-validate` times the same
//! cases (one shared file) with finer statistics.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};

#[path = "../../toolhost-validate/benches/cases/mod.rs"]
mod cases;

/// One case's cost per check, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    /// The case: small, medium or large.
    pub name: &'static str,
    /// jsonschema's `is_valid`.
    pub is_valid_ns: f64,
    /// toolhost's `check_arguments` (bounds, aliases, closed root, schema).
    pub check_ns: f64,
    /// `is_valid` on arguments still in cache, as a parse leaves them.
    pub warm_is_valid_ns: f64,
    /// `check_arguments` on arguments still in cache.
    pub warm_check_ns: f64,
}

impl Timed {
    /// `check_arguments` over `is_valid`.
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.check_ns / self.is_valid_ns
    }
}

/// Times each case: `rounds` batches of fresh copies of the arguments (the
/// pipeline owns its arguments, so both sides get a copy, made and dropped
/// outside the clock); the median batch is kept. Each batch is timed twice:
/// cold (all its copies made first, so most are out of the cache when
/// checked, and memory misses weigh on both sides) and warm (a few copies
/// made just before they are checked, as a parse leaves a call's
/// arguments).
pub fn measure(rounds: usize) -> anyhow::Result<Vec<Timed>> {
    let aliases = BTreeMap::new();
    let policy = ToolPolicy {
        aliases: &aliases,
        unknown: UnknownArguments::Reject,
    };
    let mut out = Vec::new();
    for (name, (schema, instance)) in [
        ("small", cases::small()),
        ("medium", cases::medium()),
        ("large", cases::large()),
    ] {
        let compiled = CompiledSchema::compile(&schema)
            .map_err(|p| anyhow::anyhow!("{name}: the schema does not compile: {p:?}"))?;
        anyhow::ensure!(
            check_arguments(&compiled, &policy, Some(instance.clone())).is_ok(),
            "{name}: the instance must be valid"
        );
        // About 20 ms of work per batch, whatever the case's size.
        let batch = match name {
            "small" => 200_000,
            "medium" => 20_000,
            _ => 1_000,
        };
        // Warm: a few copies at a time (about what fits in the cache),
        // each group made just before it is checked, as the arguments of a
        // real call are checked just after they were parsed.
        let group = match name {
            "small" => 64,
            "medium" => 8,
            _ => 1,
        };
        let mut floor = Vec::with_capacity(rounds);
        let mut ours = Vec::with_capacity(rounds);
        let mut warm_floor = Vec::with_capacity(rounds);
        let mut warm_ours = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let (mut floor_time, mut our_time) = (Duration::ZERO, Duration::ZERO);
            let mut results = Vec::with_capacity(group);
            for _ in 0..batch / group {
                let copies: Vec<_> = (0..group).map(|_| instance.clone()).collect();
                let t = Instant::now();
                for c in &copies {
                    black_box(compiled.is_valid_raw(black_box(c)));
                }
                floor_time += t.elapsed();
                drop(copies);
                let copies: Vec<_> = (0..group).map(|_| Some(instance.clone())).collect();
                let t = Instant::now();
                for c in copies {
                    results.push(black_box(check_arguments(&compiled, &policy, c)));
                }
                our_time += t.elapsed();
                results.clear();
            }
            let per = |d: Duration| d.as_secs_f64() * 1e9 / (batch / group * group) as f64;
            warm_floor.push(per(floor_time));
            warm_ours.push(per(our_time));

            let copies: Vec<_> = (0..batch).map(|_| instance.clone()).collect();
            let t = Instant::now();
            for c in &copies {
                black_box(compiled.is_valid_raw(black_box(c)));
            }
            floor.push(t.elapsed().as_secs_f64() * 1e9 / batch as f64);
            drop(copies);

            let copies: Vec<_> = (0..batch).map(|_| Some(instance.clone())).collect();
            // Where the results go, its pages touched before the clock starts:
            // `is_valid` writes nothing, and page faults are not checking.
            let mut results: Vec<Option<_>> = Vec::new();
            results.resize_with(batch, || None);
            let t = Instant::now();
            for (c, slot) in copies.into_iter().zip(results.iter_mut()) {
                *slot = Some(black_box(check_arguments(&compiled, &policy, c)));
            }
            ours.push(t.elapsed().as_secs_f64() * 1e9 / batch as f64);
            drop(results);
        }
        out.push(Timed {
            name,
            is_valid_ns: crate::measure::median(floor),
            check_ns: crate::measure::median(ours),
            warm_is_valid_ns: crate::measure::median(warm_floor),
            warm_check_ns: crate::measure::median(warm_ours),
        });
    }
    Ok(out)
}

/// Measures and prints the table.
pub fn report(rounds: usize) -> anyhow::Result<Vec<Timed>> {
    let checks = measure(rounds)?;
    println!(
        "| schema | `is_valid` ns | `check_arguments` ns | ratio | warm: `is_valid` ns | warm: `check_arguments` ns | warm: ratio |\n|---|---|---|---|---|---|---|"
    );
    for c in &checks {
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} | {:.2}x |",
            c.name,
            c.is_valid_ns,
            c.check_ns,
            c.ratio(),
            c.warm_is_valid_ns,
            c.warm_check_ns,
            c.warm_check_ns / c.warm_is_valid_ns
        );
    }
    Ok(checks)
}
