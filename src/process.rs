//! Process-wide settings for programs that run saveplan. The library never applies them
//! itself, but for one: [`tcp_without_delay_to`], which MPI's rendezvous applies, with no
//! opt-out, to Open MPI's connections to the node's PMIx server before finalizing. The
//! `saveplan` binary applies the others itself (huge pages off before its runtime's first
//! allocation, from an `.init_array` initializer; one variable of the environment set while it
//! has one thread, [`set_env_if_single_threaded`]), and a program embedding the library
//! decides for itself.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};

use socket2::SockRef;

/// Asks the kernel not to back this process's anonymous memory with transparent huge pages
/// (`prctl(PR_SET_THP_DISABLE)`), whatever the allocator or the code advises. Returns whether
/// the kernel took the request (always `false` outside Linux).
///
/// Setting up a large plan touches a lot of fresh memory in small objects: about 800 MB for a
/// session of 100,000 variables. mimalloc advises huge pages for its arenas
/// (`MADV_HUGEPAGE`), so the kernel zeroes that memory 2 MiB at a time on first touch. On
/// the 2-vCPU VM this project is measured on, that cost 2.6 s of system time for one setup
/// against 0.8 s in 4 KiB pages, for the same bytes (436 huge page faults, against 200,000
/// small ones). mimalloc's own switch (`MIMALLOC_ALLOW_THP=0`) is read from the environment
/// as mimalloc starts, before `main`, so a program cannot set it for itself; the process-wide
/// switch applies to memory already reserved as well. Called before `main` (the `saveplan`
/// binary calls it from an `.init_array` initializer, before its runtime's first allocation)
/// it must stay as it is: one system call, no allocation, no panic.
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

/// Bytes populated per `madvise` call, so that a concurrent first touch by the program
/// waits for at most one such call.
#[cfg(target_os = "linux")]
const PREFAULT_CHUNK: usize = 4 << 20;

/// Has a thread of its own ask the kernel to back the next `bytes` of the heap with pages now
/// (`madvise(MADV_POPULATE_WRITE)`), rather than one page fault at a time as the program first
/// writes to them. Returns the thread, which ends with the number of bytes it populated, or
/// `None` when none was started (not Linux, or no heap mapping found).
///
/// Setting up a large plan writes hundreds of megabytes of fresh memory on one thread. On the
/// 2-vCPU VM this project is measured on, a page fault costs about 2.3 µs, so a 100,000-variable
/// trace spent 0.15–0.3 s of its 0.7–1.0 s in the kernel, while the other core was mostly
/// idle. Populated in 4 MiB calls, the same memory costs that other core about 1.9 µs a page,
/// and the tracing thread finds it ready.
///
/// "The heap" is the anonymous mapping the allocator hands a fresh 64 KiB block out of,
/// from that block on: an allocator that reserves a large region up front (mimalloc, the
/// `saveplan` binary's) keeps handing out memory from there. The thread stops at the end of
/// that mapping, or at the first call the kernel refuses (Linux before 5.14 has no
/// `MADV_POPULATE_WRITE`). It never changes what memory holds: a page already present is left
/// as it is, and a new one is zeroed, as the program's first write would have had it. The cost
/// of overestimating `bytes` is memory: populated pages count as the process's, used or not.
pub fn prefault_heap(bytes: usize) -> Option<std::thread::JoinHandle<usize>> {
    #[cfg(target_os = "linux")]
    {
        let probe = Vec::<u8>::with_capacity(64 << 10);
        let at = probe.as_ptr() as usize;
        drop(probe);
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let (_, end) = maps
            .lines()
            .filter_map(anonymous_writable_range)
            .find(|&(start, end)| start <= at && at < end)?;
        let page = 4096;
        let start = at.next_multiple_of(page);
        let end = end.min(start.saturating_add(bytes));
        std::thread::Builder::new()
            .name("saveplan-prefault".to_owned())
            .spawn(move || populate(start, end))
            .ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = bytes;
        None
    }
}

