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
    Daemon, Scratch, TOKEN, TestConfig, agent, cli, cli_at, eventually, listed_names, testplug_dir,
};
use toolhost_manifest::Manifest;

const WAIT: Duration = Duration::from_secs(30);

use toolhost_e2e::nats::Nats;

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
    prost::Message::encode_to_vec(&toolhost_managed::snapshot_to_proto(&s))
}

async fn status_of(kv: &async_nats::jetstream::kv::Store) -> Option<toolhost_fleet::StatusEntry> {
    status_of_daemon(kv, "d1").await
}

async fn status_of_daemon(
    kv: &async_nats::jetstream::kv::Store,
    daemon: &str,
) -> Option<toolhost_fleet::StatusEntry> {
    let v = kv.get(format!("status.{daemon}")).await.ok()??;
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
    // The operator's view of the link: `toolhost status` and the metrics.
    let admin = root.path().join("state/admin.sock");
    let (ok, out) = cli_at(&admin, &["status"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("fleet     connected to nats://127.0.0.1:")
            && out.contains("bucket toolhost_default as d1")
            && out.contains("accepted"),
        "{out}"
    );
    d.wait_metric("toolhost_fleet_connected", 1.0).await;

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
    d.wait_metric("toolhost_fleet_connected", 0.0).await;
    let (_, out) = cli_at(&admin, &["status"]);
    assert!(out.contains("fleet     NOT CONNECTED"), "{out}");
    let _ = c.cancel().await;
    let _ = d.signal_and_wait(rustix::process::Signal::TERM);
    let d = Daemon::start(root.path(), &cfg, &[]);
    let c = agent(&d.url, TOKEN).await;
    assert_eq!(
        listed_names(&c).await.len(),
        3,
        "the last-good catalog serves"
    );
    d.wait_metric("toolhost_catalog_last_good", 1.0).await;
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
    let (server, url) = restricted_nats(root.path(), "d1", &["$KV.toolhost_default.status.d1"]);
    let as_user = async |user: &str, password: &str| connect_as(&url, user, password).await;
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
    drop(server);
}

/// A daemon whose NATS user lacks a permission it needs only once values
/// flow (`$JS.FC...`, the reply to the stream's flow control, which the
/// client sends by itself): it says so in `toolhost status` and its status
/// entry, and `fleet status` flags it NACK, instead of silently stopping.
#[tokio::test]
async fn a_permission_the_daemon_lacks_while_following_is_named_where_operators_look() {
    let root = Scratch::new("fleet-fc");
    let (server, url) = restricted_nats_without(
        root.path(),
        "d1",
        &["$KV.toolhost_default.status.d1"],
        &["$JS.FC.KV_toolhost_default.>"],
    );
    let backend = async_nats::jetstream::new(connect_as(&url, "backend", "bpass").await);
    let kv = backend
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "toolhost_default".to_owned(),
            history: 5,
            max_value_size: 8 << 20,
            ..Default::default()
        })
        .await
        .unwrap();
    let tp = testplug_dir(root.path(), "tp", "normal");
    let password = root.path().join("d1.password");
    std::fs::write(&password, "d1pass\n").unwrap();
    let cfg = TestConfig::new(root.path(), std::slice::from_ref(&tp))
        .extra(&format!(
            // Heartbeats of 3 s: a refusal stays named for ten of them,
            // time enough for a loaded machine's CLI to read it.
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"d1\"\nheartbeat_s = 3\nuser = \"d1\"\npassword_file = {:?}\n",
            password.display().to_string()
        ))
        .build();
    let d = Daemon::start(root.path(), &cfg, &[]);
    eventually(WAIT, "d1's first status", async || status_of(&kv).await).await;
    // Values large enough that the stream asks for flow control.
    for revision in 1..=4 {
        let mut big = snapshot(&tp, "g", 1_700_000_000_001, revision, 2);
        if revision < 4 {
            big = vec![b'x'; 2_500_000];
        }
        kv.put("catalog", big.into()).await.unwrap();
    }
    let entry = eventually(WAIT, "the refusal in d1's status entry", async || {
        status_of(&kv).await.filter(|s| s.refused.is_some())
    })
    .await;
    assert!(
        entry
            .refused
            .as_deref()
            .is_some_and(|r| r.contains("Permissions Violation")),
        "{entry:?}"
    );
    let backend_password = root.path().join("backend.password");
    std::fs::write(&backend_password, "bpass\n").unwrap();
    let (ok, out) = cli(&[
        "fleet",
        "status",
        "--nats",
        &url,
        "--user",
        "backend",
        "--password-file",
        &backend_password.display().to_string(),
    ]);
    assert!(
        !ok && out.contains("NACK") && out.contains("Permissions Violation"),
        "{out}"
    );
    let admin = root.path().join("state/admin.sock");
    let status = eventually(WAIT, "the refusal in toolhost status", async || {
        let (_, out) = toolhost_e2e::cli_at(&admin, &["status"]);
        out.contains("Permissions Violation").then_some(out)
    })
    .await;
    assert!(status.contains("$JS.FC"), "{status}");
    drop(d);
    drop(server);
}

