//! Step 2 of the pipeline: cheap structural limits, checked in one pass
//! before the schema sees the value.
//!
//! The serialized size is counted, not produced. The usual case is cheap: one
//! pass finds the depth and a lower and an upper bound of the size (a string
//! takes between its length and six times its length once escaped, a number
//! between 1 and 24 bytes) without looking inside strings or formatting
//! numbers. Only when the limit falls between the two bounds does an exact
//! count run ([`measure`]). Both passes stop at the first limit crossed, so a
//! hostile 100 MiB argument costs no more than its first MiB.

use serde_json::{Map, Value};
use std::fmt::Write as _;

/// Largest accepted argument object, serialized compactly.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;
/// Deepest accepted nesting; the argument object itself is depth 1.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Which bound an argument value broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundError {
    /// The arguments are not a JSON object.
    NotAnObject,
    /// More than [`MAX_ARGUMENT_BYTES`] serialized.
    TooLarge,
    /// Nested deeper than [`MAX_ARGUMENT_DEPTH`].
    TooDeep,
}

/// Applies the bounds: `None` is `{}`; anything else must be an object within
/// the size and depth limits.
pub fn bound(arguments: Option<Value>) -> Result<Map<String, Value>, BoundError> {
    let map = match arguments {
        None => return Ok(Map::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(BoundError::NotAnObject),
    };
    within(&map)?;
    Ok(map)
}

/// The size and depth limits of an argument object.
pub fn within(map: &Map<String, Value>) -> Result<(), BoundError> {
    let mut size = Bounds::default();
    walk_object(map, 1, &mut size)?;
    if size.upper > MAX_ARGUMENT_BYTES {
        measure(map, MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH)?;
    }
    Ok(())
}

/// Lower and upper bounds of the serialized size.
#[derive(Default)]
struct Bounds {
    lower: usize,
    upper: usize,
}

impl Bounds {
    fn add(&mut self, lower: usize, upper: usize) -> Result<(), BoundError> {
        self.lower += lower;
        self.upper = self.upper.saturating_add(upper);
        if self.lower > MAX_ARGUMENT_BYTES {
            return Err(BoundError::TooLarge);
        }
        Ok(())
    }
}

/// Bounds of one scalar's serialized size: `(lower, upper)`.
#[inline]
fn scalar_bounds(v: &Value) -> (usize, usize) {
    match v {
        Value::Null | Value::Bool(true) => (4, 4),
        Value::Bool(false) => (5, 5),
        Value::Number(_) => (1, 24),
        Value::String(s) => (s.len() + 2, s.len().saturating_mul(6) + 2),
        // Containers are walked, never passed here.
        Value::Array(_) | Value::Object(_) => (0, 0),
    }
}

/// Recursion is safe: it stops at `MAX_ARGUMENT_DEPTH`. A container's
/// scalars are summed in locals and added to `size` once, when a nested
/// container is entered and at the end: the walk is on every call's path,
/// and this keeps its per-value work to a match and two additions. The
/// lower bound is still checked per value, so an oversized container stops
/// the walk at the first value past the limit.
fn walk_object(
    map: &Map<String, Value>,
    depth: usize,
    size: &mut Bounds,
) -> Result<(), BoundError> {
    if depth > MAX_ARGUMENT_DEPTH {
        return Err(BoundError::TooDeep);
    }
    let commas = map.len().saturating_sub(1);
    let mut pending = Bounds {
        lower: 2 + commas,
        upper: 2 + commas,
    };
    for (k, v) in map {
        pending.lower += k.len() + 3;
        pending.upper = pending.upper.saturating_add(k.len().saturating_mul(6) + 3);
        walk_member(v, depth, size, &mut pending)?;
    }
    size.add(pending.lower, pending.upper)
}

fn walk_array(items: &[Value], depth: usize, size: &mut Bounds) -> Result<(), BoundError> {
    if depth > MAX_ARGUMENT_DEPTH {
        return Err(BoundError::TooDeep);
    }
    let commas = items.len().saturating_sub(1);
    let mut pending = Bounds {
        lower: 2 + commas,
        upper: 2 + commas,
    };
    for v in items {
        walk_member(v, depth, size, &mut pending)?;
    }
    size.add(pending.lower, pending.upper)
}

/// One member of a container at `depth`: a scalar is added to the
/// container's `pending` sums; a nested container first settles them into
/// `size`, then is walked.
#[inline]
fn walk_member(
    v: &Value,
    depth: usize,
    size: &mut Bounds,
    pending: &mut Bounds,
) -> Result<(), BoundError> {
    match v {
        Value::Array(items) => {
            size.add(pending.lower, pending.upper)?;
            *pending = Bounds::default();
            walk_array(items, depth + 1, size)
        }
        Value::Object(map) => {
            size.add(pending.lower, pending.upper)?;
            *pending = Bounds::default();
            walk_object(map, depth + 1, size)
        }
        scalar => {
            let (l, u) = scalar_bounds(scalar);
            pending.lower += l;
            pending.upper = pending.upper.saturating_add(u);
            if size.lower + pending.lower > MAX_ARGUMENT_BYTES {
                return Err(BoundError::TooLarge);
            }
            Ok(())
        }
    }
}

/// The exact count: walks `root` iteratively (no recursion, so any depth is
/// safe) and fails as soon as either limit is crossed.
pub fn measure(
    root: &Map<String, Value>,
    max_bytes: usize,
    max_depth: usize,
) -> Result<(), BoundError> {
    enum Item<'a> {
        Obj(&'a Map<String, Value>),
        Val(&'a Value),
    }
    let mut bytes = 0usize;
    let mut stack: Vec<(Item<'_>, usize)> = vec![(Item::Obj(root), 1)];
    while let Some((item, depth)) = stack.pop() {
        let value = match item {
            Item::Obj(map) => {
                if depth > max_depth {
                    return Err(BoundError::TooDeep);
                }
                bytes += 2 + map.len().saturating_sub(1);
                for (k, v) in map {
                    bytes += string_len(k) + 1;
                    stack.push((Item::Val(v), depth + 1));
                }
                if bytes > max_bytes {
                    return Err(BoundError::TooLarge);
                }
                continue;
            }
            Item::Val(v) => v,
        };
        match value {
            Value::Null | Value::Bool(true) => bytes += 4,
            Value::Bool(false) => bytes += 5,
            Value::Number(n) => bytes += number_len(n),
            Value::String(s) => bytes += string_len(s),
            Value::Array(items) => {
                if depth > max_depth {
                    return Err(BoundError::TooDeep);
                }
                bytes += 2 + items.len().saturating_sub(1);
                stack.extend(items.iter().map(|v| (Item::Val(v), depth + 1)));
            }
            Value::Object(map) => stack.push((Item::Obj(map), depth)),
        }
        if bytes > max_bytes {
            return Err(BoundError::TooLarge);
        }
    }
    Ok(())
}

/// Bytes of `s` as a JSON string literal, quotes and escapes included.
fn string_len(s: &str) -> usize {
    let mut n = s.len() + 2;
    for b in s.bytes() {
        n += match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0x00..=0x1f => 5,
            _ => 0,
        };
    }
    n
}

fn number_len(n: &serde_json::Number) -> usize {
    struct Count(usize);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing to a counter cannot fail.
    let _ = write!(c, "{n}");
    c.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn absent_is_empty_object() {
        assert_eq!(bound(None), Ok(Map::new()));
    }

    #[test]
    fn non_objects_are_refused() {
        for v in [json!(null), json!([1]), json!("x"), json!(3), json!(true)] {
            assert_eq!(bound(Some(v)), Err(BoundError::NotAnObject));
        }
    }

    #[test]
    fn depth_64_passes_65_fails() {
        let mut v = json!({});
        for _ in 0..63 {
            v = json!({ "a": v });
        }
        assert_eq!(measure(&obj(v.clone()), usize::MAX, 64), Ok(()));
        let v = json!({ "a": v });
        assert_eq!(measure(&obj(v), usize::MAX, 64), Err(BoundError::TooDeep));
        let mut arr = json!([]);
        for _ in 0..70 {
            arr = json!([arr]);
        }
        assert_eq!(bound(Some(json!({ "a": arr }))), Err(BoundError::TooDeep));
    }

    #[test]
    fn just_over_a_mebibyte_fails() {
        let fits = "x".repeat(MAX_ARGUMENT_BYTES - 8); // {"a":"…"} adds 8 bytes
        assert!(bound(Some(json!({ "a": fits }))).is_ok());
        let over = "x".repeat(MAX_ARGUMENT_BYTES - 7);
        assert_eq!(bound(Some(json!({ "a": over }))), Err(BoundError::TooLarge));
    }

    #[test]
    fn escapes_count_near_the_limit() {
        // Short as text, over the limit once escaped: the exact pass decides.
        let quotes = "\"".repeat(MAX_ARGUMENT_BYTES / 2);
        assert_eq!(
            bound(Some(json!({ "a": quotes }))),
            Err(BoundError::TooLarge)
        );
        let fits = "\"".repeat(MAX_ARGUMENT_BYTES / 2 - 8);
        assert!(bound(Some(json!({ "a": fits }))).is_ok());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The counted size is exactly serde_json's compact output.
        #[test]
        fn counted_size_is_exact(v in arb_json()) {
            let m = obj(json!({ "root": v }));
            let real = serde_json::to_string(&m).map(|s| s.len()).unwrap_or(0);
            prop_assert_eq!(measure(&m, real, usize::MAX), Ok(()));
            prop_assert_eq!(measure(&m, real - 1, usize::MAX), Err(BoundError::TooLarge));
        }

        /// The fast bounds bracket the exact size.
        #[test]
        fn fast_bounds_bracket_the_exact_size(v in arb_json()) {
            let m = obj(json!({ "root": v }));
            let real = serde_json::to_string(&m).map(|s| s.len()).unwrap_or(0);
            let mut b = Bounds::default();
            if walk_object(&m, 1, &mut b).is_ok() {
                prop_assert!(b.lower <= real && real <= b.upper, "{} <= {} <= {}", b.lower, real, b.upper);
            }
        }
    }
}
