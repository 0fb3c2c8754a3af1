//! The request the daemon sends a plugin (`AgentToolRequest`), encoded
//! straight from the checked JSON arguments and the caller's binding.
//!
//! Building the `prost` message first copies every string of the request
//! (the invocation id, the tool's name, each argument's key and string
//! value, the binding's ids) and allocates the `Struct`'s map nodes, only
//! for the encoder to copy them all once more into the frame. A call's
//! request is encoded once and never read back, so [`ToolRequestRef`]
//! borrows what the call already holds and writes the same protobuf: its
//! bytes decode to exactly the message [`ToolRequestRef::to_message`]
//! builds (a property test below holds the two together, byte for byte).
//!
//! The JSON-to-protobuf rules are [`crate::json`]'s: one number type (a
//! double), `null` as `NULL_VALUE`, objects as `Struct`, arrays as
//! `ListValue`.

use crate::generated::kandev::plugin::v1::{AgentToolContext, AgentToolRequest, Credential};
use crate::json::struct_from_json;
use prost::Message;
use prost::bytes::BufMut;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use serde_json::{Map, Value as Json};

/// An `AgentToolRequest` that borrows its parts.
#[derive(Debug, Clone, Copy)]
pub struct ToolRequestRef<'a> {
    pub invocation_id: &'a str,
    /// The tool's local name, as the plugin declared it.
    pub name: &'a str,
    /// The checked arguments.
    pub arguments: &'a Map<String, Json>,
    pub context: ContextRef<'a>,
}

/// An `AgentToolContext` that borrows its parts.
#[derive(Debug, Clone, Copy)]
pub struct ContextRef<'a> {
    pub task_id: &'a str,
    pub session_id: &'a str,
    pub workspace_id: &'a str,
    pub surface: &'a str,
    pub credentials: &'a [Credential],
}

impl ToolRequestRef<'_> {
    /// The length of the encoded message (without gRPC's frame).
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        string_len(1, self.invocation_id)
            + string_len(2, self.name)
            + message_len(3, struct_len(self.arguments))
            + message_len(4, self.context.encoded_len())
    }

    /// Writes the message: exactly [`Self::encoded_len`] bytes, the same
    /// bytes `prost` writes for [`Self::to_message`].
    pub fn encode(&self, buf: &mut impl BufMut) {
        put_string(1, self.invocation_id, buf);
        put_string(2, self.name, buf);
        put_message_head(3, struct_len(self.arguments), buf);
        put_struct(self.arguments, buf);
        put_message_head(4, self.context.encoded_len(), buf);
        self.context.encode(buf);
    }

    /// The owned message, for the paths that hand a request on as one
    /// (protocol 2's `Start`, tests' fakes of a plugin).
    #[must_use]
    pub fn to_message(&self) -> AgentToolRequest {
        let c = &self.context;
        AgentToolRequest {
            invocation_id: self.invocation_id.to_owned(),
            name: self.name.to_owned(),
            arguments: Some(struct_from_json(self.arguments)),
            context: Some(AgentToolContext {
                task_id: c.task_id.to_owned(),
                session_id: c.session_id.to_owned(),
                workspace_id: c.workspace_id.to_owned(),
                surface: c.surface.to_owned(),
                credentials: c.credentials.to_vec(),
            }),
        }
    }
}

impl ContextRef<'_> {
    fn encoded_len(&self) -> usize {
        string_len(1, self.task_id)
            + string_len(2, self.session_id)
            + string_len(3, self.workspace_id)
            + string_len(4, self.surface)
            + self
                .credentials
                .iter()
                .map(|c| message_len(5, c.encoded_len()))
                .sum::<usize>()
    }

    fn encode(&self, buf: &mut impl BufMut) {
        put_string(1, self.task_id, buf);
        put_string(2, self.session_id, buf);
        put_string(3, self.workspace_id, buf);
        put_string(4, self.surface, buf);
        for c in self.credentials {
            prost::encoding::message::encode(5, c, buf);
        }
    }
}

// Field numbers of google.protobuf.Value's `kind`.
const NULL_VALUE: u32 = 1;
const NUMBER_VALUE: u32 = 2;
const STRING_VALUE: u32 = 3;
const BOOL_VALUE: u32 = 4;
const STRUCT_VALUE: u32 = 5;
const LIST_VALUE: u32 = 6;

/// A proto3 string field: absent when empty.
fn string_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        bytes_len(tag, s.len())
    }
}

/// A length-delimited field of `len` bytes, present whatever its length.
fn bytes_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn message_len(tag: u32, body: usize) -> usize {
    bytes_len(tag, body)
}

/// A `Struct`'s body: one map entry (field 1) per member, in the map's
/// order. A map entry leaves out an empty key, as `prost` does; its value
/// always has a kind, so it is always there.
fn struct_len(map: &Map<String, Json>) -> usize {
    map.iter()
        .map(|(k, v)| message_len(1, entry_len(k, value_len(v))))
        .sum()
}

