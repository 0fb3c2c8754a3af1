//! The health probe of a ready plugin: `grpc.health.v1` on its socket,
//! telling a plugin that says it is unhealthy from one that does not
//! answer, so the supervisor can say which when it restarts it.

use std::time::Duration;
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
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
