//! Benchmarks (filled in by the catalog issue).
fn main() {}
