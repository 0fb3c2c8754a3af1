//! The rules of a manifest: what each field must be, and what a tool's
//! schemas and aliases must satisfy. Called by `Manifest::parse`, every
//! problem reported through the reading context.

use crate::decl::{
    Annotations, DEFAULT_STARTUP_TIMEOUT_MS, DEFAULT_TOOL_TIMEOUT_MS, MAX_DESCRIPTION,
    MAX_STARTUP_TIMEOUT_MS, MAX_TASK_TIMEOUT_MS, MAX_TITLE, MAX_TOOL_TIMEOUT_MS, MAX_TOOLS,
    PROTOCOL_VERSIONS, RESERVED_ENV, Runtime, TaskSupport, ToolDecl,
};
use crate::problem::{Problem, Rule};
use crate::read::Ctx;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use toml::Table;
use toolhost_validate::{CompiledSchema, UnknownArguments, is_identifier_like};

/// Whether `id` matches `^[a-z0-9][a-z0-9._-]{0,63}$`.
#[must_use]
pub fn is_valid_plugin_id(id: &str) -> bool {
    let mut b = id.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && id.len() <= 64
        && b.all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// Whether `name` matches `^[a-z0-9][a-z0-9_]{0,31}$`.
#[must_use]
pub fn is_valid_tool_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.len() <= 32
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
}

/// Whether `s` matches `^[a-z][a-z0-9-]{0,31}$`.
#[must_use]
pub fn is_valid_surface(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= 32
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Whether a tool description is 1..=1024 bytes and not blank.
#[must_use]
pub fn is_valid_description(d: &str) -> bool {
    !d.trim().is_empty() && d.len() <= MAX_DESCRIPTION
}

pub(crate) const TOP_KEYS: [&str; 9] = [
    "id",
    "version",
    "name",
    "description",
    "runtime",
    "tools",
    "config",
    "capabilities",
    "credentials",
];
const RUNTIME_KEYS: [&str; 5] = ["command", "args", "env", "startup_timeout_ms", "protocol"];
const TOOL_KEYS: [&str; 16] = [
    "name",
    "title",
    "description",
    "instructions",
    "surfaces",
    "timeout_ms",
    "input_schema_file",
    "input_schema",
    "output_schema_file",
    "output_schema",
    "annotations",
    "aliases",
    "unknown_arguments",
    "reset_timeout_on_progress",
    "task",
    "task_timeout_ms",
];
const ANNOTATION_KEYS: [&str; 4] = ["read_only", "destructive", "idempotent", "open_world"];

/// Kept whole on purpose: one rule per line over `[runtime]`, in the order
/// PROTOCOL.md lists them.
pub(crate) fn runtime(cx: &mut Ctx<'_>, root: &Table, dir: &Path) -> Option<Runtime> {
    let Some(t) = cx.table(root, "runtime") else {
        if !root.contains_key("runtime") {
            cx.report(
                Rule::MissingField,
                "`[runtime]` is required: it says how to start the plugin",
            );
        }
        return None;
    };
    cx.unknown_keys(t, "[runtime]", &RUNTIME_KEYS);
    let command = cx.string(t, "command", true).and_then(|c| {
        if c.trim().is_empty() {
            cx.report(Rule::Command, "runtime.command is empty");
            return None;
        }
        let path = if Path::new(&c).is_absolute() {
            PathBuf::from(&c)
        } else if Path::new(&c)
            .components()
            .any(|part| matches!(part, Component::ParentDir))
        {
            cx.report(
                Rule::Command,
                format!(
                    "runtime.command {c:?} leaves the plugin directory (`..`): a relative command stays inside it; an absolute one names a program outside every plugin (an interpreter)"
                ),
            );
            return None;
        } else {
            dir.join(&c)
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && is_executable(&m) => Some(path),
            Ok(m) if m.is_file() => {
                cx.report(Rule::Command, format!("runtime.command {c:?} is not executable (chmod +x it)"));
                None
            }
            Ok(_) => {
                cx.report(Rule::Command, format!("runtime.command {c:?} is not a file"));
                None
            }
            Err(_) => {
                cx.report(
                    Rule::Command,
                    format!("runtime.command {c:?} does not exist (it is resolved against the plugin directory)"),
                );
                None
            }
        }
    });
    let args = cx.strings(t, "args").unwrap_or_default();
    let env = cx.string_map(t, "env").unwrap_or_default();
    for k in env.keys() {
        if RESERVED_ENV.contains(&k.as_str()) {
            cx.report(
                Rule::ReservedEnv,
                format!("runtime.env may not set {k}: toolhost sets it"),
            );
        }
    }
    let startup_timeout_ms = match cx.integer(t, "startup_timeout_ms") {
        None => DEFAULT_STARTUP_TIMEOUT_MS,
        Some(ms) => match u64::try_from(ms) {
            Ok(ms) if (1..=MAX_STARTUP_TIMEOUT_MS).contains(&ms) => ms,
            _ => {
                cx.report(
                    Rule::StartupTimeout,
                    format!("runtime.startup_timeout_ms must be 1 to {MAX_STARTUP_TIMEOUT_MS}"),
                );
                DEFAULT_STARTUP_TIMEOUT_MS
            }
        },
    };
    let protocol = match cx.integer(t, "protocol") {
        None => 1,
        Some(v) => match u32::try_from(v) {
            Ok(v) if PROTOCOL_VERSIONS.contains(&v) => v,
            _ => {
                cx.report(
                    Rule::Protocol,
                    "runtime.protocol must be 1 (unary calls) or 2 (streaming: rich results, progress, logs, questions)",
                );
                1
            }
        },
    };
    Some(Runtime {
        command: command?,
        args,
        env,
        startup_timeout_ms,
        protocol,
    })
}

#[cfg(unix)]
fn is_executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_: &std::fs::Metadata) -> bool {
    true
}

