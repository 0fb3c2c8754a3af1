//! JWT access tokens (RFC 9068), read and checked without any I/O.
//!
//! The order matters and is the point of this module: the size first
//! (before a byte is decoded), then the header's algorithm against the
//! allow-list, then the issuer against the trusted list, and only then a
//! key of that issuer for that algorithm. The claims are trusted only
//! after the signature holds: `iss` is read unverified solely to pick
//! which issuer's keys to try, and is compared exactly again.
//!
//! What this module must not do: put any part of a token in an error, or
//! accept a token whose algorithm the token alone chose.

use crate::caller::Caller;
use crate::keys::{Algorithm, KeySet};
use crate::rejection::Rejection;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

/// The longest access token read, in bytes (a header carries it; real
/// ones are under 4 KiB).
pub const MAX_TOKEN_BYTES: usize = 12 * 1024;

/// What a token must be issued for.
#[derive(Debug, Clone)]
pub struct Expectations<'a> {
    /// The issuer whose keys are being tried (exactly `iss`).
    pub issuer: &'a str,
    /// This resource's canonical URI: `aud` must hold it.
    pub audience: &'a str,
    /// Algorithms the operator allows.
    pub algorithms: &'a [Algorithm],
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub skew: u64,
    /// Now, in seconds since the Unix epoch.
    pub now: u64,
}

/// A token split and decoded, its signature not yet checked.
#[derive(Debug)]
pub struct Unverified<'t> {
    alg: Algorithm,
    kid: Option<String>,
    claims: Map<String, Value>,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// Whether `token` has the shape of a JWS (three dot-separated parts).
#[must_use]
pub fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

/// Splits and decodes a compact JWS, checking its size and algorithm.
///
/// # Errors
/// The token is too large, not a JWS, or names an algorithm that is not
/// allowed (`none`, any HMAC, anything not in `algorithms`).
pub fn decode<'t>(token: &'t str, algorithms: &[Algorithm]) -> Result<Unverified<'t>, Rejection> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Rejection::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Rejection::Malformed(
            "it is not a JWT (three dot-separated parts)",
        ));
    };
    let header = object(header).ok_or(Rejection::Malformed("its header is not base64url JSON"))?;
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("none");
    let alg = Algorithm::from_name(alg)
        .filter(|a| algorithms.contains(a))
        .ok_or(Rejection::Algorithm)?;
    // A critical extension toolhost does not understand must be refused
    // (RFC 7515 §4.1.11); it understands none.
    if header.contains_key("crit") {
        return Err(Rejection::Malformed("its header names critical extensions"));
    }
    // RFC 9068 types access tokens `at+jwt`; a token that says it is
    // something else (an ID token, a logout token) is not one.
    if let Some(typ) = header.get("typ") {
        let typ = typ.as_str().unwrap_or_default().to_ascii_lowercase();
        if !matches!(typ.as_str(), "at+jwt" | "application/at+jwt" | "jwt") {
            return Err(Rejection::Malformed(
                "its type (typ) is not an access token's",
            ));
        }
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(k)) if k.len() <= 256 => Some(k.clone()),
        Some(_) => {
            return Err(Rejection::Malformed(
                "its key id (kid) is not a short string",
            ));
        }
    };
    let claims =
        object(payload).ok_or(Rejection::Malformed("its claims are not base64url JSON"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| Rejection::Malformed("its signature is not base64url"))?;
    let signing_input = &token[..header_len(token)];
    Ok(Unverified {
        alg,
        kid,
        claims,
        signing_input,
        signature,
    })
}

/// The length of `header.payload` in a token known to have three parts.
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

fn object(part: &str) -> Option<Map<String, Value>> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

