//! Plugins from an OCI registry, end to end: the CNCF distribution
//! registry (with TLS of its own CA and htpasswd credentials read from a
//! Docker auth file), `toolhost push`, `plugins install REF` in a daemon
//! that trusts one key, and `skopeo` reading and copying what toolhost
//! wrote. Each attack is made the way a registry's owner, or someone who
//! can push to it, would make it: a tag moved after the install, a blob
//! changed in the registry's storage, a manifest too large, a signature
//! of another package, no signature at all. Each is refused by name, and
//! nothing of it is placed.
//!
//! As root the plugins run as `nobody` (`[sandbox] user`); CI runs the
//! suite again as an unprivileged daemon.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::as_run::{account, scratch};
use toolhost_e2e::registry::{PASSWORD, RegistryServer, USER};
use toolhost_e2e::token_server::TokenServer;
use toolhost_e2e::{Daemon, TOKEN, TestConfig, agent, call_tool, eventually, testplug_dir};

const WAIT: Duration = Duration::from_secs(30);

/// A testplug package `id` at `version`, packed (signed with `key` when
/// given) to `out`.
fn package(root: &Path, id: &str, version: &str, key: Option<&Path>) -> PathBuf {
    let d = testplug_dir(&root.join(format!("src-{id}-{version}")), id, "normal");
    let manifest = d.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("version = \"1.0.0\"", &format!("version = \"{version}\"")),
    )
    .unwrap();
    let out = root.join(format!("{id}-{version}.tar.gz"));
    toolhost_e2e::registry::pack(&d, &out, key);
    out
}

/// Pushes `archive` to `reference`; the digest it printed.
fn push(reg: &RegistryServer, archive: &Path, reference: &str) -> String {
    reg.push(archive, reference)
}

/// A daemon trusting `key.pub`, reaching `reg` with its CA and
/// credentials.
async fn daemon(root: &Path, key: &Path, reg: &RegistryServer) -> Daemon {
    let extra = format!(
        "[install]\ntrusted_keys = [{:?}]\n\n[registry]\nca_files = [{:?}]\n",
        format!("{}.pub", key.display()),
        reg.ca.display().to_string()
    );
    let cfg = TestConfig::new(root, &[])
        .sandbox(account())
        .extra(&extra)
        .build();
    let auth = reg.auth_file.clone();
    let d = Daemon::start_with(root, &cfg, &[], "info", move |c| {
        c.env("REGISTRY_AUTH_FILE", &auth);
    });
    let admin = root.join("state/admin.sock");
    eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&admin).await.ok()
    })
    .await;
    d
}

fn admin(root: &Path, args: &[&str]) -> (bool, String) {
    toolhost_e2e::cli_at(&root.join("state/admin.sock"), args)
}