fn entry_len(key: &str, value_len: usize) -> usize {
    string_len(1, key) + message_len(2, value_len)
}

/// A `Value`'s body: its one `kind`, written even when it is a default
/// (a oneof member always is).
fn value_len(v: &Json) -> usize {
    match v {
        Json::Null => key_len(NULL_VALUE) + 1,
        Json::Bool(_) => key_len(BOOL_VALUE) + 1,
        Json::Number(_) => key_len(NUMBER_VALUE) + 8,
        Json::String(s) => bytes_len(STRING_VALUE, s.len()),
        Json::Array(a) => message_len(LIST_VALUE, list_len(a)),
        Json::Object(o) => message_len(STRUCT_VALUE, struct_len(o)),
    }
}

/// A `ListValue`'s body: each value as field 1.
fn list_len(values: &[Json]) -> usize {
    values.iter().map(|v| message_len(1, value_len(v))).sum()
}

fn put_string(tag: u32, s: &str, buf: &mut impl BufMut) {
    if !s.is_empty() {
        put_message_head(tag, s.len(), buf);
        buf.put_slice(s.as_bytes());
    }
}

fn put_message_head(tag: u32, len: usize, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn put_struct(map: &Map<String, Json>, buf: &mut impl BufMut) {
    for (k, v) in map {
        let value = value_len(v);
        put_message_head(1, entry_len(k, value), buf);
        put_string(1, k, buf);
        put_message_head(2, value, buf);
        put_value(v, buf);
    }
}

fn put_value(v: &Json, buf: &mut impl BufMut) {
    match v {
        Json::Null => {
            encode_key(NULL_VALUE, WireType::Varint, buf);
            encode_varint(0, buf);
        }
        Json::Bool(b) => {
            encode_key(BOOL_VALUE, WireType::Varint, buf);
            encode_varint(u64::from(*b), buf);
        }
        Json::Number(n) => {
            encode_key(NUMBER_VALUE, WireType::SixtyFourBit, buf);
            // As `json::value_from_json`: every JSON number has an f64 form.
            buf.put_f64_le(n.as_f64().unwrap_or(0.0));
        }
        Json::String(s) => {
            put_message_head(STRING_VALUE, s.len(), buf);
            buf.put_slice(s.as_bytes());
        }
        Json::Array(a) => {
            put_message_head(LIST_VALUE, list_len(a), buf);
            for v in a {
                put_message_head(1, value_len(v), buf);
                put_value(v, buf);
            }
        }
        Json::Object(o) => {
            put_message_head(STRUCT_VALUE, struct_len(o), buf);
            put_struct(o, buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(r: &ToolRequestRef<'_>) -> Vec<u8> {
        let mut buf = Vec::with_capacity(r.encoded_len());
        r.encode(&mut buf);
        buf
    }

    fn arb_credential() -> impl Strategy<Value = Credential> {
        (".{0,20}", ".{0,40}", any::<u64>()).prop_map(|(audience, access_token, at)| Credential {
            audience,
            access_token,
            expires_at_unix_s: at,
        })
    }

    #[test]
    fn an_empty_request_still_carries_its_arguments_and_context() {
        let args = Map::new();
        let r = ToolRequestRef {
            invocation_id: "",
            name: "",
            arguments: &args,
            context: ContextRef {
                task_id: "",
                session_id: "",
                workspace_id: "",
                surface: "",
                credentials: &[],
            },
        };
        // `arguments` and `context` are set messages: present though empty.
        assert_eq!(encoded(&r), vec![0x1a, 0, 0x22, 0]);
        assert_eq!(encoded(&r), r.to_message().encode_to_vec());
    }

    proptest! {
        #[test]
        fn the_bytes_are_prosts_and_decode_to_the_message(
            args in prop::collection::btree_map(".{0,16}", crate::arbitrary::json(), 0..10),
            id in ".{0,40}",
            name in "[a-z_]{0,20}",
            ids in (".{0,10}", ".{0,10}", ".{0,10}", ".{0,10}"),
            credentials in prop::collection::vec(arb_credential(), 0..3),
        ) {
            let args: Map<String, Json> = args.into_iter().collect();
            let r = ToolRequestRef {
                invocation_id: &id,
                name: &name,
                arguments: &args,
                context: ContextRef {
                    task_id: &ids.0,
                    session_id: &ids.1,
                    workspace_id: &ids.2,
                    surface: &ids.3,
                    credentials: &credentials,
                },
            };
            let ours = encoded(&r);
            prop_assert_eq!(ours.len(), r.encoded_len());
            let message = r.to_message();
            prop_assert_eq!(&ours, &message.encode_to_vec());
            let back = AgentToolRequest::decode(ours.as_slice());
            prop_assert_eq!(back.ok(), Some(message));
        }
    }
}
