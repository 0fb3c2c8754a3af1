//! The plugin wire contract in one place: what toolhost and a plugin agree
//! on outside the `.proto` files. Everything that starts plugins, talks to
//! them, or is a plugin (the runtime, the SDK, the manifest rules, the
//! benchmark) imports it from here, so the contract cannot drift between
//! them. docs/PROTOCOL.md §3 says it in words.
//!
//! - the environment toolhost sets ([`MAGIC_COOKIE_KEY`] and the rest);
//! - the handshake line ([`handshake`]);
//! - the health service a plugin reports ([`HEALTH_SERVICE`]);
//! - how a gRPC channel reaches a Unix socket ([`connect_unix`]).

use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use tonic::transport::{Channel, Endpoint, Uri};

pub mod handshake;

/// The environment variable carrying the magic cookie.
pub const MAGIC_COOKIE_KEY: &str = "KANDEV_PLUGIN";
/// The cookie's value: a plugin run by hand, without it, should say that it
/// needs toolhost rather than serve.
pub const MAGIC_COOKIE_VALUE: &str = "kandev-plugin-v1";
/// The protocol versions toolhost offers, comma-separated.
pub const PROTOCOL_VERSIONS_KEY: &str = "PLUGIN_PROTOCOL_VERSIONS";
/// App protocol 1: unary `InvokeAgentTool`, what every plugin speaks.
pub const PROTOCOL_VERSION: &str = "1";
/// App protocol 2: the streaming `toolhost.plugin.v2.Plugin/Invoke` (rich
/// results, progress, logs, questions). Offered only to plugins whose
/// manifest declares it.
pub const PROTOCOL_VERSION_2: &str = "2";
/// The plugin's data directory.
pub const DATA_DIR_KEY: &str = "KANDEV_PLUGIN_DATA_DIR";
/// The directory the plugin must create its socket in (also its `TMPDIR`).
pub const SOCKET_DIR_KEY: &str = "KANDEV_PLUGIN_SOCKET_DIR";
/// The file holding the plugin's configuration values and secrets (JSON,
/// mode 0600, in its socket directory): `{"config": {..}, "secrets": {..}}`.
/// Set only when the manifest declares `[[config]]` items. The SDKs read it
/// once and delete it.
pub const CONFIG_FILE_KEY: &str = "TOOLHOST_PLUGIN_CONFIG";
/// The file holding the token toolhost presents on every call to this
/// process (mode 0600, in its socket directory, new at each start). A
/// plugin reads it once, deletes it, and answers a tool call only when its
/// metadata carries the token under [`CALL_TOKEN_METADATA`]: anything else
/// that can reach the socket (another plugin, a local process) gets
/// `UNAUTHENTICATED`.
pub const CALL_TOKEN_KEY: &str = "TOOLHOST_PLUGIN_CALL_TOKEN";
/// The gRPC metadata key under which toolhost sends the call token.
pub const CALL_TOKEN_METADATA: &str = "toolhost-call-token";
/// The service name a plugin's `grpc.health.v1` must report `SERVING`.
pub const HEALTH_SERVICE: &str = "plugin";
/// Variables toolhost sets for every plugin; a manifest's `runtime.env`
/// may not.
pub const RESERVED_ENV: [&str; 7] = [
    MAGIC_COOKIE_KEY,
    CONFIG_FILE_KEY,
    CALL_TOKEN_KEY,
    PROTOCOL_VERSIONS_KEY,
    DATA_DIR_KEY,
    SOCKET_DIR_KEY,
    "TMPDIR",
];

/// Connects `endpoint` (its URI is required by tonic and ignored) to the
/// Unix socket at `path`.
pub async fn connect_unix(
    endpoint: Endpoint,
    path: PathBuf,
) -> Result<Channel, tonic::transport::Error> {
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
            }
        }))
        .await
}

/// As [`connect_unix`], with the connection made by `open` each time tonic
/// (re)connects: for a socket that must be opened with checks of its own
/// rather than by path (the runtime's plugin sockets).
pub async fn connect_unix_with<F, Fut>(
    endpoint: Endpoint,
    open: F,
) -> Result<Channel, tonic::transport::Error>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<tokio::net::UnixStream>> + Send + 'static,
{
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let open = open.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(open().await?)) }
        }))
        .await
}

/// As [`connect_unix`], connecting on first use.
#[must_use]
pub fn connect_unix_lazy(endpoint: Endpoint, path: PathBuf) -> Channel {
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let p = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?)) }
    }))
}
