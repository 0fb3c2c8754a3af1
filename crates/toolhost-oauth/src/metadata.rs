//! What this resource tells clients about itself: its Protected Resource
//! Metadata (RFC 9728) and the `WWW-Authenticate` challenges (RFC 6750)
//! that point to it.
//!
//! A client that meets a 401 reads `resource_metadata` from the challenge,
//! fetches the document, picks an authorization server from it, and asks
//! that server for a token for `resource` (RFC 8707). A 403 with
//! `error="insufficient_scope"` and `scope` tells it which scopes to step
//! up to.

use crate::rejection::Rejection;
use crate::settings::Settings;
use serde_json::json;

/// The well-known path of the metadata document for `settings.resource`:
/// `/.well-known/oauth-protected-resource` followed by the resource's path
/// (RFC 9728 §3.1), e.g. `/.well-known/oauth-protected-resource/mcp`.
#[must_use]
pub fn metadata_path(settings: &Settings) -> String {
    let path = settings.resource.path().trim_end_matches('/');
    format!("/.well-known/oauth-protected-resource{path}")
}

/// The metadata document's URL, for the challenge.
#[must_use]
pub fn metadata_url(settings: &Settings) -> String {
    let origin = settings.resource.origin().ascii_serialization();
    format!("{origin}{}", metadata_path(settings))
}

/// The metadata document (JSON).
#[must_use]
pub fn document(settings: &Settings) -> serde_json::Value {
    let mut doc = json!({
        "resource": settings.resource.as_str(),
        "authorization_servers": settings.issuers.iter().map(|i| i.issuer.as_str()).collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "resource_signing_alg_values_supported": settings.algorithms.iter().map(|a| a.name()).collect::<Vec<_>>(),
    });
    if !settings.scopes_supported.is_empty() {
        doc["scopes_supported"] = json!(settings.scopes_supported);
    }
    if let Some(name) = &settings.resource_name {
        doc["resource_name"] = json!(name);
    }
    doc
}

/// Why a request is challenged.
#[derive(Debug)]
pub enum Challenge<'a> {
    /// No token was sent: say where to get one, and which scopes to ask
    /// for (`required`, if any).
    Missing {
        /// Scopes every request needs.
        required: &'a [String],
    },
    /// The token was refused.
    Invalid(&'a Rejection),
    /// The token lacks scopes this request needs (answered with 403).
    InsufficientScope {
        /// Every scope the request needs, the ones held included (a client
        /// asks for the whole set).
        scope: &'a [String],
    },
}

/// The `WWW-Authenticate` value for `challenge`.
#[must_use]
pub fn challenge(settings: &Settings, challenge: &Challenge<'_>) -> String {
    let mut out = format!("Bearer resource_metadata=\"{}\"", metadata_url(settings));
    match challenge {
        Challenge::Missing { required } if !required.is_empty() => {
            out.push_str(&format!(", scope=\"{}\"", required.join(" ")));
        }
        Challenge::Missing { .. } => {}
        Challenge::Invalid(why) => {
            // Our own fixed words: no quote or backslash to escape.
            out.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{why}\""
            ));
        }
        Challenge::InsufficientScope { scope } => {
            out.push_str(&format!(
                ", error=\"insufficient_scope\", scope=\"{}\"",
                scope.join(" ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::IssuerSettings;

    fn settings() -> Settings {
        let mut s = Settings::new(
            url::Url::parse("https://tools.example/mcp").unwrap_or_else(|e| panic!("{e}")),
            vec![IssuerSettings {
                issuer: "https://auth.example".into(),
                client: None,
                introspection: false,
            }],
        );
        s.scopes_supported = vec!["tools".into()];
        s
    }

    #[test]
    fn the_document_lives_under_the_resources_path() {
        let s = settings();
        assert_eq!(
            metadata_path(&s),
            "/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url(&s),
            "https://tools.example/.well-known/oauth-protected-resource/mcp"
        );
        let doc = document(&s);
        assert_eq!(doc["resource"], "https://tools.example/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://auth.example");
        assert_eq!(doc["scopes_supported"][0], "tools");
    }

    #[test]
    fn challenges_point_to_the_metadata() {
        let s = settings();
        let scopes = vec!["tools".to_owned(), "tickets:write".to_owned()];
        assert_eq!(
            challenge(&s, &Challenge::InsufficientScope { scope: &scopes }),
            "Bearer resource_metadata=\"https://tools.example/.well-known/oauth-protected-resource/mcp\", error=\"insufficient_scope\", scope=\"tools tickets:write\""
        );
        let invalid = challenge(&s, &Challenge::Invalid(&Rejection::Expired));
        assert!(invalid.contains("error=\"invalid_token\""), "{invalid}");
        for r in [
            Rejection::Algorithm,
            Rejection::Audience,
            Rejection::Malformed("x"),
            Rejection::Unavailable,
        ] {
            let c = challenge(&s, &Challenge::Invalid(&r));
            assert_eq!(c.matches('"').count() % 2, 0, "{c}");
            assert!(!c.contains('\\'), "{c}");
        }
    }
}
