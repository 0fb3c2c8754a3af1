//! Plugin configuration end to end: values from the configuration file
//! (inline, `_file`, `_env`) and from the admin API and the CLI reach the
//! plugin at start; a plugin missing a required value `needs_config` and
//! its tools are withheld until it is supplied; a change replaces the
//! process without failing a call; and secret values reach the plugin and
//! nothing else: no response, log line (trace included), metric, status or
//! error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use toolhost_admin::admin as pb;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, agent, bin, call_tool, eventually, http_request,
    listed_names, outcome_code, probeplug_dir,
};

const WAIT: Duration = Duration::from_secs(20);

/// As testplug computes it (FNV-1a, 64 bits).
fn fingerprint(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

const CFG_DECLS: &str = r#"
[[config]]
name = "api_url"
description = "Where the service is."
type = "string"
required = true

[[config]]
name = "retries"
description = "How often to retry."
type = "integer"
default = 3

[[config]]
name = "verbose"
description = "Say more."
type = "boolean"

[[config]]
name = "token"
description = "The service's API token."
type = "string"
required = true
secret = true

[[config]]
name = "backup_token"
description = "A second token."
type = "string"
secret = true
"#;

const NEEDY_DECLS: &str = r#"
[[config]]
name = "region"
description = "Which region."
type = "string"
required = true

[[config]]
name = "token"
description = "The service's API token."
type = "string"
required = true
secret = true
"#;

async fn admin(root: &Path) -> toolhost_admin::Client {
    let sock = root.join("state/admin.sock");
    eventually(WAIT, "the admin socket", async || {
        toolhost_admin::connect_unix(&sock).await.ok()
    })
    .await
}

/// `SetPluginConfig`: `values` set, `unset` unset.
async fn set_config(
    a: &mut toolhost_admin::Client,
    id: &str,
    values: &[(&str, &str)],
    unset: &[&str],
) -> Result<pb::SetPluginConfigResponse, tonic::Status> {
    a.set_plugin_config(pb::SetPluginConfigRequest {
        id: id.to_owned(),
        values: values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        unset: unset.iter().map(|n| (*n).to_owned()).collect(),
    })
    .await
    .map(tonic::Response::into_inner)
}

async fn plugin(c: &mut toolhost_admin::Client, id: &str) -> pb::PluginStatus {
    c.list_plugins(pb::ListPluginsRequest::default())
        .await
        .expect("list plugins")
        .into_inner()
        .plugins
        .into_iter()
        .find(|p| p.id == id)
        .expect("the plugin is listed")
}

async fn config_of(c: &toolhost_e2e::AgentClient, tool: &str, names: &[&str]) -> Value {
    let r = call_tool(c, tool, json!({ "names": names }))
        .await
        .expect("the call is answered");
    assert_eq!(outcome_code(&r), "ok", "{r:?}");
    r.structured_content.expect("structured content")
}

fn cli(root: &Path, args: &[&str]) -> (bool, String) {
    toolhost_e2e::cli_at(&root.join("state/admin.sock"), args)
}

#[tokio::test]
async fn values_arrive_needs_config_withholds_and_secrets_reach_the_plugin_alone() {
    let root = Scratch::new("config");
    // Secrets shaped like real ones; each must reach the plugin and
    // nothing else.
    let from_file = "ghp_CfgFile9Zq8Wx7Ec6Rv5Tb4Yn3Um2Lk1";
    let from_env = "sk-proj-CfgEnvQ4x9Lm2Vb7Nc1Zx8Kj5";
    let from_cli = "xoxb-CfgCli-1234567890123-AbCdEfGh";
    let from_api = "glpat-CfgApi-Zq8Wx7Ec6Rv5Tb4";
    let not_a_number = "AKIACFGNOTANUMBER7Q4W";
    let secrets = [from_file, from_env, from_cli, from_api, not_a_number];
    std::fs::write(root.path().join("token.txt"), format!("{from_file}\n")).unwrap();
    std::fs::write(root.path().join("cli-token.txt"), from_cli).unwrap();
    let cfg = probeplug_dir(root.path(), "cfg", CFG_DECLS);
    let needy = probeplug_dir(root.path(), "needy", NEEDY_DECLS);
    let config = TestConfig::new(root.path(), &[cfg, needy])
        .extra(&format!(
            "[plugin.cfg.config]\napi_url = \"https://api.example\"\nverbose = true\ntoken_file = {:?}\nbackup_token_env = \"PROBE_BACKUP_TOKEN\"\n",
            root.path().join("token.txt").display().to_string()
        ))
        .build();
    let d = Daemon::start_with(root.path(), &config, &[], "trace", |cmd| {
        cmd.env("PROBE_BACKUP_TOKEN", from_env);
    });
    d.wait_metric("toolhost_plugin_state{plugin=\"cfg\",state=\"ready\"}", 1.0)
        .await;
    d.wait_metric(
        "toolhost_plugin_config_missing{plugin=\"needy\",key=\"token\"}",
        1.0,
    )
    .await;
    let mut shown: Vec<String> = Vec::new();

    // From the file: inline values, a secret file, a daemon variable.
    let c = agent(&d.url, TOKEN).await;
    let names = listed_names(&c).await;
    assert!(names.iter().any(|n| n == "kandev_cfg_config"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("kandev_needy_")),
        "a plugin that needs configuration lists no tool: {names:?}"
    );
    // A call to one says why, not "Unknown tool"; a name nobody declared
    // is still unknown.
    let r = toolhost_e2e::call_tool(&c, "kandev_needy_count", json!({}))
        .await
        .expect("a tool result");
    assert_eq!(toolhost_e2e::outcome_code(&r), "tool_unavailable", "{r:?}");
    let said: String = r
        .content
        .iter()
        .filter_map(|b| b.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(
        said.contains("needs configuration") && said.contains("region, token"),
        "{said}"
    );
    let unknown = toolhost_e2e::call_tool(&c, "kandev_needy_nothing_like_it", json!({})).await;
    assert!(
        unknown.is_err_and(|e| e.to_string().contains("Unknown tool")),
        "an undeclared name is unknown"
    );
    let got = config_of(
        &c,
        "kandev_cfg_config",
        &["api_url", "retries", "verbose", "token", "backup_token"],
    )
    .await;
    assert_eq!(got["values"]["api_url"], "https://api.example");
    assert_eq!(got["values"]["retries"], 3, "the manifest's default");
    assert_eq!(got["values"]["verbose"], true);
    assert!(
        got["values"].get("token").is_none(),
        "a secret is never a plain value"
    );
    assert_eq!(got["secrets"]["token"], fingerprint(from_file));
    assert_eq!(got["secrets"]["backup_token"], fingerprint(from_env));
    assert_eq!(
        got["file_left"], false,
        "the SDK deletes the file once read"
    );
    shown.push(got.to_string());

    // A call to a plugin waiting for its configuration says so.
    let mut a = admin(root.path()).await;
    let st = plugin(&mut a, "needy").await;
    assert_eq!(st.state, "needs_config");
    assert_eq!(st.missing_config, ["region", "token"]);
    shown.push(format!("{st:?}"));

    // The admin API checks names and types, and never repeats a value.
    let wrong = set_config(&mut a, "cfg", &[("retries", not_a_number)], &[])
        .await
        .expect_err("not an integer");
    assert_eq!(wrong.code(), tonic::Code::InvalidArgument);
    assert!(
        wrong.message().contains("`retries` must be an integer"),
        "{}",
        wrong.message()
    );
    shown.push(wrong.message().to_owned());
    let unknown = set_config(&mut a, "needy", &[("regoin", "eu")], &[])
        .await
        .expect_err("undeclared");
    assert!(
        unknown
            .message()
            .contains("declares no config item `regoin`")
    );
    assert!(
        unknown.message().contains("region, token"),
        "{}",
        unknown.message()
    );

    // A hostile admin caller: an oversized id or name is refused before
    // anything is looked up, and not repeated.
    let long = "x".repeat(10_000);
    for (id, name) in [(long.as_str(), "region"), ("needy", long.as_str())] {
        let e = set_config(&mut a, id, &[(name, "v")], &[])
            .await
            .expect_err("oversized");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(!e.message().contains("xxxx"), "{}", e.message());
    }
    let e = set_config(&mut a, "nobody", &[("k", "v")], &[])
        .await
        .expect_err("not installed");
    assert_eq!(e.code(), tonic::Code::NotFound);

    // One value at a time: still waiting for the other.
    let r = set_config(&mut a, "needy", &[("region", "eu-west")], &[])
        .await
        .expect("set region");
    assert_eq!(r.state, "needs_config");
    shown.push(format!("{r:?}"));

    // The CLI, with the secret read from a file: the tools come back live.
    let before = c.service().list_changed.load(Ordering::SeqCst);
    let cli_file = format!("token=@{}", root.path().join("cli-token.txt").display());
    let (ok, out) = cli(root.path(), &["plugins", "config", "needy", &cli_file]);
    assert!(ok, "{out}");
    assert!(out.contains("needy is ready"), "{out}");
    assert!(out.contains("config token secret: set (admin)"), "{out}");
    shown.push(out);
    eventually(WAIT, "tools/list_changed", async || {
        (c.service().list_changed.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    let names = listed_names(&c).await;
    assert!(
        names.iter().any(|n| n == "kandev_needy_config"),
        "{names:?}"
    );
    let got = config_of(&c, "kandev_needy_config", &["region", "token"]).await;
    assert_eq!(got["values"]["region"], "eu-west");
    assert_eq!(got["secrets"]["token"], fingerprint(from_cli));
    d.wait_metric(
        "toolhost_plugin_state{plugin=\"needy\",state=\"ready\"}",
        1.0,
    )
    .await;

    // The admin API wins over the file; a change replaces the process.
    let pid_before = got["pid"].clone();
    let r = set_config(&mut a, "needy", &[("token", from_api)], &[])
        .await
        .expect("set token");
    assert_eq!(r.state, "ready");
    shown.push(format!("{r:?}"));
    let got = config_of(&c, "kandev_needy_config", &["token"]).await;
    assert_eq!(got["secrets"]["token"], fingerprint(from_api));
    assert_ne!(got["pid"], pid_before, "a new process with the new value");

    // Unsetting a required value withdraws the tools again.
    let before = c.service().list_changed.load(Ordering::SeqCst);
    let r = set_config(&mut a, "needy", &[], &["token"])
        .await
        .expect("unset");
    assert_eq!(r.state, "needs_config");
    eventually(WAIT, "tools/list_changed", async || {
        (c.service().list_changed.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    assert!(
        !listed_names(&c)
            .await
            .iter()
            .any(|n| n.starts_with("kandev_needy_"))
    );
    d.wait_metric(
        "toolhost_plugin_config_missing{plugin=\"needy\",key=\"token\"}",
        1.0,
    )
    .await;

    // Stored values: 0600 in a 0700 directory.
    let dir = root.path().join("state/config");
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(dir.join("needy.json"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    // Every read path: status, plugin listings (text and JSON), the
    // catalog, metrics, the log at trace level, the plugins' command
    // lines and environments.
    for args in [
        &["status"][..],
        &["status", "--format", "json"],
        &["plugins", "list"],
        &["plugins", "list", "--format", "json"],
        &["plugins", "show", "cfg"],
        &["plugins", "show", "needy", "--format", "json"],
        &["plugins", "config", "cfg"],
        &["catalog", "show"],
    ] {
        let (ok, out) = cli(root.path(), args);
        assert!(ok, "{args:?}: {out}");
        shown.push(out);
    }
    shown.push(format!(
        "{:?}",
        a.get_status(pb::GetStatusRequest {})
            .await
            .expect("status")
            .into_inner()
    ));
    let (_, metrics) = http_request(
        &d.base(),
        "GET",
        "/metrics",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    )
    .await;
    shown.push(metrics);
    for pid in d.children() {
        for what in ["cmdline", "environ"] {
            if let Ok(b) = std::fs::read(format!("/proc/{pid}/{what}")) {
                shown.push(String::from_utf8_lossy(&b).into_owned());
            }
        }
    }
    let _ = c.cancel().await;
    let logs = d.logs_with(&["DEBUG"]).await;
    assert!(
        logs.contains("DEBUG"),
        "the daemon logged at its most verbose levels"
    );
    for s in secrets {
        for (i, text) in shown.iter().enumerate() {
            assert!(!text.contains(s), "read path {i} shows a secret: {text}");
        }
        let line = logs.lines().find(|l| l.contains(s));
        assert!(line.is_none(), "a log line shows a secret: {line:?}");
    }
}

#[tokio::test]
async fn a_configuration_change_fails_no_call_under_a_call_loop() {
    let root = Scratch::new("config-loop");
    let cfg = probeplug_dir(root.path(), "cfg", CFG_DECLS);
    std::fs::write(root.path().join("token.txt"), "t0").unwrap();
    let config = TestConfig::new(root.path(), &[cfg])
        .extra(&format!(
            "[plugin.cfg.config]\napi_url = \"https://api.example\"\ntoken_file = {:?}\n",
            root.path().join("token.txt").display().to_string()
        ))
        .build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric("toolhost_plugin_state{plugin=\"cfg\",state=\"ready\"}", 1.0)
        .await;
    let c = Arc::new(agent(&d.url, TOKEN).await);
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut loops = Vec::new();
    for _ in 0..4 {
        let (c, stop, calls, failures) = (
            Arc::clone(&c),
            Arc::clone(&stop),
            Arc::clone(&calls),
            Arc::clone(&failures),
        );
        loops.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let r = call_tool(&c, "kandev_cfg_config", json!({ "names": ["retries"] })).await;
                calls.fetch_add(1, Ordering::SeqCst);
                match r {
                    Ok(r) if outcome_code(&r) == "ok" => {}
                    other => {
                        failures.fetch_add(1, Ordering::SeqCst);
                        eprintln!("failed: {other:?}");
                    }
                }
            }
        }));
    }
    let mut a = admin(root.path()).await;
    let first = config_of(&c, "kandev_cfg_config", &["retries"]).await;
    for retries in ["5", "7", "9"] {
        let seen = calls.load(Ordering::SeqCst);
        eventually(WAIT, "calls in flight", async || {
            (calls.load(Ordering::SeqCst) > seen + 20).then_some(())
        })
        .await;
        let r = set_config(&mut a, "cfg", &[("retries", retries)], &[])
            .await
            .expect("set retries");
        assert_eq!(r.state, "ready");
    }
    let seen = calls.load(Ordering::SeqCst);
    eventually(WAIT, "calls after the last change", async || {
        (calls.load(Ordering::SeqCst) > seen + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for l in loops {
        l.await.unwrap();
    }
    let last = config_of(&c, "kandev_cfg_config", &["retries"]).await;
    assert_eq!(last["values"]["retries"], 9);
    assert_ne!(last["pid"], first["pid"]);
    let total = calls.load(Ordering::SeqCst);
    println!(
        "{total} calls across three configuration changes, {} failed",
        failures.load(Ordering::SeqCst)
    );
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    // The replaced processes are gone; one process serves.
    eventually(WAIT, "one plugin process", async || {
        (d.children().len() == 1).then_some(())
    })
    .await;
}

/// `plugins install` of a plugin that needs a value before it can start:
/// installed, so exit 0, and the next step said.
#[tokio::test]
async fn an_install_that_only_needs_configuration_succeeds_and_says_what_to_set() {
    let root = Scratch::new("install-needy");
    let config = TestConfig::new(root.path(), &[]).build();
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric("toolhost_sessions", 0.0).await;
    let needy = probeplug_dir(root.path(), "needy", NEEDY_DECLS);
    let (ok, out) = cli(
        root.path(),
        &["plugins", "install", &needy.display().to_string()],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("installed: needy")
            && out.contains("toolhost plugins config needy region=VALUE token=@FILE"),
        "{out}"
    );
    let mut c = admin(root.path()).await;
    assert_eq!(plugin(&mut c, "needy").await.state, "needs_config");
}

/// `check --config`: the operator's file, checked before a start, with
/// every problem at once and the key or plugin that was meant; and the
/// inline-secret refusal shown by the CLI, not only in the daemon's log.
#[tokio::test]
async fn the_operators_file_is_checked_before_a_start_and_its_problems_are_shown() {
    let root = Scratch::new("check-config");
    let needy = probeplug_dir(root.path(), "needy", NEEDY_DECLS);
    let check = |file: &Path| {
        let out = std::process::Command::new(bin("toolhost"))
            .args(["check", "--config"])
            .arg(file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            text + &String::from_utf8_lossy(&out.stderr),
        )
    };

    // A misspelt key: the file does not read, and the key meant is named.
    let typo = root.path().join("typo.toml");
    std::fs::write(&typo, "[http]\nallowed_host = [\"localhost\"]\n").unwrap();
    let (ok, out) = check(&typo);
    assert!(!ok);
    assert!(
        out.contains("unknown field `allowed_host`")
            && out.contains("did you mean `allowed_hosts`?"),
        "{out}"
    );

    // A file that reads, with three problems: all three are reported, and
    // the secret's value is never repeated.
    let config = TestConfig::new(root.path(), &[needy])
        .extra(
            "[plugin.needy]\n[plugin.needy.config]\nregion = \"eu\"\nregoin = \"us\"\ntoken = \"inline-secret-0123456789\"\n\n[plugin.neddy]\n",
        )
        .build();
    let file = root.path().join("toolhost.toml");
    std::fs::write(&file, &config).unwrap();
    let (ok, out) = check(&file);
    assert!(!ok, "{out}");
    for want in [
        "`token` is a secret, so it is not read inline; use token_file or token_env",
        "sets `regoin`, which the plugin does not declare; did you mean `region`?",
        "[plugin.neddy]: no plugin \"neddy\" is on the plugin paths or installed; did you mean [plugin.needy]?",
        "3 problem(s) found",
    ] {
        assert!(out.contains(want), "{want}:\n{out}");
    }
    assert!(!out.contains("inline-secret-0123456789"), "{out}");

    // The daemon starts anyway (the secret is not read), and the CLI says
    // why the plugin waits for its token.
    let d = Daemon::start(root.path(), &config, &[]);
    d.wait_metric("toolhost_sessions", 0.0).await;
    let (ok, out) = cli(root.path(), &["plugins", "show", "needy"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "config file: [plugin.needy.config]: `token` is a secret, so it is not read inline"
        ),
        "{out}"
    );
    assert!(!out.contains("inline-secret-0123456789"), "{out}");
    let (_, out) = cli(root.path(), &["plugins", "config", "needy"]);
    assert!(
        out.contains("is a secret, so it is not read inline"),
        "{out}"
    );
}
