//! Operating a daemon of any size: `ListPlugins` summaries by default,
//! everything on request, pages keyed by id; `GetStatus`'s count by state;
//! and the CLI over them (`status`, `plugins list`, `plugins show`).
//! `scale::` runs the same at a thousand plugins.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use toolhost_admin::admin as pb;
use toolhost_e2e::{Daemon, Scratch, TestConfig, bin, eventually, testplug_dir};

const WAIT: Duration = Duration::from_secs(30);

/// The CLI against the daemon at `admin`: (success, stdout, stderr).
fn cli(admin: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(bin("toolhost"))
        .args(args)
        .arg("--admin")
        .arg(admin)
        .output()
        .expect("run the CLI");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(admin: &Path, args: &[&str]) -> Value {
    let (ok, out, err) = cli(admin, args);
    assert!(ok, "{args:?}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

async fn page(
    a: &mut toolhost_admin::Client,
    req: pb::ListPluginsRequest,
) -> Result<pb::ListPluginsResponse, tonic::Status> {
    a.list_plugins(req).await.map(tonic::Response::into_inner)
}

fn ids(r: &pb::ListPluginsResponse) -> Vec<&str> {
    r.plugins.iter().map(|p| p.id.as_str()).collect()
}

#[tokio::test]
async fn plugins_are_listed_in_summary_by_page_and_in_full_on_request() {
    let root = Scratch::new("listing");
    let dirs: Vec<_> = ["tp-a", "tp-b", "tp-c"]
        .iter()
        .map(|id| testplug_dir(root.path(), id, "normal"))
        .collect();
    let d = Daemon::start(
        root.path(),
        &TestConfig::new(root.path(), &dirs).build(),
        &[],
    );
    for id in ["tp-a", "tp-b", "tp-c"] {
        d.wait_metric(
            &format!("toolhost_plugin_state{{plugin=\"{id}\",state=\"ready\"}}"),
            1.0,
        )
        .await;
    }
    let sock = root.path().join("state/admin.sock");
    let mut a = eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await;

    // A plain request: every plugin, each a summary: what grows with a
    // plugin's tools is left out.
    let all = page(&mut a, pb::ListPluginsRequest::default())
        .await
        .unwrap();
    assert_eq!(
        (ids(&all), all.total, all.next_after.as_str()),
        (vec!["tp-a", "tp-b", "tp-c"], 3, "")
    );
    for p in &all.plugins {
        assert_eq!(p.state, "ready", "{p:?}");
        assert!(p.policies.is_empty(), "{p:?}");
        assert!(!p.sandbox.is_empty(), "{p:?}");
        // Why a rule is not enforced stays; what an enforced one holds
        // reads the same for every plugin, and is left to `detail`.
        assert!(
            p.sandbox
                .iter()
                .all(|r| (r.state == "enforced") == r.detail.is_empty()),
            "{:?}",
            p.sandbox
        );
    }

    // Pages keyed by id: the last id of one is where the next starts,
    // and a key that is no plugin's id still sorts in its place.
    let first = page(
        &mut a,
        pb::ListPluginsRequest {
            page_size: 2,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (ids(&first), first.next_after.as_str()),
        (vec!["tp-a", "tp-b"], "tp-b")
    );
    let rest = page(
        &mut a,
        pb::ListPluginsRequest {
            page_size: 2,
            after: first.next_after.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (ids(&rest), rest.next_after.as_str(), rest.total),
        (vec!["tp-c"], "", 3)
    );
    for (after, want) in [
        ("tp-aa", vec!["tp-b", "tp-c"]),
        ("", vec!["tp-a", "tp-b", "tp-c"]),
        ("zzz", vec![]),
        ("\u{0}", vec!["tp-a", "tp-b", "tp-c"]),
    ] {
        let r = page(
            &mut a,
            pb::ListPluginsRequest {
                after: after.into(),
                page_size: u32::MAX,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(ids(&r), want, "after {after:?}");
    }

    // One plugin in full: each tool's policy, each rule explained.
    let one = page(
        &mut a,
        pb::ListPluginsRequest {
            id: "tp-b".into(),
            detail: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(ids(&one), vec!["tp-b"]);
    let p = &one.plugins[0];
    assert!(
        p.policies.iter().any(|t| t.tool == "kandev_tp_b_echo"),
        "{:?}",
        p.policies
    );
    assert!(
        p.policies
            .iter()
            .all(|t| t.tool.starts_with("kandev_tp_b_")),
        "only its own tools: {:?}",
        p.policies
    );
    assert!(p.sandbox.iter().all(|r| !r.detail.is_empty()), "{p:?}");
    // An id that is not installed, with a terminal's escapes in it: not
    // found, and the message cannot drive the operator's terminal.
    let missing = page(
        &mut a,
        pb::ListPluginsRequest {
            id: "nope\u{1b}[2J\nforged line".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        !missing.message().contains('\u{1b}') && !missing.message().contains('\n'),
        "{:?}",
        missing.message()
    );

    // The count by state, without listing anyone.
    let disabled = cli(&sock, &["plugins", "disable", "tp-c"]);
    assert!(disabled.0, "{disabled:?}");
    let st = a
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.plugin_states.get("ready"), Some(&2), "{st:?}");
    assert_eq!(st.plugin_states.get("disabled"), Some(&1), "{st:?}");

    // The CLI: pages, summaries and detail.
    let (ok, out, err) = cli(
        &sock,
        &["plugins", "list", "--limit", "2", "--format", "json"],
    );
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert!(ok && listed.as_array().map(Vec::len) == Some(2), "{out}");
    assert!(
        err.contains("toolhost plugins list --after tp-b"),
        "where the next page starts: {err}"
    );
    let rest = json(
        &sock,
        &["plugins", "list", "--after", "tp-b", "--format", "json"],
    );
    assert_eq!(rest[0]["id"], "tp-c", "{rest}");
    assert_eq!(rest[0]["state"], "disabled", "{rest}");
    let (ok, _, err) = cli(&sock, &["plugins", "list", "--limit", "0"]);
    assert!(!ok && err.contains("--limit"), "{err}");
    let (ok, text, _) = cli(&sock, &["plugins", "list"]);
    assert!(
        ok && text.contains("tp-a") && text.contains("tp-c"),
        "{text}"
    );

    let listed = json(&sock, &["plugins", "list", "--format", "json"]);
    assert!(
        listed.as_array().is_some_and(
            |v| v.len() == 3 && v.iter().all(|p| p["policies"] == Value::Array(vec![]))
        ),
        "{listed}"
    );
    // status: each plugin at a glance.
    let status = json(&sock, &["status", "--format", "json"]);
    assert_eq!(status["plugin_states"]["ready"], 2, "{status}");
    let plugins = status["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 3, "{status}");
    assert_eq!(
        (
            &plugins[0]["id"],
            &plugins[0]["state"],
            &plugins[0]["needs_a_look"]
        ),
        (
            &Value::from("tp-a"),
            &Value::from("ready"),
            &Value::from(false)
        ),
        "{status}"
    );
    assert!(
        plugins.iter().all(|p| p.get("policies").is_none()),
        "{status}"
    );
    let detail = json(&sock, &["status", "--format", "json", "--detail"]);
    assert!(
        detail["plugins"][0]["policies"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "{detail}"
    );
    let shown = json(&sock, &["plugins", "show", "tp-a", "--format", "json"]);
    assert!(
        shown["policies"].as_array().is_some_and(|v| !v.is_empty()),
        "{shown}"
    );
    let (ok, text, _) = cli(&sock, &["status"]);
    assert!(
        ok && text.contains("plugins   3 installed: 2 ready, 1 disabled"),
        "{text}"
    );
    // Three plugins: each has its line.
    for id in ["tp-a", "tp-b", "tp-c"] {
        assert!(text.contains(id), "{text}");
    }
    let (ok, _, err) = cli(&sock, &["plugins", "show", "nope"]);
    assert!(
        !ok && err.contains("no plugin \"nope\" is installed"),
        "{err}"
    );
}
