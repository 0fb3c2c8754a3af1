//! toolhost as an OAuth 2.1 resource server, end to end: a real
//! authorization server (oidc-provider, OpenID Certified) issues JWT and
//! opaque access tokens for toolhost's resource, rmcp's client calls tools
//! with them, and every forgery an attacker who has read the code would
//! try is refused with the challenge a client can act on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests say what they expect

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost_e2e::auth_server::AuthServer;
use toolhost_e2e::{
    Daemon, Scratch, TOKEN, TestConfig, agent, call_tool, eventually, free_port, http_exchange,
    probeplug_dir, testplug_dir,
};
use toolhost_proto::admin as pb;

const WAIT: Duration = Duration::from_secs(30);

/// A daemon on `port` serving testplug `tp`, trusting `issuer`, with the
/// `echo_report` tool needing `tickets:write`.
fn daemon(root: &Path, port: u16, issuer: &str) -> Daemon {
    daemon_with(root, port, issuer, "")
}

/// [`daemon`], with `extra` sections at the end of the config.
fn daemon_with(root: &Path, port: u16, issuer: &str, extra: &str) -> Daemon {
    daemon_serving(root, port, issuer, extra, &[])
}

/// [`daemon_with`], serving `more` plugins besides testplug `tp`.
fn daemon_serving(
    root: &Path,
    port: u16,
    issuer: &str,
    extra: &str,
    more: &[std::path::PathBuf],
) -> Daemon {
    let secret = root.join("introspection-secret");
    std::fs::write(&secret, "toolhost-secret\n").unwrap();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let oauth = format!(
        r#"
[http.oauth]
resource = "{resource}"
scopes_supported = ["tools", "tickets:write"]
scopes_required = ["tools"]
jwks_min_refresh_secs = 1

[[http.oauth.issuers]]
issuer = "{issuer}"
client_id = "toolhost"
client_secret_file = {secret:?}
introspection = true

[[http.oauth.bindings]]
when = "token.client_id in ['alice', 'bob', 'narrow', 'opaque']"
surface = "chat"
task_id = "oauth-task"

# People who log in at the authorization server, with any client.
[[http.oauth.bindings]]
when = "token.sub == 'carol' && 'tools' in token.scopes"
surface = "chat"
task_id = "carols-task"

[http.oauth.tool_scopes]
kandev_tp_echo_report = ["tickets:write"]
"#
    );
    let mut plugins = vec![testplug_dir(root, "tp", "normal")];
    plugins.extend_from_slice(more);
    let config = TestConfig::new(root, &plugins).http(&oauth).extra(extra);
    Daemon::start_on(
        root,
        &config.build(),
        &format!("127.0.0.1:{port}"),
        &[],
        "info",
        |_| {},
    )
}

fn initialize_body() -> &'static str {
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"oauth-test","version":"1"}}}"#
}

