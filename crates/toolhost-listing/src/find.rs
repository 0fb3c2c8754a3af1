//! `<prefix>_toolhost_find_tools`: a tool toolhost serves itself, for
//! catalogs too big to list at once.
//!
//! Opt-in (`[mcp] find_tools`). It searches the caller's visible catalog
//! (the same surface filter `tools/list` applies) by the words of a query
//! in names, titles and descriptions, optionally only one plugin's tools
//! or only read-only ones, and answers the best matches with their full
//! schemas, bounded in count and bytes, so an agent can call what it found
//! without listing everything. Its arguments are validated like any
//! tool's (the root closed to unknown arguments), and each call is audited.
//!
//! It follows the MCP roadmap's progressive discovery (list little, search
//! for the rest) but is an ordinary tool, so it works in every client
//! today; it departs from it in not changing what `tools/list` answers.
//!
//! What this module must not do: show a tool the caller's surface does not
//! see, or echo the query in its answer.

use rmcp::model::Tool;
use serde_json::{Map, Value, json};
use std::sync::{Arc, OnceLock};
use toolhost_catalog::{Catalog, Entry};
use toolhost_pipeline::{Binding, CallResult, ErrorCode};
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};

/// Most tools one answer holds.
const MAX_LIMIT: u64 = 20;
/// Most bytes of tools (serialized) one answer holds.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The tool's exposed name under `prefix`.
#[must_use]
pub fn exposed_name(prefix: &str) -> String {
    // What `naming::exposed` makes of plugin `toolhost`, tool `find_tools`.
    format!("{prefix}_toolhost_find_tools")
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string", "minLength": 1, "maxLength": 200,
                "description": "Words to look for in tool names, titles and descriptions, e.g. \"search notes\"."
            },
            "plugin": {
                "type": "string", "maxLength": 64,
                "description": "Only tools of this plugin (its id, the middle part of a tool's name)."
            },
            "read_only": {
                "type": "boolean",
                "description": "true: only tools that change nothing."
            },
            "limit": {
                "type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                "description": "How many tools at most (default 5)."
            }
        },
        "required": ["query"]
    })
}

fn compiled() -> Option<&'static CompiledSchema> {
    static SCHEMA: OnceLock<Option<CompiledSchema>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| CompiledSchema::compile(&input_schema()).ok())
        .as_ref()
}

/// The tool as `tools/list` shows it.
pub(crate) fn tool(prefix: &str) -> Tool {
    let schema = input_schema().as_object().cloned().unwrap_or_default();
    Tool::new(
        exposed_name(prefix),
        "Find tools by what they do: searches the tools available here by words in their names, \
         titles and descriptions, and answers the best matches with their input schemas, ready to \
         call. Use it when the tool you need is not in the list you have.",
        Arc::new(schema),
    )
    .with_title("Find tools")
    .with_annotations(
        rmcp::model::ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// Lowercase words of at least two letters or digits, a plural `s` taken
/// off longer ones (so "notes" finds "note").
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 2)
        .map(|w| {
            let w = w.to_lowercase();
            match w.strip_suffix('s') {
                Some(stem) if stem.len() >= 3 => stem.to_owned(),
                _ => w,
            }
        })
        .collect()
}

/// How well `e` matches `query`: a word in the tool's own name counts
/// most, then its title, then its description.
fn score(e: &Entry, query: &[String]) -> u32 {
    let d = &e.descriptor;
    let name = words(&d.local_name.replace('_', " "));
    let plugin = words(&d.plugin_id.replace(['_', '-', '.'], " "));
    let title = d.title.as_deref().map(words).unwrap_or_default();
    let description = words(&d.description);
    query
        .iter()
        .map(|w| {
            if name.contains(w) {
                8
            } else if name.iter().any(|n| n.starts_with(w.as_str())) {
                5
            } else if title.contains(w) {
                4
            } else if plugin.contains(w) {
                3
            } else if description.contains(w) {
                1
            } else {
                0
            }
        })
        .sum()
}

