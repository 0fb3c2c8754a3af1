//! Exposed tool names (docs/PROTOCOL.md §2).
//!
//! An agent sees one flat namespace of tool names, and every model provider
//! restricts what a name may be (Anthropic and OpenAI: 64 characters of
//! `[A-Za-z0-9_-]`). `exposed(prefix, plugin_id, local)` maps a plugin's local
//! tool name into that space, readably when it fits and with a hash of the
//! plugin id when it must be cut. The function is pure and part of the
//! product's contract: a name an agent has seen must mean the same tool in
//! the next version, so the golden vectors in the tests must never change.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "kandev";
/// The longest exposed name: the strictest provider's limit.
pub const MAX_EXPOSED_LEN: usize = 64;

/// The plugin id as a name segment: lowercased, every character outside
/// `[a-z0-9_]` replaced by `_` (runs are kept, so `a..b` and `a.b` differ),
/// leading and trailing `_` trimmed.
#[must_use]
pub fn slug(plugin_id: &str) -> String {
    let mapped: String = plugin_id
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    mapped.trim_matches('_').to_owned()
}

/// The first 8 hex digits of SHA-256 of the raw plugin id.
#[must_use]
pub fn id_hash8(plugin_id: &str) -> String {
    let digest = Sha256::digest(plugin_id.as_bytes());
    digest[..4]
        .iter()
        .fold(String::with_capacity(8), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The name an agent sees for `local` of `plugin_id`.
///
/// `<prefix>_<slug>_<local>` when that is at most 64 characters; otherwise
/// the slug is cut so that `<prefix>_<cut slug>_<local>_<hash8>` is exactly
/// 64 characters, and the hash keeps two long ids that share a prefix apart.
/// Inputs are assumed to satisfy the manifest rules (the prefix and local
/// name patterns); callers validate them first.
///
/// ```
/// use toolhost_manifest::naming::{exposed, id_hash8};
///
/// // Readable when it fits: every character a provider refuses becomes `_`.
/// assert_eq!(exposed("kandev", "acme.notes", "add_note"), "kandev_acme_notes_add_note");
///
/// // Too long: the plugin's part is cut, and a hash of its whole id keeps
/// // two ids that share a beginning apart. Exactly 64 characters.
/// let id = "com.example.very-long-organisation-name.tools.search-and-replace";
/// let name = exposed("kandev", id, "replace_all");
/// assert_eq!(name, "kandev_com_example_very_long_organisation_n_replace_all_61ef8356");
/// assert_eq!(name.len(), 64);
/// assert!(name.ends_with(&id_hash8(id)));
/// ```
#[must_use]
pub fn exposed(prefix: &str, plugin_id: &str, local: &str) -> String {
    let slug = slug(plugin_id);
    let readable = format!("{prefix}_{slug}_{local}");
    if readable.len() <= MAX_EXPOSED_LEN {
        return readable;
    }
    let keep = MAX_EXPOSED_LEN
        .saturating_sub(prefix.len() + 2 + local.len() + 9)
        .max(1);
    // The slug is ASCII, so byte indexing cuts between characters.
    let cut = slug[..keep.min(slug.len())].trim_end_matches('_');
    format!("{prefix}_{cut}_{local}_{}", id_hash8(plugin_id))
}

/// Whether `name` is a valid exposed name: `^[a-z0-9_]{1,64}$`.
#[must_use]
pub fn is_valid_exposed(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_EXPOSED_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `prefix` may be used: `^[a-z][a-z0-9]{0,15}$`. Underscores are
/// kept out of the prefix so the first `_` of a name always ends it.
#[must_use]
pub fn is_valid_prefix(prefix: &str) -> bool {
    let mut bytes = prefix.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_lowercase())
        && prefix.len() <= 16
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Two tools that would be exposed under the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The shared exposed name.
    pub exposed: String,
    /// The tool that claimed the name first: (plugin id, local name).
    pub first: (String, String),
    /// The later tool, which loses.
    pub second: (String, String),
}

/// Finds every exposed-name collision among `(plugin_id, local)` pairs, in
/// order: the first claimant keeps the name, each later one is reported.
pub fn find_collisions<'a>(
    prefix: &str,
    tools: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Collision> {
    let mut owners: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut collisions = Vec::new();
    for (plugin, local) in tools {
        let name = exposed(prefix, plugin, local);
        match owners.get(&name) {
            Some(first) if first.0 != plugin || first.1 != local => collisions.push(Collision {
                exposed: name,
                first: first.clone(),
                second: (plugin.to_owned(), local.to_owned()),
            }),
            Some(_) => {}
            None => {
                owners.insert(name, (plugin.to_owned(), local.to_owned()));
            }
        }
    }
    collisions
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Golden vectors: these names are a compatibility promise.
    #[test]
    fn golden_vectors() {
        assert_eq!(
            exposed("kandev", "task-tags.v1", "add_tag"),
            "kandev_task_tags_v1_add_tag"
        );
        assert_eq!(
            exposed("kandev", "acme.notes", "add_note"),
            "kandev_acme_notes_add_note"
        );
        assert_eq!(exposed("kandev", "notes", "ping"), "kandev_notes_ping");
        assert_eq!(exposed("kandev", "a..b", "x"), "kandev_a__b_x");
        assert_eq!(exposed("kandev", "-_x_-", "y"), "kandev_x_y");
        assert_eq!(exposed("acme", "notes", "ping"), "acme_notes_ping");
        assert_eq!(id_hash8("task-tags.v1"), "8d5b66e2");
        // Exactly 64: still readable.
        let id = "a".repeat(64 - "kandev__t".len());
        assert_eq!(exposed("kandev", &id, "t").len(), 64);
        assert!(!exposed("kandev", &id, "t").contains(&id_hash8(&id)));
    }

    #[test]
    fn long_ids_are_cut_and_hashed() {
        let id = "com.example.very-long-organisation-name.tools.search-and-replace";
        let name = exposed("kandev", id, "replace_all");
        assert_eq!(
            name,
            "kandev_com_example_very_long_organisation_n_replace_all_61ef8356"
        );
        assert_eq!(name.len(), 64);
        assert!(name.ends_with(&format!("_{}", id_hash8(id))));
        assert!(!name.contains("__"));

        // The cut lands on a `_`: it is trimmed, never doubled.
        let id = format!("{}.{}", "a".repeat(35), "b".repeat(40));
        let name = exposed("kandev", &id, "replace_all");
        assert_eq!(
            name,
            format!("kandev_{}_replace_all_{}", "a".repeat(35), id_hash8(&id))
        );
        assert_eq!(id_hash8(&id), "df25e0f7");
        assert!(!name.contains("__"), "{name}");
        assert_eq!(name.len(), 63);
    }

    #[test]
    fn ids_that_slug_alike_collide_and_both_are_named() {
        let c = find_collisions(
            "kandev",
            [
                ("plugin-a", "run"),
                ("plugin_a", "run"),
                ("plugin_a", "other"),
            ],
        );
        assert_eq!(
            c,
            vec![Collision {
                exposed: "kandev_plugin_a_run".to_owned(),
                first: ("plugin-a".to_owned(), "run".to_owned()),
                second: ("plugin_a".to_owned(), "run".to_owned()),
            }]
        );
    }

    fn plugin_id() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9._-]{0,63}"
    }
    fn local() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9_]{0,31}"
    }

    proptest! {
        #[test]
        fn every_name_is_provider_safe(id in plugin_id(), l in local()) {
            let n = exposed(DEFAULT_PREFIX, &id, &l);
            prop_assert!(is_valid_exposed(&n), "{}", n);
        }

        #[test]
        fn deterministic(id in plugin_id(), l in local()) {
            prop_assert_eq!(exposed("kandev", &id, &l), exposed("kandev", &id, &l));
        }

        /// Distinct pairs share a name only when the collision check says so.
        #[test]
        fn collisions_are_exactly_what_the_check_reports(
            a in (plugin_id(), local()), b in (plugin_id(), local())
        ) {
            prop_assume!(a != b);
            let same = exposed("kandev", &a.0, &a.1) == exposed("kandev", &b.0, &b.1);
            let reported = find_collisions("kandev", [(a.0.as_str(), a.1.as_str()), (b.0.as_str(), b.1.as_str())]);
            prop_assert_eq!(same, !reported.is_empty());
        }

        /// Near-collisions: ids differing only in separators must collide
        /// exactly when their slugs and locals agree.
        #[test]
        fn separator_variants(stem in "[a-z]{1,8}", l in local(), seps in prop::collection::vec(prop_oneof![Just('.'), Just('-'), Just('_')], 2)) {
            let a = format!("{stem}{}x", seps[0]);
            let b = format!("{stem}{}x", seps[1]);
            let same = exposed("kandev", &a, &l) == exposed("kandev", &b, &l);
            prop_assert_eq!(same, slug(&a) == slug(&b));
            prop_assert!(same); // all three separators slug to `_`
        }
    }
}
