//! Giving memory back after bursts and loads.
//!
//! glibc keeps what the daemon frees in its arenas rather than returning
//! it to the system. Two kinds of moment trim them (`malloc_trim`, which
//! returns free pages from every arena):
//!
//! - **After large requests.** A burst of them (each parsed into a JSON
//!   tree of many small allocations) left resident memory several times
//!   above its baseline. For ten seconds after large requests were read,
//!   a trim runs every two seconds, since a burst's memory is freed as its
//!   requests finish, not all at once.
//! - **When a load ends.** Sessions, connections and calls in flight at
//!   concurrency 64 hold several MiB; once they are gone, the first quiet
//!   two-second tick (no request read in it) after a load (at least 256
//!   requests in a tick) trims once.
//!
//! Nothing runs while requests keep coming or while nothing happens: a
//! trim under load would only hand back pages the next requests fault in
//! again.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often activity is looked at.
const TICK: Duration = Duration::from_secs(2);
/// Requests in one tick that make it a load: an agent's occasional call
/// leaves nothing worth a trim behind.
const LOAD: u64 = 256;

/// Trims after large requests and at the end of each load, until `stop`.
pub async fn trim_after_bursts(stop: CancellationToken) {
    let mut last_large: Option<tokio::time::Instant> = None;
    let mut seen = toolhost_net::requests_read();
    let mut busy = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        if toolhost_net::take_large_request() {
            last_large = Some(tokio::time::Instant::now());
        }
        let now = toolhost_net::requests_read();
        let load_ended = busy && now == seen;
        busy = now.saturating_sub(seen) >= LOAD || (busy && now != seen);
        seen = now;
        if load_ended || last_large.is_some_and(|t| t.elapsed() <= Duration::from_secs(10)) {
            // Off the async workers: a trim walks every arena.
            let _ = tokio::task::spawn_blocking(toolhost_sandbox::trim_heap).await;
        }
    }
}
