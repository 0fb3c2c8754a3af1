//! The handshake line parser: any text, no panic, short errors.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(line) = std::str::from_utf8(data)
        && let Err(e) = toolhost_proto::contract::handshake::parse(line)
    {
        assert!(e.to_string().len() < 400);
    }
});
