//! Opaque access tokens, asked about at the issuer's introspection
//! endpoint (RFC 7662).
//!
//! The answer is held to the same rules as a JWT's claims: active, from
//! the issuer asked (when it says), issued for this resource (its `aud`
//! must name it: an answer without one is refused, since a token for
//! another resource would pass), and not expired. At most a few
//! introspections run at once, so a flood of made-up tokens cannot queue
//! unbounded work at the server.

use crate::caller::Caller;
use crate::fetch::{Fetcher, MAX_DOCUMENT_BYTES};
use crate::rejection::Rejection;
use crate::settings::ClientCredentials;
use serde_json::Value;
use url::Url;

/// What an introspection answer must say, and how long it is kept.
pub(crate) struct Expected<'a> {
    /// The issuer asked.
    pub(crate) issuer: &'a str,
    /// This resource's URI.
    pub(crate) resource: &'a str,
    /// Now (seconds since the epoch).
    pub(crate) now: u64,
    /// The longest an answer is kept, in seconds.
    pub(crate) max_age: u64,
}

/// Asks `endpoint` about `token`.
pub(crate) async fn introspect(
    fetcher: &Fetcher,
    endpoint: &Url,
    credentials: &ClientCredentials,
    token: &str,
    expected: &Expected<'_>,
) -> Result<Caller, Rejection> {
    let Expected {
        issuer,
        resource,
        now,
        max_age,
    } = *expected;
    let answer = fetcher
        .post_form(
            endpoint,
            &[("token", token), ("token_type_hint", "access_token")],
            (&credentials.client_id, &credentials.client_secret),
            MAX_DOCUMENT_BYTES,
        )
        .await
        .map_err(|e| {
            tracing::warn!(issuer, error = %e, "introspection failed");
            Rejection::Unavailable
        })?;
    judge(answer, issuer, resource, now, max_age)
}

/// The caller an introspection answer stands for, if it holds.
fn judge(
    mut answer: serde_json::Map<String, Value>,
    issuer: &str,
    resource: &str,
    now: u64,
    max_age: u64,
) -> Result<Caller, Rejection> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(Rejection::Inactive);
    }
    if let Some(iss) = answer.get("iss")
        && iss.as_str() != Some(issuer)
    {
        return Err(Rejection::Issuer);
    }
    let audience_ok = match answer.get("aud") {
        Some(Value::String(a)) => a == resource,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(resource)),
        _ => false,
    };
    if !audience_ok {
        return Err(Rejection::Audience);
    }
    if answer
        .get("token_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("refresh_token"))
    {
        return Err(Rejection::Malformed("it is a refresh token"));
    }
    let exp = answer.get("exp").and_then(Value::as_u64);
    if exp.is_some_and(|e| e <= now) {
        return Err(Rejection::Expired);
    }
    // `sub` is optional in an introspection answer (RFC 7662); a token a
    // client holds for itself (client credentials) stands for that client,
    // as RFC 9068 §2.2 has a JWT say it.
    if !answer.contains_key("sub")
        && let Some(client) = answer.get("client_id").cloned()
    {
        answer.insert("sub".into(), client);
    }
    // Held until its expiry or `max_age`, whichever comes first: a revoked
    // token is refused again within `max_age`.
    let until = exp.unwrap_or(u64::MAX).min(now.saturating_add(max_age));
    Caller::from_claims(issuer, answer, until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    const R: &str = "https://tools.example/mcp";
    const I: &str = "https://auth.example";

    #[test]
    fn an_answer_is_held_to_the_claims_rules() {
        let ok = json!({"active": true, "sub": "bob", "aud": R, "iss": I, "exp": 2000, "scope": "tools"});
        let c = judge(answer(ok.clone()), I, R, 1000, 60);
        assert!(
            matches!(&c, Ok(c) if c.subject == "bob" && c.expires_at == 1060),
            "{c:?}"
        );
        let mut inactive = ok.clone();
        inactive["active"] = json!(false);
        assert_eq!(
            judge(answer(inactive), I, R, 1000, 60).err(),
            Some(Rejection::Inactive)
        );
        let mut string_true = ok.clone();
        string_true["active"] = json!("true");
        assert_eq!(
            judge(answer(string_true), I, R, 1000, 60).err(),
            Some(Rejection::Inactive)
        );
        let mut no_aud = ok.clone();
        no_aud.as_object_mut().map(|m| m.remove("aud"));
        assert_eq!(
            judge(answer(no_aud), I, R, 1000, 60).err(),
            Some(Rejection::Audience)
        );
        let mut other = ok.clone();
        other["iss"] = json!("https://evil.example");
        assert_eq!(
            judge(answer(other), I, R, 1000, 60).err(),
            Some(Rejection::Issuer)
        );
        assert_eq!(
            judge(answer(ok.clone()), I, R, 3000, 60).err(),
            Some(Rejection::Expired)
        );
        let mut client_only = ok;
        client_only.as_object_mut().map(|m| m.remove("sub"));
        client_only["client_id"] = json!("ci");
        let c = judge(answer(client_only), I, R, 1000, 60);
        assert!(matches!(&c, Ok(c) if c.subject == "ci"), "{c:?}");
    }
}
