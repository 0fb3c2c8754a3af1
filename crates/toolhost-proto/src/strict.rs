//! Fields a reader does not know, found in the bytes before they are
//! decoded.
//!
//! prost drops a field it has no place for, silently: a backend that sets
//! a field this toolhost does not have (a newer one's, or a misspelt one
//! in a hand-written client) would have it ignored, and a policy it asked
//! for (`requires_approval`) would not apply. For the messages that carry
//! what a backend asks of the daemon (a pushed catalog, over the admin API
//! or the fleet), the bytes are walked first, against the message shapes
//! `build.rs` embeds from `proto/`, and a message with a field the shapes
//! do not have is refused, naming the field by number and where it is.
//!
//! What this module must not do: trust a length in the bytes (every one is
//! checked against what is left), or recurse without bound (nesting is
//! capped).

use prost::Message as _;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Deepest nesting walked.
const MAX_DEPTH: usize = 32;
/// Most unknown fields named in one answer.
const MAX_NAMED: usize = 20;

/// Message shapes by full name (`.toolhost.admin.v1.Snapshot`).
fn shapes() -> &'static HashMap<String, DescriptorProto> {
    static SHAPES: OnceLock<HashMap<String, DescriptorProto>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let bytes = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
        let mut out = HashMap::new();
        if let Ok(set) = FileDescriptorSet::decode(&bytes[..]) {
            for f in set.file {
                let package = f.package.unwrap_or_default();
                for m in f.message_type {
                    add(&mut out, &format!(".{package}"), m);
                }
            }
        }
        out
    })
}

fn add(out: &mut HashMap<String, DescriptorProto>, scope: &str, m: DescriptorProto) {
    let name = format!("{scope}.{}", m.name());
    for nested in &m.nested_type {
        add(out, &name, nested.clone());
    }
    out.insert(name, m);
}

/// The fields of `bytes`, a message of type `full_name` (without the
/// leading dot), that its shape does not have, each as "field N of TYPE
/// at PATH", at most [`MAX_NAMED`] and then a count.
///
/// # Errors
/// Bytes that are not a protobuf message of any shape (a length past the
/// end, a wire type protobuf does not have), or an unknown type name.
pub fn unknown_fields(full_name: &str, bytes: &[u8]) -> Result<Vec<String>, String> {
    let name = format!(".{full_name}");
    if !shapes().contains_key(&name) {
        return Err(format!("no message {full_name} in toolhost's protocol"));
    }
    let mut found = Vec::new();
    walk(&name, bytes, "", 0, &mut found)?;
    if found.len() > MAX_NAMED {
        let more = found.len() - MAX_NAMED;
        found.truncate(MAX_NAMED);
        found.push(format!("and {more} more"));
    }
    Ok(found)
}

fn walk(
    message: &str,
    mut bytes: &[u8],
    path: &str,
    depth: usize,
    found: &mut Vec<String>,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("the message nests deeper than toolhost reads".into());
    }
    let Some(shape) = shapes().get(message) else {
        return Ok(());
    };
    let short = message.rsplit('.').next().unwrap_or(message);
    let mut index: HashMap<&str, usize> = HashMap::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (number, wire) = (key >> 3, key & 7);
        let field = shape
            .field
            .iter()
            .find(|f| u64::try_from(f.number()).ok() == Some(number));
        let value = take(&mut bytes, wire)?;
        let Some(field) = field else {
            if found.len() <= MAX_NAMED {
                found.push(format!(
                    "field {number} of {short}{}",
                    if path.is_empty() {
                        String::new()
                    } else {
                        format!(" at {path}")
                    }
                ));
            }
            continue;
        };
        if field.r#type() == Type::Message
            && wire == 2
            && let Some(inner) = value
        {
            let i = index.entry(field.name()).or_insert(0);
            let at = format!(
                "{path}{}{}[{i}]",
                if path.is_empty() { "" } else { "." },
                field.name()
            );
            *i += 1;
            walk(field.type_name(), inner, &at, depth + 1, found)?;
        }
    }
    Ok(())
}

fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes
            .split_first()
            .ok_or_else(|| "a field's number or length runs past the end".to_owned())?;
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a varint longer than ten bytes".into())
}

/// Skips one value of wire type `wire`; a length-delimited one is returned.
fn take<'a>(bytes: &mut &'a [u8], wire: u64) -> Result<Option<&'a [u8]>, String> {
    let n = match wire {
        0 => {
            varint(bytes)?;
            return Ok(None);
        }
        1 => 8,
        5 => 4,
        2 => usize::try_from(varint(bytes)?).map_err(|_| "a length too large".to_owned())?,
        _ => {
            return Err(format!(
                "wire type {wire}, which toolhost's protocol does not use"
            ));
        }
    };
    if n > bytes.len() {
        return Err("a field's length runs past the end".into());
    }
    let (value, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok((wire == 2).then_some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolhost::admin::v1 as pb;

    #[test]
    fn a_message_with_only_known_fields_has_none_unknown() {
        let s = pb::Snapshot {
            shards: Vec::new(),
            retiring: Vec::new(),
            generation: "g".into(),
            revision: 3,
            tools: vec![pb::ToolDescriptor {
                exposed_name: "kandev_x_y".into(),
                requires_approval: true,
                aliases: [("a".to_owned(), "b".to_owned())].into(),
                annotations: Some(pb::Annotations::default()),
                ..Default::default()
            }],
            epoch: 1,
        };
        assert_eq!(
            unknown_fields("toolhost.admin.v1.Snapshot", &s.encode_to_vec()),
            Ok(vec![])
        );
    }

    #[test]
    fn an_unknown_field_is_named_by_number_and_place() {
        let tool = pb::ToolDescriptor {
            exposed_name: "kandev_x_y".into(),
            ..Default::default()
        };
        let mut tool_bytes = tool.encode_to_vec();
        // Field 99, varint 1: what a newer backend (or a typo) would send.
        tool_bytes.extend([0x98, 0x06, 0x01]);
        let mut snapshot = pb::Snapshot {
            shards: Vec::new(),
            retiring: Vec::new(),
            generation: "g".into(),
            ..Default::default()
        }
        .encode_to_vec();
        snapshot.push(0x1a); // field 3 (tools), length-delimited
        snapshot.push(u8::try_from(tool_bytes.len()).unwrap_or(0));
        snapshot.extend(&tool_bytes);
        snapshot.extend([0xa0, 0x06, 0x07]); // field 100 at the top
        let found = unknown_fields("toolhost.admin.v1.Snapshot", &snapshot).unwrap_or_default();
        assert_eq!(
            found,
            [
                "field 99 of ToolDescriptor at tools[0]",
                "field 100 of Snapshot"
            ]
        );
    }

    #[test]
    fn bytes_that_lie_about_their_length_are_refused() {
        assert!(unknown_fields("toolhost.admin.v1.Snapshot", &[0x1a, 0xff, 0x01]).is_err());
        assert!(
            unknown_fields("toolhost.admin.v1.Snapshot", &[0x0b]).is_err(),
            "groups"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_answered_without_a_panic(bytes in proptest::collection::vec(0u8..=255, 0..256)) {
            let _ = unknown_fields("toolhost.admin.v1.Snapshot", &bytes);
        }
    }
}
