//! An issuer's signing keys (its JWKS), and the algorithms a token may be
//! signed with.
//!
//! Only asymmetric keys are kept: a JWKS is public, so a symmetric (`oct`)
//! key in it would be a secret everyone knows, and "HS256 signed with the
//! server's public key" is the classic confusion this refuses by
//! construction (no HMAC algorithm exists here at all). Each key is tied to
//! one family of algorithms by its type and curve, and to one algorithm if
//! it names one, so a token cannot pick how its key is read.
//!
//! What this module must not do: fetch anything (`issuers.rs` does), or
//! keep a key it cannot use for exactly the algorithms it allows.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature;

/// The most keys read from one JWKS; the rest are ignored.
pub const MAX_KEYS: usize = 32;
/// The largest JWKS document read, in bytes.
pub const MAX_JWKS_BYTES: u64 = 256 * 1024;

/// A signature algorithm a token may name (`alg`). There is no `none` and
/// no symmetric algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// RSASSA-PSS with SHA-256.
    Ps256,
    /// RSASSA-PSS with SHA-384.
    Ps384,
    /// RSASSA-PSS with SHA-512.
    Ps512,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// Ed25519.
    EdDsa,
}

impl Algorithm {
    /// Every algorithm, the default allow-list.
    pub const ALL: [Self; 9] = [
        Self::Rs256,
        Self::Rs384,
        Self::Rs512,
        Self::Ps256,
        Self::Ps384,
        Self::Ps512,
        Self::Es256,
        Self::Es384,
        Self::EdDsa,
    ];

    /// The algorithm of a JOSE name, if it is one of ours.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Its JOSE name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Rs384 => "RS384",
            Self::Rs512 => "RS512",
            Self::Ps256 => "PS256",
            Self::Ps384 => "PS384",
            Self::Ps512 => "PS512",
            Self::Es256 => "ES256",
            Self::Es384 => "ES384",
            Self::EdDsa => "EdDSA",
        }
    }
}

/// A public key, by the family it verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Public {
    /// RSA, 2048 to 8192 bits (ring refuses others when verifying).
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed P-256 point (0x04, x, y).
    P256(Vec<u8>),
    /// An uncompressed P-384 point.
    P384(Vec<u8>),
    /// An Ed25519 public key.
    Ed25519(Vec<u8>),
}

/// One usable key of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    kid: Option<String>,
    /// The one algorithm the key was published for, if it says.
    alg: Option<Algorithm>,
    public: Public,
}

impl Key {
    /// Whether this key may verify a token signed with `alg`.
    fn fits(&self, alg: Algorithm) -> bool {
        if self.alg.is_some_and(|a| a != alg) {
            return false;
        }
        matches!(
            (&self.public, alg),
            (
                Public::Rsa { .. },
                Algorithm::Rs256
                    | Algorithm::Rs384
                    | Algorithm::Rs512
                    | Algorithm::Ps256
                    | Algorithm::Ps384
                    | Algorithm::Ps512
            ) | (Public::P256(_), Algorithm::Es256)
                | (Public::P384(_), Algorithm::Es384)
                | (Public::Ed25519(_), Algorithm::EdDsa)
        )
    }

    /// Whether `signature` is this key's over `message` with `alg`.
    pub(crate) fn verifies(&self, alg: Algorithm, message: &[u8], sig: &[u8]) -> bool {
        if !self.fits(alg) {
            return false;
        }
        match &self.public {
            Public::Rsa { n, e } => {
                let params: &signature::RsaParameters = match alg {
                    Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Algorithm::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Algorithm::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Algorithm::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                    Algorithm::Ps384 => &signature::RSA_PSS_2048_8192_SHA384,
                    Algorithm::Ps512 => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                signature::RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            Public::P256(point) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            Public::P384(point) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            Public::Ed25519(x) => signature::UnparsedPublicKey::new(&signature::ED25519, x)
                .verify(message, sig)
                .is_ok(),
        }
    }
}

/// The usable keys of one JWKS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a JWKS was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadKeySet {
    /// Not JSON, or no `keys` list.
    #[error("the JWKS is not a JSON object with a \"keys\" list")]
    Shape,
    /// Nothing in it toolhost may verify with.
    #[error(
        "the JWKS holds no key toolhost verifies with (RSA of 2048 to 8192 bits, EC P-256 or P-384, Ed25519, for signing)"
    )]
    NoUsableKey,
}

impl KeySet {
    /// The usable keys of a JWKS document; keys it cannot use (symmetric,
    /// for encryption, of another curve, malformed) are left out.
    ///
    /// # Errors
    /// The document is not a key set, or holds no usable key.
    pub fn parse(document: &[u8]) -> Result<Self, BadKeySet> {
        let value: serde_json::Value =
            serde_json::from_slice(document).map_err(|_| BadKeySet::Shape)?;
        Self::from_json(&value)
    }

    /// [`KeySet::parse`] of a document already read as JSON.
    ///
    /// # Errors
    /// As [`KeySet::parse`].
    pub fn from_json(value: &serde_json::Value) -> Result<Self, BadKeySet> {
        let list = value
            .get("keys")
            .and_then(serde_json::Value::as_array)
            .ok_or(BadKeySet::Shape)?;
        let keys: Vec<Key> = list.iter().filter_map(key).take(MAX_KEYS).collect();
        if keys.is_empty() {
            return Err(BadKeySet::NoUsableKey);
        }
        Ok(Self { keys })
    }

