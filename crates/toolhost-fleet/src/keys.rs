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

/// The keys one daemon reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetKeys {
    /// `catalog.<group>`.
    pub catalog: String,
    /// `status.<group>.<daemon>`.
    pub status: String,
    /// `status.<group>.*`, for `fleet status`.
    pub all_status: String,
    /// `bind.<group>.*`: session bindings, one key per token, named by the
    /// token's SHA-256 in hex.
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
            value: toolhost_runtime::log_safe(value, 80).into_owned(),
        })
    }
}

impl FleetKeys {
    /// The keys of daemon `daemon` in group `group`.
    pub fn new(group: &str, daemon: &str) -> Result<Self, KeyError> {
        checked("group", group)?;
        checked("daemon id", daemon)?;
        Ok(Self {
            catalog: format!("catalog.{group}"),
            status: format!("status.{group}.{daemon}"),
            all_status: format!("status.{group}.*"),
            bindings: format!("bind.{group}.*"),
        })
    }
}

/// The SHA-256 a binding key names (`bind.<group>.<64 hex digits>`), if
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
        let k = FleetKeys::new("prod", "exec-17").unwrap();
        assert_eq!(k.catalog, "catalog.prod");
        assert_eq!(k.status, "status.prod.exec-17");
        let hex = "ab".repeat(32);
        assert_eq!(
            binding_digest(&format!("bind.prod.{hex}")),
            Some([0xab; 32])
        );
        for bad in [
            "bind.prod.xyz",
            "bind.prod.",
            &format!("bind.prod.{}", "g".repeat(64)),
        ] {
            assert_eq!(binding_digest(bad), None, "{bad}");
        }
        for bad in ["", "a.b", "*", ">", "a b", "x\n", &"a".repeat(65)] {
            assert!(FleetKeys::new(bad, "d").is_err(), "{bad:?}");
            assert!(FleetKeys::new("g", bad).is_err(), "{bad:?}");
        }
    }
}
