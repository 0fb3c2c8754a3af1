//! Content blocks: what a result is made of, and the rules a plugin's
//! blocks must keep before any of them reaches a client.
//!
//! A protocol-1 answer is one text block. A protocol-2 answer is a list of
//! text, image, audio, resource-link and embedded-resource blocks; each is
//! checked here ([`blocks_from_wire`]): MIME types against the block's
//! kind, URIs parsed, annotations in range. A block that breaks a rule
//! fails the whole result as `plugin_error`, and the error names the block
//! and the rule, never the content. Bytes stay bytes: base64 is the MCP
//! layer's job, but the size counted is the size the client will receive.

use toolhost_proto::plugin_v2 as wire;

/// One content block of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// What it carries.
    pub kind: BlockKind,
    /// Who it is for and how much it matters, if the plugin said.
    pub annotations: Option<Annotations>,
}

/// The five kinds of MCP content.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockKind {
    /// Text for the model.
    Text(String),
    /// An image: raw bytes and an `image/*` MIME type.
    Image {
        /// The bytes.
        data: Vec<u8>,
        /// `image/...`.
        mime_type: String,
    },
    /// Audio: raw bytes and an `audio/*` MIME type.
    Audio {
        /// The bytes.
        data: Vec<u8>,
        /// `audio/...`.
        mime_type: String,
    },
    /// A pointer to a resource the client may fetch.
    ResourceLink {
        /// An absolute URI.
        uri: String,
        /// Its programmatic name.
        name: String,
        /// A display title.
        title: Option<String>,
        /// What it is.
        description: Option<String>,
        /// Its MIME type, if known.
        mime_type: Option<String>,
        /// Its size in bytes, if known.
        size: Option<u64>,
    },
    /// A resource carried inline.
    Resource {
        /// An absolute URI naming it.
        uri: String,
        /// Its MIME type, if known.
        mime_type: Option<String>,
        /// Text or bytes.
        contents: ResourceContents,
    },
}

/// What an embedded resource holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceContents {
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// Who a block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// MCP annotations of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotations {
    /// Who it is for (empty: unspecified).
    pub audience: Vec<Role>,
    /// From 0 to 1.
    pub priority: Option<f64>,
}

impl Block {
    /// A text block without annotations.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            kind: BlockKind::Text(text.into()),
            annotations: None,
        }
    }

    /// The kind's MCP name, for errors and rendering.
    #[must_use]
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            BlockKind::Text(_) => "text",
            BlockKind::Image { .. } => "image",
            BlockKind::Audio { .. } => "audio",
            BlockKind::ResourceLink { .. } => "resource_link",
            BlockKind::Resource { .. } => "resource",
        }
    }

    /// The bytes this block costs against `max_result_bytes`: what the
    /// client receives (binary as base64), plus a fixed charge per block so
    /// that many empty blocks are not free.
    #[must_use]
    pub fn size(&self) -> usize {
        const PER_BLOCK: usize = 32;
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        PER_BLOCK
            + match &self.kind {
                BlockKind::Text(t) => t.len(),
                BlockKind::Image { data, mime_type } | BlockKind::Audio { data, mime_type } => {
                    base64_len(data.len()) + mime_type.len()
                }
                BlockKind::ResourceLink {
                    uri,
                    name,
                    title,
                    description,
                    mime_type,
                    ..
                } => uri.len() + name.len() + opt(title) + opt(description) + opt(mime_type),
                BlockKind::Resource {
                    uri,
                    mime_type,
                    contents,
                } => {
                    uri.len()
                        + opt(mime_type)
                        + match contents {
                            ResourceContents::Text(t) => t.len(),
                            ResourceContents::Blob(b) => base64_len(b.len()),
                        }
                }
            }
    }
}

/// The length of `n` bytes in padded base64.
#[must_use]
pub fn base64_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

/// A block that broke a rule: which one (counting from 0) and the rule.
/// Names no content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("content block {index} ({kind}): {rule}")]
pub struct ContentRule {
    /// The block's position.
    pub index: usize,
    /// Its kind.
    pub kind: &'static str,
    /// The rule it broke.
    pub rule: &'static str,
}

/// The longest URI, name, title or MIME type accepted.
const MAX_FIELD: usize = 8 * 1024;
/// The most blocks one result may hold.
pub const MAX_BLOCKS: usize = 1024;

/// Checks a plugin's blocks and takes them over.
pub fn blocks_from_wire(content: Vec<wire::Content>) -> Result<Vec<Block>, ContentRule> {
    if content.len() > MAX_BLOCKS {
        return Err(ContentRule {
            index: MAX_BLOCKS,
            kind: "any",
            rule: "a result may hold at most 1024 content blocks",
        });
    }
    content
        .into_iter()
        .enumerate()
        .map(|(index, c)| block_from_wire(index, c))
        .collect()
}