/// The address range of a `/proc/self/maps` line of a private anonymous writable mapping.
#[cfg(target_os = "linux")]
fn anonymous_writable_range(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.split_ascii_whitespace();
    let (range, perms) = (fields.next()?, fields.next()?);
    let (_offset, _device, inode) = (fields.next()?, fields.next()?, fields.next()?);
    if !perms.starts_with("rw") || !perms.ends_with('p') || inode != "0" || fields.next().is_some()
    {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some((start, end))
}

/// Populates `start..end` (page-aligned start) chunk by chunk; returns the bytes populated.
#[cfg(target_os = "linux")]
fn populate(start: usize, end: usize) -> usize {
    let mut at = start;
    while at < end {
        let len = PREFAULT_CHUNK.min(end - at);
        // SAFETY: MADV_POPULATE_WRITE changes no byte of the process's memory: it only has the
        // kernel allocate the pages of the range not yet present (zeroed, for anonymous memory),
        // as a first write to each would. A range no longer mapped is refused (ENOMEM).
        let done =
            unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
        if done != 0 {
            break;
        }
        at += len;
    }
    at - start
}

/// Turns Nagle's algorithm off (`TCP_NODELAY`) on every TCP connection of this process to one
/// of `servers`, found by scanning the descriptors in `/proc/self/fd` (none outside Linux),
/// whoever opened them. Only the option changes: nothing is written (data already queued on
/// such a connection may leave at once, which is the point), and nothing else about the
/// connection.
///
/// The library applies this itself in one place: MPI's rendezvous, to Open MPI's connections
/// to the node's PMIx server before `MPI_Finalize` (`exec::rendezvous`), whose small requests
/// otherwise wait about 40 ms for a delayed acknowledgement.
pub fn tcp_without_delay_to(servers: &[SocketAddr]) {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in fds.flatten() {
        let Some(fd) = (entry.file_name().to_str()).and_then(|name| name.parse().ok()) else {
            continue;
        };
        if let Some(socket) = socket(fd)
            && peer(&socket).is_some_and(|peer| servers.contains(&peer))
        {
            let _ = SockRef::from(&socket).set_tcp_nodelay(true);
        }
    }
}

/// Sets the environment variable `name` to `value` when this process has one thread, the
/// caller's (Linux: `/proc/self/task` lists one), and says whether it did. Changing the
/// environment while another thread may read it is undefined behaviour (hence
/// `std::env::set_var` is `unsafe`), so where that cannot be checked (elsewhere than Linux)
/// or does not hold, nothing changes. (A child forked from a process of several threads has
/// one, but a lock another thread held at the fork stays held in it: call this in a process
/// that started as a program, as `main`'s first work.)
///
/// The `saveplan` binary uses it for one variable before starting MPI
/// (`MpiRendezvous::one_host_setting`, feature `mpi`).
pub fn set_env_if_single_threaded(name: &str, value: &str) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let threads = std::fs::read_dir("/proc/self/task").map(Iterator::count);
    if threads.ok() != Some(1) {
        return false;
    }
    // SAFETY: this process has one thread, this one, so nothing else reads or writes the
    // environment while it changes; a thread started later sees the change made.
    unsafe { std::env::set_var(name, value) };
    true
}

/// Descriptor `fd` of this process, borrowed to be asked about as a socket.
fn socket(fd: RawFd) -> Option<BorrowedFd<'static>> {
    // SAFETY: `fd` is not -1 and was open when `/proc/self/fd` listed it; one closed or
    // reused since makes the calls on it fail, or reach a socket that is then not the
    // server's: harmless for reading its peer and for an option that only decides when bytes
    // leave.
    (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
}

