//! Callers with access tokens from an authorization server: the gate's
//! second way in, beside the static token table.
//!
//! A bearer token the table does not know is given to the verifier
//! (`toolhost-oauth`). A caller it accepts is turned into a binding by the
//! operator's rules (`[[http.oauth.bindings]]`: the first whose `when`
//! holds names the surface, the task and the workspace, fixed or from a
//! claim), once per token; the same person with the same client and
//! scopes gets the same binding across token refreshes, so their sessions,
//! approvals and rate limits carry over. Scopes are checked here: those
//! every request needs, and those a tool or a plugin needs, read from a
//! `tools/call` body before rmcp sees it, so a client missing one gets the
//! 403 step-up challenge it can act on, not a tool error.
//!
//! It is also where a caller's plugins get their own tokens: the gate
//! keeps each caller's latest token, and, asked by the pipeline
//! ([`Credentials`]), exchanges it at the caller's issuer for a token for
//! each audience the plugin was granted, cached per caller and audience
//! until shortly before it expires.
//!
//! What this module must not do: let a token reach anything but the
//! verifier, or put a claim's value in a response or a log line.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use toolhost_mcp::{Authorized, Hub};
use toolhost_oauth::metadata::{self, Challenge};
use toolhost_oauth::{Caller, Exchanged, Rejection, Verifier};
use toolhost_pipeline::port::BoxFuture;
use toolhost_pipeline::{Binding, Credentials, Principal};
use toolhost_policy::{BadRule, CallerRuleSpec, CallerRules};
use toolhost_proto::plugin::Credential;

/// The most bindings kept for verified callers; past it the oldest are
/// forgotten (their next token makes a new one).
const MAX_BINDINGS: usize = 4096;
/// The longest value a binding takes from a claim.
const MAX_CLAIM_VALUE: usize = 128;

/// Where a binding's field comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldSource {
    /// Always this value.
    Fixed(String),
    /// The value of this claim (a string of at most 128 printable ASCII
    /// characters; a token without it matches no rule).
    Claim(String),
}

/// One `[[http.oauth.bindings]]` entry.
#[derive(Debug, Clone)]
pub struct BindingRule {
    /// Where it was written.
    pub place: String,
    /// The condition over `token`.
    pub when: String,
    /// The surface.
    pub surface: String,
    /// The task.
    pub task_id: FieldSource,
    /// The workspace, if any.
    pub workspace_id: Option<FieldSource>,
}

/// The OAuth side of the gate.
pub struct OAuthGate {
    verifier: Arc<Verifier>,
    conditions: CallerRules,
    rules: Vec<BindingRule>,
    /// Scopes every request needs.
    required: Vec<String>,
    /// Scopes a tool needs, by exposed name.
    tool_scopes: HashMap<String, Vec<String>>,
    /// Scopes every tool of a plugin needs, by plugin id.
    plugin_scopes: HashMap<String, Vec<String>>,
    bindings: Mutex<HashMap<[u8; 32], Arc<Binding>>>,
    /// Each caller's latest access token and its expiry, by owner: what a
    /// token exchange for its plugins' audiences starts from. Never sent
    /// anywhere but the caller's own issuer.
    subjects: Mutex<HashMap<[u8; 32], Subject>>,
    /// Tokens exchanged for a caller and an audience, until shortly before
    /// they expire.
    exchanged: Mutex<HashMap<[u8; 32], HashMap<String, Exchanged>>>,
}

impl std::fmt::Debug for OAuthGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthGate")
            .field("resource", &self.verifier.settings().resource.as_str())
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

/// A caller's latest access token, and when it expires.
type Subject = (Arc<str>, u64);

/// What a verified caller maps to (made once per token).
enum Mapped {
    Bound(Arc<Binding>, [u8; 32]),
    NoRule,
    TooCostly,
}