/// Runs one call of the find tool for `binding`.
pub(crate) fn run(
    catalog: &Catalog,
    binding: &Binding,
    name: &str,
    arguments: Option<Value>,
    pins: &toolhost_pipeline::Pins,
) -> CallResult {
    let started = std::time::Instant::now();
    let (result, shown) = answer(catalog, binding, arguments);
    if !shown.is_empty() {
        // What the answer showed is a listing: a later change of one of
        // these contracts is refused once, as after `tools/list`.
        pins.listed(binding, Arc::new(toolhost_pipeline::Shown::of(shown)));
    }
    tracing::info!(
        target: "toolhost::audit",
        tool = %name,
        task_id = %toolhost_base::log_safe(&binding.task_id, 256),
        session_id = %toolhost_base::log_safe(&binding.session_id, 256),
        outcome = result.outcome(),
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "tool call"
    );
    result
}

/// Kept whole on purpose: it validates the find tool's arguments, searches and
/// renders in one pass over the surface's tools.
fn answer<'c>(
    catalog: &'c Catalog,
    binding: &Binding,
    arguments: Option<Value>,
) -> (CallResult, Vec<&'c Arc<Entry>>) {
    let Some(schema) = compiled() else {
        let r = CallResult::failure(
            ErrorCode::Internal,
            "the find tool's schema does not compile",
            None,
        );
        return (r, Vec::new());
    };
    let policy = ToolPolicy {
        aliases: &std::collections::BTreeMap::new(),
        unknown: UnknownArguments::Reject,
    };
    let args = match check_arguments(schema, &policy, arguments) {
        Ok(c) => c.arguments,
        Err(e) => {
            let r =
                CallResult::failure(ErrorCode::InvalidArguments, e.message, Some(&e.violations));
            return (r, Vec::new());
        }
    };
    let query = words(
        args.get("query")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    let plugin = args.get("plugin").and_then(Value::as_str);
    let read_only = args.get("read_only").and_then(Value::as_bool);
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(5)
        .min(MAX_LIMIT);
    let mut scored: Vec<(u32, &Arc<Entry>)> = catalog
        .visible(&binding.surface)
        .filter(|e| plugin.is_none_or(|p| e.descriptor.plugin_id == p))
        .filter(|e| read_only.is_none_or(|r| e.descriptor.annotations.read_only == r))
        .map(|e| (score(e, &query), e))
        .filter(|(s, _)| *s > 0)
        .collect();
    // Best first; equal scores in name order, so answers are stable.
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0).then_with(|| {
            a.1.descriptor
                .exposed_name
                .cmp(&b.1.descriptor.exposed_name)
        })
    });
    let matches = scored.len();
    let mut tools = Vec::new();
    let mut shown = Vec::new();
    let mut lines = Vec::new();
    let mut bytes = 0usize;
    for (_, e) in scored.iter().take(usize::try_from(limit).unwrap_or(5)) {
        let t = crate::tools::to_tool(e);
        let v = serde_json::to_value(&t).unwrap_or(Value::Null);
        let size = serde_json::to_vec(&v).map_or(usize::MAX, |b| b.len());
        if bytes.saturating_add(size) > MAX_ANSWER_BYTES {
            break;
        }
        bytes += size;
        lines.push(format!(
            "- `{}`: {}",
            e.descriptor.exposed_name,
            first_sentence(&e.descriptor.description)
        ));
        tools.push(v);
        shown.push(*e);
    }
    let text = if tools.is_empty() {
        "No tool here matches those words. Try other words, or fewer.".to_owned()
    } else {
        format!(
            "{} of {matches} matching tool(s), best first (the structured content has each one's input schema):\n{}",
            tools.len(),
            lines.join("\n")
        )
    };
    let mut structured = Map::new();
    structured.insert("matches".into(), json!(matches));
    structured.insert("tools".into(), Value::Array(tools));
    let r = CallResult {
        content: vec![toolhost_pipeline::content::Block::text(text)],
        structured: Some(Value::Object(structured)),
        is_error: false,
        code: None,
        meta: None,
    };
    (r, shown)
}

/// A description's first sentence, at most 160 bytes.
fn first_sentence(d: &str) -> String {
    let end = d.find(". ").map_or(d.len(), |i| i + 1);
    let mut s = d[..end].to_owned();
    if s.len() > 160 {
        let mut cut = 157;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_and_plurals_meet_singulars() {
        assert_eq!(
            words("Search NOTES, by-tag"),
            ["search", "note", "by", "tag"]
        );
        assert_eq!(words("is a"), ["is"]);
    }

    #[test]
    fn its_schema_compiles() {
        assert!(compiled().is_some());
    }
}
