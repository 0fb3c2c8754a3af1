//! Plain stateless `tools/call`, answered without rmcp's per-request server.
//!
//! In stateless JSON mode rmcp answers each request by parsing it into its
//! message enum, building a server and a peer for that one request,
//! spawning a task to run them, and serializing what comes back through a
//! channel. For the request agents send most (a 2025-era `tools/call` with
//! a name and arguments and nothing else) none of that machinery carries
//! anything: there is no session, no progress token, no log level, and no
//! client that could answer a question. Profiles put rmcp's share of such a
//! call at a third of toolhost's CPU. This module answers exactly that
//! shape itself, through the same pipeline call (`Hub::start_call`),
//! the same result mapping ([`toolhost_mcp::result_of`]) and rmcp's own
//! message types, so the bytes on the wire are the ones rmcp would write.
//!
//! The rule that keeps it safe: **the direct path takes a strict subset of
//! what rmcp accepts, and hands everything else to rmcp untouched.** Any
//! other method, a `_meta`, a 2026-07-28 or unknown protocol version, an
//! `Origin` header, an `Accept` or `Content-Type` it cannot read at a
//! glance, a `Host` rmcp would refuse, a body that is not exactly
//! `{jsonrpc, id, method, params: {name, arguments}}`: all go to rmcp,
//! which answers or refuses as it always has. So the direct path can only
//! make a request rmcp would serve cheaper; it can never let in one rmcp
//! would refuse. `tests/stateless.rs` sends the same requests to a daemon
//! with the direct path and one without, and compares the answers byte for
//! byte.
//!
//! What this module must not do: decide anything about the call (that is
//! the pipeline's), or answer any request whose shape it does not fully
//! know.

use crate::identity::take_binding;
use crate::next::Next;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerResult};
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;
use toolhost_calls::{CallRequest, Hosted, Stop, TaskOffer, TokenTable, Wants};
use toolhost_mcp::Hub;
use toolhost_net::ClientGone;
use toolhost_telemetry::FutureExt as _;

/// The protocol versions a plain call may name in `MCP-Protocol-Version`:
/// the 2025 era and before, where a stateless request carries no
/// per-request metadata and no SEP-2243 headers are checked. An absent
/// header means 2025-03-26 to rmcp, and to this path.
const PLAIN_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Calls the direct path has answered (`/metrics`): how an operator, or a
/// test, sees which path served.
static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// Calls the direct path has answered so far.
#[must_use]
pub fn answered() -> u64 {
    ANSWERED.load(Ordering::Relaxed)
}

/// What the direct path needs, built once with the router.
#[derive(Debug)]
pub(crate) struct Direct {
    pub(crate) hub: Arc<Hub>,
    pub(crate) tokens: Arc<TokenTable>,
    /// The `Host` values rmcp accepts, parsed as rmcp parses them.
    allowed_hosts: Vec<Authority>,
    /// Larger bodies go to rmcp, which refuses them.
    pub(crate) max_body_bytes: u64,
    /// The service's shutdown: cancels a call in progress.
    pub(crate) shutdown: CancellationToken,
}

impl Direct {
    pub(crate) fn new(
        hub: Arc<Hub>,
        tokens: Arc<TokenTable>,
        allowed_hosts: &[String],
        max_body_bytes: usize,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            hub,
            tokens,
            allowed_hosts: allowed_hosts
                .iter()
                .filter_map(|a| Authority::allowed(a))
                .collect(),
            max_body_bytes: u64::try_from(max_body_bytes).unwrap_or(u64::MAX),
            shutdown,
        }
    }
}

