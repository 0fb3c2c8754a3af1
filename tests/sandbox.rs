//! The sandbox on real processes: a plugin that tries to read the
//! operator's `~/.ssh` and another plugin's data, to write outside its data
//! directory, to start processes without end, to allocate past its memory
//! limit and to open TCP connections it was not granted is refused each
//! time, while the daemon and the other plugins go on serving.
//!
//! Each attack is also made by a control plugin whose operator turned the
//! rule off: it succeeds there, so a refusal is the sandbox's doing and not
//! a broken probe. Where this kernel cannot enforce a rule, the test
//! checks that `status` says so instead (RELIABILITY.md has the table).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::json;
use std::path::Path;
use std::time::Duration;
use toolhost_admin::admin as pb;
use toolhost_e2e::{
    AgentClient, Daemon, Scratch, TOKEN, TestConfig, agent, eventually, probeplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);

use toolhost_e2e::as_run::probe;

/// Everything the daemon says of plugin `id`.
async fn listed(root: &Path, id: &str) -> pb::PluginStatus {
    let sock = root.join("state/admin.sock");
    let mut a = eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;
    // In full: a summary is for listings.
    a.list_plugins(pb::ListPluginsRequest {
        id: id.into(),
        detail: true,
        ..Default::default()
    })
    .await
    .expect("list")
    .into_inner()
    .plugins
    .into_iter()
    .find(|p| p.id == id)
    .expect("listed")
}

async fn rules(root: &Path, id: &str) -> Vec<pb::SandboxRule> {
    listed(root, id).await.sandbox
}

/// The Unix socket plugin `id` serves on: in the socket directory toolhost
/// gave its process (read from the process's environment, as a local
/// process of the same user can).
async fn plugin_socket(root: &Path, id: &str) -> std::path::PathBuf {
    let pid = listed(root, id).await.pid;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("its environment");
    let dir = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"KANDEV_PLUGIN_SOCKET_DIR="))
        .map(|v| std::path::PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .expect("its socket directory");
    // The SDK makes it in the directory itself (older SDKs in a folder
    // of their own inside).
    let direct = dir.join("plugin.sock");
    if direct.exists() {
        return direct;
    }
    std::fs::read_dir(&dir)
        .expect("the socket directory")
        .flatten()
        .map(|e| e.path().join("plugin.sock"))
        .find(|p| p.exists())
        .expect("its socket")
}

fn state_of<'a>(rules: &'a [pb::SandboxRule], rule: &str) -> &'a str {
    rules
        .iter()
        .find(|r| r.rule == rule)
        .map_or("absent", |r| r.state.as_str())
}

