//! The rendezvous conformance scenarios over MPI: run under `mpirun -n N` (N ≥ 1), every rank
//! runs every scenario as its task; exits 1 with one line per failing rank.
//!
//! ```text
//! cargo build --release --features mpi --example mpi_rendezvous
//! mpirun -n 3 target/release/examples/mpi_rendezvous
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program's report

use saveplan::exec::rendezvous::{MpiRendezvous, Rendezvous, conformance};

fn main() {
    let rendezvous = match MpiRendezvous::start() {
        Ok(rendezvous) => rendezvous,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    };
    let task = rendezvous.task();
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
