//! Where a plugin's code and its manifest disagree about a tool's shape.
//!
//! The manifest is the contract: it is what install checks and what agents
//! are served. When the code states its tools' shapes in its own types
//! (through its SDK's `Describe`), the two must say the same thing, and
//! this module says where they do not: the tool, the schema (input or
//! output), and the first places (JSON pointers) where they part, so an
//! author can tell a stale schema file from a wrong type at a glance.

use serde_json::Value;
use toolhost_manifest::Manifest;
use toolhost_runtime::ToolShape;

/// Most places reported per schema; the rest are counted.
const MAX_PLACES: usize = 4;

/// The longest value quoted in a difference, in characters.
const MAX_QUOTED: usize = 60;

/// One problem per tool whose manifest schemas differ from what its code
/// states; tools whose code states no shape are not compared.
#[must_use]
pub fn drift(m: &Manifest, shapes: &[ToolShape], sync_dir: &std::path::Path) -> Vec<String> {
    let mut problems = Vec::new();
    for t in &m.tools {
        let Some(shape) = shapes.iter().find(|s| s.name == t.name) else {
            continue;
        };
        let mut parts = Vec::new();
        let input = places(&t.input_schema, &shape.input);
        if !input.is_empty() {
            parts.push(format!("its input schema differs {}", said(&input)));
        }
        match (&t.output_schema, &shape.output) {
            (Some(declared), Some(coded)) => {
                let output = places(declared, coded);
                if !output.is_empty() {
                    parts.push(format!("its output schema differs {}", said(&output)));
                }
            }
            (None, Some(_)) => {
                parts.push("its code declares an output schema and plugin.toml does not".to_owned())
            }
            (Some(_), None) => {
                parts.push("plugin.toml declares an output schema and its code does not".to_owned())
            }
            (None, None) => {}
        }
        if !parts.is_empty() {
            problems.push(format!(
                "{}: tool {}: plugin.toml and the code disagree: {} (run `toolhost schema sync {}` to write the code's shapes into the manifest)",
                m.id,
                t.name,
                parts.join("; "),
                sync_dir.display()
            ));
        }
    }
    problems
}

fn said(places: &[String]) -> String {
    let shown: Vec<&str> = places.iter().take(MAX_PLACES).map(String::as_str).collect();
    let more = places.len().saturating_sub(MAX_PLACES);
    if more == 0 {
        format!("at {}", shown.join(", "))
    } else {
        format!("at {} and {more} more place(s)", shown.join(", "))
    }
}

/// The places where `manifest` and `code` differ, each as
/// `POINTER (what differs)`, in document order.
#[must_use]
pub fn places(manifest: &Value, code: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("", manifest, code, &mut out);
    out
}

fn walk(at: &str, manifest: &Value, code: &Value, out: &mut Vec<String>) {
    match (manifest, code) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let here = format!("{at}/{}", escape(k));
                match b.get(k) {
                    Some(vb) => walk(&here, va, vb, out),
                    None => out.push(format!("{} (only in plugin.toml)", shown(&here))),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                let here = format!("{at}/{}", escape(k));
                out.push(format!("{} (only in the code)", shown(&here)));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                walk(&format!("{at}/{i}"), va, vb, out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!(
            "{} (plugin.toml: {}, code: {})",
            shown(at),
            quoted(a),
            quoted(b)
        )),
    }
}

/// A JSON pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn shown(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root".to_owned()
    } else {
        pointer.to_owned()
    }
}

fn quoted(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > MAX_QUOTED {
        let cut: String = text.chars().take(MAX_QUOTED).collect();
        format!("{cut}…")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_schema_in_any_key_order_agrees() {
        let a = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}});
        let b: Value = serde_json::from_str(
            r#"{"properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "type": "object"}"#,
        )
        .unwrap_or_default();
        assert!(places(&a, &b).is_empty());
    }

    #[test]
    fn each_difference_names_its_place() {
        let manifest = json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "labels": {"type": "array", "items": {"required": ["name"]}}},
            "required": ["title"],
        });
        let code = json!({
            "type": "object",
            "properties": {"title": {"type": "string", "maxLength": 80}, "labels": {"type": "array", "items": {"required": ["name", "color"]}}},
        });
        assert_eq!(
            places(&manifest, &code),
            [
                "/properties/labels/items/required (plugin.toml: [\"name\"], code: [\"name\",\"color\"])",
                "/properties/title/maxLength (only in the code)",
                "/required (only in plugin.toml)",
            ]
        );
    }

    #[test]
    fn pointers_escape_slashes_and_long_values_are_cut() {
        let long = "x".repeat(200);
        let found = places(
            &json!({"a/b": {"const": long}}),
            &json!({"a/b": {"const": "y"}}),
        );
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("/a~1b/const "), "{}", found[0]);
        assert!(found[0].len() < 200, "{}", found[0]);
    }
}
