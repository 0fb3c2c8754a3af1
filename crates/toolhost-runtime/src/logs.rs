//! A plugin's stdout (after the handshake) and stderr, as tracing events.
//!
//! Lines longer than [`MAX_LINE`] are cut (a plugin must not be able to make
//! toolhost buffer without bound). A line that is a JSON object with a
//! `level` (or `@level`) keeps that level and its `message`/`msg`/`@message`
//! text: go-plugin's hclog and most structured loggers write such lines.
//!
//! A plugin's output reaches the log at a bounded rate ([`BURST`] lines at
//! once, [`LINES_PER_SECOND`] after that); what is dropped is counted in an
//! "N lines suppressed" line. Control characters are escaped
//! ([`log_safe`]), so a plugin cannot forge a log line.

use std::borrow::Cow;
use std::fmt::Write as _;
use tokio::io::AsyncRead;
use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// Longest line forwarded whole.
pub const MAX_LINE: usize = 4096;
/// Lines a plugin may log at once.
pub const BURST: f64 = 200.0;
/// Lines per second a plugin may log after a burst.
pub const LINES_PER_SECOND: f64 = 50.0;

/// Text from outside (a plugin, an agent, a client), made safe for a log
/// line: control characters (newline, ESC, ...) are escaped as `\u{..}`
/// and the text is cut at `max_chars`. Allocates only when it must.
#[must_use]
pub fn log_safe(text: &str, max_chars: usize) -> Cow<'_, str> {
    let clean = text.len() <= max_chars && !text.chars().any(char::is_control);
    if clean {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max_chars * 2));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Printable ASCII only (for short quotes in error messages).
pub(crate) fn printable(text: &str, max_chars: usize) -> String {
    text.chars()
        .take(max_chars)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// A token bucket: `burst` at once, refilled at `per_second`. What bounds
/// a plugin's output lines here, and its log messages to a caller in the
/// pipeline.
#[derive(Debug, Clone)]
pub struct Bucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    #[must_use]
    pub fn new(burst: f64, per_second: f64) -> Self {
        Self {
            burst,
            per_second,
            tokens: burst,
            at: Instant::now(),
        }
    }

    /// Takes one token, if there is one.
    pub fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

fn suppressed_line(plugin: &str, stream: &str, suppressed: u64) {
    tracing::warn!(
        plugin,
        stream,
        suppressed,
        "{suppressed} lines suppressed (the plugin logs faster than {LINES_PER_SECOND} lines a second)"
    );
}

/// Lines, where a line over [`MAX_LINE`] is an item (`None`) rather than
/// an error: `FramedRead` ends its stream after any decoder error, and a
/// reader that stops would leave the plugin writing into a closed pipe.
struct Lines(LinesCodec);

impl tokio_util::codec::Decoder for Lines {
    type Item = Option<String>;
    type Error = LinesCodecError;

    fn decode(
        &mut self,
        src: &mut tokio_util::bytes::BytesMut,
    ) -> Result<Option<Self::Item>, Self::Error> {
        too_long_is_an_item(self.0.decode(src))
    }

    fn decode_eof(
        &mut self,
        src: &mut tokio_util::bytes::BytesMut,
    ) -> Result<Option<Self::Item>, Self::Error> {
        too_long_is_an_item(self.0.decode_eof(src))
    }
}

/// A line over the limit becomes the item `None` instead of an error.
fn too_long_is_an_item(
    decoded: Result<Option<String>, LinesCodecError>,
) -> Result<Option<Option<String>>, LinesCodecError> {
    match decoded {
        Ok(line) => Ok(line.map(Some)),
        Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(None)),
        Err(e) => Err(e),
    }
}

/// Forwards every line of `reader` until EOF. It reads to the end even
/// when lines are dropped, so the plugin never writes into a closed pipe.
pub(crate) async fn forward(plugin: String, stream: &'static str, reader: impl AsyncRead + Unpin) {
    let mut lines = FramedRead::new(reader, Lines(LinesCodec::new_with_max_length(MAX_LINE)));
    let mut bucket = Bucket::new(BURST, LINES_PER_SECOND);
    let mut suppressed = 0u64;
    loop {
        // What was dropped is reported within a second, even when the
        // plugin then falls silent.
        let item = tokio::select! {
            item = lines.next() => item,
            () = tokio::time::sleep(std::time::Duration::from_secs(1)), if suppressed > 0 => {
                suppressed_line(&plugin, stream, suppressed);
                suppressed = 0;
                continue;
            }
        };
        let Some(Ok(line)) = item else { break };
        if !bucket.take() {
            suppressed += 1;
            continue;
        }
        if suppressed > 0 {
            suppressed_line(&plugin, stream, suppressed);
            suppressed = 0;
        }
        match line {
            Some(line) => emit(&plugin, stream, &line),
            None => {
                tracing::warn!(plugin = %plugin, stream, "a line longer than {MAX_LINE} bytes was dropped");
            }
        }
    }
    if suppressed > 0 {
        suppressed_line(&plugin, stream, suppressed);
    }
}

fn emit(plugin: &str, stream: &str, line: &str) {
    let (level, text) = structured(line).unwrap_or((None, line.to_owned()));
    let text = log_safe(&text, MAX_LINE);
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

    #[test]
    fn control_characters_never_reach_a_log_line() {
        assert!(matches!(log_safe("plain", 64), Cow::Borrowed("plain")));
        assert_eq!(
            log_safe("a\nINFO forged\u{1b}[31m", 64),
            "a\\u{a}INFO forged\\u{1b}[31m"
        );
        assert_eq!(log_safe("abcdef", 3), "abc…");
    }

    #[test]
    fn the_bucket_allows_a_burst_then_refuses() {
        let mut b = Bucket::new(BURST, LINES_PER_SECOND);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let burst = BURST as usize;
        assert!((0..burst).all(|_| b.take()));
        assert!(!b.take());
    }
}