#[tokio::test]
async fn a_plugin_is_refused_what_it_was_not_granted_and_everything_else_serves_on() {
    let root = Scratch::new("sandbox");
    let home = root.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(
        home.join(".ssh/id_ed25519"),
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    )
    .unwrap();
    let shared = root.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    // A TCP service on loopback that plugins may or may not reach.
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = service.local_addr().unwrap().port();
    let asks = format!(
        "[capabilities]\nnetwork = {{ connect = [{port}] }}\nfilesystem = [{{ path = {:?}, access = \"write\" }}]\nmemory_mb = 512\nprocesses = 24\n",
        shared.display().to_string()
    );
    // jail asks, and is granted nothing; granted asks the same and gets
    // it; open has the rules turned off by its operator.
    let jail = probeplug_dir(root.path(), "jail", &asks);
    let granted = probeplug_dir(root.path(), "granted", &asks);
    let open = probeplug_dir(root.path(), "open", &asks);
    let config = TestConfig::new(root.path(), &[jail, granted, open])
        .extra(
            "[plugin.granted]\ngrant = [\"network\", \"filesystem\"]\n\n[plugin.open]\nsandbox_off = [\"filesystem\", \"network\", \"processes\", \"memory\", \"capabilities\"]\n",
        )
        .build();
    let d = Daemon::start_with(root.path(), &config, &[], "info", |cmd| {
        cmd.env("HOME", &home);
    });
    for id in ["jail", "granted", "open"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{id}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    let c = agent(&d.url, TOKEN).await;
    let jail_rules = rules(root.path(), "jail").await;
    let open_rules = rules(root.path(), "open").await;
    assert_eq!(state_of(&open_rules, "filesystem"), "off");
    assert_eq!(state_of(&open_rules, "network"), "off");
    for rule in ["no_new_privs", "memory", "open_files"] {
        assert_eq!(state_of(&jail_rules, rule), "enforced", "{rule}");
    }
    let serving = async |c: &AgentClient| {
        for id in ["jail", "granted", "open"] {
            let (ok, text, _) = probe(c, &format!("kandev_{id}_count"), json!({})).await;
            assert!(ok, "{id} stopped serving: {text}");
        }
        let (status, _) = toolhost_e2e::http_request(&d.base(), "GET", "/readyz", &[], "").await;
        assert_eq!(status, 200);
    };

    // The file system.
    if state_of(&jail_rules, "filesystem") == "enforced" {
        let key = home.join(".ssh/id_ed25519").display().to_string();
        let others = root.path().join("state/data/open/events.log");
        let _ = probe(&c, "kandev_open_count", json!({})).await;
        for (what, path) in [
            ("the operator's ssh key", key.clone()),
            (
                "the operator's ssh directory",
                home.join(".ssh").display().to_string(),
            ),
            ("another plugin's data", others.display().to_string()),
            (
                "the daemon's state",
                root.path().join("state/plugins.json").display().to_string(),
            ),
            (
                "the admin socket's token",
                root.path()
                    .join("state/admin.sock.token")
                    .display()
                    .to_string(),
            ),
            ("/etc/shadow", "/etc/shadow".to_owned()),
            (
                "the daemon's environment",
                format!("/proc/{}/environ", d.pid()),
            ),
        ] {
            let (ok, text, _) = probe(&c, "kandev_jail_read_file", json!({ "path": path })).await;
            assert!(!ok && text.contains("refused"), "jail read {what}: {text}");
        }
        let (ok, text, _) = probe(&c, "kandev_open_read_file", json!({ "path": key })).await;
        assert!(ok, "the control reads the key: {text}");
        let own = root.path().join("state/data/jail/events.log");
        let (ok, text, _) = probe(
            &c,
            "kandev_jail_read_file",
            json!({ "path": own.display().to_string() }),
        )
        .await;
        assert!(ok, "jail reads its own data: {text}");
        for (what, path) in [
            ("outside", root.path().join("outside.txt")),
            (
                "its own plugin directory",
                root.path().join("jail/dropped.txt"),
            ),
            ("a granted path it was not granted", shared.join("jail.txt")),
        ] {
            let (ok, text, _) = probe(
                &c,
                "kandev_jail_write_file",
                json!({ "path": path.display().to_string() }),
            )
            .await;
            assert!(!ok && text.contains("refused"), "jail wrote {what}: {text}");
            assert!(!path.exists());
        }
        let inside = root.path().join("state/data/jail/inside.txt");
        let (ok, text, _) = probe(
            &c,
            "kandev_jail_write_file",
            json!({ "path": inside.display().to_string() }),
        )
        .await;
        assert!(
            ok && inside.exists(),
            "jail writes its data directory: {text}"
        );
        let (ok, text, _) = probe(
            &c,
            "kandev_granted_write_file",
            json!({ "path": shared.join("granted.txt").display().to_string() }),
        )
        .await;
        assert!(ok, "a granted path is writable: {text}");
    } else {
        println!("filesystem not enforced here: {jail_rules:?}");
        assert_eq!(state_of(&jail_rules, "filesystem"), "not enforced");
    }
    serving(&c).await;

    // Processes: a spawn loop stops at the limit.
    if state_of(&jail_rules, "processes") == "enforced" {
        let (ok, text, out) = probe(&c, "kandev_jail_spawn_many", json!({ "max": 200 })).await;
        assert!(ok, "{text}");
        let started = out["started"].as_u64().unwrap_or(0);
        assert!(
            started < 24,
            "started {started} processes under a limit of 24"
        );
        assert!(out["refusal"].is_string(), "{out}");
        let (ok, _, out) = probe(&c, "kandev_open_spawn_many", json!({ "max": 40 })).await;
        assert!(ok);
        assert_eq!(out["started"], 40, "the control is not limited: {out}");
    } else {
        println!("processes not enforced here: {jail_rules:?}");
        assert_eq!(state_of(&jail_rules, "processes"), "not enforced");
    }
    serving(&c).await;

    // Memory: past the address-space limit, allocation fails; the plugin
    // lives on.
    let (ok, text, _) = probe(&c, "kandev_jail_alloc", json!({ "mb": 1024 })).await;
    assert!(
        !ok && text.contains("refused"),
        "jail allocated 1 GiB under 512 MiB: {text}"
    );
    let (ok, text, _) = probe(&c, "kandev_jail_alloc", json!({ "mb": 16 })).await;
    assert!(ok, "a small allocation still works: {text}");
    let (ok, text, _) = probe(&c, "kandev_open_alloc", json!({ "mb": 1024 })).await;
    assert!(ok, "the control allocates 1 GiB: {text}");
    serving(&c).await;

    // The network: declared but not granted is refused, and so is the
    // daemon's own port; granted reaches exactly the declared port.
    if state_of(&jail_rules, "network") == "enforced" {
        let daemon_port: u16 = d.base().rsplit(':').next().unwrap().parse().unwrap();
        for p in [port, daemon_port] {
            let (ok, text, _) = probe(&c, "kandev_jail_connect", json!({ "port": p })).await;
            assert!(
                !ok && text.contains("refused"),
                "jail connected to {p}: {text}"
            );
        }
        let (ok, text, _) = probe(&c, "kandev_granted_connect", json!({ "port": port })).await;
        assert!(ok, "granted connects to its port: {text}");
        let (ok, text, _) =
            probe(&c, "kandev_granted_connect", json!({ "port": daemon_port })).await;
        assert!(!ok, "granted connects to another port: {text}");
        let (ok, text, _) = probe(&c, "kandev_open_connect", json!({ "port": port })).await;
        assert!(ok, "the control connects: {text}");
        // The ways around TCP rules: refused whether or not network is
        // granted; UDP and unbound listeners too where it is not.
        for (id, kinds) in [
            (
                "jail",
                &["mptcp", "tfo", "listen", "udp", "raw", "packet"][..],
            ),
            ("granted", &["mptcp", "tfo", "listen", "raw", "packet"][..]),
        ] {
            for kind in kinds {
                let (ok, text, _) = probe(
                    &c,
                    &format!("kandev_{id}_net_probe"),
                    json!({ "kind": kind, "port": port }),
                )
                .await;
                assert!(!ok && text.contains("refused"), "{id} {kind}: {text}");
            }
        }
        // The granted plugin's unbound listener was refused by the daemon,
        // which answers each listen() of a plugin granted network (its own
        // Unix socket's included: it serves).
        eventually(WAIT, "the listener refusal in the log", async || {
            d.logs()
                .contains("refused a plugin's TCP listener")
                .then_some(())
        })
        .await;
        for kind in ["listen", "udp"] {
            let (ok, text, _) = probe(
                &c,
                "kandev_open_net_probe",
                json!({ "kind": kind, "port": port }),
            )
            .await;
            assert!(ok, "the control's {kind}: {text}");
        }
    } else {
        println!("network not enforced here: {jail_rules:?}");
        assert_eq!(state_of(&jail_rules, "network"), "not enforced");
    }
    serving(&c).await;

    // Capabilities: none, even under a root daemon, and no device nodes.
    assert_eq!(state_of(&jail_rules, "capabilities"), "enforced");
    assert_eq!(state_of(&open_rules, "capabilities"), "off");
    let root_daemon = rustix::process::geteuid().is_root();
    let (ok, text, sets) = probe(&c, "kandev_jail_caps", json!({})).await;
    assert!(ok, "{text}");
    let none = "0000000000000000";
    for set in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(sets[set], none, "jail's {set}: {sets}");
    }
    if root_daemon {
        assert_eq!(sets["CapBnd"], none, "jail's bounding set: {sets}");
        let (_, _, control) = probe(&c, "kandev_open_caps", json!({})).await;
        assert_ne!(
            control["CapEff"], none,
            "the control keeps a root daemon's capabilities: {control}"
        );
    }
    let node = root.path().join("state/data/jail/kmsg");
    let (ok, text, _) = probe(
        &c,
        "kandev_jail_mknod",
        json!({ "path": node.display().to_string() }),
    )
    .await;
    assert!(
        !ok && text.contains("refused"),
        "jail made a device node: {text}"
    );
    assert!(!node.exists());
    serving(&c).await;

    // Another plugin's socket: reachable, but nothing answers without the
    // token toolhost presents; neither a plugin nor a local process.
    let open_socket = plugin_socket(root.path(), "open").await;
    let (ok, text, _) = probe(
        &c,
        "kandev_jail_call_socket",
        json!({ "path": open_socket.display().to_string() }),
    )
    .await;
    assert!(
        !ok && text.contains("refused") && !text.contains("answered"),
        "jail called open's tool directly: {text}"
    );
    println!("jail calling open's socket: {text}");
    let channel = toolhost_proto::contract::connect_unix(
        tonic::transport::Endpoint::from_static("http://plugin.invalid"),
        open_socket,
    )
    .await
    .expect("the socket accepts a connection");
    let forged = toolhost_proto::plugin::AgentToolRequest {
        invocation_id: "forged".into(),
        name: "count".into(),
        ..Default::default()
    };
    let answer = toolhost_proto::plugin::plugin_client::PluginClient::new(channel)
        .invoke_agent_tool(forged)
        .await;
    assert_eq!(
        answer.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated),
        "a local process called a plugin directly"
    );
    serving(&c).await;

    // The daemon's admin socket: a plugin's process is refused at the
    // door however it connects (the peer is pinned by a pidfd, so one that
    // exited is refused whoever has its pid now), and the token refuses
    // whatever got past the door.
    let admin = root.path().join("state/admin.sock").display().to_string();
    let attack = async |id: &str, kind: &str| {
        let (ok, text, _) = probe(
            &c,
            &format!("kandev_{id}_admin_attack"),
            json!({ "kind": kind, "path": admin }),
        )
        .await;
        assert!(
            !ok && text.contains("refused"),
            "{id}'s {kind} attack reached the admin API: {text}"
        );
        text
    };
    for id in ["jail", "open"] {
        for kind in ["direct", "reaped"] {
            // The reaped child races the daemon's check: many tries.
            for _ in 0..if kind == "reaped" { 25 } else { 1 } {
                let text = attack(id, kind).await;
                assert!(text.contains("closed"), "{id} {kind}: {text}");
            }
        }
        let text = attack(id, "grandchild").await;
        println!("{id}'s double-forked grandchild: {text}");
        if root_daemon && id == "jail" {
            // Its pids cgroup follows it out of its session.
            assert!(text.contains("closed"), "{id} grandchild: {text}");
        }
    }
    let logs = eventually(WAIT, "the refusals in the log", async || {
        let l = d.logs();
        (l.matches("refused an admin connection").count() >= 50).then_some(l)
    })
    .await;
    assert!(!logs.is_empty());
    serving(&c).await;
    drop(service);
    let _ = c.cancel().await;
}

