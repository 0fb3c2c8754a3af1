//! The keys a package is signed with: a trusted key known by its whole
//! key (an id is only the maker's choice, and two keys may carry one),
//! how a key is shown and stored, and who signed a package.
//!
//! What this module must not do: take a key id for a key.

use sha2::{Digest as _, Sha256};

/// A minisign public key: the base64 line, or a `.pub` file (its second
/// line) when `text` names a file.
///
/// # Errors
/// Neither a key nor a readable key file.
pub fn public_key(text: &str) -> Result<minisign::PublicKey, String> {
    let text = text.trim();
    if let Ok(pk) = minisign::PublicKey::from_base64(text) {
        return Ok(pk);
    }
    let body = std::fs::read_to_string(text).map_err(|e| {
        format!("a trusted key is neither a minisign public key nor a readable key file ({e})")
    })?;
    let line = body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
        .unwrap_or_default();
    minisign::PublicKey::from_base64(line)
        .map_err(|e| format!("the key file does not hold a minisign public key ({e})"))
}

/// A key's id as minisign prints it (16 hex digits).
#[must_use]
pub fn key_id_of(keynum: &[u8]) -> String {
    // minisign shows the key number little-endian, as one 64-bit number.
    keynum.iter().rev().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02X}");
        s
    })
}

/// Whom the operator trusts to make packages (`[install]`).
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    /// The public keys whose signatures are trusted.
    pub keys: Vec<minisign::PublicKey>,
    /// Refuse a package no trusted key signed.
    pub require_signature: bool,
    /// Let an upgrade be signed by another key than the installed version
    /// (or not at all).
    pub allow_signer_change: bool,
}

/// A trusted key that verified a package: known by its whole public key,
/// never by its id alone. A minisign key id is 8 bytes its maker chooses,
/// so another key can carry the same id; only the key itself says who
/// signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The id minisign prints (16 hex digits): for a person to recognize.
    pub id: String,
    /// The whole public key, as the base64 line of its `.pub` file: what
    /// is stored and compared.
    pub key: String,
}

impl TrustedKey {
    /// The key `pk`.
    #[must_use]
    pub fn of(pk: &minisign::PublicKey) -> Self {
        Self {
            id: public_key_id(pk),
            key: pk.to_base64(),
        }
    }

    /// The SHA-256 of the public key's bytes, first 16 bytes in hex: what
    /// tells two keys of one id apart at a glance.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.key)
    }

    /// "key ID (sha256:FINGERPRINT)".
    #[must_use]
    pub fn describe(&self) -> String {
        format!("key {} (sha256:{})", self.id, self.fingerprint())
    }

    /// Whether `stored` (what the state file recorded for a plugin's
    /// signer) names this key: its whole key, or (a record from before
    /// keys were stored whole) its id.
    #[must_use]
    pub fn is(&self, stored: &str) -> bool {
        if is_legacy_key_id(stored) {
            return self.id.eq_ignore_ascii_case(stored);
        }
        self.key == stored
    }
}

/// Whether a stored signer is a bare key id (16 hex digits), as records
/// made before keys were stored whole are.
#[must_use]
pub fn is_legacy_key_id(stored: &str) -> bool {
    stored.len() == 16 && stored.bytes().all(|b| b.is_ascii_hexdigit())
}

/// How a stored signer (a whole key, or a legacy id) reads for a person.
#[must_use]
pub fn describe_stored(stored: &str) -> String {
    if is_legacy_key_id(stored) {
        return format!("key {stored}");
    }
    match minisign::PublicKey::from_base64(stored) {
        Ok(pk) => TrustedKey::of(&pk).describe(),
        Err(_) => "an unreadable key".to_owned(),
    }
}

fn fingerprint_of(key: &str) -> String {
    let bytes = minisign::PublicKey::from_base64(key)
        .map(|pk| pk.to_bytes())
        .unwrap_or_else(|_| key.as_bytes().to_vec());
    hex(&Sha256::digest(bytes)[..16])
}

/// How a package was found to be signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// No signature came with it.
    Unsigned,
    /// Verified with this trusted key.
    Trusted(TrustedKey),
    /// Signed with a key the operator does not trust (its id): not
    /// verified, so treated as unsigned.
    UnknownKey(String),
}

impl Signer {
    /// The trusted key, when there is one.
    #[must_use]
    pub fn trusted(&self) -> Option<&TrustedKey> {
        match self {
            Self::Trusted(k) => Some(k),
            _ => None,
        }
    }

    /// The trusted key's id, when there is one.
    #[must_use]
    pub fn key_id(&self) -> Option<&str> {
        self.trusted().map(|k| k.id.as_str())
    }
}

/// Trusted keys that share an id, by their places in the list: a key id
/// is chosen by the key's maker, so two keys of one id are refused when
/// the configuration is read.
#[must_use]
pub fn shared_ids(keys: &[minisign::PublicKey]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (i, a) in keys.iter().enumerate() {
        for (j, b) in keys.iter().enumerate().skip(i + 1) {
            if a.keynum() == b.keynum() {
                out.push((i, j, public_key_id(a)));
            }
        }
    }
    out
}

/// The id of a public key.
#[must_use]
pub fn public_key_id(pk: &minisign::PublicKey) -> String {
    key_id_of(pk.keynum())
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
