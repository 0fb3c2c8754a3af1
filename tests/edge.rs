//! The operator's edge, attacked: a hostile archive, a manifest written to
//! steer the operator's terminal, a header bomb on the admin socket, a
//! plugin that fills its quota (the whole disk: `disk.rs`), a client that asks a
//! plugin's listener who it is, and a plugin whose stderr is not UTF-8.
//!
//! Every test runs as whoever runs it: CI runs this suite as root, where
//! the plugins run as `[sandbox] user = "nobody"`, and again as an
//! unprivileged user, where they run as the daemon's own account. A test
//! that needs what only one of the two has (a file system to fill) says
//! how the other got it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::{
    Daemon, TOKEN, TestConfig, agent, call_tool, cli_at, eventually, peak_rss_kib, probeplug_dir,
};

use toolhost_e2e::as_run::{account, call, is_root, ready, scratch};

const WAIT: Duration = Duration::from_secs(30);

/// A daemon serving probe plugins `(id, what its manifest asks)` as this
/// run's account, with `extra` sections in its configuration; returns
/// once every one is ready.
async fn serving(root: &Path, plugins: &[(&str, &str)], extra: &str) -> Daemon {
    let dirs: Vec<PathBuf> = plugins
        .iter()
        .map(|(id, asks)| probeplug_dir(root, id, asks))
        .collect();
    let config = TestConfig::new(root, &dirs)
        .extra(extra)
        .sandbox(account())
        .build();
    let d = Daemon::start(root, &config, &[]);
    for (id, _) in plugins {
        ready(&d, id).await;
    }
    d
}

fn admin(root: &Path) -> PathBuf {
    root.join("state/admin.sock")
}

