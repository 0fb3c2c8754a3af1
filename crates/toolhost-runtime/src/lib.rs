//! Runs plugins: docs/PROTOCOL.md §3 to §5.
//!
//! Each installed plugin gets one supervisor task ([`supervise`], or
//! [`Plugins::supervise`] for a daemon's registry) that owns its process
//! from start to reaping:
//!
//! 1. **Start**: the plugin's command runs in its own process group, with a
//!    parent-death signal so it cannot outlive toolhost, no inherited
//!    descriptor but 0, 1 and 2, a clean environment (a few base variables,
//!    what the operator passes, the manifest's, then the protocol's: the
//!    magic cookie, `PLUGIN_PROTOCOL_VERSIONS` set to the one version its
//!    manifest declares, its data directory, its own socket directory
//!    ([`sockets`], also its `TMPDIR`) and, when it takes configuration,
//!    the path of a 0600 file holding it), and inside its sandbox
//!    (`toolhost-sandbox`: limits, a pids cgroup, Landlock), applied before
//!    its first instruction.
//! 2. **Handshake** (`toolhost_proto::contract`): the first stdout line must be
//!    `1|<version>|unix|<socket>|grpc` within the startup timeout, naming
//!    the protocol offered (1 or 2) and a socket inside the directory
//!    toolhost gave it; then the gRPC channel connects over that socket and
//!    the standard health check of service `plugin` must answer SERVING.
//!    Every later line on stdout or stderr becomes a `tracing` event tagged
//!    with the plugin id, escaped and rate-limited.
//! 3. **Ready**: a [`PluginClient`] is published in the plugin's state;
//!    health is probed periodically. Protocol 1 calls are one unary
//!    `InvokeAgentTool`, sent straight over HTTP/2 on a connection of
//!    their own (`unary`, made at the first call); protocol 2 calls are
//!    one stream each ([`CallStream`]).
//! 4. **Trouble**: an exit, or three failed probes in a row, stops the process
//!    group, fails every call in flight at once, and restarts after an
//!    exponential backoff with full jitter. Too many restarts in a window and
//!    the plugin is `failed` until an operator restarts it.
//! 5. **Stop**: SIGTERM to the group, a grace period, SIGKILL, every process
//!    left in its cgroup killed, and the child is always waited for: no
//!    zombie, no orphan.
//!
//! State is observable through a `watch` channel per plugin. The daemon's
//! [`Plugins`] registry holds every supervised plugin by id and version,
//! and the process-group leaders of their processes ([`Leaders`]), which
//! is how the admin socket recognizes a plugin's process.
//!
//! What this crate must not do: decide which tools exist or whether a caller
//! may use them (the catalog and the pipeline do), decide what a plugin is
//! granted (the lifecycle does), make a system call of its own that needs
//! `unsafe` (the sandbox crate does), or retry a call. A call is attempted
//! once; after a transport failure the answer is "may or may not have taken
//! effect".

#![forbid(unsafe_code)]

mod client;
mod descriptors;
mod health;
mod leaders;
mod logs;
mod process;
mod registry;
mod slots;
pub mod sockets;
mod spawner;
mod spec;
mod supervisor;
mod temp;
mod unary;

pub use client::{
    CallStream, DEFAULT_MAX_ANSWER_BYTES, Described, InvokeError, MAX_SHAPE_SCHEMA_BYTES,
    MAX_SHAPES_BYTES, PluginClient, ToolShape, shapes_of,
};
pub use leaders::Leaders;

pub use process::StartError;
pub use registry::{PluginUnavailable, Plugins};
pub use slots::{CallSlot, CallSlots};
pub use sockets::{remove_run_dir, remove_stale_run_dirs};
pub use spec::{Delivered, PluginSpec};
pub use supervisor::{CRASH_LOOP, Phase, PluginHandle, PluginState, SupervisorConfig, supervise};
