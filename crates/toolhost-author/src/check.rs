//! `toolhost check PATH...`: install validation without installing.

use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost_base::term::Format;
use toolhost_base::{errln, outjson, outln};
use toolhost_daemon::config::{Config, default_state_dir};
use toolhost_daemon::settings::Overrides;
use toolhost_manifest::{Annotations, check_set, expand_plugin_dirs, naming};

/// The flags of `toolhost check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Plugin directories, or directories of plugin directories.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Output format.
    /// Output format: text or json.
    #[arg(long, default_value_t)]
    format: Format,
    /// The exposed-name prefix.
    #[arg(long, default_value = naming::DEFAULT_PREFIX)]
    prefix: String,
    /// Also check the operator's configuration file as `serve` would read
    /// it: unknown keys (with the key meant), unknown plugins, undeclared
    /// or inline-secret config items. Its plugin paths and installed
    /// plugins are checked with PATHs.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Also start each valid plugin (default sandbox, a scratch data
    /// directory), ask its code which tools it implements, and stop it: a
    /// declared tool without a handler is a problem, a handler for an
    /// undeclared tool a warning.
    #[arg(long)]
    start: bool,
    /// With --start: a configuration value a plugin needs to start,
    /// `NAME=VALUE` or `NAME=@FILE` (for secrets), given to every plugin
    /// that declares the item. Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE", requires = "start")]
    set: Vec<String>,
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

/// Checks the plugins and prints what it found.
///
/// Kept whole on purpose: the checks run and print in the order an author reads
/// the report; each is a few lines that share the tally of problems.
pub fn run(args: &CheckArgs) -> Result<ExitCode> {
    if !naming::is_valid_prefix(&args.prefix) {
        errln!(
            "toolhost check: --prefix must be 1 to 16 lowercase letters and digits, starting with a letter"
        );
        return Ok(ExitCode::from(2));
    }
    let mut paths = args.paths.clone();
    let mut config_problems = Vec::new();
    let loaded = match &args.config {
        Some(file) => match Config::load(file) {
            Ok(c) => {
                paths.extend(config_plugin_paths(&c));
                Some((file, c))
            }
            Err(e) => {
                config_problems.push(format!("{e:#}"));
                None
            }
        },
        None => None,
    };
    if paths.is_empty() && args.config.is_none() {
        paths = default_plugin_paths();
    }
    let (dirs, mut problems) = expand_plugin_dirs(&paths);
    let set = check_set(&args.prefix, &dirs);
    problems.extend(set.all_problems());
    if let Some((file, c)) = loaded {
        config_problems.extend(check_config(file, c, &set.plugins));
    }
    if args.start && problems.is_empty() {
        // Read again: checking it consumed it (the file read like `serve`).
        let config = args.config.as_deref().and_then(|f| Config::load(f).ok());
        let values = crate::code::parse_sets(&args.set)?;
        config_problems.extend(start_and_describe(&set.plugins, config.as_ref(), &values)?);
    }
    let valid = problems.is_empty() && config_problems.is_empty();

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
                                "task": t.task.as_str(),
                                "task_timeout_ms": t.task_timeout_ms,
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
                .chain(config_problems.iter().map(|p| json!({ "file": args.config, "rule": "config", "message": p })))
                .collect();
            outjson!(json!({ "valid": valid, "plugins": plugins, "problems": problems }));
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
                    if t.task != toolhost_manifest::TaskSupport::Never {
                        match t.task_timeout_ms {
                            Some(ms) => outln!(
                                "      task:     {} (runs up to {ms} ms as a task)",
                                t.task.as_str()
                            ),
                            None => outln!("      task:     {}", t.task.as_str()),
                        }
                    }
                }
                for line in m.asks() {
                    outln!("  {line}");
                }
            }
            for p in &problems {
                errln!("error: {p}");
            }
            for p in &config_problems {
                errln!("error: {p}");
            }
            if valid {
                let tools: usize = set.plugins.iter().map(|m| m.tools.len()).sum();
                outln!("ok: {} plugin(s), {tools} tool(s)", set.plugins.len());
                if let Some(file) = &args.config {
                    outln!("ok: {}", file.display());
                }
            } else {
                errln!(
                    "{} problem(s) found",
                    problems.len() + config_problems.len()
                );
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
        "credentials": caps.credentials,
    })
}

