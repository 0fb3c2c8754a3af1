//! The backend places plugins on a fleet, end to end: a real
//! nats-server, the CNCF distribution registry, and twenty daemons of one
//! group that follow the group's `placement` key. Each daemon pulls the
//! placed packages by digest, verifies them against the one trusted key
//! and runs them; a package that fails verification is refused by name
//! while the others serve; a daemon started later catches up; an upgrade
//! that changes a contract under "hold" waits, named in `fleet status`;
//! and an agent calling a placed tool through all of it sees no failure.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use toolhost_catalog::Snapshot;
use toolhost_e2e::as_run::{account, scratch};
use toolhost_e2e::nats::Nats;
use toolhost_e2e::registry::RegistryServer;
use toolhost_e2e::{Daemon, TOKEN, TestConfig, agent, call_tool, eventually, testplug_dir};
use toolhost_manifest::Manifest;

const WAIT: Duration = Duration::from_secs(120);
const DAEMONS: usize = 20;

/// A testplug source `id` at `version`; `v2` changes every description.
fn source(root: &Path, id: &str, version: &str, v2: bool) -> PathBuf {
    let d = testplug_dir(&root.join(format!("src-{id}-{version}")), id, "normal");
    let manifest = d.join("plugin.toml");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text = text.replace("version = \"1.0.0\"", &format!("version = \"{version}\""));
    if v2 {
        text = text.replace("description = \"", "description = \"Second edition. ");
    }
    std::fs::write(&manifest, text).unwrap();
    d
}

/// Packs `dir` (signed with `key` when given) and pushes it to
/// `reg/tools/<id>:<version>`; the pinned reference.
fn publish(reg: &RegistryServer, r: &Path, dir: &Path, key: Option<&Path>) -> String {
    let m = Manifest::load(dir).unwrap();
    let out = r.join(format!("{}-{}.tar.gz", m.id, m.version));
    toolhost_e2e::registry::pack(dir, &out, key);
    let digest = reg.push(&out, &format!("{}/tools/{}:{}", reg.addr, m.id, m.version));
    format!("{}/tools/{}@{digest}", reg.addr, m.id)
}

/// The catalog of `dirs`' tools and of `decoys` other plugins (the tools
/// of the first dir under other ids), as a backend writes it to a fleet:
/// a shard per plugin, then the header.
async fn write_catalog(
    kv: &async_nats::jetstream::kv::Store,
    dirs: &[&Path],
    decoys: usize,
    revision: u64,
) -> toolhost_proto::admin::Snapshot {
    let ms: Vec<Manifest> = dirs.iter().map(|d| Manifest::load(d).unwrap()).collect();
    let mut s = Snapshot::from_manifests("kandev", "g1", revision, &ms);
    s.epoch = 1;
    let first: Vec<_> = s
        .tools
        .iter()
        .filter(|t| t.plugin_id == ms[0].id)
        .cloned()
        .collect();
    for i in 0..decoys {
        for t in &first {
            let mut d = t.clone();
            d.plugin_id = format!("decoy{i}");
            d.exposed_name =
                toolhost_manifest::naming::exposed("kandev", &d.plugin_id, &d.local_name);
            s.tools.push(d);
        }
    }
    let (header, shards) = toolhost_fleet::shard_snapshot(toolhost_managed::snapshot_to_proto(&s));
    for (key, bytes) in shards {
        kv.put(key.as_str(), bytes.into()).await.unwrap();
    }
    kv.put("catalog", prost::Message::encode_to_vec(&header).into())
        .await
        .unwrap();
    header
}

fn placement(revision: u64, plugins: &[(&str, &str, &str)]) -> Vec<u8> {
    let p = toolhost_proto::admin::Placement {
        revision,
        plugins: plugins
            .iter()
            .map(
                |(id, reference, policy)| toolhost_proto::admin::PlacedPlugin {
                    id: (*id).to_owned(),
                    reference: (*reference).to_owned(),
                    values: Default::default(),
                    contract_changes: (*policy).to_owned(),
                },
            )
            .collect(),
    };
    prost::Message::encode_to_vec(&p)
}

