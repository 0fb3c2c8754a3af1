//! The account plugins run as, in one place: looked up once, when the
//! configuration is read ([`run_as`]); given the plugin's data and socket
//! directories before each start, and its data taken back when it runs as
//! the daemon again ([`hand_over`], [`reclaim`]); and switched to in the
//! child before `exec`.
//!
//! A root daemon's plugins run as root with every capability cleared.
//! That holds as long as Landlock does: without it, root without
//! capabilities still owns every root-owned file (`/etc/passwd` is
//! writable by its owner). `[sandbox] user` takes even that away: the
//! plugin runs as an account of the operator's choosing, which owns
//! nothing but the plugin's data and socket directories.

use crate::policy::RunAs;

mod hand_over;
pub use hand_over::{HandOverError, hand_over, reclaim};

/// Why `[sandbox] user` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// No such account.
    #[error("[sandbox] user {0:?}: no such user on this machine")]
    Unknown(String),
    /// The account is root: it would take away nothing.
    #[error("[sandbox] user {0:?} is root (uid 0); name an unprivileged account")]
    Root(String),
    /// Only root may switch accounts.
    #[error(
        "[sandbox] user {0:?}: only a daemon running as root can run plugins as another user (this one runs as uid {1}); remove the setting"
    )]
    NotRoot(String, u32),
}

/// Resolves `name` (an account name, a number, or `uid:gid`) for a daemon
/// running as the current user.
///
/// # Errors
/// [`AccountError`] when the account is unknown or root, or this daemon is
/// not root.
pub fn run_as(name: &str) -> Result<RunAs, AccountError> {
    let me = rustix::process::geteuid();
    if !me.is_root() {
        return Err(AccountError::NotRoot(name.to_owned(), me.as_raw()));
    }
    let (uid, gid) = if let Some((u, g)) = name.split_once(':') {
        match (u.parse(), g.parse()) {
            (Ok(u), Ok(g)) => (u, g),
            _ => return Err(AccountError::Unknown(name.to_owned())),
        }
    } else if let Ok(uid) = name.parse::<u32>() {
        // A bare number: its group is the account's, or the same number.
        lookup(None, Some(uid)).unwrap_or((uid, uid))
    } else {
        lookup(Some(name), None).ok_or_else(|| AccountError::Unknown(name.to_owned()))?
    };
    if uid == 0 {
        return Err(AccountError::Root(name.to_owned()));
    }
    Ok(RunAs {
        name: name.to_owned(),
        uid,
        gid,
    })
}

/// `(uid, gid)` of an account by name or by uid, through the C library
/// (so accounts from LDAP or systemd's dynamic users are found too).
#[allow(unsafe_code)]
fn lookup(name: Option<&str>, uid: Option<u32>) -> Option<(u32, u32)> {
    let cname = name.map(std::ffi::CString::new).transpose().ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local (`buf` with its true
    // length); the reentrant calls write only into them.
    let rc = unsafe {
        match (&cname, uid) {
            (Some(n), _) => libc::getpwnam_r(
                n.as_ptr(),
                &raw mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &raw mut found,
            ),
            (None, Some(u)) => libc::getpwuid_r(
                u,
                &raw mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &raw mut found,
            ),
            (None, None) => return None,
        }
    };
    (rc == 0 && !found.is_null()).then_some((entry.pw_uid, entry.pw_gid))
}

/// In the child, after `fork`: no supplementary groups, then the group,
/// then the user (all three of real, effective and saved, so there is no
/// way back), then the parent-death signal again (a change of
/// credentials clears it). Single system calls only.
pub(crate) fn switch_in_child(uid: u32, gid: u32) -> std::io::Result<()> {
    // Raw system calls, not glibc's setres[ug]id, which would broadcast to
    // every thread with a lock: they change this (only) thread, which is
    // all there is after fork.
    crate::sys::set_groups(&[])?;
    crate::sys::set_res_gid(gid.into(), gid.into(), gid.into())?;
    crate::sys::set_res_uid(uid.into(), uid.into(), uid.into())?;
    #[allow(clippy::cast_sign_loss)] // SIGKILL is 9
    crate::sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_unknown_accounts_are_refused_and_a_real_one_resolves() {
        if !rustix::process::geteuid().is_root() {
            assert!(matches!(run_as("nobody"), Err(AccountError::NotRoot(..))));
            return;
        }
        assert!(matches!(run_as("root"), Err(AccountError::Root(_))));
        assert!(matches!(run_as("0"), Err(AccountError::Root(_))));
        assert!(matches!(
            run_as("no-such-user-here"),
            Err(AccountError::Unknown(_))
        ));
        let nobody = run_as("nobody").expect("nobody exists");
        assert_ne!(nobody.uid, 0);
        assert_eq!(
            run_as("1234:5678").map(|r| (r.uid, r.gid)).ok(),
            Some((1234, 5678))
        );
    }
}