/// Starts each plugin as `serve --dev` would and compares what its code
/// says with its manifest ([`crate::code`]). Returns the problems: a start
/// that fails, declared tools without a handler, and tools whose code
/// states a shape the manifest's schemas do not match.
fn start_and_describe(
    plugins: &[toolhost_manifest::Manifest],
    config: Option<&Config>,
    values: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    crate::code::start_each(plugins, config, values, true, |m, started| {
        let started = match started {
            Ok(s) => s,
            Err(problem) => {
                problems.push(problem);
                return;
            }
        };
        match &started.described {
            Some(d) => outln!(
                "{}: started; its code implements {} ({})",
                m.id,
                if d.tools.is_empty() {
                    "no tools".to_owned()
                } else {
                    d.tools.join(", ")
                },
                if d.sdk.is_empty() {
                    "SDK not named"
                } else {
                    &d.sdk
                }
            ),
            None => outln!(
                "{}: started; it does not say which tools it implements (no Describe)",
                m.id
            ),
        }
        if !started.unimplemented.is_empty() {
            problems.push(format!(
                "{}: tools declared in plugin.toml but not implemented by its code: {} (add a handler, or remove the declaration)",
                m.id,
                started.unimplemented.join(", ")
            ));
        }
        if !started.undeclared.is_empty() {
            errln!(
                "warning: {}: its code implements tools plugin.toml does not declare, which no agent can call: {}",
                m.id,
                started.undeclared.join(", ")
            );
        }
        if let Some(d) = &started.described {
            problems.extend(toolhost_lifecycle::drift::drift(m, &d.shapes, &m.dir));
        }
    })?;
    Ok(problems)
}

/// The plugins a daemon with this configuration runs: its plugin paths,
/// and what is installed in its state directory.
fn config_plugin_paths(c: &Config) -> Vec<PathBuf> {
    let mut paths = c.plugins.clone();
    let state = c.state_dir.clone().unwrap_or_else(default_state_dir);
    if let Ok(text) = std::fs::read_to_string(state.join("plugins.json"))
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(installed) = v["installed"].as_object()
    {
        for (id, version) in installed {
            if let Some(version) = version.as_str() {
                paths.push(state.join("plugins").join(format!("{id}@{version}")));
            }
        }
    }
    paths
}

/// The file's problems a start would meet, all of them: settings that do
/// not hold together (read as `serve` reads them), `[plugin.ID]` tables
/// for plugins it would not run, and per plugin its config items the
/// manifest does not declare and secrets given inline.
fn check_config(
    file: &std::path::Path,
    c: Config,
    plugins: &[toolhost_manifest::Manifest],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut unreadable = false;
    let ids: Vec<&str> = plugins.iter().map(|m| m.id.as_str()).collect();
    for (id, pc) in &c.plugin {
        let operator = match pc.operator(id) {
            Ok(o) => o,
            Err(e) => {
                out.push(format!("[plugin.{id}]: {e:#}"));
                unreadable = true;
                continue;
            }
        };
        match plugins.iter().find(|m| &m.id == id) {
            Some(m) => out.extend(toolhost_lifecycle::settings::check_file(
                m,
                &operator.config,
            )),
            None => out.push(format!(
                "[plugin.{id}]: no plugin {id:?} is on the plugin paths or installed{}",
                toolhost_lifecycle::settings::did_you_mean(id, ids.iter().copied())
                    .map(|m| format!("; did you mean [plugin.{m}]?"))
                    .unwrap_or_default()
            )),
        }
    }
    // Everything else, as a start reads it (token files, the sandbox,
    // limits); a listener is given so the file need not name one.
    let listen = Overrides {
        http: Some("127.0.0.1:0".to_owned()),
        ..Overrides::default()
    };
    if unreadable {
        // The start would stop at the first of those, said above.
        return out;
    }
    if let Err(e) = c.resolve(listen) {
        out.push(format!("{}: {e:#}", file.display()));
    }
    out
}

/// The directories a command reads plugins from, when none are given.
fn default_plugin_paths() -> Vec<PathBuf> {
    vec![PathBuf::from("plugins")]
}