/// A backend with exactly the permissions CONTRACT.md §7 lists for one
/// (and `fleet status` with its own): it creates the group's bucket, writes
/// the catalog and a binding, and reads every daemon's status.
#[tokio::test]
async fn a_backend_needs_only_the_permissions_the_contract_lists() {
    let root = Scratch::new("fleet-backend-perms");
    let port = free_port();
    let conf = root.path().join("nats.conf");
    let backend = [
        "$JS.API.INFO",
        "$JS.API.STREAM.CREATE.KV_toolhost_default",
        "$JS.API.STREAM.INFO.KV_toolhost_default",
        "$KV.toolhost_default.catalog",
        "$KV.toolhost_default.tools.>",
        "$KV.toolhost_default.bind.>",
        "$JS.API.DIRECT.GET.KV_toolhost_default.$KV.toolhost_default.catalog",
    ];
    // `fleet status` reads as a daemon follows, plus direct gets.
    let mut reader = FOLLOWER.to_vec();
    reader.push("$JS.API.DIRECT.GET.KV_toolhost_default.>");
    std::fs::write(
        &conf,
        format!(
            r#"listen: 127.0.0.1:{port}
max_payload: 8MB
jetstream {{ store_dir: "{}" }}
accounts {{
  FLEET {{
    jetstream: enabled
    users = [
      {{ user: ops, password: opspass, permissions: {{ publish: {{ allow: {backend:?} }}, subscribe: {{ allow: ["_INBOX.>"] }} }} }}
      {{ user: watcher, password: watcherpass, permissions: {{ publish: {{ allow: {reader:?} }}, subscribe: {{ allow: ["_INBOX.>"] }} }} }}
      {{ user: d1, password: d1pass }}
    ]
  }}
}}
"#,
            root.path().join("js").display()
        ),
    )
    .unwrap();
    let (server, url) = nats_with(&conf, port);
    let _ready = connect_as(&url, "ops", "opspass").await;
    let tp = testplug_dir(root.path(), "tp", "normal");
    // A sentence for the server's instructions, which must survive the
    // push and the fleet's wire.
    let manifest = tp.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen(
            "name = \"echo\"\n",
            "name = \"echo\"\ninstructions = \"Echo repeats the message n times.\"\n",
            1,
        ),
    )
    .unwrap();
    let m = Manifest::load(&tp).unwrap();
    assert!(
        m.tools.iter().any(|t| t.instructions.is_some()),
        "the manifest's instructions line did not land"
    );
    let mut snap = Snapshot::from_manifests("kandev", "g", 1, [&m]);
    snap.epoch = 1_700_000_000_001;
    let file = root.path().join("catalog.json");
    std::fs::write(&file, serde_json::to_string(&snap).unwrap()).unwrap();
    for (user, pass) in [("ops", "opspass"), ("watcher", "watcherpass")] {
        std::fs::write(root.path().join(user), format!("{pass}\n")).unwrap();
    }
    let creds = |user: &str| {
        [
            "--user".to_owned(),
            user.to_owned(),
            "--password-file".to_owned(),
            root.path().join(user).display().to_string(),
        ]
    };
    let ops = creds("ops");
    let watcher = creds("watcher");
    let mut push = vec!["fleet", "push", "--nats", &url];
    push.extend(ops.iter().map(String::as_str));
    let path = file.display().to_string();
    push.push(&path);
    let (ok, out) = cli(&push);
    assert!(ok, "fleet push as the backend: {out}");
    // A daemon (unrestricted here) follows, and the watcher reads it.
    std::fs::write(root.path().join("d1.password"), "d1pass\n").unwrap();
    let cfg = TestConfig::new(root.path(), std::slice::from_ref(&tp))
        .extra(&format!(
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"d1\"\nheartbeat_s = 1\nuser = \"d1\"\npassword_file = \"d1.password\"\n"
        ))
        .build();
    let d = Daemon::start(root.path(), &cfg, &[]);
    let mut status = vec!["fleet", "status", "--nats", &url];
    status.extend(watcher.iter().map(String::as_str));
    // Polled by hand, so a failure shows what the watcher last printed.
    let deadline = std::time::Instant::now() + WAIT;
    let out = loop {
        let (ok, out) = cli(&status);
        if ok && out.contains("d1") && out.contains("accepted") {
            break out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watcher never read d1 serving revision 1: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(out.contains("revision 1"), "{out}");
    // The pushed catalog kept the tool's instructions: agents read them.
    let c = agent(&d.url, TOKEN).await;
    let instructions = c
        .peer_info()
        .and_then(|i| i.instructions.clone())
        .unwrap_or_default();
    assert!(
        instructions.contains("Echo repeats the message n times."),
        "{instructions}"
    );
    drop(d);
    drop(server);
}

/// What a daemon of the default group publishes to follow the catalog:
/// the README's list.
const FOLLOWER: [&str; 4] = [
    "$JS.API.STREAM.INFO.KV_toolhost_default",
    "$JS.API.CONSUMER.CREATE.KV_toolhost_default",
    "$JS.API.CONSUMER.CREATE.KV_toolhost_default.>",
    "$JS.FC.KV_toolhost_default.>",
];

/// A NATS server with an account holding the user `backend` (password
/// `bpass`, allowed everything) and `daemon` (password `<daemon>pass`)
/// with the permissions a daemon of the default group needs to follow
/// the catalog, plus `more` subjects it may publish to.
fn restricted_nats(root: &Path, daemon: &str, more: &[&str]) -> (Nats, String) {
    restricted_nats_without(root, daemon, more, &[])
}

/// [`restricted_nats`] with the daemon's user denied `less` of what it
/// needs.
fn restricted_nats_without(
    root: &Path,
    daemon: &str,
    more: &[&str],
    less: &[&str],
) -> (Nats, String) {
    let port = free_port();
    let mut publish: Vec<&str> = FOLLOWER.into_iter().filter(|p| !less.contains(p)).collect();
    publish.extend_from_slice(more);
    let conf = root.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            r#"listen: 127.0.0.1:{port}
max_payload: 8MB
jetstream {{ store_dir: "{}" }}
accounts {{
  FLEET {{
    jetstream: enabled
    users = [
      {{ user: backend, password: bpass }}
      {{ user: {daemon}, password: {daemon}pass, permissions: {{
          publish: {{ allow: {publish:?} }}
          subscribe: {{ allow: ["_INBOX.>"] }}
      }} }}
    ]
  }}
}}
"#,
            root.join("js").display()
        ),
    )
    .unwrap();
    nats_with(&conf, port)
}

