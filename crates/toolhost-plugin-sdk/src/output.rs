//! What a handler answers: content blocks, structured content, or an error
//! for the model.

use serde_json::{Map, Value};
use toolhost_proto::plugin_v2 as wire;

/// Who a block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// One content block of a result. Build it with [`Content::text`],
/// [`Content::image`], [`Content::audio`], [`Content::link`],
/// [`Content::resource_text`] or [`Content::resource_blob`]; annotate it with
/// [`Content::for_audience`] and [`Content::with_priority`].
///
/// Binary data stays raw bytes: toolhost base64-encodes it for MCP.
/// toolhost checks every block (MIME types against the kind, URIs parsed)
/// and refuses a result that breaks a rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Content(pub(crate) wire::Content);

impl Content {
    fn of(block: wire::content::Block) -> Self {
        Self(wire::Content {
            block: Some(block),
            annotations: None,
        })
    }

    /// Text for the model.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(wire::content::Block::Text(wire::Text { text: text.into() }))
    }

    /// An image: raw bytes and an `image/*` MIME type.
    #[must_use]
    pub fn image(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Self::of(wire::content::Block::Image(wire::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// Audio: raw bytes and an `audio/*` MIME type.
    #[must_use]
    pub fn audio(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        Self::of(wire::content::Block::Audio(wire::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// A link to a resource the client may fetch: an absolute URI and a
    /// name. Add details with [`Content::with_mime_type`],
    /// [`Content::with_description`], [`Content::with_title`] and
    /// [`Content::with_size`].
    #[must_use]
    pub fn link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self::of(wire::content::Block::ResourceLink(wire::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            ..wire::ResourceLink::default()
        }))
    }

    /// A text resource carried inline, such as a Markdown export.
    #[must_use]
    pub fn resource_text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::of(wire::content::Block::Resource(wire::EmbeddedResource {
            uri: uri.into(),
            mime_type: mime_type.into(),
            contents: Some(wire::embedded_resource::Contents::Text(text.into())),
        }))
    }

    /// A binary resource carried inline.
    #[must_use]
    pub fn resource_blob(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        data: impl Into<Vec<u8>>,
    ) -> Self {
        Self::of(wire::content::Block::Resource(wire::EmbeddedResource {
            uri: uri.into(),
            mime_type: mime_type.into(),
            contents: Some(wire::embedded_resource::Contents::Blob(data.into())),
        }))
    }

    fn link_mut(&mut self) -> Option<&mut wire::ResourceLink> {
        match &mut self.0.block {
            Some(wire::content::Block::ResourceLink(l)) => Some(l),
            _ => None,
        }
    }

    /// A link's MIME type (ignored on other blocks).
    #[must_use]
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        if let Some(l) = self.link_mut() {
            l.mime_type = mime_type.into();
        }
        self
    }

    /// A link's description (ignored on other blocks).
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        if let Some(l) = self.link_mut() {
            l.description = description.into();
        }
        self
    }

    /// A link's display title (ignored on other blocks).
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        if let Some(l) = self.link_mut() {
            l.title = title.into();
        }
        self
    }

    /// A link's size in bytes (ignored on other blocks).
    #[must_use]
    pub fn with_size(mut self, size: u64) -> Self {
        if let Some(l) = self.link_mut() {
            l.size = Some(size);
        }
        self
    }

    /// Who the block is for.
    #[must_use]
    pub fn for_audience(mut self, audience: &[Audience]) -> Self {
        let a = self.0.annotations.get_or_insert_with(Default::default);
        a.audience = audience
            .iter()
            .map(|r| match r {
                Audience::User => wire::annotations::Role::User.into(),
                Audience::Assistant => wire::annotations::Role::Assistant.into(),
            })
            .collect();
        self
    }

    /// How much the block matters, from 0 to 1.
    #[must_use]
    pub fn with_priority(mut self, priority: f64) -> Self {
        self.0
            .annotations
            .get_or_insert_with(Default::default)
            .priority = Some(priority);
        self
    }

    /// The text, for a text block.
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        match &self.0.block {
            Some(wire::content::Block::Text(t)) => Some(&t.text),
            _ => None,
        }
    }

    /// How a protocol-1 host, which carries only text, sees this block.
    fn as_v1_text(&self) -> String {
        use wire::content::Block as B;
        match &self.0.block {
            Some(B::Text(t)) => t.text.clone(),
            Some(B::Image(i)) => format!("[image {}, {} bytes]", i.mime_type, i.data.len()),
            Some(B::Audio(a)) => format!("[audio {}, {} bytes]", a.mime_type, a.data.len()),
            Some(B::ResourceLink(l)) => format!("[resource {} ({})]", l.name, l.uri),
            Some(B::Resource(r)) => match &r.contents {
                Some(wire::embedded_resource::Contents::Text(t)) => t.clone(),
                _ => format!("[resource {}]", r.uri),
            },
            None => String::new(),
        }
    }
}

