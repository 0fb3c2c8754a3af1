//! The admin socket's token: a credential no sandboxed plugin can read.
//!
//! A plugin runs as the daemon's user, so the socket's 0600 mode does not
//! keep it out, and a check of the connecting process can be raced (a
//! child connects, hands the socket over, and exits). So every call on
//! the socket also needs `authorization: Bearer <token>`, where the token
//! is 128 random bits the daemon writes at start, 0600, beside the socket
//! (`<socket>.token`), before the socket appears. The CLI and
//! `connect_unix` read it from there; a sandboxed plugin
//! cannot (Landlock keeps it out of the daemon's state), whatever it does
//! with processes. A daemon start writes a new one.

use std::path::{Path, PathBuf};
use tonic::metadata::{Ascii, MetadataValue};

/// Where the token of the admin socket at `socket` lives.
#[must_use]
pub fn token_path(socket: &Path) -> PathBuf {
    let mut name = socket
        .file_name()
        .map(std::ffi::OsStr::to_os_string)
        .unwrap_or_default();
    name.push(".token");
    socket.with_file_name(name)
}

/// Makes a new token and writes it to `at` whole and privately
/// (`toolhost_base::files::write_private`), so a reader sees the old token
/// or the new.
pub(crate) fn create(at: &Path) -> std::io::Result<String> {
    let token = toolhost_base::ids::unguessable_id()?;
    toolhost_base::files::write_private(at, token.as_bytes())?;
    Ok(token)
}

/// The token of the admin socket at `socket`.
pub fn read(socket: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(token_path(socket))?;
    Ok(text.trim().to_owned())
}

/// Adds the token to every call of a client.
#[derive(Debug, Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Bearer {
    /// The header for `token`; `None` when it cannot be a header value.
    #[must_use]
    pub fn new(token: &str) -> Option<Self> {
        format!("Bearer {token}").parse().ok().map(Self)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_sits_beside_the_socket_private_and_new_each_time() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("toolhost-token-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let socket = dir.join("admin.sock");
        let path = token_path(&socket);
        assert_eq!(path, dir.join("admin.sock.token"));
        let first = create(&path).unwrap_or_default();
        assert_eq!(first.len(), 32);
        assert_eq!(read(&socket).ok().as_deref(), Some(first.as_str()));
        let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        let second = create(&path).unwrap_or_default();
        assert_ne!(first, second);
        assert_eq!(read(&socket).ok().as_deref(), Some(second.as_str()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
