//! The health probe of a ready plugin: `grpc.health.v1` on its socket,
//! telling a plugin that says it is unhealthy from one that does not
//! answer, so the supervisor can say which when it restarts it.
//!
//! A protocol-1 plugin is probed over the connection its calls use (the
//! direct link), so the daemon holds one connection per plugin, not two;
//! a protocol-2 plugin over tonic's channel, which its streams use. A probe
//! that would have to wait for a stream, because the plugin's calls hold
//! every one it allows at once, is not made ([`Probed::Busy`]): it would
//! time out behind them, and a busy plugin is not a silent one.

use std::time::Duration;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, HealthCheckResponse, health_check_response::ServingStatus,
    health_client::HealthClient,
};
use toolhost_proto::contract::HEALTH_SERVICE;

/// What one health probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probed {
    /// `SERVING`.
    Healthy,
    /// The plugin answered that it is not serving: its SDK found a handler
    /// stuck past its call (or the plugin said so for its own reasons).
    Unhealthy,
    /// No answer within the timeout, or an error: the process hangs, or a
    /// handler blocks the thread that would answer.
    Silent,
    /// Not asked: a protocol-1 plugin's calls hold every stream it allows
    /// on the connection the probe would use. Neither a failure nor a
    /// success.
    Busy,
}

/// One health probe, bounded by `timeout`.
pub(crate) async fn probe(channel: &Channel, timeout: Duration) -> Probed {
    let mut health = HealthClient::new(channel.clone());
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: HEALTH_SERVICE.to_owned(),
    });
    req.set_timeout(timeout);
    match tokio::time::timeout(timeout, health.check(req)).await {
        Ok(Ok(r)) if r.get_ref().status() == ServingStatus::Serving => Probed::Healthy,
        Ok(Ok(_)) => Probed::Unhealthy,
        _ => Probed::Silent,
    }
}

/// The most bytes read from a health answer: a status and nothing more.
const MAX_HEALTH_ANSWER_BYTES: usize = 1024;

/// One health probe over a protocol-1 plugin's direct link, bounded by
/// `timeout`, read as [`probe`] reads tonic's answer.
pub(crate) async fn probe_direct(link: &crate::unary::DirectLink, timeout: Duration) -> Probed {
    let request = HealthCheckRequest {
        service: HEALTH_SERVICE.to_owned(),
    };
    let answer = link
        .call(
            "/grpc.health.v1.Health/Check",
            http::HeaderMap::new(),
            crate::unary::frame_message(&request),
            timeout,
            MAX_HEALTH_ANSWER_BYTES,
        )
        .await;
    match answer.map(<HealthCheckResponse as prost::Message>::decode) {
        Ok(Ok(r)) if r.status() == ServingStatus::Serving => Probed::Healthy,
        Ok(Ok(_)) => Probed::Unhealthy,
        _ => Probed::Silent,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::{BufMut as _, Bytes, BytesMut};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
    use tokio_util::sync::CancellationToken;

    /// A plugin's health service over plain HTTP/2 on a Unix socket: each
    /// check is answered with `status`; `connections` counts what the
    /// daemon opened.
    pub(crate) struct HealthServer {
        _dir: tempfile::TempDir,
        pub(crate) socket: std::path::PathBuf,
        status: Arc<AtomicI32>,
        connections: Arc<AtomicUsize>,
    }

    async fn health_server() -> HealthServer {
        health_server_allowing(None).await
    }

    /// As `health_server`, allowing at most `max_streams` streams at once
    /// on a connection when given.
    pub(crate) async fn health_server_allowing(max_streams: Option<u32>) -> HealthServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("plugin.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
        let status = Arc::new(AtomicI32::new(ServingStatus::Serving as i32));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s, c) = (Arc::clone(&status), Arc::clone(&connections));
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let mut builder = h2::server::Builder::new();
                    if let Some(max) = max_streams {
                        builder.max_concurrent_streams(max);
                    }
                    let Ok(mut conn) = builder.handshake(io).await else {
                        return;
                    };
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        assert_eq!(request.uri().path(), "/grpc.health.v1.Health/Check");
                        let answer = HealthCheckResponse {
                            status: s.load(Ordering::SeqCst),
                        };
                        let mut body = BytesMut::new();
                        body.put_u8(0);
                        body.put_u32(
                            u32::try_from(prost::Message::encoded_len(&answer)).expect("small"),
                        );
                        prost::Message::encode(&answer, &mut body).expect("encode");
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(())
                            .expect("response");
                        let Ok(mut stream) = respond.send_response(head, false) else {
                            continue;
                        };
                        let _ = stream.send_data(Bytes::from(body), false);
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        let _ = stream.send_trailers(trailers);
                    }
                });
            }
        });
        HealthServer {
            _dir: dir,
            socket,
            status,
            connections,
        }
    }

    #[tokio::test]
    async fn a_protocol_1_plugin_is_probed_on_the_connection_its_calls_use() {
        let server = health_server().await;
        let link = crate::unary::DirectLink::new(server.socket.clone(), CancellationToken::new());
        let timeout = Duration::from_secs(10);
        assert_eq!(probe_direct(&link, timeout).await, Probed::Healthy);
        server
            .status
            .store(ServingStatus::NotServing as i32, Ordering::SeqCst);
        assert_eq!(probe_direct(&link, timeout).await, Probed::Unhealthy);
        server
            .status
            .store(ServingStatus::Serving as i32, Ordering::SeqCst);
        assert_eq!(probe_direct(&link, timeout).await, Probed::Healthy);
        assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_protocol_1_plugin_that_is_gone_is_silent() {
        let server = health_server().await;
        let link = crate::unary::DirectLink::new(
            server.socket.with_file_name("nothing.sock"),
            CancellationToken::new(),
        );
        assert_eq!(
            probe_direct(&link, Duration::from_secs(10)).await,
            Probed::Silent
        );
    }
}