/// A root daemon with `[sandbox] user` runs its plugins as that account:
/// no root, no other group, and root's own files closed to it even with
/// the file-system rule off. A daemon that is not root refuses the
/// setting, saying why.
#[tokio::test]
async fn a_root_daemon_runs_plugins_as_the_account_it_is_given() {
    use std::os::unix::fs::PermissionsExt as _;
    let root = Scratch::new("account");
    let asks = "[capabilities]\nmemory_mb = 512\n";
    let plugins = [
        probeplug_dir(root.path(), "user", asks),
        probeplug_dir(root.path(), "user_open", asks),
    ];
    let config = TestConfig::new(root.path(), &plugins)
        .extra("[plugin.user_open]\nsandbox_off = [\"filesystem\"]\n")
        .sandbox("user = \"nobody\"")
        .build();
    if !rustix::process::geteuid().is_root() {
        let path = root.path().join("toolhost.toml");
        std::fs::write(&path, &config).unwrap();
        let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .args(["--http", "127.0.0.1:0"])
            .output()
            .expect("run toolhost");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "served with [sandbox] user: {text}");
        assert!(
            text.contains("only a daemon running as root"),
            "no reason given: {text}"
        );
        return;
    }
    // The account must reach the plugins' directories, as an operator
    // installing plugins outside the state directory would arrange.
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let secret = root.path().join("root-only.txt");
    std::fs::write(&secret, "root's").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = Daemon::start(root.path(), &config, &[]);
    for id in ["user", "user_open"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{id}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    let c = agent(&d.url, TOKEN).await;
    let nobody = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"nobody")).then(|| (f[2].to_owned(), f[3].to_owned()))
        })
        .expect("nobody in /etc/passwd");
    for id in ["user", "user_open"] {
        let (ok, text, ids) = probe(&c, &format!("kandev_{id}_caps"), json!({})).await;
        assert!(ok, "{text}");
        let uid = ids["Uid"].as_str().unwrap_or_default();
        let gid = ids["Gid"].as_str().unwrap_or_default();
        assert!(
            uid.split_whitespace().all(|u| u == nobody.0),
            "{id} runs as {uid}"
        );
        assert!(
            gid.split_whitespace().all(|g| g == nobody.1),
            "{id} runs in group {gid}"
        );
        assert_eq!(ids["Groups"], "", "{id} kept groups: {ids}");
        println!("{id}: {ids}");
        assert_eq!(ids["CapEff"], "0000000000000000", "{ids}");
        // Its data directory is its own.
        let inside = root.path().join(format!("state/data/{id}/inside.txt"));
        let (ok, text, _) = probe(
            &c,
            &format!("kandev_{id}_write_file"),
            json!({ "path": inside.display().to_string() }),
        )
        .await;
        assert!(ok, "{id} cannot write its data directory: {text}");
    }
    // With the file-system rule off, only the account keeps root's file
    // from it.
    let (ok, text, _) = probe(
        &c,
        "kandev_user_open_read_file",
        json!({ "path": secret.display().to_string() }),
    )
    .await;
    assert!(!ok && text.contains("refused"), "read root's file: {text}");
    let r = rules(root.path(), "user").await;
    assert_eq!(state_of(&r, "user"), "enforced", "{r:?}");
    let detail = r
        .iter()
        .find(|x| x.rule == "user")
        .map(|x| x.detail.clone());
    assert!(
        detail.as_deref().is_some_and(|d| d.contains("nobody")),
        "{detail:?}"
    );
    let (ok, text, _) = probe(&c, "kandev_user_count", json!({})).await;
    assert!(ok, "{text}");
    let _ = c.cancel().await;
    drop(d);

    // The setting removed, the plugins run as root again (without
    // capabilities) and their data is theirs again.
    let config = TestConfig::new(root.path(), &plugins)
        .extra("[plugin.user_open]\nsandbox_off = [\"filesystem\"]\n")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"user\",state=\"ready\"}",
        1.0,
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    let inside = root.path().join("state/data/user/again.txt");
    let (ok, text, _) = probe(
        &c,
        "kandev_user_write_file",
        json!({ "path": inside.display().to_string() }),
    )
    .await;
    assert!(ok, "root's plugin cannot write its data any more: {text}");
    let r = rules(root.path(), "user").await;
    assert_eq!(state_of(&r, "user"), "not enforced", "{r:?}");
    let _ = c.cancel().await;
}

