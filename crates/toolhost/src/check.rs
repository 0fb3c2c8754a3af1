//! `toolhost check PATH...`: install validation without installing.

use crate::format::Format;
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost_manifest::{Annotations, check_set, expand_plugin_dirs, naming};

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Plugin directories, or directories of plugin directories.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// The exposed-name prefix.
    #[arg(long, default_value = naming::DEFAULT_PREFIX)]
    prefix: String,
}

fn hints(a: &Annotations) -> String {
    [
        if a.read_only { "read-only" } else { "writes" },
        if a.destructive {
            "destructive"
        } else {
            "non-destructive"
        },
        if a.idempotent {
            "idempotent"
        } else {
            "not idempotent"
        },
        if a.open_world {
            "open world"
        } else {
            "closed world"
        },
    ]
    .join(", ")
}

pub fn run(args: &CheckArgs) -> Result<ExitCode> {
    if !naming::is_valid_prefix(&args.prefix) {
        eprintln!(
            "toolhost check: --prefix must be 1 to 16 lowercase letters and digits, starting with a letter"
        );
        return Ok(ExitCode::from(2));
    }
    let paths = if args.paths.is_empty() {
        default_plugin_paths()
    } else {
        args.paths.clone()
    };
    let (dirs, mut problems) = expand_plugin_dirs(&paths);
    let set = check_set(&args.prefix, &dirs);
    problems.extend(set.all_problems());
    let valid = problems.is_empty();

    match args.format {
        Format::Json => {
            let plugins: Vec<_> = set
                .plugins
                .iter()
                .map(|m| {
                    let tools: Vec<_> = m
                        .tools
                        .iter()
                        .map(|t| {
                            json!({
                                "local": t.name,
                                "exposed": naming::exposed(&args.prefix, &m.id, &t.name),
                                "surfaces": t.surfaces,
                                "reset_timeout_on_progress": t.reset_timeout_on_progress,
                                "annotations": {
                                    "read_only": t.annotations.read_only,
                                    "destructive": t.annotations.destructive,
                                    "idempotent": t.annotations.idempotent,
                                    "open_world": t.annotations.open_world,
                                },
                            })
                        })
                        .collect();
                    json!({ "id": m.id, "version": m.version.to_string(), "dir": m.dir, "protocol": m.runtime.protocol, "tools": tools, "config": config_json(m), "capabilities": capabilities_json(m) })
                })
                .collect();
            let problems: Vec<_> = problems
                .iter()
                .map(|p| json!({ "file": p.file, "tool": p.tool, "rule": p.rule.code(), "message": p.message }))
                .collect();
            outln!(
                "{}",
                json!({ "valid": valid, "plugins": plugins, "problems": problems })
            );
        }
        Format::Text => {
            for m in &set.plugins {
                outln!(
                    "{} {} ({}), plugin protocol {}",
                    m.id,
                    m.version,
                    m.dir.display(),
                    m.runtime.protocol
                );
                for t in &m.tools {
                    outln!("  {}", naming::exposed(&args.prefix, &m.id, &t.name));
                    outln!("      surfaces: {}", t.surfaces.join(", "));
                    outln!("      hints:    {}", hints(&t.annotations));
                }
                for line in m.asks() {
                    outln!("  {line}");
                }
            }
            for p in &problems {
                eprintln!("error: {p}");
            }
            if valid {
                let tools: usize = set.plugins.iter().map(|m| m.tools.len()).sum();
                outln!("ok: {} plugin(s), {tools} tool(s)", set.plugins.len());
            } else {
                eprintln!("{} problem(s) found", problems.len());
            }
        }
    }
    Ok(if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn config_json(m: &toolhost_manifest::Manifest) -> serde_json::Value {
    use toolhost_manifest::grants::ConfigValue;
    m.config
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "description": c.description,
                "type": c.kind.as_str(),
                "required": c.required,
                "secret": c.secret,
                "default": c.default.as_ref().map(|d| match d {
                    ConfigValue::String(s) => json!(s),
                    ConfigValue::Integer(n) => json!(n),
                    ConfigValue::Boolean(b) => json!(b),
                }),
            })
        })
        .collect()
}

fn capabilities_json(m: &toolhost_manifest::Manifest) -> serde_json::Value {
    use toolhost_manifest::grants::{Access, Network};
    let caps = &m.capabilities;
    json!({
        "filesystem": caps.filesystem.iter().map(|g| json!({
            "path": g.path,
            "access": match g.access { Access::Read => "read", Access::Write => "write" },
        })).collect::<Vec<_>>(),
        "network": match &caps.network {
            Network::None => json!("none"),
            Network::Any => json!("any"),
            Network::Connect(ports) => json!({ "connect": ports }),
        },
        "env": caps.env,
        "memory_mb": caps.memory_mb,
        "open_files": caps.open_files,
        "processes": caps.processes,
    })
}

/// The directories a command reads plugins from, when none are given.
fn default_plugin_paths() -> Vec<PathBuf> {
    vec![PathBuf::from("plugins")]
}
