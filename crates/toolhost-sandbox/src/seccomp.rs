//! The network rule's second half: a seccomp filter for what Landlock's TCP
//! rules leave open.
//!
//! Landlock governs TCP `connect` and `bind`. Around it, a plugin could
//! still open an MPTCP socket (`IPPROTO_MPTCP`, which Landlock's TCP rules
//! do not see), connect through TCP Fast Open (`sendto` with
//! `MSG_FASTOPEN`, or `TCP_FASTOPEN_CONNECT`), use UDP, raw or packet
//! sockets, other address families, or io_uring (whose operations make
//! sockets and send without these system calls). The filter refuses each
//! with `EACCES`:
//!
//! - always: MPTCP; TCP Fast Open in every form; raw IP sockets; every
//!   address family but Unix, IPv4, IPv6 and netlink (the C library asks
//!   netlink for the machine's addresses); io_uring;
//! - when no network is granted: every IPv4 and IPv6 socket, so no TCP,
//!   no UDP, and no listener on an unbound socket.
//!
//! What it leaves, and the report says: a plugin granted network keeps UDP
//! (DNS needs it). A TCP listener on a socket nobody bound is the second
//! filter's (`crate::listen`): no rule on a descriptor number can see it.
//!
//! The same program carries the disk quota's guard when that rule is on
//! (`crate::disk`): no call that moves a file out of its quota project.
//!
//! The program is compiled in the parent; the child installs it with one
//! system call (`child.rs`).

use crate::policy::NetPolicy;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const AF_NETLINK: u64 = 16;
const SOCK_TYPE_MASK: u64 = 0xf;
const SOCK_RAW: u64 = 3;
const IPPROTO_TCP: u64 = 6;
const IPPROTO_MPTCP: u64 = 262;
const TCP_FASTOPEN: u64 = 23;
const TCP_FASTOPEN_CONNECT: u64 = 30;
const MSG_FASTOPEN: u64 = 0x2000_0000;

/// Why no filter could be made for this machine.
#[derive(Debug, thiserror::Error)]
#[error("no seccomp filter for this machine: {0}")]
pub struct Unavailable(String);

/// The architecture the filter is compiled for, if seccompiler knows it.
pub(crate) fn target() -> Result<TargetArch, Unavailable> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| Unavailable(e.to_string()))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, Unavailable> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| Unavailable(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, Unavailable> {
    SeccompRule::new(conditions).map_err(|e| Unavailable(e.to_string()))
}

/// `prctl`'s option that sets (or clears) the child subreaper attribute.
const PR_SET_CHILD_SUBREAPER: u64 = 36;

/// The filter for a plugin: the network rule's (when `network` is on), the
/// disk quota's guard (when `disk`, see `crate::disk`), and with either the
/// subreaper lock; `None` when neither rule is on (a daemon without the
/// sandbox, unprivileged, could not install a filter anyway: the kernel
/// wants `no_new_privs` first).
pub(crate) fn filter(
    network: Option<&NetPolicy>,
    disk: bool,
) -> Result<Option<BpfProgram>, Unavailable> {
    if network.is_none() && !disk {
        return Ok(None);
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // A plugin stays the subreaper of what it starts (`crate::tree`): the
    // prctl that would turn it off is refused. (Were it turned off, what
    // it leaves would come to the daemon as strays, and be swept.)
    rules
        .entry(libc::SYS_prctl)
        .or_default()
        .push(rule(vec![cond(
            0,
            SeccompCmpOp::Eq,
            PR_SET_CHILD_SUBREAPER,
        )?])?);
    if let Some(network) = network {
        network_rules(network, &mut rules)?;
    }
    if disk {
        for (nr, more) in crate::disk::guard_rules().map_err(|e| Unavailable(e.to_string()))? {
            rules.entry(nr).or_default().extend(more);
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        target()?,
    )
    .map_err(|e| Unavailable(e.to_string()))?;
    BpfProgram::try_from(filter)
        .map(Some)
        .map_err(|e| Unavailable(e.to_string()))
}

/// The network rule's part of the filter.
fn network_rules(
    network: &NetPolicy,
    rules: &mut BTreeMap<i64, Vec<SeccompRule>>,
) -> Result<(), Unavailable> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut socket = vec![
        // Any family but the four a runtime uses.
        rule(vec![
            cond(0, Ne, AF_UNIX)?,
            cond(0, Ne, AF_INET)?,
            cond(0, Ne, AF_INET6)?,
            cond(0, Ne, AF_NETLINK)?,
        ])?,
        rule(vec![cond(2, Eq, IPPROTO_MPTCP)?])?,
        rule(vec![
            cond(0, Eq, AF_INET)?,
            cond(1, MaskedEq(SOCK_TYPE_MASK), SOCK_RAW)?,
        ])?,
        rule(vec![
            cond(0, Eq, AF_INET6)?,
            cond(1, MaskedEq(SOCK_TYPE_MASK), SOCK_RAW)?,
        ])?,
    ];
    if *network == NetPolicy::Deny {
        socket.push(rule(vec![cond(0, Eq, AF_INET)?])?);
        socket.push(rule(vec![cond(0, Eq, AF_INET6)?])?);
    }
    rules.insert(libc::SYS_socket, socket);
    // TCP Fast Open: the flag on a send, or the socket option.
    rules.insert(
        libc::SYS_sendto,
        vec![rule(vec![cond(3, MaskedEq(MSG_FASTOPEN), MSG_FASTOPEN)?])?],
    );
    rules.insert(
        libc::SYS_sendmsg,
        vec![rule(vec![cond(2, MaskedEq(MSG_FASTOPEN), MSG_FASTOPEN)?])?],
    );
    rules.insert(
        libc::SYS_sendmmsg,
        vec![rule(vec![cond(3, MaskedEq(MSG_FASTOPEN), MSG_FASTOPEN)?])?],
    );
    rules.insert(
        libc::SYS_setsockopt,
        vec![
            rule(vec![
                cond(1, Eq, IPPROTO_TCP)?,
                cond(2, Eq, TCP_FASTOPEN_CONNECT)?,
            ])?,
            rule(vec![cond(1, Eq, IPPROTO_TCP)?, cond(2, Eq, TCP_FASTOPEN)?])?,
        ],
    );
    // io_uring makes sockets and sends without the calls above.
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_compiles_for_every_policy_on_this_machine() {
        for n in [
            NetPolicy::Deny,
            NetPolicy::Connect(vec![443]),
            NetPolicy::Any,
        ] {
            for disk in [false, true] {
                let program = filter(Some(&n), disk);
                assert!(
                    program
                        .as_ref()
                        .is_ok_and(|p| p.as_ref().is_some_and(|p| !p.is_empty())),
                    "{n:?}: {program:?}"
                );
            }
        }
        assert!(matches!(filter(None, false), Ok(None)));
        assert!(matches!(filter(None, true), Ok(Some(_))));
    }
}
