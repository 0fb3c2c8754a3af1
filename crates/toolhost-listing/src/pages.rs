//! `tools/list` in pages, with cursors that survive catalog changes.
//!
//! A listing is in exposed-name order, so a cursor is the last name of the
//! page it follows (encoded, so clients treat it as opaque): the next page
//! starts at the first name after it *in whatever catalog is current*. A
//! catalog change between pages therefore never repeats or skips a tool
//! that is in both catalogs; a tool added before the cursor's place is not
//! seen on this pass, and `notifications/tools/list_changed` tells the
//! client to list again. A cursor that does not decode is an error naming
//! what to do (start over without one).
//!
//! What this module must not do: allocate per tool beyond the page it
//! returns, or read anything but names from the listing.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::ErrorData as McpError;
use rmcp::model::Tool;

const PREFIX: &str = "after:";

/// The cursor of the page that follows one ending at `last`.
fn cursor_after(last: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{PREFIX}{last}"))
}

/// The name a cursor says the next page follows.
fn name_after(cursor: &str) -> Result<String, McpError> {
    let invalid = || {
        McpError::invalid_params(
            "invalid cursor: pass the nextCursor of the previous tools/list page as it was given, or no cursor to start from the first page",
            None,
        )
    };
    if cursor.len() > 512 {
        return Err(invalid());
    }
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    text.strip_prefix(PREFIX)
        .map(str::to_owned)
        .ok_or_else(invalid)
}

/// The page of `tools` (in name order) after `cursor`, at most `size`
/// tools (0: all), and the cursor of the next page if there is one.
pub(crate) fn page(
    tools: &[Tool],
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<Tool>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => {
            let after = name_after(c)?;
            tools.partition_point(|t| t.name.as_ref() <= after.as_str())
        }
    };
    let rest = tools.get(start..).unwrap_or_default();
    if size == 0 || rest.len() <= size {
        return Ok((rest.to_vec(), None));
    }
    let page = rest[..size].to_vec();
    let next = page.last().map(|t| cursor_after(&t.name));
    Ok((page, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn tools(names: &[String]) -> Vec<Tool> {
        let mut names = names.to_vec();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| Tool::new(n, "d", Arc::new(serde_json::Map::new())))
            .collect()
    }

    fn walk(list: &[Tool], size: usize) -> Vec<String> {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = page(list, cursor.as_deref(), size).expect("a page");
            assert!(size == 0 || page.len() <= size);
            seen.extend(page.iter().map(|t| t.name.to_string()));
            match next {
                Some(n) => cursor = Some(n),
                None => return seen,
            }
        }
    }

    proptest! {
        #[test]
        fn paging_lists_every_tool_once_in_order(
            names in proptest::collection::vec("[a-z_]{1,12}", 0..200),
            size in 0usize..40,
        ) {
            let list = tools(&names);
            let all: Vec<String> = list.iter().map(|t| t.name.to_string()).collect();
            prop_assert_eq!(walk(&list, size), all);
        }

        #[test]
        fn a_change_between_pages_repeats_and_skips_nothing_both_lists_have(
            before in proptest::collection::vec("[a-z]{1,6}", 1..120),
            after in proptest::collection::vec("[a-z]{1,6}", 1..120),
            size in 1usize..20,
            pages_first in 0usize..5,
        ) {
            let (old, new) = (tools(&before), tools(&after));
            let mut seen = Vec::new();
            let mut cursor = None;
            for _ in 0..pages_first {
                let (p, next) = page(&old, cursor.as_deref(), size).expect("a page");
                seen.extend(p.iter().map(|t| t.name.to_string()));
                cursor = next;
                if cursor.is_none() { break; }
            }
            if cursor.is_some() || pages_first == 0 {
                loop {
                    let (p, next) = page(&new, cursor.as_deref(), size).expect("a page");
                    seen.extend(p.iter().map(|t| t.name.to_string()));
                    cursor = next;
                    if cursor.is_none() { break; }
                }
            }
            let mut sorted = seen.clone();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(&sorted, &seen, "in order, no repeats");
        }
    }

    #[test]
    fn a_bad_cursor_is_an_error_that_says_what_to_do() {
        let list = tools(&["a".to_owned()]);
        for bad in ["", "!!", "bm90LWEtY3Vyc29y", &"x".repeat(600)] {
            let err = page(&list, Some(bad), 10).expect_err(bad);
            assert!(err.message.contains("start from the first page"), "{err:?}");
        }
    }
}
