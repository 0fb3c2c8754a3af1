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
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Self::Unix(p.into()));
        }
        if s.starts_with("http://") {
            return Ok(Self::Http(s.to_owned()));
        }
        Err(format!(
            "authorizer address {s:?} must be unix:/path or http://host:port"
        ))
    }
}

impl Authorizer {
    /// A client that connects on first use (and reconnects after failures).
    pub fn new(address: &AuthorizerAddress, timeout: Duration) -> Result<Self, String> {
        let channel = match address {
            AuthorizerAddress::Unix(path) => toolhost_proto::contract::connect_unix_lazy(
                Endpoint::from_static("http://authorizer.invalid"),
                path.clone(),
            ),
            AuthorizerAddress::Http(url) => Endpoint::from_shared(url.clone())
                .map_err(|e| format!("authorizer address {url:?}: {e}"))?
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
    ) -> Result<(), String> {
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
        let mut client = self.client.clone();
        match tokio::time::timeout(self.timeout, client.authorize(req)).await {
            Ok(Ok(r)) if r.get_ref().allowed => Ok(()),
            Ok(Ok(r)) => {
                // The reason is the backend's text; keep it short.
                let why: String = r.into_inner().reason.chars().take(256).collect();
                Err(if why.is_empty() {
                    "the backend denied this call".to_owned()
                } else {
                    format!("the backend denied this call: {why}")
                })
            }
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), "authorizer error; denying");
                Err("the backend could not authorize this call (it failed); denied".to_owned())
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                    "authorizer timed out; denying"
                );
                Err("the backend did not authorize this call in time; denied".to_owned())
            }
        }
    }
}
