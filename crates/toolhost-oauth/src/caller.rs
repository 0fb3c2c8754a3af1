//! Who a verified token says is calling.

use crate::rejection::Rejection;
use serde_json::{Map, Value};

/// The most scopes read from one token.
const MAX_SCOPES: usize = 64;
/// The longest subject, client id or scope read.
const MAX_NAME: usize = 256;

/// A caller established from a verified access token.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    /// The issuer that vouched for it.
    pub issuer: String,
    /// `sub`: who the token stands for.
    pub subject: String,
    /// `client_id` (or `azp`): the client that holds it.
    pub client_id: Option<String>,
    /// The scopes granted (`scope`, or `scp`).
    pub scopes: Vec<String>,
    /// When the token expires (seconds since the Unix epoch).
    pub expires_at: u64,
    /// Every claim, for the operator's binding rules (bounded by the
    /// token's size). Never logged.
    pub claims: Map<String, Value>,
}

impl Caller {
    /// The caller of a verified token's (or an introspection answer's)
    /// claims.
    ///
    /// # Errors
    /// No subject, or a subject, client id or scope that is not a short
    /// string.
    pub fn from_claims(
        issuer: &str,
        claims: Map<String, Value>,
        expires_at: u64,
    ) -> Result<Self, Rejection> {
        let name = |v: &Value| {
            v.as_str()
                .filter(|s| !s.is_empty() && s.len() <= MAX_NAME)
                .map(str::to_owned)
        };
        let subject = claims
            .get("sub")
            .and_then(name)
            .ok_or(Rejection::Malformed(
                "it has no subject (sub) of at most 256 bytes",
            ))?;
        let client_id = match claims.get("client_id").or_else(|| claims.get("azp")) {
            None => None,
            Some(v) => {
                Some(name(v).ok_or(Rejection::Malformed("its client_id is not a short string"))?)
            }
        };
        let scopes: Vec<String> = match claims.get("scope").or_else(|| claims.get("scp")) {
            None => Vec::new(),
            Some(Value::String(s)) => s
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(_) => {
                return Err(Rejection::Malformed(
                    "its scope is neither a string nor a list",
                ));
            }
        };
        if scopes.len() > MAX_SCOPES || scopes.iter().any(|s| s.len() > MAX_NAME) {
            return Err(Rejection::Malformed(
                "it carries more scopes, or longer ones, than toolhost reads",
            ));
        }
        Ok(Self {
            issuer: issuer.to_owned(),
            subject,
            client_id,
            scopes,
            expires_at,
            claims,
        })
    }

    /// Whether it was granted every scope of `required`.
    #[must_use]
    pub fn has_scopes(&self, required: &[String]) -> bool {
        required.iter().all(|r| self.scopes.contains(r))
    }

    /// The scopes of `required` it lacks.
    #[must_use]
    pub fn missing<'r>(&self, required: &'r [String]) -> Vec<&'r str> {
        required
            .iter()
            .filter(|r| !self.scopes.contains(r))
            .map(String::as_str)
            .collect()
    }
}
