//! What the benchmark harness shares with the end-to-end tests: reading
//! processes from /proc ([`procs`]) and a real OTLP trace receiver
//! ([`otlp`]). The harness itself is the `toolhost-bench` binary.
//! This library must not grow code beyond these two.

#![forbid(unsafe_code)]

pub mod otlp;
pub mod procs;
