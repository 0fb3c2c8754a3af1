//! A unary gRPC call straight over HTTP/2: the plugin hop of every
//! protocol-1 tool call, without tonic's channel.
//!
//! Why not tonic here: a tonic `Channel` puts a buffer task in front of
//! hyper's client, and hyper sends a request's body from a task of its own
//! once h2 grants it capacity. Each call then crosses two extra tasks, and
//! its HEADERS and DATA leave in two `writev`s some 20-40 µs apart (a
//! plugin that wakes on the headers waits for the body). BENCHMARKS.md's
//! breakdown of one call found both. Here the message is encoded first, and
//! HEADERS and DATA are queued together on h2's connection before its task
//! runs, so one write carries the request and the only hand-off is to the
//! connection's own task.
//!
//! What tonic did for us is done here, and bounded the same way: the
//! `grpc-timeout` header and a local deadline, a reset stream when the
//! caller stops waiting (dropping h2's handles resets it), the answer's size
//! limit read from its length prefix before its bytes are buffered, a
//! header list of at most [`MAX_HEADER_LIST_BYTES`], and the status read
//! from trailers (or a trailers-only answer, or the HTTP status) by tonic's
//! own parser, so that every failure reaches [`Failure::Status`] with the
//! code tonic would have given it.
//!
//! The connection is made on the first call (or health probe) and made
//! again after it breaks (a call that saw it break fails as unavailable:
//! nothing is retried). It is a protocol-1 plugin's only connection once it
//! serves: its health probes use it too (`health::probe_direct`), and the
//! tonic channel its start used is dropped. Protocol 2's streams,
//! `Describe` and probes keep tonic's channel, and no direct link is made.

use arc_swap::ArcSwapOption;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The most header bytes (HPACK-decoded) accepted in an answer's headers or
/// trailers: a plugin's `grpc-message` fits with room to spare.
pub const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// Why a unary call produced no message.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The plugin (or the transport, as tonic would report it) gave this
    /// status.
    Status(tonic::Status),
    /// The answer's length prefix was over the limit.
    TooLarge,
    /// The deadline passed before the answer was read.
    Timeout,
}

/// The plugin's socket and, once a call has made it, the connection to it.
#[derive(Debug)]
pub(crate) struct DirectLink {
    socket: PathBuf,
    /// Ends the connection's task when the process has stopped.
    gone: CancellationToken,
    current: ArcSwapOption<Connection>,
    /// Held while connecting, so that calls arriving together make one
    /// connection.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Connection {
    send: h2::client::SendRequest<Bytes>,
    /// Set when the connection's task has ended. An atomic, not a
    /// cancellation token: every call reads it, and a token's read takes
    /// a lock that the calls in flight would contend for.
    closed: Arc<AtomicBool>,
}

