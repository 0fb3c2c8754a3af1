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
//! - **After the catalog grows or shrinks by many tools.** A pushed
//!   10,000-tool snapshot is decoded, judged and (the old catalog, the
//!   pushed copies) freed on the store's reaper thread; replaced by a
//!   revision of 8 tools, the larger catalog's memory is all free but
//!   stays in the arenas until a trim. The same ten seconds of trims
//!   follow a change of at least [`MANY_TOOLS`] tools in either direction.
//! - **When a load ends.** Sessions, connections and calls in flight at
//!   concurrency 64 hold several MiB; once they are gone, the first quiet
//!   two-second tick (no request read in it) after a load (at least 256
//!   requests in a tick) trims once.
//!
//! Code pages go the same way: on the first quiet tick after start-up and
//! when a load ends, the executable's resident pages are dropped
//! (`toolhost_sandbox::release_code_pages`). Start-up code (the
//! configuration, the command line, spawning plugins) then stops counting
//! against an idle daemon, and what a request needs faults back in from
//! the page cache.
//!
//! Nothing runs while requests keep coming or while nothing happens: a
//! trim under load would only hand back pages the next requests fault in
//! again.

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use toolhost_catalog::Store;

/// How often activity is looked at.
const TICK: Duration = Duration::from_secs(2);
/// Requests in one tick that make it a load: an agent's occasional call
/// leaves nothing worth a trim behind.
const LOAD: u64 = 256;
/// A change of the catalog's size, in tools, that leaves enough freed
/// memory behind to be worth giving back.
pub const MANY_TOOLS: u64 = 1000;

/// Trims after large requests, after large changes of `store`'s catalog
/// and at the end of each load, until `stop`.
pub async fn trim_after_bursts(stop: CancellationToken, store: Arc<Store>) {
    let mut last_large: Option<tokio::time::Instant> = None;
    let mut seen = toolhost_net::requests_read();
    let mut busy = false;
    let mut started = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        // Summed over every change since the last tick: a large catalog
        // pushed and replaced within one tick still counts.
        let catalog_moved = store.take_size_churn() >= MANY_TOOLS;
        if toolhost_net::take_large_request() || catalog_moved {
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
        let quiet_start = !started && !busy;
        if quiet_start || load_ended {
            started = true;
            let _ = tokio::task::spawn_blocking(toolhost_sandbox::release_code_pages).await;
        }
    }
}
