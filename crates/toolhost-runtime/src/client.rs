//! The per-plugin gRPC client: one call, one deadline, no retry.

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use toolhost_proto::plugin::plugin_client::PluginClient as Grpc;
use toolhost_proto::plugin::{AgentToolRequest, AgentToolResponse};

/// A cheap, cloneable handle to one ready plugin process. It goes stale when
/// that process stops: calls made through a stale handle fail at once as
/// [`InvokeError::Unavailable`].
#[derive(Clone, Debug)]
pub struct PluginClient {
    plugin: Arc<str>,
    pid: u32,
    grpc: Grpc<Channel>,
    /// Cancelled when the process this handle talks to has stopped.
    gone: CancellationToken,
    /// Calls in flight on this process (shared by every clone).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a call in flight for as long as it lives.
#[derive(Debug)]
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

/// A reserved place among a plugin's calls in flight
/// ([`PluginClient::try_reserve`]); freed when dropped.
#[derive(Debug)]
pub struct CallSlot {
    _in_flight: InFlight,
}

impl InFlight {
    fn new(n: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(Arc::clone(n))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// tonic's own default limit on a decoded message.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Why an invocation produced no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The deadline passed; the plugin was told (the stream was reset).
    #[error("the tool did not answer within {0:?}")]
    Timeout(Duration),
    /// The process died or the connection broke during the call. It may or
    /// may not have taken effect; it is never retried.
    #[error(
        "plugin {plugin} became unavailable during the call ({detail}); it may or may not have taken effect"
    )]
    Unavailable {
        /// The plugin id.
        plugin: String,
        /// What happened.
        detail: String,
    },
    /// The answer was larger than the limit; the plugin ran the call.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The plugin answered with a gRPC error (an unknown tool, a panic).
    #[error("plugin {plugin} refused the call: {code:?}: {message}")]
    Refused {
        /// The plugin id.
        plugin: String,
        /// The gRPC code.
        code: tonic::Code,
        /// The plugin's message (plugin text, not argument values).
        message: String,
    },
}

impl PluginClient {
    pub(crate) fn new(
        plugin: Arc<str>,
        pid: u32,
        channel: Channel,
        gone: CancellationToken,
    ) -> Self {
        Self {
            plugin,
            pid,
            grpc: Grpc::new(channel),
            gone,
            in_flight: Arc::default(),
        }
    }

    /// Calls in flight on this process right now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The plugin id.
    #[must_use]
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The process this handle talks to.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process behind this handle has stopped.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.gone.is_cancelled()
    }

    /// Reserves a place among this process's calls in flight, if fewer
    /// than `max` are. Exact under any concurrency: the check and the count
    /// are one atomic step.
    #[must_use]
    pub fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        use std::sync::atomic::Ordering::SeqCst;
        let n = &self.in_flight;
        let mut current = n.load(SeqCst);
        loop {
            if current >= max {
                return None;
            }
            match n.compare_exchange_weak(current, current + 1, SeqCst, SeqCst) {
                Ok(_) => {
                    return Some(CallSlot {
                        _in_flight: InFlight(Arc::clone(n)),
                    });
                }
                Err(now) => current = now,
            }
        }
    }

    /// Makes exactly one `InvokeAgentTool` call. The deadline travels as
    /// `grpc-timeout` and is enforced here too. Dropping the returned future
    /// cancels the call (the HTTP/2 stream is reset, and the plugin's handler
    /// is told).
    pub async fn invoke(
        &self,
        request: AgentToolRequest,
        deadline: Duration,
    ) -> Result<AgentToolResponse, InvokeError> {
        let slot = CallSlot {
            _in_flight: InFlight::new(&self.in_flight),
        };
        self.invoke_in(slot, request, deadline, DEFAULT_MAX_ANSWER_BYTES)
            .await
    }

    /// [`PluginClient::invoke`] in a reserved slot, with answers larger
    /// than `max_answer_bytes` (encoded) refused as
    /// [`InvokeError::TooLarge`].
    pub async fn invoke_in(
        &self,
        slot: CallSlot,
        request: AgentToolRequest,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> Result<AgentToolResponse, InvokeError> {
        if self.gone.is_cancelled() {
            return Err(self.unavailable("the plugin process had already stopped"));
        }
        let _counted = slot;
        let mut req = tonic::Request::new(request);
        req.set_timeout(deadline);
        let mut grpc = self
            .grpc
            .clone()
            .max_decoding_message_size(max_answer_bytes);
        tokio::select! {
            biased;
            () = self.gone.cancelled() => Err(self.unavailable("the plugin process stopped")),
            r = tokio::time::timeout(deadline, grpc.invoke_agent_tool(req)) => match r {
                Err(_) => Err(InvokeError::Timeout(deadline)),
                Ok(Ok(resp)) => Ok(resp.into_inner()),
                Ok(Err(status)) => Err(self.classify(&status, deadline, max_answer_bytes)),
            },
        }
    }

    fn unavailable(&self, detail: &str) -> InvokeError {
        InvokeError::Unavailable {
            plugin: self.plugin.to_string(),
            detail: detail.to_owned(),
        }
    }

    /// tonic reports its own deadline as `Cancelled` "Timeout expired", not
    /// `DeadlineExceeded`; transport failures come as `Unavailable` or
    /// `Unknown`.
    fn classify(&self, status: &tonic::Status, deadline: Duration, limit: usize) -> InvokeError {
        match status.code() {
            // tonic's decoder refusing an answer over the limit.
            tonic::Code::OutOfRange if status.message().contains("message length too large") => {
                InvokeError::TooLarge(limit)
            }
            tonic::Code::DeadlineExceeded => InvokeError::Timeout(deadline),
            tonic::Code::Cancelled if status.message().contains("Timeout expired") => {
                InvokeError::Timeout(deadline)
            }
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                self.unavailable(&format!("{:?}", status.code()))
            }
            code => InvokeError::Refused {
                plugin: self.plugin.to_string(),
                code,
                message: status.message().chars().take(512).collect(),
            },
        }
    }
}
