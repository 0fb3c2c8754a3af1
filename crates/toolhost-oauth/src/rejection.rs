//! Why a token was refused, in words safe to send back: no message holds
//! any part of the token or a claim's value.

/// Why an access token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Longer than any access token toolhost reads.
    #[error("the access token is larger than toolhost reads")]
    TooLarge,
    /// Not a token of a shape toolhost reads.
    #[error("the access token is malformed: {0}")]
    Malformed(&'static str),
    /// `none`, a symmetric algorithm, or one the operator did not allow.
    #[error("the access token's signature algorithm is not one this resource accepts")]
    Algorithm,
    /// Not from an authorization server this resource trusts.
    #[error("the access token is not from an authorization server this resource trusts")]
    Issuer,
    /// The issuer has no key for it (after a refresh of its keys, if one
    /// was allowed).
    #[error("the access token names a signing key its issuer does not publish")]
    UnknownKey,
    /// No key of the issuer verifies it.
    #[error("the access token's signature does not verify")]
    Signature,
    /// Issued for another resource (its audience is not this one).
    #[error("the access token was not issued for this resource (its audience)")]
    Audience,
    /// Past its expiry.
    #[error("the access token has expired")]
    Expired,
    /// Before its not-before time.
    #[error("the access token is not valid yet")]
    NotYetValid,
    /// Introspection says it is not active.
    #[error("the access token is not active")]
    Inactive,
    /// An opaque token, and no introspection is configured.
    #[error(
        "the access token is not a JWT, and this resource has no introspection endpoint to ask"
    )]
    Opaque,
    /// The authorization server could not be asked (its metadata, keys or
    /// introspection endpoint); the token may be fine.
    #[error("the authorization server could not be reached to check the access token; try again")]
    Unavailable,
}

impl Rejection {
    /// Whether the fault is the server's (answer 503), not the token's
    /// (answer 401).
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable)
    }
}