pub(crate) fn tools(cx: &mut Ctx<'_>, root: &Table, dir: &Path) -> Vec<ToolDecl> {
    let items = cx.array_of_tables(root, "tools", MAX_TOOLS, Rule::TooManyTools);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, t) in items {
        let label = t
            .get("name")
            .and_then(toml::Value::as_str)
            .map_or_else(|| format!("#{}", i + 1), str::to_owned);
        let mut tcx = Ctx {
            file: cx.file,
            tool: Some(label),
            problems: &mut *cx.problems,
        };
        if let Some(name) = t.get("name").and_then(toml::Value::as_str)
            && !seen.insert(name.to_owned())
        {
            tcx.report(
                Rule::DuplicateTool,
                format!("another tool is already named `{name}`"),
            );
        }
        if let Some(decl) = tool(&mut tcx, t, dir) {
            out.push(decl);
        }
    }
    out
}

/// The longest sentence a tool may add to the server's instructions.
pub const MAX_INSTRUCTIONS: usize = 300;

/// One line an agent reads among the server's instructions: short, not
/// blank, and nothing that could break the line or the terminal.
fn is_valid_instructions(s: &str) -> bool {
    !s.trim().is_empty() && s.len() <= MAX_INSTRUCTIONS && !s.chars().any(char::is_control)
}

