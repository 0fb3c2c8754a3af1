//! What a refusal says: [`Violation`]s, and the [`ArgumentError`] that
//! bounds them. Shared by the checking steps (`check`), the rendering of
//! jsonschema's errors (`render`) and output checks (`schema`), and
//! depending on none of them.

use serde::Serialize;
use serde_json::Value;

/// One reason the arguments were refused. Every field is either a location,
/// a schema keyword, or something the *schema* declares; none is ever taken
/// from an argument value.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Violation {
    /// JSON pointer to the offending place; `""` is the argument object
    /// itself. Segments that do not look like identifiers show as `*`.
    pub location: String,
    /// The schema keyword (or toolhost rule) that was broken.
    pub constraint: String,
    /// For `required`: every missing property at this location, sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
    /// For `type`: the declared type(s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Vec<String>>,
    /// For `enum` and `const`: the declared values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Value>,
    /// For `pattern`: the declared pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// For `format`: the declared format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// For bounds (`maximum`, `minLength`, ...): the declared bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<Value>,
    /// For unexpected keys: their names, where they look like identifiers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unexpected: Option<Vec<String>>,
    /// A declared property close to an unexpected key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub did_you_mean: Option<String>,
    /// The sentence for a person or a model.
    pub message: String,
}

/// Refused arguments: a summary sentence and the violations behind it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ArgumentError {
    /// One text for the model, naming every violation.
    pub message: String,
    /// The violations, in a stable order.
    pub violations: Vec<Violation>,
}

/// Most violations an error lists; the rest are counted in one more
/// ("and N more"), so an answer never grows with the input.
pub const MAX_VIOLATIONS: usize = 20;

/// Longest error message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Cuts `text` to at most `max` bytes on a character boundary, marking the
/// cut.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub(3);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

impl ArgumentError {
    /// An error listing `violations`, of which `unlisted` more were found
    /// and not kept. At most [`MAX_VIOLATIONS`] are listed, and the message
    /// is at most [`MAX_MESSAGE_BYTES`].
    pub(crate) fn new(mut violations: Vec<Violation>) -> Self {
        let over = violations.len().saturating_sub(MAX_VIOLATIONS);
        violations.truncate(MAX_VIOLATIONS);
        Self::with_unlisted(violations, over)
    }

    pub(crate) fn with_unlisted(mut violations: Vec<Violation>, unlisted: usize) -> Self {
        if unlisted > 0 {
            violations.push(Violation {
                location: String::new(),
                constraint: "more".to_owned(),
                message: format!("and {unlisted} more violation(s) not listed"),
                ..Violation::default()
            });
        }
        let parts: Vec<&str> = violations.iter().map(|v| v.message.as_str()).collect();
        let message = bounded(
            format!("Invalid arguments: {}.", parts.join("; ")),
            MAX_MESSAGE_BYTES,
        );
        Self {
            message,
            violations,
        }
    }
}
