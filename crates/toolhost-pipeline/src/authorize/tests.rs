//! The backend client against a real gRPC server on a Unix socket.
use super::*;
use std::sync::{Arc, Mutex};
use toolhost_proto::admin::AuthorizeResponse;
use toolhost_proto::admin::authorizer_server::{Authorizer as Backend, AuthorizerServer};

/// A backend that answers every call the same way, and keeps what it
/// was asked.
struct Fixed {
    answer: Result<AuthorizeResponse, tonic::Code>,
    hang: bool,
    seen: Arc<Mutex<Vec<AuthorizeRequest>>>,
}

#[tonic::async_trait]
impl Backend for Fixed {
    async fn authorize(
        &self,
        req: tonic::Request<AuthorizeRequest>,
    ) -> Result<tonic::Response<AuthorizeResponse>, tonic::Status> {
        if let Ok(mut s) = self.seen.lock() {
            s.push(req.into_inner());
        }
        if self.hang {
            std::future::pending::<()>().await;
        }
        match &self.answer {
            Ok(r) => Ok(tonic::Response::new(r.clone())),
            Err(code) => Err(tonic::Status::new(*code, "backend exploded")),
        }
    }
}

fn tool() -> Descriptor {
    crate::testing::descriptor(1000, None)
}

/// Serves `backend` on a fresh Unix socket; the authorizer that asks it.
async fn backend(
    backend: Fixed,
    timeout: Duration,
) -> (Authorizer, std::path::PathBuf, tokio::task::JoinHandle<()>) {
    let dir = std::env::temp_dir().join(format!(
        "toolhost-authorize-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let sock = dir.join("backend.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bound");
    let server = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(AuthorizerServer::new(backend))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await;
    });
    let address =
        AuthorizerAddress::parse(&format!("unix:{}", sock.display())).expect("a unix address");
    let client = Authorizer::new(&address, timeout).expect("a client");
    (client, dir, server)
}

fn fixed(
    answer: Result<AuthorizeResponse, tonic::Code>,
) -> (Fixed, Arc<Mutex<Vec<AuthorizeRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let f = Fixed {
        answer,
        hang: false,
        seen: Arc::clone(&seen),
    };
    (f, seen)
}

async fn ask(f: Fixed, timeout: Duration) -> Result<Verdict, Denied> {
    let binding = Binding::new("chat", "task-1", "session-1", Some("ws-1".into()));
    ask_with(f, timeout, &binding, HashMap::new(), &Map::new())
        .await
        .outcome
}

async fn ask_with(
    f: Fixed,
    timeout: Duration,
    binding: &Binding,
    fields: HashMap<String, Vec<String>>,
    arguments: &Map<String, Value>,
) -> Checked {
    let (client, dir, server) = backend(f, timeout).await;
    let client = client.with_argument_fields(fields).expect("good pointers");
    let answer = client.check("inv-1", &tool(), binding, arguments).await;
    server.abort();
    let _ = std::fs::remove_dir_all(dir);
    answer
}

#[test]
fn an_address_is_a_unix_path_or_an_http_url() {
    assert_eq!(
        AuthorizerAddress::parse("unix:/run/backend.sock"),
        Ok(AuthorizerAddress::Unix("/run/backend.sock".into()))
    );
    assert!(matches!(
        AuthorizerAddress::parse("http://127.0.0.1:9000"),
        Ok(AuthorizerAddress::Http(_))
    ));
    for bad in ["https://backend:9000", "/run/backend.sock", "tcp://x:1", ""] {
        assert_eq!(
            AuthorizerAddress::parse(bad),
            Err(AuthorizerSetupError::Address(bad.into()))
        );
    }
}

#[tokio::test]
async fn the_backend_is_asked_with_the_binding_and_the_tool_and_never_the_arguments() {
    let (f, seen) = fixed(Ok(AuthorizeResponse {
        allowed: true,
        reason: String::new(),
        needs_approval: false,
        ..Default::default()
    }));
    assert_eq!(ask(f, Duration::from_secs(5)).await, Ok(Verdict::Allowed));
    let seen = seen.lock().expect("not poisoned");
    let r = seen.first().expect("asked once");
    assert_eq!(seen.len(), 1, "asked once");
    assert_eq!(r.invocation_id, "inv-1");
    assert_eq!(r.exposed_name, "kandev_notes_add");
    assert_eq!(r.plugin_id, "notes");
    let b = r.binding.as_ref().expect("the binding");
    assert_eq!(
        (
            b.surface.as_str(),
            b.task_id.as_str(),
            b.session_id.as_str(),
            b.workspace_id.as_str()
        ),
        ("chat", "task-1", "session-1", "ws-1")
    );
}

#[tokio::test]
async fn needs_approval_is_a_yes_once_the_operator_approves() {
    let (f, _) = fixed(Ok(AuthorizeResponse {
        allowed: false,
        reason: "a person must look at this".into(),
        needs_approval: true,
        ..Default::default()
    }));
    assert_eq!(
        ask(f, Duration::from_secs(5)).await,
        Ok(Verdict::NeedsApproval("a person must look at this".into()))
    );
}

