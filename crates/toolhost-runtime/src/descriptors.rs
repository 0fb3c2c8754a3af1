//! Whether this process is out of file descriptors right now.
//!
//! A start that fails for lack of descriptors is not the plugin's fault,
//! and the supervisor retries it without counting it toward `failed`. The
//! error alone does not always say so: which step of a start runs out
//! depends on how many descriptors are free at that moment (a pipe, the
//! socket directory, a sandbox rule, the connection to the plugin's
//! socket, a stream the plugin never got to answer on), and several of
//! those steps report what they saw, not `EMFILE`. So a failed start also
//! looks at the table itself: a process within a few descriptors of its
//! limit when a start failed was short of them, whatever the error says.
//!
//! What this module must not do: run on a call's path (it lists
//! `/proc/self/fd`), or decide anything when it cannot tell (no limit, no
//! `/proc`): then it answers "not short".

/// How close to the limit counts as out: the few descriptors a start
/// takes at once (pipes, the socket directory, a connection).
const MARGIN: u64 = 8;

/// Whether the open descriptors are within [`MARGIN`] of `RLIMIT_NOFILE`
/// now. Listing them needs a descriptor too: a listing refused for lack of
/// one is the plainest "short" there is.
pub(crate) fn short_now() -> bool {
    let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current else {
        return false;
    };
    match std::fs::read_dir("/proc/self/fd") {
        // The listing's own descriptor is among the entries.
        Ok(entries) => near_limit(
            u64::try_from(entries.count())
                .unwrap_or(u64::MAX)
                .saturating_sub(1),
            limit,
        ),
        Err(e) => matches!(e.raw_os_error(), Some(23 | 24)),
    }
}

/// Whether `open` descriptors leave fewer than [`MARGIN`] under `limit`.
fn near_limit(open: u64, limit: u64) -> bool {
    open.saturating_add(MARGIN) >= limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_process_with_descriptors_to_spare_is_not_short() {
        // The test harness's limit is the default's hundreds or more; a
        // few are open.
        assert!(!short_now());
    }

    #[test]
    fn short_is_within_a_start_s_few_descriptors_of_the_limit() {
        assert!(near_limit(1024, 1024));
        assert!(near_limit(1020, 1024));
        assert!(near_limit(1016, 1024));
        assert!(!near_limit(1015, 1024));
        assert!(!near_limit(10, 1024));
        // A limit lower than the margin: always short.
        assert!(near_limit(0, 4));
        assert!(near_limit(u64::MAX, 1024));
    }
}