fn block_from_wire(index: usize, c: wire::Content) -> Result<Block, ContentRule> {
    use wire::content::Block as W;
    let kind_of = |b: &Option<W>| match b {
        None => "none",
        Some(W::Text(_)) => "text",
        Some(W::Image(_)) => "image",
        Some(W::Audio(_)) => "audio",
        Some(W::ResourceLink(_)) => "resource_link",
        Some(W::Resource(_)) => "resource",
    };
    let kind = kind_of(&c.block);
    let broke = |rule: &'static str| ContentRule { index, kind, rule };
    let annotations = c.annotations.map(annotations).transpose().map_err(broke)?;
    let kind = match c.block {
        None => return Err(broke("the block is empty (no kind set)")),
        Some(W::Text(t)) => BlockKind::Text(t.text),
        Some(W::Image(i)) => {
            media(&i.data, &i.mime_type, "image").map_err(broke)?;
            BlockKind::Image {
                data: i.data,
                mime_type: i.mime_type,
            }
        }
        Some(W::Audio(a)) => {
            media(&a.data, &a.mime_type, "audio").map_err(broke)?;
            BlockKind::Audio {
                data: a.data,
                mime_type: a.mime_type,
            }
        }
        Some(W::ResourceLink(l)) => {
            uri(&l.uri).map_err(broke)?;
            if l.name.trim().is_empty() {
                return Err(broke("a resource link needs a name"));
            }
            if l.name.len() > MAX_FIELD || l.title.len() > MAX_FIELD {
                return Err(broke("the name or title is longer than 8 KiB"));
            }
            optional_mime(&l.mime_type).map_err(broke)?;
            BlockKind::ResourceLink {
                uri: l.uri,
                name: l.name,
                title: non_empty(l.title),
                description: non_empty(l.description),
                mime_type: non_empty(l.mime_type),
                size: l.size,
            }
        }
        Some(W::Resource(r)) => {
            uri(&r.uri).map_err(broke)?;
            optional_mime(&r.mime_type).map_err(broke)?;
            let contents = match r.contents {
                Some(wire::embedded_resource::Contents::Text(t)) => ResourceContents::Text(t),
                Some(wire::embedded_resource::Contents::Blob(b)) => ResourceContents::Blob(b),
                None => return Err(broke("an embedded resource needs text or a blob")),
            };
            BlockKind::Resource {
                uri: r.uri,
                mime_type: non_empty(r.mime_type),
                contents,
            }
        }
    };
    Ok(Block { kind, annotations })
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn annotations(a: wire::Annotations) -> Result<Annotations, &'static str> {
    let audience = a
        .audience
        .iter()
        .map(|r| match wire::annotations::Role::try_from(*r) {
            Ok(wire::annotations::Role::User) => Ok(Role::User),
            Ok(wire::annotations::Role::Assistant) => Ok(Role::Assistant),
            _ => Err("an audience role must be USER or ASSISTANT"),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = a.priority
        && !(0.0..=1.0).contains(&p)
    {
        return Err("priority must be a number from 0 to 1");
    }
    Ok(Annotations {
        audience,
        priority: a.priority,
    })
}

fn media(data: &[u8], mime: &str, top: &str) -> Result<(), &'static str> {
    if data.is_empty() {
        return Err("the data is empty");
    }
    let Some(essence) = mime_essence(mime) else {
        return Err("the MIME type is not a valid type/subtype");
    };
    let wanted = essence
        .split_once('/')
        .is_some_and(|(t, _)| t.eq_ignore_ascii_case(top));
    match (wanted, top) {
        (true, _) => Ok(()),
        (false, "image") => Err("an image's MIME type must be image/*"),
        (false, _) => Err("an audio block's MIME type must be audio/*"),
    }
}

fn optional_mime(mime: &str) -> Result<(), &'static str> {
    if mime.is_empty() || mime_essence(mime).is_some() {
        Ok(())
    } else {
        Err("the MIME type is not a valid type/subtype")
    }
}

