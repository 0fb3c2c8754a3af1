//! Key names. A group and a daemon id become parts of NATS subjects, so
//! they are held to a safe alphabet: no `.`, `*`, `>` or whitespace, which
//! would let one daemon's key reach into another's.

/// Why a group or daemon id cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{what} {value:?} must be 1 to 64 of a-z, A-Z, 0-9, `_` and `-`")]
pub struct KeyError {
    what: &'static str,
    value: String,
}

/// The bucket and keys one daemon reads and writes. Each group has a
/// bucket of its own, `<prefix>_<group>`: NATS permissions are granted per
/// stream, and a key-value watch names no key in the subject it is
/// created on, so a bucket is the unit a daemon can be confined to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetKeys {
    /// `<prefix>_<group>`.
    pub bucket: String,
    /// `catalog`.
    pub catalog: String,
    /// `placement`: the plugins placed on the group.
    pub placement: String,
    /// `status.<daemon>`.
    pub status: String,
    /// `status.*`, for `fleet status`.
    pub all_status: String,
    /// `bind.*`: session bindings, one key per token, named by the token's
    /// SHA-256 in hex.
    pub bindings: String,
}

fn checked(what: &'static str, value: &str) -> Result<(), KeyError> {
    let ok = (1..=64).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(KeyError {
            what,
            value: toolhost_base::log_safe(value, 80).into_owned(),
        })
    }
}

impl FleetKeys {
    /// The keys of daemon `daemon` in group `group`, in the buckets named
    /// `<prefix>_<group>`.
    pub fn new(prefix: &str, group: &str, daemon: &str) -> Result<Self, KeyError> {
        checked("bucket prefix", prefix)?;
        checked("group", group)?;
        checked("daemon id", daemon)?;
        Ok(Self {
            bucket: format!("{prefix}_{group}"),
            catalog: "catalog".to_owned(),
            placement: "placement".to_owned(),
            status: format!("status.{daemon}"),
            all_status: "status.*".to_owned(),
            bindings: "bind.*".to_owned(),
        })
    }
}

/// The SHA-256 a binding key names (`bind.<64 hex digits>`), if
/// the key is one.
#[must_use]
pub fn binding_digest(key: &str) -> Option<[u8; 32]> {
    let hex = key.rsplit('.').next()?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_reach_other_keys_are_refused() {
        let k = FleetKeys::new("toolhost", "prod", "exec-17").unwrap();
        assert_eq!(k.bucket, "toolhost_prod");
        assert_eq!(k.catalog, "catalog");
        assert_eq!(k.status, "status.exec-17");
        let hex = "ab".repeat(32);
        assert_eq!(binding_digest(&format!("bind.{hex}")), Some([0xab; 32]));
        for bad in ["bind.xyz", "bind.", &format!("bind.{}", "g".repeat(64))] {
            assert_eq!(binding_digest(bad), None, "{bad}");
        }
        for bad in ["", "a.b", "*", ">", "a b", "x\n", &"a".repeat(65)] {
            assert!(FleetKeys::new("toolhost", bad, "d").is_err(), "{bad:?}");
            assert!(FleetKeys::new("toolhost", "g", bad).is_err(), "{bad:?}");
        }
    }
}
