//! The argument-checking cases: three schemas, small to large, each with a
//! valid instance. Shared by the criterion bench beside this file and by
//! `toolhost-bench`'s goal table, so both time the same thing.

use serde_json::{Value, json};

/// Two properties, a `maxLength`: the shape of most tools.
pub fn small() -> (Value, Value) {
    (
        json!({ "type": "object", "properties": { "text": { "type": "string", "maxLength": 100 }, "n": { "type": "integer" } }, "required": ["text"] }),
        json!({ "text": "hello", "n": 3 }),
    )
}

/// Fifteen properties with a pattern, an enum, an array and a nested object.
pub fn medium() -> (Value, Value) {
    let mut props = serde_json::Map::new();
    let mut inst = serde_json::Map::new();
    for i in 0..12 {
        props.insert(
            format!("s{i}"),
            json!({ "type": "string", "maxLength": 64, "pattern": "^[a-z0-9 ]*$" }),
        );
        inst.insert(format!("s{i}"), json!("some words here"));
    }
    props.insert("tags".into(), json!({ "type": "array", "items": { "type": "string" }, "maxItems": 10, "uniqueItems": true }));
    inst.insert("tags".into(), json!(["a", "b", "c", "d"]));
    props.insert("mode".into(), json!({ "enum": ["fast", "slow", "auto"] }));
    inst.insert("mode".into(), json!("auto"));
    props.insert("limits".into(), json!({ "type": "object", "properties": { "min": { "type": "integer" }, "max": { "type": "integer" } } }));
    inst.insert("limits".into(), json!({ "min": 1, "max": 9 }));
    (
        json!({ "type": "object", "properties": props, "required": ["s0", "s1", "mode"] }),
        Value::Object(inst),
    )
}

/// Forty-one properties and a 100-item array of objects with open maps.
pub fn large() -> (Value, Value) {
    let item = json!({
        "type": "object",
        "properties": {
            "id": { "type": "integer", "minimum": 0 },
            "title": { "type": "string", "maxLength": 200 },
            "labels": { "type": "array", "items": { "type": "string", "pattern": "^[a-z-]+$" } },
            "meta": { "type": "object", "additionalProperties": { "type": "string" } }
        },
        "required": ["id", "title"]
    });
    let mut props = serde_json::Map::new();
    for i in 0..40 {
        props.insert(
            format!("f{i}"),
            json!({ "type": ["string", "null"], "maxLength": 500 }),
        );
    }
    props.insert(
        "items".into(),
        json!({ "type": "array", "items": item, "maxItems": 500 }),
    );
    let items: Vec<Value> = (0..100)
        .map(|i| json!({ "id": i, "title": format!("item number {i}"), "labels": ["alpha", "beta-two"], "meta": { "k": "v", "owner": "someone" } }))
        .collect();
    let mut inst: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("f{i}"), json!("a value")))
        .collect();
    inst.insert("items".into(), Value::Array(items));
    (
        json!({ "type": "object", "properties": props }),
        Value::Object(inst),
    )
}