/// `plugins show ID --format json`.
fn shown(root: &Path, id: &str) -> Value {
    let (ok, out) = cli_at(&admin(root), &["plugins", "show", id, "--format", "json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

// ---------------------------------------------------------------- archives

/// A ustar header block.
fn header(name: &[u8], kind: u8, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

/// Writes `len` copies of `byte` (padded to a block) into a gzip stream.
fn fill_block(out: &mut impl std::io::Write, byte: u8, len: u64) {
    let chunk = vec![byte; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64);
        out.write_all(&chunk[..usize::try_from(n).unwrap()])
            .unwrap();
        left -= n;
    }
    let pad = (512 - len % 512) % 512;
    out.write_all(&vec![0u8; usize::try_from(pad).unwrap()])
        .unwrap();
}

/// The three archives the attack used, each a few hundred KiB on disk.
fn hostile_archives(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let plugin_toml = b"id = \"smuggled\"\nversion = \"1.0.0\"\nname = \"S\"\n[runtime]\ncommand = \"/bin/true\"\n";
    let gz = |name: &str, body: &dyn Fn(&mut flate2::write::GzEncoder<std::fs::File>)| {
        let path = dir.join(name);
        let mut out = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        body(&mut out);
        out.write_all(&[0u8; 1024]).unwrap();
        out.finish().unwrap();
        path
    };
    let manifest = |out: &mut flate2::write::GzEncoder<std::fs::File>| {
        out.write_all(&header(b"plugin.toml", b'0', plugin_toml.len() as u64))
            .unwrap();
        out.write_all(plugin_toml).unwrap();
        out.write_all(&vec![0u8; 512 - plugin_toml.len() % 512])
            .unwrap();
    };
    vec![
        (
            "a 128 MiB GNU long name",
            gz("long-name.tar.gz", &|out| {
                out.write_all(&header(b"././@LongLink", b'L', 128 << 20))
                    .unwrap();
                fill_block(out, b'a', 128 << 20);
                manifest(out);
            }),
        ),
        (
            "a 128 MiB PAX header",
            gz("pax-header.tar.gz", &|out| {
                out.write_all(&header(b"pax", b'x', 128 << 20)).unwrap();
                fill_block(out, b'a', 128 << 20);
                manifest(out);
            }),
        ),
        (
            "a PAX size of 64 MiB over a ustar size of 0",
            gz("pax-size.tar.gz", &|out| {
                manifest(out);
                let record = b"17 size=67108864\n";
                out.write_all(&header(b"pax", b'x', record.len() as u64))
                    .unwrap();
                out.write_all(record).unwrap();
                out.write_all(&vec![0u8; 512 - record.len()]).unwrap();
                out.write_all(&header(b"big.bin", b'0', 0)).unwrap();
                fill_block(out, b'z', 64 << 20);
            }),
        ),
    ]
}

/// An install's memory is bounded whatever the archive holds: each of the
/// attack's archives is refused, nothing of it is installed, and the
/// daemon's peak memory stays within the README's figure.
#[tokio::test]
async fn hostile_archives_are_refused_within_the_stated_memory() {
    let root = scratch("edge-archives");
    let d = serving(
        root.path(),
        &[("keep", "")],
        "[limits]\nmax_archive_bytes = 16777216\n",
    )
    .await;
    let archives = hostile_archives(root.path());
    for (what, archive) in archives {
        let size = std::fs::metadata(&archive).unwrap().len();
        assert!(size < 1 << 20, "{what}: the archive is {size} bytes");
        let before = peak_rss_kib(d.pid());
        let (ok, out) = cli_at(
            &admin(root.path()),
            &["plugins", "install", &archive.display().to_string()],
        );
        assert!(!ok, "{what}: installed: {out}");
        assert!(
            out.contains("at most") || out.contains("more than 16777216 bytes"),
            "{what}: not refused for its size: {out}"
        );
        let grew = peak_rss_kib(d.pid()).saturating_sub(before);
        println!("{what}: refused; the daemon's peak grew by {grew} KiB");
        // The README's figure: an install holds at most 32 MiB.
        assert!(grew < 32 * 1024, "{what}: the peak grew by {grew} KiB");
        let (_, list) = cli_at(&admin(root.path()), &["plugins", "list"]);
        assert!(!list.contains("smuggled"), "{what}: {list}");
        let left: Vec<_> = std::fs::read_dir(root.path().join("state/plugins"))
            .map(|r| r.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{what}: left behind {left:?}");
    }
    // The daemon serves on.
    let c = agent(&d.url, TOKEN).await;
    let (ok, text) = call(&c, "kandev_keep_count", json!({})).await;
    assert!(ok, "{text}");
}

// ------------------------------------------------------ manifest text

/// A plugin whose every human-read string carries an escape sequence that
/// sets the terminal's title and hides what follows.
fn escaping_plugin(root: &Path) -> PathBuf {
    let dir = root.join("escapes");
    std::fs::create_dir_all(&dir).unwrap();
    let esc = "\\u001b]0;PWNED\\u0007\\u001b[8m";
    std::fs::write(
        dir.join("plugin.toml"),
        format!(
            "id = \"escapes\"\nversion = \"1.0.0\"\nname = \"Esc{esc}\"\ndescription = \"d{esc}\"\n\n\
             [runtime]\ncommand = \"/bin/true\"\n\n\
             [capabilities]\nfilesystem = [{{ path = \"/tmp/{esc} hidden\", access = \"read\" }}]\n\n\
             [[config]]\nname = \"greeting\"\ntype = \"string\"\ndescription = \"hi{esc}\"\n\n\
             [[tools]]\nname = \"t\"\ntitle = \"T{esc}\"\ndescription = \"x{esc}\"\nsurfaces = [\"chat\"]\n\
             input_schema = {{ type = \"object\" }}\ninstructions = \"i{esc}\"\n"
        ),
    )
    .unwrap();
    dir
}

/// Control characters in every manifest string a person reads are
/// refused, by field, and no command prints one raw.
#[tokio::test]
async fn a_manifest_that_would_steer_the_terminal_is_refused_and_never_printed_raw() {
    let root = scratch("edge-escapes");
    let dir = escaping_plugin(root.path());
    let path = dir.display().to_string();
    for args in [
        vec!["check", path.as_str()],
        vec!["check", path.as_str(), "--format", "json"],
    ] {
        let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted it");
        let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        assert!(!all.contains(&0x1b), "{args:?} printed a raw ESC");
        assert!(!all.contains(&0x07), "{args:?} printed a raw BEL");
        let text = String::from_utf8_lossy(&all);
        for field in [
            "`name`",
            "`description`",
            "`capabilities.filesystem[0].path`",
            "`config[0].description`",
            "`tools[0].title`",
            "`tools[0].description`",
            "`tools[0].instructions`",
        ] {
            assert!(text.contains(field), "{args:?}: {field} not named:\n{text}");
        }
        assert!(!text.contains("PWNED"), "{args:?} quoted the text:\n{text}");
        if args.contains(&"json") {
            let doc: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
            assert_eq!(doc["valid"], false);
        }
    }
    // An install is refused the same way, and says so without the bytes.
    let _d = serving(root.path(), &[("keep", "")], "").await;
    let out = std::process::Command::new(toolhost_e2e::bin("toolhost"))
        .args(["plugins", "install", &path, "--admin"])
        .arg(admin(root.path()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
    assert!(!all.contains(&0x1b), "install printed a raw ESC");
    assert!(
        String::from_utf8_lossy(&all).contains("control-character"),
        "{}",
        String::from_utf8_lossy(&all)
    );
}

// ------------------------------------------------------ the admin socket

/// An HPACK integer with an `n`-bit prefix under `first`.
fn hpack_int(out: &mut Vec<u8>, value: usize, n: u32, first: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | u8::try_from(value).unwrap());
        return;
    }
    out.push(first | u8::try_from(max).unwrap());
    let mut v = value - max;
    while v >= 128 {
        out.push(u8::try_from(v % 128).unwrap() | 0x80);
        v /= 128;
    }
    out.push(u8::try_from(v).unwrap());
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![
        u8::try_from(len >> 16).unwrap(),
        u8::try_from((len >> 8) & 0xff).unwrap(),
        u8::try_from(len & 0xff).unwrap(),
        kind,
        flags,
    ];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The bomb: a 4,000-byte header put in the dynamic table, then a block of
/// `refs` one-byte references to it (each decodes to the whole header).
fn header_bomb(refs: usize) -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    let mut first = Vec::new();
    for (n, v) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/toolhost.admin.v1.Admin/GetStatus"),
        (":authority", "localhost"),
    ] {
        first.push(0x00);
        hpack_int(&mut first, n.len(), 7, 0);
        first.extend_from_slice(n.as_bytes());
        hpack_int(&mut first, v.len(), 7, 0);
        first.extend_from_slice(v.as_bytes());
    }
    // Literal with incremental indexing, new name: index 62 from here on.
    first.push(0x40);
    hpack_int(&mut first, 5, 7, 0);
    first.extend_from_slice(b"x-big");
    hpack_int(&mut first, 4000, 7, 0);
    first.extend(std::iter::repeat_n(b'v', 4000));
    out.extend(frame(0x1, 0x4, 1, &first));
    let mut second = Vec::new();
    for _ in 0..refs {
        hpack_int(&mut second, 62, 7, 0x80);
    }
    // Cut into CONTINUATION frames of 16 KiB, as a client may.
    let mut chunks = second.chunks(16_384).peekable();
    let mut kind = 0x1;
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() { 0x4 } else { 0 };
        out.extend(frame(kind, flags, 3, chunk));
        kind = 0x9;
    }
    out
}

/// A local process that gets past the peer check sends one header block
/// that would decode to hundreds of megabytes: the connection is closed
/// before any of it is kept, the daemon's peak memory barely moves, and
/// the admin API serves on.
#[tokio::test]
async fn a_header_bomb_on_the_admin_socket_costs_nothing_before_the_token() {
    let root = scratch("edge-hpack");
    let d = serving(root.path(), &[("keep", "")], "").await;
    // 60,000 references (a 64 KiB block, 240 MB decoded) and 16,000 (under
    // the size cap on the wire, 64 MB decoded).
    for refs in [60_000, 16_000] {
        let before = peak_rss_kib(d.pid());
        let mut s = std::os::unix::net::UnixStream::connect(admin(root.path())).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let _ = s.write_all(&header_bomb(refs));
        // The daemon closes the connection: reads end.
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        let grew = peak_rss_kib(d.pid()).saturating_sub(before);
        println!("{refs} references: the daemon's peak grew by {grew} KiB");
        assert!(grew < 16 * 1024, "{refs} references: grew {grew} KiB");
    }
    let (ok, out) = cli_at(&admin(root.path()), &["status"]);
    assert!(ok, "{out}");
}

// ------------------------------------------------------------ the disk

/// A plugin past its quota: its writes fail and everything else goes on.
/// Under root the quota is held by the kernel (its data directory is a
/// file system of its own); unprivileged, it is measured, and the plugin
/// is switched to a read-only data directory until it is under again.
#[tokio::test]
async fn a_plugin_past_its_disk_quota_fails_its_writes_and_nothing_else_stops() {
    let root = scratch("edge-quota");
    let hog = probeplug_dir(root.path(), "hog", "[capabilities]\ndisk_mb = 16\n");
    let calm = probeplug_dir(root.path(), "calm", "");
    let image = if is_root() {
        "disk_quota = \"image\""
    } else {
        ""
    };
    let config = TestConfig::new(root.path(), &[hog, calm])
        .sandbox(account())
        .sandbox(image)
        .sandbox("disk_check_ms = 200")
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    ready(&d, "hog").await;
    ready(&d, "calm").await;
    let c = agent(&d.url, TOKEN).await;
    // One file past the quota fails in every mode (RLIMIT_FSIZE).
    let (ok, text) = call(&c, "kandev_hog_fill", json!({ "mb": 24, "files": 1 })).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("then:") && !text.starts_with("wrote 24"),
        "one 24 MiB file under a 16 MiB quota: {text}"
    );
    let _ = call(&c, "kandev_hog_fill", json!({ "clear": true })).await;
    let disk = eventually(WAIT, "a measured disk use", async || {
        let d = shown(root.path(), "hog")["disk"].clone();
        d["used_bytes"].is_u64().then_some(d)
    })
    .await;
    assert_eq!(disk["limit_bytes"], 16 << 20, "{disk}");
    if is_root() {
        assert_eq!(disk["kernel"], true, "{disk}");
        // Many small files: the file system itself is full.
        let (ok, text) = call(&c, "kandev_hog_fill", json!({ "mb": 64, "files": 32 })).await;
        assert!(ok, "{text}");
        assert!(text.contains("No space left"), "{text}");
    } else {
        assert_eq!(disk["kernel"], false, "{disk}");
        // Under the per-file limit, over the directory's: measured, then
        // read-only.
        let (ok, text) = call(&c, "kandev_hog_fill", json!({ "mb": 32, "files": 8 })).await;
        assert!(ok && text == "wrote 32 MiB", "{text}");
        eventually(WAIT, "hog over its quota", async || {
            shown(root.path(), "hog")["disk"]["over"]
                .as_bool()
                .filter(|o| *o)
        })
        .await;
        let data = root.path().join("state/data/hog/after.txt");
        eventually(WAIT, "hog's writes refused", async || {
            let (ok, text) = call(
                &c,
                "kandev_hog_write_file",
                json!({ "path": data.display().to_string() }),
            )
            .await;
            (!ok && text.contains("refused")).then_some(())
        })
        .await;
        // It may still delete, and writes again once under.
        let (ok, text) = call(&c, "kandev_hog_fill", json!({ "clear": true })).await;
        assert!(ok && text == "removed 8", "{text}");
        eventually(WAIT, "hog writing again", async || {
            let (ok, _) = call(
                &c,
                "kandev_hog_write_file",
                json!({ "path": data.display().to_string() }),
            )
            .await;
            ok.then_some(())
        })
        .await;
    }
    let (ok, text) = call(&c, "kandev_calm_count", json!({})).await;
    assert!(ok, "{text}");
    let (ok, out) = cli_at(&admin(root.path()), &["plugins", "show", "hog"]);
    assert!(
        ok && out.contains("disk ") && out.contains("of 16 MiB"),
        "{out}"
    );
}

// ------------------------------------------------- a plugin's listener

/// A client of a plugin's Unix listener sees the plugin's account in
/// `SO_PEERCRED`, never root's: the daemon listens on the plugin's behalf
/// as that account. (The pid is the daemon's; docs/PROTOCOL.md §3.)
#[tokio::test]
async fn a_plugins_listener_presents_the_plugins_account() {
    let root = scratch("edge-peercred");
    // Granted network, so its listen() calls go to the daemon.
    let d = serving(
        root.path(),
        &[("listener", "[capabilities]\nnetwork = { connect = [9] }\n")],
        "[plugin.listener]\ngrant = [\"network\"]\n",
    )
    .await;
    let c = agent(&d.url, TOKEN).await;
    let path = root.path().join("state/data/listener/l.sock");
    let (ok, text) = call(
        &c,
        "kandev_listener_serve_unix",
        json!({ "path": path.display().to_string() }),
    )
    .await;
    assert!(ok, "{text}");
    let stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let cred = rustix::net::sockopt::socket_peercred(&stream).unwrap();
    let (uid, gid) = if is_root() {
        (65534, 65534)
    } else {
        (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )
    };
    assert_eq!(cred.uid.as_raw(), uid, "{cred:?}");
    assert_eq!(cred.gid.as_raw(), gid, "{cred:?}");
    assert_eq!(
        u32::try_from(cred.pid.as_raw_nonzero().get()).unwrap(),
        d.pid(),
        "the pid is the daemon's, as documented: {cred:?}"
    );
}

// ------------------------------------------------- a plugin's output

/// Bytes that are not UTF-8 on a plugin's stderr are logged (escaped, as
/// replacement characters), the line after them too, and the plugin's
/// later writes never meet a closed pipe.
#[tokio::test]
async fn output_that_is_not_utf8_is_captured_to_the_end() {
    let root = scratch("edge-stderr");
    let d = serving(root.path(), &[("noisy", "")], "").await;
    let c = agent(&d.url, TOKEN).await;
    for _ in 0..2 {
        let (ok, text) = call(&c, "kandev_noisy_stderr_bytes", json!({})).await;
        assert!(ok && text == "written", "{text}");
    }
    eventually(WAIT, "the marker and the line after it", async || {
        let logs = d.logs();
        (logs.contains("MARKER-AFTER-BYTES") && logs.contains("after-49")).then_some(())
    })
    .await;
    let logs = d.logs();
    assert!(logs.contains("\u{fffd}\u{fffd} not utf-8"), "{logs}");
    assert!(
        logs.contains("\\u{1b}[8m hidden"),
        "the escape was not escaped"
    );
    assert!(!logs.contains('\u{1b}'), "a raw ESC reached the log");
}

// ---------------------------------------------------------- decisions

/// An installed plugin runs its own code: a command that leaves its
/// directory, or names another plugin's launcher, is refused.
#[tokio::test]
async fn a_plugin_cannot_run_another_plugins_launcher() {
    let root = scratch("edge-command");
    let keep = probeplug_dir(root.path(), "keep", "");
    let launcher = keep.join("run.sh");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nexec {} \"$@\"\n",
            toolhost_e2e::bin("testplug").display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = TestConfig::new(root.path(), std::slice::from_ref(&keep))
        .sandbox(account())
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    ready(&d, "keep").await;
    for (id, command) in [
        ("borrower", launcher.display().to_string()),
        ("climber", "../keep/run.sh".to_owned()),
    ] {
        let dir = root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("plugin.toml"),
            format!(
                "id = \"{id}\"\nversion = \"1.0.0\"\nname = \"B\"\n[runtime]\ncommand = {command:?}\n\n\
                 [[tools]]\nname = \"count\"\ndescription = \"c\"\nsurfaces = [\"chat\"]\ninput_schema = {{ type = \"object\" }}\n"
            ),
        )
        .unwrap();
        let (ok, out) = cli_at(
            &admin(root.path()),
            &["plugins", "install", &dir.display().to_string()],
        );
        assert!(!ok, "{id} installed: {out}");
        assert!(out.contains("runtime-command"), "{id}: {out}");
    }
}

/// The bounding set, as the docs say: emptied under a root daemon, the
/// daemon's own under an unprivileged one; no capability in any other set
/// either way.
#[tokio::test]
async fn the_bounding_set_is_as_documented() {
    let root = scratch("edge-caps");
    let d = serving(root.path(), &[("caps", "")], "").await;
    let c = agent(&d.url, TOKEN).await;
    let r = call_tool(&c, "kandev_caps_caps", json!({})).await.unwrap();
    let caps = r.structured_content.clone().unwrap_or(Value::Null);
    for set in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(caps[set], "0000000000000000", "{set}: {caps}");
    }
    let mine = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:").map(|v| v.trim().to_owned()))
        .unwrap();
    let want = if is_root() {
        "0000000000000000".to_owned()
    } else {
        mine
    };
    assert_eq!(caps["CapBnd"], want, "{caps}");
}