/// POST /mcp with `token` (if any) and `body`: (status, head, body).
async fn post(base: &str, token: Option<&str>, body: &str) -> (u16, String, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    http_exchange(base, "POST", "/mcp", &headers, body).await
}

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn tokens_from_the_authorization_server_call_tools_and_forgeries_are_refused() {
    let root = Scratch::new("oauth");
    let (as_port, port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(root.path(), as_port, &resource, "key-1");
    let d = daemon(root.path(), port, &auth.issuer);
    let base = d.base();

    // No token: 401, and the challenge names the resource's metadata.
    let (status, head, _) = post(&base, None, initialize_body()).await;
    assert_eq!(status, 401, "{head}");
    let challenge = header(&head, "www-authenticate").unwrap_or_default();
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"tools\""), "{challenge}");
    // The metadata document, open, at the path-suffixed URI and the bare one.
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, _, body) = http_exchange(&base, "GET", path, &[], "").await;
        assert_eq!(status, 200, "{path}");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["resource"], resource.as_str());
        assert_eq!(doc["authorization_servers"][0], auth.issuer.as_str());
        assert_eq!(doc["scopes_supported"][1], "tickets:write");
    }

    // A token for this resource calls a tool through rmcp's client.
    let alice = auth
        .token("alice", "tools tickets:write", &resource)
        .await
        .unwrap();
    let client = agent(&d.url, &alice).await;
    let r = call_tool(
        &client,
        "kandev_tp_echo",
        serde_json::json!({"msg": "hi", "n": 1}),
    )
    .await
    .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "ok");
    let r = call_tool(
        &client,
        "kandev_tp_echo_report",
        serde_json::json!({"msg": "hi", "n": 1}),
    )
    .await
    .unwrap();
    assert_eq!(
        toolhost_e2e::outcome_code(&r),
        "ok",
        "alice holds tickets:write"
    );
    // The static token works beside it.
    let static_client = agent(&d.url, TOKEN).await;
    assert!(
        call_tool(
            &static_client,
            "kandev_tp_echo",
            serde_json::json!({"msg": "a", "n": 1})
        )
        .await
        .is_ok()
    );

    // A token for another resource, issued by the same server.
    let elsewhere = auth
        .token("alice", "tools", "http://127.0.0.1:1/mcp")
        .await
        .unwrap();
    let (status, head, _) = post(&base, Some(&elsewhere), initialize_body()).await;
    assert_eq!(status, 401, "another resource's token: {head}");
    assert!(
        header(&head, "www-authenticate")
            .unwrap_or_default()
            .contains("invalid_token")
    );

    // Every forgery.
    for (name, token) in auth.forge(&resource) {
        let token = token.as_str().unwrap();
        let (status, head, body) = post(&base, Some(token), initialize_body()).await;
        if name == "one_megabyte" {
            assert!(
                matches!(status, 0 | 400 | 401 | 431),
                "{name}: {status} {head}"
            );
            continue;
        }
        assert_eq!(status, 401, "{name} was not refused: {head}\n{body}");
        let challenge = header(&head, "www-authenticate").unwrap_or_default();
        assert!(
            challenge.contains("error=\"invalid_token\"")
                && challenge.contains("resource_metadata"),
            "{name}: {challenge}"
        );
        assert!(!body.contains(token), "{name}: the token is echoed");
    }

    // A token from an authorization server toolhost does not trust.
    let stranger = AuthServer::start(root.path(), free_port(), &resource, "key-1");
    let foreign = stranger.token("alice", "tools", &resource).await.unwrap();
    let (status, _, body) = post(&base, Some(&foreign), initialize_body()).await;
    assert_eq!(status, 401, "an untrusted issuer's token: {body}");
    assert!(body.contains("not from an authorization server"), "{body}");

    // Too small a scope: the tool that needs tickets:write answers 403
    // with the scopes to ask for; another tool still works.
    let narrow = auth.token("narrow", "tools", &resource).await.unwrap();
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"kandev_tp_echo_report","arguments":{"msg":"x","n":1}}}"#;
    let (status, head, body) = post(&base, Some(&narrow), call).await;
    assert_eq!(status, 403, "{head}\n{body}");
    let challenge = header(&head, "www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"tools tickets:write\""),
        "{challenge}"
    );
    // The same call with its method name escaped is read the same way.
    let escaped = call.replace("tools/call", "tools\\/c\\u0061ll");
    let (status, _, _) = post(&base, Some(&narrow), &escaped).await;
    assert_eq!(
        status, 403,
        "an escaped method name slipped past the scope check"
    );
    let narrow_client = agent(&d.url, &narrow).await;
    let r = call_tool(
        &narrow_client,
        "kandev_tp_echo",
        serde_json::json!({"msg": "x", "n": 1}),
    )
    .await
    .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "ok");

    // An opaque token, through introspection.
    let opaque = auth.token("opaque", "tools", &resource).await.unwrap();
    assert!(!opaque.contains('.'), "an opaque token");
    let opaque_client = agent(&d.url, &opaque).await;
    let r = call_tool(
        &opaque_client,
        "kandev_tp_echo",
        serde_json::json!({"msg": "o", "n": 1}),
    )
    .await
    .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "ok");
    let (status, _, _) = post(&base, Some("made-up-opaque-token"), initialize_body()).await;
    assert_eq!(status, 401, "an unknown opaque token");

    // The server rotates its key: a token under the new kid works once
    // toolhost fetches the keys again (at most once a second).
    drop(auth);
    let auth = AuthServer::start(root.path(), as_port, &resource, "key-2");
    let rotated = auth.token("bob", "tools", &resource).await.unwrap();
    eventually(WAIT, "a token under the rotated key is accepted", || {
        let (base, rotated) = (base.clone(), rotated.clone());
        async move {
            let (status, _, _) = post(&base, Some(&rotated), initialize_body()).await;
            (status == 200).then_some(())
        }
    })
    .await;

    // No token, and no claim value, reached the log.
    let logs = d.logs();
    for t in [&alice, &narrow, &opaque, &rotated] {
        assert!(!logs.contains(t.as_str()), "a token is in the log");
    }
    assert!(!logs.contains("eyJ"), "a JWT is in the log");
}