/// The middleware: a plain call is answered here; anything else goes on to
/// rmcp as it came.
pub(crate) async fn plain_calls(direct: &Direct, request: Request, next: impl Next) -> Response {
    if request.headers().contains_key("mcp-session-id")
        || !plain_headers(direct, request.method(), request.uri(), request.headers())
    {
        return next.run(request).await;
    }
    let (mut parts, bytes) = match read_body(direct, request).await {
        Ok(read) => read,
        Err(Ok(request)) => return next.run(request).await,
        Err(Err(refused)) => return refused,
    };
    let plain = serde_json::from_slice::<PlainCall<'_>>(&bytes)
        .ok()
        .filter(|c| c.jsonrpc == "2.0" && c.method == "tools/call");
    let Some(call) = plain else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    // Answered here from now on: nothing after this hands the request on.
    let Some(binding) = take_binding(&parts.headers, &mut parts.extensions, &direct.tokens) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let gone = parts.extensions.get::<ClientGone>().map(|g| g.0.clone());
    // A plain call names no token-owned state: it parks nothing and makes
    // no task.
    let caller = Caller {
        binding,
        owner: [0; 32],
        stop: &direct.shutdown,
        gone: gone.as_ref(),
    };
    answer_plain(direct, call, caller, &parts.headers).await
}

/// The body of a request the direct path may answer, read whole: the
/// listener has read it already, so this is a handover. A body of unknown
/// or too large a size is handed back (`Err(Ok)`) for rmcp, which refuses
/// what it must; one that cannot be read is answered (`Err(Err)`).
pub(crate) async fn read_body(
    direct: &Direct,
    request: Request,
) -> Result<(axum::http::request::Parts, axum::body::Bytes), Result<Request, Response>> {
    let Some(n) = request
        .body()
        .size_hint()
        .exact()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n as u64 <= direct.max_body_bytes)
    else {
        return Err(Ok(request));
    };
    let (parts, body) = request.into_parts();
    match whole_body(body, n).await {
        Some(bytes) => Ok((parts, bytes)),
        None => Err(Err((
            StatusCode::BAD_REQUEST,
            "Bad Request: the body could not be read",
        )
            .into_response())),
    }
}

/// A body of exactly `len` bytes (its `Content-Length`), or `None` if it
/// could not be read or is not that long. A small request arrives in one
/// frame, and that frame's bytes are the body as they are: no list of
/// buffers to gather them in (`axum::body::to_bytes`'s), no copy.
async fn whole_body(mut body: Body, len: usize) -> Option<axum::body::Bytes> {
    let mut gathered: Option<Vec<u8>> = None;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame.ok()?.into_data() else {
            continue; // trailers: not part of the body
        };
        match &mut gathered {
            // Hyper counts a body's length down as it arrives, so the end
            // is known without another read.
            None if data.len() == len && body.is_end_stream() => return Some(data),
            None => {
                let mut buffer = Vec::with_capacity(len);
                buffer.extend_from_slice(&data);
                gathered = Some(buffer);
            }
            Some(buffer) => buffer.extend_from_slice(&data),
        }
        if gathered.as_ref().is_some_and(|b| b.len() > len) {
            return None;
        }
    }
    match gathered {
        Some(buffer) if buffer.len() == len => Some(buffer.into()),
        None if len == 0 => Some(axum::body::Bytes::new()),
        _ => None,
    }
}

/// Who makes a plain call, and what stops it.
pub(crate) struct Caller<'a> {
    pub(crate) binding: std::sync::Arc<toolhost_pipeline::Binding>,
    /// Whose quota and state the call counts against.
    pub(crate) owner: toolhost_calls::Owner,
    /// Cancelled when the call must stop: the service's shutdown, or the
    /// session's end or the client's `notifications/cancelled`.
    pub(crate) stop: &'a CancellationToken,
    /// Cancelled when the client's connection goes away.
    pub(crate) gone: Option<&'a CancellationToken>,
}

