//! A plugin's stdout (after the handshake) and stderr, as tracing events.
//!
//! Lines longer than [`MAX_LINE`] are cut (a plugin must not be able to make
//! toolhost buffer without bound). A line that is a JSON object with a
//! `level` (or `@level`) keeps that level and its `message`/`msg`/`@message`
//! text: go-plugin's hclog and most structured loggers write such lines.

use tokio::io::AsyncRead;
use tokio_stream::StreamExt as _;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// Longest line forwarded whole.
pub const MAX_LINE: usize = 4096;

/// Forwards every line of `reader` until EOF.
pub(crate) async fn forward(plugin: String, stream: &'static str, reader: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_LINE));
    while let Some(item) = lines.next().await {
        match item {
            Ok(line) => emit(&plugin, stream, &line),
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                tracing::warn!(plugin = %plugin, stream, "a line longer than {MAX_LINE} bytes was dropped");
            }
            Err(LinesCodecError::Io(_)) => break,
        }
    }
}

fn emit(plugin: &str, stream: &str, line: &str) {
    let (level, text) = structured(line).unwrap_or((None, line.to_owned()));
    let level = level.unwrap_or("info");
    match level {
        "error" => tracing::error!(plugin, stream, "{text}"),
        "warn" | "warning" => tracing::warn!(plugin, stream, "{text}"),
        "debug" => tracing::debug!(plugin, stream, "{text}"),
        "trace" => tracing::trace!(plugin, stream, "{text}"),
        _ => tracing::info!(plugin, stream, "{text}"),
    }
}

fn structured(line: &str) -> Option<(Option<&'static str>, String)> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    let obj = v.as_object()?;
    let level = ["level", "@level", "severity"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(|l| l.as_str()))
        .map(|l| match l.to_ascii_lowercase().as_str() {
            "error" | "fatal" | "critical" => "error",
            "warn" | "warning" => "warn",
            "debug" => "debug",
            "trace" => "trace",
            _ => "info",
        });
    let text = ["message", "msg", "@message"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(|m| m.as_str()))
        .map_or_else(|| line.to_owned(), str::to_owned);
    Some((level, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_keep_their_level() {
        assert_eq!(
            structured(r#"{"@level":"error","@message":"boom"}"#),
            Some((Some("error"), "boom".to_owned()))
        );
        assert_eq!(
            structured(r#"{"level":"DEBUG","msg":"x"}"#),
            Some((Some("debug"), "x".to_owned()))
        );
        assert_eq!(structured("plain text"), None);
    }
}
