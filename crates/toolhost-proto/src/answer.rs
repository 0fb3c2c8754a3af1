//! A plugin's protocol-1 answer (`AgentToolResponse`), decoded straight
//! into the JSON the daemon answers with.
//!
//! Decoding with `prost` builds a `google.protobuf.Struct` (a map node per
//! few keys, a `Value` per entry) only for [`crate::json`] to walk it and
//! build the same tree again as `serde_json` maps. [`ToolAnswer::decode`]
//! reads the protobuf once and builds the JSON tree directly: each key and
//! string is allocated once, and each map once.
//!
//! It reads what `prost` reads, exactly: the same message for the same
//! bytes, and a refusal where `prost` refuses (a property test below holds
//! the two together over arbitrary messages, messages run together, and
//! arbitrary bytes). That includes protobuf's merge rules, which a plugin
//! (third-party code) may lean on or trip over: a field that appears twice
//! keeps the last scalar, and merges a message (`structured_content` sent
//! twice is one object with both's keys; a `list_value` sent twice is one
//! list); a map key sent twice keeps the last value; unknown fields are
//! skipped, groups included; a string that is not UTF-8 is refused.
//!
//! What this module must not do: trust a length (each is checked against
//! what is left), or recurse without bound. Nesting is limited as
//! `prost`'s is (a budget of 100 message levels, where a `Struct`, a map
//! entry and a `Value` each take one), so an answer nested too deep is
//! refused by both alike, and the stack stays small.

use crate::generated::kandev::plugin::v1::AgentToolResponse;
use crate::json::{json_from_struct_owned, number};
use serde_json::{Map, Value as Json};

/// The nesting budget `prost` starts a decode with.
const RECURSION_LIMIT: u32 = 100;

/// A protocol-1 answer with its structured content as JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolAnswer {
    /// Text shown to the model.
    pub text: String,
    /// The machine-readable result, when the plugin sent one (even an
    /// empty one).
    pub structured: Option<Map<String, Json>>,
    /// The tool ran and failed in a way the model should see.
    pub is_error: bool,
}

/// Why an answer's bytes are not an `AgentToolResponse`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AnswerError(&'static str);

type Read<T> = Result<T, AnswerError>;

impl From<AgentToolResponse> for ToolAnswer {
    fn from(r: AgentToolResponse) -> Self {
        Self {
            text: r.text,
            structured: r.structured_content.map(json_from_struct_owned),
            is_error: r.is_error,
        }
    }
}

impl ToolAnswer {
    /// Decodes an `AgentToolResponse` (without gRPC's frame).
    ///
    /// # Errors
    /// Bytes `prost` would not decode as one.
    pub fn decode(bytes: &[u8]) -> Read<Self> {
        let mut r = Reader { rest: bytes };
        let mut answer = Self::default();
        let budget = RECURSION_LIMIT;
        while !r.rest.is_empty() {
            let (field, wire) = r.key()?;
            match field {
                1 => answer.text = r.string(wire)?,
                2 => {
                    let mut body = r.message(wire, budget)?;
                    let map = answer.structured.get_or_insert_with(Map::new);
                    struct_body(&mut body, budget - 1, map)?;
                }
                3 => answer.is_error = r.varint_field(wire)? != 0,
                _ => r.skip(wire, field, budget)?,
            }
        }
        Ok(answer)
    }
}

// Wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const GROUP_START: u8 = 3;
const GROUP_END: u8 = 4;
const FIXED32: u8 = 5;

/// The fields of a `google.protobuf.Struct`, merged into `map`. `budget`
/// is what is left for messages inside it.
fn struct_body(r: &mut Reader<'_>, budget: u32, map: &mut Map<String, Json>) -> Read<()> {
    while !r.rest.is_empty() {
        let (field, wire) = r.key()?;
        if field == 1 {
            let mut entry = r.message(wire, budget)?;
            let (key, value) = map_entry(&mut entry, budget - 1)?;
            map.insert(key, value);
        } else {
            r.skip(wire, field, budget)?;
        }
    }
    Ok(())
}

/// One entry of `Struct.fields`: a missing key is `""`, a missing value
/// is `null`.
fn map_entry(r: &mut Reader<'_>, budget: u32) -> Read<(String, Json)> {
    let mut key = String::new();
    let mut value = Json::Null;
    while !r.rest.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => key = r.string(wire)?,
            2 => {
                let mut body = r.message(wire, budget)?;
                value_body(&mut body, budget - 1, &mut value)?;
            }
            _ => r.skip(wire, field, budget)?,
        }
    }
    Ok((key, value))
}

