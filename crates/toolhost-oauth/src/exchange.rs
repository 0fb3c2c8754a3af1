//! OAuth 2.0 Token Exchange (RFC 8693): a token for one audience, asked of
//! the caller's own authorization server by toolhost's own client, in
//! exchange for the caller's token.
//!
//! This is how a plugin calls another service on its caller's behalf
//! without ever holding the caller's token (no token passthrough): the
//! server decides whether this caller may reach that audience, and the
//! token it issues is good for that audience only.
//!
//! What this module must not do: send the caller's token anywhere but its
//! own issuer's token endpoint, or put a token in an error or a log line.

use crate::fetch::{Fetcher, MAX_DOCUMENT_BYTES};
use crate::jwt::MAX_TOKEN_BYTES;
use crate::settings::ClientCredentials;
use serde_json::Value;
use url::Url;

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// A token for one audience.
#[derive(Clone, PartialEq, Eq)]
pub struct Exchanged {
    /// The token.
    pub access_token: String,
    /// When it expires (seconds since the Unix epoch).
    pub expires_at: u64,
}

impl std::fmt::Debug for Exchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanged")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Why no token was had for an audience. Each message is fit for the
/// model: it names the audience and the server's error code, never a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The caller's issuer is not one toolhost trusts (it cannot be: the
    /// caller was verified against it), or toolhost has no client there.
    #[error(
        "toolhost has no client at the caller's authorization server to exchange tokens with ([[http.oauth.issuers]] client_id, client_secret_file)"
    )]
    NoClient,
    /// The server's metadata names no token endpoint.
    #[error("the caller's authorization server names no token endpoint")]
    NoEndpoint,
    /// The server said no.
    #[error(
        "the authorization server refused to exchange the caller's token for one for {audience} ({error})"
    )]
    Refused {
        /// The audience asked for.
        audience: String,
        /// The server's error code (`invalid_target`, `access_denied`).
        error: String,
    },
    /// No usable answer.
    #[error(
        "the authorization server could not be reached to exchange the caller's token for one for {0}; try again"
    )]
    Unavailable(String),
}

/// Asks `endpoint` for a token for `audience` in exchange for `subject`.
pub(crate) async fn exchange(
    fetcher: &Fetcher,
    endpoint: &Url,
    client: &ClientCredentials,
    subject: &str,
    audience: &str,
    now: u64,
) -> Result<Exchanged, ExchangeError> {
    let form = [
        ("grant_type", GRANT),
        ("subject_token", subject),
        ("subject_token_type", ACCESS_TOKEN),
        ("requested_token_type", ACCESS_TOKEN),
        ("audience", audience),
    ];
    let unavailable = || ExchangeError::Unavailable(audience.to_owned());
    let (status, answer) = fetcher
        .post_form_answer(
            endpoint,
            &form,
            (&client.client_id, &client.client_secret),
            MAX_DOCUMENT_BYTES,
        )
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, audience, "token exchange failed");
            unavailable()
        })?;
    judge(status, &answer, audience, now).ok_or_else(unavailable)?
}

/// The exchanged token of an answer; `None` when the answer is not one.
fn judge(
    status: u16,
    answer: &serde_json::Map<String, Value>,
    audience: &str,
    now: u64,
) -> Option<Result<Exchanged, ExchangeError>> {
    if !(200..300).contains(&status) {
        let error = answer.get("error").and_then(Value::as_str)?;
        // The server's code, if it is one: it reaches the model.
        let error = if error.len() <= 64
            && error
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            error.to_owned()
        } else {
            "an error".to_owned()
        };
        return Some(Err(ExchangeError::Refused {
            audience: audience.to_owned(),
            error,
        }));
    }
    let token = answer.get("access_token").and_then(Value::as_str)?;
    if token.is_empty()
        || token.len() > MAX_TOKEN_BYTES
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return None;
    }
    // An answer that does not say how long the token lasts is kept a
    // minute: long enough to be worth it, short enough to be safe.
    let lasts = answer
        .get("expires_in")
        .and_then(Value::as_u64)
        .unwrap_or(60);
    Some(Ok(Exchanged {
        access_token: token.to_owned(),
        expires_at: now.saturating_add(lasts.min(24 * 3600)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn answers_are_judged_without_quoting_them() {
        let ok = judge(
            200,
            &map(json!({"access_token": "abc", "expires_in": 120})),
            "aud",
            1000,
        );
        assert_eq!(
            ok,
            Some(Ok(Exchanged {
                access_token: "abc".into(),
                expires_at: 1120
            }))
        );
        let refused = judge(
            400,
            &map(json!({"error": "invalid_target"})),
            "https://api",
            0,
        );
        assert!(
            matches!(&refused, Some(Err(ExchangeError::Refused { error, .. })) if error == "invalid_target")
        );
        let hostile = judge(400, &map(json!({"error": "<script>\nalert(1)"})), "a", 0);
        assert!(
            matches!(&hostile, Some(Err(ExchangeError::Refused { error, .. })) if error == "an error")
        );
        assert_eq!(judge(500, &map(json!({})), "a", 0), None);
        assert_eq!(
            judge(200, &map(json!({"access_token": "a b"})), "a", 0),
            None
        );
        assert_eq!(judge(200, &map(json!({"token": "x"})), "a", 0), None);
    }
}
