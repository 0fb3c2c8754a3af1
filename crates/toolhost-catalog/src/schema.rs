//! A tool's JSON Schema, kept as the text it was pushed in until something
//! needs it as a tree.
//!
//! A fleet's catalog names every tool of every plugin in the group, and most
//! daemons serve a few of them: the rest are judged (their plugin is not
//! installed here) and withheld. A schema parsed into a `serde_json::Value`
//! costs about 3 KiB for a small four-object schema (each object a
//! `BTreeMap` with room for 11 entries) and about 2 µs of allocation; its
//! text is about 130 bytes. So a pushed schema is read once, into a
//! borrowed tree that lives for the length of one digest, and kept as text
//! with its canonical digest: the judgement compares digests, the
//! compiled-schema cache is keyed by them, and the tree is built only when
//! the tool is served (compiled, listed) or its contract is shown.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

/// SHA-256 of a JSON value in canonical form (object keys sorted at every
/// level, compact). Equal schemas get equal digests whatever their key order.
#[must_use]
pub fn canonical_digest(v: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    feed(&mut h, v);
    h.finalize().into()
}

/// Feeds `v`'s compact canonical text to `h` without building it: a
/// 10,000-tool push digests every schema, and a string per key and leaf
/// made this a tenth of a daemon's work for the push.
fn feed(h: &mut Sha256, v: &Value) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            if !keys.is_sorted() {
                keys.sort();
            }
            h.update(b"{");
            for k in keys {
                json_text(h, k);
                h.update(b":");
                if let Some(inner) = map.get(k) {
                    feed(h, inner);
                }
                h.update(b",");
            }
            h.update(b"}");
        }
        Value::Array(items) => {
            h.update(b"[");
            for i in items {
                feed(h, i);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => json_text(h, other),
    }
}

/// The compact JSON text of `v`, written into the hasher as it is made
/// (the same bytes as `serde_json::to_string`).
fn json_text<T: serde::Serialize + ?Sized>(h: &mut Sha256, v: &T) {
    struct Into<'a>(&'a mut Sha256);
    impl std::io::Write for Into<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing into a hasher cannot fail, and a `Value` or `str` always
    // serializes.
    let _ = serde_json::to_writer(Into(h), v);
}

/// A JSON Schema with its canonical digest ([`canonical_digest`]), as text
/// or as a tree, whichever it came as; the tree is built from the text on
/// first use and kept. Two schemas are equal when their canonical forms
/// are (their digests).
pub struct Schema {
    digest: [u8; 32],
    /// The text it was pushed as; `None` when it was made from a tree.
    text: Option<Box<str>>,
    tree: OnceLock<Value>,
}

impl Schema {
    /// A schema from JSON text, checked to be JSON and digested without
    /// building its tree.
    ///
    /// # Errors
    ///
    /// The text is not one JSON value (serde_json's error: line and column,
    /// never the text).
    pub fn parse(text: String) -> Result<Self, serde_json::Error> {
        let digest = {
            let borrowed: Canon<'_> = serde_json::from_str(&text)?;
            let mut h = Sha256::new();
            borrowed.feed(&mut h);
            h.finalize().into()
        };
        Ok(Self {
            digest,
            text: Some(text.into_boxed_str()),
            tree: OnceLock::new(),
        })
    }

    /// SHA-256 of the canonical form: equal for equal schemas whatever
    /// their key order and spacing.
    #[must_use]
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// The schema as a tree, built from its text on first use.
    #[must_use]
    pub fn value(&self) -> &Value {
        self.tree.get_or_init(|| {
            // The text was parsed once already (`parse`), so this cannot
            // fail; `Null` is what no schema is, should it ever.
            self.text
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(Value::Null)
        })
    }

    /// The schema as JSON text: as it was pushed, or its tree written out.
    #[must_use]
    pub fn text(&self) -> Cow<'_, str> {
        match (&self.text, self.tree.get()) {
            (Some(t), _) => Cow::Borrowed(t),
            (None, Some(v)) => Cow::Owned(v.to_string()),
            (None, None) => Cow::Borrowed("null"),
        }
    }

    /// Whether the tree was built: a withheld tool's never is.
    #[must_use]
    pub fn is_built(&self) -> bool {
        self.tree.get().is_some()
    }
}

impl From<Value> for Schema {
    fn from(v: Value) -> Self {
        Self {
            digest: canonical_digest(&v),
            text: None,
            tree: OnceLock::from(v),
        }
    }
}

impl std::ops::Deref for Schema {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl Clone for Schema {
    fn clone(&self) -> Self {
        Self {
            digest: self.digest,
            text: self.text.clone(),
            tree: self.tree.clone(),
        }
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for Schema {}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tree.get(), &self.text) {
            (Some(v), _) => write!(f, "Schema({v})"),
            (None, Some(t)) => write!(f, "Schema({t})"),
            (None, None) => f.write_str("Schema(null)"),
        }
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::from)
    }
}

/// A JSON value borrowed from its text for the length of one digest: one
/// allocation per object and array, none per string without escapes.
enum Canon<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Canon<'a>>),
    Object(Vec<(Cow<'a, str>, Canon<'a>)>),
}

