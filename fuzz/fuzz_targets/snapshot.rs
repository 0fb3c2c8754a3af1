//! Snapshot decoding and offering: any JSON, no panic, and the store stays
//! consistent (its version never goes backwards).
#![no_main]
use libfuzzer_sys::fuzz_target;
use toolhost_catalog::{Snapshot, Store};

fuzz_target!(|data: &[u8]| {
    let store = Store::new("kandev");
    let mut last = (String::new(), 0u64);
    for chunk in data.split(|b| *b == b'\n') {
        if let Ok(s) = serde_json::from_slice::<Snapshot>(chunk) {
            let _ = store.offer(s);
            let c = store.current();
            if c.generation() == last.0 {
                assert!(c.revision() >= last.1);
            }
            last = (c.generation().to_owned(), c.revision());
        }
    }
});
