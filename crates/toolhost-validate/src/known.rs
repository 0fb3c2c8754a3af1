//! Which top-level keys a schema declares: the basis of the closed root.
//!
//! Inserting `"additionalProperties": false` into the root would be simpler,
//! and wrong: that keyword ignores properties declared inside `allOf` or a
//! `$ref`, so `{"allOf":[{"properties":{"a":{}}}]}` would reject `a`. Instead
//! the declared names are collected from every place a root property can be
//! declared, and keys are checked against them by hand.

use jsonschema::{Draft, Validator};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The root's declared keys.
#[derive(Debug)]
pub(crate) struct RootKeys {
    /// Names from `properties` and `required`, through composition and refs.
    pub declared: BTreeSet<String>,
    /// The root itself declares `additionalProperties` or
    /// `unevaluatedProperties` as something other than `false`: the author
    /// asked for an open map at the root, and that declaration is honoured.
    pub open: bool,
    /// Root `patternProperties`, compiled as one string validator.
    patterns: Option<Validator>,
}

/// Keywords whose subschemas describe the same object as the root.
const SAME_INSTANCE_ARRAYS: [&str; 3] = ["allOf", "anyOf", "oneOf"];
const SAME_INSTANCE_SINGLE: [&str; 3] = ["if", "then", "else"];

impl RootKeys {
    pub(crate) fn of(schema: &Value, draft: Draft) -> Result<Self, String> {
        let mut declared = BTreeSet::new();
        let mut patterns = Vec::new();
        let mut seen_refs = BTreeSet::new();
        let index = crate::refs::Index::of(schema);
        let mut stack = vec![schema];
        while let Some(node) = stack.pop() {
            let Some(obj) = node.as_object() else {
                continue;
            };
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                declared.extend(props.keys().cloned());
            }
            if let Some(req) = obj.get("required").and_then(Value::as_array) {
                declared.extend(req.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            if let Some(pp) = obj.get("patternProperties").and_then(Value::as_object) {
                patterns.extend(pp.keys().cloned());
            }
            for k in SAME_INSTANCE_ARRAYS {
                if let Some(items) = obj.get(k).and_then(Value::as_array) {
                    stack.extend(items);
                }
            }
            for k in SAME_INSTANCE_SINGLE {
                if let Some(s) = obj.get(k) {
                    stack.push(s);
                }
            }
            for k in ["dependentSchemas", "dependencies"] {
                if let Some(deps) = obj.get(k).and_then(Value::as_object) {
                    stack.extend(deps.values().filter(|v| v.is_object()));
                }
            }
            // Local references, `#/...` or through an `$id` of the same
            // document, declare the root's keys as well.
            if let Some(r) = obj.get("$ref").and_then(Value::as_str)
                && seen_refs.insert(r.to_owned())
                && let Some(target) = index.target(r, None)
            {
                stack.push(target);
            }
        }
        let opens = |k: &str| schema.get(k).is_some_and(|v| v != &Value::Bool(false));
        let open = opens("additionalProperties") || opens("unevaluatedProperties");
        let patterns = if patterns.is_empty() {
            None
        } else {
            let any: Vec<Value> = patterns.iter().map(|p| json!({ "pattern": p })).collect();
            let v = jsonschema::options()
                .with_draft(draft)
                .build(&json!({ "anyOf": any }))
                .map_err(|e| {
                    format!(
                        "a patternProperties pattern does not compile: {}",
                        e.masked()
                    )
                })?;
            Some(v)
        };
        Ok(Self {
            declared,
            open,
            patterns,
        })
    }

    /// Whether a top-level key is admitted by the closed root.
    pub(crate) fn admits(&self, key: &str) -> bool {
        self.open
            || self.declared.contains(key)
            || self
                .patterns
                .as_ref()
                .is_some_and(|p| p.is_valid(&Value::String(key.to_owned())))
    }

    /// A declared name close to `key`, for a "did you mean" hint: same name
    /// but for case, or at most two edits away (one for short names).
    pub(crate) fn near_miss(&self, key: &str) -> Option<&str> {
        let lower = key.to_ascii_lowercase();
        let budget = if key.chars().count() <= 4 { 1 } else { 2 };
        self.declared
            .iter()
            .map(|d| {
                let dist = if d.to_ascii_lowercase() == lower {
                    0
                } else {
                    strsim::damerau_levenshtein(&lower, &d.to_ascii_lowercase())
                };
                (dist, d)
            })
            .filter(|(dist, _)| *dist <= budget)
            .min()
            .map(|(_, d)| d.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(schema: Value) -> RootKeys {
        match RootKeys::of(&schema, Draft::Draft202012) {
            Ok(k) => k,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn collects_through_composition_and_refs() {
        let k = keys(json!({
            "type": "object",
            "$defs": { "base": { "properties": { "from_ref": {} } } },
            "properties": { "direct": {} },
            "required": ["req_only"],
            "allOf": [ { "$ref": "#/$defs/base" }, { "properties": { "in_all_of": {} } } ],
            "anyOf": [ { "properties": { "in_any_of": {} } } ],
            "if": { "properties": { "in_if": {} } },
            "then": { "properties": { "in_then": {} } }
        }));
        for name in [
            "direct",
            "req_only",
            "from_ref",
            "in_all_of",
            "in_any_of",
            "in_if",
            "in_then",
        ] {
            assert!(k.admits(name), "{name} should be declared");
        }
        assert!(!k.admits("other"));
        assert!(!k.open);
    }

    #[test]
    fn ref_cycles_terminate() {
        let k = keys(json!({
            "type": "object",
            "$defs": { "a": { "$ref": "#/$defs/b", "properties": {"x": {}} }, "b": { "$ref": "#/$defs/a" } },
            "$ref": "#/$defs/a"
        }));
        assert!(k.admits("x"));
    }

    #[test]
    fn pattern_properties_admit_matching_keys() {
        let k = keys(json!({"type":"object","patternProperties":{"^x-":{}}}));
        assert!(k.admits("x-trace"));
        assert!(!k.admits("trace"));
    }

    #[test]
    fn explicit_open_root_is_honoured() {
        assert!(
            keys(json!({"type":"object","additionalProperties":{"type":"string"}})).admits("any")
        );
        assert!(!keys(json!({"type":"object","additionalProperties":false})).admits("any"));
    }

    #[test]
    fn near_misses() {
        let k = keys(json!({"type":"object","properties":{"title":{},"max_results":{},"tags":{}}}));
        assert_eq!(k.near_miss("titel"), Some("title"));
        assert_eq!(k.near_miss("Title"), Some("title"));
        assert_eq!(k.near_miss("max_result"), Some("max_results"));
        assert_eq!(k.near_miss("unrelated"), None);
    }
}