impl OAuthGate {
    /// A gate over `verifier` with these rules and scope requirements.
    ///
    /// # Errors
    /// A rule's condition does not compile or cannot be bounded.
    pub fn new(
        verifier: Arc<Verifier>,
        rules: Vec<BindingRule>,
        required: Vec<String>,
        tool_scopes: HashMap<String, Vec<String>>,
        plugin_scopes: HashMap<String, Vec<String>>,
    ) -> Result<Self, BadRule> {
        let specs: Vec<CallerRuleSpec> = rules
            .iter()
            .map(|r| CallerRuleSpec {
                place: r.place.clone(),
                expression: r.when.clone(),
            })
            .collect();
        Ok(Self {
            conditions: CallerRules::compile(&specs)?,
            verifier,
            rules,
            required,
            tool_scopes,
            plugin_scopes,
            bindings: Mutex::new(HashMap::new()),
            subjects: Mutex::new(HashMap::new()),
            exchanged: Mutex::new(HashMap::new()),
        })
    }

    /// The verifier.
    #[must_use]
    pub fn verifier(&self) -> &Arc<Verifier> {
        &self.verifier
    }

    /// The caller's binding and owner, or the answer to send instead.
    pub(crate) async fn admit(
        &self,
        token: Option<&str>,
        request: Request,
        hub: &Hub,
        max_body_bytes: usize,
    ) -> Result<(Authorized, Request), Response> {
        let Some(token) = token else {
            return Err(self.unauthorized(&Challenge::Missing {
                required: &self.required,
            }));
        };
        let verified = match self.verifier.verify(token).await {
            Ok(v) => v,
            Err(why) => {
                tracing::info!(reason = %why, "an access token was refused");
                return Err(self.refused(&why));
            }
        };
        let caller = &verified.caller;
        if !caller.has_scopes(&self.required) {
            return Err(self.insufficient(&self.required));
        }
        let mapped = verified.derived(|c| self.map(c));
        let (binding, owner) = match mapped.as_deref() {
            Some(Mapped::Bound(b, o)) => {
                self.remember_subject(*o, token, caller.expires_at);
                (b.clone(), *o)
            }
            Some(Mapped::TooCostly) => {
                return Err(forbidden(
                    "the access token's claims are too large for the operator's binding rules",
                ));
            }
            Some(Mapped::NoRule) | None => {
                return Err(forbidden(
                    "the access token is valid, but no binding rule of this toolhost admits its caller ([[http.oauth.bindings]])",
                ));
            }
        };
        let request = if self.tool_scopes.is_empty() && self.plugin_scopes.is_empty() {
            request
        } else {
            self.check_tool_scopes(caller, request, hub, max_body_bytes)
                .await?
        };
        Ok((Authorized { binding, owner }, request))
    }

