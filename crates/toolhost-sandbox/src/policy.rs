//! What a plugin's sandbox should be: the policy the lifecycle builds from
//! a manifest, the operator's grants and the daemon's `[sandbox]` settings,
//! and the names of its rules.
//!
//! The policy is plain data. Nothing here touches the kernel: applying it
//! is the child module's job, and saying what this kernel can enforce of it
//! is the report's.

use std::path::{Path, PathBuf};

/// One rule of the sandbox, as the operator names it in `sandbox_off` and
/// as every status report names it. The one list of rule names: the
/// configuration's validation, the policy and the report all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// `no_new_privs`: nothing the plugin runs gains privileges.
    NoNewPrivs,
    /// Every capability set cleared before exec: bounding, permitted,
    /// effective, inheritable and ambient.
    Capabilities,
    /// The account the plugin runs as: not root (`[sandbox] user` for a
    /// root daemon). Daemon-wide; an operator cannot turn it off for one
    /// plugin.
    User,
    /// The address-space limit.
    Memory,
    /// The open-file limit.
    OpenFiles,
    /// The limit on processes and threads.
    Processes,
    /// The size of the plugin's data directory (a project quota where the
    /// file system has them; measured elsewhere), and of any one file it
    /// writes (`RLIMIT_FSIZE`).
    Disk,
    /// Landlock's file-system rules.
    Filesystem,
    /// Landlock's TCP rules.
    Network,
    /// Landlock's scoping of signals and abstract Unix sockets. It follows
    /// the file-system and network rules; an operator cannot name it.
    Signals,
    /// A CPU limit per call, which a long-lived process cannot have;
    /// reported so that nobody assumes one.
    CpuPerCall,
}

impl Rule {
    /// Every rule, in the order a report lists them.
    pub const ALL: [Self; 11] = [
        Self::NoNewPrivs,
        Self::Capabilities,
        Self::User,
        Self::Memory,
        Self::OpenFiles,
        Self::Processes,
        Self::Disk,
        Self::Filesystem,
        Self::Network,
        Self::Signals,
        Self::CpuPerCall,
    ];

    /// The rules an operator may turn off for one plugin
    /// (`[plugin.<id>] sandbox_off`).
    pub const SWITCHABLE: [Self; 8] = [
        Self::NoNewPrivs,
        Self::Capabilities,
        Self::Memory,
        Self::OpenFiles,
        Self::Processes,
        Self::Disk,
        Self::Filesystem,
        Self::Network,
    ];

    /// The rule's name in configuration, status and metrics.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoNewPrivs => "no_new_privs",
            Self::Capabilities => "capabilities",
            Self::User => "user",
            Self::Memory => "memory",
            Self::OpenFiles => "open_files",
            Self::Processes => "processes",
            Self::Disk => "disk",
            Self::Filesystem => "filesystem",
            Self::Network => "network",
            Self::Signals => "signals",
            Self::CpuPerCall => "cpu_per_call",
        }
    }

    /// The switchable rule called `name`, if there is one.
    #[must_use]
    pub fn switchable(name: &str) -> Option<Self> {
        Self::SWITCHABLE.into_iter().find(|r| r.as_str() == name)
    }

    /// The names of [`Rule::SWITCHABLE`], for an error message.
    #[must_use]
    pub fn switchable_names() -> String {
        Self::SWITCHABLE.map(Self::as_str).join(", ")
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin may do under a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// Read files, list directories, execute.
    ReadExec,
    /// Everything: read, write, create, remove, execute.
    ReadWrite,
}

/// One path and what may be done beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsRule {
    /// A file or directory (a directory covers everything beneath it).
    pub path: PathBuf,
    /// What may be done there.
    pub access: FsAccess,
}

/// TCP access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetPolicy {
    /// No TCP connection, no TCP bind.
    Deny,
    /// Connections to these ports only; no bind.
    Connect(Vec<u16>),
    /// Connections anywhere; no bind.
    Any,
}

/// The sandbox of one plugin: each rule `None` (or `false`) is off.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// Clear every capability set before exec.
    pub drop_capabilities: bool,
    /// Address-space limit in bytes.
    pub memory_bytes: Option<u64>,
    /// Open-file limit.
    pub open_files: Option<u64>,
    /// Limit on processes and threads together.
    pub processes: Option<u64>,
    /// The data directory's quota, and the largest file, in bytes.
    pub disk_bytes: Option<u64>,
    /// The most files and folders the data directory may hold (with
    /// `disk_bytes`): a quota of bytes alone lets empty files take every
    /// inode.
    pub disk_files: Option<u64>,
    /// The file system rule: the paths allowed besides the plugin's own
    /// directories (added by the runtime) and the system's read-only ones.
    /// `None`: the rule is off and the plugin sees what the daemon sees.
    pub filesystem: Option<Vec<FsRule>>,
    /// The network rule; `None`: off.
    pub network: Option<NetPolicy>,
    /// The account the plugin runs as (a root daemon's `[sandbox] user`);
    /// `None`: the daemon's own.
    pub run_as: Option<RunAs>,
}

/// An unprivileged account to run plugins as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// As the operator wrote it (a name, or a number).
    pub name: String,
    /// Its user id (never 0).
    pub uid: u32,
    /// Its primary group id; the plugin gets no other group.
    pub gid: u32,
}

/// What a plugin gets besides the policy's own paths: its directory, its
/// command, its data and socket directories.
#[derive(Debug, Clone, Copy)]
pub struct Own<'a> {
    /// The plugin's installed directory (read and execute).
    pub dir: &'a Path,
    /// Its command (read and execute).
    pub command: &'a Path,
    /// Its data directory: everything, or (over its disk quota, where
    /// no kernel quota holds it) read, remove and truncate only.
    pub data_dir: &'a Path,
    /// Whether it may write its data directory (see `data_dir`).
    pub data_writable: bool,
    /// Its socket directory: read, make a socket, remove (the daemon
    /// writes what it holds).
    pub socket_dir: &'a Path,
    /// Its `$TMPDIR`, in its data directory (or the data directory): where
    /// read-only it may still make a folder and a socket.
    pub temp_dir: &'a Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_switchable_rules_parse() {
        for r in Rule::SWITCHABLE {
            assert_eq!(Rule::switchable(r.as_str()), Some(r));
        }
        assert_eq!(Rule::switchable("signals"), None);
        assert_eq!(Rule::switchable("cpu_per_call"), None);
        assert_eq!(Rule::switchable("Memory"), None);
        let names: std::collections::BTreeSet<_> = Rule::ALL.map(Rule::as_str).into();
        assert_eq!(names.len(), Rule::ALL.len(), "names are distinct");
    }
}
