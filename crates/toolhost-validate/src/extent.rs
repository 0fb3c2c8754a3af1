//! What a schema alone says about the size and depth of the instances it
//! accepts.
//!
//! Most tool schemas are a closed object of bounded scalars: a few strings
//! with a `maxLength`, numbers, booleans, enums. Every argument object such
//! a schema accepts is within the bounds of step 2 (at most
//! [`MAX_ARGUMENT_BYTES`] serialized, [`MAX_ARGUMENT_DEPTH`] deep), so for
//! arguments the schema accepts, the bounds walk has nothing left to find
//! and is skipped.
//!
//! The reading is conservative: it understands a small set of keywords
//! whose only effect is to narrow what is valid (or that are annotations),
//! and answers `None` ("unbounded, or cannot tell") for anything else:
//! composition, references, conditionals, tuples, pattern properties,
//! open objects, strings without `maxLength`, arrays without `maxItems`.
//! A `None` costs only the walk it would have saved.

use crate::bounds::{MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH};
use serde_json::{Map, Value};

/// Keywords that only narrow what is valid, or only annotate. Any other
/// keyword in a subschema makes its extent unknown.
const NARROWING: [&str; 31] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "contentEncoding",
    "contentMediaType",
];

/// The most bytes a serialized JSON number takes (`-9223372036854775808`,
/// or a float such as `-1.7976931348623157e308`).
const NUMBER_BYTES: usize = 24;
/// The most bytes one character of a string takes serialized: a control
/// character escaped as `\u00XX`.
const CHAR_BYTES: usize = 6;

/// Most bytes serialized and deepest container nesting (a scalar is 0, an
/// object or array 1 more than its deepest member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) bytes: usize,
    pub(crate) depth: usize,
}

impl Extent {
    fn max(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.max(other.bytes),
            depth: self.depth.max(other.depth),
        }
    }
}

/// Whether every argument object valid under `schema`, its root closed to
/// the keys of its `properties`, is within the argument bounds.
pub(crate) fn root_is_within_bounds(schema: &Value) -> bool {
    let Some(root) = schema.as_object() else {
        return false;
    };
    closed_object(root)
        .is_some_and(|e| e.bytes <= MAX_ARGUMENT_BYTES && e.depth <= MAX_ARGUMENT_DEPTH)
}

/// The extent of a subschema, or `None` when it is unbounded or unknown.
fn extent(schema: &Value, nesting: usize) -> Option<Extent> {
    // Deeper than the bounds allow: unbounded for this purpose (and no
    // recursion past it on a hostile schema).
    if nesting > MAX_ARGUMENT_DEPTH {
        return None;
    }
    let s = schema.as_object()?;
    if s.keys().any(|k| !NARROWING.contains(&k.as_str())) {
        return None;
    }
    // A literal set of values bounds everything by itself.
    if let Some(Value::Array(values)) = s.get("enum") {
        return values.iter().map(literal).reduce(Extent::max);
    }
    if let Some(value) = s.get("const") {
        return Some(literal(value));
    }
    let types: Vec<&str> = match s.get("type")? {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().map(Value::as_str).collect::<Option<_>>()?,
        _ => return None,
    };
    types
        .into_iter()
        .map(|t| typed(s, t, nesting))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .reduce(Extent::max)
}

fn typed(s: &Map<String, Value>, ty: &str, nesting: usize) -> Option<Extent> {
    let scalar = |bytes| Some(Extent { bytes, depth: 0 });
    match ty {
        "null" | "boolean" => scalar(5),
        "integer" | "number" => scalar(NUMBER_BYTES),
        "string" => {
            let chars = usize::try_from(s.get("maxLength")?.as_u64()?).ok()?;
            scalar(chars.checked_mul(CHAR_BYTES)?.checked_add(2)?)
        }
        "array" => {
            let n = usize::try_from(s.get("maxItems")?.as_u64()?).ok()?;
            let item = extent(s.get("items")?, nesting + 1)?;
            Some(Extent {
                bytes: n.checked_mul(item.bytes.checked_add(1)?)?.checked_add(2)?,
                depth: item.depth + 1,
            })
        }
        "object" if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
            closed_object_at(s, nesting)
        }
        _ => None,
    }
}

/// An object whose keys are only those of its `properties`.
fn closed_object(s: &Map<String, Value>) -> Option<Extent> {
    closed_object_at(s, 1)
}