impl Unverified<'_> {
    /// The issuer the token claims, unverified: only to choose whose keys
    /// to try.
    #[must_use]
    pub fn claimed_issuer(&self) -> Option<&str> {
        self.claims.get("iss").and_then(Value::as_str)
    }

    /// The key id the token names.
    #[must_use]
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The algorithm it was signed with (already allowed).
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// Whether `keys` holds a key this token could be checked with.
    #[must_use]
    pub fn has_candidate(&self, keys: &KeySet) -> bool {
        keys.candidates(self.kid.as_deref(), self.alg)
            .next()
            .is_some()
    }

    /// Checks the signature on `keys`, then the claims against `expect`.
    ///
    /// # Errors
    /// No key of the set verifies the signature, or a claim does not hold.
    pub fn verify(self, keys: &KeySet, expect: &Expectations<'_>) -> Result<Caller, Rejection> {
        let mut candidates = keys.candidates(self.kid.as_deref(), self.alg).peekable();
        if candidates.peek().is_none() {
            return Err(Rejection::UnknownKey);
        }
        let signed = candidates
            .any(|k| k.verifies(self.alg, self.signing_input.as_bytes(), &self.signature));
        if !signed {
            return Err(Rejection::Signature);
        }
        check_claims(self.claims, expect)
    }
}

