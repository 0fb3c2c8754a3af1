//! `--placement N`: the time for N daemons of one group to converge to a
//! placement of three plugins pulled from a registry, uncached (each
//! daemon pulls every package) and cached (the same digests placed again
//! after they were removed: each daemon installs from its own cache).
//!
//! Real components: the CNCF distribution registry (Debian's
//! `docker-registry`, plain HTTP on loopback, which toolhost allows), a
//! nats-server with JetStream, `toolhost pack` and `toolhost push`, and N
//! real daemons following the group's placement key.

use crate::fleet::{applied, bucket, quantile, start_daemon, start_nats};
use crate::systems::{exe_dir, free_port, scratch};
use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A process stopped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(dir: &Path) -> Result<(Proc, String)> {
    let exe = Path::new("/usr/bin/docker-registry");
    if !exe.is_file() {
        bail!("docker-registry is not installed (apt-get install docker-registry)");
    }
    let addr = format!("127.0.0.1:{}", free_port()?);
    let conf = dir.join("registry.yml");
    std::fs::write(
        &conf,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n  secret: bench\n",
            dir.join("registry").display()
        ),
    )?;
    let child = Command::new(exe)
        .arg("serve")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start docker-registry")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&addr).is_err() {
        if Instant::now() > deadline {
            bail!("docker-registry did not listen");
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    Ok((Proc(child), addr))
}

/// A plugin `id` on testplug, packed and pushed; its pinned reference.
fn publish(dir: &Path, registry: &str, id: &str) -> Result<String> {
    let p = dir.join(id);
    std::fs::create_dir_all(&p)?;
    let testplug = exe_dir().join("testplug");
    let mut toml = format!(
        "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"Placed\"\n[runtime]\ncommand = {:?}\nenv = {{ TESTPLUG_QUIET = \"1\" }}\n",
        testplug.display().to_string()
    );
    for t in ["echo", "add", "fail"] {
        toml.push_str(&format!(
            "[[tools]]\nname = \"{t}\"\ndescription = \"The {t} tool.\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\", properties = {{ msg = {{ type = \"string\", maxLength = 20 }} }} }}\n"
        ));
    }
    std::fs::write(p.join("plugin.toml"), toml)?;
    let archive = dir.join(format!("{id}.tar.gz"));
    let toolhost = crate::systems::toolhost_exe();
    let packed = Command::new(&toolhost)
        .arg("pack")
        .arg(&p)
        .arg("-o")
        .arg(&archive)
        .output()?;
    if !packed.status.success() {
        bail!("pack {id}: {}", String::from_utf8_lossy(&packed.stderr));
    }
    let pushed = Command::new(&toolhost)
        .arg("push")
        .arg(&archive)
        .arg(format!("{registry}/bench/{id}:1.0.0"))
        .output()?;
    let out = String::from_utf8_lossy(&pushed.stdout).to_string();
    let digest = out
        .lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .with_context(|| format!("push {id}: {}", String::from_utf8_lossy(&pushed.stderr)))?;
    Ok(format!("{registry}/bench/{id}@{digest}"))
}

fn placement(revision: u64, plugins: &[(String, String)]) -> Vec<u8> {
    prost::Message::encode_to_vec(&toolhost_proto::admin::Placement {
        revision,
        plugins: plugins
            .iter()
            .map(|(id, reference)| toolhost_proto::admin::PlacedPlugin {
                id: id.clone(),
                reference: reference.clone(),
                ..Default::default()
            })
            .collect(),
    })
}

/// When each daemon first showed each placement revision converged
/// (the fleet bench's record, keyed by the placement's revision).
type Converged = crate::fleet::Seen;

/// Runs N daemons and prints one row.
pub(crate) async fn report(n: usize) -> Result<()> {
    let dir = scratch(&format!("placement-{n}"))?;
    let (_registry, registry) = start_registry(&dir)?;
    let ids = ["pa", "pb", "pc"];
    let mut placed = Vec::new();
    for id in ids {
        placed.push((id.to_owned(), publish(&dir, &registry, id)?));
    }
    let (_server, url) = start_nats(&dir)?;
    let kv = bucket(&url, "toolhost_bench").await?;
    let seen: Converged = Arc::default();
    let mut watch = kv.watch("status.*").await?;
    {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let Ok(s) = serde_json::from_slice::<toolhost_fleet::StatusEntry>(&e.value) else {
                    continue;
                };
                if let Some(p) = s.placement.filter(|p| p.revision > 0 && p.converged())
                    && let Ok(mut m) = seen.lock()
                {
                    m.entry((s.daemon, p.revision)).or_insert_with(Instant::now);
                }
            }
        });
    }
    let names: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
    let mut daemons: Vec<Proc> = Vec::with_capacity(n);
    for name in &names {
        let (child, _) = start_daemon(&dir, &[], &url, name)?;
        daemons.push(Proc(child));
    }
    let t0 = Instant::now();
    kv.put("placement", placement(1, &placed).into()).await?;
    let uncached = applied(&seen, &names, 1, t0).await?;
    kv.put("placement", placement(2, &[]).into()).await?;
    applied(&seen, &names, 2, Instant::now()).await?;
    let t0 = Instant::now();
    kv.put("placement", placement(3, &placed).into()).await?;
    let cached = applied(&seen, &names, 3, t0).await?;
    drop(daemons);
    let _ = std::fs::remove_dir_all(&dir);
    let ms = |v: &[Duration], p: f64| quantile(v, p).as_secs_f64() * 1e3;
    println!(
        "| daemons | placement of 3 plugins, uncached: converged p50 / max | cached: p50 / max |"
    );
    println!("|---|---|---|");
    println!(
        "| {n} | {:.0} / {:.0} ms | {:.0} / {:.0} ms |",
        ms(&uncached, 0.5),
        ms(&uncached, 1.0),
        ms(&cached, 0.5),
        ms(&cached, 1.0)
    );
    Ok(())
}