fn shown(root: &Path, id: &str) -> serde_json::Value {
    let (ok, out) = admin(root, &["plugins", "show", id, "--format", "json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Nothing of a refused package is placed: no plugin, no version folder.
fn nothing_placed(root: &Path) {
    let (_, list) = admin(root, &["plugins", "list"]);
    assert!(!list.contains("tp"), "a refused package was placed: {list}");
    let installed = root.join("state/plugins");
    let left: Vec<_> = std::fs::read_dir(&installed)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| n.to_string_lossy().starts_with('.')),
        "left in {}: {left:?}",
        installed.display()
    );
}

fn keygen(path: &Path) {
    let (ok, text) = toolhost_e2e::cli(&["keygen", "-o", path.to_str().unwrap()]);
    assert!(ok, "{text}");
}

/// The blob file of `digest` in the registry's storage.
fn blob_file(reg: &RegistryServer, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    reg.storage
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data")
}

/// The digest of the layer of the manifest `digest` in `repo`.
fn layer_of(reg: &RegistryServer, repo: &str, digest: &str) -> String {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_file(reg, digest)).unwrap()).unwrap();
    let _ = repo;
    manifest["layers"][0]["digest"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_package_pushed_to_a_registry_installs_by_digest_and_a_moved_tag_is_not_followed() {
    let root = scratch("registry");
    let r = root.path();
    let reg = RegistryServer::start(&r.join("registry"), true, true);
    let key = r.join("a.key");
    keygen(&key);
    let v1 = package(r, "tp", "1.0.0", Some(&key));
    let tag = format!("{}/tools/tp:stable", reg.addr);
    let digest = push(&reg, &v1, &tag);

    // Another tool reads what toolhost wrote: the artifact's type, its one
    // layer, and the signature beside it under the referrers tag.
    let cert_dir = r.join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::copy(&reg.ca, cert_dir.join("ca.crt")).unwrap();
    let cert_arg = format!("--cert-dir={}", cert_dir.display());
    let (ok, raw) = reg.skopeo(&["inspect", "--raw", &cert_arg, &format!("docker://{tag}")]);
    assert!(ok, "skopeo inspect: {raw}");
    let manifest: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.toolhost.plugin.v1"
    );
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.toolhost.plugin.package.v1.tar+gzip"
    );
    let sig_tag = format!(
        "docker://{}/tools/tp:{}",
        reg.addr,
        digest.replacen(':', "-", 1)
    );
    let (ok, index) = reg.skopeo(&["inspect", "--raw", &cert_arg, &sig_tag]);
    assert!(
        ok && index.contains("application/vnd.toolhost.signature.v1"),
        "{index}"
    );

    // Installed by tag, recorded by digest, and it answers.
    let d = daemon(r, &key, &reg).await;
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(ok, "install by tag: {text}");
    let pinned = format!("{}/tools/tp@{digest}", reg.addr);
    assert!(text.contains(&format!("pulled {pinned}")), "{text}");
    let show = shown(r, "tp");
    assert_eq!(show["source"], pinned, "{show}");
    let (ok, status) = admin(r, &["status"]);
    assert!(
        ok && status.contains(&format!("source: {pinned}")),
        "{status}"
    );
    let c = agent(&d.url, TOKEN).await;
    let out = call_tool(
        &c,
        "kandev_tp_echo",
        serde_json::json!({ "msg": "hi", "n": 1 }),
    )
    .await
    .expect("answered");
    assert_ne!(out.is_error, Some(true), "{out:?}");

    // The tag moves to a package whose blob was tampered with in the
    // registry's storage: a restart does not follow the tag, and an
    // upgrade to it names the blob that does not match.
    let v2 = package(r, "tp", "2.0.0", Some(&key));
    let digest2 = push(&reg, &v2, &tag);
    assert_ne!(digest, digest2);
    let layer = layer_of(&reg, "tools/tp", &digest2);
    let file = blob_file(&reg, &layer);
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let (ok, text) = admin(r, &["plugins", "upgrade", &tag]);
    assert!(!ok, "a tampered blob was taken: {text}");
    assert!(text.contains("does not match its digest"), "{text}");
    assert_eq!(shown(r, "tp")["source"], pinned);
    assert_eq!(shown(r, "tp")["version"], "1.0.0");
    drop(c);
    drop(d);
    let d = daemon(r, &key, &reg).await;
    toolhost_e2e::as_run::ready(&d, "tp").await;
    assert_eq!(
        shown(r, "tp")["source"],
        pinned,
        "a restart followed the tag"
    );
    drop(d);
}

#[tokio::test]
async fn what_a_registry_owner_can_change_is_refused_by_name_and_nothing_is_placed() {
    let root = scratch("registry-hostile");
    let r = root.path();
    let reg = RegistryServer::start(&r.join("registry"), true, true);
    let key = r.join("a.key");
    keygen(&key);
    let _d = daemon(r, &key, &reg).await;

    // Unsigned, with a key trusted: refused, naming why.
    let unsigned = package(r, "tp", "1.0.0", None);
    let tag = format!("{}/tools/tp:unsigned", reg.addr);
    push(&reg, &unsigned, &tag);
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(!ok && text.contains("unsigned"), "{text}");
    nothing_placed(r);

    // Another package's signature, pushed as this one's: its subject is
    // this package, but it signs another statement.
    let other = package(r, "tp", "1.0.1", Some(&key));
    let forged = r.join("forged.tar.gz");
    std::fs::copy(&unsigned, &forged).unwrap();
    std::fs::copy(
        format!("{}.minisig", other.display()),
        format!("{}.minisig", forged.display()),
    )
    .unwrap();
    let tag = format!("{}/tools/tp:forged", reg.addr);
    push(&reg, &forged, &tag);
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(!ok && text.contains("signature"), "{text}");
    nothing_placed(r);

    // A signed package's signature listed for an unsigned one: its
    // subject is another manifest, so it is not considered at all.
    let signed_digest = push(&reg, &other, &format!("{}/tools/tp:signed", reg.addr));
    let unsigned_digest = push(&reg, &unsigned, &format!("{}/tools/tp:copy", reg.addr));
    let cert_dir = r.join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::copy(&reg.ca, cert_dir.join("ca.crt")).unwrap();
    let (ok, out) = reg.skopeo(&[
        "copy",
        "--all",
        &format!("--src-cert-dir={}", cert_dir.display()),
        &format!("--dest-cert-dir={}", cert_dir.display()),
        &format!(
            "docker://{}/tools/tp:{}",
            reg.addr,
            signed_digest.replacen(':', "-", 1)
        ),
        &format!(
            "docker://{}/tools/tp:{}",
            reg.addr,
            unsigned_digest.replacen(':', "-", 1)
        ),
    ]);
    assert!(ok, "skopeo copy of the referrers tag: {out}");
    let (ok, text) = admin(
        r,
        &[
            "plugins",
            "install",
            &format!("{}/tools/tp@{unsigned_digest}", reg.addr),
        ],
    );
    assert!(!ok && text.contains("unsigned"), "{text}");
    nothing_placed(r);

    // A blob changed in the registry's storage after the push.
    let good = package(r, "tp", "1.0.2", Some(&key));
    let digest = push(&reg, &good, &format!("{}/tools/tp:changed", reg.addr));
    let file = blob_file(&reg, &layer_of(&reg, "tools/tp", &digest));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[0] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let (ok, text) = admin(
        r,
        &[
            "plugins",
            "install",
            &format!("{}/tools/tp@{digest}", reg.addr),
        ],
    );
    assert!(!ok && text.contains("does not match its digest"), "{text}");
    nothing_placed(r);
    assert!(
        std::fs::read_dir(r.join("state/registry/packages"))
            .map(|rd| rd.flatten().count())
            .unwrap_or(0)
            == 0,
        "a refused package was kept in the cache"
    );

    // A registry that sends a manifest larger than any package needs,
    // declared or streamed without a length: a real registry refuses to
    // store one, so this one is the attacker's own (plain HTTP on
    // loopback, which toolhost allows).
    let hostile = hostile_registry();
    for tag in ["declared", "streamed"] {
        let (ok, text) = admin(
            r,
            &["plugins", "install", &format!("{hostile}/tools/tp:{tag}")],
        );
        assert!(
            !ok && text.contains("larger than its limit"),
            "{tag}: {text}"
        );
        nothing_placed(r);
    }
    nothing_placed(r);
}

