//! `/mcp`'s layers as one future: the token gate, the direct plain calls
//! (stateless), the session owners, the direct session calls (on
//! sessions), the listens' admission, and rmcp under them.
//!
//! Each layer is an `async fn(&state, Request, impl Next) -> Response`
//! that may answer the request itself or hand it on to `next`. Composed
//! here by type, a request costs one boxed future for the whole stack.
//! As `axum::middleware::from_fn` layers it cost two allocations for each
//! layer (the layer's boxed future, and a boxed clone of the service under
//! it, made for every request whether or not the layer hands it on):
//! BENCHMARKS.md counts them.
//!
//! What this module must not do: change what a layer decides. The order
//! is the contract (a request reaches nothing before the gate admits it;
//! a session's calls are the direct path's only once the session is
//! known to be the caller's), and it is written out once, in the `Next`
//! impls below.

use crate::admission::{ListenAdmission, admit_listens};
use crate::direct::{Direct, plain_calls};
use crate::gate::{Gate, require_token};
use crate::next::Next;
use crate::session_calls::{SessionCalls, session_calls};
use crate::sessions::{Sessions, own_sessions};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use rmcp::transport::StreamableHttpService;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// rmcp's streamable HTTP service, as `/mcp` builds it.
pub(crate) type Rmcp = StreamableHttpService<toolhost_mcp::Traced, toolhost_mcp::UnmarkedSessions>;

/// Every layer's state, shared by every request.
pub(crate) struct Layers {
    pub(crate) gate: Arc<Gate>,
    /// Stateless with direct calls on: plain calls answered here.
    pub(crate) plain: Option<Arc<Direct>>,
    pub(crate) sessions: Arc<Sessions>,
    /// On sessions with direct calls on: a session's plain calls.
    pub(crate) calls_on_sessions: Option<Arc<SessionCalls>>,
    pub(crate) admission: Arc<ListenAdmission>,
    pub(crate) rmcp: Rmcp,
}

/// `/mcp`'s service. Cloning it (axum does, for every request) is one
/// reference count.
#[derive(Clone)]
pub(crate) struct Mcp(pub(crate) Arc<Layers>);

impl tower::Service<Request> for Mcp {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let layers = Arc::clone(&self.0);
        Box::pin(async move {
            let layers = &*layers;
            Ok(require_token(&layers.gate, request, AfterGate(layers)).await)
        })
    }
}

/// Admitted by the gate: stateless plain calls are answered here.
struct AfterGate<'a>(&'a Layers);

impl Next for AfterGate<'_> {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        let layers = self.0;
        async move {
            match &layers.plain {
                Some(direct) => plain_calls(direct, request, AfterPlain(layers)).await,
                None => AfterPlain(layers).run(request).await,
            }
        }
    }
}

/// Not a stateless plain call: sessions are checked for their owner.
struct AfterPlain<'a>(&'a Layers);

impl Next for AfterPlain<'_> {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        own_sessions(&self.0.sessions, request, AfterOwners(self.0))
    }
}

/// The caller's own session, or none: a session's plain calls are
/// answered here.
struct AfterOwners<'a>(&'a Layers);

impl Next for AfterOwners<'_> {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        let layers = self.0;
        async move {
            match &layers.calls_on_sessions {
                Some(calls) => session_calls(calls, request, AfterCalls(layers)).await,
                None => AfterCalls(layers).run(request).await,
            }
        }
    }
}

/// Everything the direct paths did not answer: listens are admitted.
struct AfterCalls<'a>(&'a Layers);

impl Next for AfterCalls<'_> {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        admit_listens(&self.0.admission, request, ToRmcp(self.0))
    }
}

/// The bottom of the stack.
struct ToRmcp<'a>(&'a Layers);

impl Next for ToRmcp<'_> {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        let rmcp = &self.0.rmcp;
        // Boxed: rmcp's future is large, and the stack's one future would
        // otherwise carry its size on the direct paths, which never use it.
        async move { Box::pin(rmcp.handle(request)).await.into_response() }
    }
}
