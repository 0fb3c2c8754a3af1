//! The disk against a hostile plugin: one that keeps the disk holding the
//! daemon's state full of bytes and of inodes, one that hides a writer in
//! a detached grandchild, one that writes where a quota used not to look
//! (`$TMPDIR`, a million names for one file).
//!
//! Each test is written as the attacker would go about it, and runs as
//! whoever runs it: CI runs this suite as root, where the plugins run as
//! `[sandbox] user = "nobody"` (and a cgroup holds their processes), and
//! again as an unprivileged user, where they run as the daemon's own
//! account (and only the process tree holds them). A test that needs a
//! small file system to fill gets one ([`SmallFs`]) or says why not.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolhost_e2e::small_fs::SmallFs;
use toolhost_e2e::{Daemon, TOKEN, TestConfig, agent, cli_at, eventually, probeplug_dir};

use toolhost_e2e::as_run::{account, call, is_root, ready, scratch};

const WAIT: Duration = Duration::from_secs(30);

/// `plugins show ID --format json` through the admin socket at `admin`.
fn shown(admin: &Path, id: &str) -> Value {
    let (ok, out) = cli_at(admin, &["plugins", "show", id, "--format", "json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Runs an admin command that must succeed.
fn must(admin: &Path, args: &[&str]) -> String {
    let (ok, out) = cli_at(admin, args);
    assert!(
        ok,
        "`toolhost {}` failed on a full disk: {out}",
        args.join(" ")
    );
    out
}

/// Whether the process `pid` is alive (a zombie is not: it runs nothing).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// The pid a `hog` writer wrote into `dir` (`writer-<kind>.pid`).
async fn writer_pid(dir: &Path, kind: &str) -> u32 {
    let file = dir.join(format!("writer-{kind}.pid"));
    eventually(WAIT, "the writer's pid", async || {
        std::fs::read_to_string(&file).ok()?.trim().parse().ok()
    })
    .await
}

/// Every process running a `hog` writer into `dir`.
fn writers_into(dir: &Path) -> Vec<u32> {
    let want = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<String> = c
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.iter().any(|a| a == "--writer") && args.iter().any(|a| a.starts_with(&want))
            })
        })
        .filter(|pid| alive(*pid))
        .collect()
}

/// A probe plugin at `root/<id>` with its manifest's version set.
fn versioned(root: &Path, id: &str, version: &str, asks: &str) -> PathBuf {
    let dir = probeplug_dir(&root.join(format!("{id}-{version}")), id, asks);
    let path = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen(
            "version = \"1.0.0\"",
            &format!("version = \"{version}\""),
            1,
        ),
    )
    .unwrap();
    dir
}

