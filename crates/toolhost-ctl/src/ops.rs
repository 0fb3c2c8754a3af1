//! Operator commands that talk to a running daemon over its admin socket:
//! `tools`, `tasks` and `plugins ...` (`status` has a module of its own).

use crate::show::{
    installed_plugins, one_line_status, one_plugin, one_plugin_for_text, plugin_json, print_config,
    print_grants, print_sandbox,
};
use anyhow::{Context as _, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost_admin::admin as pb;
use toolhost_base::term::Format;
use toolhost_base::{outjson, outln};
use toolhost_daemon::config::Config;
use toolhost_managed::snapshot_from_proto;

/// How to find the daemon.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The admin socket (default: from --config, else <state dir>/admin.sock).
    #[arg(long, env = "TOOLHOST_ADMIN", global = true)]
    admin: Option<PathBuf>,
    /// The daemon's configuration file, to find its admin socket.
    #[arg(long, short, env = "TOOLHOST_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Output format.
    #[arg(long, default_value_t, global = true)]
    pub(crate) format: Format,
}

impl Target {
    pub(crate) async fn connect(&self) -> Result<toolhost_admin::Client> {
        let path = match (&self.admin, &self.config) {
            (Some(p), _) => p.clone(),
            (None, Some(c)) => Config::load(c)?.admin_socket(None),
            (None, None) => Config::default().admin_socket(None),
        };
        Ok(toolhost_admin::connect_unix(&path).await?)
    }
}

/// `toolhost plugins ...`.
#[derive(Debug, clap::Subcommand)]
pub enum PluginsCommand {
    /// List plugins: version, origin, state, and what needs the operator
    /// (a summary of each; `plugins show ID` or `--detail` for the rest).
    List {
        /// Everything about each plugin: each tool's policy, every
        /// withheld tool by name (a summary names ten), and what each
        /// enforced sandbox rule holds.
        #[arg(long)]
        detail: bool,
        /// At most this many plugins (in id order); with `--after`, one
        /// page at a time.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// Only plugins whose id sorts after this one: the last id of the
        /// page before.
        #[arg(long, value_name = "ID")]
        after: Option<String>,
    },
    /// Restart a plugin now (also the way out of `failed`).
    Restart {
        /// The plugin id.
        id: String,
    },
    /// Install a plugin from a .tar.gz (`toolhost pack` makes one), a
    /// directory, or an OCI registry (REGISTRY/REPO:TAG or
    /// REGISTRY/REPO@sha256:DIGEST, pulled by the daemon by digest), with
    /// configuration values in the same step.
    Install {
        /// The plugin archive, directory, or registry reference.
        path: PathBuf,
        /// NAME=VALUE or NAME=@FILE: configuration values, checked against
        /// the plugin's items and stored before it starts.
        values: Vec<String>,
    },
    /// Upgrade an installed plugin to the version in a .tar.gz, a
    /// directory or a registry reference, with values for what the new
    /// version needs.
    Upgrade {
        /// The plugin archive, directory, or registry reference.
        path: PathBuf,
        /// NAME=VALUE or NAME=@FILE: values for the new version (an item it
        /// adds), stored once it has taken over.
        values: Vec<String>,
        /// Only print what the upgrade would change (tools, descriptions,
        /// schemas, annotations, sandbox asks, runtime), or why it would be
        /// refused; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Allow this one upgrade to an older version (refused otherwise:
        /// an old release stays validly signed, whatever holes it has).
        /// Audited.
        #[arg(long)]
        allow_downgrade: bool,
    },
    /// Accept the upgrade held for a plugin (it changed the plugin's
    /// sandbox asks, or its contract under contract_changes = "hold"): it
    /// takes over as an upgrade does.
    ///
    /// Name what you reviewed: the held version (`--version`) or its
    /// statement digest (`--statement`), as `plugins show ID` prints them.
    /// If a later upgrade replaced it, nothing is accepted.
    #[command(group = clap::ArgGroup::new("reviewed").required(true).args(["version", "statement"]))]
    Accept {
        /// The plugin id.
        id: String,
        /// The held version you reviewed.
        #[arg(long)]
        version: Option<String>,
        /// The statement digest (sha256:HEX) of the held upgrade you
        /// reviewed.
        #[arg(long)]
        statement: Option<String>,
        /// NAME=VALUE or NAME=@FILE: values the held version needs (by
        /// default, those given with the upgrade).
        values: Vec<String>,
    },
    /// Managed mode: place plugins on this daemon from a placement file
    /// (JSON: revision, and each plugin's id and
    /// REGISTRY/REPO@sha256:DIGEST); it converges and says where each
    /// stands. Exit 1 unless every one is ready.
    Place {
        /// The placement file.
        file: PathBuf,
    },
    /// Reject the upgrade held for a plugin: it is deleted, and the
    /// installed version goes on.
    Reject {
        /// The plugin id.
        id: String,
    },
    /// Enable a plugin: start it; its tools return when it is ready.
    Enable {
        /// The plugin id.
        id: String,
    },
    /// Disable a plugin: withdraw its tools, cancel its calls, stop it.
    Disable {
        /// The plugin id.
        id: String,
    },
    /// Remove an installed plugin; its data is kept unless --purge.
    Remove {
        /// The plugin id.
        id: String,
        /// Also delete its data directory.
        #[arg(long)]
        purge: bool,
    },
    /// Set configuration values: NAME=VALUE, or NAME=@FILE to read the value
    /// from a file (for secrets: the value then never appears in your
    /// shell history or the process list). With no values, show each
    /// item's state (never a value).
    Config {
        /// The plugin id.
        id: String,
        /// NAME=VALUE or NAME=@FILE.
        values: Vec<String>,
        /// Return an item to the configuration file's value or its default
        /// (repeatable).
        #[arg(long, value_name = "NAME")]
        unset: Vec<String>,
    },
    /// Show what a plugin asks for, what is granted, and its sandbox.
    Show {
        /// The plugin id.
        id: String,
    },
}

