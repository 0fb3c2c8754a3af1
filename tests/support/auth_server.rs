//! A real authorization server for the OAuth tests: oidc-provider, from
//! `tests/oauth-server` (installed by `scripts/setup-node`), on a loopback
//! port, killed when dropped.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running oidc-provider.
pub struct AuthServer {
    child: std::process::Child,
    /// Its issuer, `http://127.0.0.1:PORT`.
    pub issuer: String,
    /// Where it wrote its private key (for [`AuthServer::forge`]).
    pub key_file: PathBuf,
}

fn server_dir() -> PathBuf {
    crate::workspace_root().join("tests/oauth-server")
}

impl AuthServer {
    /// Starts it on `port`, issuing tokens for `resource` signed by a new
    /// key of id `kid`.
    #[must_use]
    pub fn start(dir: &Path, port: u16, resource: &str, kid: &str) -> Self {
        let key_file = dir.join(format!("as-{port}-{kid}.json"));
        let mut child = std::process::Command::new("node")
            .arg(server_dir().join("server.mjs"))
            .arg(port.to_string())
            .env("RESOURCE", resource)
            .env("KEY_ID", kid)
            .env("KEY_FILE", &key_file)
            .current_dir(server_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start node (scripts/setup-node): {e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(issuer) = line.strip_prefix("listening ") {
                        let _ = tx.send(issuer.to_owned());
                    }
                }
            });
        }
        let issuer = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(i) => i,
            Err(_) => {
                let _ = child.kill();
                panic!("oidc-provider did not start (run scripts/setup-node)");
            }
        };
        Self {
            child,
            issuer,
            key_file,
        }
    }

    /// A client-credentials token for `client` (its secret is
    /// `CLIENT-secret`), asking `scope` for `resource`: Ok(token), or
    /// Err(the server's answer).
    pub async fn token(&self, client: &str, scope: &str, resource: &str) -> Result<String, String> {
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{client}:{client}-secret"));
        let body = format!(
            "grant_type=client_credentials&scope={}&resource={}",
            scope.replace(' ', "%20").replace(':', "%3A"),
            resource.replace(':', "%3A").replace('/', "%2F")
        );
        let (status, answer) = crate::http_request(
            &self.issuer,
            "POST",
            "/token",
            &[
                ("Authorization", &format!("Basic {basic}")),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            &body,
        )
        .await;
        let answer = if answer.starts_with('{') {
            answer
        } else {
            crate::dechunk(&answer)
        };
        if status != 200 {
            return Err(format!("{status}: {answer}"));
        }
        let v: serde_json::Value =
            serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
        v["access_token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| answer.clone())
    }

    /// The hostile tokens of `forge.mjs`, by name, made with this server's
    /// own key for `resource`.
    #[must_use]
    pub fn forge(&self, resource: &str) -> serde_json::Map<String, serde_json::Value> {
        let out = std::process::Command::new("node")
            .arg(server_dir().join("forge.mjs"))
            .arg(&self.key_file)
            .arg(&self.issuer)
            .arg(resource)
            .current_dir(server_dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run forge.mjs: {e}"));
        assert!(
            out.status.success(),
            "forge.mjs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        match serde_json::from_slice(&out.stdout) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => panic!("forge.mjs printed no object"),
        }
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
