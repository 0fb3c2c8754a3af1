//! The decoder against `prost`'s: the same answer from the same bytes,
//! and a refusal where it refuses.

use super::*;
use crate::json::struct_from_json;
use proptest::prelude::*;
use prost::Message;
use serde_json::json;

/// What the daemon did before: `prost`, then the conversion.
fn prost_way(bytes: &[u8]) -> Option<ToolAnswer> {
    AgentToolResponse::decode(bytes).ok().map(ToolAnswer::from)
}

fn same_as_prost(bytes: &[u8]) -> Result<(), TestCaseError> {
    let ours = ToolAnswer::decode(bytes);
    let theirs = prost_way(bytes);
    prop_assert_eq!(ours.as_ref().ok(), theirs.as_ref(), "ours: {:?}", ours);
    Ok(())
}

fn encoded(text: &str, structured: Option<Json>, is_error: bool) -> Vec<u8> {
    AgentToolResponse {
        text: text.to_owned(),
        structured_content: structured.map(|v| match v {
            Json::Object(m) => struct_from_json(&m),
            _ => prost_types::Struct::default(),
        }),
        is_error,
    }
    .encode_to_vec()
}

fn arb_object() -> impl Strategy<Value = Json> {
    prop::collection::btree_map(".{0,8}", crate::arbitrary::json(), 0..6)
        .prop_map(|m| Json::Object(m.into_iter().collect()))
}