/// Kept whole on purpose: one rule per line over a `[[tool]]`, in the order
/// PROTOCOL.md lists them.
fn tool(cx: &mut Ctx<'_>, t: &Table, dir: &Path) -> Option<ToolDecl> {
    let before = cx.problems.len();
    cx.unknown_keys(t, "the tool", &TOOL_KEYS);
    let name = cx.string(t, "name", true).unwrap_or_default();
    if t.contains_key("name") && !is_valid_tool_name(&name) {
        cx.report(
            Rule::ToolName,
            format!(
                "tool name {name:?} must be 1 to 32 characters of lowercase letters, digits and `_`, \
                 starting with a letter or digit"
            ),
        );
    }
    let title = cx.string(t, "title", false);
    if let Some(title) = &title
        && (title.trim().is_empty() || title.len() > MAX_TITLE)
    {
        cx.report(
            Rule::Title,
            format!("title must be 1 to {MAX_TITLE} bytes and not blank"),
        );
    }
    let description = cx.string(t, "description", true).unwrap_or_default();
    if t.contains_key("description") && !is_valid_description(&description) {
        cx.report(
            Rule::ToolDescription,
            format!(
                "description must be 1 to {MAX_DESCRIPTION} bytes and not blank ({} given)",
                description.len()
            ),
        );
    }
    let instructions = cx.string(t, "instructions", false);
    if let Some(s) = &instructions
        && !is_valid_instructions(s)
    {
        cx.report(
            Rule::ToolDescription,
            format!(
                "instructions must be one line of 1 to {MAX_INSTRUCTIONS} bytes, not blank, without control characters ({} given)",
                s.len()
            ),
        );
    }
    let surfaces = surfaces(cx, t);
    let timeout_ms = timeout(cx, t);
    let reset_timeout_on_progress = cx.boolean(t, "reset_timeout_on_progress").unwrap_or(false);
    let task = task(cx, t);
    let task_timeout_ms = task_timeout(cx, t, task, timeout_ms);
    let input = schema(cx, t, dir, "input_schema", true);
    let output = schema(cx, t, dir, "output_schema", false);

    let annotations = annotations(cx, t);
    let unknown_arguments = unknown_arguments(cx, t, &annotations);
    let aliases = aliases(cx, t, input.as_ref());

    // A schema that breaks a schema rule withholds this tool only (the
    // plugin's other tools serve); any other problem refuses the plugin.
    let only_schema_rules = cx.problems[before..]
        .iter()
        .all(|p| matches!(p.rule, Rule::Schema(_)));
    if cx.problems.len() > before && !only_schema_rules {
        return None;
    }
    let (input_schema, _) = input?;
    Some(ToolDecl {
        name,
        title,
        description,
        instructions,
        surfaces,
        timeout_ms,
        input_schema,
        output_schema: output.map(|(s, _)| s),
        annotations,
        aliases,
        unknown_arguments,
        reset_timeout_on_progress,
        task,
        task_timeout_ms,
    })
}

/// `task_timeout_ms`: only for a tool that may run as a task, at least its
/// `timeout_ms`, at most [`MAX_TASK_TIMEOUT_MS`].
fn task_timeout(cx: &mut Ctx<'_>, t: &Table, task: TaskSupport, timeout_ms: u32) -> Option<u32> {
    let ms = cx.integer(t, "task_timeout_ms")?;
    if !task.allows_task() {
        cx.report(
            Rule::Task,
            "task_timeout_ms needs task = \"optional\" or \"required\": only a task may run longer than timeout_ms",
        );
        return None;
    }
    match u32::try_from(ms) {
        Ok(ms) if (timeout_ms..=MAX_TASK_TIMEOUT_MS).contains(&ms) => Some(ms),
        _ => {
            cx.report(
                Rule::Task,
                format!("task_timeout_ms must be from timeout_ms ({timeout_ms}) to {MAX_TASK_TIMEOUT_MS}"),
            );
            None
        }
    }
}

/// `task`: whether a call may run as an MCP task; `never` when absent.
fn task(cx: &mut Ctx<'_>, t: &Table) -> TaskSupport {
    match cx.string(t, "task", false) {
        None => TaskSupport::Never,
        Some(word) => TaskSupport::parse(&word).unwrap_or_else(|| {
            cx.report(
                Rule::Task,
                format!(
                    "task must be \"never\", \"optional\" or \"required\", not {:?}",
                    word.chars().take(40).collect::<String>()
                ),
            );
            TaskSupport::Never
        }),
    }
}

/// `surfaces`: required, non-empty, each valid, none twice.
fn surfaces(cx: &mut Ctx<'_>, t: &Table) -> Vec<String> {
    match cx.strings(t, "surfaces") {
        None => {
            if !t.contains_key("surfaces") {
                cx.report(
                    Rule::MissingField,
                    "`surfaces` is required: where may agents use this tool?",
                );
            }
            Vec::new()
        }
        Some(s) => {
            if s.is_empty() {
                cx.report(Rule::Surfaces, "surfaces must list at least one surface");
            }
            let mut seen = BTreeSet::new();
            for surface in &s {
                if !is_valid_surface(surface) {
                    cx.report(
                        Rule::Surfaces,
                        format!("surface {surface:?} must be 1 to 32 characters of lowercase letters, digits and `-`, starting with a letter"),
                    );
                }
                if !seen.insert(surface) {
                    cx.report(
                        Rule::Surfaces,
                        format!("surface {surface:?} is listed twice"),
                    );
                }
            }
            s
        }
    }
}