#[tokio::test]
async fn a_denial_carries_the_backends_reason_cut_to_256_characters() {
    let (f, _) = fixed(Ok(AuthorizeResponse {
        allowed: false,
        reason: "é".repeat(1000),
        needs_approval: false,
        ..Default::default()
    }));
    match ask(f, Duration::from_secs(5)).await {
        Err(Denied::Refused { reason: Some(r) }) => assert_eq!(r.chars().count(), 256),
        other => panic!("{other:?}"),
    }
    let (f, _) = fixed(Ok(AuthorizeResponse {
        allowed: false,
        reason: String::new(),
        needs_approval: false,
        ..Default::default()
    }));
    assert_eq!(
        ask(f, Duration::from_secs(5)).await,
        Err(Denied::Refused { reason: None })
    );
}

#[tokio::test]
async fn an_error_a_silence_or_no_backend_at_all_denies() {
    let (f, _) = fixed(Err(tonic::Code::Internal));
    assert_eq!(ask(f, Duration::from_secs(5)).await, Err(Denied::Failed));
    // A silent backend: whichever deadline fires first, ours or the
    // `grpc-timeout` the server enforces, the call is denied.
    let (mut f, _) = fixed(Err(tonic::Code::Internal));
    f.hang = true;
    let silent = ask(f, Duration::from_millis(200)).await;
    assert!(
        matches!(silent, Err(Denied::TimedOut | Denied::Failed)),
        "{silent:?}"
    );

    let nowhere = AuthorizerAddress::Unix("/nonexistent/toolhost/backend.sock".into());
    let client = Authorizer::new(&nowhere, Duration::from_secs(2)).expect("lazy");
    let binding = Binding::new("chat", "t", "s", None);
    let answer = client
        .check("inv", &tool(), &binding, &Map::new())
        .await
        .outcome;
    assert!(
        matches!(answer, Err(Denied::Failed | Denied::TimedOut)),
        "{answer:?}"
    );
}

#[tokio::test]
async fn the_named_fields_and_the_principal_are_sent_and_nothing_else() {
    let (f, seen) = fixed(Ok(AuthorizeResponse {
        allowed: true,
        decision_id: "dec-42".into(),
        ..Default::default()
    }));
    let binding = Binding::new("chat", "t", "s", None).with_principal(crate::binding::Principal {
        issuer: "https://auth.example".into(),
        subject: "alice".into(),
        client_id: Some("cli".into()),
        scopes: vec!["tools".into()],
    });
    let fields = HashMap::from([(
        "kandev_notes_add".to_owned(),
        vec![
            "/id".to_owned(),
            "/owner/name".to_owned(),
            "/absent".to_owned(),
            "/big".to_owned(),
            "/a~1b".to_owned(),
        ],
    )]);
    let arguments = serde_json::json!({
        "id": "T-1", "owner": {"name": "alice", "secret": "s3"}, "body": "not sent",
        "big": "x".repeat(2000), "a/b": 7
    });
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    let checked = ask_with(f, Duration::from_secs(5), &binding, fields, &arguments).await;
    assert_eq!(checked.outcome, Ok(Verdict::Allowed));
    assert_eq!(checked.decision_id.as_deref(), Some("dec-42"));
    let seen = seen.lock().expect("not poisoned");
    let r = seen.first().expect("asked");
    let p = r.principal.as_ref().expect("the principal");
    assert_eq!((p.subject.as_str(), p.client_id.as_str()), ("alice", "cli"));
    let sent: Vec<(&str, &str, bool, bool)> = r
        .arguments
        .iter()
        .map(|a| {
            (
                a.pointer.as_str(),
                a.value_json.as_str(),
                a.present,
                a.too_large,
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("/id", "\"T-1\"", true, false),
            ("/owner/name", "\"alice\"", true, false),
            ("/absent", "", false, false),
            ("/big", "", true, true),
            ("/a~1b", "7", true, false),
        ]
    );
    let everything = format!("{r:?}");
    assert!(!everything.contains("not sent") && !everything.contains("s3"));
}

#[tokio::test]
async fn pointers_are_checked_when_configured() {
    let nowhere = AuthorizerAddress::Unix("/nonexistent/backend.sock".into());
    let client = || Authorizer::new(&nowhere, Duration::from_secs(1)).expect("lazy");
    for bad in ["id", "/a~2", ""] {
        let fields = HashMap::from([("t".to_owned(), vec![bad.to_owned()])]);
        assert!(client().with_argument_fields(fields).is_err(), "{bad:?}");
    }
    let many = HashMap::from([("t".to_owned(), (0..17).map(|i| format!("/f{i}")).collect())]);
    assert!(client().with_argument_fields(many).is_err());
}

#[test]
fn a_decision_id_is_kept_only_if_it_fits_a_log_line() {
    assert_eq!(decision_id("dec-1").as_deref(), Some("dec-1"));
    for bad in ["", "a b", "new\nline", &"x".repeat(129)] {
        assert_eq!(decision_id(bad), None, "{bad:?}");
    }
}

#[test]
fn every_denial_is_written_for_the_model_and_says_denied() {
    let texts = [
        Denied::Refused {
            reason: Some("not on weekends".into()),
        }
        .to_string(),
        Denied::Failed.to_string(),
        Denied::TimedOut.to_string(),
    ];
    assert!(texts[0].ends_with(": not on weekends"));
    for t in &texts {
        assert!(t.contains("denied") || t.contains("backend"), "{t}");
    }
}
