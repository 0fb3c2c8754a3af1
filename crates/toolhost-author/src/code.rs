//! A plugin's code, started and asked what it implements: `check --start`
//! and `schema sync` both need the plugin's own word about its tools, and
//! both take it the same way, as `serve --dev` runs the plugin (the default
//! sandbox, no grants but its development venv's Python, a scratch data
//! directory), with the values and grants the operator's file gives it.
//!
//! Nothing here serves a tool: the process is asked once and stopped.

use anyhow::Result;
use std::collections::BTreeMap;
use toolhost_daemon::config::Config;
use toolhost_manifest::Manifest;
use toolhost_runtime::Described;

/// What one started plugin said.
#[derive(Debug)]
pub struct Started {
    /// Its `Describe` answer, shapes included; `None` when it gives none.
    pub described: Option<Described>,
    /// Declared tools without a handler.
    pub unimplemented: Vec<String>,
    /// Handlers for tools the manifest does not declare.
    pub undeclared: Vec<String>,
}

/// Starts each plugin in turn, asks it what its code implements (with the
/// shapes of its tools when `keep_shapes`), stops it, and hands the answer,
/// or the problem that kept it from answering, to `each`.
///
/// Kept whole on purpose: the scratch directories, the process and the
/// runtime it runs on live exactly as long as this function, and every
/// early return must stop the plugin first.
pub fn start_each(
    plugins: &[Manifest],
    config: Option<&Config>,
    set: &BTreeMap<String, String>,
    keep_shapes: bool,
    mut each: impl FnMut(&Manifest, Result<Started, String>),
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scratch = std::env::temp_dir().join(format!(
        "toolhost-check-{}",
        toolhost_base::ids::unguessable_id()?
    ));
    toolhost_lifecycle::private_dir(&scratch)?;
    // The file's [sandbox] (its read paths, its account), as its daemon
    // would run the plugin.
    let sandbox = match config {
        Some(c) => c.sandbox.resolve()?,
        None => toolhost_lifecycle::settings::SandboxConfig::default(),
    };
    for m in plugins {
        use toolhost_lifecycle::settings;
        let mut operator = match config.and_then(|c| c.plugin.get(&m.id)) {
            Some(p) => p.operator(&m.id)?,
            None => settings::Operator::default(),
        };
        let resolved = settings::resolve(
            m,
            set,
            &settings::without_inline_secrets(m, &operator.config),
        );
        if !resolved.missing.is_empty() {
            each(
                m,
                Err(format!(
                    "{}: could not start: it needs {} (give it with --set NAME=VALUE or NAME=@FILE, or under [plugin.\"{}\".config] in the file --config names)",
                    m.id,
                    resolved.missing.join(", "),
                    m.id
                )),
            );
            continue;
        }
        let mut spec = toolhost_lifecycle::plugin_spec(m, &scratch);
        spec.config = resolved.delivered;
        // Asking the code writes nothing into the plugin: a Python plugin's
        // bytecode would otherwise land in a packed tree (and its signed
        // statement) or in the author's sources.
        spec.env
            .insert("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned());
        // As `serve --dev` runs it: a development venv's Python may be read.
        operator
            .read
            .extend(toolhost_daemon::dev::venv_base(&m.dir));
        spec.sandbox = settings::sandbox_policy(m, &operator, &sandbox);
        let limit = std::time::Duration::from_millis(m.runtime.startup_timeout_ms)
            + std::time::Duration::from_secs(2);
        let supervision = toolhost_runtime::SupervisorConfig {
            keep_shapes,
            ..toolhost_runtime::SupervisorConfig::default()
        };
        let (ready, state, (unimplemented, undeclared)) = runtime.block_on(async {
            let handle = toolhost_runtime::supervise(spec, supervision);
            let mut rx = handle.subscribe();
            let waited = tokio::time::timeout(
                limit,
                rx.wait_for(|s| {
                    matches!(
                        s.phase,
                        toolhost_runtime::Phase::Ready
                            | toolhost_runtime::Phase::Restarting
                            | toolhost_runtime::Phase::Failed
                    )
                }),
            )
            .await
            // The state's guard is let go here: holding it would keep
            // the supervisor from saying it stopped.
            .is_ok_and(|seen| seen.is_ok());
            let state = handle.state();
            let ready = waited && state.phase == toolhost_runtime::Phase::Ready;
            let differences = handle.tool_differences();
            handle.stop().await;
            (ready, state, differences)
        });
        if !ready {
            each(
                m,
                Err(format!(
                    "{}: did not start: {}",
                    m.id,
                    state
                        .last_error
                        .unwrap_or_else(|| "it did not become ready in time".to_owned())
                )),
            );
            continue;
        }
        each(
            m,
            Ok(Started {
                described: state.described,
                unimplemented,
                undeclared,
            }),
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Every `--set NAME=VALUE` (or `NAME=@FILE`), by name, as `serve --dev`
/// reads them.
pub use toolhost_daemon::dev::parse_sets;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_comes_inline_or_from_a_file() -> Result<()> {
        use toolhost_daemon::dev::parse_set;
        assert_eq!(parse_set("token=a=b")?, ("token".into(), "a=b".into()));
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("secret");
        std::fs::write(&file, "s3cret\n")?;
        assert_eq!(
            parse_set(&format!("token=@{}", file.display()))?.1,
            "s3cret"
        );
        assert!(parse_set("token").is_err());
        assert!(parse_set("=x").is_err());
        assert!(parse_sets(&["a=1".into(), "a=2".into()]).is_err());
        Ok(())
    }
}
