//! The client side of `toolhost call`: what it declares, how it shows
//! progress and log messages (stderr, as they happen), and how it answers
//! a plugin's question, whether asked by `elicitation/create` or in a
//! task's `input_required` (`toolhost call --task`).

// rmcp marks logging deprecated (SEP-2577); the daemon still speaks it.
#![allow(deprecated)]

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleClient};
use serde_json::{Map, Value};
use toolhost_base::{err, errln};

/// How a question from the plugin is answered.
#[derive(Debug, Clone)]
pub(crate) enum Answering {
    With(Map<String, Value>),
    Decline,
    Terminal,
}

/// The client side of `toolhost call`: shows progress and logs on stderr
/// and answers questions.
#[derive(Debug, Clone)]
pub(crate) struct CallClient {
    pub(crate) answering: Answering,
    /// Declares the Tasks extension.
    pub(crate) tasks: bool,
}

impl rmcp::ClientHandler for CallClient {
    fn get_info(&self) -> ClientConfig {
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::default());
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
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
        errln!("[progress {}{of}]{message}", p.progress);
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
        errln!("[{level}] {text}");
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        Ok(self.answer(request).await)
    }
}

impl CallClient {
    /// Asks the question (terminal, `--answer` or `--decline`): the
    /// answer for `elicitation/create`, or for a task's `tasks/update`.
    pub(crate) async fn answer(&self, request: ElicitRequestParams) -> ElicitResult {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        errln!("[question] {message}");
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
        match answer {
            Some(values) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(values))
            }
            None => {
                errln!("[question] declined");
                ElicitResult::new(ElicitationAction::Decline)
            }
        }
    }
}

/// Asks for each field of a flat form schema on the terminal; `None` when
/// the user declines (an empty answer to the first prompt, or "n" to a
/// question with no fields).
fn ask_on_terminal(schema: &Value) -> Option<Map<String, Value>> {
    let read = |prompt: &str| -> Option<String> {
        err!("{prompt}");
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
