//! Text a person reads, held to one rule: no control character and no
//! bidirectional control in any key or string of a manifest.
//!
//! A manifest's text reaches the operator's terminal (`check`, `plugins
//! show`, an install's review of the grants) and an agent's tool list. An
//! escape sequence there can set the terminal's title or hide the next
//! line; a bidirectional control can reorder what is read. So the whole
//! document is walked once, before any field is read, and each such
//! character is refused by field and code point, never quoted.

use crate::problem::Rule;
use crate::read::Ctx;
use toml::Table;

/// Refuses a control character (or a bidirectional control) anywhere a
/// person will read the manifest's text: `plugins show`, `check`, an
/// install's review of the grants, an agent's tool list. Every key and
/// every string is checked, except the values of `runtime.args` and
/// `runtime.env`, which go to the plugin and are never shown. Descriptions
/// may break lines; nothing else may. The problem names the field and the
/// code point, never the text.
pub(crate) fn refuse_unsafe_text(cx: &mut Ctx<'_>, root: &Table) {
    fn walk(cx: &mut Ctx<'_>, field: &str, key: Option<&str>, value: &toml::Value) {
        use toolhost_base::text::{Lines, first_unsafe};
        match value {
            toml::Value::String(text) => {
                if field.starts_with("runtime.args") || field.starts_with("runtime.env.") {
                    return;
                }
                let lines = if key == Some("description") {
                    Lines::Prose
                } else {
                    Lines::Single
                };
                if let Some(c) = first_unsafe(text, lines) {
                    cx.report(
                        Rule::ControlCharacter,
                        format!(
                            "`{field}` holds a control character (U+{:04X}); text a person reads \
                             may not steer a terminal",
                            u32::from(c)
                        ),
                    );
                }
            }
            toml::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(cx, &format!("{field}[{i}]"), key, item);
                }
            }
            toml::Value::Table(table) => table_walk(cx, Some(field), table),
            _ => {}
        }
    }
    fn table_walk(cx: &mut Ctx<'_>, parent: Option<&str>, table: &Table) {
        use toolhost_base::text::{Lines, first_unsafe};
        for (key, value) in table {
            let where_ = parent.map_or_else(|| "the manifest".to_owned(), |p| format!("`{p}`"));
            if let Some(c) = first_unsafe(key, Lines::Single) {
                cx.report(
                    Rule::ControlCharacter,
                    format!(
                        "a key in {where_} holds a control character (U+{:04X})",
                        u32::from(c)
                    ),
                );
                continue;
            }
            let field = parent.map_or_else(|| key.clone(), |p| format!("{p}.{key}"));
            walk(cx, &field, Some(key), value);
        }
    }
    table_walk(cx, None, root);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_string_a_person_reads_is_refused_with_a_control_character_naming_the_field() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken/control-character");
        let text = std::fs::read_to_string(dir.join("plugin.toml")).unwrap_or_default();
        let problems = match crate::Manifest::parse(&dir, &text) {
            Err(p) => p,
            Ok(_) => panic!("accepted"),
        };
        let shown: Vec<String> = problems
            .iter()
            .filter(|p| p.rule == Rule::ControlCharacter)
            .map(ToString::to_string)
            .collect();
        for field in [
            "`name`",
            "`capabilities.filesystem[0].path`",
            "`config[0].description`",
            "`tools[0].title`",
            "`tools[0].instructions`",
        ] {
            assert!(
                shown.iter().any(|s| s.contains(field)),
                "{field} not named in {shown:#?}"
            );
        }
        // A description's newline is text; no other field's is.
        assert_eq!(shown.len(), 5, "{shown:#?}");
        for s in &shown {
            assert!(!s.contains("PWNED") && !s.contains('\u{1b}'), "{s}");
        }
        // Keys are checked too, and never quoted.
        let keyed = "id = \"k\"\nversion = \"1.0.0\"\nname = \"K\"\n\"\\u001b[8m\" = 1\n";
        let problems = crate::Manifest::parse(&dir, keyed)
            .err()
            .unwrap_or_default();
        let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(
            all.iter()
                .any(|s| s.contains("a key in the manifest holds a control character")),
            "{all:#?}"
        );
        assert!(all.iter().all(|s| !s.contains('\u{1b}')), "{all:#?}");
    }
}