/// One field of a message-shaped byte string: a small field number (so
/// known numbers come up, with every wire type), any wire type, and a
/// payload that is sometimes a message itself, sometimes not UTF-8.
#[derive(Debug, Clone)]
enum Field {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Fixed32(u32, u32),
    Bytes(u32, Vec<u8>),
    Message(u32, Vec<Field>),
    Group(u32, Vec<Field>),
    /// A raw byte: a stray end-group, a varint cut short.
    Raw(u8),
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = u8::try_from(v & 0x7f).unwrap_or(0);
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn put_key(field: u32, wire: u8, out: &mut Vec<u8>) {
    put_varint((u64::from(field) << 3) | u64::from(wire), out);
}

fn write(fields: &[Field], out: &mut Vec<u8>) {
    for f in fields {
        match f {
            Field::Varint(n, v) => {
                put_key(*n, VARINT, out);
                put_varint(*v, out);
            }
            Field::Fixed64(n, v) => {
                put_key(*n, FIXED64, out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Field::Fixed32(n, v) => {
                put_key(*n, FIXED32, out);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Field::Bytes(n, b) => {
                put_key(*n, LEN, out);
                put_varint(b.len() as u64, out);
                out.extend_from_slice(b);
            }
            Field::Message(n, inner) => {
                let mut body = Vec::new();
                write(inner, &mut body);
                put_key(*n, LEN, out);
                put_varint(body.len() as u64, out);
                out.extend_from_slice(&body);
            }
            Field::Group(n, inner) => {
                put_key(*n, GROUP_START, out);
                write(inner, out);
                put_key(*n, GROUP_END, out);
            }
            Field::Raw(b) => out.push(*b),
        }
    }
}

fn arb_fields() -> impl Strategy<Value = Vec<Field>> {
    let number = 1u32..8;
    let leaf = prop_oneof![
        (number.clone(), any::<u64>()).prop_map(|(n, v)| Field::Varint(n, v)),
        (
            number.clone(),
            prop_oneof![any::<u64>(), any::<f64>().prop_map(f64::to_bits)]
        )
            .prop_map(|(n, v)| Field::Fixed64(n, v)),
        (number.clone(), any::<u32>()).prop_map(|(n, v)| Field::Fixed32(n, v)),
        (
            number.clone(),
            prop_oneof![
                ".{0,6}".prop_map(String::into_bytes),
                prop::collection::vec(any::<u8>(), 0..6)
            ]
        )
            .prop_map(|(n, b)| Field::Bytes(n, b)),
        any::<u8>().prop_map(Field::Raw),
    ];
    let field = leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            4 => (number.clone(), prop::collection::vec(inner.clone(), 0..5))
                .prop_map(|(n, f)| Field::Message(n, f)),
            1 => (number.clone(), prop::collection::vec(inner, 0..3))
                .prop_map(|(n, f)| Field::Group(n, f)),
        ]
    });
    prop::collection::vec(field, 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_well_formed_answer_decodes_as_prost_decodes_it(
        text in ".{0,8}",
        structured in prop::option::of(arb_object()),
        is_error in any::<bool>(),
    ) {
        let bytes = encoded(&text, structured.clone(), is_error);
        let answer = ToolAnswer::decode(&bytes);
        prop_assert!(answer.is_ok(), "{:?}", answer);
        same_as_prost(&bytes)?;
    }

    #[test]
    fn two_answers_run_together_merge_as_protobuf_merges_them(
        a in prop::option::of(arb_object()),
        b in prop::option::of(arb_object()),
        flags in any::<(bool, bool)>(),
    ) {
        let mut bytes = encoded("first", a, flags.0);
        bytes.extend(encoded("", b, flags.1));
        same_as_prost(&bytes)?;
    }

    #[test]
    fn any_message_shaped_bytes_decode_or_fail_as_prost_does(fields in arb_fields()) {
        let mut bytes = Vec::new();
        write(&fields, &mut bytes);
        same_as_prost(&bytes)?;
    }

    #[test]
    fn any_bytes_decode_or_fail_as_prost_does(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
        same_as_prost(&bytes)?;
    }

    #[test]
    fn a_damaged_answer_decodes_or_fails_as_prost_does(
        structured in arb_object(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut bytes = encoded("t", Some(structured), false);
        let i = at.index(bytes.len());
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        same_as_prost(&bytes)?;
    }
}

/// `structured_content` holding `depth` objects, each the value of key
/// "k" in the one above it.
fn nested(depth: usize) -> Vec<u8> {
    let mut v = json!({});
    for _ in 0..depth {
        v = json!({ "k": v });
    }
    encoded("", Some(v), false)
}

#[test]
fn the_nesting_limit_is_prost_s_to_the_level() {
    let mut accepted = 0;
    for depth in 0..60 {
        let bytes = nested(depth);
        let ours = ToolAnswer::decode(&bytes);
        assert_eq!(
            ours.as_ref().ok(),
            prost_way(&bytes).as_ref(),
            "depth {depth}"
        );
        if ours.is_ok() {
            accepted = depth;
        }
    }
    // Structured content's own Struct costs one of the 100, and each object
    // under it three (its map entry, the Value, the Struct): 33 objects.
    assert_eq!(accepted, 33);
}

#[test]
fn an_answer_nested_far_past_the_limit_is_refused_where_the_limit_is() {
    // 5,000 levels of `struct_value`, built inside out (each level copies
    // the ones inside it, so more would cost the test, not the decoder:
    // it stops at the limit whatever lies below).
    let mut value: Vec<u8> = Vec::new();
    for _ in 0..5_000 {
        let mut entry = Vec::new();
        // Value { struct_value = Struct { fields = { "": Value } } }
        let mut map_entry = Vec::new();
        put_key(2, LEN, &mut map_entry);
        put_varint(value.len() as u64, &mut map_entry);
        map_entry.extend_from_slice(&value);
        let mut s = Vec::new();
        put_key(1, LEN, &mut s);
        put_varint(map_entry.len() as u64, &mut s);
        s.extend_from_slice(&map_entry);
        put_key(5, LEN, &mut entry);
        put_varint(s.len() as u64, &mut entry);
        entry.extend_from_slice(&s);
        value = entry;
    }
    let mut bytes = Vec::new();
    put_key(2, LEN, &mut bytes);
    let mut s = Vec::new();
    put_key(1, LEN, &mut s);
    let mut entry = Vec::new();
    put_key(2, LEN, &mut entry);
    put_varint(value.len() as u64, &mut entry);
    entry.extend_from_slice(&value);
    put_varint(entry.len() as u64, &mut s);
    s.extend_from_slice(&entry);
    put_varint(s.len() as u64, &mut bytes);
    bytes.extend_from_slice(&s);
    let err = ToolAnswer::decode(&bytes).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("structured content nested too deep")
    );
    assert!(prost_way(&bytes).is_none());
}

#[test]
fn fields_sent_twice_follow_protobuf_s_merge_rules() {
    // Structured content twice: one object with both's keys, and the
    // second's value where both have the key (a map entry is replaced, not
    // merged). `is_error: false` is protobuf's default, never on the wire,
    // so the first's `true` stands.
    let mut bytes = encoded("a", Some(json!({"x": 1, "l": [1]})), true);
    bytes.extend(encoded("b", Some(json!({"y": 2, "l": [2]})), false));
    let answer = ToolAnswer::decode(&bytes);
    assert_eq!(
        answer,
        Ok(ToolAnswer {
            text: "b".into(),
            structured: json!({"x": 1, "y": 2, "l": [2]}).as_object().cloned(),
            is_error: true,
        })
    );
    assert_eq!(answer.ok(), prost_way(&bytes));
}

#[test]
fn an_empty_structured_content_is_an_empty_object_and_none_is_none() {
    let empty = ToolAnswer::decode(&encoded("t", Some(json!({})), false));
    assert_eq!(empty.map(|a| a.structured), Ok(Some(Map::new())));
    let none = ToolAnswer::decode(&encoded("t", None, false));
    assert_eq!(none.map(|a| a.structured), Ok(None));
}

#[test]
fn integers_stay_integers_and_what_json_cannot_carry_is_null() {
    let bytes = encoded("", Some(json!({"n": 3, "f": 1.5, "neg": -7})), false);
    let answer = ToolAnswer::decode(&bytes).ok().and_then(|a| a.structured);
    assert_eq!(
        answer.map(Json::Object),
        Some(json!({"n": 3, "f": 1.5, "neg": -7}))
    );
    // Value { number_value = NaN } under key "x".
    let mut value = Vec::new();
    put_key(2, FIXED64, &mut value);
    value.extend_from_slice(&f64::NAN.to_bits().to_le_bytes());
    let mut entry = vec![0x0a, 1, b'x'];
    put_key(2, LEN, &mut entry);
    put_varint(value.len() as u64, &mut entry);
    entry.extend_from_slice(&value);
    let mut bytes = Vec::new();
    put_key(2, LEN, &mut bytes);
    put_varint(entry.len() as u64 + 2, &mut bytes);
    put_key(1, LEN, &mut bytes);
    put_varint(entry.len() as u64, &mut bytes);
    bytes.extend_from_slice(&entry);
    let answer = ToolAnswer::decode(&bytes).ok().and_then(|a| a.structured);
    assert_eq!(answer.map(Json::Object), Some(json!({"x": null})));
}

#[test]
fn a_string_that_is_not_utf8_is_refused() {
    let bytes = [0x0a, 2, 0xff, 0xfe];
    assert!(ToolAnswer::decode(&bytes).is_err());
    assert!(prost_way(&bytes).is_none());
}
