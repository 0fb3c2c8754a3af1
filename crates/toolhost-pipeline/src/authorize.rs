//! The backend's `Authorize` RPC (docs/CONTRACT.md §5, step 5): asked after every
//! local check, with the binding, the tool, the invocation id, the caller's
//! verified identity if it has one, and only the argument fields the
//! operator names for that tool (by JSON pointer, each at most 1 KiB). A
//! denial, an error or a timeout denies: uncertainty fails closed. The
//! backend's decision id, if it gives one, goes to the audit line.

use crate::binding::Binding;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use toolhost_catalog::Descriptor;
use toolhost_proto::admin::authorizer_client::AuthorizerClient;
use toolhost_proto::admin::{ArgumentField, AuthorizeRequest, Principal, SessionBinding};

/// The largest argument field sent to the backend, as JSON text.
pub const MAX_FIELD_BYTES: usize = 1024;
/// The most fields named for one tool.
pub const MAX_FIELDS: usize = 16;

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

/// The backend's answer: its verdict, and the id it gave the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Allowed (maybe once the operator approves), or why not.
    pub outcome: Result<Verdict, Denied>,
    /// The backend's decision id, if it gave a usable one.
    pub decision_id: Option<String>,
}

/// A client of the backend's `Authorizer` service.
#[derive(Debug, Clone)]
pub struct Authorizer {
    client: AuthorizerClient<Channel>,
    timeout: Duration,
    /// The argument fields sent for each tool, by exposed name.
    fields: Arc<HashMap<String, Vec<String>>>,
}

/// Why a named argument field was refused when the configuration was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument field {pointer:?} of {tool}: {why}")]
pub struct BadField {
    /// The tool.
    pub tool: String,
    /// The pointer as written.
    pub pointer: String,
    /// What is wrong.
    pub why: &'static str,
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
            fields: Arc::new(HashMap::new()),
        })
    }

    /// Sends these argument fields (JSON pointers) of each tool (by
    /// exposed name) with its calls, and no others.
    ///
    /// # Errors
    /// A pointer that is not an RFC 6901 pointer into the arguments, or
    /// more than 16 for a tool.
    pub fn with_argument_fields(
        mut self,
        fields: HashMap<String, Vec<String>>,
    ) -> Result<Self, BadField> {
        for (tool, pointers) in &fields {
            let bad = |pointer: &str, why| BadField {
                tool: tool.clone(),
                pointer: pointer.to_owned(),
                why,
            };
            if pointers.len() > MAX_FIELDS {
                return Err(bad("", "more than 16 fields are named"));
            }
            for p in pointers {
                if !p.starts_with('/') || p.len() > 256 {
                    return Err(bad(
                        p,
                        "a JSON pointer starts with / and is at most 256 bytes",
                    ));
                }
                let bad_escape = p
                    .split('~')
                    .skip(1)
                    .any(|after| !after.starts_with('0') && !after.starts_with('1'));
                if bad_escape {
                    return Err(bad(p, "~ must be followed by 0 or 1 (RFC 6901)"));
                }
            }
        }
        self.fields = Arc::new(fields);
        Ok(self)
    }

    /// The backend's yes (maybe once the operator approves); otherwise why
    /// not, in words for the model.
    pub async fn check(
        &self,
        invocation_id: &str,
        d: &Descriptor,
        b: &Binding,
        arguments: &Map<String, Value>,
    ) -> Checked {
        let arguments = self
            .fields
            .get(&d.exposed_name)
            .map(|pointers| pointers.iter().map(|p| field(arguments, p)).collect())
            .unwrap_or_default();
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
            principal: b.principal.as_ref().map(|p| Principal {
                issuer: p.issuer.clone(),
                subject: p.subject.clone(),
                client_id: p.client_id.clone().unwrap_or_default(),
                scopes: p.scopes.clone(),
            }),
            arguments,
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
        let decision_id = match &answer {
            Ok(Ok(r)) => decision_id(&r.get_ref().decision_id),
            _ => None,
        };
        let outcome = match answer {
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
        };
        Checked {
            outcome,
            decision_id,
        }
    }
}

/// A decision id fit for a log line: 1 to 128 printable ASCII characters.
fn decision_id(id: &str) -> Option<String> {
    (!id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| id.to_owned())
}

/// The field at `pointer` of the arguments, as sent to the backend.
fn field(arguments: &Map<String, Value>, pointer: &str) -> ArgumentField {
    let unescape = |s: &str| s.replace("~1", "/").replace("~0", "~");
    let rest = pointer.strip_prefix('/').unwrap_or(pointer);
    let (first, deeper) = match rest.split_once('/') {
        Some((f, d)) => (f, Some(d)),
        None => (rest, None),
    };
    let value = arguments.get(&unescape(first)).and_then(|v| match deeper {
        None => Some(v),
        Some(d) => v.pointer(&format!("/{d}")),
    });
    let mut out = ArgumentField {
        pointer: pointer.to_owned(),
        ..ArgumentField::default()
    };
    if let Some(v) = value {
        out.present = true;
        let text = v.to_string();
        if text.len() > MAX_FIELD_BYTES {
            out.too_large = true;
        } else {
            out.value_json = text;
        }
    }
    out
}

#[cfg(test)]
mod tests;
