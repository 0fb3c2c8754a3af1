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

use tokio::io::AsyncRead;
use tokio_stream::StreamExt as _;
use tokio_util::codec::FramedRead;

/// Longest line forwarded whole.
pub const MAX_LINE: usize = 4096;
/// Lines a plugin may log at once.
pub const BURST: f64 = 200.0;
/// Lines per second a plugin may log after a burst.
pub const LINES_PER_SECOND: f64 = 50.0;

use toolhost_base::{Bucket, log_safe};

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

fn suppressed_line(plugin: &str, stream: &str, suppressed: u64) {
    tracing::warn!(
        plugin,
        stream,
        suppressed,
        "{suppressed} lines suppressed (the plugin logs faster than {LINES_PER_SECOND} lines a second)"
    );
}

/// Lines of bytes, whatever they hold: a line over [`MAX_LINE`] is the item
/// `None` (its bytes are skipped up to the next newline), and bytes that
/// are not UTF-8 are decoded lossily. No input ends the stream: a reader
/// that stopped would leave the plugin writing into a closed pipe, and a
/// plugin that does not ignore `SIGPIPE` would die of it.
#[derive(Debug, Default)]
struct Lines {
    /// Inside a line that was too long: skipping to its newline.
    skipping: bool,
}

impl tokio_util::codec::Decoder for Lines {
    type Item = Option<String>;
    type Error = std::io::Error;

    fn decode(
        &mut self,
        src: &mut tokio_util::bytes::BytesMut,
    ) -> Result<Option<Self::Item>, Self::Error> {
        loop {
            let newline = memchr::memchr(b'\n', src);
            if self.skipping {
                match newline {
                    Some(at) => {
                        let _ = src.split_to(at + 1);
                        self.skipping = false;
                        continue;
                    }
                    None => {
                        src.clear();
                        return Ok(None);
                    }
                }
            }
            return Ok(match newline {
                Some(at) if at <= MAX_LINE => {
                    let line = src.split_to(at + 1);
                    Some(Some(text_of(&line[..at])))
                }
                Some(at) => {
                    let _ = src.split_to(at + 1);
                    Some(None)
                }
                None if src.len() > MAX_LINE => {
                    src.clear();
                    self.skipping = true;
                    Some(None)
                }
                None => None,
            });
        }
    }

    fn decode_eof(
        &mut self,
        src: &mut tokio_util::bytes::BytesMut,
    ) -> Result<Option<Self::Item>, Self::Error> {
        if let Some(item) = self.decode(src)? {
            return Ok(Some(item));
        }
        if src.is_empty() || self.skipping {
            src.clear();
            return Ok(None);
        }
        let rest = src.split();
        Ok(Some(Some(text_of(&rest))))
    }
}

/// A line's text: lossy UTF-8, without a trailing carriage return.
fn text_of(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last lines a process wrote on a stream, kept (escaped, bounded) for
/// the error that needs the plugin's own words: why it did not start, why
/// it exited. Lines are kept whatever the rate limit dropped from the log.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tail(std::sync::Arc<TailInner>);

#[derive(Debug, Default)]
struct TailInner {
    lines: std::sync::Mutex<std::collections::VecDeque<String>>,
    ended: tokio::sync::Notify,
    done: std::sync::atomic::AtomicBool,
}

/// Lines a [`Tail`] keeps.
const TAIL_LINES: usize = 12;
/// Characters of one line a [`Tail`] keeps.
const TAIL_LINE_CHARS: usize = 300;

impl Tail {
    fn push(&self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let kept = log_safe(line.trim_end(), TAIL_LINE_CHARS).into_owned();
        if let Ok(mut lines) = self.0.lines.lock() {
            if lines.len() == TAIL_LINES {
                lines.pop_front();
            }
            lines.push_back(kept);
        }
    }

    fn end(&self) {
        self.0
            .done
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.ended.notify_waiters();
    }

    /// The lines kept, waiting up to `wait` for the stream to end first (a
    /// process that just exited may not have been read to its end yet).
    pub(crate) async fn last_lines(&self, wait: std::time::Duration) -> Vec<String> {
        let ended = self.0.ended.notified();
        if !self.0.done.load(std::sync::atomic::Ordering::Acquire) {
            let _ = tokio::time::timeout(wait, ended).await;
        }
        self.0
            .lines
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// " | "-joined lines for an error message, or nothing.
pub(crate) fn said(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with: {}", lines.join(" | "))
    }
}

/// Forwards every line of `reader` until EOF. It reads to the end even
/// when lines are dropped, so the plugin never writes into a closed pipe.
/// With a `tail`, the last lines are kept there too.
pub(crate) async fn forward(
    plugin: String,
    stream: &'static str,
    reader: impl AsyncRead + Unpin,
    tail: Option<Tail>,
) {
    let mut lines = FramedRead::new(reader, Lines::default());
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
        if let (Some(t), Some(text)) = (&tail, &line) {
            t.push(text);
        }
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
    if let Some(t) = tail {
        t.end();
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
    use std::borrow::Cow;

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

    /// Every line of `input`, as the forwarder reads it.
    fn lines_of(input: &[u8]) -> Vec<Option<String>> {
        use tokio_util::codec::Decoder as _;
        let mut codec = Lines::default();
        let mut buf = tokio_util::bytes::BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
            out.push(item);
        }
        out
    }

    #[test]
    fn bytes_that_are_not_utf8_are_a_line_and_reading_goes_on() {
        assert_eq!(
            lines_of(b"\xff\xfe broken\nMARKER after\n"),
            vec![
                Some("\u{fffd}\u{fffd} broken".to_owned()),
                Some("MARKER after".to_owned())
            ]
        );
        // A last line without a newline, and a carriage return.
        assert_eq!(
            lines_of(b"a\r\nb"),
            vec![Some("a".to_owned()), Some("b".to_owned())]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_one_dropped_item_and_the_next_line_survives() {
        let mut input = vec![b'x'; MAX_LINE * 3];
        input.extend_from_slice(b"\nnext\n");
        assert_eq!(lines_of(&input), vec![None, Some("next".to_owned())]);
        // Fed in pieces, as a pipe delivers it.
        use tokio_util::codec::Decoder as _;
        let mut codec = Lines::default();
        let mut buf = tokio_util::bytes::BytesMut::new();
        let mut out = Vec::new();
        for piece in input.chunks(1000) {
            buf.extend_from_slice(piece);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                out.push(item);
            }
        }
        assert_eq!(out, vec![None, Some("next".to_owned())]);
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
