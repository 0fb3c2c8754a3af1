//! Text from outside, made safe to show.
//!
//! A plugin's stderr, a manifest's description, a path in an archive, a
//! fleet status entry: any of them may hold an escape sequence that sets
//! a terminal's title, hides the next line (`ESC[8m`), or forges a log
//! line with a newline. And bidirectional controls (U+202E and its kin)
//! reorder what a person reads without changing what the machine sees.
//!
//! One rule, [`is_unsafe`], says which characters those are: every
//! control character (C0, DEL and C1) and every bidirectional control.
//! [`escaped`] shows them as `\u{..}` (and cuts the text to a length),
//! and [`first_unsafe`] finds one so that a validator can refuse it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` may change how a terminal or a log shows what follows it:
/// a control character, or a bidirectional formatting character.
#[must_use]
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}'
        )
}

/// Where text may break lines: prose (a description) keeps newlines and
/// tabs, a single line (a name, a path) keeps none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Newlines and tabs are text.
    Prose,
    /// Every control character is unsafe.
    Single,
}

/// The first character of `text` that [`is_unsafe`] (newlines and tabs
/// allowed in [`Lines::Prose`]), for a validator to refuse it by its code
/// point.
#[must_use]
pub fn first_unsafe(text: &str, lines: Lines) -> Option<char> {
    text.chars()
        .find(|c| is_unsafe(*c) && !(lines == Lines::Prose && matches!(c, '\n' | '\t')))
}

/// `text` with every unsafe character escaped as `\u{..}`, cut at
/// `max_chars` (with `…`). Borrows when there is nothing to do, so the
/// common case costs no allocation.
#[must_use]
pub fn escaped(text: &str, max_chars: usize) -> Cow<'_, str> {
    let clean = text.len() <= max_chars && !text.chars().any(is_unsafe);
    if clean {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(2)));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escaped`] without a length limit: for text already bounded where it
/// was read.
#[must_use]
pub fn escaped_whole(text: &str) -> Cow<'_, str> {
    escaped(text, usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_newlines_and_bidi_controls_are_shown_not_obeyed() {
        assert!(matches!(escaped("plain", 64), Cow::Borrowed("plain")));
        assert_eq!(
            escaped("/tmp/\u{1b}]0;PWNED\u{7} \u{1b}[8m hidden", 64),
            "/tmp/\\u{1b}]0;PWNED\\u{7} \\u{1b}[8m hidden"
        );
        assert_eq!(escaped("a\nINFO forged", 64), "a\\u{a}INFO forged");
        assert_eq!(escaped("abc\u{202e}fed", 64), "abc\\u{202e}fed");
        assert_eq!(escaped("\u{9b}31m", 64), "\\u{9b}31m");
        assert_eq!(escaped("abcdef", 3), "abc…");
    }

    #[test]
    fn prose_keeps_its_lines_and_a_single_line_keeps_none() {
        assert_eq!(first_unsafe("two\nlines\tand a tab", Lines::Prose), None);
        assert_eq!(first_unsafe("two\nlines", Lines::Single), Some('\n'));
        assert_eq!(first_unsafe("a\u{1b}[8m", Lines::Prose), Some('\u{1b}'));
        assert_eq!(first_unsafe("caf\u{e9}", Lines::Single), None);
    }

    proptest::proptest! {
        #[test]
        fn escaped_text_holds_no_unsafe_character(text in ".*", max in 0usize..64) {
            let out = escaped(&text, max);
            proptest::prop_assert!(!out.chars().any(is_unsafe));
            // Each character kept becomes at most `\u{10ffff}`, ten characters.
            proptest::prop_assert!(out.chars().count() <= max * 10 + 1);
        }
    }
}
