//! The command line: the commands, and which library code each runs on
//! which runtime.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use toolhost_author::{check, harness, new, pack, sign, sync};
use toolhost_base::errln;
use toolhost_ctl::{approvals, call, catalog, fleet, ops, placing, publish, status};
use toolhost_daemon::serve;

/// Runs plugin processes and serves their tools to AI agents over MCP.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, about, long_about = None)]
pub struct Cli {
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
    /// Build a plugin and write an installable .tar.gz of what it needs at
    /// run time (release binary, vendored dependencies, built JavaScript).
    Pack {
        #[command(flatten)]
        args: pack::PackArgs,
        /// How to reach the registry (with --push).
        #[command(flatten)]
        registry: publish::RegistryArgs,
    },
    /// Push a package (and its signature beside it) to an OCI registry:
    /// `toolhost push ARCHIVE REGISTRY/REPO:TAG`. Install it with
    /// `toolhost plugins install REGISTRY/REPO@sha256:DIGEST`.
    Push(publish::PushArgs),
    /// Make a key pair to sign packages with (`pack --sign KEY`): minisign's
    /// format, the secret key private, its public half beside it.
    Keygen(sign::KeygenArgs),
    /// The tools' schemas, between a plugin's code and its manifest.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// The call pipeline for an SDK's test harness: JSON lines on stdin and
    /// stdout, a tool run in the test's own process through every rule an
    /// agent's call meets (the SDKs start it; see their READMEs).
    #[command(hide = true)]
    Harness(harness::HarnessArgs),
    /// Call one tool through a running daemon's MCP endpoint, as an agent
    /// would. Exit 0 on success, 1 when the result is an error.
    Call(call::CallArgs),
    /// The running daemon at a glance: plugins, catalog, sessions.
    Status(status::StatusArgs),
    /// The running daemon's catalog: exposed names and surfaces.
    Tools(ops::Target),
    /// Show or push the running daemon's catalog.
    Catalog {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: catalog::CatalogCommand,
    },
    /// The fleet of daemons that follow a NATS bucket.
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// The tool calls running as MCP tasks, and those whose results are
    /// kept; `tasks cancel ID` cancels one.
    Tasks {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: Option<ops::TasksCommand>,
    },
    /// The calls waiting for the operator's approval (the backend asked
    /// for one); `approvals approve ID` or `approvals deny ID` decides one.
    Approvals {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: Option<approvals::ApprovalsCommand>,
    },
    /// Control the running daemon's plugins.
    Plugins {
        #[command(flatten)]
        target: ops::Target,
        #[command(subcommand)]
        command: ops::PluginsCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SchemaCommand {
    /// Start the plugin, take the shapes its code states in its own types
    /// (type hints, zod or TypeBox, schemars), and write them into its
    /// schema files and plugin.toml, keeping what the author wrote there.
    /// `check --start` then fails whenever the two drift apart.
    Sync(sync::SyncArgs),
}

#[derive(Debug, Subcommand)]
enum FleetCommand {
    /// One row per daemon of the group: what it applied, flagging those
    /// behind the group's catalog, refusing it (NACK), or silent. Exit 1
    /// when any is.
    Status {
        #[command(flatten)]
        nats: fleet::NatsTarget,
        /// A daemon whose heartbeat is older than this many seconds is
        /// flagged silent.
        #[arg(long, default_value_t = 60)]
        silent_after: u64,
    },
    /// Write a catalog snapshot (JSON, as `catalog show` prints it) to the
    /// group's key: every daemon of the group applies it.
    Push {
        #[command(flatten)]
        nats: fleet::NatsTarget,
        /// The snapshot file.
        file: std::path::PathBuf,
    },
    /// Write a placement (JSON: revision, and each plugin's id and
    /// REGISTRY/REPO@sha256:DIGEST) to the group's placement key: every
    /// daemon of the group pulls, verifies and runs those plugins.
    Place {
        #[command(flatten)]
        nats: fleet::NatsTarget,
        /// The placement file.
        file: std::path::PathBuf,
    },
    /// The group's placement against each daemon: what each installed,
    /// and which are converging, held or failed (with why). Exit 1 unless
    /// every daemon has converged.
    Plugins {
        #[command(flatten)]
        nats: fleet::NatsTarget,
    },
}

/// Runs one command line.
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Check(args) => check::run(&args),
        Command::New(args) => new::run(&args),
        Command::Pack { args, registry } => pack_and_push(&args, &registry),
        Command::Push(a) => push(&a),
        Command::Keygen(args) => sign::keygen(&args),
        Command::Harness(args) => harness::run(&args),
        Command::Schema {
            command: SchemaCommand::Sync(args),
        } => sync::run(&args),
        Command::Serve(args) => {
            serve_runtime().and_then(|rt| rt.block_on(serve::run(args)).map(|()| ExitCode::SUCCESS))
        }
        Command::Call(args) => runtime().and_then(|rt| rt.block_on(call::run(args))),
        Command::Status(args) => runtime().and_then(|rt| rt.block_on(status::status(&args))),
        Command::Tools(t) => runtime().and_then(|rt| rt.block_on(ops::tools(&t))),
        Command::Tasks { target, command } => {
            runtime().and_then(|rt| rt.block_on(ops::tasks(&target, command)))
        }
        Command::Approvals { target, command } => {
            runtime().and_then(|rt| rt.block_on(approvals::approvals(&target, command)))
        }
        Command::Catalog {
            command:
                catalog::CatalogCommand::Push {
                    file,
                    nats: Some(url),
                    bucket,
                    group,
                },
            ..
        } => {
            let target = fleet::NatsTarget {
                url,
                bucket,
                group,
                token_file: None,
                creds_file: None,
                user: None,
                password_file: None,
                tls_ca_file: None,
            };
            runtime().and_then(|rt| rt.block_on(fleet::push(&target, &file)))
        }
        Command::Catalog {
            command:
                catalog::CatalogCommand::Build {
                    paths,
                    prefix,
                    generation,
                    epoch,
                    revision,
                },
            ..
        } => fleet::build_catalog(&paths, &prefix, &generation, epoch, revision),
        Command::Catalog { target, command } => {
            runtime().and_then(|rt| rt.block_on(catalog::catalog(&target, &command)))
        }
        Command::Fleet { command } => fleet_command(command),
        Command::Plugins { target, command } => {
            runtime().and_then(|rt| rt.block_on(ops::plugins(&target, &command)))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            errln!("toolhost: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The daemon's runtime. Plugins are processes of their own, competing for
/// the same cores: measured on 2 cores, one worker thread per two cores
/// halves the context switches per call and raises throughput by half
/// (BENCHMARKS.md). `TOKIO_WORKER_THREADS` overrides it.
///
/// One worker is Tokio's current-thread scheduler, not a multi-thread one
/// of one worker: the latter runs a task woken by the running one at once
/// (its LIFO slot), so each call's request to a plugin woke the HTTP/2
/// connection's task and was written alone (1.9 `writev` a call); queued
/// behind the other calls, requests share a write (1.2), and the plugin
/// wakes less often too. The work is the same either way: one thread runs
/// every task.
fn serve_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let workers = match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => n
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "TOKIO_WORKER_THREADS must be a whole number of at least 1, not {n:?}"
                )
            })?,
        Err(_) => {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            (cores / 2).max(1)
        }
    };
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    Ok(builder.enable_all().build()?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// `toolhost pack`, then with `--push REF` the push of what it wrote.
fn pack_and_push(
    args: &pack::PackArgs,
    registry: &publish::RegistryArgs,
) -> anyhow::Result<ExitCode> {
    match pack::run_to(args)? {
        (code, Some(archive)) => match &args.push {
            Some(reference) => {
                runtime().and_then(|rt| rt.block_on(publish::push(&archive, reference, registry)))
            }
            None => Ok(code),
        },
        (code, None) => Ok(code),
    }
}

/// `toolhost push`.
fn push(a: &publish::PushArgs) -> anyhow::Result<ExitCode> {
    runtime().and_then(|rt| rt.block_on(publish::push(&a.archive, &a.reference, &a.registry)))
}

/// `toolhost fleet ...`.
fn fleet_command(command: FleetCommand) -> anyhow::Result<ExitCode> {
    runtime().and_then(|rt| {
        rt.block_on(async {
            match command {
                FleetCommand::Status { nats, silent_after } => {
                    fleet::status(&nats, silent_after).await
                }
                FleetCommand::Push { nats, file } => fleet::push(&nats, &file).await,
                FleetCommand::Place { nats, file } => placing::place_fleet(&nats, &file).await,
                FleetCommand::Plugins { nats } => placing::plugins_fleet(&nats).await,
            }
        })
    })
}
