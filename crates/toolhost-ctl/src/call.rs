//! `toolhost call NAME [JSON]`: one tool call through MCP, as an agent
//! would make it. A smoke test for a running daemon.
//!
//! The result's text goes to stdout; everything else the call produced goes
//! to stderr as it happens: progress as `[progress 3/10] message`, log
//! messages as `[level] message`, and a question from the plugin as a
//! prompt on the terminal (or answered by `--answer`).
//!
//! With `--task` it speaks MCP 2026-07-28 and declares the Tasks
//! extension: a tool that allows tasks answers with a task, which this
//! command then polls (`tasks/get`), printing its status as it changes,
//! answering its questions (`tasks/update`) and, on Ctrl-C, cancelling it
//! (`tasks/cancel`). `--task-id ID` follows a task made earlier (after a
//! disconnect, say) instead of calling.

// rmcp marks logging deprecated (SEP-2577); the daemon still speaks it.
#![allow(deprecated)]

use crate::call_client::{Answering, CallClient};
use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, ContentBlock, LoggingLevel, ResourceContents, SetLevelRequestParams,
};
use rmcp::service::ClientServiceExt as _;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use std::io::IsTerminal as _;
use std::process::ExitCode;
use toolhost_base::{errln, outjson, outln};

/// The flags of `toolhost call`.
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
    /// Show the plugin's log messages at this level and above (debug,
    /// info, notice, warning, error; "none" for none).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Answer a question from the plugin with these values (a JSON object)
    /// instead of asking on the terminal.
    #[arg(long)]
    answer: Option<String>,
    /// Decline any question from the plugin.
    #[arg(long, conflicts_with = "answer")]
    decline: bool,
    /// Run the call as an MCP task where the tool allows one (the
    /// 2026-07-28 Tasks extension), and follow it to its end.
    #[arg(long)]
    task: bool,
    /// Follow this task (made by an earlier `--task` call with the same
    /// token) instead of calling; NAME is then only shown.
    #[arg(long, value_name = "ID")]
    task_id: Option<String>,
}

/// One content block for a person: text as is, anything else described.
fn render(block: &ContentBlock) -> String {
    let b64_len = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_or(0, |b| b.len())
    };
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image {}, {} bytes]", i.mime_type, b64_len(&i.data)),
        ContentBlock::Audio(a) => format!("[audio {}, {} bytes]", a.mime_type, b64_len(&a.data)),
        ContentBlock::ResourceLink(r) => {
            let mime = r
                .mime_type
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            let about = r
                .description
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!("[link {} <{}>{mime}{about}]", r.name, r.uri)
        }
        ContentBlock::Resource(e) => match &e.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => {
                let mime = mime_type
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default();
                format!("[resource {uri}{mime}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => {
                let mime = mime_type
                    .as_deref()
                    .map(|m| format!(" {m}"))
                    .unwrap_or_default();
                format!("[resource {uri}{mime}, {} bytes]", b64_len(blob))
            }
            _ => "[a resource of a kind this client does not know]".to_owned(),
        },
        _ => "[content of a kind this client does not know]".to_owned(),
    }
}

fn log_level(name: &str) -> Result<Option<LoggingLevel>> {
    Ok(Some(match name {
        "none" => return Ok(None),
        "debug" => LoggingLevel::Debug,
        "info" => LoggingLevel::Info,
        "notice" => LoggingLevel::Notice,
        "warning" => LoggingLevel::Warning,
        "error" => LoggingLevel::Error,
        "critical" => LoggingLevel::Critical,
        "alert" => LoggingLevel::Alert,
        "emergency" => LoggingLevel::Emergency,
        other => bail!(
            "--log-level {other:?} is not a level (debug, info, notice, warning, error, critical, alert, emergency, none)"
        ),
    }))
}

/// Makes the call and prints what comes back.
///
/// Kept whole on purpose: one MCP session from connect to close: the client,
/// its handler and the follow-up of a task share the session and must end
/// together.
pub async fn run(args: CallArgs) -> Result<ExitCode> {
    let arguments = match &args.arguments {
        None => None,
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(_) => {
                errln!(
                    "toolhost call: the arguments must be a JSON object, like '{{\"text\": \"hi\"}}'"
                );
                return Ok(ExitCode::from(2));
            }
            Err(e) => {
                errln!("toolhost call: the arguments are not valid JSON: {e}");
                return Ok(ExitCode::from(2));
            }
        },
    };
    let level = log_level(&args.log_level)?;
    let answering = match (&args.answer, args.decline) {
        (_, true) => Answering::Decline,
        (Some(text), _) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Answering::With(m),
            _ => {
                errln!(
                    "toolhost call: --answer must be a JSON object, like '{{\"confirm\": true}}'"
                );
                return Ok(ExitCode::from(2));
            }
        },
        (None, false) if std::io::stdin().is_terminal() => Answering::Terminal,
        (None, false) => Answering::Decline,
    };
    let Some(token) = args.token.clone() else {
        bail!("a bearer token is needed: --token TOKEN or TOOLHOST_TOKEN");
    };
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(args.url.clone()).auth_header(token),
    );
    let handler = CallClient {
        answering,
        tasks: args.task || args.task_id.is_some(),
    };
    let served = if handler.tasks {
        handler
            .serve_with_lifecycle(
                transport,
                rmcp::service::ClientLifecycleMode::Discover {
                    preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                },
            )
            .await
    } else {
        handler.serve(transport).await
    };
    let client = match served {
        Ok(c) => c,
        Err(e) => {
            // rmcp's error names its transport's Rust types; say what
            // happened in words instead.
            let detail = e.to_string();
            if detail.contains("Auth required") || detail.contains("401") {
                errln!(
                    "toolhost call: the token was refused (401 Unauthorized); check --token or TOOLHOST_TOKEN"
                );
            } else if detail.contains("error sending request") {
                errln!(
                    "toolhost call: nothing answers at {} (is `toolhost serve --http` running?)",
                    args.url
                );
            } else {
                let reason = detail.rsplit("error: ").next().unwrap_or(&detail);
                errln!("toolhost call: {} refused the session: {reason}", args.url);
            }
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(level) = level {
        // Older daemons may not log; the call goes on without.
        let _ = client
            .peer()
            .set_level(SetLevelRequestParams::new(level))
            .await;
    }
    let mut params = CallToolRequestParams::new(args.name.clone());
    if let Some(a) = arguments {
        params = params.with_arguments(a);
    }
    let result = if let Some(id) = &args.task_id {
        crate::call_task::follow(&client, id).await?
    } else if args.task {
        crate::call_task::call(&client, params).await?
    } else {
        Some(client.call_tool(params).await.context("the call failed")?)
    };
    let _ = client.cancel().await;
    let Some(result) = result else {
        // The task ended without a result (failed or cancelled), said on
        // stderr.
        return Ok(ExitCode::from(1));
    };
    let is_error = result.is_error.unwrap_or(false);
    if args.json {
        outjson!(serde_json::to_string_pretty(&result)?);
    } else {
        for c in &result.content {
            outln!("{}", render(c));
        }
    }
    Ok(if is_error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
