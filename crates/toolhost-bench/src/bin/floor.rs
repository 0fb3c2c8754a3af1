//! The floor for any MCP server: an in-process rmcp server that answers the
//! benchmark's `echo` tool itself, with no extra hop. Prints
//! `floor: serving MCP on http://ADDR/mcp` on stderr when ready.
//!
//! `floor [--json]`: `--json` serves session-less JSON responses (rmcp's
//! `legacy_session_mode = false`, `json_response = true`).

#![forbid(unsafe_code)]

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use std::sync::Arc;

#[derive(Clone)]
struct Echo {
    tool: Tool,
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = req.arguments.unwrap_or_default();
        let mut r = CallToolResult::success(vec![ContentBlock::text("echoed")]);
        r.structured_content = Some(serde_json::json!({ "arguments": args }));
        Ok(r.into())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let json = std::env::args().any(|a| a == "--json");
    let schema: JsonObject = serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": { "msg": { "type": "string", "maxLength": 20 }, "n": { "type": "integer", "minimum": 0, "maximum": 10 } },
        "required": ["msg", "n"]
    }))?;
    let handler = Echo {
        tool: Tool::new("echo", "Echoes its arguments.", Arc::new(schema)),
    };
    let mut config = StreamableHttpServerConfig::default();
    if json {
        config = config
            .with_legacy_session_mode(false)
            .with_json_response(true);
    }
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    eprintln!(
        "floor: serving MCP on http://{}/mcp",
        listener.local_addr()?
    );
    // As toolhost does: no Nagle delay on small answers.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}
