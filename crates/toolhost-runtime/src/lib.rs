//! Runs plugins: docs/PROTOCOL.md §3 to §5.
//!
//! Each installed plugin gets one supervisor task ([`supervise`]) that owns
//! its process from start to reaping:
//!
//! 1. **Start**: the plugin's command runs in its own process group, with a
//!    parent-death signal (Linux) so it cannot outlive toolhost, no inherited
//!    descriptor but 0, 1 and 2, and a clean environment: a few base
//!    variables, what the operator passes, the manifest's, then the magic
//!    cookie, `PLUGIN_PROTOCOL_VERSIONS=1`, its data directory and its own
//!    socket directory ([`sockets`], also its `TMPDIR`).
//! 2. **Handshake** (`toolhost_proto::contract`): the first stdout line must be
//!    `1|1|unix|<socket>|grpc` within the startup timeout; then the gRPC
//!    channel connects over the Unix socket (which must be inside the socket
//!    directory toolhost gave it) and the standard health check of
//!    service `plugin` must answer SERVING. Every later line on stdout or
//!    stderr becomes a `tracing` event tagged with the plugin id, escaped and
//!    rate-limited.
//! 3. **Ready**: a [`PluginClient`] is published in the plugin's state; health
//!    is probed periodically.
//! 4. **Trouble**: an exit, or three failed probes in a row, stops the process
//!    group, fails every call in flight at once, and restarts after an
//!    exponential backoff with full jitter. Too many restarts in a window and
//!    the plugin is `failed` until an operator restarts it.
//! 5. **Stop**: SIGTERM to the group, a grace period, SIGKILL, and the child is
//!    always waited for: no zombie, no orphan.
//!
//! State is observable through a `watch` channel per plugin.
//!
//! What this crate must not do: decide which tools exist or whether a caller
//! may use them (the catalog and the pipeline do), or retry a call. A call is
//! attempted once; after a transport failure the answer is "may or may not
//! have taken effect".

mod client;
mod logs;
mod process;
pub mod sandbox;
pub mod sockets;
mod spec;
mod supervisor;

pub use client::{CallSlot, DEFAULT_MAX_ANSWER_BYTES, InvokeError, PluginClient};
pub use logs::{Bucket, log_safe};
pub use process::StartError;
pub use sockets::{remove_run_dir, remove_stale_run_dirs};
pub use spec::{Delivered, PluginSpec};
pub use supervisor::{Phase, PluginHandle, PluginState, SupervisorConfig, supervise};
