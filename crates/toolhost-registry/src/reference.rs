//! What an operator types to name a package in a registry:
//! `REGISTRY/REPO:TAG`, `REGISTRY/REPO@sha256:DIGEST`, or both.
//!
//! The registry is always named (there is no default registry a short
//! name could silently resolve to), and every part is checked against
//! the distribution specification's grammar before it reaches a URL: a
//! name is lowercase path components, a tag at most 128 characters of a
//! small alphabet, a digest exactly `sha256:` and 64 hex digits. Nothing
//! typed is ever put in a URL unchecked.

use std::fmt;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository, `a/b/c`.
    pub repository: String,
    /// The tag, when one was given (`latest` when neither was).
    pub tag: Option<String>,
    /// The manifest's digest, `sha256:HEX`, when one was given.
    pub digest: Option<String>,
}

/// Why a text is not a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{shown}` is not a registry reference: {why} (write REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST, e.g. registry.example.com/tools/notes:1.0.0)"
)]
pub struct BadReference {
    shown: String,
    why: &'static str,
}

const MAX_REFERENCE: usize = 512;

impl Reference {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`BadReference`], naming the rule it breaks.
    pub fn parse(text: &str) -> Result<Self, BadReference> {
        let bad = |why| BadReference {
            shown: toolhost_base::term::one_line(&text.chars().take(120).collect::<String>())
                .into_owned(),
            why,
        };
        if text.len() > MAX_REFERENCE {
            return Err(bad("it is longer than 512 characters"));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, d)) => {
                if !is_digest(d) {
                    return Err(bad("a digest is sha256: and 64 lowercase hex digits"));
                }
                (rest, Some(d.to_owned()))
            }
            None => (text, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(bad("it names no registry"));
        };
        if !is_registry(registry) {
            return Err(bad(
                "its first part must be a registry host (with a dot or a port, or localhost)",
            ));
        }
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
            _ => (path, None),
        };
        if !is_repository(repository) {
            return Err(bad(
                "a repository is lowercase letters, digits and . _ - between slashes",
            ));
        }
        if let Some(t) = tag
            && !is_tag(t)
        {
            return Err(bad(
                "a tag is at most 128 letters, digits, _ . - and starts with a letter, digit or _",
            ));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_owned()),
            (None, Some(_)) => None,
            (None, None) => Some("latest".to_owned()),
        };
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// Whether `text` reads as a registry reference rather than a path: its
    /// first component is a registry host. A path that exists is always a
    /// path; callers ask this only of one that does not.
    #[must_use]
    pub fn looks_like(text: &str) -> bool {
        !text.starts_with('/')
            && !text.starts_with('.')
            && text
                .split_once('/')
                .is_some_and(|(host, _)| is_registry(host))
    }

    /// The same repository at `digest`, with no tag: what is recorded once
    /// a tag has been resolved, so nothing follows the tag again.
    #[must_use]
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_owned()),
        }
    }

    /// `registry/repository`.
    #[must_use]
    pub fn repo_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The host without its port, for the loopback rule.
    #[must_use]
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The host part of `host[:port]` (an IPv6 literal keeps its brackets).
pub(crate) fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        return registry.find(']').map_or(registry, |end| &registry[..=end]);
    }
    registry.split(':').next().unwrap_or(registry)
}

/// Whether `host` is this machine: plain HTTP is allowed to it.
pub(crate) fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// `sha256:` and 64 lowercase hex digits.
#[must_use]
pub fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_registry(r: &str) -> bool {
    if r.is_empty() || r.len() > 255 {
        return false;
    }
    let host = host_of(r);
    let port_ok = r[host.len()..]
        .strip_prefix(':')
        .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let has_port = r.len() > host.len();
    let host_ok = if host.starts_with('[') {
        host.len() > 2
            && host[1..host.len() - 1]
                .parse::<std::net::Ipv6Addr>()
                .is_ok()
    } else {
        !host.is_empty()
            && host
                .split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    port_ok
        && host_ok
        && (has_port || host.contains('.') || host == "localhost" || host.starts_with('['))
}

fn is_repository(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && r.split('/').all(|c| {
            let b = c.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
                && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
                && b.iter().all(|x| {
                    x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-')
                })
                && !c.contains("..")
        })
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_forms_an_operator_writes() {
        let r = Reference::parse("localhost:5000/tools/notes:1.0.0").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("localhost:5000", "tools/notes", Some("1.0.0"))
        );
        let r = Reference::parse(&format!("reg.example.com/notes@{D}")).unwrap();
        assert_eq!((r.tag, r.digest.as_deref()), (None, Some(D)));
        let r = Reference::parse("reg.example.com/notes").unwrap();
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let r = Reference::parse(&format!("[::1]:5000/a/b:v1@{D}")).unwrap();
        assert_eq!(r.host(), "[::1]");
        assert!(is_loopback(r.host()));
        assert_eq!(r.to_string(), format!("[::1]:5000/a/b:v1@{D}"));
    }

    #[test]
    fn what_is_not_a_reference_is_named() {
        for bad in [
            "notes:1.0",
            "notes/plugin:1.0",
            "reg.example.com/Notes:1",
            "reg.example.com/a/../b:1",
            "reg.example.com/a:-x",
            "reg.example.com/a@sha256:abc",
            "reg.example.com/a@md5:0123",
            "reg.example.com:99999999/a",
            "reg.example.com/a:b c",
            "reg example.com/a",
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(e.to_string().contains("not a registry reference"), "{bad}");
        }
    }

    #[test]
    fn a_path_is_not_taken_for_a_reference() {
        assert!(!Reference::looks_like("./plugins/notes"));
        assert!(!Reference::looks_like("/srv/notes.tar.gz"));
        assert!(!Reference::looks_like("plugins/notes"));
        assert!(Reference::looks_like("localhost:5000/notes:1"));
        assert!(Reference::looks_like("ghcr.io/acme/notes:1"));
    }

    proptest! {
        /// Whatever parses prints back to itself, and every part holds
        /// only the characters a URL path can carry as they are.
        #[test]
        fn parsed_references_print_back_and_are_url_safe(s in "[a-z0-9.:/@_-]{1,80}") {
            if let Ok(r) = Reference::parse(&s) {
                let again = Reference::parse(&r.to_string()).unwrap();
                prop_assert_eq!(&again, &r);
                for part in [&r.repository, r.tag.as_deref().unwrap_or(""), r.digest.as_deref().unwrap_or("")] {
                    prop_assert!(part.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/:".contains(&b)));
                    prop_assert!(!part.contains(".."));
                }
            }
        }
    }
}