/// The fields of a `google.protobuf.Value`, merged into `value`: a scalar
/// replaces it; a `struct_value` merges into it if it is an object (which
/// only a `struct_value` makes), a `list_value` appends to it if it is a
/// list, and each replaces anything else.
fn value_body(r: &mut Reader<'_>, budget: u32, value: &mut Json) -> Read<()> {
    while !r.rest.is_empty() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                r.varint_field(wire)?;
                *value = Json::Null;
            }
            2 => {
                let bits = r.fixed64_field(wire)?;
                *value = number(f64::from_bits(bits));
            }
            3 => *value = Json::String(r.string(wire)?),
            4 => *value = Json::Bool(r.varint_field(wire)? != 0),
            5 => {
                let mut body = r.message(wire, budget)?;
                if !value.is_object() {
                    *value = Json::Object(Map::new());
                }
                if let Json::Object(map) = value {
                    struct_body(&mut body, budget - 1, map)?;
                }
            }
            6 => {
                let mut body = r.message(wire, budget)?;
                if !value.is_array() {
                    *value = Json::Array(Vec::new());
                }
                if let Json::Array(items) = value {
                    list_body(&mut body, budget - 1, items)?;
                }
            }
            _ => r.skip(wire, field, budget)?,
        }
    }
    Ok(())
}

/// The fields of a `google.protobuf.ListValue`, appended to `items`.
fn list_body(r: &mut Reader<'_>, budget: u32, items: &mut Vec<Json>) -> Read<()> {
    while !r.rest.is_empty() {
        let (field, wire) = r.key()?;
        if field == 1 {
            let mut body = r.message(wire, budget)?;
            let mut item = Json::Null;
            value_body(&mut body, budget - 1, &mut item)?;
            items.push(item);
        } else {
            r.skip(wire, field, budget)?;
        }
    }
    Ok(())
}

/// What is left of one message's bytes.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A base-128 varint of at most ten bytes whose value fits 64 bits.
    fn varint(&mut self) -> Read<u64> {
        let mut value: u64 = 0;
        for (i, &byte) in self.rest.iter().enumerate().take(10) {
            if i == 9 && byte > 1 {
                break;
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err(AnswerError("a varint that is not one"))
    }

    /// A field's key: its number (at least 1) and wire type.
    fn key(&mut self) -> Read<(u32, u8)> {
        let key =
            u32::try_from(self.varint()?).map_err(|_| AnswerError("a field key out of range"))?;
        let wire = u8::try_from(key & 7).unwrap_or(u8::MAX);
        if wire > FIXED32 {
            return Err(AnswerError("a wire type protobuf does not have"));
        }
        let field = key >> 3;
        if field == 0 {
            return Err(AnswerError("a field numbered 0"));
        }
        Ok((field, wire))
    }

    fn take(&mut self, n: u64) -> Read<&'a [u8]> {
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.rest.len())
            .ok_or(AnswerError("a length past the end of the answer"))?;
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn expect(wire: u8, want: u8) -> Read<()> {
        if wire == want {
            Ok(())
        } else {
            Err(AnswerError("a known field with the wrong wire type"))
        }
    }

    fn varint_field(&mut self, wire: u8) -> Read<u64> {
        Self::expect(wire, VARINT)?;
        self.varint()
    }

    fn fixed64_field(&mut self, wire: u8) -> Read<u64> {
        Self::expect(wire, FIXED64)?;
        let bytes = self.take(8)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(le))
    }

    fn string(&mut self, wire: u8) -> Read<String> {
        Self::expect(wire, LEN)?;
        let len = self.varint()?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| AnswerError("a string that is not UTF-8"))
    }

    /// A nested message's bytes, if the nesting budget allows one more
    /// level (`prost` checks before it reads the length).
    fn message(&mut self, wire: u8, budget: u32) -> Read<Reader<'a>> {
        Self::expect(wire, LEN)?;
        if budget == 0 {
            return Err(AnswerError("structured content nested too deep"));
        }
        let len = self.varint()?;
        Ok(Reader {
            rest: self.take(len)?,
        })
    }

    /// Skips an unknown field (a group with everything in it).
    fn skip(&mut self, wire: u8, field: u32, budget: u32) -> Read<()> {
        if budget == 0 {
            return Err(AnswerError("structured content nested too deep"));
        }
        match wire {
            VARINT => {
                self.varint()?;
            }
            FIXED64 => {
                self.take(8)?;
            }
            LEN => {
                let len = self.varint()?;
                self.take(len)?;
            }
            GROUP_START => loop {
                let (inner, inner_wire) = self.key()?;
                if inner_wire == GROUP_END {
                    if inner != field {
                        return Err(AnswerError("a group ended with another's number"));
                    }
                    break;
                }
                self.skip(inner_wire, inner, budget - 1)?;
            },
            GROUP_END => return Err(AnswerError("a group's end without its start")),
            _ => {
                self.take(4)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
