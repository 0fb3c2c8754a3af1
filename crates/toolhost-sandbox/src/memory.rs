//! Handing memory back to the system.
//!
//! glibc keeps what a process frees in its arenas; `malloc_trim` returns
//! the free pages of every arena. And the kernel keeps every page of the
//! executable the process has touched resident, with its neighbours
//! (fault-around maps up to 64 KiB per fault): start-up runs code no
//! request runs again (the configuration, the command line, spawning
//! plugins), and most of an idle daemon's resident memory is those clean
//! file pages. They are dropped from the process (its code with
//! `MADV_DONTNEED`, which works even while another toolhost maps the same
//! pages; its other read-only mappings with `MADV_PAGEOUT`); a page needed
//! again is a minor fault while the page cache holds it.
//!
//! The daemon decides *when* (after bursts of large requests, large
//! catalog changes, the end of a load, start-up); this module only holds
//! the calls, because they are `unsafe` and every `unsafe` of toolhost
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

/// Drops this process's resident pages of its own executable, and returns
/// how many bytes of mappings were advised. Its code (`r-xp`) is never
/// written, so its pages are the file's, and `MADV_DONTNEED` only unmaps
/// them. Its other read-only mappings may hold pages relocated at load
/// time (RELRO), which the file does not have, so they get
/// `MADV_PAGEOUT`, which keeps any content. Writable mappings are left
/// alone. A no-op (0) where the kernel or the files say no.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn release_code_pages() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 0;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut advised = 0;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let path = fields.nth(3);
        if perms.contains('w') || path != exe.to_str() {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let Some(len) = end.checked_sub(start) else {
            continue;
        };
        let advice = if perms.starts_with("r-x") {
            libc::MADV_DONTNEED
        } else {
            libc::MADV_PAGEOUT
        };
        // SAFETY: the range is a whole read-only, file-backed mapping of
        // this process's executable, as the kernel listed it; nothing in it
        // is Rust data. Code is never written (no text relocations), so
        // MADV_DONTNEED drops pages equal to the file's, and the next access
        // maps them again from it. MADV_PAGEOUT keeps contents (a written
        // page is swapped or stays). Neither unmaps the range.
        let done = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        if done == 0 {
            advised += len;
        }
    }
    advised
}

/// Drops this process's resident pages of its own executable; a no-op
/// off Linux.
#[cfg(not(target_os = "linux"))]
pub fn release_code_pages() -> usize {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn code_pages_are_released_and_run_again() {
        let advised = release_code_pages();
        assert!(advised > 0, "the test binary's own mappings were advised");
        // The code faults back in: a sort, a format and a trim all run.
        let mut v: Vec<u64> = (0..1000).rev().collect();
        v.sort_unstable();
        assert_eq!(format!("{}-{}", v[0], v[999]), "0-999");
        trim_heap();
        assert!(release_code_pages() > 0, "and again");
    }
}
