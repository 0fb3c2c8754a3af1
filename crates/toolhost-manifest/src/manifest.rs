//! `plugin.toml`: reading and per-plugin validation. [`Manifest::load`]
//! reads the file as a plain TOML table ([`crate::read`]), applies every
//! rule ([`crate::rules`]) and reports every problem at once.

use crate::decl::{MAX_DESCRIPTION, MAX_TITLE};
use crate::problem::{Problem, Rule};
use crate::read::Ctx;
use crate::rules::{TOP_KEYS, runtime, tools};
use std::path::Path;
use toml::Table;

pub use crate::decl::{
    Annotations, DEFAULT_STARTUP_TIMEOUT_MS, DEFAULT_TOOL_TIMEOUT_MS, MANIFEST_FILE,
    MAX_TASK_TIMEOUT_MS, MAX_TOOL_TIMEOUT_MS, MAX_TOOLS, Manifest, RESERVED_ENV, Runtime,
    TaskSupport, ToolDecl,
};
pub use crate::rules::{
    is_valid_description, is_valid_plugin_id, is_valid_surface, is_valid_tool_name,
};

use crate::read::read_beneath;
pub use crate::read::{MAX_MANIFEST_BYTES, MAX_SCHEMA_FILE_BYTES};

impl Manifest {
    /// What the plugin asks the operator for, one line each: its
    /// configuration items and its capabilities.
    #[must_use]
    pub fn asks(&self) -> Vec<String> {
        crate::grants::asks(&self.config, &self.capabilities)
    }

    /// Reads and validates `dir/plugin.toml` and the schema files it names.
    pub fn load(dir: &Path) -> Result<Self, Vec<Problem>> {
        let file = dir.join(MANIFEST_FILE);
        let text = match read_beneath(dir, Path::new(MANIFEST_FILE), MAX_MANIFEST_BYTES) {
            Ok(t) => t,
            Err(e) => {
                return Err(vec![Problem {
                    file,
                    tool: None,
                    rule: Rule::NotAPlugin,
                    message: format!("cannot read the manifest: {e}"),
                }]);
            }
        };
        Self::parse(dir, &text)
    }

    /// Validates manifest `text` as if it were `dir/plugin.toml`. Schema
    /// files are read relative to `dir`.
    ///
    /// Kept whole on purpose: the manifest's top-level fields in file order,
    /// each checked and reported where it is read.
    pub fn parse(dir: &Path, text: &str) -> Result<Self, Vec<Problem>> {
        let file = dir.join(MANIFEST_FILE);
        let mut problems = Vec::new();
        let root: Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                let message = format!("not valid TOML: {}", e.message());
                let at = e
                    .span()
                    .map(|s| {
                        let line = text.get(..s.start).map_or(0, |p| p.lines().count().max(1));
                        format!(" (line {line})")
                    })
                    .unwrap_or_default();
                return Err(vec![Problem {
                    file,
                    tool: None,
                    rule: Rule::TomlSyntax,
                    message: format!("{message}{at}"),
                }]);
            }
        };
        let mut cx = Ctx {
            file: &file,
            tool: None,
            problems: &mut problems,
        };
        crate::text::refuse_unsafe_text(&mut cx, &root);
        cx.unknown_keys(&root, "the manifest", &TOP_KEYS);

        let id = cx.string(&root, "id", true).unwrap_or_default();
        if !id.is_empty() && !is_valid_plugin_id(&id) {
            cx.report(
                Rule::PluginId,
                format!(
                    "id {id:?} must be 1 to 64 characters of lowercase letters, digits, `.`, `_` and `-`, \
                     starting with a letter or digit"
                ),
            );
        }
        let version = cx
            .string(&root, "version", true)
            .and_then(|v| match semver::Version::parse(&v) {
                Ok(parsed) => Some(parsed),
                Err(e) => {
                    cx.report(
                        Rule::Version,
                        format!("version {v:?} is not semver (like \"1.2.0\"): {e}"),
                    );
                    None
                }
            });
        let name = cx.string(&root, "name", true).unwrap_or_default();
        if root.contains_key("name") && (name.trim().is_empty() || name.len() > MAX_TITLE) {
            cx.report(
                Rule::DisplayName,
                format!("name must be 1 to {MAX_TITLE} bytes and not blank"),
            );
        }
        let description = cx.string(&root, "description", false).unwrap_or_default();
        if description.len() > MAX_DESCRIPTION {
            cx.report(
                Rule::PluginDescription,
                format!("the plugin description must be at most {MAX_DESCRIPTION} bytes"),
            );
        }
        let runtime = runtime(&mut cx, &root, dir);
        let tools = tools(&mut cx, &root, dir);
        let config = crate::grants::config(&mut cx, &root);
        let capabilities = crate::grants::capabilities(&mut cx, &root);
        if runtime.as_ref().is_some_and(|r| r.protocol < 2) {
            for t in tools.iter().filter(|t| t.reset_timeout_on_progress) {
                cx.tool = Some(t.name.clone());
                cx.report(
                    Rule::Protocol,
                    "reset_timeout_on_progress needs progress, which only protocol 2 carries: \
                     set `protocol = 2` under [runtime]",
                );
            }
            cx.tool = None;
        }

        // Schema-rule problems of tools that were kept are defects.
        let is_defect = |p: &Problem| {
            matches!(p.rule, Rule::Schema(_))
                && p.tool
                    .as_ref()
                    .is_some_and(|t| tools.iter().any(|d| d.name == *t))
        };
        let fatal = problems.iter().any(|p| !is_defect(p));
        let (defects, problems) = if fatal {
            (Vec::new(), problems)
        } else {
            (problems, Vec::new())
        };
        match (problems.is_empty(), version, runtime) {
            (true, Some(version), Some(runtime)) => Ok(Self {
                dir: dir.to_path_buf(),
                id,
                version,
                name,
                description,
                runtime,
                tools,
                config,
                capabilities,
                defects,
            }),
            _ if problems.is_empty() => Err(defects),
            _ => Err(problems),
        }
    }
}
