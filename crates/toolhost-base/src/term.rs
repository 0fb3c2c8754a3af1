//! Printing the commands' answers, and every other line a person reads
//! (the CLI's commands, and the daemon's few lines to its terminal).
//!
//! Two rules hold for everything printed here:
//!
//! - **Nothing from outside steers the terminal.** Plugin output, manifest
//!   text, archive paths, fleet status entries and errors all pass through
//!   `toolhost_base::text`, the escaping rule the logs use: an escape
//!   sequence, a C1 control or a bidirectional control is shown as
//!   `\u{..}`, never obeyed. Text lines keep their newlines and tabs (a
//!   tool's result has lines); fields that are one line by nature are cut
//!   to one with [`one_line`] where they are printed. JSON output stays
//!   JSON: such characters become `\uXXXX` escapes inside its strings.
//! - **A reader that goes away early** (`toolhost plugins list | head -1`)
//!   ends the command quietly, as it does any Unix tool, instead of a
//!   panic. The standard library's `println!` panics when stdout is a
//!   closed pipe (Rust ignores SIGPIPE so that a daemon survives a closed
//!   socket).

use crate::text::{escaped, is_unsafe};
use std::borrow::Cow;
use std::io::Write as _;

/// How a reporting command prints: `text` for people, `json` (one JSON
/// document on stdout) for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// For machines: one JSON document on stdout.
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err("the format is text or json".to_owned()),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// `text` with every unsafe character but newlines and tabs escaped.
fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| is_unsafe(c) && !matches!(c, '\n' | '\t'))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for part in text.split_inclusive(['\n', '\t']) {
        let (body, end) = match part.char_indices().last() {
            Some((i, c @ ('\n' | '\t'))) => (&part[..i], Some(c)),
            _ => (part, None),
        };
        out.push_str(&escaped(body, usize::MAX));
        if let Some(c) = end {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A field that is one line by nature (an error, a path, a plugin's
/// reason), with its newlines and tabs escaped too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, usize::MAX)
}

/// Serialized JSON with every unsafe character that serde leaves as it is
/// (C1 controls, DEL, bidirectional controls) written as a `\uXXXX`
/// escape: still the same JSON value, and inert on a terminal. Raw
/// newlines in JSON text are only ever structural (pretty printing).
fn json_for_terminal(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| is_unsafe(c) && c != '\n') {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe(c) && c != '\n' {
            // JSON escapes UTF-16 units: a character past the Basic
            // Multilingual Plane (a tag character) is a surrogate pair.
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn write_line(mut to: impl std::io::Write, text: &str, stdout: bool) {
    let written = to
        .write_all(text.as_bytes())
        .and_then(|()| to.write_all(b"\n"));
    if let Err(e) = written {
        if !stdout {
            return;
        }
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        // Anything else (a full disk behind a redirect): say so once.
        let _ = writeln!(std::io::stderr(), "toolhost: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes one line of text to stdout; exits 0 if the reader has gone.
pub fn line(args: std::fmt::Arguments<'_>) {
    let text = args.to_string();
    write_line(std::io::stdout().lock(), &for_terminal(&text), true);
}

/// Writes one line of text to stderr.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let text = args.to_string();
    write_line(std::io::stderr().lock(), &for_terminal(&text), false);
}

/// Writes text to stderr without a newline (a prompt).
pub fn err_text(args: std::fmt::Arguments<'_>) {
    let text = args.to_string();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(for_terminal(&text).as_bytes());
    let _ = err.flush();
}

/// Writes a JSON document (already serialized) to stdout.
pub fn json(serialized: &str) {
    write_line(
        std::io::stdout().lock(),
        &json_for_terminal(serialized),
        true,
    );
}

/// `println!` for command output, without the panic on a closed pipe, and
/// with the terminal's rule applied.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::term::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::term::line(format_args!($($arg)*))
    };
}

/// `eprintln!` with the terminal's rule applied.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::term::err_line(format_args!($($arg)*))
    };
}

/// `eprint!` with the terminal's rule applied.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::term::err_text(format_args!($($arg)*))
    };
}

/// One JSON document on stdout: `outjson!(value)` for anything
/// `Display`s as JSON (a `serde_json::Value`, a serialized string).
#[macro_export]
macro_rules! outjson {
    ($value:expr) => {
        $crate::term::json(&($value).to_string())
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_and_lines_are_kept() {
        assert_eq!(
            for_terminal("/tmp/\u{1b}]0;PWNED\u{7} \u{1b}[8m hidden\nnext\tline"),
            "/tmp/\\u{1b}]0;PWNED\\u{7} \\u{1b}[8m hidden\nnext\tline"
        );
        assert!(matches!(for_terminal("plain\n"), Cow::Borrowed(_)));
        assert_eq!(one_line("a\nb"), "a\\u{a}b");
    }

    #[test]
    fn json_stays_json_and_carries_no_raw_control() {
        let value = serde_json::json!({ "path": "/tmp/\u{1b}]0;X\u{7}\u{9b}31m\u{202e}" });
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        let shown = json_for_terminal(&text);
        assert!(!shown.chars().any(|c| is_unsafe(c) && c != '\n'), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
        assert_eq!(back, value);
    }
}
