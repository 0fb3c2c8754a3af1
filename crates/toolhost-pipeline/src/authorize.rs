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

    /// `Ok` when the backend allows the call; otherwise why not, in words for
    /// the model.
    pub async fn check(
        &self,
        invocation_id: &str,
        d: &Descriptor,
        b: &Binding,
    ) -> Result<(), Denied> {
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
            Ok(Ok(r)) if r.get_ref().allowed => Ok(()),
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