/// Answers a plain call with one JSON body, traced and counted as rmcp's
/// path traces and counts a request.
pub(crate) async fn answer_plain(
    direct: &Direct,
    call: PlainCall<'_>,
    caller: Caller<'_>,
    headers: &HeaderMap,
) -> Response {
    ANSWERED.fetch_add(1, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let span = toolhost_mcp::request_span(
        &direct.hub,
        toolhost_mcp::Request {
            method: "tools/call",
            tool: Some(&call.params.name),
            id: &call.id,
            meta: None,
            headers: Some(headers),
            version: Some(
                headers
                    .get("mcp-protocol-version")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("2025-03-26"),
            ),
            transport: toolhost_telemetry::Transport::Http,
        },
    );
    let (message, ended) = match &span {
        Some(s) => {
            answer(direct, call, caller)
                .with_context(s.context().clone())
                .await
        }
        None => answer(direct, call, caller).await,
    };
    direct
        .hub
        .request_ended("tools/call", ended, started.elapsed(), span);
    json_response(&message)
}

/// Runs the call and maps its outcome as rmcp's server handler does for a
/// 2025-era peer.
async fn answer(
    direct: &Direct,
    call: PlainCall<'_>,
    caller: Caller<'_>,
) -> (ServerJsonRpcMessage, toolhost_mcp::Ended) {
    // Nothing reaches the client of a plain call before its result: no
    // progress token, no level set (a fresh handler per stateless request;
    // a session's facts say so), and no declared capability to answer a
    // question.
    let request = CallRequest {
        binding: caller.binding,
        name: call.params.name.into_owned(),
        arguments: call.params.arguments.map(serde_json::Value::Object),
        wants: Wants {
            progress: false,
            log_level: None,
            can_ask: false,
        },
        owner: caller.owner,
        tasks: TaskOffer::NotOffered,
    };
    let stop = Stop {
        request: caller.stop,
        gone: caller.gone,
    };
    let done = match direct
        .hub
        .host()
        .call(request, &toolhost_mcp::Nowhere, stop)
        .await
    {
        Hosted::Done(Err(unknown)) => {
            Err(rmcp::ErrorData::invalid_params(unknown.to_string(), None))
        }
        Hosted::Done(Ok(r)) => toolhost_mcp::result_of(r, false),
        // Neither a question (nothing parks for this delivery) nor a task
        // (not offered) can come of a plain call.
        _ => Err(rmcp::ErrorData::internal_error(
            "the call did not complete",
            None,
        )),
    };
    let done = done.map(|response| {
        let mut result = ServerResult::from(response);
        result.strip_result_type_for_legacy_peer();
        result.strip_non_object_output_for_legacy_peer();
        result
    });
    let ended = toolhost_mcp::Ended::of(&done);
    let message = match done {
        Ok(result) => ServerJsonRpcMessage::response(result, call.id),
        Err(error) => ServerJsonRpcMessage::error(error, Some(call.id)),
    };
    (message, ended)
}

/// The buffer a JSON answer is written into first: most answers fit.
const ANSWER_BUFFER_BYTES: usize = 1024;

/// rmcp's answer to a stateless JSON request: 200, `application/json`.
pub(crate) fn json_response(message: &ServerJsonRpcMessage) -> Response {
    // serde_json's own buffer starts at 128 bytes and doubles: a tool's
    // answer of a few hundred bytes cost two reallocations.
    let mut body = Vec::with_capacity(ANSWER_BUFFER_BYTES);
    match serde_json::to_writer(&mut body, message) {
        Ok(()) => {
            let mut r = Response::new(Body::from(body));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error: the answer could not be encoded",
        )
            .into_response(),
    }
}

/// The one body shape the direct path answers. Unknown fields anywhere
/// (`_meta`, `task`, anything) make it another shape, for rmcp.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlainCall<'a> {
    #[serde(borrow)]
    pub(crate) jsonrpc: Cow<'a, str>,
    pub(crate) id: RequestId,
    #[serde(borrow)]
    pub(crate) method: Cow<'a, str>,
    #[serde(borrow)]
    params: PlainParams<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    /// Absent or `null`: no arguments, as rmcp reads them. Any other
    /// non-object is rmcp's (its custom-request path answers it).
    #[serde(default)]
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Whether the request line and headers are ones rmcp would take for a
/// JSON POST (the session id aside), read conservatively: when in doubt,
/// no.
pub(crate) fn plain_headers(
    direct: &Direct,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> bool {
    method == Method::POST
        && !headers.contains_key(header::ORIGIN)
        && host_allowed(uri, headers, &direct.allowed_hosts)
        && accepts_json_and_sse(headers)
        && content_type_is_json(headers)
        && plain_version(headers)
}

fn plain_version(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all("mcp-protocol-version").iter();
    match (values.next(), values.next()) {
        (None, _) => true,
        (Some(v), None) => v.to_str().is_ok_and(|v| PLAIN_VERSIONS.contains(&v)),
        (Some(_), Some(_)) => false,
    }
}

/// Both media types named plainly: no parameters (a `q=0` could exclude
/// one), no quoting. Anything fancier is rmcp's to read.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains(['"', ';']) {
            return false;
        }
        for essence in value.split(',').map(str::trim) {
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

fn content_type_is_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    value.to_str().is_ok_and(|v| {
        let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    })
}

/// A host and port as rmcp compares them: brackets trimmed, lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn of(host: &str, port: Option<u16>) -> Self {
        Self {
            host: bare(host).to_ascii_lowercase(),
            port,
        }
    }

    /// One configured allowed host: `name` or `name:port`.
    fn allowed(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        Some(match http::uri::Authority::try_from(entry) {
            Ok(a) => Self::of(a.host(), a.port_u16()),
            Err(_) => Self::of(entry, None),
        })
    }
}

