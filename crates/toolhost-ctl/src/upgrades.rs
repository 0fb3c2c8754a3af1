//! What a lifecycle operation answers, on the terminal: what an install
//! or upgrade asks for, what an upgrade changes (or would, with
//! `--dry-run`), an upgrade held for the operator and its rejection, and
//! the catalog version it published. Every text is the daemon's, which got
//! much of it from manifests and archives, so each is one escaped line.

use crate::show::{one_plugin_for_text, print_config, print_grants, print_held};
use std::path::Path;
use std::process::ExitCode;
use toolhost_admin::admin as pb;
use toolhost_base::outln;

/// The id and version of the plugin a directory or `.tar.gz` holds, read
/// from its `plugin.toml` (at the top, or under one top directory), to
/// show what was installed. `None` when it cannot be read: the daemon's
/// answer says why.
pub(crate) fn plugin_named_by(path: &Path) -> Option<(String, String)> {
    let text = if path.is_dir() {
        std::fs::read_to_string(path.join("plugin.toml")).ok()?
    } else {
        // Read as the daemon reads an archive: every header bounded.
        let bytes = toolhost_package::archive::read_entry(
            path,
            toolhost_package::ArchiveLimits::default(),
            |p| p.file_name().is_some_and(|n| n == "plugin.toml") && p.components().count() <= 2,
            toolhost_manifest::manifest::MAX_MANIFEST_BYTES,
        )
        .ok()
        .flatten()?;
        String::from_utf8(bytes).ok()?
    };
    let table: toml::Table = text.parse().ok()?;
    Some((
        table.get("id")?.as_str()?.to_owned(),
        table.get("version")?.as_str()?.to_owned(),
    ))
}

/// Shows what a just installed or upgraded plugin asks for, granted or not.
/// True when the install is complete but for its configuration: a success
/// with a next step, not a failure.
pub(crate) async fn report_installed(
    c: &mut toolhost_admin::Client,
    path: &Path,
    needs_config: bool,
) -> bool {
    let Some((id, version)) = plugin_named_by(path) else {
        return false;
    };
    report_plugin(c, &id, &version, needs_config).await
}

/// [`report_installed`] for plugin `id` at `version` (empty: whichever).
pub(crate) async fn report_plugin(
    c: &mut toolhost_admin::Client,
    id: &str,
    version: &str,
    needs_config: bool,
) -> bool {
    if let Some(p) = &one_plugin_for_text(c, id).await.ok().flatten() {
        let asks_nothing = p.asks.is_empty() && p.config.is_empty() && p.ungranted.is_empty();
        if asks_nothing {
            outln!(
                "{} {} asks for nothing beyond its own directory",
                p.id,
                p.version
            );
        } else {
            outln!("{} {} asks for:", p.id, p.version);
        }
        print_grants(p);
        print_config(&p.config);
        // Installed, and waiting only for its configuration: that is a
        // success with a next step, not a failure.
        if needs_config
            && (version.is_empty() || p.version == version)
            && !p.missing_config.is_empty()
        {
            outln!(
                "installed: {} {} starts once its configuration is set: toolhost plugins config {} {}",
                p.id,
                p.version,
                p.id,
                p.missing_config
                    .iter()
                    .map(|n| {
                        // A secret is best given from a file.
                        let secret = p.config.iter().any(|i| &i.name == n && i.secret);
                        if secret {
                            format!("{n}=@FILE")
                        } else {
                            format!("{n}=VALUE")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            return true;
        }
    }
    false
}

/// An upgrade answered as held: what it changes, that it waits for the
/// operator and how to decide. False for any other answer.
pub(crate) fn reported_held(
    answer: &Result<tonic::Response<pb::LifecycleResponse>, tonic::Status>,
    path: &Path,
) -> bool {
    let Ok(r) = answer else {
        return false;
    };
    let r = r.get_ref();
    if r.held.is_empty() {
        return false;
    }
    let (id, version) = plugin_named_by(path).unwrap_or_else(|| {
        let id = if r.plugin.is_empty() {
            "ID"
        } else {
            r.plugin.as_str()
        };
        (
            toolhost_base::term::one_line(id).into_owned(),
            "?".to_owned(),
        )
    });
    print_changes(&r.changes, "changes");
    let held = pb::HeldUpgrade {
        version,
        why: toolhost_base::term::one_line(&r.held).into_owned(),
        changes: Vec::new(),
        statement: String::new(),
        downgrade: false,
        source: String::new(),
    };
    print_held(&id, &held, "");
    outln!("the installed version keeps serving");
    true
}

/// `toolhost plugins reject ID`.
pub(crate) async fn reject(c: &mut toolhost_admin::Client, id: &str) -> anyhow::Result<ExitCode> {
    let r = c
        .reject_upgrade(pb::PluginRef { id: id.to_owned() })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    outln!("rejected: the upgrade held for {id} is deleted; the installed version goes on");
    print_done(&r.into_inner(), false);
    Ok(ExitCode::SUCCESS)
}

/// An upgrade's changes to the plugin's contract and asks, as the daemon
/// wrote them (escaped there, and again here for the terminal).
pub(crate) fn print_changes(changes: &[String], verb: &str) {
    if changes.is_empty() {
        outln!("the upgrade {verb} none of its tools' contracts or its sandbox asks");
        return;
    }
    outln!("the upgrade {verb}:");
    for c in changes {
        outln!("  {}", toolhost_base::term::one_line(c));
    }
}

/// `toolhost plugins upgrade PATH --dry-run`: what would change, or why
/// the upgrade would be refused.
pub(crate) async fn upgrade_dry_run(
    c: &mut toolhost_admin::Client,
    target: &crate::publish::Source,
    allow_downgrade: bool,
) -> anyhow::Result<std::process::ExitCode> {
    let (path, reference) = match target {
        crate::publish::Source::Path(p) => (p.display().to_string(), String::new()),
        crate::publish::Source::Reference(r) => (String::new(), r.clone()),
    };
    let r = c
        .upgrade_plugin(pb::UpgradePluginRequest {
            path,
            values: Default::default(),
            dry_run: true,
            allow_downgrade,
            reference,
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    let r = r.into_inner();
    print_changes(&r.changes, "would change");
    if !r.held.is_empty() {
        outln!(
            "it would be held for the operator: {}",
            toolhost_base::term::one_line(&r.held)
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A lifecycle operation's answer: an upgrade's changes, then the catalog
/// version it published.
pub(crate) fn print_done(r: &pb::LifecycleResponse, upgraded: bool) {
    if upgraded {
        print_changes(&r.changes, "changed");
    }
    outln!(
        "ok: catalog generation {} revision {}",
        r.generation,
        r.revision
    );
}
