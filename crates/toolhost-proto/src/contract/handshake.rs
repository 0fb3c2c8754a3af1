//! The handshake line, go-plugin style: `CORE|APP|NETWORK|ADDRESS|PROTOCOL`.
//!
//! toolhost speaks core protocol 1 and app protocol 1 or 2 (the one it
//! offered, which the runtime checks), accepts only Unix
//! sockets (a plugin listening on TCP would be reachable by anything on the
//! machine) and only gRPC.

use std::path::PathBuf;

/// What a valid handshake line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The plugin's Unix socket.
    pub socket: PathBuf,
    /// The app protocol version the plugin speaks: 1 or 2.
    pub protocol: u32,
}

/// Why a handshake line was refused. Each says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Not five `|`-separated fields.
    #[error("malformed handshake line (expected five `|`-separated fields, got {fields})")]
    Malformed {
        /// How many fields there were.
        fields: usize,
    },
    /// Core protocol other than 1.
    #[error("core protocol version {0:?} is not supported (toolhost speaks 1)")]
    CoreVersion(String),
    /// App protocol other than the one offered.
    #[error("plugin protocol version {0:?} is not one toolhost speaks (1 or 2)")]
    AppVersion(String),
    /// A TCP address.
    #[error("the plugin listens on TCP ({0}); only Unix sockets are allowed")]
    Tcp(String),
    /// Another network.
    #[error("network {0:?} is not supported; only unix is")]
    Network(String),
    /// Not an absolute socket path.
    #[error("socket address {0:?} must be an absolute path")]
    Address(String),
    /// Not gRPC (go-plugin's netrpc, say).
    #[error("protocol {0:?} is not supported; only grpc is")]
    Protocol(String),
}

/// The line a plugin speaking protocol 1 and serving on `socket` prints.
#[must_use]
pub fn line(socket: &std::path::Path) -> String {
    line_for(super::PROTOCOL_VERSION, socket)
}

/// The line a plugin speaking app protocol `version` and serving on
/// `socket` prints.
#[must_use]
pub fn line_for(version: &str, socket: &std::path::Path) -> String {
    format!("1|{version}|unix|{}|grpc", socket.display())
}

/// Parses one handshake line (without its newline; surrounding whitespace is
/// ignored). Total: any string in, a verdict out. The line may contain
/// anything a plugin printed, so errors quote only short, known fields.
pub fn parse(line: &str) -> Result<Handshake, HandshakeError> {
    let fields: Vec<&str> = line.trim().split('|').collect();
    let [core, app, network, address, protocol] = fields.as_slice() else {
        return Err(HandshakeError::Malformed {
            fields: fields.len(),
        });
    };
    // Quote at most 64 printable ASCII characters of whatever the plugin sent.
    let short = |s: &str| {
        s.chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect::<String>()
    };
    if *core != "1" {
        return Err(HandshakeError::CoreVersion(short(core)));
    }
    let version = match *app {
        "1" => 1,
        "2" => 2,
        other => return Err(HandshakeError::AppVersion(short(other))),
    };
    match *network {
        "unix" => {}
        "tcp" | "tcp4" | "tcp6" => return Err(HandshakeError::Tcp(short(address))),
        other => return Err(HandshakeError::Network(short(other))),
    }
    if !address.starts_with('/') {
        return Err(HandshakeError::Address(short(address)));
    }
    if *protocol != "grpc" {
        return Err(HandshakeError::Protocol(short(protocol)));
    }
    Ok(Handshake {
        socket: PathBuf::from(address),
        protocol: version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_good_line() {
        assert_eq!(
            parse("1|1|unix|/tmp/p/plugin.sock|grpc\n"),
            Ok(Handshake {
                socket: PathBuf::from("/tmp/p/plugin.sock"),
                protocol: 1,
            })
        );
        assert_eq!(
            parse("1|2|unix|/tmp/p/plugin.sock|grpc").map(|h| h.protocol),
            Ok(2)
        );
    }

    #[test]
    fn each_bad_line_says_what_is_wrong() {
        assert_eq!(parse("hello"), Err(HandshakeError::Malformed { fields: 1 }));
        assert_eq!(
            parse("1|1|unix|/s|grpc|cert"),
            Err(HandshakeError::Malformed { fields: 6 })
        );
        assert_eq!(
            parse("2|1|unix|/s|grpc"),
            Err(HandshakeError::CoreVersion("2".into()))
        );
        assert_eq!(
            parse("1|3|unix|/s|grpc"),
            Err(HandshakeError::AppVersion("3".into()))
        );
        assert_eq!(
            parse("1|1|tcp|127.0.0.1:1234|grpc"),
            Err(HandshakeError::Tcp("127.0.0.1:1234".into()))
        );
        assert_eq!(
            parse("1|1|udp|/s|grpc"),
            Err(HandshakeError::Network("udp".into()))
        );
        assert_eq!(
            parse("1|1|unix|rel.sock|grpc"),
            Err(HandshakeError::Address("rel.sock".into()))
        );
        assert_eq!(
            parse("1|1|unix|/s|netrpc"),
            Err(HandshakeError::Protocol("netrpc".into()))
        );
    }

    proptest! {
        #[test]
        fn parsing_is_total(s in ".*") {
            let _ = parse(&s);
        }

        #[test]
        fn errors_stay_short(s in ".{0,2000}") {
            if let Err(e) = parse(&format!("1|1|{s}|{s}|grpc")) {
                prop_assert!(e.to_string().len() < 300);
            }
        }
    }
}
