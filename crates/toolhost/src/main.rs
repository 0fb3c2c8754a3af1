//! `toolhost`: the daemon and its operator commands.
//!
//! This crate is the edge: it parses flags and the config file, wires the
//! library crates together, and turns their typed errors into exit codes and
//! messages (`anyhow` lives here and nowhere else). It must not contain
//! product logic of its own: a rule enforced only here is a rule the tests
//! of the library crates cannot see.

#![forbid(unsafe_code)]

#[macro_use]
mod out;

mod call;
mod call_client;
mod call_task;
mod catalog;
mod check;
mod cli;
mod config;
mod dev;
mod fleet;
mod format;
mod memory;
mod new;
mod ops;
mod pack;
mod sandboxing;
mod serve;
mod settings;
mod show;
mod telemetry;

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::run(cli::Cli::parse())
}
