//! The sandbox each plugin process runs in (Linux): what the kernel, not
//! the plugin's good manners, keeps it from doing.
//!
//! Four mechanisms, each applied in the child between `fork` and `exec`,
//! so the plugin's first instruction already runs inside them:
//!
//! - **`no_new_privs`**: no set-uid program or file capability can give the
//!   plugin (or anything it runs) more rights than it has.
//! - **Resource limits** (`setrlimit`): address space (`RLIMIT_AS`) and open
//!   files (`RLIMIT_NOFILE`).
//! - **A pids cgroup** per process ([`cgroup`]), with `pids.max`: a fork
//!   bomb stops at the limit, and every process the plugin started can be
//!   killed. Where no pids cgroup can be made, `RLIMIT_NPROC` for a
//!   non-root user, and "not enforced" for root.
//! - **Landlock** (`landlock`): the file system, TCP, signals and
//!   abstract Unix sockets.
//!
//! The crate is in four parts: the [`policy`] (plain data, and the one
//! list of rule names, [`Rule`]); the kernel calls (`landlock`,
//! [`cgroup`], and [`child`], which prepares everything in the parent and
//! runs only single system calls in the child); the [`report`] of what
//! this kernel enforces of a policy; and [`peers`], which tells a plugin's
//! process from the operator's.
//!
//! This is the only crate of toolhost that may use `unsafe`, and only to
//! make system calls (each with a `SAFETY:` note); every other crate says
//! `#![forbid(unsafe_code)]`. Process-level calls that are not about
//! plugins live here for that reason too ([`memory`]).
//!
//! What this crate must not do: decide what a plugin is granted (the
//! lifecycle turns a manifest and the operator's grants into a
//! [`SandboxPolicy`]), spawn or supervise processes (the runtime does), or
//! keep state about which plugins run (the runtime's registry does).

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

pub use cgroup::Jail;
pub use child::{Confinement, Prepared};
pub use kernel::{in_plugin_cgroup, remove_cgroup_root};
pub use memory::trim_heap;
pub use peers::{PeerProcess, PeerUnknown, how_plugins_are_recognized, is_plugin_process};
pub use policy::{FsAccess, FsRule, NetPolicy, Own, Rule, RunAs, SandboxPolicy};
pub use report::{RuleState, RuleStatus, enforcement, log_kernel_gaps};
