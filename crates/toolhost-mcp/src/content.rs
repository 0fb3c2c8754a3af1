//! Results in MCP's terms: the pipeline's checked blocks mapped one to
//! one, bytes base64-encoded here and nowhere else, and the whole result
//! ([`result_of`]) as every path answers it (a session's call, a plain
//! stateless one, a task's).

use base64::Engine as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    Annotations, AudioContent, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    ElicitationCapability, EmbeddedResource, FormElicitationCapability, ImageContent, Resource,
    ResourceContents, Role, TextContent,
};
use toolhost_pipeline::content::{self, Block, BlockKind};

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn annotations(a: content::Annotations) -> Annotations {
    let mut out = Annotations::default();
    if !a.audience.is_empty() {
        out.audience = Some(
            a.audience
                .into_iter()
                .map(|r| match r {
                    content::Role::User => Role::User,
                    content::Role::Assistant => Role::Assistant,
                })
                .collect(),
        );
    }
    // Checked to lie in 0..=1 already.
    #[allow(clippy::cast_possible_truncation)]
    {
        out.priority = a.priority.map(|p| p as f32);
    }
    out
}

/// One block as MCP content.
#[must_use]
pub fn to_mcp(block: Block) -> ContentBlock {
    let ann = block.annotations.map(annotations);
    match block.kind {
        BlockKind::Text(t) => {
            let mut c = TextContent::new(t);
            c.annotations = ann;
            ContentBlock::Text(c)
        }
        BlockKind::Image { data, mime_type } => {
            let mut c = ImageContent::new(b64(&data), mime_type);
            c.annotations = ann;
            ContentBlock::Image(c)
        }
        BlockKind::Audio { data, mime_type } => {
            let mut c = AudioContent::new(b64(&data), mime_type);
            c.annotations = ann;
            ContentBlock::Audio(c)
        }
        BlockKind::ResourceLink {
            uri,
            name,
            title,
            description,
            mime_type,
            size,
        } => {
            let mut r = Resource::new(uri, name);
            r.title = title;
            r.description = description;
            r.mime_type = mime_type;
            r.size = size;
            r.annotations = ann;
            ContentBlock::ResourceLink(r)
        }
        BlockKind::Resource {
            uri,
            mime_type,
            contents,
        } => {
            let resource = match contents {
                content::ResourceContents::Text(text) => ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    meta: None,
                },
                content::ResourceContents::Blob(b) => ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob: b64(&b),
                    meta: None,
                },
            };
            let mut c = EmbeddedResource::new(resource);
            c.annotations = ann;
            ContentBlock::Resource(c)
        }
    }
}

/// The pipeline's result in MCP's terms. A 2026-07-28 client that cannot
/// answer a question gets the protocol's missing-capability error instead
/// of a tool result.
pub fn result_of(
    r: toolhost_pipeline::CallResult,
    modern: bool,
) -> Result<CallToolResponse, McpError> {
    if modern && r.code == Some(toolhost_pipeline::ErrorCode::CannotAsk) {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::default());
        let mut required = ClientCapabilities::default();
        required.elicitation = Some(elicitation);
        return Err(McpError::missing_required_client_capability(required));
    }
    let content = r.content.into_iter().map(to_mcp).collect();
    let mut result = if r.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = r.structured;
    if let Some(meta) = r.meta {
        result.meta = Some(rmcp::model::MetaObject(meta));
    }
    Ok(result.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_map_exactly() {
        let img = to_mcp(Block {
            kind: BlockKind::Image {
                data: vec![0, 1, 2, 255],
                mime_type: "image/png".into(),
            },
            annotations: Some(content::Annotations {
                audience: vec![content::Role::User],
                priority: Some(0.5),
            }),
        });
        assert_eq!(
            serde_json::to_value(img).unwrap(),
            json!({"type": "image", "data": "AAEC/w==", "mimeType": "image/png",
                   "annotations": {"audience": ["user"], "priority": 0.5}})
        );
        let res = to_mcp(Block {
            kind: BlockKind::Resource {
                uri: "file:///notes.md".into(),
                mime_type: Some("text/markdown".into()),
                contents: content::ResourceContents::Text("# hi".into()),
            },
            annotations: None,
        });
        assert_eq!(
            serde_json::to_value(res).unwrap(),
            json!({"type": "resource", "resource": {"uri": "file:///notes.md", "mimeType": "text/markdown", "text": "# hi"}})
        );
        let link = to_mcp(Block {
            kind: BlockKind::ResourceLink {
                uri: "https://example.com/a".into(),
                name: "a".into(),
                title: None,
                description: Some("d".into()),
                mime_type: None,
                size: Some(3),
            },
            annotations: None,
        });
        assert_eq!(
            serde_json::to_value(link).unwrap(),
            json!({"type": "resource_link", "uri": "https://example.com/a", "name": "a", "description": "d", "size": 3})
        );
    }
}