#[tokio::test]
async fn an_install_needs_no_registry_once_pulled_and_a_copy_made_by_skopeo_installs() {
    let root = scratch("registry-cache");
    let r = root.path();
    let mut reg = RegistryServer::start(&r.join("registry"), true, true);
    let key = r.join("a.key");
    keygen(&key);
    let v1 = package(r, "tp", "1.0.0", Some(&key));
    let tag = format!("{}/tools/tp:1.0.0", reg.addr);
    let digest = push(&reg, &v1, &tag);
    let _d = daemon(r, &key, &reg).await;
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(ok, "{text}");

    // The registry goes away: a re-install, by digest or by its tag,
    // comes from the cache.
    reg.stop();
    let (ok, text) = admin(r, &["plugins", "remove", "tp"]);
    assert!(ok, "{text}");
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(ok, "a re-install by tag with the registry down: {text}");
    let (ok, text) = admin(r, &["plugins", "remove", "tp"]);
    assert!(ok, "{text}");
    let pinned = format!("{}/tools/tp@{digest}", reg.addr);
    let (ok, text) = admin(r, &["plugins", "install", &pinned]);
    assert!(ok, "a re-install by digest with the registry down: {text}");
    // Something never pulled cannot come from the cache.
    let (ok, text) = admin(
        r,
        &[
            "plugins",
            "upgrade",
            &format!("{}/tools/tp:2.0.0", reg.addr),
        ],
    );
    assert!(!ok && text.contains("could not be reached"), "{text}");

    // Copied by skopeo, package and signature, into another registry
    // (no credentials there): it installs from the copy.
    let reg = reg.restart();
    let other = RegistryServer::start(&r.join("other"), true, false);
    let cert_dir = r.join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    std::fs::copy(&reg.ca, cert_dir.join("ca.crt")).unwrap();
    let other_ca = r.join("other-certs");
    std::fs::create_dir_all(&other_ca).unwrap();
    std::fs::copy(&other.ca, other_ca.join("ca.crt")).unwrap();
    let v2 = package(r, "tp", "2.0.0", Some(&key));
    let digest2 = push(&reg, &v2, &format!("{}/tools/tp:2.0.0", reg.addr));
    for t in ["2.0.0".to_owned(), digest2.replacen(':', "-", 1)] {
        let (ok, out) = reg.skopeo(&[
            "copy",
            "--all",
            &format!("--src-cert-dir={}", cert_dir.display()),
            &format!("--dest-cert-dir={}", other_ca.display()),
            &format!("docker://{}/tools/tp:{t}", reg.addr),
            &format!("docker://{}/mirror/tp:{t}", other.addr),
        ]);
        assert!(ok, "skopeo copy {t}: {out}");
    }
    // The daemon trusts the first registry's CA only: add the second's.
    drop(_d);
    let both = r.join("both.pem");
    std::fs::write(
        &both,
        [
            std::fs::read(&reg.ca).unwrap(),
            std::fs::read(&other.ca).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    let extra = format!(
        "[install]\ntrusted_keys = [{:?}]\n\n[registry]\nca_files = [{:?}]\n",
        format!("{}.pub", key.display()),
        both.display().to_string()
    );
    let cfg = TestConfig::new(r, &[])
        .sandbox(account())
        .extra(&extra)
        .build();
    let _d = Daemon::start(r, &cfg, &[]);
    toolhost_e2e::as_run::ready(&_d, "tp").await;
    let (ok, text) = admin(
        r,
        &[
            "plugins",
            "upgrade",
            &format!("{}/mirror/tp:2.0.0", other.addr),
        ],
    );
    assert!(ok, "an upgrade from the copy: {text}");
    assert!(
        text.contains(&format!("digest {} -> {}", digest, digest2)),
        "the upgrade names the digests: {text}"
    );
    assert_eq!(shown(r, "tp")["version"], "2.0.0");
}

/// A registry of the attacker's own on loopback: `/v2/` answers, and
/// every manifest is 5 MiB, declared (`:declared`) or chunked with no
/// length (`:streamed`). On threads of its own: the test's runtime is
/// blocked while the CLI runs. Returns `127.0.0.1:PORT`.
fn hostile_registry() -> String {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
                    // A TLS hello (0x16) gets nothing: this one speaks HTTP.
                    if s.read(&mut b).unwrap_or(0) == 0 || (head.is_empty() && b[0] == 0x16) {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let big = vec![b'x'; 5 << 20];
                let kind = "content-type: application/vnd.oci.image.manifest.v1+json";
                let _ = if head.starts_with("GET /v2/ ") {
                    s.write_all(
                        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}",
                    )
                } else if head.contains("/manifests/declared ") {
                    s.write_all(format!("HTTP/1.1 200 OK\r\nconnection: close\r\n{kind}\r\ncontent-length: {}\r\n\r\n", big.len()).as_bytes())
                        .and_then(|()| s.write_all(&big))
                } else {
                    s.write_all(format!("HTTP/1.1 200 OK\r\nconnection: close\r\n{kind}\r\ntransfer-encoding: chunked\r\n\r\n").as_bytes())
                        .and_then(|()| {
                            for chunk in big.chunks(64 << 10) {
                                s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
                                s.write_all(chunk)?;
                                s.write_all(b"\r\n")?;
                            }
                            s.write_all(b"0\r\n\r\n")
                        })
                };
            });
        }
    });
    addr
}

