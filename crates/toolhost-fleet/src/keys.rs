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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_reach_other_keys_are_refused() {
        let k = FleetKeys::new("prod", "exec-17").unwrap();
        assert_eq!(k.catalog, "catalog.prod");
        assert_eq!(k.status, "status.prod.exec-17");
        for bad in ["", "a.b", "*", ">", "a b", "x\n", &"a".repeat(65)] {
            assert!(FleetKeys::new(bad, "d").is_err(), "{bad:?}");
            assert!(FleetKeys::new("g", bad).is_err(), "{bad:?}");
        }
    }
}