/// A plugin keeps the disk holding the daemon's state full, bytes and
/// inodes: writers in the folder it was granted, one a detached
/// grandchild, one a thread, retrying every refused write at once so that
/// whatever is freed is theirs (what took the old reserve). What they
/// leave, the test takes too, to the last block and the last inode. Then
/// every lifecycle and configuration operation the operator has works,
/// and is kept.
#[tokio::test]
async fn a_plugin_that_keeps_the_disk_and_its_inodes_full_locks_out_no_operation() {
    let root = scratch("disk-full");
    let Some(small) = SmallFs::new(root.path()) else {
        println!(
            "not run: no small file system to fill (run as root, or set TOOLHOST_TEST_SMALL_FS as .ci/run does)"
        );
        return;
    };
    let shared = small.dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    }
    // The default quota (1024 MiB) is larger than the disk.
    let filler = probeplug_dir(
        root.path(),
        "filler",
        &format!(
            "[capabilities]\nfilesystem = [{{ path = {:?}, access = \"write\" }}]\n",
            shared.display().to_string()
        ),
    );
    let calm = probeplug_dir(
        root.path(),
        "calm",
        "[[config]]\nname = \"greeting\"\ntype = \"string\"\ndescription = \"What to say\"\ndefault = \"hello\"\n",
    );
    let other = probeplug_dir(root.path(), "other", "");
    let state = small.dir.join("state");
    let text = TestConfig::new(root.path(), &[filler, calm, other])
        .state(&state)
        .extra("[plugin.filler]\ngrant = [\"filesystem\"]\n")
        .sandbox(account())
        .sandbox("disk_check_ms = 200")
        .build();
    let d = Daemon::start(root.path(), &text, &[]);
    for id in ["filler", "calm", "other"] {
        ready(&d, id).await;
    }
    let admin = state.join("admin.sock");
    let c = agent(&d.url, TOKEN).await;
    let rest = small.dir.join("rest");
    SmallFs::keep_room_for_the_rest(&rest);
    let dir = shared.display().to_string();
    for args in [
        json!({ "dir": dir, "kind": "bytes", "detach": true }),
        json!({ "dir": dir, "kind": "inodes", "detach": true }),
        json!({ "dir": dir, "kind": "bytes" }),
    ] {
        let (ok, out) = call(&c, "kandev_filler_hog", args).await;
        assert!(ok, "{out}");
    }
    // The detached writers, found by their command lines: their pid files
    // may never be written, since the first writer can fill the disk
    // before the second starts (a loaded machine makes that likely).
    let detached = eventually(WAIT, "both detached writers running", async || {
        let found = writers_into(&shared);
        (found.len() >= 2).then_some(found)
    })
    .await;
    eventually(WAIT, "the disk nearly full", async || {
        let (bytes, inodes) = small.free();
        (bytes < 16 << 20 || inodes < 128).then_some(())
    })
    .await;
    // What the plugin's writers did not take, the test takes: no byte and
    // no inode free for anyone.
    let _ = SmallFs::take_the_rest(&rest);
    let (bytes, inodes) = small.free();
    assert!(
        bytes < 64 << 10 && inodes == 0,
        "still free: {bytes} bytes, {inodes} inodes"
    );

    // Every operation, on a disk with nothing free.
    must(&admin, &["plugins", "config", "calm", "greeting=hi there"]);
    ready(&d, "calm").await;
    let (ok, out) = call(&c, "kandev_calm_config", json!({ "names": ["greeting"] })).await;
    assert!(ok && out.contains("hi there"), "{out}");
    must(&admin, &["plugins", "disable", "other"]);
    must(&admin, &["plugins", "enable", "other"]);
    ready(&d, "other").await;
    must(&admin, &["plugins", "restart", "calm"]);
    ready(&d, "calm").await;
    let v1 = versioned(root.path(), "newbie", "1.0.0", "");
    must(&admin, &["plugins", "install", v1.to_str().unwrap()]);
    ready(&d, "newbie").await;
    let v2 = versioned(root.path(), "newbie", "1.0.1", "");
    must(&admin, &["plugins", "upgrade", v2.to_str().unwrap()]);
    // An upgrade that asks more of the sandbox is held; rejected, then
    // again and accepted.
    let asks = "[capabilities]\nmemory_mb = 1536\n";
    let v3 = versioned(root.path(), "newbie", "1.0.2", asks);
    let out = must(&admin, &["plugins", "upgrade", v3.to_str().unwrap()]);
    assert!(out.contains("held"), "{out}");
    must(&admin, &["plugins", "reject", "newbie"]);
    let v4 = versioned(root.path(), "newbie", "1.0.3", asks);
    let out = must(&admin, &["plugins", "upgrade", v4.to_str().unwrap()]);
    assert!(out.contains("held"), "{out}");
    must(
        &admin,
        &["plugins", "accept", "newbie", "--version", "1.0.3"],
    );
    ready(&d, "newbie").await;
    let (ok, out) = call(&c, "kandev_newbie_count", json!({})).await;
    assert!(ok, "{out}");
    must(&admin, &["plugins", "disable", "other"]);
    must(&admin, &["plugins", "remove", "newbie", "--purge"]);

    // What the operator did is kept, as the daemon reads it back.
    let saved = std::fs::read_to_string(state.join("plugins.json")).unwrap();
    let saved: Value = serde_json::from_str(&saved).unwrap();
    assert!(!saved.to_string().contains("newbie"), "{saved}");
    let (ok, out) = cli_at(&admin, &["plugins", "list", "--format", "json"]);
    assert!(ok, "{out}");
    assert!(!out.contains("newbie"), "{out}");
    let logs = d.logs_with(&["used a spare of the daemon's reserve"]).await;
    assert!(
        logs.contains("used a spare of the daemon's reserve"),
        "the disk was never full for the daemon: {logs}"
    );
    // Every writer of the plugin is gone: none could take what is freed.
    for pid in detached {
        eventually(WAIT, "the detached writer stopped", async || {
            (!alive(pid)).then_some(())
        })
        .await;
    }
    // Room again: the plugins may write, and the reserve is whole.
    std::fs::remove_dir_all(&rest).unwrap();
    for e in std::fs::read_dir(&shared).unwrap().flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    eventually(WAIT, "filler writable again", async || {
        (shown(&admin, "filler")["disk"]["short"] == false).then_some(())
    })
    .await;
    must(&admin, &["plugins", "enable", "other"]);
    ready(&d, "other").await;
    drop(c);
    drop(d);
    drop(small);
}