/// `timeout_ms`, within its bounds (the default when absent or out of them).
fn timeout(cx: &mut Ctx<'_>, t: &Table) -> u32 {
    match cx.integer(t, "timeout_ms") {
        None => DEFAULT_TOOL_TIMEOUT_MS,
        Some(ms) => match u32::try_from(ms) {
            Ok(ms) if (1..=MAX_TOOL_TIMEOUT_MS).contains(&ms) => ms,
            _ => {
                cx.report(
                    Rule::Timeout,
                    format!("timeout_ms must be 1 to {MAX_TOOL_TIMEOUT_MS}"),
                );
                DEFAULT_TOOL_TIMEOUT_MS
            }
        },
    }
}

/// The four hints; omitted ones take the cautious values.
fn annotations(cx: &mut Ctx<'_>, t: &Table) -> Annotations {
    let mut annotations = Annotations::default();
    if let Some(a) = cx.table(t, "annotations") {
        cx.unknown_keys(a, "annotations", &ANNOTATION_KEYS);
        annotations.read_only = cx.boolean(a, "read_only").unwrap_or(false);
        annotations.destructive = cx
            .boolean(a, "destructive")
            .unwrap_or(!annotations.read_only);
        annotations.idempotent = cx.boolean(a, "idempotent").unwrap_or(false);
        annotations.open_world = cx.boolean(a, "open_world").unwrap_or(true);
        if annotations.read_only && annotations.destructive {
            cx.report(
                Rule::Annotations,
                "read_only and destructive cannot both be true: a read-only tool destroys nothing",
            );
        }
    }
    annotations
}

/// `unknown_arguments`: `report` only for read-only tools.
fn unknown_arguments(cx: &mut Ctx<'_>, t: &Table, annotations: &Annotations) -> UnknownArguments {
    match cx.string(t, "unknown_arguments", false).as_deref() {
        None | Some("reject") => UnknownArguments::Reject,
        Some("report") => {
            if !annotations.read_only {
                cx.report(
                    Rule::UnknownArguments,
                    "unknown_arguments = \"report\" is only allowed with annotations.read_only = true: \
                     a tool that changes things must not run on arguments it did not understand",
                );
            }
            UnknownArguments::Report
        }
        Some(other) => {
            cx.report(
                Rule::UnknownArguments,
                format!("unknown_arguments must be \"reject\" or \"report\", not {other:?}"),
            );
            UnknownArguments::Reject
        }
    }
}

/// `aliases`: each an identifier that the input schema does not declare,
/// pointing at one it does. Checked even when the schema has problems of
/// its own: from the compiled schema when it compiles, else from the root
/// `properties` as written.
fn aliases(
    cx: &mut Ctx<'_>,
    t: &Table,
    input: Option<&(Value, Option<CompiledSchema>)>,
) -> std::collections::BTreeMap<String, String> {
    let aliases = cx.string_map(t, "aliases").unwrap_or_default();
    // Alias problems are found even when the schema has problems of its
    // own: from the compiled schema when it compiles, else from the root
    // `properties` as written.
    let declared: Option<BTreeSet<String>> = match input {
        Some((_, Some(compiled))) => Some(compiled.declared_properties().clone()),
        Some((raw, None)) => Some(
            raw.get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default(),
        ),
        None => None,
    };
    if let Some(declared) = &declared {
        for (alias, canonical) in &aliases {
            if !is_identifier_like(alias) {
                cx.report(Rule::Aliases, format!("alias {alias:?} must be 1 to 64 characters of letters, digits, `_`, `.`, `-`"));
            }
            if declared.contains(alias) {
                cx.report(
                    Rule::Aliases,
                    format!("alias `{alias}` is a declared property of the input schema; an alias must be a name the schema does not declare"),
                );
            }
            if !declared.contains(canonical) {
                cx.report(
                    Rule::Aliases,
                    format!("alias `{alias}` points to `{canonical}`, which the input schema does not declare"),
                );
            }
        }
    }
    aliases
}