impl DirectLink {
    pub(crate) fn new(socket: PathBuf, gone: CancellationToken) -> Self {
        Self {
            socket,
            gone,
            current: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// One unary call of `path` (`/package.Service/Method`) with `body`
    /// (the message in its gRPC frame: [`frame`]), `headers` added to the
    /// request. Returns the answer's message, encoded.
    pub(crate) async fn call(
        &self,
        path: &'static str,
        headers: http::HeaderMap,
        body: Bytes,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> Result<Bytes, Failure> {
        let exchange = async {
            let mut send = self.sender().await?.ready().await.map_err(transport)?;
            let request = request(path, headers, deadline)?;
            let (answer, mut stream) = send.send_request(request, false).map_err(transport)?;
            // Queued behind the HEADERS before the connection's task runs:
            // one write carries both.
            stream.send_data(body, true).map_err(transport)?;
            let answer = answer.await.map_err(transport)?;
            read_answer(answer, max_answer_bytes).await
        };
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(deadline, exchange).await {
            // An answer read after the deadline is a timeout too, whichever
            // the runtime saw first: the plugin's own clock for the
            // deadline (`grpc-timeout`) starts when the request arrives,
            // so its answer to that deadline ("cancelled") can be waiting
            // when a loaded daemon wakes, before the daemon's timer has
            // fired. The caller is told the one thing that is true either
            // way: the call did not finish in time.
            Ok(_) if started.elapsed() >= deadline => Err(Failure::Timeout),
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        }
    }

    /// How many streams the plugin lets the live connection open at once
    /// (its HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`); `None` before a
    /// connection is made or once it has closed.
    pub(crate) fn max_streams(&self) -> Option<usize> {
        self.current
            .load()
            .as_ref()
            .filter(|c| !c.closed.load(Ordering::Acquire))
            .map(|c| c.send.current_max_send_streams())
    }

    /// The live connection's sender, connecting when there is none.
    async fn sender(&self) -> Result<h2::client::SendRequest<Bytes>, Failure> {
        if let Some(c) = self.current.load().as_ref()
            && !c.closed.load(Ordering::Acquire)
        {
            return Ok(c.send.clone());
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(c) = self.current.load().as_ref()
            && !c.closed.load(Ordering::Acquire)
        {
            return Ok(c.send.clone());
        }
        let connection = self.connect().await?;
        let send = connection.send.clone();
        self.current.store(Some(Arc::new(connection)));
        Ok(send)
    }

    async fn connect(&self) -> Result<Connection, Failure> {
        // The path must still lead to the socket the handshake named (a
        // symlink could lead to another plugin's): see `sockets`.
        let io = crate::sockets::connect_pinned(&self.socket)
            .await
            .map_err(|e| unavailable(&format!("connect: {e}")))?;
        let (send, driver) = h2::client::Builder::new()
            // tonic's (hyper's) windows, so large answers flow as before.
            .initial_window_size(2 * 1024 * 1024)
            .initial_connection_window_size(5 * 1024 * 1024)
            .max_header_list_size(MAX_HEADER_LIST_BYTES)
            // A call dropped before its end resets its stream; h2 counts
            // late frames for forgotten streams toward tearing the
            // connection down, so remember enough of them (as the tonic
            // channel does).
            .max_concurrent_reset_streams(4096)
            .enable_push(false)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(transport)?;
        let closed = Arc::new(AtomicBool::new(false));
        let (gone, ended) = (self.gone.clone(), Arc::clone(&closed));
        // The connection's task runs alone, woken by its socket; a second
        // task ends it when the process stops. One task racing both would
        // poll the "gone" token (a lock shared by every call to this
        // plugin) at each of the connection's wake-ups.
        let driver = tokio::spawn(driver);
        tokio::spawn(async move {
            let abort = driver.abort_handle();
            tokio::select! {
                _ = driver => {}
                () = gone.cancelled() => abort.abort(),
            }
            ended.store(true, Ordering::Release);
        });
        Ok(Connection { send, closed })
    }
}

/// A message of `len` bytes, written by `encode`, in gRPC's frame:
/// uncompressed flag, big-endian length. One allocation of the exact size.
pub(crate) fn frame(len: usize, encode: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    // A request is bounded long before 4 GiB (the daemon's argument cap).
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    encode(&mut buf);
    buf.freeze()
}

/// A `prost` message in gRPC's frame.
pub(crate) fn frame_message(message: &impl prost::Message) -> Bytes {
    // Encoding into a buffer of the exact length cannot run out of room.
    frame(message.encoded_len(), |buf| {
        let _ = message.encode(buf);
    })
}

fn request(
    path: &'static str,
    headers: http::HeaderMap,
    deadline: Duration,
) -> Result<http::Request<()>, Failure> {
    // Built from static parts, so nothing is formatted or parsed per call.
    let uri = http::Uri::builder()
        .scheme(http::uri::Scheme::HTTP)
        .authority(http::uri::Authority::from_static("plugin.invalid"))
        .path_and_query(http::uri::PathAndQuery::from_static(path))
        .build()
        .map_err(|e| Failure::Status(tonic::Status::internal(e.to_string())))?;
    let mut request = http::Request::post(uri)
        .body(())
        .map_err(|e| Failure::Status(tonic::Status::internal(e.to_string())))?;
    let h = request.headers_mut();
    *h = headers;
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    h.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    if let Ok(v) = http::HeaderValue::from_bytes(grpc_timeout(deadline).as_bytes()) {
        h.insert("grpc-timeout", v);
    }
    Ok(request)
}

/// gRPC's `TimeoutValue`: at most 8 digits and a unit; the finest unit
/// that fits. Written on the stack: the header value is the one copy.
fn grpc_timeout(d: Duration) -> TimeoutValue {
    const MAX: u128 = 99_999_999;
    let micros = d.as_micros().max(1);
    let (mut n, unit) = if micros <= MAX {
        (micros, b'u')
    } else if d.as_millis() <= MAX {
        (d.as_millis(), b'm')
    } else {
        (u128::from(d.as_secs()).min(MAX), b'S')
    };
    let mut bytes = [0u8; 9];
    bytes[8] = unit;
    let mut start = 8;
    loop {
        start -= 1;
        bytes[start] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    TimeoutValue { bytes, start }
}

/// A `grpc-timeout` value: up to 8 digits and a unit, right-aligned.
struct TimeoutValue {
    bytes: [u8; 9],
    start: usize,
}

impl TimeoutValue {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// Reads one answer: its headers (a trailers-only answer is a status), one
/// message within the limit, then the trailers' status.
async fn read_answer(
    answer: http::Response<h2::RecvStream>,
    max_answer_bytes: usize,
) -> Result<Bytes, Failure> {
    let (parts, mut body) = answer.into_parts();
    if parts.status != http::StatusCode::OK {
        return Err(Failure::Status(from_http_status(parts.status)));
    }
    if let Some(status) = tonic::Status::from_header_map(&parts.headers) {
        return Err(Failure::Status(if status.code() == tonic::Code::Ok {
            tonic::Status::internal("Missing response message.")
        } else {
            status
        }));
    }
    let mut buf = BytesMut::new();
    let mut expected: Option<usize> = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(transport)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
        if expected.is_none() && buf.len() >= 5 {
            if buf[0] != 0 {
                // No compression was offered, so none may be used.
                return Err(Failure::Status(tonic::Status::internal(
                    "the plugin compressed its answer without being offered compression",
                )));
            }
            let len = (&buf[1..5]).get_u32() as usize;
            if len > max_answer_bytes {
                return Err(Failure::TooLarge);
            }
            expected = Some(len);
        }
        if let Some(len) = expected
            && buf.len() > 5 + len
        {
            return Err(Failure::Status(tonic::Status::internal(
                "the plugin answered more than one message",
            )));
        }
    }
    let trailers = body.trailers().await.map_err(transport)?;
    // Most answers say `grpc-status: 0`; tonic's parser builds a whole
    // `Status` (a message, details, a copy of the headers) to say so, so
    // only an answer that says anything else goes through it.
    let ok = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .is_some_and(|v| v.as_bytes() == b"0");
    if !ok {
        let status = trailers
            .as_ref()
            .and_then(tonic::Status::from_header_map)
            .unwrap_or_else(|| tonic::Status::unknown("the plugin's answer had no grpc-status"));
        if status.code() != tonic::Code::Ok {
            return Err(Failure::Status(status));
        }
    }
    match expected {
        Some(len) if buf.len() == 5 + len => {
            buf.advance(5);
            Ok(buf.freeze())
        }
        _ => Err(Failure::Status(tonic::Status::internal(
            "Missing response message.",
        ))),
    }
}

/// gRPC's mapping of an HTTP status that is not 200 to a code.
fn from_http_status(status: http::StatusCode) -> tonic::Status {
    let code = match status.as_u16() {
        400 => tonic::Code::Internal,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 => tonic::Code::Unimplemented,
        429 | 502..=504 => tonic::Code::Unavailable,
        _ => tonic::Code::Unknown,
    };
    tonic::Status::new(code, format!("HTTP status {}", status.as_u16()))
}

/// A transport failure, as tonic reports one: the code its callers
/// classify (a reset by the plugin keeps its reason's code).
fn transport(e: h2::Error) -> Failure {
    let code = match e.reason() {
        Some(h2::Reason::CANCEL) => tonic::Code::Cancelled,
        Some(h2::Reason::REFUSED_STREAM) | None => tonic::Code::Unavailable,
        Some(_) => tonic::Code::Unknown,
    };
    Failure::Status(tonic::Status::new(
        code,
        "the connection to the plugin failed",
    ))
}

fn unavailable(detail: &str) -> Failure {
    Failure::Status(tonic::Status::unavailable(detail.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the stand-in plugin answers; each is something a hostile or
    /// broken plugin can send.
    #[derive(Clone, Copy)]
    enum Answer {
        Echo,
        HttpStatus(u16),
        TrailersOnly,
        Compressed,
        Huge,
        TwoMessages,
        NoStatus,
        Refused,
        Silent,
    }

    /// An HTTP/2 server on a Unix socket answering every request as told.
    async fn plugin(answer: Answer) -> (tempfile::TempDir, DirectLink) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("plugin.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(io).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        tokio::spawn(respond_as(answer, request, respond));
                    }
                });
            }
        });
        let link = DirectLink::new(path, CancellationToken::new());
        (dir, link)
    }

    async fn respond_as(
        answer: Answer,
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
    ) {
        let mut body = request.into_body();
        let mut got = BytesMut::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        let ok = |code: &str| {
            let mut t = http::HeaderMap::new();
            t.insert("grpc-status", code.parse().expect("header"));
            t
        };
        let head = |status: u16| {
            http::Response::builder()
                .status(status)
                .header("content-type", "application/grpc")
                .body(())
                .expect("response")
        };
        match answer {
            Answer::HttpStatus(code) => {
                let _ = respond.send_response(head(code), true);
            }
            Answer::TrailersOnly => {
                let mut r = head(200);
                r.headers_mut()
                    .insert("grpc-status", "7".parse().expect("header"));
                r.headers_mut()
                    .insert("grpc-message", "not%20yours%0A".parse().expect("header"));
                let _ = respond.send_response(r, true);
            }
            Answer::Silent => std::future::pending::<()>().await,
            other => {
                let Ok(mut stream) = respond.send_response(head(200), false) else {
                    return;
                };
                let data = match other {
                    Answer::Compressed => {
                        let mut b = got.clone();
                        b[0] = 1;
                        b.freeze()
                    }
                    Answer::Huge => Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff, 1, 2]),
                    Answer::TwoMessages => {
                        let mut b = got.clone();
                        b.extend_from_slice(&got);
                        b.freeze()
                    }
                    _ => got.freeze(),
                };
                let _ = stream.send_data(data, false);
                let trailers = match other {
                    Answer::NoStatus => http::HeaderMap::new(),
                    Answer::Refused => {
                        let mut t = ok("5");
                        t.insert("grpc-message", "no%20such%20tool".parse().expect("h"));
                        t
                    }
                    _ => ok("0"),
                };
                let _ = stream.send_trailers(trailers);
            }
        }
    }

    fn message() -> toolhost_proto::plugin::AgentToolRequest {
        toolhost_proto::plugin::AgentToolRequest {
            name: "echo".into(),
            ..Default::default()
        }
    }

    async fn call_within(link: &DirectLink, deadline: Duration) -> Result<Bytes, Failure> {
        let path = "/kandev.plugin.v1.Plugin/InvokeAgentTool";
        link.call(
            path,
            http::HeaderMap::new(),
            frame_message(&message()),
            deadline,
            1024,
        )
        .await
    }

    async fn call(answer: Answer) -> Result<Bytes, Failure> {
        let (_dir, link) = plugin(answer).await;
        call_within(&link, Duration::from_secs(5)).await
    }

    fn code(r: Result<Bytes, Failure>) -> tonic::Code {
        match r {
            Err(Failure::Status(s)) => s.code(),
            other => panic!("expected a status, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_answer_comes_back_whole() {
        let got = call(Answer::Echo).await.expect("answer");
        let back = <toolhost_proto::plugin::AgentToolRequest as prost::Message>::decode(got)
            .expect("decodes");
        assert_eq!(back.name, "echo");
    }

    #[tokio::test]
    async fn each_broken_answer_is_a_status_with_tonics_code() {
        assert_eq!(
            code(call(Answer::HttpStatus(404)).await),
            tonic::Code::Unimplemented
        );
        assert_eq!(code(call(Answer::Compressed).await), tonic::Code::Internal);
        assert_eq!(code(call(Answer::TwoMessages).await), tonic::Code::Internal);
        assert_eq!(code(call(Answer::NoStatus).await), tonic::Code::Unknown);
        assert!(matches!(call(Answer::Huge).await, Err(Failure::TooLarge)));
    }

    #[tokio::test]
    async fn a_plugins_status_and_message_are_read_as_tonic_reads_them() {
        match call(Answer::Refused).await {
            Err(Failure::Status(s)) => {
                assert_eq!(s.code(), tonic::Code::NotFound);
                assert_eq!(s.message(), "no such tool");
            }
            other => panic!("{other:?}"),
        }
        match call(Answer::TrailersOnly).await {
            Err(Failure::Status(s)) => {
                assert_eq!(s.code(), tonic::Code::PermissionDenied);
                assert_eq!(s.message(), "not yours\n");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_silent_plugin_is_a_timeout_and_the_link_still_serves() {
        let (_dir, link) = plugin(Answer::Silent).await;
        let r = call_within(&link, Duration::from_millis(50)).await;
        assert!(matches!(r, Err(Failure::Timeout)));
        assert!(
            link.current.load().is_some(),
            "a timeout resets the stream, not the connection"
        );
    }

    #[tokio::test]
    async fn a_closed_connection_is_replaced_at_the_next_call() {
        let (dir, link) = plugin(Answer::Echo).await;
        call_within(&link, Duration::from_secs(5))
            .await
            .expect("first");
        let first = link.current.load_full().expect("connected");
        first.closed.store(true, Ordering::Release);
        call_within(&link, Duration::from_secs(5))
            .await
            .expect("a closed connection is replaced");
        let second = link.current.load_full().expect("connected");
        assert!(!Arc::ptr_eq(&first, &second));
        drop(dir);
    }

    #[tokio::test]
    async fn a_call_in_flight_fails_at_once_when_the_process_is_gone() {
        let (_dir, link) = plugin(Answer::Silent).await;
        let link = Arc::new(link);
        let gone = link.gone.clone();
        let waiting = {
            let link = Arc::clone(&link);
            tokio::spawn(async move { call_within(&link, Duration::from_secs(600)).await })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while link.current.load().is_none() {
            assert!(std::time::Instant::now() < deadline, "never connected");
            tokio::task::yield_now().await;
        }
        gone.cancel();
        let r = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("failed at once, not at its deadline")
            .expect("joined");
        assert!(matches!(r, Err(Failure::Status(_))), "{r:?}");
    }

    #[tokio::test]
    async fn a_symlinked_socket_is_refused() {
        let (dir, _) = plugin(Answer::Echo).await;
        let link_path = dir.path().join("other.sock");
        std::os::unix::fs::symlink(dir.path().join("plugin.sock"), &link_path).expect("link");
        let link = DirectLink::new(link_path, CancellationToken::new());
        let r = call_within(&link, Duration::from_secs(5)).await;
        assert_eq!(code(r), tonic::Code::Unavailable);
    }

    #[test]
    fn a_timeout_uses_the_finest_unit_that_fits_in_eight_digits() {
        let t = |d| String::from_utf8_lossy(grpc_timeout(d).as_bytes()).into_owned();
        assert_eq!(t(Duration::from_millis(30)), "30000u");
        assert_eq!(t(Duration::ZERO), "1u");
        assert_eq!(t(Duration::from_micros(99_999_999)), "99999999u");
        assert_eq!(t(Duration::from_micros(100_000_000)), "100000m");
        assert_eq!(t(Duration::from_secs(100)), "100000m");
        assert_eq!(t(Duration::from_secs(200_000)), "200000S");
        assert_eq!(t(Duration::MAX), "99999999S");
    }

    #[test]
    fn a_frame_is_flag_length_and_message() {
        let req = toolhost_proto::plugin::AgentToolRequest {
            name: "echo".into(),
            ..Default::default()
        };
        let f = frame_message(&req);
        assert_eq!(f[0], 0);
        assert_eq!(
            u32::from_be_bytes([f[1], f[2], f[3], f[4]]) as usize,
            f.len() - 5
        );
    }

    #[test]
    fn http_statuses_map_as_grpc_says() {
        assert_eq!(
            from_http_status(http::StatusCode::NOT_FOUND).code(),
            tonic::Code::Unimplemented
        );
        assert_eq!(
            from_http_status(http::StatusCode::SERVICE_UNAVAILABLE).code(),
            tonic::Code::Unavailable
        );
        assert_eq!(
            from_http_status(http::StatusCode::IM_A_TEAPOT).code(),
            tonic::Code::Unknown
        );
    }
}
