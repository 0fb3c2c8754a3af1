//! Handing freed heap memory back to the system.
//!
//! glibc keeps what a process frees in its arenas; `malloc_trim` returns
//! the free pages of every arena. The daemon decides *when* to trim (after
//! bursts of large requests and at the end of a load); this module only
//! holds the call, because it is `unsafe` and every `unsafe` of toolhost
//! lives in this crate.

/// Returns free heap pages to the system (glibc); a no-op elsewhere. It
/// walks every arena: call it off the async workers.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim_heap() {
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's
    // own state under its locks; it is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns free heap pages to the system (glibc); a no-op elsewhere.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() {}