    /// The keys that may verify a token with this `kid` and `alg`: the one
    /// named, or, for a token that names none, every key of the family.
    pub(crate) fn candidates(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> impl Iterator<Item = &Key> {
        self.keys
            .iter()
            .filter(move |k| k.fits(alg) && (kid.is_none() || k.kid.as_deref() == kid))
    }

    /// Whether a key of this id is in the set.
    #[must_use]
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// How many usable keys it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// One JWK, if toolhost may verify with it.
fn key(jwk: &serde_json::Value) -> Option<Key> {
    let text = |name: &str| jwk.get(name).and_then(serde_json::Value::as_str);
    let bytes = |name: &str| text(name).and_then(|t| URL_SAFE_NO_PAD.decode(t).ok());
    if text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    if let Some(ops) = jwk.get("key_ops") {
        let verify = ops
            .as_array()
            .is_some_and(|o| o.iter().any(|op| op.as_str() == Some("verify")));
        if !verify {
            return None;
        }
    }
    let alg = match text("alg") {
        None => None,
        // A key published for an algorithm toolhost does not allow (HS256,
        // RSA-OAEP, ...) is not a key for any other.
        Some(name) => Some(Algorithm::from_name(name)?),
    };
    let kid = match text("kid") {
        Some(k) if k.len() <= 256 => Some(k.to_owned()),
        Some(_) => return None,
        None => None,
    };
    let public = match (text("kty")?, text("crv")) {
        ("RSA", _) => {
            let (n, e) = (bytes("n")?, bytes("e")?);
            // 2048 to 8192 bits, no leading zero padding games, e at most 4 bytes.
            let n = strip_leading_zeros(n);
            if !(256..=1024).contains(&n.len()) || e.is_empty() || e.len() > 4 {
                return None;
            }
            Public::Rsa { n, e }
        }
        ("EC", Some("P-256")) => Public::P256(point(bytes("x")?, bytes("y")?, 32)?),
        ("EC", Some("P-384")) => Public::P384(point(bytes("x")?, bytes("y")?, 48)?),
        ("OKP", Some("Ed25519")) => {
            let x = bytes("x")?;
            (x.len() == 32).then_some(())?;
            Public::Ed25519(x)
        }
        _ => return None,
    };
    Some(Key { kid, alg, public })
}

fn strip_leading_zeros(mut n: Vec<u8>) -> Vec<u8> {
    let zeros = n.iter().take_while(|b| **b == 0).count();
    n.drain(..zeros);
    n
}

/// The uncompressed point of coordinates `x` and `y`, each `size` bytes.
fn point(x: Vec<u8>, y: Vec<u8>, size: usize) -> Option<Vec<u8>> {
    if x.len() != size || y.len() != size {
        return None;
    }
    let mut p = Vec::with_capacity(1 + 2 * size);
    p.push(0x04);
    p.extend_from_slice(&x);
    p.extend_from_slice(&y);
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<KeySet, BadKeySet> {
        KeySet::parse(v.to_string().as_bytes())
    }

    fn ed25519(kid: &str) -> serde_json::Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": URL_SAFE_NO_PAD.encode([7u8; 32])})
    }

    #[test]
    fn symmetric_and_encryption_keys_are_never_kept() {
        let set = parse(json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "h"},
            {"kty": "OKP", "crv": "Ed25519", "use": "enc", "kid": "e", "x": URL_SAFE_NO_PAD.encode([1u8; 32])},
            {"kty": "OKP", "crv": "Ed25519", "alg": "HS256", "kid": "a", "x": URL_SAFE_NO_PAD.encode([1u8; 32])},
            {"kty": "OKP", "crv": "X25519", "kid": "x", "x": URL_SAFE_NO_PAD.encode([1u8; 32])},
            ed25519("good"),
        ]}))
        .unwrap_or_default();
        assert_eq!(set.len(), 1);
        assert!(set.has_kid("good"));
        assert!(!set.has_kid("h"));
        assert_eq!(
            parse(json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})),
            Err(BadKeySet::NoUsableKey)
        );
        assert_eq!(parse(json!([1, 2])), Err(BadKeySet::Shape));
    }

    #[test]
    fn a_key_is_tied_to_its_family_and_its_named_algorithm() {
        let set = parse(json!({"keys": [ed25519("k")]})).unwrap_or_default();
        assert_eq!(set.candidates(Some("k"), Algorithm::EdDsa).count(), 1);
        assert_eq!(set.candidates(Some("k"), Algorithm::Rs256).count(), 0);
        assert_eq!(set.candidates(Some("other"), Algorithm::EdDsa).count(), 0);
        assert_eq!(set.candidates(None, Algorithm::EdDsa).count(), 1);
        let named = parse(json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "p",
            "x": URL_SAFE_NO_PAD.encode([1u8; 32]), "y": URL_SAFE_NO_PAD.encode([2u8; 32])
        }]}))
        .unwrap_or_default();
        assert_eq!(named.candidates(None, Algorithm::Es256).count(), 1);
        assert_eq!(named.candidates(None, Algorithm::Es384).count(), 0);
    }

    #[test]
    fn short_rsa_keys_are_refused() {
        let n = URL_SAFE_NO_PAD.encode([0xffu8; 128]); // 1024 bits
        let e = URL_SAFE_NO_PAD.encode([1u8, 0, 1]);
        assert_eq!(
            parse(json!({"keys": [{"kty": "RSA", "n": n, "e": e}]})),
            Err(BadKeySet::NoUsableKey)
        );
    }

    #[test]
    fn a_huge_key_set_keeps_a_bounded_number() {
        let keys: Vec<_> = (0..500).map(|i| ed25519(&format!("k{i}"))).collect();
        let set = parse(json!({ "keys": keys })).unwrap_or_default();
        assert_eq!(set.len(), MAX_KEYS);
    }
}
