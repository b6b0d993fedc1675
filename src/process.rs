//! Process-wide settings for programs that run saveplan. The library never applies them
//! itself: the `saveplan` binary does, first thing in `main`, and a program embedding the
//! library decides for itself.

/// Asks the kernel not to back this process's anonymous memory with transparent huge pages
/// (`prctl(PR_SET_THP_DISABLE)`), whatever the allocator or the code advises. Returns whether
/// the kernel took the request (always `false` outside Linux).
///
/// Setting up a large plan touches a lot of fresh memory in small objects: about 800 MB for a
/// session of 100,000 variables. mimalloc advises huge pages for its arenas
/// (`MADV_HUGEPAGE`), so the kernel zeroes that memory 2 MiB at a time on first touch. On
/// the 2-vCPU VM this project is measured on, that cost 2.6 s of system time for one setup
/// against 0.8 s in 4 KiB pages, for the same bytes (436 huge page faults, against 200,000
/// small ones). mimalloc's own switch (`MIMALLOC_ALLOW_THP=0`) is read when its first
/// arena is reserved, before `main`, so it cannot be set from the program; the process-wide
/// switch applies to memory already reserved as well.
///
/// It also turns off the huge pages the bundle reader asks for when it reads a large tensor
/// into a fresh buffer; the reader still populates the buffer in one call.
pub fn disable_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only how the kernel
        // backs this process's future page faults, never any memory's contents.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether transparent huge pages are turned off for this process (by
/// [`disable_transparent_huge_pages`] or inherited from its parent); `false` outside Linux.
pub fn transparent_huge_pages_disabled() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_GET_THP_DISABLE takes plain integers and only reads the process's flag.
        unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_stay_off_once_turned_off() {
        assert!(disable_transparent_huge_pages());
        assert!(transparent_huge_pages_disabled());
        // What the kernel reports of the process, read apart from `prctl` (Linux 5.0 and
        // later list `THP_enabled` in /proc/self/status).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if let Some(line) = status.lines().find(|line| line.starts_with("THP_enabled:")) {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }
}
