//! The notes example plugin.
fn main() {}
