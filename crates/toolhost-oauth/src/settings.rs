//! What the operator configures (`[http.oauth]`), checked once.

use crate::keys::Algorithm;
use std::path::PathBuf;
use std::time::Duration;
use url::Url;

/// The resource server's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This resource's canonical URI (RFC 8707): what `aud` must hold, and
    /// what clients ask tokens for, e.g. `https://tools.example.com/mcp`.
    pub resource: Url,
    /// The authorization servers trusted, by issuer identifier.
    pub issuers: Vec<IssuerSettings>,
    /// The scopes this resource knows (in its metadata).
    pub scopes_supported: Vec<String>,
    /// Signature algorithms accepted (default: every asymmetric one).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf` (at most 5 minutes).
    pub skew: Duration,
    /// An issuer's keys are fetched again for an unknown `kid` at most this
    /// often (at least 1 s), so a stream of made-up key ids cannot turn
    /// toolhost against its authorization server.
    pub jwks_min_refresh: Duration,
    /// An introspection answer is kept at most this long (and never past
    /// the token's expiry).
    pub introspection_cache: Duration,
    /// Extra PEM roots for the authorization servers' TLS.
    pub ca_files: Vec<PathBuf>,
    /// A name for people, in the metadata.
    pub resource_name: Option<String>,
}

/// One trusted authorization server.
#[derive(Debug, Clone)]
pub struct IssuerSettings {
    /// Its issuer identifier, exactly as its tokens' `iss`.
    pub issuer: String,
    /// toolhost's own client at this server: for its introspection
    /// endpoint (RFC 7662) and its token exchange (RFC 8693).
    pub client: Option<ClientCredentials>,
    /// Opaque tokens are asked about here (needs `client`); at most one
    /// issuer may be asked.
    pub introspection: bool,
}

/// A confidential client's id and secret.
#[derive(Clone)]
pub struct ClientCredentials {
    /// The client id.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// Why the settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[http.oauth] {0}")]
pub struct BadSettings(pub String);

impl Settings {
    /// Settings with the defaults for everything but the resource and
    /// issuers.
    #[must_use]
    pub fn new(resource: Url, issuers: Vec<IssuerSettings>) -> Self {
        Self {
            resource,
            issuers,
            scopes_supported: Vec::new(),
            algorithms: Algorithm::ALL.to_vec(),
            skew: Duration::from_secs(60),
            jwks_min_refresh: Duration::from_secs(30),
            introspection_cache: Duration::from_secs(60),
            ca_files: Vec::new(),
            resource_name: None,
        }
    }

    /// Checks every rule the settings must keep.
    ///
    /// # Errors
    /// The first that does not hold, in words for the operator.
    pub fn check(&self) -> Result<(), BadSettings> {
        let bad = |m: String| Err(BadSettings(m));
        if !secure(&self.resource) {
            return bad(format!(
                "resource {} must be an https URL (http only on loopback)",
                self.resource
            ));
        }
        if self.resource.fragment().is_some() || self.resource.query().is_some() {
            return bad("resource must have no query or fragment (RFC 8707)".into());
        }
        if self.issuers.is_empty() {
            return bad("names no issuer: list the authorization servers it trusts".into());
        }
        for i in &self.issuers {
            match Url::parse(&i.issuer) {
                Ok(u) if secure(&u) && u.query().is_none() && u.fragment().is_none() => {}
                _ => {
                    return bad(format!(
                        "issuer {:?} must be an https URL with no query or fragment (http only on loopback)",
                        i.issuer
                    ));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self
            .issuers
            .iter()
            .find(|i| !seen.insert(i.issuer.as_str()))
        {
            return bad(format!("lists issuer {} twice", dup.issuer));
        }
        if self.issuers.iter().filter(|i| i.introspection).count() > 1 {
            return bad(
                "asks more than one issuer about opaque tokens (introspection = true): an opaque token names no issuer, and it must be sent to one only".into(),
            );
        }
        if let Some(i) = self
            .issuers
            .iter()
            .find(|i| i.introspection && i.client.is_none())
        {
            return bad(format!(
                "issuer {} has introspection = true but no client_id and client_secret_file to ask it with",
                i.issuer
            ));
        }
        if let Some(s) = self.scopes_supported.iter().find(|s| !is_scope_token(s)) {
            return bad(format!(
                "scope {s:?} is not a scope token (printable ASCII, no space, quote or backslash)"
            ));
        }
        if self.algorithms.is_empty() {
            return bad("allows no signature algorithm".into());
        }
        if self.skew > Duration::from_secs(300) {
            return bad("max_skew_secs is over 300".into());
        }
        if self.jwks_min_refresh < Duration::from_secs(1) {
            return bad("jwks_min_refresh_secs must be at least 1".into());
        }
        Ok(())
    }
}

/// HTTPS, or HTTP to a loopback host.
pub(crate) fn secure(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// RFC 6749 §3.3: `1*( %x21 / %x23-5B / %x5D-7E )`.
#[must_use]
pub fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(resource: &str, issuer: &str) -> Settings {
        let resource = Url::parse(resource).unwrap_or_else(|e| panic!("{e}"));
        Settings::new(
            resource,
            vec![IssuerSettings {
                issuer: issuer.into(),
                client: None,
                introspection: false,
            }],
        )
    }

    #[test]
    fn plain_http_only_on_loopback() {
        assert!(
            settings("https://t.example/mcp", "https://a.example")
                .check()
                .is_ok()
        );
        assert!(
            settings("http://127.0.0.1:8080/mcp", "http://localhost:3000")
                .check()
                .is_ok()
        );
        assert!(
            settings("http://t.example/mcp", "https://a.example")
                .check()
                .is_err()
        );
        assert!(
            settings("https://t.example/mcp", "http://a.example")
                .check()
                .is_err()
        );
        assert!(
            settings("https://t.example/mcp#x", "https://a.example")
                .check()
                .is_err()
        );
    }

    #[test]
    fn scope_tokens() {
        assert!(is_scope_token("tickets:write"));
        assert!(!is_scope_token("a b"));
        assert!(!is_scope_token("a\"b"));
        assert!(!is_scope_token(""));
    }
}