/// A host without the brackets of an IPv6 literal, as rmcp compares hosts.
fn bare(host: &str) -> &str {
    host.trim_matches('[').trim_matches(']')
}

/// rmcp's DNS-rebinding check on `Host` (or HTTP/2's `:authority`). Only a
/// host rmcp would accept passes; a malformed one is rmcp's to refuse.
fn host_allowed(uri: &Uri, headers: &HeaderMap, allowed: &[Authority]) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let authority = match (hosts.next(), hosts.next()) {
        (Some(h), None) => h
            .to_str()
            .ok()
            .and_then(|h| http::uri::Authority::try_from(h).ok()),
        (None, _) => uri.authority().cloned(),
        (Some(_), Some(_)) => None,
    };
    let Some(authority) = authority else {
        return false;
    };
    // Compared in place (this runs on every request): the same
    // normalization as `Authority::of`, without its allocation.
    let host = bare(authority.host());
    let port = authority.port_u16();
    // An empty list lets every host in, as it does in rmcp.
    allowed.is_empty()
        || allowed
            .iter()
            .any(|a| a.host.eq_ignore_ascii_case(host) && a.port.is_none_or(|p| port == Some(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that arrives in the given pieces.
    struct Pieces(std::collections::VecDeque<&'static [u8]>);

    impl http_body::Body for Pieces {
        type Data = axum::body::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            let next = self.0.pop_front();
            std::task::Poll::Ready(
                next.map(|p| Ok(http_body::Frame::data(axum::body::Bytes::from_static(p)))),
            )
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn pieces(p: &[&'static [u8]]) -> Body {
        Body::new(Pieces(p.iter().copied().collect()))
    }

    #[tokio::test]
    async fn a_body_is_whole_in_one_piece_or_many_and_exactly_its_length() {
        let one = whole_body(pieces(&[b"{\"a\":1}"]), 7).await;
        assert_eq!(one.as_deref(), Some(&b"{\"a\":1}"[..]));
        let many = whole_body(pieces(&[b"{\"a\"", b":", b"1}"]), 7).await;
        assert_eq!(many.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(whole_body(pieces(&[]), 0).await.as_deref(), Some(&b""[..]));
        // Shorter or longer than its length: not a body to answer.
        assert_eq!(whole_body(pieces(&[b"{\"a\""]), 7).await, None);
        assert_eq!(whole_body(pieces(&[b"{\"a\"", b":1}xx"]), 7).await, None);
        assert_eq!(whole_body(pieces(&[b"{}", b"{}"]), 2).await, None);
        assert_eq!(whole_body(pieces(&[]), 3).await, None);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn loopback() -> Vec<Authority> {
        ["localhost", "127.0.0.1", "[::1]", "example.test:8080"]
            .iter()
            .filter_map(|a| Authority::allowed(a))
            .collect()
    }

    #[test]
    fn hosts_pass_only_as_rmcp_would_let_them() {
        let uri = Uri::from_static("/mcp");
        let allowed = loopback();
        let ok = |h: &str| host_allowed(&uri, &headers(&[("host", h)]), &allowed);
        assert!(ok("localhost"));
        assert!(ok("LOCALHOST:9000"));
        assert!(ok("127.0.0.1:1"));
        assert!(ok("[::1]:8080"));
        assert!(ok("example.test:8080"));
        assert!(!ok("example.test:8081"), "a pinned port is pinned");
        assert!(!ok("example.test"), "a pinned port needs a port");
        assert!(!ok("evil.test"));
        assert!(!ok("localhost.evil.test"));
        assert!(!ok("local host"), "malformed");
        let two = headers(&[("host", "localhost"), ("host", "evil.test")]);
        assert!(!host_allowed(&uri, &two, &allowed), "duplicates are rmcp's");
        assert!(!host_allowed(&uri, &HeaderMap::new(), &allowed), "no host");
        let h2 = Uri::from_static("http://localhost:3000/mcp");
        assert!(host_allowed(&h2, &HeaderMap::new(), &allowed), ":authority");
        assert!(host_allowed(&uri, &headers(&[("host", "any.test")]), &[]));
    }

    #[test]
    fn accept_must_name_both_types_plainly() {
        let ok = |v: &[&str]| {
            accepts_json_and_sse(&headers(
                &v.iter().map(|v| ("accept", *v)).collect::<Vec<_>>(),
            ))
        };
        assert!(ok(&["application/json, text/event-stream"]));
        assert!(ok(&["TEXT/EVENT-STREAM,application/json"]));
        assert!(ok(&["application/json", "text/event-stream"]));
        assert!(!ok(&["application/json"]));
        assert!(!ok(&["*/*"]));
        assert!(!ok(&["application/json;q=0, text/event-stream"]));
        assert!(!ok(&["application/json, text/event-stream;q=0.5"]));
        assert!(!ok(&[]));
    }

    #[test]
    fn content_type_and_version_are_read_as_rmcp_reads_them() {
        let ct = |v: &str| content_type_is_json(&headers(&[("content-type", v)]));
        assert!(ct("application/json"));
        assert!(ct("Application/JSON; charset=utf-8"));
        assert!(!ct("text/plain"));
        assert!(!ct("application/json-seq"));
        let version = |v: &[&str]| {
            plain_version(&headers(
                &v.iter()
                    .map(|v| ("mcp-protocol-version", *v))
                    .collect::<Vec<_>>(),
            ))
        };
        assert!(version(&[]));
        assert!(version(&["2025-11-25"]));
        assert!(version(&["2024-11-05"]));
        assert!(
            !version(&["2026-07-28"]),
            "the 2026 era checks headers and _meta"
        );
        assert!(!version(&["2099-01-01"]));
        assert!(!version(&["2025-11-25", "2025-11-25"]));
    }

    #[test]
    fn only_the_plain_shape_parses() {
        let parses = |s: &str| {
            serde_json::from_str::<PlainCall<'_>>(s)
                .ok()
                .filter(|c| c.jsonrpc == "2.0" && c.method == "tools/call")
                .is_some()
        };
        assert!(parses(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1}}}"#
        ));
        assert!(parses(
            r#"{"params":{"name":"t"},"id":"x","method":"tools\/call","jsonrpc":"2.0"}"#
        ));
        assert!(parses(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":null}}"#
        ));
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"},"extra":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"t"}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        ] {
            assert!(!parses(other), "{other}");
        }
    }
}