    /// A `tools/call`'s tool and plugin scopes, read from its body.
    async fn check_tool_scopes(
        &self,
        caller: &Caller,
        request: Request,
        hub: &Hub,
        max_body_bytes: usize,
    ) -> Result<Request, Response> {
        if request.method() != Method::POST {
            return Ok(request);
        }
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, max_body_bytes).await else {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is over {max_body_bytes} bytes, or was cut off"),
            )
                .into_response());
        };
        let catalog = hub.catalog().current();
        for tool in called_tools(&bytes) {
            let plugin = catalog.get(&tool).map(|e| e.descriptor.plugin_id.clone());
            let mut needed: Vec<String> = self.required.clone();
            for s in self
                .tool_scopes
                .get(&tool)
                .into_iter()
                .chain(plugin.as_ref().and_then(|p| self.plugin_scopes.get(p)))
                .flatten()
            {
                if !needed.contains(s) {
                    needed.push(s.clone());
                }
            }
            if !caller.has_scopes(&needed) {
                return Err(self.insufficient(&needed));
            }
        }
        Ok(Request::from_parts(parts, Body::from(bytes)))
    }

    fn map(&self, caller: &Caller) -> Mapped {
        let token = serde_json::json!({
            "iss": caller.issuer,
            "sub": caller.subject,
            "client_id": caller.client_id.clone().unwrap_or_default(),
            "scopes": caller.scopes,
            "claims": caller.claims,
        });
        let index = match self.conditions.first_holding(&token) {
            Ok(Some(i)) => i,
            Ok(None) => return Mapped::NoRule,
            Err(_) => return Mapped::TooCostly,
        };
        let Some(rule) = self.rules.get(index) else {
            return Mapped::NoRule;
        };
        let field = |source: &FieldSource| match source {
            FieldSource::Fixed(v) => Some(v.clone()),
            FieldSource::Claim(name) => caller
                .claims
                .get(name)
                .and_then(serde_json::Value::as_str)
                .filter(|v| {
                    !v.is_empty()
                        && v.len() <= MAX_CLAIM_VALUE
                        && v.bytes().all(|b| b.is_ascii_graphic())
                })
                .map(str::to_owned),
        };
        let Some(task_id) = field(&rule.task_id) else {
            return Mapped::NoRule;
        };
        let workspace_id = match &rule.workspace_id {
            None => None,
            Some(source) => match field(source) {
                Some(w) => Some(w),
                None => return Mapped::NoRule,
            },
        };
        let owner = owner_of(&caller.issuer, &caller.subject, caller.client_id.as_deref());
        let mut scopes = caller.scopes.clone();
        scopes.sort();
        let key = toolhost_calls::callers::digest(&format!(
            "{}\0{index}\0{}\0{task_id}\0{}\0{}",
            hex(&owner),
            rule.surface,
            workspace_id.as_deref().unwrap_or(""),
            scopes.join(" ")
        ));
        let Ok(mut known) = self.bindings.lock() else {
            return Mapped::NoRule;
        };
        if let Some(b) = known.get(&key) {
            return Mapped::Bound(b.clone(), owner);
        }
        if known.len() >= MAX_BINDINGS {
            known.clear();
        }
        let session_id = format!("oauth-{}", &hex(&owner)[..16]);
        let binding = Arc::new(
            Binding::new(rule.surface.clone(), task_id, session_id, workspace_id).with_principal(
                Principal {
                    issuer: caller.issuer.clone(),
                    subject: caller.subject.clone(),
                    client_id: caller.client_id.clone(),
                    scopes: caller.scopes.clone(),
                },
            ),
        );
        known.insert(key, binding.clone());
        Mapped::Bound(binding, owner)
    }

    fn challenge_header(&self, c: &Challenge<'_>) -> HeaderValue {
        let text = metadata::challenge(self.verifier.settings(), c);
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    fn unauthorized(&self, c: &Challenge<'_>) -> Response {
        let mut r = (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":"unauthorized","message":"send Authorization: Bearer <token> with an access token for this resource; its metadata (WWW-Authenticate: resource_metadata) names the authorization servers"}"#,
        )
            .into_response();
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, self.challenge_header(c));
        r
    }

    fn refused(&self, why: &Rejection) -> Response {
        if why.is_unavailable() {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::CONTENT_TYPE, "application/json")],
                serde_json::json!({"error": "temporarily_unavailable", "message": why.to_string()})
                    .to_string(),
            )
                .into_response();
        }
        let mut r = (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({"error": "invalid_token", "message": why.to_string()}).to_string(),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            self.challenge_header(&Challenge::Invalid(why)),
        );
        r
    }

    fn insufficient(&self, needed: &[String]) -> Response {
        let mut r = (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({
                "error": "insufficient_scope",
                "message": format!("this request needs the scopes {}; ask the authorization server for a token with them", needed.join(" ")),
                "scope": needed.join(" "),
            })
            .to_string(),
        )
            .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            self.challenge_header(&Challenge::InsufficientScope { scope: needed }),
        );
        r
    }

    /// The metadata document's path and body, for the open routes.
    #[must_use]
    pub fn metadata(&self) -> (String, String) {
        let s = self.verifier.settings();
        (
            metadata::metadata_path(s),
            metadata::document(s).to_string(),
        )
    }
}

