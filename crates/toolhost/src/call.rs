//! `toolhost call NAME [JSON]`: one tool call through MCP, as an agent
//! would make it. A smoke test for a running daemon.
//!
//! The result's text goes to stdout; everything else the call produced goes
//! to stderr as it happens: progress as `[progress 3/10] message`, log
//! messages as `[level] message`, and a question from the plugin as a
//! prompt on the terminal (or answered by `--answer`).

// rmcp marks logging deprecated (SEP-2577); the daemon still speaks it.
#![allow(deprecated)]

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ContentBlock, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, FormElicitationCapability,
    Implementation, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ResourceContents, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData as McpError, RoleClient};
use serde_json::{Map, Value};
use std::io::IsTerminal as _;
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
}

/// How a question from the plugin is answered.
#[derive(Debug, Clone)]
enum Answering {
    With(Map<String, Value>),
    Decline,
    Terminal,
}

/// The client side of `toolhost call`: shows progress and logs on stderr
/// and answers questions.
#[derive(Debug, Clone)]
struct CallClient {
    answering: Answering,
}

impl rmcp::ClientHandler for CallClient {
    fn get_info(&self) -> ClientConfig {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::default());
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(elicitation);
        ClientConfig::new(
            caps,
            Implementation::new("toolhost-call", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        p: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        let of = p.total.map(|t| format!("/{t}")).unwrap_or_default();
        let message = p.message.map(|m| format!(" {m}")).unwrap_or_default();
        eprintln!("[progress {}{of}]{message}", p.progress);
    }

    async fn on_logging_message(
        &self,
        m: LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(m.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let text = match &m.data {
            Value::String(s) => s.clone(),
            Value::Object(o) => match (o.get("message"), o.get("data")) {
                (Some(Value::String(s)), Some(d)) => format!("{s} {d}"),
                _ => m.data.to_string(),
            },
            other => other.to_string(),
        };
        eprintln!("[{level}] {text}");
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        eprintln!("[question] {message}");
        let answer = match &self.answering {
            Answering::With(values) => Some(values.clone()),
            Answering::Decline => None,
            Answering::Terminal => {
                let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
                tokio::task::spawn_blocking(move || ask_on_terminal(&schema))
                    .await
                    .ok()
                    .flatten()
            }
        };
        Ok(match answer {
            Some(values) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(values))
            }
            None => {
                eprintln!("[question] declined");
                ElicitResult::new(ElicitationAction::Decline)
            }
        })
    }
}

/// Asks for each field of a flat form schema on the terminal; `None` when
/// the user declines (an empty answer to the first prompt, or "n" to a
/// question with no fields).
fn ask_on_terminal(schema: &Value) -> Option<Map<String, Value>> {
    let read = |prompt: &str| -> Option<String> {
        eprint!("{prompt}");
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_owned()),
        }
    };
    let mut out = Map::new();
    let props = schema.get("properties").and_then(Value::as_object);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        let yes = read("  accept? [y/N] ")?;
        return yes.eq_ignore_ascii_case("y").then_some(out);
    };
    for (name, field) in props {
        let title = field.get("title").and_then(Value::as_str).unwrap_or(name);
        let kind = field
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string");
        let hint = match kind {
            "boolean" => " [y/n]".to_owned(),
            _ => field
                .get("enum")
                .map(|e| format!(" {e}"))
                .unwrap_or_default(),
        };
        let text = read(&format!("  {title}{hint}: "))?;
        if text.is_empty() {
            continue;
        }
        let value = match kind {
            "boolean" => Value::Bool(
                text.eq_ignore_ascii_case("y")
                    || text.eq_ignore_ascii_case("yes")
                    || text == "true",
            ),
            "integer" | "number" => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            _ => Value::String(text),
        };
        out.insert(name.clone(), value);
    }
    Some(out)
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
    let level = log_level(&args.log_level)?;
    let answering = match (&args.answer, args.decline) {
        (_, true) => Answering::Decline,
        (Some(text), _) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Answering::With(m),
            _ => {
                eprintln!(
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
    let client = match (CallClient { answering }).serve(transport).await {
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
    let result = client.call_tool(params).await.context("the call failed")?;
    let _ = client.cancel().await;
    let is_error = result.is_error.unwrap_or(false);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&result)?);
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