/// A registry that takes only tokens (Docker's token authentication): the
/// push and the daemon's pull each answer its challenge by asking the
/// realm for a token with the credentials of the auth file; without them,
/// nothing is pulled and the refusal names where credentials were looked
/// for.
#[tokio::test]
async fn a_registry_that_takes_only_tokens_is_reached_through_its_token_flow() {
    let root = scratch("registry-tokens");
    let r = root.path();
    let tokens = TokenServer::start(&r.join("tokens"), USER, PASSWORD);
    let reg = RegistryServer::start_with_tokens(&r.join("registry"), &tokens);
    let key = r.join("a.key");
    keygen(&key);
    let v1 = package(r, "tp", "1.0.0", Some(&key));
    let tag = format!("{}/tools/tp:1.0.0", reg.addr);
    let digest = push(&reg, &v1, &tag);
    assert!(
        tokens.issued.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "no token was asked for"
    );
    let _d = daemon(r, &key, &reg).await;
    let (ok, text) = admin(r, &["plugins", "install", &tag]);
    assert!(ok, "install through the token flow: {text}\n{}", reg.log());
    assert_eq!(
        shown(r, "tp")["source"],
        format!("{}/tools/tp@{digest}", reg.addr)
    );

    // Credentials the token server refuses: no token, nothing pulled.
    let wrong = r.join("wrong.json");
    std::fs::write(
        &wrong,
        serde_json::json!({ "auths": { reg.addr.clone(): { "auth": "YWxpY2U6bm8=" } } })
            .to_string(),
    )
    .unwrap();
    let ca = reg.ca.display().to_string();
    let refused_before = tokens.refused.load(std::sync::atomic::Ordering::SeqCst);
    let (ok, text) = toolhost_e2e::cli_env(
        &[("REGISTRY_AUTH_FILE", wrong.as_path())],
        &[
            "push",
            v1.to_str().unwrap(),
            &format!("{}/tools/tp:again", reg.addr),
            "--ca-file",
            &ca,
        ],
    );
    assert!(
        !ok && text.contains("refused access") && text.contains("wrong.json"),
        "{text}"
    );
    assert!(
        !text.contains("YWxpY2U6bm8") && !text.contains("alice:no"),
        "a credential was printed: {text}"
    );
    assert!(tokens.refused.load(std::sync::atomic::Ordering::SeqCst) > refused_before);
}
