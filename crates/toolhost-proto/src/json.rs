//! `google.protobuf.Struct` <-> `serde_json`.
//!
//! protobuf's `Value` has one number type, a double. JSON integers survive the
//! round trip exactly up to 2^53; a double with no fractional part in that
//! range comes back as a JSON integer, so `{"n": 3}` stays `3`, not `3.0`
//! (schemas that say `"type": "integer"` depend on it). Larger integers lose
//! precision: that is the wire format's limit, not ours.

use prost_types::{ListValue, Struct, Value, value::Kind};
use serde_json::{Map, Number, Value as Json};

/// The largest integer a double holds exactly.
const EXACT_INT: f64 = 9_007_199_254_740_992.0; // 2^53

/// JSON object -> protobuf Struct.
pub fn struct_from_json(map: &Map<String, Json>) -> Struct {
    Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), value_from_json(v)))
            .collect(),
    }
}

/// JSON value -> protobuf Value.
pub fn value_from_json(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(value_from_json).collect(),
        }),
        Json::Object(o) => Kind::StructValue(struct_from_json(o)),
    };
    Value { kind: Some(kind) }
}

/// protobuf Struct -> JSON object.
pub fn json_from_struct(s: &Struct) -> Map<String, Json> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), json_from_value(v)))
        .collect()
}

/// protobuf Value -> JSON value. A missing kind is `null`; a non-finite
/// number (which JSON cannot carry) is `null` too.
pub fn json_from_value(v: &Value) -> Json {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(l)) => Json::Array(l.values.iter().map(json_from_value).collect()),
        Some(Kind::StructValue(s)) => Json::Object(json_from_struct(s)),
    }
}

/// protobuf Struct -> JSON object, taking the Struct: its strings move
/// into the JSON rather than being copied. A plugin's answer is decoded
/// once and converted once, so this is the call path's form (measured: a
/// result of 15 strings cost 15 allocations and copies more by reference).
pub fn json_from_struct_owned(s: Struct) -> Map<String, Json> {
    s.fields
        .into_iter()
        .map(|(k, v)| (k, json_from_value_owned(v)))
        .collect()
}

/// protobuf Value -> JSON value, taking the Value; as [`json_from_value`].
pub fn json_from_value_owned(v: Value) -> Json {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::ListValue(l)) => {
            Json::Array(l.values.into_iter().map(json_from_value_owned).collect())
        }
        Some(Kind::StructValue(s)) => Json::Object(json_from_struct_owned(s)),
    }
}

pub(crate) fn number(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() <= EXACT_INT {
        // Exact: |n| <= 2^53 fits i64 without rounding.
        #[allow(clippy::cast_possible_truncation)]
        return Json::Number(Number::from(n as i64));
    }
    Number::from_f64(n).map_or(Json::Null, Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn integers_stay_integers() {
        let v = json!({"n": 3, "f": 1.5, "neg": -7, "big": 9_007_199_254_740_992_i64});
        let Json::Object(m) = &v else { unreachable!() };
        assert_eq!(Json::Object(json_from_struct(&struct_from_json(m))), v);
    }

    #[test]
    fn nan_becomes_null() {
        let v = Value {
            kind: Some(Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(json_from_value(&v), Json::Null);
    }

    fn arb_json() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-1_000_000_i64..1_000_000).prop_map(|n| json!(n)),
            "[a-z]{0,8}".prop_map(Json::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_owned_conversion_gives_what_the_borrowed_one_does(v in arb_json()) {
            let p = value_from_json(&v);
            prop_assert_eq!(json_from_value_owned(p.clone()), json_from_value(&p));
        }

        #[test]
        fn round_trip(v in arb_json()) {
            prop_assert_eq!(json_from_value(&value_from_json(&v)), v);
        }
    }
}
