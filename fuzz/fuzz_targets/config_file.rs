//! The daemon's configuration file: any text is a configuration or an
//! error a person can read, never a panic. Nothing it names is read here
//! (secrets and paths are read when settings are resolved).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = toolhost_daemon::Config::parse(text, Path::new("/etc/toolhost/toolhost.toml")) {
        assert!(!e.to_string().is_empty());
    }
});
