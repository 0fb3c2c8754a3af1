//! Test plugin.
fn main() {}
