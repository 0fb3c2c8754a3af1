//! The one thing a layer of `/mcp` knows of the layers under it: that it
//! may hand a request on to them, once. `stack` says which layer is under
//! which; a layer's own module says only what it does with a request.

use axum::extract::Request;
use axum::response::Response;
use std::future::Future;

/// What a layer hands a request on to: the rest of the stack, taken by
/// value (a layer hands a request on at most once).
pub(crate) trait Next: Send {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send;
}

/// A layer used as an axum middleware (the gate on `/metrics` and on
/// unknown paths) hands on through axum's own `Next`.
impl Next for axum::middleware::Next {
    fn run(self, request: Request) -> impl Future<Output = Response> + Send {
        axum::middleware::Next::run(self, request)
    }
}
