//! Which names an error may show.
//!
//! Keys an agent sends are data, like values. A key is shown in an error
//! only when the schema *declares* it (a property name) or, at the top
//! level, when it is an unexpected key that looks like an identifier and
//! not like a credential. Keys accepted by an open map
//! (`additionalProperties`, `patternProperties`, `unevaluatedProperties`)
//! are never shown: they render as `*`, however harmless they look.
//!
//! [`Declared`] is the schema's tree of declared property names, built once
//! per schema at compile time (through `allOf`/`anyOf`/`oneOf`,
//! `if`/`then`/`else` and local `$ref`s), and walked along a violation's
//! instance path to mask it.

use crate::refs::Index;
use serde_json::Value;
use std::collections::BTreeMap;

/// Token prefixes of well-known credential formats.
const CREDENTIAL_PREFIXES: [&str; 22] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "pk_live_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "ASIA",
    "eyJ",
    "AIza",
    "ya29.",
    "npm_",
];

/// Whether `s` looks like a credential: a known token prefix, or a long
/// run of high-entropy characters mixing letters and digits.
#[must_use]
pub fn looks_like_credential(s: &str) -> bool {
    if CREDENTIAL_PREFIXES.iter().any(|p| s.starts_with(p)) {
        return true;
    }
    if s.len() < 20 {
        return false;
    }
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let letters = s.bytes().filter(u8::is_ascii_alphabetic).count();
    if digits < 2 || letters < 2 {
        return false;
    }
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[usize::from(b)] += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = s.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum();
    entropy >= 3.5
}

