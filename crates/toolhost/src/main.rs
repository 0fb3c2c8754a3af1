//! `toolhost`: the daemon and its operator commands.
//!
//! This crate is the edge: it parses flags and the config file, wires the
//! library crates together, and turns their typed errors into exit codes and
//! messages (`anyhow` lives here and nowhere else). It must not contain
//! product logic of its own: a rule enforced only here is a rule the tests
//! of the library crates cannot see.

mod call;
mod check;
mod config;
mod memory;
mod new;
mod ops;
mod serve;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs plugin processes and serves their tools to AI agents over MCP.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate plugin directories as one installed set and print their
    /// exposed tool names. Exit 0 when valid, 1 when not, 2 on usage errors.
    Check(check::CheckArgs),
    /// Run plugins and serve their tools over MCP (stdio and/or HTTP).
    Serve(serve::ServeArgs),
    /// Write a new plugin to start from: a manifest with one tool, its
    /// schema, the code on the language's SDK, a launcher and a README.
    New(new::NewArgs),
    /// Call one tool through a running daemon's MCP endpoint, as an agent
    /// would. Exit 0 on success, 1 when the result is an error.
    Call(call::CallArgs),
    /// The running daemon at a glance: plugins, catalog, sessions.
    Status(ops::Target),
    /// The running daemon's catalog: exposed names and surfaces.
    Tools(ops::Target),
    /// Show or push the running daemon's catalog.
    Catalog {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: ops::CatalogCommand,
    },
    /// Control the running daemon's plugins.
    Plugins {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: ops::PluginsCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => check::run(&args),
        Command::New(args) => new::run(&args),
        Command::Serve(args) => {
            serve_runtime().and_then(|rt| rt.block_on(serve::run(args)).map(|()| ExitCode::SUCCESS))
        }
        Command::Call(args) => runtime().and_then(|rt| rt.block_on(call::run(args))),
        Command::Status(t) => runtime().and_then(|rt| rt.block_on(ops::status(&t))),
        Command::Tools(t) => runtime().and_then(|rt| rt.block_on(ops::tools(&t))),
        Command::Catalog { target, command } => {
            runtime().and_then(|rt| rt.block_on(ops::catalog(&target, &command)))
        }
        Command::Plugins { target, command } => {
            runtime().and_then(|rt| rt.block_on(ops::plugins(&target, &command)))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolhost: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The daemon's runtime. Plugins are processes of their own, competing for
/// the same cores: measured on 2 cores, one worker thread per two cores
/// halves the context switches per call and raises throughput by half
/// (BENCHMARKS.md). `TOKIO_WORKER_THREADS` overrides it.
fn serve_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        b.worker_threads((cores / 2).max(1));
    }
    Ok(b.enable_all().build()?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Output formats shared by the reporting commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// For machines: one JSON document on stdout.
    Json,
}

/// The directories a command reads plugins from, when none are given.
fn default_plugin_paths() -> Vec<PathBuf> {
    vec![PathBuf::from("plugins")]
}