/// A plugin over its quota hides a writer in a detached grandchild (its
/// own session, its parent gone): when the plugin is switched to a
/// read-only data directory, and when it is stopped, the writer is gone
/// too. Before, as an unprivileged daemon, it kept writing after the
/// switch and outlived the plugin.
#[tokio::test]
async fn a_detached_writer_stops_when_its_plugin_goes_read_only_or_stops() {
    let root = scratch("disk-detached");
    let hog = probeplug_dir(root.path(), "hog", "[capabilities]\ndisk_mb = 16\n");
    let text = TestConfig::new(root.path(), &[hog])
        .sandbox(account())
        .sandbox("disk_check_ms = 200")
        .build();
    let d = Daemon::start(root.path(), &text, &[]);
    ready(&d, "hog").await;
    let admin = root.path().join("state/admin.sock");
    let data = root.path().join("state/data/hog");
    let c = agent(&d.url, TOKEN).await;
    let (ok, out) = call(
        &c,
        "kandev_hog_hog",
        json!({ "kind": "bytes", "detach": true }),
    )
    .await;
    assert!(ok, "{out}");
    let pid = writer_pid(&data, "bytes").await;
    let kernel = shown(&admin, "hog")["disk"]["kernel"] == true;
    if kernel {
        println!("the kernel holds this quota here: no read-only switch to test");
    } else {
        eventually(WAIT, "hog over its quota", async || {
            (shown(&admin, "hog")["disk"]["over"] == true).then_some(())
        })
        .await;
        eventually(
            WAIT,
            "the detached writer gone with the switch",
            async || (!alive(pid)).then_some(()),
        )
        .await;
        // Nothing of the plugin writes now: no process anywhere is a
        // writer into its data.
        assert_eq!(writers_into(&data), Vec::<u32>::new());
        let (ok, out) = call(&c, "kandev_hog_fill", json!({ "clear": true })).await;
        assert!(ok, "{out}");
        for e in std::fs::read_dir(&data).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("b-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // Under again, and its process that may write ready: until then,
        // the read-only one serves (a writer it started could not write).
        eventually(WAIT, "hog under its quota and writable again", async || {
            let disk = &shown(&admin, "hog")["disk"];
            (disk["over"] == false && disk["read_only"] == false).then_some(())
        })
        .await;
    }
    // A writer of inodes in its own temporary folder, then a stop.
    let tmp = data.join(".tmp");
    let (ok, out) = call(
        &c,
        "kandev_hog_hog",
        json!({ "dir": tmp.display().to_string(), "kind": "inodes", "detach": true }),
    )
    .await;
    assert!(ok, "{out}");
    let pid = writer_pid(&tmp, "inodes").await;
    assert!(alive(pid));
    must(&admin, &["plugins", "disable", "hog"]);
    eventually(WAIT, "the detached writer gone with the stop", async || {
        (!alive(pid)).then_some(())
    })
    .await;
    assert_eq!(writers_into(&data), Vec::<u32>::new());
    assert!(
        !d.logs().contains("panicked"),
        "the daemon panicked: {}",
        d.logs()
    );
}

/// The quota counts what a plugin writes wherever it may write: its
/// `$TMPDIR` (once the daemon's own temporary folder, outside every
/// quota), and names as well as bytes (a million hard links to one file
/// weigh nothing in bytes, and once stopped the count).
#[tokio::test]
async fn the_quota_counts_its_temporary_folder_and_every_name() {
    let root = scratch("disk-counted");
    let hog = probeplug_dir(root.path(), "hog", "[capabilities]\ndisk_mb = 16\n");
    let text = TestConfig::new(root.path(), &[hog])
        .sandbox(account())
        .sandbox("disk_check_ms = 200\ndisk_files = 500")
        .build();
    let d = Daemon::start(root.path(), &text, &[]);
    ready(&d, "hog").await;
    let admin = root.path().join("state/admin.sock");
    let c = agent(&d.url, TOKEN).await;
    let tmp = root.path().join("state/data/hog/.tmp");
    assert!(tmp.is_dir(), "the plugin's temporary folder is in its data");
    // 24 MiB into $TMPDIR, under a 16 MiB quota.
    let (ok, out) = call(
        &c,
        "kandev_hog_fill",
        json!({ "dir": tmp.display().to_string(), "mb": 24, "files": 8 }),
    )
    .await;
    assert!(ok, "{out}");
    let disk = shown(&admin, "hog")["disk"].clone();
    assert_eq!(disk["limit_files"], 500, "{disk}");
    if disk["kernel"] == true {
        assert!(
            out.contains("then:"),
            "the kernel let $TMPDIR past the quota: {out}"
        );
    } else {
        assert_eq!(out, "wrote 24 MiB");
        eventually(WAIT, "hog over its quota by its $TMPDIR", async || {
            (shown(&admin, "hog")["disk"]["over"] == true).then_some(())
        })
        .await;
    }
    let (ok, out) = call(
        &c,
        "kandev_hog_fill",
        json!({ "dir": tmp.display().to_string(), "clear": true }),
    )
    .await;
    assert!(ok, "{out}");
    eventually(WAIT, "hog under its quota", async || {
        (shown(&admin, "hog")["disk"]["over"] == false).then_some(())
    })
    .await;
    // The switch back: the process that may write serves.
    let probe = root.path().join("state/data/hog/probe.txt");
    eventually(WAIT, "hog writing again", async || {
        let (ok, _) = call(
            &c,
            "kandev_hog_write_file",
            json!({ "path": probe.display().to_string() }),
        )
        .await;
        ok.then_some(())
    })
    .await;
    // One 4 MiB file and 2,000 names for it: 4 MiB once, and 2,001 names
    // against a quota of 500.
    let (ok, out) = call(&c, "kandev_hog_links", json!({ "count": 2000, "mb": 4 })).await;
    assert!(ok, "{out}");
    if disk["kernel"] == true {
        // An inode is what the kernel counts: one file, many names.
        return;
    }
    assert_eq!(out, "linked 2000");
    eventually(WAIT, "hog over its quota by its names", async || {
        (shown(&admin, "hog")["disk"]["over"] == true).then_some(())
    })
    .await;
}