fn closed_object_at(s: &Map<String, Value>, nesting: usize) -> Option<Extent> {
    let mut bytes = 2usize;
    let mut depth = 0usize;
    if let Some(props) = s.get("properties") {
        for (key, sub) in props.as_object()? {
            let e = extent(sub, nesting + 1)?;
            // "key": value, with the key escaped at worst.
            bytes = bytes
                .checked_add(key.chars().count().checked_mul(CHAR_BYTES)?)?
                .checked_add(4)?
                .checked_add(e.bytes)?;
            depth = depth.max(e.depth);
        }
    }
    Some(Extent {
        bytes,
        depth: depth + 1,
    })
}

/// The extent of one literal value (from `enum` or `const`). An instance
/// equal to it serializes alike, except numbers: `1` and `1.0` are equal
/// to a schema, so each number counts as the longest number.
fn literal(v: &Value) -> Extent {
    let bytes = serde_json::to_string(v).map_or(usize::MAX, |t| t.len());
    Extent {
        bytes: bytes.saturating_add(numbers_in(v).saturating_mul(NUMBER_BYTES)),
        depth: depth_of(v),
    }
}

fn numbers_in(v: &Value) -> usize {
    match v {
        Value::Number(_) => 1,
        Value::Array(items) => items.iter().map(numbers_in).sum(),
        Value::Object(m) => m.values().map(numbers_in).sum(),
        _ => 0,
    }
}

fn depth_of(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn flat_bounded_scalars_are_within_bounds() {
        assert!(root_is_within_bounds(
            &json!({ "type": "object", "properties": {
            "text": { "type": "string", "maxLength": 100 }, "n": { "type": "integer" },
            "on": { "type": "boolean" }, "mode": { "enum": ["a", "b"] }, "v": { "const": 3 }
        }, "required": ["text"] })
        ));
        assert!(root_is_within_bounds(&json!({ "properties": {} })));
    }

    #[test]
    fn anything_unbounded_or_unknown_is_not() {
        for schema in [
            json!({ "properties": { "s": { "type": "string" } } }),
            json!({ "properties": { "a": { "type": "array", "items": { "type": "integer" } } } }),
            json!({ "properties": { "o": { "type": "object" } } }),
            json!({ "properties": { "o": { "type": "object", "properties": {} } } }),
            json!({ "properties": { "x": {} } }),
            json!({ "properties": { "x": true } }),
            json!({ "properties": { "x": { "$ref": "#/$defs/y" } } }),
            json!({ "properties": { "x": { "anyOf": [{ "type": "null" }] } } }),
            json!({ "properties": { "x": { "type": "array", "maxItems": 2, "items": [{ "type": "null" }] } } }),
            json!({ "properties": { "s": { "type": "string", "maxLength": 400_000 } } }),
            json!(true),
        ] {
            assert!(!root_is_within_bounds(&schema), "{schema}");
        }
    }

    #[test]
    fn nesting_counts_toward_depth() {
        let mut s = json!({ "type": "integer" });
        for _ in 0..70 {
            s = json!({ "type": "array", "maxItems": 1, "items": s });
        }
        assert!(!root_is_within_bounds(
            &json!({ "properties": { "deep": s } })
        ));
    }

    /// A string of at most `max` characters, any of them.
    fn arb_string(max: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(any::<char>(), 0..=max).prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        /// No instance the reading bounds serializes larger than it says.
        #[test]
        fn the_extent_bounds_valid_instances(
            text in arb_string(8),
            items in prop::collection::vec(arb_string(3), 0..=4),
            n in any::<i64>(),
            f in any::<f64>().prop_filter("finite", |f| f.is_finite()),
            on in any::<bool>(),
        ) {
            let schema = json!({ "type": "object", "properties": {
                "text": { "type": "string", "maxLength": 8 },
                "list": { "type": "array", "maxItems": 4, "items": { "type": "string", "maxLength": 3 } },
                "n": { "type": "integer" }, "f": { "type": ["number", "null"] },
                "one": { "enum": [1, "x"] }, "c": { "const": [2] },
                "inner": { "type": "object", "additionalProperties": false, "properties": { "on": { "type": "boolean" } } }
            } });
            let bound = schema.as_object().and_then(closed_object);
            prop_assert!(bound.is_some());
            let bound = bound.map_or(0, |e| e.bytes);
            // 1.0 equals the enum's 1, and [2.0] the const [2], and both
            // serialize longer than the literal.
            let instance = json!({ "text": text, "list": items, "n": n, "f": f, "inner": { "on": on },
                "one": 1.0, "c": [2.0] });
            let compiled = crate::CompiledSchema::compile(&schema);
            prop_assert!(compiled.as_ref().is_ok_and(|c| c.is_valid_raw(&instance)), "the instance must be valid");
            let real = serde_json::to_string(&instance).map_or(usize::MAX, |t| t.len());
            prop_assert!(real <= bound, "{real} > {bound}");
        }
    }
}
