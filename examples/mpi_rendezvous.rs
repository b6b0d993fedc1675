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
//! With `--latency` (2 ranks or more) ranks 0 and 1 bounce values and rank 0 prints the median
//! round trip of a 4-byte value and the rate of a 64 MiB one. With `--idle` every rank meets
//! the others, leaves its rendezvous idle for the 2 s that follow and prints what its process
//! spent a second meanwhile (its MPI progress thread's and Open MPI's own threads'; the
//! progress thread's sleeps still growing): `idle: task T: C ms of CPU and S context switches
//! a second`. With `--big` (2 ranks or more)
//! rank 0 sends rank 1 a value of 1 GiB and 5 bytes, past the largest MPI message, and rank 1
//! sends it back: both check every byte, and rank 0 prints `big value: … bytes there and back`.
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
    if args == ["--latency"] {
        let code = latency(&rendezvous);
        drop(rendezvous);
        std::process::exit(code);
    }
    if args == ["--idle"] {
        let code = match idle(&rendezvous) {
            Ok((cpu, switches)) => {
                println!(
                    "idle: task {task}: {:.1} ms of CPU and {switches:.0} context switches a second",
                    cpu * 1e3
                );
                0
            }
            Err(error) => {
                say(&format!("error: {error}"));
                1
            }
        };
        drop(rendezvous);
        std::process::exit(code);
    }
    if args == ["--big"] {
        let code = big_value(&rendezvous);
        drop(rendezvous);
        std::process::exit(code);
    }
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

/// What this process spends a second while its rendezvous is idle for 2 s (after a barrier,
/// its other threads asleep): CPU seconds and context switches, voluntary or not. Every task
/// meets the others again before it returns.
fn idle(rendezvous: &MpiRendezvous) -> Result<(f64, f64), String> {
    const IDLE: f64 = 2.0;
    rendezvous.barrier().map_err(|e| e.to_string())?;
    let before = usage();
    std::thread::sleep(std::time::Duration::from_secs_f64(IDLE));
    let after = usage();
    rendezvous.barrier().map_err(|e| e.to_string())?;
    Ok(((after.0 - before.0) / IDLE, (after.1 - before.1) / IDLE))
}

/// This process's CPU seconds (user and system) and context switches so far.
fn usage() -> (f64, f64) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` fills the struct it is handed; a zeroed one is valid either way.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 * 1e-6;
    (
        seconds(usage.ru_utime) + seconds(usage.ru_stime),
        (usage.ru_nvcsw + usage.ru_nivcsw) as f64,
    )
}

/// Ranks 0 and 1 bounce one value of 1 GiB and 5 bytes (two MPI messages each way: the
/// rendezvous splits what MPI's 32-bit counts cannot hold) and check every byte of it.
fn big_value(rendezvous: &MpiRendezvous) -> i32 {
    use saveplan::exec::HostTensor;
    let task = rendezvous.task();
    if rendezvous.n_tasks() < 2 || task > 1 {
        return 0;
    }
    let n_bytes = (1usize << 30) + 5;
    // Byte `i` is `i mod 251`: a part that lands at the wrong offset, or twice, shows (2^30
    // is no multiple of 251). Made and checked a block at a time (memcpy and memcmp, quick
    // in a debug build too).
    let block: Vec<u8> = (0..251 * 4096).map(|i| (i % 251) as u8).collect();
    let whole = |value: &HostTensor| {
        value.shape() == [n_bytes as u64]
            && value.bytes().is_some_and(|bytes| {
                (bytes.chunks(block.len())).all(|chunk| chunk == &block[..chunk.len()])
            })
    };
    let (there, back) = (
        RendezvousKey::new(0, 1, "big"),
        RendezvousKey::new(1, 0, "big"),
    );
    let result = if task == 0 {
        let mut bytes = Vec::with_capacity(n_bytes);
        while bytes.len() < n_bytes {
            let n = block.len().min(n_bytes - bytes.len());
            bytes.extend_from_slice(&block[..n]);
        }
        let value = HostTensor::from_bytes(saveplan_ir::DType::UInt8, vec![n_bytes as u64], bytes)
            .expect("a uint8 vector");
        (rendezvous.send(&there, value))
            .and_then(|()| rendezvous.recv(&back))
            .map_err(|e| e.to_string())
    } else {
        (rendezvous.recv(&there))
            .map_err(|e| e.to_string())
            .and_then(|got| match whole(&got) {
                true => rendezvous.send(&back, got).map_err(|e| e.to_string()),
                false => Err("task 1 received the big value changed".to_owned()),
            })
            .map(|()| HostTensor::int32_scalar(0))
    };
    match result {
        Ok(value) if task == 1 || whole(&value) => {
            if task == 0 {
                println!("big value: {n_bytes} bytes there and back");
            }
            0
        }
        Ok(_) => {
            say("error: task 0 received the big value back changed");
            1
        }
        Err(error) => {
            say(&format!("error: {error}"));
            1
        }
    }
}

/// Ranks 0 and 1 bounce a small value 2,000 times and a 64 MiB value 5 times.
fn latency(rendezvous: &MpiRendezvous) -> i32 {
    use saveplan::exec::HostTensor;
    use std::time::Instant;
    let task = rendezvous.task();
    if rendezvous.n_tasks() < 2 || task > 1 {
        return 0;
    }
    let peer = 1 - task;
    let bounce = |value: &HostTensor, name: &str| -> Result<f64, String> {
        let started = Instant::now();
        let there = RendezvousKey::new(task, peer, name);
        let back = RendezvousKey::new(peer, task, name);
        if task == 0 {
            rendezvous
                .send(&there, value.clone())
                .map_err(|e| e.to_string())?;
            rendezvous.recv(&back).map_err(|e| e.to_string())?;
        } else {
            let got = rendezvous.recv(&back).map_err(|e| e.to_string())?;
            rendezvous.send(&there, got).map_err(|e| e.to_string())?;
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let small = HostTensor::int32_scalar(7);
    let large =
        HostTensor::from_bytes(saveplan_ir::DType::UInt8, vec![64 << 20], vec![1; 64 << 20])
            .expect("64 MiB");
    let run = || -> Result<(f64, f64), String> {
        let mut small_times = (0..2000)
            .map(|i| bounce(&small, &format!("small{i}")))
            .collect::<Result<Vec<f64>, String>>()?;
        small_times.sort_by(f64::total_cmp);
        let mut large_times = (0..5)
            .map(|i| bounce(&large, &format!("large{i}")))
            .collect::<Result<Vec<f64>, String>>()?;
        large_times.sort_by(f64::total_cmp);
        Ok((
            small_times[small_times.len() / 2],
            large_times[large_times.len() / 2],
        ))
    };
    match run() {
        Ok((small, large)) => {
            if task == 0 {
                println!(
                    "round trip: 4 B {:.1} us (median of 2000), 64 MiB {:.1} ms ({:.0} MiB/s each way)",
                    small * 1e6,
                    large * 1e3,
                    2.0 * 64.0 / large
                );
            }
            0
        }
        Err(error) => {
            say(&format!("error: {error}"));
            1
        }
    }
}
