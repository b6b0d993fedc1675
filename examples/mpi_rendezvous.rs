//! The rendezvous conformance scenarios over MPI: run under `mpirun -n N` (N ≥ 1), every rank
//! runs every scenario as its task; exits 1 with one line per failing rank.
//!
//! ```text
//! cargo build --release --features mpi --example mpi_rendezvous
//! mpirun -n 3 target/release/examples/mpi_rendezvous
//! ```
//!
//! With `--kill R` rank `R` kills itself (SIGKILL) while the others wait for a value from it,
//! and with `--fail R` it aborts with a reason and exits 1: `tests/mpi/run.sh` checks that
//! every rank is gone within 30 s either way, and that on `--fail` each names the failed task.
#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program's report

use saveplan::exec::rendezvous::{MpiRendezvous, Rendezvous, RendezvousKey, conformance};

fn main() {
    let rendezvous = match MpiRendezvous::start() {
        Ok(rendezvous) => rendezvous,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    };
    let task = rendezvous.task();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, rank] = &args[..] {
        let rank: usize = rank.parse().expect("a rank number");
        let code = failure_drill(&rendezvous, mode, rank);
        drop(rendezvous); // delivers the abort, meets the other ranks, finalizes MPI
        std::process::exit(code);
    }
    let mut failed = false;
    for (name, scenario) in conformance::SCENARIOS {
        if let Err(error) = scenario(&rendezvous) {
            eprintln!("task {task}: {name}: {error}");
            failed = true;
            break;
        }
    }
    let n_tasks = rendezvous.n_tasks();
    drop(rendezvous); // finalizes MPI
    if failed {
        std::process::exit(1);
    }
    if task == 0 {
        println!(
            "{} scenarios passed on {n_tasks} task(s)",
            conformance::SCENARIOS.len()
        );
    }
}

/// Rank `rank` dies (`--kill`) or fails (`--fail`) while every other rank waits for it; returns
/// the exit code (a killed rank never returns).
fn failure_drill(rendezvous: &MpiRendezvous, mode: &str, rank: usize) -> i32 {
    let task = rendezvous.task();
    if task == rank {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if mode == "--kill" {
            // SAFETY: plain libc calls on this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        rendezvous.abort("planned failure");
        say(&format!("error: task {task} failed: planned failure"));
        return 1;
    }
    let key = RendezvousKey::new(rank, task, "never");
    match rendezvous.recv(&key) {
        Ok(_) => 0,
        Err(error) => {
            say(&format!("error: {error}"));
            1
        }
    }
}

/// Writes `line` to stderr in one write, so lines of ranks sharing mpirun's stderr never mix.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