/// The address of the peer of `socket`, when it is a connected IPv4 or IPv6 socket; an IPv4
/// peer of an IPv6 socket (`::ffff:a.b.c.d`) is said as IPv4.
fn peer(socket: &BorrowedFd<'_>) -> Option<SocketAddr> {
    let peer = SockRef::from(socket).peer_addr().ok()?.as_socket()?;
    Some(SocketAddr::new(peer.ip().to_canonical(), peer.port()))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn the_environment_changes_only_in_a_process_of_one_thread() {
        const NAME: &str = "SAVEPLAN_ONE_THREAD_TEST";
        // Here, on a thread of the test harness: refused, nothing set.
        assert!(!set_env_if_single_threaded(NAME, "1"));
        assert!(std::env::var_os(NAME).is_none());
        // A child forked from this thread has that one thread: set there. A lock another
        // test's thread held at the fork (the environment's, while it read a variable) would
        // stay held in the child: a child not done in 10 s is killed and the fork tried again.
        let set_in_a_child = || {
            // SAFETY: the child only runs the closure below and `_exit`s, whatever happens
            // (glibc's `fork` leaves its allocator usable in the child).
            match unsafe { libc::fork() } {
                0 => {
                    let set = std::panic::catch_unwind(|| {
                        set_env_if_single_threaded(NAME, "1")
                            && std::env::var_os(NAME).is_some_and(|value| value == "1")
                    });
                    // SAFETY: ends the child at once, without running the harness's code.
                    unsafe { libc::_exit(if matches!(set, Ok(true)) { 0 } else { 1 }) }
                }
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                child => {
                    let start = std::time::Instant::now();
                    let mut status = 0;
                    loop {
                        // SAFETY: waits for the child just forked; `status` is ours to write.
                        match unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } {
                            0 => {}
                            // Only the child's own end says anything of it: an error of
                            // `waitpid` leaves `status` unwritten.
                            reaped if reaped == child => break,
                            _ => panic!("waitpid: {}", std::io::Error::last_os_error()),
                        }
                        if start.elapsed() > std::time::Duration::from_secs(10) {
                            // SAFETY: the child is ours and not yet reaped: killed, then reaped.
                            unsafe {
                                libc::kill(child, libc::SIGKILL);
                                libc::waitpid(child, &mut status, 0);
                            }
                            return None;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    assert!(libc::WIFEXITED(status), "the child did not exit: {status}");
                    Some(libc::WEXITSTATUS(status))
                }
            }
        };
        let code = (0..3).find_map(|_| set_in_a_child());
        assert_eq!(code, Some(0), "not set in a one-thread process");
    }

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

    const PAGE: usize = 4096;

    /// Which pages of `start..start + len` are backed by memory (`mincore`).
    fn resident(start: *mut u8, len: usize) -> Vec<bool> {
        let mut pages = vec![0u8; len / PAGE];
        // SAFETY: `pages` has one byte per page of the range, which is mapped.
        let done = unsafe { libc::mincore(start.cast(), len, pages.as_mut_ptr()) };
        assert_eq!(done, 0);
        pages.iter().map(|page| page & 1 == 1).collect()
    }

    /// Populating a range leaves the pages already written as they are and backs the others
    /// with zeroes, the memory a first write would have found.
    #[test]
    fn populating_keeps_what_memory_holds_and_backs_the_rest() {
        let len = 3 * PREFAULT_CHUNK / 2;
        // Unmapped at the end of the test.
        let start = fresh_mapping(len);
        // SAFETY: the mapping is `len` bytes, readable and writable, and only this test has it.
        let memory = unsafe { std::slice::from_raw_parts_mut(start, len) };
        let written = 16 * PAGE;
        for (at, byte) in memory[..written].iter_mut().enumerate() {
            *byte = (at % 251) as u8 + 1;
        }
        assert_eq!(resident(start, len).iter().filter(|&&r| r).count(), 16);
        let populated = populate(start as usize, start as usize + len);
        // A kernel without `MADV_POPULATE_WRITE` (before 5.14) refuses the first call.
        if populated > 0 {
            assert_eq!(populated, len);
            assert!(resident(start, len).iter().all(|&r| r));
        }
        let expected = (0..written).map(|at| (at % 251) as u8 + 1);
        assert!(memory[..written].iter().copied().eq(expected));
        assert!(memory[written..].iter().all(|&byte| byte == 0));
        // SAFETY: the mapping made above, no longer borrowed.
        assert_eq!(unsafe { libc::munmap(start.cast(), len) }, 0);
    }

    /// Whether this kernel populates memory on request (Linux 5.14 and later).
    fn kernel_populates() -> bool {
        let page = fresh_mapping(PAGE);
        let populated = populate(page as usize, page as usize + PAGE) == PAGE;
        // SAFETY: the page mapped above, never borrowed.
        assert_eq!(unsafe { libc::munmap(page.cast(), PAGE) }, 0);
        populated
    }

    /// A fresh private anonymous mapping of `len` bytes, readable and writable; the caller
    /// unmaps it.
    fn fresh_mapping(len: usize) -> *mut u8 {
        // SAFETY: mapping new memory touches none the program has.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(start, libc::MAP_FAILED);
        start.cast()
    }

    /// The heap is populated from where the allocator hands memory out, up to what was asked
    /// and within its mapping: something, on a kernel that populates at all.
    #[test]
    fn the_heap_is_populated_up_to_the_bytes_asked() {
        let asked = 2 * PREFAULT_CHUNK + PAGE;
        let thread = prefault_heap(asked).expect("the test's heap is an anonymous mapping");
        let populated = thread.join().unwrap();
        assert!(populated <= asked, "{populated} bytes");
        assert_eq!(populated % PAGE, 0);
        if kernel_populates() {
            assert!(populated > 0, "nothing populated");
        }
    }

    #[test]
    fn only_private_anonymous_writable_mappings_are_heap() {
        let heap = "7f2a4c000000-7f2a50000000 rw-p 00000000 00:00 0 ";
        assert_eq!(
            anonymous_writable_range(heap),
            Some((0x7f2a_4c00_0000, 0x7f2a_5000_0000))
        );
        for other in [
            "55d0a000-55d0b000 rw-p 00000000 00:00 0                          [heap]",
            "7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]",
            "7f2a5000-7f2a6000 rw-p 0001c000 08:01 1835029                    /usr/lib/libc.so.6",
            "7f2a6000-7f2a7000 r--p 00000000 00:00 0 ",
            "7f2a7000-7f2a8000 rw-s 00000000 00:01 1024                       /dev/zero (deleted)",
            "not a mapping",
        ] {
            assert_eq!(anonymous_writable_range(other), None, "{other}");
        }
    }

    /// Of two connections, only the one to the server named loses Nagle's algorithm.
    #[test]
    fn only_connections_to_the_server_lose_the_delay() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_server = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!to_server.nodelay().unwrap() && !to_other.nodelay().unwrap());
        let fd = |stream: &dyn std::os::fd::AsRawFd| socket(stream.as_raw_fd()).unwrap();
        assert_eq!(peer(&fd(&to_server)), Some(server.local_addr().unwrap()));
        tcp_without_delay_to(&[server.local_addr().unwrap()]);
        assert!(to_server.nodelay().unwrap());
        assert!(!to_other.nodelay().unwrap());
        // What is not a connected socket has no peer.
        assert_eq!(peer(&fd(&server)), None);
        assert!(socket(-1).is_none());
    }
}