/// The `type/subtype` of a MIME type with optional `; parameters`, if it
/// has RFC 6838's shape; parameters may hold only printable ASCII.
fn mime_essence(mime: &str) -> Option<&str> {
    if mime.len() > 255 || !mime.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let essence = mime.split(';').next().unwrap_or_default().trim();
    let (t, s) = essence.split_once('/')?;
    let restricted = |n: &str| {
        let mut bytes = n.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
            && n.len() <= 127
            && bytes.all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    (restricted(t) && restricted(s)).then_some(essence)
}

fn uri(u: &str) -> Result<(), &'static str> {
    if u.len() > MAX_FIELD {
        return Err("the URI is longer than 8 KiB");
    }
    if u.chars().any(char::is_control) {
        return Err("the URI contains control characters");
    }
    url::Url::parse(u)
        .map(|_| ())
        .map_err(|_| "the URI is not an absolute URI")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wire::content::Block as W;

    fn image(mime: &str, data: &[u8]) -> wire::Content {
        wire::Content {
            block: Some(W::Image(wire::Image {
                data: data.to_vec(),
                mime_type: mime.into(),
            })),
            annotations: None,
        }
    }

    #[test]
    fn mime_types_must_match_the_kind() {
        assert!(blocks_from_wire(vec![image("image/png", b"x")]).is_ok());
        assert!(blocks_from_wire(vec![image("IMAGE/svg+xml; charset=utf-8", b"x")]).is_ok());
        let e = blocks_from_wire(vec![image("audio/wav", b"x")]).unwrap_err();
        assert_eq!(e.rule, "an image's MIME type must be image/*");
        assert_eq!(e.index, 0);
        for bad in ["png", "image/", "/png", "image/p ng", "image/png\n", ""] {
            assert!(blocks_from_wire(vec![image(bad, b"x")]).is_err(), "{bad:?}");
        }
        assert!(blocks_from_wire(vec![image("image/png", b"")]).is_err());
    }

    #[test]
    fn errors_name_the_rule_and_never_the_content() {
        let secret = "SECRET-URI-VALUE";
        let c = wire::Content {
            block: Some(W::ResourceLink(wire::ResourceLink {
                uri: secret.into(),
                name: "n".into(),
                ..Default::default()
            })),
            annotations: None,
        };
        let e = blocks_from_wire(vec![wire::Content::default(), c]).unwrap_err();
        assert_eq!(e.index, 0, "the first bad block is named");
        let e = blocks_from_wire(vec![
            wire::Content {
                block: Some(W::Text(wire::Text { text: "t".into() })),
                annotations: None,
            },
            wire::Content {
                block: Some(W::ResourceLink(wire::ResourceLink {
                    uri: secret.into(),
                    name: "n".into(),
                    ..Default::default()
                })),
                annotations: None,
            },
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "content block 1 (resource_link): the URI is not an absolute URI"
        );
        assert!(!e.to_string().contains(secret));
    }

    #[test]
    fn resources_need_contents_and_annotations_stay_in_range() {
        let r = wire::Content {
            block: Some(W::Resource(wire::EmbeddedResource {
                uri: "file:///notes.md".into(),
                mime_type: "text/markdown".into(),
                contents: None,
            })),
            annotations: None,
        };
        assert!(blocks_from_wire(vec![r]).is_err());
        let mut t = wire::Content {
            block: Some(W::Text(wire::Text { text: "t".into() })),
            annotations: Some(wire::Annotations {
                audience: vec![1, 2],
                priority: Some(1.5),
            }),
        };
        assert!(blocks_from_wire(vec![t.clone()]).is_err());
        t.annotations = Some(wire::Annotations {
            audience: vec![0],
            priority: Some(0.5),
        });
        assert!(blocks_from_wire(vec![t.clone()]).is_err());
        t.annotations = Some(wire::Annotations {
            audience: vec![1, 2],
            priority: Some(0.5),
        });
        let b = blocks_from_wire(vec![t]).unwrap();
        assert_eq!(
            b[0].annotations,
            Some(Annotations {
                audience: vec![Role::User, Role::Assistant],
                priority: Some(0.5)
            })
        );
    }

    #[test]
    fn a_result_holds_at_most_max_blocks() {
        let text = wire::Content {
            block: Some(W::Text(wire::Text {
                text: String::new(),
            })),
            annotations: None,
        };
        assert!(blocks_from_wire(vec![text.clone(); MAX_BLOCKS]).is_ok());
        let e = blocks_from_wire(vec![text; MAX_BLOCKS + 1]).unwrap_err();
        assert!(e.rule.contains("at most 1024"));
    }

    #[test]
    fn sizes_count_base64() {
        assert_eq!(base64_len(0), 0);
        assert_eq!(base64_len(1), 4);
        assert_eq!(base64_len(3), 4);
        assert_eq!(base64_len(4), 8);
        let b = blocks_from_wire(vec![image("image/png", &[0; 300])]).unwrap();
        assert_eq!(b[0].size(), 32 + 400 + "image/png".len());
    }

    proptest! {
        #[test]
        fn checking_is_total(mime in ".{0,40}", uri in ".{0,60}", data in proptest::collection::vec(any::<u8>(), 0..8)) {
            let blocks = vec![
                image(&mime, &data),
                wire::Content {
                    block: Some(W::Resource(wire::EmbeddedResource {
                        uri: uri.clone(),
                        mime_type: mime.clone(),
                        contents: Some(wire::embedded_resource::Contents::Blob(data.clone())),
                    })),
                    annotations: None,
                },
            ];
            if let Err(e) = blocks_from_wire(blocks) {
                let text = e.to_string();
                prop_assert!(text.len() < 120);
            }
        }
    }
}
