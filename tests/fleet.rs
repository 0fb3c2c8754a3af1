//! A fleet through NATS JetStream key-value, with a real nats-server
//! (scripts/setup-python installs it into .venv): a daemon follows its
//! group's catalog key under the admin push's rules, reports what it
//! applied in its status entry, refuses a hostile value with a reason,
//! keeps serving when the engine goes away, and after a restart with the
//! engine down serves the last catalog it accepted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::Path;
use std::time::Duration;
use toolhost_catalog::Snapshot;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, agent, eventually, listed_names, testplug_dir,
};
use toolhost_manifest::Manifest;

const WAIT: Duration = Duration::from_secs(30);

/// A nats-server with JetStream on a free port, stopped when dropped.
struct Nats {
    child: std::process::Child,
    url: String,
}

impl Nats {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exe = toolhost_e2e::workspace_root().join(".venv/bin/nats-server");
        assert!(exe.is_file(), "no nats-server: run scripts/setup-python");
        let child = std::process::Command::new(exe)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("js"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
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

async fn bucket(url: &str) -> async_nats::jetstream::kv::Store {
    let client = eventually(WAIT, "nats-server", async || {
        async_nats::connect(url).await.ok()
    })
    .await;
    let js = async_nats::jetstream::new(client);
    js.create_key_value(async_nats::jetstream::kv::Config {
        bucket: "toolhost_default".to_owned(),
        history: 5,
        ..Default::default()
    })
    .await
    .unwrap()
}

fn snapshot(plugin: &Path, generation: &str, epoch: u64, revision: u64, tools: usize) -> Vec<u8> {
    let m = Manifest::load(plugin).unwrap();
    let mut s = Snapshot::from_manifests("kandev", generation, revision, [&m]);
    s.epoch = epoch;
    s.tools.truncate(tools);
    prost::Message::encode_to_vec(&toolhost_admin::snapshot_to_proto(&s))
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

async fn status_of(kv: &async_nats::jetstream::kv::Store) -> Option<toolhost_fleet::StatusEntry> {
    let v = kv.get("status.d1").await.ok()??;
    serde_json::from_slice(&v).ok()
}

#[tokio::test]
async fn a_daemon_follows_its_groups_catalog_and_reports_what_it_applied() {
    let root = Scratch::new("fleet");
    let nats = Nats::start(root.path());
    let kv = bucket(&nats.url).await;
    let tp = testplug_dir(root.path(), "tp", "normal");
    let cfg = TestConfig::new(root.path(), std::slice::from_ref(&tp))
        .extra(&format!(
            "[backend.nats]\nurl = \"{}\"\ndaemon = \"d1\"\nheartbeat_s = 1\n",
            nats.url
        ))
        .build();
    let mut d = Daemon::start(root.path(), &cfg, &[]);

    // No backend: the CLI writes the group's catalog.
    let m = Manifest::load(&tp).unwrap();
    let mut first = Snapshot::from_manifests("kandev", "g", 1, [&m]);
    first.epoch = 1_700_000_000_001;
    first.tools.truncate(3);
    let file = root.path().join("catalog.json");
    std::fs::write(&file, serde_json::to_string(&first).unwrap()).unwrap();
    let (ok, out) = cli(&[
        "catalog",
        "push",
        "--nats",
        &nats.url,
        &file.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let s = eventually(WAIT, "the daemon applied revision 1", async || {
        status_of(&kv).await.filter(|s| s.revision == 1)
    })
    .await;
    assert_eq!(
        s.applied.as_ref().map(|a| a.outcome.as_str()),
        Some("accepted")
    );
    let c = agent(&d.url, TOKEN).await;
    assert_eq!(listed_names(&c).await.len(), 3);
    let (ok, out) = cli(&["fleet", "status", "--nats", &nats.url]);
    assert!(
        ok && out.contains("d1") && out.contains("accepted"),
        "{out}"
    );

    // A value that is not a snapshot: refused with a reason, the catalog
    // stays.
    kv.put("catalog", b"garbage".to_vec().into()).await.unwrap();
    let s = eventually(WAIT, "the garbage refused", async || {
        status_of(&kv)
            .await
            .filter(|s| s.applied.as_ref().is_some_and(|a| a.outcome == "refused"))
    })
    .await;
    assert_eq!(s.revision, 1, "{s:?}");
    assert!(s.applied.unwrap().reasons[0].contains("not a toolhost.admin.v1.Snapshot"));
    let (ok, out) = cli(&["fleet", "status", "--nats", &nats.url]);
    assert!(!ok, "a refusing daemon fails the status: {out}");
    assert!(
        out.contains("NACK") && out.contains("not a toolhost.admin.v1.Snapshot"),
        "{out}"
    );

    // A stale push (lower epoch, a dead backend) is said so.
    kv.put(
        "catalog",
        snapshot(&tp, "old", 1_700_000_000_000, 9, 1).into(),
    )
    .await
    .unwrap();
    let s = eventually(WAIT, "the stale value judged", async || {
        status_of(&kv)
            .await
            .filter(|s| s.applied.as_ref().is_some_and(|a| a.outcome == "stale"))
    })
    .await;
    assert_eq!(s.generation, "g");

    // A session binding through the bucket, keyed by the token's SHA-256:
    // the token works; deleting the key revokes it by the next request.
    let token = "fleet-bound-token-0123456789";
    let digest: String =
        sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(token))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
    let key = format!("bind.{digest}");
    let binding = toolhost_admin::admin::SessionBinding {
        surface: "chat".to_owned(),
        task_id: "fleet-task".to_owned(),
        session_id: "fleet-session".to_owned(),
        workspace_id: String::new(),
    };
    kv.put(key.as_str(), prost::Message::encode_to_vec(&binding).into())
        .await
        .unwrap();
    let bound = eventually(WAIT, "the bound token works", async || {
        let r = toolhost_e2e::http_request(
            &d.base(),
            "GET",
            "/mcp",
            &[("authorization", &format!("Bearer {token}"))],
            "",
        )
        .await;
        (r.0 != 401).then_some(r.0)
    })
    .await;
    assert_ne!(bound, 401);
    kv.delete(key.as_str()).await.unwrap();
    eventually(WAIT, "the revoked token refused", async || {
        let r = toolhost_e2e::http_request(
            &d.base(),
            "GET",
            "/mcp",
            &[("authorization", &format!("Bearer {token}"))],
            "",
        )
        .await;
        (r.0 == 401).then_some(())
    })
    .await;

    // The engine goes away: calls keep working; a restart with it down
    // serves the last catalog it accepted.
    drop(nats);
    assert_eq!(listed_names(&c).await.len(), 3);
    let _ = c.cancel().await;
    let _ = d.signal_and_wait(rustix::process::Signal::TERM);
    let d = Daemon::start(root.path(), &cfg, &[]);
    let c = agent(&d.url, TOKEN).await;
    assert_eq!(
        listed_names(&c).await.len(),
        3,
        "the last-good catalog serves"
    );
    assert_eq!(d.metric("toolhost_catalog_last_good").await, Some(1.0));
    let _ = c.cancel().await;
}

/// The permissions a daemon needs, and no more (docs: README, "A fleet
/// through NATS"), as a NATS user that has only those: it follows its
/// group's catalog and writes its own status entry, and it can neither
/// write the catalog, nor another daemon's status, nor read another
/// group's catalog.
#[tokio::test]
async fn a_daemon_needs_only_its_groups_keys_and_its_own_status() {
    let root = Scratch::new("fleet-perms");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = root.path().join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            r#"listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{}" }}
accounts {{
  FLEET {{
    jetstream: enabled
    users = [
      {{ user: backend, password: bpass }}
      {{ user: d1, password: d1pass, permissions: {{
          publish: {{ allow: [
            "$JS.API.INFO",
            "$JS.API.STREAM.INFO.KV_toolhost_default",
            "$JS.API.CONSUMER.CREATE.KV_toolhost_default",
            "$JS.API.CONSUMER.CREATE.KV_toolhost_default.>",
            "$JS.FC.KV_toolhost_default.>",
            "$KV.toolhost_default.status.d1"
          ] }}
          subscribe: {{ allow: ["_INBOX.>"] }}
      }} }}
    ]
  }}
}}
"#,
            root.path().join("js").display()
        ),
    )
    .unwrap();
    let exe = toolhost_e2e::workspace_root().join(".venv/bin/nats-server");
    let mut server = std::process::Command::new(exe)
        .arg("-c")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("nats://127.0.0.1:{port}");
    let as_user = async |user: &str, password: &str| {
        let (user, password) = (user.to_owned(), password.to_owned());
        eventually(WAIT, "nats-server", async || {
            async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
                .connect(url.as_str())
                .await
                .ok()
        })
        .await
    };
    let backend = async_nats::jetstream::new(as_user("backend", "bpass").await);
    let kv = backend
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "toolhost_default".to_owned(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    let tp = testplug_dir(root.path(), "tp", "normal");
    kv.put(
        "catalog",
        snapshot(&tp, "g", 1_700_000_000_001, 1, 2).into(),
    )
    .await
    .unwrap();
    let other = backend
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "toolhost_other".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap();
    other
        .put(
            "catalog",
            snapshot(&tp, "o", 1_700_000_000_001, 1, 1).into(),
        )
        .await
        .unwrap();
    let password = root.path().join("d1.password");
    std::fs::write(&password, "d1pass\n").unwrap();
    let cfg = TestConfig::new(root.path(), std::slice::from_ref(&tp))
        .extra(&format!(
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"d1\"\nheartbeat_s = 1\nuser = \"d1\"\npassword_file = {:?}\n",
            password.display().to_string()
        ))
        .build();
    let d = Daemon::start(root.path(), &cfg, &[]);
    let s = eventually(WAIT, "d1 applied its group's catalog", async || {
        status_of(&kv).await.filter(|s| s.revision == 1)
    })
    .await;
    assert_eq!(s.generation, "g");
    let c = agent(&d.url, TOKEN).await;
    assert_eq!(listed_names(&c).await.len(), 2);
    let _ = c.cancel().await;

    // As d1: what the daemon must not be able to do.
    let d1 = async_nats::jetstream::new(as_user("d1", "d1pass").await);
    let mine = d1.get_key_value("toolhost_default").await.unwrap();
    assert!(
        mine.put("catalog", "x".into()).await.is_err(),
        "d1 wrote the catalog"
    );
    assert!(
        mine.put("status.d2", "x".into()).await.is_err(),
        "d1 wrote d2's status"
    );
    assert!(
        d1.get_key_value("toolhost_other").await.is_err(),
        "d1 reached another group's bucket"
    );
    drop(d);
    let _ = server.kill();
    let _ = server.wait();
}
