//! Arbitrary JSON for the property tests that hold this crate's
//! hand-written encoder and decoder to `prost`'s.

use proptest::prelude::*;
use serde_json::{Value as Json, json};

/// Any JSON value a call could carry: every number kind (finite, as JSON
/// has no other), strings of any characters, nesting five deep.
pub(crate) fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,200}".prop_map(Json::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..8)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}