/// Reads `<key>_file` or inline `<key>` and applies the schema rules. The
/// compiled form is returned when the schema is sound, for alias checks.
///
/// Kept whole on purpose: the sources of a schema (file or inline) and
/// their problems, then its rules; every early return is a reported
/// problem.
fn schema(
    cx: &mut Ctx<'_>,
    t: &Table,
    dir: &Path,
    key: &str,
    required: bool,
) -> Option<(Value, Option<CompiledSchema>)> {
    let file_key = format!("{key}_file");
    let which = if key == "input_schema" {
        "input"
    } else {
        "output"
    };
    let (value, file) = match (t.get(&file_key), t.get(key)) {
        (Some(_), Some(_)) => {
            cx.report(
                Rule::SchemaSource,
                format!("give either `{file_key}` or `{key}`, not both"),
            );
            return None;
        }
        (None, None) => {
            if required {
                cx.report(
                    Rule::SchemaSource,
                    format!("an {which} schema is required: set `{file_key}` (a JSON file) or an inline `{key}` table"),
                );
            }
            return None;
        }
        (Some(_), None) => {
            let rel = cx.string(t, &file_key, true)?;
            let path = dir.join(&rel);
            if Path::new(&rel).is_absolute()
                || Path::new(&rel)
                    .components()
                    .any(|c| matches!(c, Component::ParentDir))
            {
                cx.report(
                    Rule::SchemaFile,
                    format!(
                        "{file_key} {rel:?} must be a relative path inside the plugin directory"
                    ),
                );
                return None;
            }
            let text = match crate::read::read_beneath(
                dir,
                Path::new(&rel),
                crate::read::MAX_SCHEMA_FILE_BYTES,
            ) {
                Ok(text) => text,
                Err(e) => {
                    cx.report(
                        Rule::SchemaFile,
                        format!("{file_key} {rel:?} cannot be read: {e}"),
                    );
                    return None;
                }
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => (v, Some(path)),
                Err(e) => {
                    schema_file_problem(
                        cx,
                        &path,
                        Rule::SchemaFile,
                        format!("not valid JSON: {e}"),
                    );
                    return None;
                }
            }
        }
        (None, Some(inline)) => match serde_json::to_value(inline) {
            Ok(v) if v.is_object() => (v, None),
            _ => {
                cx.report(
                    Rule::WrongType,
                    format!("`{key}` must be a table holding a JSON Schema"),
                );
                return None;
            }
        },
    };
    match CompiledSchema::compile(&value) {
        Ok(c) => Some((value, Some(c))),
        Err(problems) => {
            for p in problems {
                let msg = format!("{which} schema: {}", p.message);
                match &file {
                    Some(path) => schema_file_problem(cx, path, Rule::Schema(p.rule), msg),
                    None => cx.report(Rule::Schema(p.rule), msg),
                }
            }
            Some((value, None))
        }
    }
}

/// A problem inside a schema file names that file, not the manifest.
fn schema_file_problem(cx: &mut Ctx<'_>, path: &Path, rule: Rule, message: String) {
    cx.problems.push(Problem {
        file: path.to_path_buf(),
        tool: cx.tool.clone(),
        rule,
        message,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(is_valid_plugin_id("task-tags.v1"));
        assert!(!is_valid_plugin_id("Task"));
        assert!(!is_valid_plugin_id("-x"));
        assert!(!is_valid_plugin_id(&"a".repeat(65)));
        assert!(is_valid_tool_name("add_note"));
        assert!(!is_valid_tool_name("add-note"));
        assert!(!is_valid_tool_name(&"a".repeat(33)));
        assert!(is_valid_surface("kanban-task"));
        assert!(!is_valid_surface("1task"));
    }
}