impl Canon<'_> {
    /// The same bytes `canonical_digest` feeds for the equal `Value`: keys
    /// sorted, a repeated key's last value (as `serde_json` keeps it).
    fn feed(&self, h: &mut Sha256) {
        match self {
            Canon::Null => h.update(b"null"),
            Canon::Bool(true) => h.update(b"true"),
            Canon::Bool(false) => h.update(b"false"),
            Canon::Number(n) => json_text(h, n),
            Canon::String(s) => json_text(h, s.as_ref()),
            Canon::Array(items) => {
                h.update(b"[");
                for i in items {
                    i.feed(h);
                    h.update(b",");
                }
                h.update(b"]");
            }
            Canon::Object(members) => {
                let mut order: Vec<usize> = (0..members.len()).collect();
                // Stable: of a repeated key, the last written stays last.
                order.sort_by(|&a, &b| members[a].0.cmp(&members[b].0));
                h.update(b"{");
                let mut it = order.iter().peekable();
                while let Some(&i) = it.next() {
                    let (k, v) = &members[i];
                    if it.peek().is_some_and(|&&j| members[j].0 == *k) {
                        continue;
                    }
                    json_text(h, k.as_ref());
                    h.update(b":");
                    v.feed(h);
                    h.update(b",");
                }
                h.update(b"}");
            }
        }
    }
}

/// A string borrowed from the text where it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Canon<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Canon<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Canon<'de>, E> {
                Ok(Canon::Null)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Canon<'de>, E> {
                Ok(Canon::Bool(b))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Canon<'de>, E> {
                Ok(Canon::Number(n.into()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Canon<'de>, E> {
                Ok(Canon::Number(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Canon<'de>, E> {
                // As `Value` does: a float JSON cannot hold is null.
                Ok(Number::from_f64(n).map_or(Canon::Null, Canon::Number))
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Canon<'de>, E> {
                Ok(Canon::String(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Canon<'de>, E> {
                Ok(Canon::String(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Canon<'de>, E> {
                Ok(Canon::String(Cow::Owned(s)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Canon<'de>, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Canon::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Canon<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(Text(k)) = map.next_key()? {
                    members.push((k, map.next_value()?));
                }
                Ok(Canon::Object(members))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The digest's bytes are a contract (digests are kept on disk and
    /// compared across versions): the text it hashes is the one built by
    /// serializing every key and leaf on its own, as it was first written.
    #[test]
    fn digest_hashes_the_same_text_as_the_first_version() {
        fn text(v: &Value, out: &mut String) {
            match v {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    out.push('{');
                    for k in keys {
                        out.push_str(&Value::String(k.clone()).to_string());
                        out.push(':');
                        text(&map[k.as_str()], out);
                        out.push(',');
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for i in items {
                        text(i, out);
                        out.push(',');
                    }
                    out.push(']');
                }
                other => out.push_str(&other.to_string()),
            }
        }
        let v = json!({"z\u{7}\"k": [1, -2.5, 1e300, "x\"\n\u{2028}é", null, true],
                       "a": {"": false, "n": 18446744073709551615_u64}});
        let mut t = String::new();
        text(&v, &mut t);
        let want: [u8; 32] = Sha256::digest(t.as_bytes()).into();
        assert_eq!(canonical_digest(&v), want);
    }

    #[test]
    fn digest_ignores_key_order() {
        let a = json!({"type":"object","properties":{"a":{"type":"string"},"b":{}}});
        let b: Value = serde_json::from_str(
            r#"{"properties":{"b":{},"a":{"type":"string"}},"type":"object"}"#,
        )
        .unwrap_or_default();
        assert_eq!(canonical_digest(&a), canonical_digest(&b));
        assert_ne!(
            canonical_digest(&a),
            canonical_digest(&json!({"type":"object"}))
        );
        // Strings that look like structure do not collide with structure.
        assert_ne!(
            canonical_digest(&json!(["a,"])),
            canonical_digest(&json!(["a", ""]))
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|n| json!(n)),
            "[a-z\"\\\\\u{0}-\u{1f}é\u{2028}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-c\"é]{0,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Digested from its text, compact or pretty, a schema has the
        /// digest of its tree: the judgement and the compiled-schema cache
        /// mix schemas of both kinds.
        #[test]
        fn the_digest_of_the_text_is_the_digest_of_the_tree(v in json_value()) {
            let want = canonical_digest(&v);
            for text in [v.to_string(), serde_json::to_string_pretty(&v).unwrap_or_default()] {
                let s = Schema::parse(text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(s.digest(), want);
                prop_assert!(!s.is_built());
                prop_assert_eq!(s.value(), &v);
            }
        }
    }

    #[test]
    fn key_order_spacing_and_escapes_do_not_change_the_digest() {
        let a = Schema::parse(r#"{"type":"object","properties":{"a":{"type":"string"}}}"#.into());
        let b = Schema::parse(
            "{ \"properties\" : { \"\\u0061\": {\"type\": \"string\"} },\n \"type\": \"object\" }"
                .into(),
        );
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b);
                assert_eq!(
                    a,
                    Schema::from(json!({"type":"object","properties":{"a":{"type":"string"}}}))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_repeated_key_is_its_last_value_as_in_the_tree() {
        let text = r#"{"b":1,"a":2,"b":3}"#;
        let tree: Value = serde_json::from_str(text).unwrap_or_default();
        let s = Schema::parse(text.into()).map_err(|e| e.to_string());
        assert_eq!(s.map(|s| s.digest()), Ok(canonical_digest(&tree)));
    }

    /// A backend's schema nested past serde_json's depth limit is refused
    /// as a tree's would be, without exhausting the stack.
    #[test]
    fn a_schema_nested_beyond_the_limit_is_refused() {
        for deep in ["[".repeat(100_000), "{\"a\":".repeat(100_000)] {
            let e = Schema::parse(deep).map(|_| ()).map_err(|e| e.to_string());
            assert!(
                e.as_ref().is_err_and(|e| e.contains("recursion limit")),
                "{e:?}"
            );
        }
    }

    #[test]
    fn text_that_is_not_one_json_value_is_refused() {
        for bad in ["", "{", "{} {}", "[1,]", "nul", "{\"a\" 1}"] {
            assert!(Schema::parse(bad.into()).is_err(), "{bad:?}");
        }
    }
}
