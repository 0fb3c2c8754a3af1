//! A real OCI registry for the tests: the CNCF distribution registry
//! (Debian's `docker-registry`), started on a free loopback port with a
//! self-signed certificate and htpasswd authentication, its storage in a
//! scratch directory; and `skopeo`, to show other tools read what
//! toolhost writes. `.ci/run` installs both.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The user and password the registry's htpasswd file holds.
pub const USER: &str = "alice";
/// Her password.
pub const PASSWORD: &str = "s3cret-registry";

/// A running registry, stopped when dropped.
pub struct RegistryServer {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The registry's certificate (its own CA).
    pub ca: PathBuf,
    /// A Docker-format auth file with the registry's credentials.
    pub auth_file: PathBuf,
    /// The registry's storage.
    pub storage: PathBuf,
    dir: PathBuf,
    tls: bool,
    auth: bool,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn need(program: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{program} is not installed: .ci/run installs it (apt-get install docker-registry skopeo apache2-utils openssl)"
    );
}

impl RegistryServer {
    /// Starts a registry under `dir`: TLS and htpasswd when asked.
    #[must_use]
    pub fn start(dir: &Path, tls: bool, auth: bool) -> Self {
        Self::start_at(dir, tls, auth, free_port())
    }

    /// [`Self::start`] on `port` (to start one again where it was).
    #[must_use]
    pub fn start_at(dir: &Path, tls: bool, auth: bool, port: u16) -> Self {
        Self::start_inner(dir, tls, auth, None, port)
    }

    /// A TLS registry that takes only tokens from `token` (the token flow:
    /// a 401 names the realm, the client asks it for a token with its
    /// credentials, and the registry checks the token's signature).
    #[must_use]
    pub fn start_with_tokens(dir: &Path, token: &crate::token_server::TokenServer) -> Self {
        let section = format!(
            "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
            token.realm,
            crate::token_server::SERVICE,
            crate::token_server::ISSUER,
            token.cert.display()
        );
        Self::start_inner(dir, true, true, Some(section), free_port())
    }

    fn start_inner(dir: &Path, tls: bool, auth: bool, token: Option<String>, port: u16) -> Self {
        std::fs::create_dir_all(dir).expect("the registry's directory");
        let ca = dir.join("cert.pem");
        let key = dir.join("key.pem");
        let cert = dir.join("server.pem");
        if tls && !ca.is_file() {
            // A CA of the test's own, and the registry's certificate
            // signed by it, as an operator's private CA would be.
            let ca_key = dir.join("ca-key.pem");
            let csr = dir.join("server.csr");
            let ext = dir.join("server.ext");
            std::fs::write(&ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").expect("the extensions file");
            let ec = [
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
            ];
            let steps: [Vec<std::ffi::OsString>; 3] = [
                [
                    &["req", "-x509"][..],
                    &ec,
                    &["-days", "2", "-subj", "/CN=toolhost tests CA", "-keyout"],
                ]
                .concat()
                .iter()
                .map(Into::into)
                .chain([ca_key.clone().into(), "-out".into(), ca.clone().into()])
                .collect(),
                [&["req"][..], &ec, &["-subj", "/CN=localhost", "-keyout"]]
                    .concat()
                    .iter()
                    .map(Into::into)
                    .chain([key.clone().into(), "-out".into(), csr.clone().into()])
                    .collect(),
                ["x509", "-req", "-days", "2", "-CAcreateserial", "-in"]
                    .iter()
                    .map(Into::into)
                    .chain([
                        csr.clone().into(),
                        "-CA".into(),
                        ca.clone().into(),
                        "-CAkey".into(),
                        ca_key.clone().into(),
                        "-extfile".into(),
                        ext.clone().into(),
                        "-out".into(),
                        cert.clone().into(),
                    ])
                    .collect(),
            ];
            for args in steps {
                let out = Command::new(need("openssl"))
                    .args(&args)
                    .output()
                    .expect("openssl runs");
                assert!(
                    out.status.success(),
                    "openssl: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let htpasswd = dir.join("htpasswd");
        if auth && !htpasswd.is_file() {
            let out = Command::new(need("htpasswd"))
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd runs");
            assert!(out.status.success(), "htpasswd failed");
            std::fs::write(&htpasswd, out.stdout).expect("the htpasswd file");
        }
        let storage = dir.join("storage");
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: toolhost-tests\n",
            storage.display()
        );
        if tls {
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
        }
        if let Some(section) = token {
            config.push_str(&section);
        } else if auth {
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: toolhost-tests\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_file = dir.join("config.yml");
        std::fs::write(&config_file, config).expect("the registry's configuration");
        let log = std::fs::File::create(dir.join("registry.log")).expect("the registry's log");
        let child = Command::new(need("docker-registry"))
            .arg("serve")
            .arg(&config_file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        use base64::Engine as _;
        let auth_file = dir.join("auth.json");
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        std::fs::write(
            &auth_file,
            serde_json::json!({ "auths": { addr.clone(): { "auth": token } } }).to_string(),
        )
        .expect("the auth file");
        let s = Self {
            child,
            addr,
            ca,
            auth_file,
            storage,
            dir: dir.to_path_buf(),
            tls,
            auth,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(&s.addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the registry did not listen: {}",
                std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
            );
            std::thread::yield_now();
            std::thread::park_timeout(std::time::Duration::from_millis(20));
        }
        s
    }

    /// Pushes `archive` (and its signature beside it) to `reference` with
    /// `toolhost push`, this registry's credentials and CA; the digest it
    /// printed.
    #[must_use]
    pub fn push(&self, archive: &Path, reference: &str) -> String {
        let ca = self.ca.display().to_string();
        let archive = archive.display().to_string();
        let (ok, text) = crate::cli_env(
            &[("REGISTRY_AUTH_FILE", self.auth_file.as_path())],
            &["push", &archive, reference, "--ca-file", &ca],
        );
        assert!(
            ok,
            "push failed: {text}\nthe registry logged: {}",
            self.log()
        );
        text.lines()
            .find_map(|l| l.strip_prefix("digest: "))
            .unwrap_or_else(|| panic!("push prints the digest: {text}"))
            .to_owned()
    }

    /// What the registry logged (its errors).
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// Stops it, keeping its storage.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port, with the same storage.
    #[must_use]
    pub fn restart(mut self) -> Self {
        self.stop();
        let port: u16 = self
            .addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        Self::start_at(&self.dir, self.tls, self.auth, port)
    }

    /// `skopeo` with this registry's credentials and CA, args after.
    #[must_use]
    pub fn skopeo(&self, args: &[&str]) -> (bool, String) {
        let mut cmd = Command::new(need("skopeo"));
        cmd.args(args)
            .env("REGISTRY_AUTH_FILE", &self.auth_file)
            // skopeo reads a registry's CA from a directory named for it.
            .env("HOME", &self.dir);
        let out = cmd.output().expect("skopeo runs");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Packs the plugin at `dir` into `out` with `toolhost pack`, signed with
/// the secret key `key` when given.
pub fn pack(dir: &Path, out: &Path, key: Option<&Path>) {
    let mut args = vec![
        "pack".to_owned(),
        dir.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
    ];
    if let Some(k) = key {
        args.extend(["--sign".to_owned(), k.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, text) = crate::cli(&args);
    assert!(ok, "pack failed: {text}");
}
