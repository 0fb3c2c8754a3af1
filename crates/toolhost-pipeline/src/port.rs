//! The seam under the pipeline: how it reaches plugins.
//!
//! The pipeline needs three things of a plugin and nothing else: a ready
//! process of the declared version (now, or once it has started), a place
//! among its calls in flight, and one call (a unary invocation in protocol
//! 1, one stream in protocol 2). [`PluginPort`], [`PluginLink`] and
//! [`EventStream`] say exactly that, so every rule of `call.rs` can be
//! tested against a fake plugin in a unit test, and the daemon plugs in
//! the runtime's registry ([`toolhost_runtime::Plugins`]) and its clients.
//!
//! The futures are boxed: one small allocation per call, against a call
//! path measured in tens of microseconds.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_proto::answer::ToolAnswer;
use toolhost_proto::plugin_v2::{Answer, PluginEvent, Start};
use toolhost_proto::request::ToolRequestRef;
use toolhost_runtime::{
    CallSlot, CallStream, InvokeError, PluginClient, PluginUnavailable, Plugins,
};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where the pipeline finds plugin processes.
pub trait PluginPort: Send + Sync + Debug {
    /// A ready process of plugin `id` at `version`, now, or why there is
    /// none, in words for the model.
    fn ready(&self, id: &str, version: &str) -> Result<Box<dyn PluginLink>, PluginUnavailable>;

    /// [`PluginPort::ready`], waiting up to `wait` while the plugin is
    /// starting or restarting; fails at once when it is stopped, failed or
    /// gone, and when `cancel` fires ([`PluginUnavailable::Cancelled`]).
    fn ready_within<'a>(
        &'a self,
        id: &'a str,
        version: &'a str,
        wait: Duration,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn PluginLink>, PluginUnavailable>>;
}

/// One ready plugin process, as one call uses it.
pub trait PluginLink: Send + Sync {
    /// The plugin protocol it speaks: 2 means [`PluginLink::open_stream`].
    fn protocol(&self) -> u32;

    /// The audiences its calls carry tokens for (declared and granted).
    fn audiences(&self) -> &[String] {
        &[]
    }

    /// A place among its calls in flight if fewer than `max` are taken;
    /// exact under any concurrency.
    fn try_reserve(&self, max: usize) -> Option<CallSlot>;

    /// Exactly one protocol-1 invocation, in `slot`, with `deadline`;
    /// an answer over `max_answer_bytes` (encoded) is
    /// [`InvokeError::TooLarge`]. Dropping the future cancels the call.
    /// The request is encoded (or copied) before this returns: the
    /// future borrows only the link.
    fn invoke(
        &self,
        slot: CallSlot,
        request: &ToolRequestRef<'_>,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> BoxFuture<'_, Result<ToolAnswer, InvokeError>>;

    /// Opens the one protocol-2 stream of a call, in `slot`, and sends
    /// `start`; each plugin event over `max_event_bytes` is refused.
    fn open_stream(
        &self,
        slot: CallSlot,
        start: Start,
        deadline: Duration,
        max_event_bytes: usize,
    ) -> BoxFuture<'_, Result<Box<dyn EventStream>, InvokeError>>;
}

/// One protocol-2 call in progress. Dropping it resets the stream, which
/// is how the plugin learns of cancellation.
pub trait EventStream: Send {
    /// The plugin's next event; `Ok(None)` when it closed the stream.
    fn next(&mut self) -> BoxFuture<'_, Result<Option<PluginEvent>, InvokeError>>;

    /// Delivers the answer to a question.
    fn answer(&self, answer: Answer) -> BoxFuture<'_, Result<(), InvokeError>>;

    /// Ends a call whose result has arrived, closing the stream cleanly.
    fn finish(self: Box<Self>);
}

impl PluginPort for Plugins {
    fn ready(&self, id: &str, version: &str) -> Result<Box<dyn PluginLink>, PluginUnavailable> {
        self.client(id, version).map(Held::boxed)
    }

    fn ready_within<'a>(
        &'a self,
        id: &'a str,
        version: &'a str,
        wait: Duration,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Box<dyn PluginLink>, PluginUnavailable>> {
        Box::pin(async move {
            self.client_within(id, version, wait, cancel)
                .await
                .map(Held::boxed)
        })
    }
}

/// A client as a call holds it: from the moment the call has it until the
/// call ends, the process counts the call as busy
/// ([`PluginClient::busy`]), so a drain waits for a call that has its
/// client but no place among the calls in flight yet.
struct Held {
    client: PluginClient,
    _hold: CallSlot,
}

impl Held {
    fn boxed(client: PluginClient) -> Box<dyn PluginLink> {
        let hold = client.hold();
        Box::new(Self {
            client,
            _hold: hold,
        })
    }
}

impl PluginLink for Held {
    fn protocol(&self) -> u32 {
        self.client.protocol()
    }

    fn audiences(&self) -> &[String] {
        self.client.audiences()
    }

    fn try_reserve(&self, max: usize) -> Option<CallSlot> {
        self.client.try_reserve(max)
    }

    fn invoke(
        &self,
        slot: CallSlot,
        request: &ToolRequestRef<'_>,
        deadline: Duration,
        max_answer_bytes: usize,
    ) -> BoxFuture<'_, Result<ToolAnswer, InvokeError>> {
        Box::pin(
            self.client
                .invoke_in(slot, request, deadline, max_answer_bytes),
        )
    }

    fn open_stream(
        &self,
        slot: CallSlot,
        start: Start,
        deadline: Duration,
        max_event_bytes: usize,
    ) -> BoxFuture<'_, Result<Box<dyn EventStream>, InvokeError>> {
        Box::pin(async move {
            self.client
                .open_stream(slot, start, deadline, max_event_bytes)
                .await
                .map(|s| Box::new(s) as Box<dyn EventStream>)
        })
    }
}

impl EventStream for CallStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<PluginEvent>, InvokeError>> {
        Box::pin(CallStream::next(self))
    }

    fn answer(&self, answer: Answer) -> BoxFuture<'_, Result<(), InvokeError>> {
        Box::pin(CallStream::answer(self, answer))
    }

    fn finish(self: Box<Self>) {
        CallStream::finish(*self);
    }
}
