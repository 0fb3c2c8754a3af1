//! Serving the admin API, and connecting to it.

use crate::service::AdminService;
use crate::token::{Bearer, token_path};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use toolhost_net::{ConnectionLimits, limited};
use toolhost_proto::admin::admin_client::AdminClient;
use toolhost_proto::admin::admin_server::AdminServer;

/// Why the admin API could not be served or reached.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Socket trouble.
    #[error("admin socket {path}: {source}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// TCP trouble.
    #[error("admin TCP listener: {0}")]
    Tcp(std::io::Error),
    /// gRPC trouble.
    #[error("admin API: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The daemon is not there.
    #[error(
        "cannot connect to the admin socket {path} (is `toolhost serve` running? A daemon started with `--config FILE` keeps its socket where FILE says: give this command the same `--config FILE`, or `--admin SOCKET`): {detail}"
    )]
    NotRunning {
        /// The socket path.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// The server's end of a relayed admin connection.
struct Relayed(tokio::io::DuplexStream);

impl tonic::transport::server::Connected for Relayed {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for Relayed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Relayed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Serves the admin API on a Unix socket with mode 0600 until `shutdown`.
/// A stale socket file is replaced; a live one (another daemon) is an error.
///
/// The socket is never connectable by anyone else, not even for an
/// instant: it is bound inside a fresh 0700 directory, made 0600 there, and
/// only then renamed into place (a rename keeps the mode and cannot be
/// raced by another user).
pub async fn serve_unix(
    bound: BoundSocket,
    service: AdminService,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let BoundSocket {
        listener,
        token,
        path,
    } = bound;
    let path = path.as_path();
    // A plugin runs as the daemon's user, so the socket's mode does not
    // keep it out. Two locks, either of which holds alone: the token, which
    // a sandboxed plugin cannot read, and the connecting process, which
    // must be known, alive and no plugin's (a peer that cannot be
    // identified is refused).
    let plugins = service.plugins();
    let incoming = tokio_stream::StreamExt::filter(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        move |accepted| match accepted {
            Ok(stream) => {
                use std::os::fd::AsFd as _;
                // Pinned first, checked second, and asked again whether it
                // still runs: an exited peer's pid may name anyone by now.
                match toolhost_sandbox::PeerProcess::of_socket(stream.as_fd()) {
                    Err(e) => {
                        tracing::warn!("refused an admin connection: {e}");
                        false
                    }
                    Ok(peer) if plugins.is_plugin_process(peer.pid()) => {
                        tracing::warn!(
                            pid = peer.pid(),
                            "refused an admin connection from a plugin's process"
                        );
                        false
                    }
                    Ok(peer) if !peer.still_running() => {
                        tracing::warn!(
                            pid = peer.pid(),
                            "refused an admin connection: the process that connected has exited"
                        );
                        false
                    }
                    Ok(_) => true,
                }
            }
            Err(_) => true,
        },
    );
    let incoming = limited(incoming, limits, "admin socket");
    // Through the authority relay (crate::authority): grpc's C core names
    // a Unix socket in a way h2 refuses.
    let incoming = tokio_stream::StreamExt::map(incoming, |accepted| {
        accepted.map(|connection| {
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                if let Err(e) = crate::authority::relay(connection, ours).await {
                    tracing::debug!("admin connection ended: {e}");
                }
            });
            Relayed(theirs)
        })
    });
    let result = builder(limits)
        .add_service(AdminServer::with_interceptor(service, bearer_check(&token)))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await;
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(token_path(path));
    Ok(result?)
}

/// The admin socket, bound and with its token written, not yet served.
/// Binding comes first and apart so that a daemon announces itself only
/// once a CLI that reads the announcement can connect.
#[derive(Debug)]
pub struct BoundSocket {
    listener: tokio::net::UnixListener,
    token: String,
    path: std::path::PathBuf,
}

impl BoundSocket {
    /// Binds the admin socket at `path` (see [`serve_unix`]).
    pub fn bind(path: &Path) -> Result<Self, AdminError> {
        let (listener, token) = bind_private(path)?;
        Ok(Self {
            listener,
            token,
            path: path.to_path_buf(),
        })
    }
}

