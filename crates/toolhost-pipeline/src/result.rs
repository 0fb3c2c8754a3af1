//! What a call answers: a result for the model, successful or not.

use crate::content::{Block, BlockKind};
use serde::Serialize;
use serde_json::{Map, Value, json};
use toolhost_validate::Violation;

/// Why a call failed, from pipeline step 2 on (docs/CONTRACT.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The arguments broke a bound or the schema.
    InvalidArguments,
    /// The tool is withheld (unsound schema) or left the catalog or changed
    /// its declaration since it was resolved.
    ToolUnavailable,
    /// The session's binding is no longer active, or the backend said no.
    NotAuthorized,
    /// The plugin is not ready (starting, restarting, failed), or died
    /// during the call.
    PluginUnavailable,
    /// The deadline passed.
    Timeout,
    /// The agent cancelled the call.
    Cancelled,
    /// The plugin refused the call or answered something invalid.
    PluginError,
    /// The result is over the size cap.
    ResultTooLarge,
    /// The tool asked the user a question and this client cannot answer
    /// questions (it declared no elicitation capability).
    CannotAsk,
    /// The call needs a person's approval, and none could be had: the
    /// client cannot be asked, the question failed or expired, or the
    /// operator has not decided yet.
    ApprovalRequired,
    /// The person asked (the user, or the operator) said no.
    ApprovalDenied,
    /// Over the operator's rate limit for the binding or the tool.
    RateLimited,
    /// One of the operator's argument rules did not hold.
    RefusedByRule,
    /// The tool's contract (description, schemas, annotations) changed
    /// since this session listed the tools: refused once, so the model
    /// lists again before it calls under the new contract.
    ContractChanged,
    /// A bug in toolhost.
    Internal,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArguments => "invalid_arguments",
            Self::ToolUnavailable => "tool_unavailable",
            Self::NotAuthorized => "not_authorized",
            Self::PluginUnavailable => "plugin_unavailable",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::PluginError => "plugin_error",
            Self::ResultTooLarge => "result_too_large",
            Self::CannotAsk => "cannot_ask",
            Self::ApprovalRequired => "approval_required",
            Self::ApprovalDenied => "approval_denied",
            Self::RateLimited => "rate_limited",
            Self::RefusedByRule => "refused_by_rule",
            Self::ContractChanged => "contract_changed",
            Self::Internal => "internal",
        }
    }
}

/// The answer to a `tools/call` that resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The content blocks: one text block for a protocol-1 plugin or a
    /// failure, any checked blocks for a protocol-2 plugin.
    pub content: Vec<Block>,
    /// Structured content: the plugin's, or `{"error": ...}` on a failure
    /// of a tool that declares no output schema.
    pub structured: Option<Value>,
    /// MCP `isError`.
    pub is_error: bool,
    /// Set when the pipeline (not the tool) failed the call.
    pub code: Option<ErrorCode>,
    /// MCP `_meta`: what toolhost adds beside the plugin's result (the
    /// `unknown_args` of report mode), kept out of `structuredContent` so
    /// the result still matches the tool's output schema.
    pub meta: Option<Map<String, Value>>,
}

impl CallResult {
    /// A failure: `isError`, a text for the model, and the error
    /// `{code, message, violations?}` in `_meta.error` and
    /// `structuredContent.error` (see [`CallResult::fit_output_schema`]).
    /// The message must not contain argument values; callers build it from
    /// names only.
    #[must_use]
    pub fn failure(
        code: ErrorCode,
        message: impl Into<String>,
        violations: Option<&[Violation]>,
    ) -> Self {
        // Every failure is bounded, whatever built its message.
        let message =
            toolhost_validate::bounded(message.into(), toolhost_validate::MAX_MESSAGE_BYTES);
        let mut error = Map::new();
        error.insert("code".into(), json!(code));
        error.insert("message".into(), json!(message));
        if let Some(v) = violations {
            error.insert(
                "violations".into(),
                serde_json::to_value(v).unwrap_or(Value::Null),
            );
        }
        let mut meta = Map::new();
        meta.insert("error".into(), Value::Object(error.clone()));
        Self {
            content: vec![Block::text(format!("Error ({}): {message}", code.as_str()))],
            structured: Some(json!({ "error": error })),
            is_error: true,
            code: Some(code),
            meta: Some(meta),
        }
    }

    /// Keeps the result's `structuredContent` within what the tool
    /// declares. A client may check `structuredContent` against the tool's
    /// output schema on errors too (the TypeScript SDK's does, and throws
    /// the result away), so a tool with an output schema gets toolhost's
    /// `{"error": ...}` in `_meta.error` only; a tool without one gets it
    /// in both places.
    pub(crate) fn fit_output_schema(&mut self, has_output_schema: bool) {
        if has_output_schema && self.code.is_some() {
            self.structured = None;
        }
    }

    /// The text blocks, joined by newlines: what a text-only reader sees.
    #[must_use]
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match &b.kind {
                BlockKind::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// The outcome as an audit word: `ok`, `tool_error` (the tool itself
    /// reported failure), or the error code.
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match (self.code, self.is_error) {
            (Some(c), _) => c.as_str(),
            (None, true) => "tool_error",
            (None, false) => "ok",
        }
    }
}
