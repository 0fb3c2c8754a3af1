//! `toolhost`: the command line, a thin shell over the crates that do the
//! work: the daemon (`toolhost-daemon`), the operator's client
//! (`toolhost-ctl`) and the plugin author's tools (`toolhost-author`).
//!
//! This crate parses flags, picks each command's runtime, and turns errors
//! into exit codes and messages (`anyhow` lives at this edge). It must not
//! contain product logic of its own.

#![forbid(unsafe_code)]

mod cli;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    toolhost_ctl::publish::use_ring_for_tls();
    cli::run(cli::Cli::parse())
}
