//! The sandbox each plugin process runs in (Linux): what the kernel, not
//! the plugin's good manners, keeps it from doing.
//!
//! Seven mechanisms, each applied in the child between `fork` and `exec`
//! ([`child`]), so the plugin's first instruction already runs inside
//! them:
//!
//! - **`no_new_privs`**: no set-uid program or file capability can give the
//!   plugin (or anything it runs) more rights than it has.
//! - **Capabilities dropped**: every set cleared (bounding, permitted,
//!   effective, inheritable, ambient) before `exec`.
//! - **An account** ([`account`]): under `[sandbox] user` a root daemon
//!   runs each plugin as that user, with no other group; the hand-over
//!   opens exactly the plugin's own directories to it.
//! - **Resource limits** (`setrlimit`): address space (`RLIMIT_AS`), open
//!   files (`RLIMIT_NOFILE`), file size, and a data directory's disk quota
//!   ([`disk`]: a project quota, a file system of its own, or measured).
//! - **A pids cgroup** per process ([`cgroup`]), with `pids.max`: a fork
//!   bomb stops at the limit, and every process the plugin started can be
//!   killed. Where no pids cgroup can be made, `RLIMIT_NPROC` for a
//!   non-root user, and "not enforced" for root.
//! - **Landlock** (`landlock`): the file system, TCP connect and bind,
//!   signals and abstract Unix sockets.
//! - **A seccomp filter** ([`seccomp`]): no raw, packet or MPTCP socket, no
//!   io_uring, no TCP Fast Open, no IPv4 or IPv6 socket at all when the
//!   network is denied; a `listen()` is sent to the daemon, whose handler
//!   thread ([`listen`]) answers it (no TCP listener, bound or not).
//!
//! The crate is in four parts: the [`policy`] (plain data, and the one
//! list of rule names, [`Rule`]); the kernel mechanisms above; the
//! [`report`] of what this kernel enforces of a policy; and [`peers`],
//! which tells a plugin's process from the operator's.
//!
//! This is the only crate of toolhost that may use `unsafe`, and only to
//! make system calls: each raw call is one small function with its own
//! `SAFETY:` note (`sys`, and the Landlock, `listen()` and quota modules for their
//! own calls), and the code that uses them is safe Rust. Every other crate
//! says `#![forbid(unsafe_code)]`. Process-level calls that are not about
//! plugins live here for that reason too ([`memory`]).
//!
//! What this crate must not do: decide what a plugin is granted (the
//! lifecycle turns a manifest and the operator's grants into a
//! [`SandboxPolicy`]), or spawn or supervise plugin processes (the runtime
//! does), or keep state about which plugins run (the runtime's registry
//! does). The one thread it runs is the `listen()` handler, which only
//! answers the kernel's notifications.

pub mod account;
pub mod cgroup;
pub mod child;
pub mod disk;
mod kernel;
mod landlock;
pub mod listen;
pub mod memory;
pub mod peers;
pub mod policy;
pub mod report;
pub mod seccomp;
mod sys;
pub mod tree;

pub use cgroup::Jail;
pub use child::{Confinement, Prepared};
pub use kernel::{in_plugin_cgroup, remove_cgroup_root};
pub use memory::{release_code_pages, trim_heap};
pub use peers::{PeerProcess, PeerUnknown, how_plugins_are_recognized, is_plugin_process};
pub use policy::{FsAccess, FsRule, NetPolicy, Own, Rule, RunAs, SandboxPolicy};
pub use report::{RuleState, RuleStatus, enforcement, log_kernel_gaps};