/// Whose a verified caller's sessions and quotas are: its issuer, subject
/// and client, whatever token it sends today.
fn owner_of(issuer: &str, subject: &str, client: Option<&str>) -> [u8; 32] {
    toolhost_calls::callers::digest(&format!(
        "oauth\0{issuer}\0{subject}\0{}",
        client.unwrap_or("")
    ))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An exchanged token is used until this many seconds before it expires.
const EXCHANGED_MARGIN: u64 = 30;

impl OAuthGate {
    fn remember_subject(&self, owner: [u8; 32], token: &str, expires_at: u64) {
        let Ok(mut subjects) = self.subjects.lock() else {
            return;
        };
        if subjects.get(&owner).is_some_and(|(t, _)| &**t == token) {
            return;
        }
        if subjects.len() >= MAX_BINDINGS {
            let now = now();
            subjects.retain(|_, (_, exp)| *exp > now);
            if subjects.len() >= MAX_BINDINGS {
                subjects.clear();
            }
        }
        subjects.insert(owner, (Arc::from(token), expires_at));
    }

    async fn exchange_for(
        &self,
        binding: &Binding,
        audiences: &[String],
    ) -> Result<Vec<Credential>, String> {
        let Some(p) = &binding.principal else {
            return Ok(Vec::new());
        };
        let owner = owner_of(&p.issuer, &p.subject, p.client_id.as_deref());
        let now = now();
        let subject = self
            .subjects
            .lock()
            .ok()
            .and_then(|s| s.get(&owner).filter(|(_, exp)| *exp > now).map(|(t, _)| Arc::clone(t)))
            .ok_or_else(|| {
                "the caller's access token expired, so toolhost could not get the tokens this tool needs; \
                 nothing ran. Call again once the client has a fresh token"
                    .to_owned()
            })?;
        let mut out = Vec::with_capacity(audiences.len());
        for audience in audiences {
            let cached = self.exchanged.lock().ok().and_then(|c| {
                c.get(&owner)
                    .and_then(|mine| mine.get(audience.as_str()))
                    .filter(|e| e.expires_at > now + EXCHANGED_MARGIN)
                    .cloned()
            });
            let token = match cached {
                Some(t) => t,
                None => {
                    let fresh = self
                        .verifier
                        .exchange(&p.issuer, &subject, audience)
                        .await
                        .map_err(|e| format!("{e}; nothing ran"))?;
                    if let Ok(mut c) = self.exchanged.lock() {
                        if c.len() >= MAX_BINDINGS && !c.contains_key(&owner) {
                            c.retain(|_, mine| mine.values().any(|e| e.expires_at > now));
                            if c.len() >= MAX_BINDINGS {
                                c.clear();
                            }
                        }
                        // A plugin declares at most 8 audiences, so one
                        // caller's map stays small.
                        c.entry(owner)
                            .or_default()
                            .insert(audience.clone(), fresh.clone());
                    }
                    fresh
                }
            };
            out.push(Credential {
                audience: audience.clone(),
                access_token: token.access_token,
                expires_at_unix_s: token.expires_at,
            });
        }
        Ok(out)
    }
}

impl Credentials for OAuthGate {
    fn tokens<'a>(
        &'a self,
        binding: &'a Binding,
        audiences: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Credential>, String>> {
        Box::pin(self.exchange_for(binding, audiences))
    }
}

fn forbidden(message: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({"error": "forbidden", "message": message}).to_string(),
    )
        .into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tools a request body calls: a `tools/call` request's, or each of
/// a batch's. Every body is parsed whole (no scan for the method's name:
/// JSON escapes could hide it), and what does not parse is left to rmcp,
/// which refuses it.
fn called_tools(body: &[u8]) -> Vec<String> {
    fn tool(message: &serde_json::Value) -> Option<String> {
        if message.get("method").and_then(serde_json::Value::as_str) != Some("tools/call") {
            return None;
        }
        message
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(batch)) => batch.iter().filter_map(tool).collect(),
        Ok(message) => tool(&message).into_iter().collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_called_tool_is_read_from_the_body_however_it_is_written() {
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"kandev_t_close","arguments":{}}}"#;
        assert_eq!(called_tools(call), ["kandev_t_close"]);
        let escaped = br#"{"jsonrpc":"2.0","id":1,"method":"tools\/c\u0061ll","params":{"name":"kandev_t_\u0063lose"}}"#;
        assert_eq!(called_tools(escaped), ["kandev_t_close"]);
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}]"#;
        assert_eq!(called_tools(batch), ["a"]);
        let list =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"tools/call"}}"#;
        assert!(called_tools(list).is_empty());
    }
}
