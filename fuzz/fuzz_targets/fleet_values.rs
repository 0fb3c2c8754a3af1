//! Values from a fleet's key-value bucket, which any holder of the
//! engine's credentials can write: a catalog value (a protobuf
//! `Snapshot`), a binding value (a protobuf `SessionBinding`) and a
//! daemon's status entry (JSON, read by `toolhost fleet status`). Any
//! bytes are refused with a reason or accepted as a checked value; never
//! a panic, and an accepted snapshot is one the store may be offered.
#![no_main]
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use toolhost_proto::admin::{SessionBinding, Snapshot};

fuzz_target!(|data: &[u8]| {
    let Some((&which, value)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(s) = Snapshot::decode(value)
                && let Ok(snapshot) = toolhost_managed::snapshot_from_proto(s)
            {
                let store = toolhost_catalog::Store::new("kandev");
                let _ = store.offer(snapshot);
            }
        }
        1 => {
            if let Ok(b) = SessionBinding::decode(value) {
                let _ = toolhost_managed::binding_from_proto(b);
            }
        }
        _ => {
            let _ = serde_json::from_slice::<toolhost_fleet::StatusEntry>(value);
        }
    }
});