/// A client of `url` as `user`, once the server is up.
async fn connect_as(url: &str, user: &str, password: &str) -> async_nats::Client {
    eventually(WAIT, "nats-server", async || {
        async_nats::ConnectOptions::with_user_and_password(user.to_owned(), password.to_owned())
            .connect(url)
            .await
            .ok()
    })
    .await
}

/// A NATS server from a configuration file, stopped when dropped.
fn nats_with(conf: &Path, port: u16) -> (Nats, String) {
    let nats = Nats::with_config(conf, port);
    let url = nats.url.clone();
    (nats, url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A daemon `id` of the default group, in `root/<id>`, with an agent on it.
async fn member(
    root: &Path,
    id: &str,
    plugin: &Path,
    url: &str,
) -> (Daemon, toolhost_e2e::AgentClient) {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = TestConfig::new(&dir, &[plugin.to_path_buf()])
        .extra(&format!(
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"{id}\"\nheartbeat_s = 1\n"
        ))
        .build();
    let d = Daemon::start(&dir, &cfg, &[]);
    let c = agent(&d.url, TOKEN).await;
    (d, c)
}

fn list_changed(c: &toolhost_e2e::AgentClient) -> usize {
    c.service()
        .list_changed
        .load(std::sync::atomic::Ordering::SeqCst)
}

/// Waits until every daemon's status entry satisfies `ok`.
async fn all_report(
    kv: &async_nats::jetstream::kv::Store,
    ids: &[&str],
    what: &str,
    ok: impl Fn(&toolhost_fleet::StatusEntry) -> bool,
) {
    for id in ids {
        eventually(WAIT, &format!("{id}: {what}"), async || {
            status_of_daemon(kv, id).await.filter(|s| ok(s))
        })
        .await;
    }
}

const E0: u64 = 1_700_000_000_000;

/// Three daemons of one group: a push reaches each and its MCP session
/// (`list_changed`); a stale value is refused by each and reported; two
/// writers racing with different epochs never get a fenced revision
/// applied anywhere; a daemon stopped while 10 revisions go by catches up
/// to the last one when resumed.
#[tokio::test]
async fn a_push_reaches_every_daemon_of_the_group_and_a_fenced_one_none() {
    let root = Scratch::new("fleet-three");
    let nats = Nats::start(root.path());
    let kv = bucket(&nats.url).await;
    let tp = testplug_dir(root.path(), "tp", "normal");
    let ids = ["d1", "d2", "d3"];
    let mut members = Vec::new();
    for id in ids {
        members.push(member(root.path(), id, &tp, &nats.url).await);
    }
    all_report(&kv, &ids, "connected", |_| true).await;
    let before: Vec<usize> = members.iter().map(|(_, c)| list_changed(c)).collect();

    kv.put("catalog", snapshot(&tp, "g1", E0, 1, 3).into())
        .await
        .unwrap();
    all_report(&kv, &ids, "revision 1 applied", |s| {
        s.revision == 1 && s.applied.as_ref().is_some_and(|a| a.outcome == "accepted")
    })
    .await;
    for ((_, c), was) in members.iter().zip(&before) {
        eventually(WAIT, "list_changed on the session", async || {
            (list_changed(c) > *was).then_some(())
        })
        .await;
        assert_eq!(listed_names(c).await.len(), 3);
    }

    // Stale: an older epoch (a dead backend's delayed write).
    kv.put("catalog", snapshot(&tp, "old", E0 - 1, 50, 1).into())
        .await
        .unwrap();
    all_report(&kv, &ids, "the stale value refused", |s| {
        s.revision == 1 && s.applied.as_ref().is_some_and(|a| a.outcome == "stale")
    })
    .await;
    let (ok, out) = cli(&["fleet", "status", "--nats", &nats.url]);
    assert!(!ok && out.matches("NACK").count() == 3, "{out}");

    // Two writers race: the older backend (epoch E0+1) and the newer
    // (E0+2), ten revisions each, interleaved. Every status entry any
    // daemon writes is watched: once a daemon serves the newer epoch, it
    // never again serves the older one.
    let mut seen = kv.watch("status.*").await.unwrap();
    let writer = |epoch: u64, tag: &'static str| {
        let (kv, tp) = (kv.clone(), tp.clone());
        tokio::spawn(async move {
            for r in 2..=11 {
                kv.put("catalog", snapshot(&tp, tag, epoch, r, 2).into())
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let (old, new) = (writer(E0 + 1, "old"), writer(E0 + 2, "new"));
    old.await.unwrap();
    new.await.unwrap();
    let mut newest_seen = std::collections::HashMap::new();
    let converged = async {
        use futures::StreamExt as _;
        let mut done = std::collections::HashSet::new();
        while let Some(Ok(e)) = seen.next().await {
            let Ok(s) = serde_json::from_slice::<toolhost_fleet::StatusEntry>(&e.value) else {
                continue;
            };
            let high = newest_seen.entry(s.daemon.clone()).or_insert(0);
            assert!(
                s.epoch >= *high,
                "{} went back from epoch {high} to {}: {s:?}",
                s.daemon,
                s.epoch
            );
            *high = s.epoch;
            if s.epoch == E0 + 2 && s.revision == 11 {
                done.insert(s.daemon.clone());
            }
            if done.len() == ids.len() {
                return;
            }
        }
    };
    if tokio::time::timeout(WAIT, converged).await.is_err() {
        let mut now = Vec::new();
        for id in ids {
            now.push(status_of_daemon(&kv, id).await);
        }
        panic!("not every daemon reached the newer writer's last revision: {now:#?}");
    }

    // d3 stopped while ten revisions go by: resumed, it catches up to the
    // last one (and `fleet status` saw it silent meanwhile).
    let stopped = members[2].0.pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(stopped as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    for r in 12..=21 {
        kv.put("catalog", snapshot(&tp, "new", E0 + 2, r, 3).into())
            .await
            .unwrap();
    }
    all_report(&kv, &ids[..2], "revision 21", |s| s.revision == 21).await;
    eventually(WAIT, "d3 flagged silent", async || {
        let (_, out) = cli(&[
            "fleet",
            "status",
            "--nats",
            &nats.url,
            "--silent-after",
            "2",
        ]);
        out.lines()
            .find(|l| l.contains("d3") && l.contains("SILENT") && l.contains("BEHIND"))
            .map(|_| ())
    })
    .await;
    let was = list_changed(&members[2].1);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(stopped as i32).unwrap(),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    all_report(&kv, &["d3"], "d3 caught up to revision 21", |s| {
        s.revision == 21 && s.generation == "new"
    })
    .await;
    eventually(WAIT, "d3's session told", async || {
        (list_changed(&members[2].1) > was).then_some(())
    })
    .await;
    assert_eq!(listed_names(&members[2].1).await.len(), 3);
    let (ok, out) = cli(&["fleet", "status", "--nats", &nats.url]);
    assert!(ok, "the fleet converged: {out}");
    for (_, c) in members {
        let _ = c.cancel().await;
    }
}

/// A daemon whose NATS user lacks a permission it needs (here: writing
/// its own status entry) says which, in `toolhost status` and its log,
/// rather than fail silently.
#[tokio::test]
async fn a_daemon_whose_nats_user_is_too_narrow_says_so() {
    let root = Scratch::new("fleet-narrow");
    let (_server, url) = restricted_nats(root.path(), "d2", &[]);
    let backend = connect_as(&url, "backend", "bpass").await;
    async_nats::jetstream::new(backend)
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "toolhost_default".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap();
    let tp = testplug_dir(root.path(), "tp", "normal");
    std::fs::write(root.path().join("d2.password"), "d2pass\n").unwrap();
    let cfg = TestConfig::new(root.path(), std::slice::from_ref(&tp))
        .extra(&format!(
            // A relative credentials path is the config file's neighbour.
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"d2\"\nuser = \"d2\"\npassword_file = \"d2.password\"\n"
        ))
        .build();
    let d = Daemon::start(root.path(), &cfg, &[]);
    let admin = root.path().join("state/admin.sock");
    let out = eventually(WAIT, "the refusal in the status", async || {
        let (_, out) = cli_at(&admin, &["status"]);
        out.contains("Permissions Violation").then_some(out)
    })
    .await;
    assert!(
        out.contains("NOT CONNECTED")
            && out.contains("$KV.toolhost_default.status.d2")
            && out.contains("refused this daemon's user")
            && out.contains("A fleet through NATS JetStream"),
        "{out}"
    );
    assert!(!out.contains("d2pass"), "{out}");
    d.wait_metric("toolhost_fleet_connected", 0.0).await;
    let logs = d.logs_with(&["Permissions Violation"]).await;
    assert!(logs.contains("Permissions Violation"), "{logs}");
}

/// TLS to the NATS server, with the CA given in the config file (a
/// relative path, the config file's neighbour) and to the CLI.
#[tokio::test]
async fn a_daemon_reaches_its_fleet_over_tls() {
    let root = Scratch::new("fleet-tls");
    let dir = root.path();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (scripts/test needs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=toolhost test CA",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"],
            &ec[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    let port = free_port();
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\njetstream {{ store_dir: \"{}\" }}\ntls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
            dir.join("js").display(),
            dir.join("server.pem").display(),
            dir.join("server.key").display()
        ),
    )
    .unwrap();
    let (_server, url) = nats_with(&conf, port);
    let client = eventually(WAIT, "nats-server over TLS", async || {
        async_nats::ConnectOptions::new()
            .add_root_certificates(dir.join("ca.pem"))
            .require_tls(true)
            .connect(url.as_str())
            .await
            .ok()
    })
    .await;
    let tp = testplug_dir(dir, "tp", "normal");
    let cfg = TestConfig::new(dir, std::slice::from_ref(&tp))
        .extra(&format!(
            "[backend.nats]\nurl = \"{url}\"\ndaemon = \"d1\"\nheartbeat_s = 1\ntls_ca_file = \"ca.pem\"\n"
        ))
        .build();
    // The daemon starts before its group has a bucket, and says so.
    let d = Daemon::start(dir, &cfg, &[]);
    let admin = dir.join("state/admin.sock");
    eventually(WAIT, "no bucket yet, said", async || {
        let (_, out) = cli_at(&admin, &["status"]);
        out.contains("the bucket toolhost_default does not exist yet")
            .then_some(())
    })
    .await;
    // A fleet without a backend: `catalog build` of the plugin, and `fleet
    // push` (which creates the group's bucket) over TLS.
    let (ok, json) = cli(&["catalog", "build", &tp.display().to_string()]);
    assert!(ok, "{json}");
    let mut built: Snapshot = serde_json::from_str(&json).unwrap();
    assert_eq!((built.generation.as_str(), built.epoch), ("cli", 1));
    built.tools.truncate(2);
    let file = dir.join("catalog.json");
    std::fs::write(&file, serde_json::to_string(&built).unwrap()).unwrap();
    let ca = dir.join("ca.pem").display().to_string();
    let (ok, out) = cli(&[
        "fleet",
        "push",
        "--nats",
        &url,
        "--tls-ca-file",
        &ca,
        &file.display().to_string(),
    ]);
    assert!(ok, "{out}");
    let kv = async_nats::jetstream::new(client)
        .get_key_value("toolhost_default")
        .await
        .unwrap();
    let s = eventually(WAIT, "applied over TLS", async || {
        status_of(&kv).await.filter(|s| s.generation == "cli")
    })
    .await;
    assert_eq!(s.revision, built.revision);
    let c = agent(&d.url, TOKEN).await;
    assert_eq!(listed_names(&c).await.len(), 2);
    let _ = c.cancel().await;
    // Without the CA, the CLI refuses the server's certificate.
    let (ok, out) = cli(&["fleet", "status", "--nats", &url]);
    assert!(!ok, "{out}");
}