/// A handler's successful answer: content blocks and, optionally,
/// structured content checked against the tool's output schema.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// The content blocks, in order.
    pub content: Vec<Content>,
    /// Machine-readable result; checked against the declared output schema.
    pub structured: Option<Map<String, Value>>,
    /// The tool ran and failed in a way the model should see.
    pub is_error: bool,
}

impl ToolOutput {
    /// A text result.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        Self::from(Content::text(text))
    }

    /// A structured result; the text is its JSON, for clients that only
    /// read text.
    #[must_use]
    pub fn structured(value: Map<String, Value>) -> Self {
        let text = serde_json::to_string(&value).unwrap_or_default();
        Self {
            content: vec![Content::text(text)],
            structured: Some(value),
            is_error: false,
        }
    }

    /// A result of these blocks.
    #[must_use]
    pub fn blocks(content: impl IntoIterator<Item = Content>) -> Self {
        Self {
            content: content.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Replaces the text blocks with one text of your own (other blocks
    /// stay).
    #[must_use]
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.content.retain(|c| c.as_text().is_none());
        self.content.insert(0, Content::text(text));
        self
    }

    /// Adds a block at the end.
    #[must_use]
    pub fn with(mut self, block: Content) -> Self {
        self.content.push(block);
        self
    }

    /// Adds structured content.
    #[must_use]
    pub fn with_structured(mut self, value: Map<String, Value>) -> Self {
        self.structured = Some(value);
        self
    }

    /// The text a protocol-1 host receives: the text blocks joined, other
    /// blocks described in one line each.
    #[must_use]
    pub fn v1_text(&self) -> String {
        let parts: Vec<String> = self.content.iter().map(Content::as_v1_text).collect();
        parts.join("\n")
    }

    pub(crate) fn into_wire(self) -> wire::ToolResult {
        wire::ToolResult {
            content: self.content.into_iter().map(|c| c.0).collect(),
            structured_content: self
                .structured
                .as_ref()
                .map(toolhost_proto::json::struct_from_json),
            is_error: self.is_error,
        }
    }
}

impl From<Content> for ToolOutput {
    fn from(c: Content) -> Self {
        Self::blocks([c])
    }
}

/// A handler's failure: becomes an `is_error` result whose text the model
/// reads. Write it for the model: what went wrong and what to try instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The text for the model.
    pub message: String,
}

impl ToolError {
    /// An error with this text.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self::new(format!("I/O error: {e}"))
    }
}

impl From<crate::call::AskError> for ToolError {
    fn from(e: crate::call::AskError) -> Self {
        Self::new(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_the_blocks_they_name() {
        let out = ToolOutput::text("hi")
            .with(Content::image(vec![1, 2], "image/png").for_audience(&[Audience::User]))
            .with(
                Content::link("https://x.test/a", "a")
                    .with_mime_type("text/plain")
                    .with_size(3),
            )
            .with(
                Content::resource_text("file:///n.md", "text/markdown", "# n").with_priority(0.9),
            );
        assert_eq!(out.content.len(), 4);
        assert_eq!(
            out.v1_text(),
            "hi\n[image image/png, 2 bytes]\n[resource a (https://x.test/a)]\n# n"
        );
        let w = out.into_wire();
        assert_eq!(
            w.content[1]
                .annotations
                .as_ref()
                .map(|a| a.audience.clone()),
            Some(vec![1])
        );
        match &w.content[2].block {
            Some(wire::content::Block::ResourceLink(l)) => {
                assert_eq!(l.mime_type, "text/plain");
                assert_eq!(l.size, Some(3));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn with_text_replaces_only_text() {
        let out = ToolOutput::structured(Map::new())
            .with(Content::image(vec![1], "image/png"))
            .with_text("done");
        assert_eq!(out.content[0].as_text(), Some("done"));
        assert_eq!(out.content.len(), 2);
    }
}