/// Binds `path` so that no other user can ever connect to it.
/// Its token is written beside it first (`<path>.token`, 0600), so a client
/// that finds the socket finds the token.
fn bind_private(path: &Path) -> Result<(tokio::net::UnixListener, String), AdminError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let err = |source| AdminError::Socket {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another toolhost is serving on it",
        )));
    }
    let private = (0..16u32)
        .map(|attempt| dir.join(format!(".admin-{}-{attempt}", std::process::id())))
        .find(|p| std::fs::DirBuilder::new().mode(0o700).create(p).is_ok())
        .ok_or_else(|| {
            err(std::io::Error::other(
                "cannot create a private directory beside it",
            ))
        })?;
    let result = (|| {
        // The directory's mode does not depend on the umask once set.
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))?;
        let staged = private.join("admin.sock");
        let listener = std::os::unix::net::UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        let token = crate::token::create(&token_path(path))?;
        std::fs::rename(&staged, path)?;
        listener.set_nonblocking(true)?;
        Ok((tokio::net::UnixListener::from_std(listener)?, token))
    })();
    let _ = std::fs::remove_dir_all(&private);
    result.map_err(err)
}

/// The gRPC server with the admin API's connection settings: the server
/// pings so that a live client (a `WatchEvents` stream, say) keeps its
/// connection while a silent peer is closed by the idle timeout.
///
/// A request's headers are held to [`crate::authority::MAX_HEADER_LIST`]
/// (h2's default is 16 MiB): the token is one of them, so until it has
/// been checked a connection costs no more than that.
fn builder(limits: ConnectionLimits) -> tonic::transport::Server {
    #[allow(clippy::cast_possible_truncation)] // 16 KiB
    let max_header_list = crate::authority::MAX_HEADER_LIST as u32;
    tonic::transport::Server::builder()
        .http2_max_header_list_size(max_header_list)
        .http2_keepalive_interval(Some(limits.idle_timeout / 3))
        .http2_keepalive_timeout(Some(limits.idle_timeout / 3))
}

/// Equal in time independent of where the inputs differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves the admin API on TCP; every call needs `authorization: Bearer
/// <token>`, else `UNAUTHENTICATED` and nothing happens.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    token: &str,
    service: AdminService,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let check = bearer_check(token);
    let incoming = limited(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        limits,
        "admin tcp",
    );
    builder(limits)
        .add_service(AdminServer::with_interceptor(service, check))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// Lets a call through only with `authorization: Bearer <token>`,
/// compared in constant time (of digests, so the length does not show).
fn bearer_check(
    token: &str,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone + use<> {
    let expected: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    move |req: tonic::Request<()>| {
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| -> [u8; 32] { Sha256::digest(t.trim().as_bytes()).into() });
        match given {
            Some(g) if constant_time_eq(&g, &expected) => Ok(req),
            _ => Err(tonic::Status::unauthenticated(
                "the admin API needs authorization: Bearer <token>",
            )),
        }
    }
}

/// An admin client: every call carries the token.
pub type Client = AdminClient<InterceptedService<Channel, Bearer>>;

/// A client of the admin API on a Unix socket, with the token read from
/// beside it (`<path>.token`): only the daemon's user, outside any plugin
/// sandbox, can read it.
pub async fn connect_unix(path: &Path) -> Result<Client, AdminError> {
    let token = crate::token::read(path).map_err(|e| AdminError::NotRunning {
        path: path.to_path_buf(),
        detail: format!("cannot read its token {}: {e}", token_path(path).display()),
    })?;
    let bearer = Bearer::new(&token).ok_or_else(|| AdminError::NotRunning {
        path: path.to_path_buf(),
        detail: format!("its token {} is not a token", token_path(path).display()),
    })?;
    let channel = toolhost_proto::contract::connect_unix(
        Endpoint::from_static("http://admin.invalid"),
        path.to_path_buf(),
    )
    .await
    .map_err(|e| AdminError::NotRunning {
        path: path.to_path_buf(),
        detail: std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string),
    })?;
    Ok(AdminClient::with_interceptor(channel, bearer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_comparison() {
        let a = [1u8; 32];
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] = 2;
        assert!(!constant_time_eq(&a, &b));
    }
}