/// Whether `name` may be shown in an error: an identifier-like key, never
/// arbitrary data. docs/CONTRACT.md §5: `^[A-Za-z0-9_.-]{1,64}$`.
#[must_use]
pub fn is_identifier_like(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether an agent's key may be named in an error: identifier-like and
/// not credential-like.
#[must_use]
pub fn is_nameable(key: &str) -> bool {
    is_identifier_like(key) && !looks_like_credential(key)
}

/// The declared property names along an instance, from one schema: a
/// tree kept as an arena, built breadth-first so that a budget cuts the
/// deepest levels first (a recursive schema cannot make it explode).
#[derive(Debug, Default)]
pub(crate) struct Declared {
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    properties: BTreeMap<String, usize>,
    items: Option<usize>,
    /// Values of an open map: their keys are data.
    rest: Option<usize>,
}

/// Most nodes per schema; past it, deeper names are masked.
const BUDGET: usize = 4096;
/// Deepest instance level with names.
const MAX_DEPTH: usize = 16;

/// Every subschema that describes the same instance as `schemas`.
fn same_instance<'a>(schemas: Vec<&'a Value>, index: &Index<'a>) -> Vec<&'a Value> {
    let mut same = Vec::new();
    let mut stack = schemas;
    let mut followed = 0usize;
    while let Some(node) = stack.pop() {
        let Some(obj) = node.as_object() else {
            continue;
        };
        same.push(node);
        for k in ["allOf", "anyOf", "oneOf"] {
            if let Some(items) = obj.get(k).and_then(Value::as_array) {
                stack.extend(items);
            }
        }
        for k in ["if", "then", "else"] {
            if let Some(s) = obj.get(k) {
                stack.push(s);
            }
        }
        if let Some(r) = obj.get("$ref").and_then(Value::as_str)
            && followed < 64
            && let Some(target) = index.target(r, None)
        {
            followed += 1;
            stack.push(target);
        }
    }
    same
}

impl Declared {
    pub(crate) fn of<'a>(schema: &'a Value) -> Self {
        let index = Index::of(schema);
        let mut nodes = vec![Node::default()];
        let mut queue: std::collections::VecDeque<(usize, Vec<&'a Value>, usize)> =
            std::collections::VecDeque::from([(0usize, vec![schema], 0usize)]);
        while let Some((id, schemas, depth)) = queue.pop_front() {
            let same = same_instance(schemas, &index);
            let mut props: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
            let (mut items, mut rest): (Vec<&Value>, Vec<&Value>) = (Vec::new(), Vec::new());
            for obj in same.iter().filter_map(|n| n.as_object()) {
                if let Some(p) = obj.get("properties").and_then(Value::as_object) {
                    for (name, sub) in p {
                        props.entry(name.as_str()).or_default().push(sub);
                    }
                }
                match obj.get("items") {
                    Some(Value::Array(list)) => items.extend(list),
                    Some(one) => items.push(one),
                    None => {}
                }
                if let Some(list) = obj.get("prefixItems").and_then(Value::as_array) {
                    items.extend(list);
                }
                for k in ["additionalProperties", "unevaluatedProperties"] {
                    if let Some(v) = obj.get(k).filter(|v| v.is_object()) {
                        rest.push(v);
                    }
                }
                if let Some(pp) = obj.get("patternProperties").and_then(Value::as_object) {
                    rest.extend(pp.values());
                }
            }
            if depth + 1 >= MAX_DEPTH {
                continue;
            }
            let mut child = |subs: Vec<&'a Value>, nodes: &mut Vec<Node>| -> Option<usize> {
                (nodes.len() < BUDGET)
                    .then(|| {
                        nodes.push(Node::default());
                        nodes.len() - 1
                    })
                    .inspect(|c| queue.push_back((*c, subs, depth + 1)))
            };
            for (name, subs) in props {
                if let Some(c) = child(subs, &mut nodes)
                    && let Some(n) = nodes.get_mut(id)
                {
                    n.properties.insert(name.to_owned(), c);
                }
            }
            if !items.is_empty()
                && let Some(c) = child(items, &mut nodes)
                && let Some(n) = nodes.get_mut(id)
            {
                n.items = Some(c);
            }
            if !rest.is_empty()
                && let Some(c) = child(rest, &mut nodes)
                && let Some(n) = nodes.get_mut(id)
            {
                n.rest = Some(c);
            }
        }
        Self { nodes }
    }

    /// A JSON pointer into the instance with every segment that is not a
    /// declared name (or an array index) shown as `*`.
    pub(crate) fn mask(&self, pointer: &str) -> String {
        let mut at = self.nodes.first();
        let mut out = String::new();
        for raw in pointer.split('/').skip(1) {
            let key = raw.replace("~1", "/").replace("~0", "~");
            out.push('/');
            let node = at;
            let step = |i: Option<usize>| i.and_then(|i| self.nodes.get(i));
            if let Some(next) = node.and_then(|n| n.properties.get(&key)) {
                out.push_str(raw);
                at = self.nodes.get(*next);
            } else if !key.is_empty()
                && key.bytes().all(|b| b.is_ascii_digit())
                && let Some(items) = node.and_then(|n| n.items)
            {
                out.push_str(raw);
                at = self.nodes.get(items);
            } else {
                out.push('*');
                at = step(node.and_then(|n| n.rest));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_are_recognized() {
        for c in [
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghij",
            "sk-proj-abc123",
            "sk_live_51H8xyz",
            "xoxb-1234-5678-abcdef",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9",
            "Zx9Qw3Er7Ty1Ui5Op8As2Df6",
        ] {
            assert!(looks_like_credential(c), "{c}");
            assert!(!is_nameable(c), "{c}");
        }
        for name in [
            "max_results",
            "query",
            "page_size",
            "include_archived_items_too",
            "v2",
        ] {
            assert!(!looks_like_credential(name), "{name}");
            assert!(is_nameable(name), "{name}");
        }
    }

    #[test]
    fn open_map_keys_are_masked_and_declared_names_are_kept() {
        let s = json!({
            "type": "object",
            "properties": {
                "settings": { "type": "object", "additionalProperties": { "type": "object", "properties": { "mode": {} } } },
                "tags": { "type": "array", "items": { "type": "object", "properties": { "name": {} } } },
                "labels": { "patternProperties": { "^x": { "type": "string" } } },
                "ref": { "$ref": "#/$defs/r" }
            },
            "$defs": { "r": { "properties": { "inner": {} } } }
        });
        let d = Declared::of(&s);
        assert_eq!(d.mask("/settings/theme/mode"), "/settings/*/mode");
        assert_eq!(d.mask("/tags/3/name"), "/tags/3/name");
        assert_eq!(d.mask("/labels/xyz"), "/labels/*");
        assert_eq!(d.mask("/ref/inner"), "/ref/inner");
        assert_eq!(d.mask("/undeclared/deeper"), "/*/*");
        assert_eq!(d.mask(""), "");
    }

    #[test]
    fn recursive_schemas_stay_bounded() {
        let s = json!({
            "type": "object",
            "properties": { "a": { "$ref": "#" }, "b": { "$ref": "#" }, "c": { "$ref": "#" } }
        });
        let d = Declared::of(&s);
        assert!(d.nodes.len() <= BUDGET);
        assert_eq!(d.mask("/a/b/c/a"), "/a/b/c/a");
        // Past the budget, names are masked, never shown by accident.
        let deep = "/a".repeat(40);
        assert!(d.mask(&deep).ends_with("/*"));
    }
}
