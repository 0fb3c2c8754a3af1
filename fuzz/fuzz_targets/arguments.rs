//! Argument checking: arbitrary JSON against a set of schemas. Never a
//! panic, and never a value in an error: every string *value* of the
//! instance that is not also text of the schema must be absent from the
//! error's text and structured violations.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use toolhost_validate::{CompiledSchema, ToolPolicy, UnknownArguments, check_arguments};

fn schemas() -> &'static Vec<(String, CompiledSchema)> {
    static S: OnceLock<Vec<(String, CompiledSchema)>> = OnceLock::new();
    S.get_or_init(|| {
        [
            json!({ "type": "object" }),
            json!({ "type": "object", "properties": { "text": { "type": "string", "maxLength": 5 }, "n": { "type": "integer", "minimum": 0 },
                "mode": { "enum": ["a", "b"] }, "tags": { "type": "array", "items": { "type": "string", "pattern": "^[a-z]+$" }, "uniqueItems": true },
                "meta": { "type": "object", "additionalProperties": { "type": "integer" } } }, "required": ["text"] }),
            json!({ "type": "object", "allOf": [ { "properties": { "q": { "type": "string", "format": "email" } } } ],
                "oneOf": [ { "required": ["q"] }, { "properties": { "z": { "const": 1 } }, "required": ["z"] } ] }),
        ]
        .into_iter()
        .filter_map(|s| CompiledSchema::compile(&s).ok().map(|c| (s.to_string(), c)))
        .collect()
    })
}

fn keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k.clone());
            keys(x, out);
        }),
        _ => {}
    }
}

fn string_values(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| string_values(x, out)),
        Value::Object(m) => m.values().for_each(|x| string_values(x, out)),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    let aliases = BTreeMap::from([("t".to_owned(), "text".to_owned())]);
    for (text, schema) in schemas() {
        for unknown in [UnknownArguments::Reject, UnknownArguments::Report] {
            let policy = ToolPolicy { aliases: &aliases, unknown };
            if let Err(e) = check_arguments(schema, &policy, Some(value.clone())) {
                let shown = format!("{} {}", e.message, serde_json::to_string(&e.violations).unwrap_or_default());
                let mut values = Vec::new();
                string_values(&value, &mut values);
                // Identifier-like keys may be named (docs/CONTRACT.md §5); a value
                // that happens to be part of a key is not evidence of an echo.
                let mut names = Vec::new();
                keys(&value, &mut names);
                let in_a_key = |s: &str| names.iter().any(|k| k.contains(s));
                for s in values.iter().filter(|s| s.len() >= 6 && !text.contains(s.as_str()) && !in_a_key(s)) {
                    assert!(!shown.contains(s.as_str()), "value {s:?} echoed in {shown}");
                }
            }
        }
    }
});
