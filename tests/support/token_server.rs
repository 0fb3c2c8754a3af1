//! A registry token server, as Docker's token authentication has one: a
//! client sends its credentials (Basic) to the realm with the service and
//! the scope it wants, and gets a JWT (ES256, the signing certificate in
//! `x5c`) that the distribution registry verifies against its
//! `rootcertbundle`. Plain HTTP on loopback; signing by `openssl`.

use base64::Engine as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The service the registry names itself.
pub const SERVICE: &str = "toolhost-test-registry";
/// The tokens' issuer.
pub const ISSUER: &str = "toolhost-test-tokens";

/// A running token server.
pub struct TokenServer {
    /// `http://127.0.0.1:PORT/token`.
    pub realm: String,
    /// The signing certificate (the registry's root bundle).
    pub cert: PathBuf,
    /// How many tokens it issued.
    pub issued: Arc<AtomicUsize>,
    /// How many requests it refused (no or wrong credentials).
    pub refused: Arc<AtomicUsize>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ECDSA signature in DER (`SEQUENCE { r, s }`) as JWS wants it: r and
/// s, 32 bytes each.
fn raw_signature(der: &[u8]) -> Vec<u8> {
    let mut i = 2;
    let mut out = Vec::with_capacity(64);
    for _ in 0..2 {
        assert_eq!(der[i], 0x02, "an INTEGER");
        let len = der[i + 1] as usize;
        let int = &der[i + 2..i + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0u8, 32 - int.len()));
        out.extend_from_slice(int);
        i += 2 + len;
    }
    out
}

fn sign(key: &Path, input: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("openssl reads");
    let out = child.wait_with_output().expect("openssl signs");
    raw_signature(&out.stdout)
}

impl TokenServer {
    /// Starts one under `dir`, giving tokens to `user`:`password` only.
    #[must_use]
    pub fn start(dir: &Path, user: &str, password: &str) -> Self {
        std::fs::create_dir_all(dir).expect("the token server's directory");
        let (key, cert) = (dir.join("token-key.pem"), dir.join("token-cert.pem"));
        let ok = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=toolhost test tokens",
                "-keyout",
            ])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl runs")
            .success();
        assert!(ok, "openssl made no token certificate");
        let der = std::process::Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert)
            .output()
            .expect("openssl runs")
            .stdout;
        let x5c = base64::engine::general_purpose::STANDARD.encode(der);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let realm = format!(
            "http://{}/token",
            listener.local_addr().expect("an address")
        );
        let (issued, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        {
            let (issued, refused) = (Arc::clone(&issued), Arc::clone(&refused));
            std::thread::spawn(move || {
                for s in listener.incoming() {
                    let Ok(mut s) = s else { return };
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
                        if s.read(&mut b).unwrap_or(0) == 0 {
                            break;
                        }
                        head.push(b[0]);
                    }
                    let head = String::from_utf8_lossy(&head).to_string();
                    let authorized = head.lines().any(|l| {
                        l.split_once(':').is_some_and(|(k, v)| {
                            k.eq_ignore_ascii_case("authorization") && v.trim() == expected
                        })
                    });
                    if !authorized {
                        refused.fetch_add(1, Ordering::SeqCst);
                        let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
                        continue;
                    }
                    let query = head
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .split_once('?')
                        .map_or("", |(_, q)| q)
                        .to_owned();
                    let scope = query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("scope="))
                        .map(|v| {
                            v.replace("%3A", ":")
                                .replace("%2C", ",")
                                .replace("%2F", "/")
                        })
                        .unwrap_or_default();
                    let mut parts = scope.splitn(3, ':');
                    let (kind, name, actions) = (
                        parts.next().unwrap_or(""),
                        parts.next().unwrap_or(""),
                        parts.next().unwrap_or(""),
                    );
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    let header = serde_json::json!({ "typ": "JWT", "alg": "ES256", "x5c": [x5c] });
                    let claims = serde_json::json!({
                        "iss": ISSUER, "sub": "alice", "aud": SERVICE,
                        "exp": now + 300, "nbf": now - 10, "iat": now,
                        "jti": format!("t{}", issued.load(Ordering::SeqCst)),
                        "access": [{ "type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>() }]
                    });
                    let input = format!(
                        "{}.{}",
                        b64(header.to_string().as_bytes()),
                        b64(claims.to_string().as_bytes())
                    );
                    let jwt = format!("{input}.{}", b64(&sign(&key, input.as_bytes())));
                    let body =
                        serde_json::json!({ "token": jwt, "access_token": jwt, "expires_in": 300 })
                            .to_string();
                    issued.fetch_add(1, Ordering::SeqCst);
                    let _ = s.write_all(
                        format!("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len()).as_bytes(),
                    );
                }
            });
        }
        Self {
            realm,
            cert,
            issued,
            refused,
        }
    }
}