/// Starts daemon `name` of the default group.
fn daemon(root: &Path, name: &str, nats: &str, reg: &RegistryServer, key: &Path) -> Daemon {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let extra = format!(
        "[backend.nats]\nurl = \"{nats}\"\ndaemon = \"{name}\"\nheartbeat_s = 1\n\n\
         [install]\ntrusted_keys = [{:?}]\n\n[registry]\nca_files = [{:?}]\n",
        format!("{}.pub", key.display()),
        reg.ca.display().to_string()
    );
    let cfg = TestConfig::new(&dir, &[])
        .sandbox(account())
        .extra(&extra)
        .build();
    let auth = reg.auth_file.clone();
    Daemon::start_with(&dir, &cfg, &[], "info", move |c| {
        c.env("REGISTRY_AUTH_FILE", &auth);
    })
}

async fn entry(
    kv: &async_nats::jetstream::kv::Store,
    name: &str,
) -> Option<toolhost_fleet::StatusEntry> {
    let v = kv.get(format!("status.{name}")).await.ok()??;
    serde_json::from_slice(&v).ok()
}

/// Whether `name`'s entry shows placement `revision` with each
/// `(id, phase)`.
async fn stands(
    kv: &async_nats::jetstream::kv::Store,
    name: &str,
    revision: u64,
    want: &[(&str, &str)],
) -> Option<toolhost_fleet::PlacedEntry> {
    let p = entry(kv, name).await?.placement?;
    let all = p.revision == revision
        && want.iter().all(|(id, phase)| {
            p.plugins
                .iter()
                .any(|row| row.id == *id && row.phase == *phase)
        });
    all.then_some(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_converges_to_the_placed_plugins_refuses_a_bad_one_and_holds_a_changed_contract() {
    let root = scratch("placement");
    let r = root.path();
    let reg = RegistryServer::start(&r.join("registry"), true, true);
    let key = r.join("a.key");
    let (ok, text) = toolhost_e2e::cli(&["keygen", "-o", key.to_str().unwrap()]);
    assert!(ok, "{text}");
    let (p1, p2, p3) = (
        source(r, "pa", "1.0.0", false),
        source(r, "pb", "1.0.0", false),
        source(r, "pc", "1.0.0", false),
    );
    let (ref1, ref2) = (
        publish(&reg, r, &p1, Some(&key)),
        publish(&reg, r, &p2, Some(&key)),
    );
    // The bad one: unsigned, where a key is trusted.
    let ref3 = publish(&reg, r, &p3, None);

    let nats = Nats::start(r);
    let client = eventually(WAIT, "nats-server", async || {
        async_nats::connect(&nats.url).await.ok()
    })
    .await;
    let js = async_nats::jetstream::new(client);
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "toolhost_default".to_owned(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    // 40 plugins' tools besides pa's and pb's: a daemon reads only the
    // shards of what it is placed.
    let header = write_catalog(&kv, &[&p1, &p2], 40, 1).await;
    assert_eq!(header.shards.len(), 42);
    kv.put(
        "placement",
        placement(
            1,
            &[("pa", &ref1, "hold"), ("pb", &ref2, ""), ("pc", &ref3, "")],
        )
        .into(),
    )
    .await
    .unwrap();

    let names: Vec<String> = (1..=DAEMONS).map(|i| format!("d{i}")).collect();
    let mut daemons: Vec<Daemon> = names[..DAEMONS - 1]
        .iter()
        .map(|n| daemon(r, n, &nats.url, &reg, &key))
        .collect();
    let placed = [("pa", "ready"), ("pb", "ready"), ("pc", "failed")];
    for n in &names[..DAEMONS - 1] {
        let p = eventually(WAIT, "a daemon converged to the placement", async || {
            stands(&kv, n, 1, &placed).await
        })
        .await;
        let bad = p.plugins.iter().find(|row| row.id == "pc").unwrap();
        assert!(bad.reason.contains("unsigned"), "{n}: {bad:?}");
        assert!(
            bad.installed.is_empty(),
            "{n}: the bad package was placed: {bad:?}"
        );
    }

    // An agent calls a placed tool on the first daemon through the rest.
    let c = Arc::new(agent(&daemons[0].url, TOKEN).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let first_failure = Arc::new(std::sync::Mutex::new(String::new()));
    let looping = {
        let (c, stop, calls, failed) = (
            Arc::clone(&c),
            Arc::clone(&stop),
            Arc::clone(&calls),
            Arc::clone(&failed),
        );
        let first_failure = Arc::clone(&first_failure);
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = call_tool(
                    &c,
                    "kandev_pa_echo",
                    serde_json::json!({ "msg": "hi", "n": 1 }),
                )
                .await;
                calls.fetch_add(1, Ordering::Relaxed);
                if r.as_ref().map_or(true, |r| r.is_error == Some(true)) {
                    failed.fetch_add(1, Ordering::Relaxed);
                    let mut f = first_failure.lock().unwrap();
                    if f.is_empty() {
                        *f = format!("{r:?}");
                    }
                }
            }
        })
    };
    eventually(WAIT, "calls flowing", async || {
        (calls.load(Ordering::Relaxed) > 5).then_some(())
    })
    .await;

    // A daemon started later catches up.
    daemons.push(daemon(r, &names[DAEMONS - 1], &nats.url, &reg, &key));
    eventually(WAIT, "the late daemon converged", async || {
        stands(&kv, &names[DAEMONS - 1], 1, &placed).await
    })
    .await;

    // A shard whose bytes are not the digest the header names: the
    // revision is refused whole, and the catalog in force keeps serving.
    let mut header2 = header.clone();
    header2.revision = 2;
    let pa = header2
        .shards
        .iter_mut()
        .find(|s| s.plugin == "pa")
        .unwrap();
    pa.digest = toolhost_fleet::shard_digest(b"another shard");
    kv.put(
        toolhost_fleet::shard_key("pa", &pa.digest).as_str(),
        prost::Message::encode_to_vec(&toolhost_proto::admin::ToolShard::default()).into(),
    )
    .await
    .unwrap();
    kv.put("catalog", prost::Message::encode_to_vec(&header2).into())
        .await
        .unwrap();
    for n in &names {
        let why = eventually(WAIT, "the tampered shard refused", async || {
            let a = entry(&kv, n).await?.applied?;
            (a.outcome == "invalid").then_some(a.reasons.join("; "))
        })
        .await;
        assert!(why.contains("does not match its digest"), "{n}: {why}");
    }

    // An upgrade that changes pa's contract, under "hold": it waits on
    // every daemon, the old version serving, and `fleet status` says so.
    let p1v2 = source(r, "pa", "2.0.0", true);
    let ref1v2 = publish(&reg, r, &p1v2, Some(&key));
    kv.put(
        "placement",
        placement(
            2,
            &[
                ("pa", &ref1v2, "hold"),
                ("pb", &ref2, ""),
                ("pc", &ref3, ""),
            ],
        )
        .into(),
    )
    .await
    .unwrap();
    let held = [("pa", "held"), ("pb", "ready"), ("pc", "failed")];
    for n in &names {
        let p = eventually(WAIT, "the changed contract held", async || {
            stands(&kv, n, 2, &held).await
        })
        .await;
        let pa = p.plugins.iter().find(|row| row.id == "pa").unwrap();
        assert_eq!(
            pa.installed,
            ref1.rsplit_once('@').unwrap().1,
            "{n}: the held version took over"
        );
    }
    let (_, status) = toolhost_e2e::cli(&["fleet", "status", "--nats", &nats.url]);
    assert!(
        status.contains("PLACING") && status.contains("plugin pa held"),
        "{status}"
    );
    let (ok, plugins) = toolhost_e2e::cli(&["fleet", "plugins", "--nats", &nats.url]);
    assert!(!ok && plugins.contains("held"), "{plugins}");

    stop.store(true, Ordering::Relaxed);
    looping.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "{} of {} calls failed, the first: {}",
        failed.load(Ordering::Relaxed),
        calls.load(Ordering::Relaxed),
        first_failure.lock().unwrap()
    );
    // By hand, the lifecycle stays refused, saying where placement comes
    // from.
    let admin = r.join("d1/state/admin.sock");
    let (ok, text) = toolhost_e2e::cli_at(&admin, &["plugins", "remove", "pb"]);
    assert!(!ok && text.contains("placement"), "{text}");
    drop(daemons);
}