/// Runs an official SDK's OAuth client (`python` or `typescript`) against
/// `url`, logging in as `login`: (it succeeded, its last line as JSON).
async fn sdk_client(sdk: &str, url: &str, login: &str) -> (bool, serde_json::Value) {
    let root = toolhost_e2e::workspace_root();
    let mut command = match sdk {
        "python" => {
            let mut c = tokio::process::Command::new(root.join(".venv/bin/python"));
            c.arg(root.join("tests/support/oauth_client.py"));
            c
        }
        _ => {
            let mut c = tokio::process::Command::new("node");
            c.arg(root.join("tests/oauth-server/client.mjs"));
            c
        }
    };
    let out = command.args([url, login]).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let value = serde_json::from_str(last).unwrap_or_else(
        |_| serde_json::json!({ "stdout": stdout, "stderr": String::from_utf8_lossy(&out.stderr) }),
    );
    (out.status.success(), value)
}

#[tokio::test]
async fn the_official_sdks_find_the_authorization_server_and_call_given_only_the_url() {
    let root = Scratch::new("oauth-sdk");
    let (as_port, port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(root.path(), as_port, &resource, "key-1");
    let d = daemon(root.path(), port, &auth.issuer);
    for sdk in ["python", "typescript"] {
        let (ok, out) = sdk_client(sdk, &d.url, "carol").await;
        assert!(ok, "{sdk}: {out}");
        assert_eq!(out["listed_echo"], true, "{sdk}: {out}");
        assert_eq!(out["is_error"], false, "{sdk}: {out}");
        assert_eq!(out["text"], "echoed", "{sdk}: {out}");
        assert_eq!(
            out["aud"],
            resource.as_str(),
            "{sdk}: the token was asked for this resource"
        );
        assert_eq!(out["sub"], "carol", "{sdk}");
        // Someone no binding rule admits gets a token, and a 403 from
        // toolhost.
        let (ok, out) = sdk_client(sdk, &d.url, "dave").await;
        assert!(!ok, "{sdk}: dave is admitted by no rule: {out}");
    }
}

/// A backend whose rule is "only a ticket's owner may act on it": the
/// ticket is the `/msg` field toolhost sends, the owner the caller's
/// verified subject. It keeps every request it saw.
struct Owners {
    seen: Arc<Mutex<Vec<pb::AuthorizeRequest>>>,
}

#[tonic::async_trait]
impl pb::authorizer_server::Authorizer for Owners {
    async fn authorize(
        &self,
        req: tonic::Request<pb::AuthorizeRequest>,
    ) -> Result<tonic::Response<pb::AuthorizeResponse>, tonic::Status> {
        let req = req.into_inner();
        self.seen.lock().unwrap().push(req.clone());
        let subject = req.principal.as_ref().map(|p| p.subject.clone());
        let ticket = req
            .arguments
            .iter()
            .find(|a| a.pointer == "/msg")
            .and_then(|a| serde_json::from_str::<String>(&a.value_json).ok());
        let owner = match ticket.as_deref() {
            Some("T-alice") => Some("alice"),
            Some("T-bob") => Some("bob"),
            _ => None,
        };
        let allowed = owner.is_some() && owner == subject.as_deref();
        Ok(tonic::Response::new(pb::AuthorizeResponse {
            allowed,
            reason: if allowed {
                String::new()
            } else {
                "only the ticket's owner may act on it".into()
            },
            decision_id: format!("owners-{}", req.invocation_id),
            ..Default::default()
        }))
    }
}

#[tokio::test]
async fn the_backend_decides_with_the_callers_identity_and_the_fields_the_operator_names() {
    let root = Scratch::new("oauth-authorize");
    let (as_port, port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(root.path(), as_port, &resource, "key-1");
    let sock = root.path().join("backend.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::authorizer_server::AuthorizerServer::new(Owners {
                seen: Arc::clone(&seen),
            }))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let extra = format!(
        "[backend]\nauthorize = \"unix:{}\"\n\n[backend.authorize_arguments]\nkandev_tp_echo = [\"/msg\"]\n",
        sock.display()
    );
    let d = daemon_with(root.path(), port, &auth.issuer, &extra);
    let token = |who: &'static str| {
        let (auth, resource) = (&auth, resource.clone());
        async move { auth.token(who, "tools", &resource).await.unwrap() }
    };
    let alice = agent(&d.url, &token("alice").await).await;
    let bob = agent(&d.url, &token("bob").await).await;
    let close = |ticket: &str| serde_json::json!({"msg": ticket, "n": 7});
    let own = call_tool(&alice, "kandev_tp_echo", close("T-alice"))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&own), "ok");
    let other = call_tool(&alice, "kandev_tp_echo", close("T-bob"))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&other), "not_authorized");
    let text = format!("{:?}", other.content);
    assert!(text.contains("only the ticket's owner"), "{text}");
    let bobs = call_tool(&bob, "kandev_tp_echo", close("T-bob"))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&bobs), "ok");
    // A static token proves no one: the backend sees no principal and
    // refuses.
    let anonymous = agent(&d.url, TOKEN).await;
    let r = call_tool(&anonymous, "kandev_tp_echo", close("T-bob"))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "not_authorized");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    for req in &seen[..3] {
        let p = req.principal.as_ref().expect("a principal");
        assert_eq!(p.issuer, auth.issuer);
        assert_eq!(p.scopes, ["tools"]);
        assert_eq!(req.arguments.len(), 1, "only the named field");
        assert_eq!(req.arguments[0].pointer, "/msg");
        assert!(req.arguments[0].present);
    }
    assert!(seen[3].principal.is_none());
    assert!(
        seen.iter()
            .all(|r| r.arguments.iter().all(|a| a.pointer == "/msg")),
        "`/n` was never named, so never sent"
    );
    // The decision ids land in the audit lines, with the caller's subject.
    let logs = d
        .logs_with(&[&format!("owners-{}", seen[1].invocation_id)])
        .await;
    let line = logs
        .lines()
        .find(|l| l.contains(&format!("owners-{}", seen[1].invocation_id)))
        .unwrap_or_default();
    assert!(
        line.contains("tool call") && line.contains("alice"),
        "{line}"
    );
    assert!(
        !logs.contains("T-alice") && !logs.contains("T-bob"),
        "an argument value reached the log"
    );
}

