//! Which `$ref`s resolve inside the schema document, and where to.
//!
//! A schema is never fetched, so a reference must resolve within the same
//! document. "Within" is not the same as "starts with `#`": a reference is
//! resolved against the base URI of the resource it sits in (set by the
//! nearest enclosing `$id`), and it is local when the URI it resolves to,
//! without its fragment, is one of the document's own resources (the root,
//! or a subschema with an `$id` of its own). So `urn:uuid:...#/$defs/x`
//! under a root `"$id": "urn:uuid:..."` is local, and so is `node` next to
//! an embedded `"$id": "http://localhost:1234/node"`. Only a reference that
//! would need fetching is refused.

use serde_json::Value;
use std::collections::HashMap;
use url::Url;

/// The base URI of a schema without an `$id` (the same one the validator
/// uses): relative references resolve under it, and nothing there exists.
const DEFAULT_BASE: &str = "json-schema:///";

/// The resources of one schema document, and every reference in it.
pub(crate) struct Index<'a> {
    /// Resource URI (no fragment) -> the resource's schema.
    resources: HashMap<String, &'a Value>,
    /// (resource URI, anchor name) -> the subschema with that `$anchor`.
    anchors: HashMap<(String, String), &'a Value>,
    /// Every reference: as written, and resolved.
    refs: Vec<(String, Option<Url>)>,
    /// The root resource's base URI.
    root_base: Option<Url>,
}

fn without_fragment(u: &Url) -> String {
    let mut u = u.clone();
    u.set_fragment(None);
    u.to_string()
}

/// `$id` (and draft 4's `id`) of a schema object, when it names a resource
/// rather than being a property called `id`.
fn resource_id(obj: &serde_json::Map<String, Value>) -> Option<&str> {
    obj.get("$id")
        .or_else(|| obj.get("id"))
        .and_then(Value::as_str)
        .filter(|id| !id.starts_with('#'))
}

impl<'a> Index<'a> {
    pub(crate) fn of(schema: &'a Value) -> Self {
        let mut index = Self {
            resources: HashMap::new(),
            anchors: HashMap::new(),
            refs: Vec::new(),
            root_base: None,
        };
        let Ok(default) = Url::parse(DEFAULT_BASE) else {
            return index;
        };
        let mut stack = vec![(schema, default, true)];
        while let Some((node, base, is_root)) = stack.pop() {
            match node {
                Value::Object(obj) => {
                    let mut base = base;
                    if let Some(id) = resource_id(obj)
                        && let Ok(resolved) = base.join(id)
                    {
                        base = resolved;
                        index.resources.insert(without_fragment(&base), node);
                    } else if is_root {
                        index.resources.insert(without_fragment(&base), node);
                    }
                    if is_root {
                        index.root_base = Some(base.clone());
                    }
                    if let Some(anchor) = obj.get("$anchor").and_then(Value::as_str) {
                        index
                            .anchors
                            .insert((without_fragment(&base), anchor.to_owned()), node);
                    }
                    for (k, v) in obj {
                        if matches!(k.as_str(), "$ref" | "$dynamicRef" | "$recursiveRef")
                            && let Some(r) = v.as_str()
                        {
                            index.refs.push((r.to_owned(), base.join(r).ok()));
                        }
                        stack.push((v, base.clone(), false));
                    }
                }
                Value::Array(items) => {
                    stack.extend(items.iter().map(|v| (v, base.clone(), false)));
                }
                _ => {}
            }
        }
        index
    }

    /// References that would need fetching, as written.
    pub(crate) fn remote(&self) -> Vec<String> {
        self.refs
            .iter()
            .filter(|(_, resolved)| {
                resolved
                    .as_ref()
                    .is_none_or(|u| !self.resources.contains_key(&without_fragment(u)))
            })
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// The subschema `reference` points to, resolved against `base` (the
    /// root's when `None`), if it is in this document.
    pub(crate) fn target(&self, reference: &str, base: Option<&Url>) -> Option<&'a Value> {
        let resolved = base.or(self.root_base.as_ref())?.join(reference).ok()?;
        let resource = self.resources.get(&without_fragment(&resolved))?;
        match resolved.fragment() {
            None | Some("") => Some(resource),
            Some(f) if f.starts_with('/') => {
                let pointer = percent_decode(f);
                resource.pointer(&pointer)
            }
            Some(anchor) => self
                .anchors
                .get(&(without_fragment(&resolved), percent_decode(anchor)))
                .copied(),
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn id_based_references_inside_the_document_are_local() {
        let s = json!({
            "$id": "urn:uuid:deadbeef-1234-0000-0000-4321feedbeef",
            "type": "object",
            "properties": {
                "x": { "$ref": "urn:uuid:deadbeef-1234-0000-0000-4321feedbeef#/$defs/pos" },
                "y": { "$ref": "#/$defs/pos" },
                "z": { "$ref": "#named" }
            },
            "$defs": { "pos": { "type": "integer", "minimum": 0 }, "n": { "$anchor": "named" } }
        });
        let i = Index::of(&s);
        assert!(i.remote().is_empty(), "{:?}", i.remote());
        assert_eq!(
            i.target(
                "urn:uuid:deadbeef-1234-0000-0000-4321feedbeef#/$defs/pos",
                None
            ),
            s.pointer("/$defs/pos")
        );
        assert_eq!(i.target("#named", None), s.pointer("/$defs/n"));
    }

    #[test]
    fn an_embedded_resource_resolves_relative_references() {
        let s = json!({
            "$id": "http://localhost:1234/tree",
            "type": "object",
            "properties": { "nodes": { "type": "array", "items": { "$ref": "node" } } },
            "$defs": { "node": { "$id": "http://localhost:1234/node", "type": "object" } }
        });
        assert!(Index::of(&s).remote().is_empty());
    }

    #[test]
    fn references_that_need_fetching_are_remote() {
        for r in [
            "https://example.com/a.json",
            "other.json#/x",
            "http://localhost:1234/tree2#/x",
        ] {
            let s = json!({
                "$id": "http://localhost:1234/tree",
                "type": "object",
                "properties": { "a": { "$ref": r } }
            });
            assert_eq!(Index::of(&s).remote(), vec![r.to_owned()], "{r}");
        }
        let s = json!({ "type": "object", "properties": { "a": { "$ref": "other.json" } } });
        assert_eq!(Index::of(&s).remote(), vec!["other.json".to_owned()]);
    }
}
