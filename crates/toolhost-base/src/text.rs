//! Text from outside, made safe to show.
//!
//! A plugin's stderr, a manifest's description, a path in an archive, a
//! fleet status entry, an agent's argument in an approval question: any
//! of them may hold an escape sequence that sets a terminal's title, hides
//! the next line (`ESC[8m`), or forges a log line with a newline.
//! Bidirectional controls (U+202E and its kin) reorder what a person
//! reads without changing what the machine sees. And invisible code
//! points (zero-width spaces, Hangul fillers, variation selectors, tag
//! characters: Unicode's default-ignorable set, and a few blanks beside
//! it) make a value look empty, or two different values look the same.
//!
//! This module is the one rule for all of them, used by every log line,
//! every line the CLI prints and every text a person is asked to approve:
//!
//! - [`is_unsafe`]: every control character (C0, DEL and C1), every
//!   bidirectional control, and every invisible code point
//!   ([`is_invisible`]);
//! - [`escaped`] shows them as `\u{..}` (and cuts the text to a length);
//! - [`first_unsafe`] finds one that can forge or reorder a line (a
//!   control or a bidirectional character), so that a validator can refuse
//!   it. Invisible characters are shown escaped, not refused: an emoji's
//!   variation selector in a description is no attack on a reader who sees
//!   it escaped.
//!
//! What this module must not do: drop a character (a reader must be able
//! to tell two texts apart exactly when they differ).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` may change how a terminal or a log shows what follows it,
/// or hide itself from a reader: a control character, a bidirectional
/// formatting character, or an invisible one ([`is_invisible`]).
#[must_use]
pub fn is_unsafe(c: char) -> bool {
    is_control_or_bidi(c) || is_invisible(c)
}

/// A control character, or a bidirectional formatting character: what can
/// forge a line or reorder one.
fn is_control_or_bidi(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}'
        )
}

/// Whether `c` shows nothing (or only blank space that is not a space) to
/// a reader: Unicode's `Default_Ignorable_Code_Point` set, the line and
/// paragraph separators, the interlinear annotation marks and the blank
/// braille pattern. A value made only of these looks empty.
#[must_use]
pub fn is_invisible(c: char) -> bool {
    matches!(u32::from(c),
        0x00ad | 0x034f | 0x061c | 0x115f..=0x1160 | 0x17b4..=0x17b5 | 0x180b..=0x180f
        | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x206f | 0x2800 | 0x3164
        | 0xfe00..=0xfe0f | 0xfeff | 0xffa0 | 0xfff0..=0xfffb | 0x1bca0..=0x1bca3
        | 0x1d173..=0x1d17a | 0xe0000..=0xe0fff)
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

/// The first control or bidirectional character of `text` (newlines and
/// tabs allowed in [`Lines::Prose`]), for a validator to refuse it by its
/// code point.
#[must_use]
pub fn first_unsafe(text: &str, lines: Lines) -> Option<char> {
    text.chars()
        .find(|c| is_control_or_bidi(*c) && !(lines == Lines::Prose && matches!(c, '\n' | '\t')))
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
    fn invisible_characters_are_shown_escaped() {
        // Each of these alone looks like an empty value.
        for c in [
            '\u{3164}',
            '\u{115f}',
            '\u{034f}',
            '\u{fe0f}',
            '\u{180b}',
            '\u{e0100}',
            '\u{200b}',
            '\u{2060}',
            '\u{feff}',
            '\u{e0041}',
            '\u{2800}',
            '\u{ffa0}',
        ] {
            let text = format!("a{c}b");
            let out = escaped(&text, 64);
            assert_eq!(
                out,
                format!("a\\u{{{:x}}}b", u32::from(c)),
                "{:x}",
                u32::from(c)
            );
        }
        assert!(matches!(
            escaped("caf\u{e9} \u{2603}", 64),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_validator_refuses_what_forges_or_reorders_and_lets_an_emoji_be() {
        assert_eq!(first_unsafe("warning \u{26a0}\u{fe0f}", Lines::Prose), None);
        assert_eq!(first_unsafe("a\u{202e}b", Lines::Prose), Some('\u{202e}'));
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
