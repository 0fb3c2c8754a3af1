//! What the benchmark harness shares with the end-to-end tests: reading
//! processes from /proc ([`procs`]). The harness itself is the
//! `toolhost-bench` binary; it must not grow library code beyond this.

#![forbid(unsafe_code)]

pub mod procs;
