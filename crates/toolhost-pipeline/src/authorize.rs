//! The backend's `Authorize` RPC (docs/CONTRACT.md §5, step 5): asked after every
//! local check, with the binding, the tool and the invocation id, never the
//! arguments. A denial, an error or a timeout denies: uncertainty fails
//! closed.

use crate::binding::Binding;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use toolhost_catalog::Descriptor;
use toolhost_proto::admin::authorizer_client::AuthorizerClient;
use toolhost_proto::admin::{AuthorizeRequest, SessionBinding};

/// Why the backend's `Authorizer` could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorizerSetupError {
    /// Neither `unix:/path` nor `http://host:port`.
    #[error("authorizer address {0:?} must be unix:/path or http://host:port")]
    Address(String),
    /// An `http://` address that is not a valid URI.
    #[error("authorizer address {address:?}: {detail}")]
    Uri {
        /// The address.
        address: String,
        /// Why.
        detail: String,
    },
}

/// Why a call was not authorized by the backend. Each message is written
/// for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The backend said no, maybe with a reason (its text, cut short).
    #[error("the backend denied this call{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Refused {
        /// The backend's reason, at most 256 characters.
        reason: Option<String>,
    },
    /// The RPC failed.
    #[error("the backend could not authorize this call (it failed); denied")]
    Failed,
    /// No answer within the timeout.
    #[error("the backend did not authorize this call in time; denied")]
    TimedOut,
}

/// The backend's yes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call may run.
    Allowed,
    /// The call may run once the operator approves it (its reason, cut
    /// short): pending approvals are decided through the admin API.
    NeedsApproval(String),
}

/// A client of the backend's `Authorizer` service.
#[derive(Debug, Clone)]
pub struct Authorizer {
    client: AuthorizerClient<Channel>,
    timeout: Duration,
}

/// Where the backend's `Authorizer` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizerAddress {
    /// A Unix socket path.
    Unix(std::path::PathBuf),
    /// An `http://host:port` URL.
    Http(String),
}

impl AuthorizerAddress {
    /// Parses `unix:/path` or `http://host:port`.
    pub fn parse(s: &str) -> Result<Self, AuthorizerSetupError> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Self::Unix(p.into()));
        }
        if s.starts_with("http://") {
            return Ok(Self::Http(s.to_owned()));
        }
        Err(AuthorizerSetupError::Address(s.to_owned()))
    }
}

impl Authorizer {
    /// A client that connects on first use (and reconnects after failures).
    pub fn new(
        address: &AuthorizerAddress,
        timeout: Duration,
    ) -> Result<Self, AuthorizerSetupError> {
        let channel = match address {
            AuthorizerAddress::Unix(path) => toolhost_proto::contract::connect_unix_lazy(
                Endpoint::from_static("http://authorizer.invalid"),
                path.clone(),
            ),
            AuthorizerAddress::Http(url) => Endpoint::from_shared(url.clone())
                .map_err(|e| AuthorizerSetupError::Uri {
                    address: url.clone(),
                    detail: e.to_string(),
                })?
                .connect_timeout(timeout)
                .connect_lazy(),
        };
        Ok(Self {
            client: AuthorizerClient::new(channel),
            timeout,
        })
    }

    /// The backend's yes (maybe once the operator approves); otherwise why
    /// not, in words for the model.
    pub async fn check(
        &self,
        invocation_id: &str,
        d: &Descriptor,
        b: &Binding,
    ) -> Result<Verdict, Denied> {
        let mut req = tonic::Request::new(AuthorizeRequest {
            invocation_id: invocation_id.to_owned(),
            exposed_name: d.exposed_name.clone(),
            plugin_id: d.plugin_id.clone(),
            binding: Some(SessionBinding {
                surface: b.surface.clone(),
                task_id: b.task_id.clone(),
                session_id: b.session_id.clone(),
                workspace_id: b.workspace_id.clone().unwrap_or_default(),
            }),
        });
        req.set_timeout(self.timeout);
        let span = toolhost_telemetry::ClientSpan::start(
            "toolhost.admin.v1.Authorizer/Authorize",
            "toolhost.admin.v1.Authorizer",
            "Authorize",
            Vec::new,
        );
        span.inject(req.metadata_mut());
        let mut client = self.client.clone();
        let answer = tokio::time::timeout(self.timeout, client.authorize(req)).await;
        match &answer {
            Ok(Ok(_)) => span.status(tonic::Code::Ok),
            Ok(Err(status)) => span.status(status.code()),
            Err(_) => span.fail("timeout"),
        }
        drop(span);
        match answer {
            Ok(Ok(r)) if r.get_ref().allowed => Ok(Verdict::Allowed),
            Ok(Ok(r)) if r.get_ref().needs_approval => {
                let why: String = r.into_inner().reason.chars().take(256).collect();
                Ok(Verdict::NeedsApproval(why))
            }
            Ok(Ok(r)) => {
                // The reason is the backend's text; keep it short.
                let why: String = r.into_inner().reason.chars().take(256).collect();
                Err(Denied::Refused {
                    reason: (!why.is_empty()).then_some(why),
                })
            }
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), "authorizer error; denying");
                Err(Denied::Failed)
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                    "authorizer timed out; denying"
                );
                Err(Denied::TimedOut)
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        let (client, dir, server) = backend(f, timeout).await;
        let binding = Binding::new("chat", "task-1", "session-1", Some("ws-1".into()));
        let answer = client.check("inv-1", &tool(), &binding).await;
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
        }));
        match ask(f, Duration::from_secs(5)).await {
            Err(Denied::Refused { reason: Some(r) }) => assert_eq!(r.chars().count(), 256),
            other => panic!("{other:?}"),
        }
        let (f, _) = fixed(Ok(AuthorizeResponse {
            allowed: false,
            reason: String::new(),
            needs_approval: false,
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
        let answer = client.check("inv", &tool(), &binding).await;
        assert!(
            matches!(answer, Err(Denied::Failed | Denied::TimedOut)),
            "{answer:?}"
        );
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
}