/// An outside service for `audience`: it answers `sub=... aud=...` to a
/// token issued for it, 401 to any other, and keeps every token it saw.
async fn outside_service(audience: &'static str) -> (u16, Arc<Mutex<Vec<String>>>) {
    use base64::Engine as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let token = head
                .lines()
                .find_map(|l| l.strip_prefix("Authorization: Bearer "))
                .unwrap_or_default()
                .trim()
                .to_owned();
            kept.lock().unwrap().push(token.clone());
            let claims: serde_json::Value = token
                .split('.')
                .nth(1)
                .and_then(|p| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(p)
                        .ok()
                })
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let (status, body) = if claims["aud"] == audience {
                (
                    "200 OK",
                    format!(
                        "sub={} aud={}",
                        claims["sub"].as_str().unwrap_or(""),
                        audience
                    ),
                )
            } else {
                ("401 Unauthorized", "wrong audience".to_owned())
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    (port, seen)
}

fn text_of(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test]
async fn plugins_call_outside_services_with_tokens_exchanged_for_their_audience() {
    let root = Scratch::new("oauth-exchange");
    let (as_port, port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(root.path(), as_port, &resource, "key-1");
    let (api_port, api_seen) = outside_service("https://tickets-api.test").await;
    let plugin = |id: &str, audience: &str| {
        probeplug_dir(
            root.path(),
            id,
            &format!(
                "[capabilities]\nnetwork = {{ connect = [{api_port}] }}\n\n[credentials]\naudiences = [\"{audience}\"]\n"
            ),
        )
    };
    let api = plugin("api", "https://tickets-api.test");
    // `call_api` may also run as an MCP task.
    let manifest = api.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let block = text.find("name = \"call_api\"").unwrap();
    let end = block
        + text[block..]
            .find("annotations = { read_only = true }\n")
            .unwrap();
    let mut text = text.clone();
    text.insert_str(end, "task = \"optional\"\n");
    std::fs::write(&manifest, text).unwrap();
    let evil = plugin("evil", "https://evil.test");
    let extra = "\n[plugin.api]\ngrant = [\"network\", \"credentials\"]\n\n[plugin.evil]\ngrant = [\"network\", \"credentials\"]\n";
    let d = daemon_serving(root.path(), port, &auth.issuer, extra, &[api, evil]);
    let exchanges = || async {
        let (_, body) =
            toolhost_e2e::http_request(&auth.issuer, "GET", "/test/exchanges", &[], "").await;
        let body = if body.starts_with('{') {
            body
        } else {
            toolhost_e2e::dechunk(&body)
        };
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["exchanges"]
            .as_u64()
            .unwrap()
    };
    let args = |audience: &str| serde_json::json!({"port": api_port, "audience": audience});

    let alice_token = auth.token("alice", "tools", &resource).await.unwrap();
    let bob_token = auth.token("bob", "tools", &resource).await.unwrap();
    let alice = agent(&d.url, &alice_token).await;
    let bob = agent(&d.url, &bob_token).await;
    for _ in 0..2 {
        let r = call_tool(
            &alice,
            "kandev_api_call_api",
            args("https://tickets-api.test"),
        )
        .await
        .unwrap();
        assert_eq!(
            text_of(&r),
            "sub=alice aud=https://tickets-api.test",
            "{r:?}"
        );
    }
    let r = call_tool(
        &bob,
        "kandev_api_call_api",
        args("https://tickets-api.test"),
    )
    .await
    .unwrap();
    assert_eq!(text_of(&r), "sub=bob aud=https://tickets-api.test", "{r:?}");
    // One exchange per caller and audience: alice's second call used the
    // cached token.
    assert_eq!(exchanges().await, 2);
    let seen = api_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], seen[1], "alice's exchanged token, cached");
    assert_ne!(seen[0], seen[2], "bob has his own");
    for t in &seen {
        assert!(
            t != &alice_token && t != &bob_token,
            "a caller's own token reached the service"
        );
    }

    // The same through the official Python SDK, in both protocol eras and
    // as a task: the exchanged token reaches the plugin on every path.
    for (era, steps) in [
        (
            "legacy",
            serde_json::json!([{"call": "kandev_api_call_api", "args": args("https://tickets-api.test")}]),
        ),
        (
            "2026-07-28",
            serde_json::json!([{"call": "kandev_api_call_api", "args": args("https://tickets-api.test")}]),
        ),
        (
            "2026-07-28",
            serde_json::json!([{"task": "kandev_api_call_api", "args": args("https://tickets-api.test")}]),
        ),
    ] {
        let out = toolhost_e2e::python_client(
            "approvals_client.py",
            &[&d.url, &alice_token, era, &steps.to_string()],
        )
        .await;
        let steps = out.as_array().cloned().unwrap_or_default();
        assert!(!steps.is_empty(), "{era}: {out}");
        for step in steps {
            assert_eq!(
                step["text"], "sub=alice aud=https://tickets-api.test",
                "{era}: {step}"
            );
        }
    }
    assert_eq!(
        exchanges().await,
        2,
        "alice's token came from the cache on every path"
    );

    // An exchange the server refuses fails the call before dispatch.
    let r = call_tool(&alice, "kandev_evil_call_api", args("https://evil.test"))
        .await
        .unwrap();
    assert_eq!(toolhost_e2e::outcome_code(&r), "not_authorized", "{r:?}");
    let text = text_of(&r);
    assert!(
        text.contains("invalid_target") && text.contains("https://evil.test"),
        "{text}"
    );
    let api_data = root.path().join("state/data/api");
    assert_eq!(toolhost_e2e::events(&api_data, "invoked call_api").len(), 6);
    let evil_data = root.path().join("state/data/evil");
    assert!(
        toolhost_e2e::events(&evil_data, "invoked call_api").is_empty(),
        "the plugin ran"
    );

    // A static token proves no one: the plugin runs with no token, and says so.
    let anonymous = agent(&d.url, TOKEN).await;
    let r = call_tool(
        &anonymous,
        "kandev_api_call_api",
        args("https://tickets-api.test"),
    )
    .await
    .unwrap();
    assert!(
        text_of(&r).contains("no token for https://tickets-api.test"),
        "{r:?}"
    );
    let logs = d.logs();
    for t in seen.iter().chain([&alice_token, &bob_token]) {
        assert!(!logs.contains(t.as_str()), "a token reached the log");
    }
}
