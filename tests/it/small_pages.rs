//! The `saveplan` binary has no transparent huge pages from its start: not even the two
//! 2 MiB pages of mimalloc's arena that the Rust runtime's first allocation, before `main`,
//! used to fault (docs/benchmarks.md: up to 5 ms each on a VM, in every process of a
//! cluster). Where the kernel gives no process huge pages
//! (`/sys/kernel/mm/transparent_hugepage/enabled` is `[never]`) only the process's flag is
//! checked for what it says.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A field of a `/proc` file of `Name:  value …` lines.
fn field(text: &str, name: &str) -> Option<String> {
    (text.lines())
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_string())
}

#[test]
fn the_binary_runs_without_huge_pages_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    // Reading the spec from a pipe that stays open: the process waits, its start behind it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(["save", "-", "--values", "absent.safetensors", "--prefix"])
        .arg(&prefix)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the saveplan binary runs");
    let proc = std::path::PathBuf::from(format!("/proc/{}", child.id()));
    // Its main thread blocked in read(0, …): `/proc/PID/syscall` gives the call's number
    // and its first argument.
    let reading = format!("{} 0x0 ", libc::SYS_read);
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            panic!("saveplan ended before it read its spec ({status}): {stderr}");
        }
        match std::fs::read_to_string(proc.join("syscall")) {
            Ok(call) if call.starts_with(&reading) => break,
            Ok(_) => {}
            Err(err) => panic!("cannot tell what saveplan waits for: {err}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "saveplan did not wait for its spec on stdin within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::fs::read_to_string(proc.join("status")).unwrap();
    let rollup = std::fs::read_to_string(proc.join("smaps_rollup")).unwrap();
    // Done looking: the spec ends, and the save goes on (failing on its missing values).
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(br#"{"variables": []}"#).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap();
    assert_eq!(
        field(&status, "THP_enabled").as_deref(),
        Some("0"),
        "{status}"
    );
    assert_eq!(
        field(&rollup, "AnonHugePages").as_deref(),
        Some("0 kB"),
        "{rollup}"
    );
}
