//! A real OTLP/gRPC trace receiver: the `TraceService` of the
//! `opentelemetry-proto` definitions, served by tonic on a loopback port.
//!
//! It keeps every span it is sent, flattened for assertions, and the raw
//! encoded requests, so a test can search every byte toolhost (or a
//! plugin) exported for a value that must never be there. In
//! [`Mode::Hang`] it accepts requests and never answers: a collector that
//! hangs.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message as _;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Keeps what it is sent and answers at once.
    Collect,
    /// Never answers an export.
    Hang,
}

/// One exported span, flattened.
#[derive(Debug, Clone, Default)]
pub struct Span {
    /// The resource's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, empty for a root.
    pub parent_span_id: String,
    /// The W3C `tracestate` the span carries.
    pub trace_state: String,
    /// OTLP's SpanKind: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// Attributes, every value rendered as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// Start, in nanoseconds since the epoch.
    pub start_ns: u64,
    /// End, in nanoseconds since the epoch.
    pub end_ns: u64,
}

#[derive(Default)]
struct Kept {
    spans: Vec<Span>,
    raw: Vec<u8>,
    requests: usize,
}

#[derive(Clone)]
struct Service {
    mode: Mode,
    kept: Arc<Mutex<Kept>>,
}

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests += 1;
        if self.mode == Mode::Hang {
            std::future::pending::<()>().await;
            return Err(tonic::Status::unavailable("never"));
        }
        {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.raw.extend(request.encode_to_vec());
            for rs in &request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                    .and_then(|a| a.value.as_ref())
                    .map(text)
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for s in &ss.spans {
                        kept.spans.push(Span {
                            service: service.clone(),
                            name: s.name.clone(),
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent_span_id: hex(&s.parent_span_id),
                            trace_state: s.trace_state.clone(),
                            kind: s.kind,
                            attributes: s
                                .attributes
                                .iter()
                                .map(|a| {
                                    (
                                        a.key.clone(),
                                        a.value.as_ref().map(text).unwrap_or_default(),
                                    )
                                })
                                .collect(),
                            status: s.status.as_ref().map_or(0, |st| st.code),
                            start_ns: s.start_time_unix_nano,
                            end_ns: s.end_time_unix_nano,
                        });
                    }
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    match &v.value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    /// Where it listens (`http://{addr}` is the OTLP/gRPC endpoint).
    pub addr: SocketAddr,
    kept: Arc<Mutex<Kept>>,
    _stop: oneshot::Sender<()>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(mode: Mode) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let kept = Arc::new(Mutex::new(Kept::default()));
        let service = Service {
            mode,
            kept: Arc::clone(&kept),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(service))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
        });
        Ok(Self {
            addr,
            kept,
            _stop: stop,
        })
    }

    /// The OTLP/gRPC endpoint to configure.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    #[must_use]
    pub fn spans(&self) -> Vec<Span> {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spans
            .clone()
    }

    /// Every byte of every export received so far (protobuf-encoded).
    #[must_use]
    pub fn raw(&self) -> Vec<u8> {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .raw
            .clone()
    }

    /// Export requests received (in [`Mode::Hang`], those left hanging).
    #[must_use]
    pub fn requests(&self) -> usize {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
    }
}