/// Parses `NAME=VALUE` / `NAME=@FILE` (one trailing newline of a file is
/// dropped). Errors never repeat the value.
fn config_values(args: &[String]) -> Result<std::collections::HashMap<String, String>> {
    let mut out = std::collections::HashMap::new();
    for a in args {
        let Some((name, value)) = a.split_once('=') else {
            anyhow::bail!("expected NAME=VALUE or NAME=@FILE, got an argument without `=`");
        };
        let value = match value.strip_prefix('@') {
            Some(file) => {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("cannot read the value of {name} from {file}"))?;
                text.strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text)
                    .to_owned()
            }
            None => value.to_owned(),
        };
        if out.insert(name.to_owned(), value).is_some() {
            anyhow::bail!("{name} is given twice");
        }
    }
    Ok(out)
}

pub(crate) fn status_error(s: &tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{} ({:?})", s.message(), s.code())
}

/// `toolhost tasks` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TasksCommand {
    /// Cancel a running task, whoever owns it: its plugin call is
    /// cancelled and the task ends cancelled.
    Cancel {
        /// The task's id, as `toolhost tasks` lists it.
        id: String,
    },
}

/// `toolhost tasks`: lists the tasks, or cancels one.
pub async fn tasks(t: &Target, command: Option<TasksCommand>) -> Result<ExitCode> {
    let mut c = t.connect().await?;
    if let Some(TasksCommand::Cancel { id }) = command {
        c.cancel_task(pb::CancelTaskRequest { id: id.clone() })
            .await
            .map_err(|e| status_error(&e))?;
        outln!("cancelled task {id}");
        return Ok(ExitCode::SUCCESS);
    }
    let list = c
        .list_tasks(pb::ListTasksRequest {})
        .await
        .map_err(|e| status_error(&e))?
        .into_inner()
        .tasks;
    if t.format == Format::Json {
        let rows: Vec<_> = list
            .iter()
            .map(|e| {
                serde_json::json!({ "id": e.id, "tool": e.tool, "state": e.state, "owner": e.owner, "age_ms": e.age_ms })
            })
            .collect();
        outjson!(serde_json::Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("no tasks");
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<32}  {:<14}  {:<8}  {:>8}  tool",
        "task",
        "state",
        "owner",
        "age s"
    );
    for e in list {
        outln!(
            "{:<32}  {:<14}  {:<8}  {:>8}  {}",
            e.id,
            e.state,
            e.owner,
            e.age_ms / 1000,
            e.tool
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost tools`.
pub async fn tools(t: &Target) -> Result<ExitCode> {
    let mut c = t.connect().await?;
    let snap = c
        .get_catalog(pb::GetCatalogRequest {})
        .await
        .map_err(|e| status_error(&e))?
        .into_inner();
    let snap = snapshot_from_proto(snap)
        .map_err(|p| anyhow::anyhow!("the daemon sent an unreadable catalog: {p:?}"))?;
    if t.format == Format::Json {
        let tools: Vec<_> = snap
            .tools
            .iter()
            .map(|d| serde_json::json!({ "exposed": d.exposed_name, "plugin": d.plugin_id, "version": d.plugin_version, "local": d.local_name, "surfaces": d.surfaces }))
            .collect();
        outjson!(
            serde_json::json!({ "generation": snap.generation, "revision": snap.revision, "tools": tools })
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!("generation {} revision {}", snap.generation, snap.revision);
    for d in &snap.tools {
        outln!(
            "  {:<48} {}@{}  [{}]",
            d.exposed_name,
            d.plugin_id,
            d.plugin_version,
            d.surfaces.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost plugins ...`.
/// Kept whole on purpose: one match from a subcommand to its request, then
/// the one place every answer is reported, so an install, an upgrade and an
/// acceptance read their answers the same way.
pub async fn plugins(t: &Target, cmd: &PluginsCommand) -> Result<ExitCode> {
    let mut c = t.connect().await?;
    // Paths are read by the daemon, whose working directory is not ours.
    let answer = match cmd {
        PluginsCommand::List {
            detail,
            limit,
            after,
        } => {
            return list(t, &mut c, *detail, *limit, after.as_deref()).await;
        }
        PluginsCommand::Show { id } => {
            return show_plugin(t, &mut c, id).await;
        }
        PluginsCommand::Config { id, values, unset } => {
            return config(&mut c, id, values, unset).await;
        }
        PluginsCommand::Restart { id } => {
            c.restart_plugin(pb::RestartPluginRequest { id: id.clone() })
                .await
                .map_err(|e| status_error(&e))?;
            outln!("restarting {id}");
            return Ok(ExitCode::SUCCESS);
        }
        PluginsCommand::Install { path, values } => {
            let (path, reference) = match crate::publish::Source::of(path) {
                crate::publish::Source::Path(p) => (p.display().to_string(), String::new()),
                crate::publish::Source::Reference(r) => (String::new(), r),
            };
            c.install_plugin(pb::InstallPluginRequest {
                path,
                values: config_values(values)?,
                reference,
            })
            .await
        }
        PluginsCommand::Upgrade {
            path,
            values,
            dry_run,
            allow_downgrade,
        } => {
            let target = crate::publish::Source::of(path);
            if *dry_run {
                return crate::upgrades::upgrade_dry_run(&mut c, &target, *allow_downgrade).await;
            }
            let (path_text, reference) = match &target {
                crate::publish::Source::Path(p) => (p.display().to_string(), String::new()),
                crate::publish::Source::Reference(r) => (String::new(), r.clone()),
            };
            let answer = c
                .upgrade_plugin(pb::UpgradePluginRequest {
                    path: path_text,
                    values: config_values(values)?,
                    dry_run: false,
                    allow_downgrade: *allow_downgrade,
                    reference,
                })
                .await;
            if crate::upgrades::reported_held(&answer, path) {
                return Ok(ExitCode::SUCCESS);
            }
            answer
        }
        PluginsCommand::Accept {
            id,
            version,
            statement,
            values,
        } => {
            c.accept_upgrade(pb::AcceptUpgradeRequest {
                id: id.clone(),
                values: config_values(values)?,
                version: version.clone().unwrap_or_default(),
                statement: statement.clone().unwrap_or_default(),
            })
            .await
        }
        PluginsCommand::Reject { id } => return crate::upgrades::reject(&mut c, id).await,
        PluginsCommand::Place { file } => return crate::placing::place_admin(&mut c, file).await,
        PluginsCommand::Enable { id } => c.enable_plugin(pb::PluginRef { id: id.clone() }).await,
        PluginsCommand::Disable { id } => c.disable_plugin(pb::PluginRef { id: id.clone() }).await,
        PluginsCommand::Remove { id, purge } => {
            c.remove_plugin(pb::RemovePluginRequest {
                id: id.clone(),
                purge: *purge,
            })
            .await
        }
    };
    // Only the daemon's own mark says "installed, waiting for values": an
    // install refused for another reason is a failure, values and all.
    let needs_config = answer.as_ref().err().is_some_and(|s| {
        s.code() == tonic::Code::FailedPrecondition
            && s.metadata()
                .get(toolhost_admin::OUTCOME_KEY)
                .is_some_and(|v| v == toolhost_admin::NEEDS_CONFIG)
    });
    let r = answer.map_err(|s| anyhow::anyhow!("{}", s.message()));
    // What an installed plugin asks for is shown as it arrives, granted or
    // not, even when it cannot start yet.
    let installed_from = match cmd {
        PluginsCommand::Install { path, .. } | PluginsCommand::Upgrade { path, .. } => Some(path),
        _ => None,
    };
    let pulled = r
        .as_ref()
        .ok()
        .map(|r| (r.get_ref().plugin.clone(), r.get_ref().source.clone()))
        .filter(|(id, source)| !id.is_empty() && !source.is_empty());
    if let Some((id, source)) = &pulled {
        outln!("pulled {}", toolhost_base::term::one_line(source));
        if r.as_ref().is_ok_and(|r| r.get_ref().held.is_empty()) {
            crate::upgrades::report_plugin(&mut c, id, "", false).await;
        }
    }
    if pulled.is_none()
        && let Some(path) = installed_from
        && crate::upgrades::report_installed(&mut c, path, needs_config).await
    {
        return Ok(ExitCode::SUCCESS);
    }
    let upgraded = matches!(
        cmd,
        PluginsCommand::Upgrade { .. } | PluginsCommand::Accept { .. }
    );
    crate::upgrades::print_done(&r?.into_inner(), upgraded);
    Ok(ExitCode::SUCCESS)
}

/// `toolhost plugins list`.
async fn list(
    t: &Target,
    c: &mut toolhost_admin::Client,
    detail: bool,
    limit: Option<u32>,
    after: Option<&str>,
) -> Result<ExitCode> {
    let (plugins, next_after) = match (limit, after) {
        (None, None) => (installed_plugins(c, detail).await?, String::new()),
        _ => {
            // Never 0, which would ask the daemon for every plugin.
            let size = limit.unwrap_or(500).max(1);
            let page = crate::show::plugins_page(c, detail, after.unwrap_or(""), size).await?;
            (page.plugins, page.next_after)
        }
    };
    if t.format == Format::Json {
        let v: Vec<_> = plugins.iter().map(plugin_json).collect();
        outjson!(serde_json::Value::Array(v));
    } else {
        for p in plugins.iter().map(one_line_status) {
            outln!(
                "{:<24} {:<10} {:<10} {}",
                p.id,
                p.version,
                p.origin,
                p.state
            );
            for d in &p.withheld {
                outln!("    withheld {}: {}", d.tool, d.reason);
            }
            withheld_more(&p, "    ");
            print_grants(&p);
        }
    }
    if !next_after.is_empty() {
        // On stderr, so the JSON on stdout stays one array.
        toolhost_base::errln!(
            "more plugins follow: toolhost plugins list --after {}",
            toolhost_base::term::one_line(&next_after)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What a listing did not name of `p`'s withheld tools.
fn withheld_more(p: &pb::PluginStatus, indent: &str) {
    let more = (p.withheld_total as usize).saturating_sub(p.withheld.len());
    if more > 0 {
        outln!(
            "{indent}and {more} more withheld (toolhost plugins show {})",
            p.id
        );
    }
}

/// `toolhost plugins show ID`.
async fn show_plugin(t: &Target, c: &mut toolhost_admin::Client, id: &str) -> Result<ExitCode> {
    let Some(p) = &one_plugin(c, id).await? else {
        anyhow::bail!("no plugin {id:?} is installed");
    };
    if t.format == Format::Json {
        outjson!(plugin_json(p));
        return Ok(ExitCode::SUCCESS);
    }
    let p = &one_line_status(p);
    outln!("{} {} ({}, {})", p.id, p.version, p.origin, p.state);
    if p.state == "restarting" && p.failures >= toolhost_runtime::CRASH_LOOP {
        outln!("    CRASH LOOP: {} failed starts in a row", p.failures);
    }
    if !p.last_error.is_empty() {
        outln!("    last error: {}", p.last_error);
    }
    print_grants(p);
    print_config(&p.config);
    print_sandbox(p);
    crate::show::print_policies(&p.policies);
    Ok(ExitCode::SUCCESS)
}

/// `toolhost plugins config ID [NAME=VALUE...] [--unset NAME...]`: shows the
/// values when given none.
async fn config(
    c: &mut toolhost_admin::Client,
    id: &str,
    values: &[String],
    unset: &[String],
) -> Result<ExitCode> {
    let values = config_values(values)?;
    if values.is_empty() && unset.is_empty() {
        let Some(p) = one_plugin_for_text(c, id).await? else {
            anyhow::bail!("no plugin {id:?} is installed");
        };
        print_config(&p.config);
        for problem in &p.config_file_problems {
            outln!("    config file: {problem}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = c
        .set_plugin_config(pb::SetPluginConfigRequest {
            id: id.to_owned(),
            values,
            unset: unset.to_vec(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    outln!(
        "ok: {id} is {}; catalog generation {} revision {}",
        r.state,
        r.generation,
        r.revision
    );
    let shown = one_line_status(&pb::PluginStatus {
        config: r.config,
        ..pb::PluginStatus::default()
    });
    print_config(&shown.config);
    Ok(ExitCode::SUCCESS)
}