/// The claims of a verified token, against what this resource expects.
fn check_claims(
    claims: Map<String, Value>,
    expect: &Expectations<'_>,
) -> Result<Caller, Rejection> {
    if claims.get("iss").and_then(Value::as_str) != Some(expect.issuer) {
        return Err(Rejection::Issuer);
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == expect.audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(expect.audience)),
        _ => false,
    };
    if !audience_ok {
        return Err(Rejection::Audience);
    }
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or(Rejection::Malformed("it has no expiry (exp)"))?;
    if exp.saturating_add(expect.skew) <= expect.now {
        return Err(Rejection::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = nbf
            .as_u64()
            .ok_or(Rejection::Malformed("its not-before (nbf) is not a time"))?;
        if nbf > expect.now.saturating_add(expect.skew) {
            return Err(Rejection::NotYetValid);
        }
    }
    Caller::from_claims(expect.issuer, claims, exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair as _};
    use serde_json::json;

    const RESOURCE: &str = "https://tools.example/mcp";
    const ISSUER: &str = "https://auth.example";

    struct Signer {
        pair: Ed25519KeyPair,
    }

    impl Signer {
        fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map(|d| d.as_ref().to_vec());
            let pair = pkcs8.ok().and_then(|d| Ed25519KeyPair::from_pkcs8(&d).ok());
            match pair {
                Some(pair) => Self { pair },
                None => panic!("ring makes an Ed25519 key"),
            }
        }

        fn jwks(&self, kid: &str) -> KeySet {
            let x = URL_SAFE_NO_PAD.encode(self.pair.public_key().as_ref());
            let doc = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x}]});
            KeySet::parse(doc.to_string().as_bytes()).unwrap_or_default()
        }

        fn token(&self, header: Value, claims: Value) -> String {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let sig = self.pair.sign(input.as_bytes());
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
        }
    }

    fn claims(now: u64) -> Value {
        json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "client_id": "cli",
               "scope": "tools tickets:write", "exp": now + 300, "iat": now})
    }

    fn expect(now: u64) -> Expectations<'static> {
        Expectations {
            issuer: ISSUER,
            audience: RESOURCE,
            algorithms: &Algorithm::ALL,
            skew: 30,
            now,
        }
    }

    fn check(token: &str, keys: &KeySet, now: u64) -> Result<Caller, Rejection> {
        decode(token, &Algorithm::ALL)?.verify(keys, &expect(now))
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_good_token_names_its_caller() {
        let s = Signer::new();
        let t = s.token(
            json!({"alg": "EdDSA", "kid": "k1", "typ": "at+jwt"}),
            claims(NOW),
        );
        let c = check(&t, &s.jwks("k1"), NOW);
        let c = c.unwrap_or_else(|e| panic!("accepted: {e}"));
        assert_eq!(c.subject, "alice");
        assert_eq!(c.client_id.as_deref(), Some("cli"));
        assert_eq!(
            c.scopes,
            vec!["tools".to_owned(), "tickets:write".to_owned()]
        );
    }

    #[test]
    fn the_attacks_are_refused() {
        let s = Signer::new();
        let keys = s.jwks("k1");
        let good_header = json!({"alg": "EdDSA", "kid": "k1"});
        // alg none, unsigned.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(json!({"alg": "none"}).to_string()),
            URL_SAFE_NO_PAD.encode(claims(NOW).to_string())
        );
        assert_eq!(check(&none, &keys, NOW).err(), Some(Rejection::Algorithm));
        // HS256 with the public key as the HMAC secret: no HMAC exists here.
        let hs = s.token(json!({"alg": "HS256", "kid": "k1"}), claims(NOW));
        assert_eq!(check(&hs, &keys, NOW).err(), Some(Rejection::Algorithm));
        // Another algorithm than the key's family.
        let rs = s.token(json!({"alg": "RS256", "kid": "k1"}), claims(NOW));
        assert_eq!(check(&rs, &keys, NOW).err(), Some(Rejection::UnknownKey));
        // A kid not in the set.
        let other = s.token(json!({"alg": "EdDSA", "kid": "k9"}), claims(NOW));
        assert_eq!(check(&other, &keys, NOW).err(), Some(Rejection::UnknownKey));
        // Another key with the same kid.
        let forger = Signer::new();
        let forged = forger.token(good_header.clone(), claims(NOW));
        assert_eq!(check(&forged, &keys, NOW).err(), Some(Rejection::Signature));
        // Claims changed after signing.
        let t = s.token(good_header.clone(), claims(NOW));
        let mut parts: Vec<&str> = t.split('.').collect();
        let mut c = claims(NOW);
        c["sub"] = json!("mallory");
        let tampered_claims = URL_SAFE_NO_PAD.encode(c.to_string());
        parts[1] = &tampered_claims;
        assert_eq!(
            check(&parts.join("."), &keys, NOW).err(),
            Some(Rejection::Signature)
        );
        // Another resource's token.
        let mut c = claims(NOW);
        c["aud"] = json!(["https://other.example/mcp"]);
        let t = s.token(good_header.clone(), c);
        assert_eq!(check(&t, &keys, NOW).err(), Some(Rejection::Audience));
        // No audience at all.
        let mut c = claims(NOW);
        c.as_object_mut().map(|m| m.remove("aud"));
        let t = s.token(good_header.clone(), c);
        assert_eq!(check(&t, &keys, NOW).err(), Some(Rejection::Audience));
        // Expired beyond the skew; not yet valid beyond it.
        let t = s.token(good_header.clone(), claims(NOW - 400));
        assert_eq!(check(&t, &keys, NOW).err(), Some(Rejection::Expired));
        let mut c = claims(NOW);
        c["nbf"] = json!(NOW + 120);
        let t = s.token(good_header.clone(), c);
        assert_eq!(check(&t, &keys, NOW).err(), Some(Rejection::NotYetValid));
        // Within the skew both ways.
        let t = s.token(good_header.clone(), claims(NOW - 310));
        assert!(check(&t, &keys, NOW).is_ok());
        // Another issuer, though signed by this issuer's key.
        let mut c = claims(NOW);
        c["iss"] = json!("https://evil.example");
        let t = s.token(good_header.clone(), c);
        assert_eq!(check(&t, &keys, NOW).err(), Some(Rejection::Issuer));
        // An ID token's type.
        let t = s.token(
            json!({"alg": "EdDSA", "kid": "k1", "typ": "id_token+jwt"}),
            claims(NOW),
        );
        assert!(matches!(
            check(&t, &keys, NOW),
            Err(Rejection::Malformed(_))
        ));
        // Critical extensions.
        let t = s.token(
            json!({"alg": "EdDSA", "kid": "k1", "crit": ["b64"], "b64": false}),
            claims(NOW),
        );
        assert!(matches!(
            check(&t, &keys, NOW),
            Err(Rejection::Malformed(_))
        ));
        // A megabyte.
        let big = "a".repeat(1024 * 1024);
        assert_eq!(check(&big, &keys, NOW).err(), Some(Rejection::TooLarge));
        // No subject.
        let mut c = claims(NOW);
        c.as_object_mut().map(|m| m.remove("sub"));
        let t = s.token(good_header, c);
        assert!(matches!(
            check(&t, &keys, NOW),
            Err(Rejection::Malformed(_))
        ));
    }

    #[test]
    fn an_algorithm_left_off_the_allow_list_is_refused() {
        let s = Signer::new();
        let t = s.token(json!({"alg": "EdDSA", "kid": "k1"}), claims(NOW));
        let only_rsa = [Algorithm::Rs256];
        assert_eq!(decode(&t, &only_rsa).err(), Some(Rejection::Algorithm));
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics_or_is_accepted(token in "[A-Za-z0-9_.-]{0,400}") {
            let s = Signer::new();
            proptest::prop_assert!(check(&token, &s.jwks("k1"), NOW).is_err());
        }
    }
}
