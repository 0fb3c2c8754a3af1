//! Giving memory back after bursts.
//!
//! A burst of large requests (each parsed into a JSON tree of many small
//! allocations) leaves glibc's arenas full of free chunks that it keeps
//! rather than returning to the system: resident memory stayed several
//! times above its baseline after the burst. For ten seconds after large
//! requests were read, `malloc_trim` returns free pages every two seconds,
//! whichever arena holds them. Nothing runs while no large request
//! arrives.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Trims after large requests until `stop`: every two seconds for ten
/// seconds after the last one, since a burst's memory is freed as its
/// requests finish, not all at once.
pub async fn trim_after_bursts(stop: CancellationToken) {
    let mut last_large: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
        if toolhost_mcp::take_large_request() {
            last_large = Some(tokio::time::Instant::now());
        }
        if last_large.is_some_and(|t| t.elapsed() <= Duration::from_secs(10)) {
            // Off the async workers: a trim walks every arena.
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's
    // own state under its locks; it is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
