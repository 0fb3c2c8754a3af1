//! `toolhost call NAME [JSON]`: one tool call through MCP, as an agent
//! would make it. A smoke test for a running daemon.

use anyhow::{Context as _, Result, bail};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The exposed tool name, e.g. kandev_notes_ping.
    name: String,
    /// Arguments as a JSON object (omit for none).
    arguments: Option<String>,
    /// The daemon's MCP endpoint.
    #[arg(
        long,
        default_value = "http://127.0.0.1:7010/mcp",
        env = "TOOLHOST_URL"
    )]
    url: String,
    /// Bearer token (or set TOOLHOST_TOKEN).
    #[arg(long, env = "TOOLHOST_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the whole result as JSON instead of its text.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: CallArgs) -> Result<ExitCode> {
    let arguments = match &args.arguments {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(_) => {
                eprintln!(
                    "toolhost call: the arguments must be a JSON object, like '{{\"text\": \"hi\"}}'"
                );
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                eprintln!("toolhost call: the arguments are not valid JSON: {e}");
                return Ok(ExitCode::from(2));
            }
        },
    };
    let Some(token) = args.token.clone() else {
        bail!("a bearer token is needed: --token TOKEN or TOOLHOST_TOKEN");
    };
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(args.url.clone()).auth_header(token),
    );
    let client = match ().serve(transport).await {
        Ok(c) => c,
        Err(e) => {
            // rmcp's error names its transport's Rust types; say what
            // happened in words instead.
            let detail = e.to_string();
            if detail.contains("Auth required") || detail.contains("401") {
                eprintln!(
                    "toolhost call: the token was refused (401 Unauthorized); check --token or TOOLHOST_TOKEN"
                );
            } else if detail.contains("error sending request") {
                eprintln!(
                    "toolhost call: nothing answers at {} (is `toolhost serve --http` running?)",
                    args.url
                );
            } else {
                let reason = detail.rsplit("error: ").next().unwrap_or(&detail);
                eprintln!("toolhost call: {} refused the session: {reason}", args.url);
            }
            return Ok(ExitCode::from(1));
        }
    };
    let mut params = CallToolRequestParams::new(args.name.clone());
    if let Some(a) = arguments {
        params = params.with_arguments(a);
    }
    let result = client.call_tool(params).await.context("the call failed")?;
    let _ = client.cancel().await;
    let is_error = result.is_error.unwrap_or(false);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        for c in &result.content {
            if let Some(t) = c.as_text() {
                println!("{}", t.text);
            }
        }
    }
    Ok(if is_error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
