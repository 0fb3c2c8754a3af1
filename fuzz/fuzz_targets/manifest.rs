//! Manifest parsing and validation: any text, no panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = toolhost_manifest::Manifest::parse(std::path::Path::new("/nonexistent-plugin"), text);
    }
});