/// `[plugin.<id>] telemetry = true` opens exactly one door: a TCP connect
/// to the collector's port. The plugin tries the collector, another
/// service on loopback and the daemon's own port, run as the daemon's
/// account and (under a root daemon) as an unprivileged one.
#[tokio::test]
async fn a_plugin_that_exports_spans_reaches_the_collectors_port_and_no_other() {
    use std::os::unix::fs::PermissionsExt as _;
    let accounts: &[&str] = if rustix::process::geteuid().is_root() {
        &["", "user = \"nobody\""]
    } else {
        &[""]
    };
    for account in accounts {
        let root = Scratch::new("telemetry-port");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        // The "collector" need not speak OTLP: only whether a connect
        // gets through is asked.
        let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (cport, oport) = (
            collector.local_addr().unwrap().port(),
            other.local_addr().unwrap().port(),
        );
        let plugins = [probeplug_dir(root.path(), "tel", "")];
        let config = TestConfig::new(root.path(), &plugins)
            .extra(&format!(
                "[telemetry]\nendpoint = \"http://127.0.0.1:{cport}\"\n[plugin.tel]\ntelemetry = true\n"
            ))
            .sandbox(account)
            .build();
        let d = Daemon::start(root.path(), &config, &[]);
        d.wait_metric("toolhost_plugin_state{plugin=\"tel\",state=\"ready\"}", 1.0)
            .await;
        let tel_rules = rules(root.path(), "tel").await;
        if state_of(&tel_rules, "network") != "enforced" {
            println!("network not enforced here: {tel_rules:?}");
            return;
        }
        let c = agent(&d.url, TOKEN).await;
        let (ok, text, _) = probe(&c, "kandev_tel_connect", json!({ "port": cport })).await;
        assert!(ok, "{account:?}: the collector's port is refused: {text}");
        let daemon_port: u16 = d.base().rsplit(':').next().unwrap().parse().unwrap();
        for p in [oport, daemon_port] {
            let (ok, text, _) = probe(&c, "kandev_tel_connect", json!({ "port": p })).await;
            assert!(
                !ok && text.contains("refused"),
                "{account:?}: connected to {p}: {text}"
            );
        }
        // As with any port grant, the ways around TCP rules stay shut (UDP
        // stays open, for resolving a collector's name).
        for kind in ["mptcp", "tfo", "listen", "raw", "packet"] {
            let (ok, text, _) = probe(
                &c,
                "kandev_tel_net_probe",
                json!({ "kind": kind, "port": cport }),
            )
            .await;
            assert!(
                !ok && text.contains("refused"),
                "{account:?} {kind}: {text}"
            );
        }
    }
}
