//! A framework whose training spans processes, checkpointing every few steps: one session per
//! process, traced and compiled once, then `--saves K` saves of the same variables to
//! `DIR/ckpt-1` … `DIR/ckpt-K`. Under `mpirun -n N … --cluster mpi` (as the CLI takes it)
//! each process is task `r` of the spec's N tasks (its rank) and writes its task's shard;
//! without it one process runs every task. Every float32 variable holds `i + j / 1000` (variable `i`, element `j`),
//! made in the process (each process makes those of the variables it saves, once its session
//! says which it leaves out), so nothing but the spec is read.
//!
//! ```text
//! cargo build --release --features mpi --example cluster_saves
//! target/release/examples/cluster_saves SPEC DIR --saves 5
//! mpirun -n 2 target/release/examples/cluster_saves SPEC DIR --saves 5 --cluster mpi
//! ```
//!
//! Task 0 prints `session S s; K saves: median M s, best B s` (the session: trace, partition,
//! compile and the values put in, not their making; a save: from the call to its return,
//! which in a cluster is after every task wrote its shard and the merge published the
//! checkpoint). The cluster bench (`benches/cluster.rs`) runs it against one process.
#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program's report

/// mimalloc, as the `saveplan` binary has: glibc's allocator spends several times longer in
/// `malloc` in a process Open MPI runs than in one alone, which would be measured as the
/// cluster's cost (docs/benchmarks.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use saveplan::exec::rendezvous::{MpiRendezvous, Rendezvous};
use saveplan::prelude::*;
use saveplan::session::Plans;
use saveplan::trace::LeftOut;

fn main() {
    // Small pages, as the `saveplan` binary has them (`process::disable_transparent_huge_pages`;
    // the binary turns them off before its first allocation, this example after).
    saveplan::process::disable_transparent_huge_pages();
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cluster_saves SPEC DIR --saves K [--cluster mpi]";
    let (spec_path, dir) = match &args[..] {
        [spec, dir, ..] => (spec, dir),
        _ => return Err(usage.into()),
    };
    let mut saves = None;
    let mut cluster = false;
    let mut rest = args[2..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--saves" => saves = rest.next().and_then(|k| k.parse::<usize>().ok()),
            "--cluster" if rest.next().is_some_and(|kind| kind == "mpi") => cluster = true,
            _ => return Err(format!("unknown argument `{arg}`; {usage}").into()),
        }
    }
    let saves = saves.filter(|&k| k > 0).ok_or(usage)?;
    let rendezvous: Option<Arc<dyn Rendezvous>> = match cluster {
        true => Some(Arc::new(MpiRendezvous::start()?)),
        false => None,
    };

    let spec = SpecFile::parse(&std::fs::read_to_string(spec_path)?)?;
    let started = Instant::now();
    let options = SessionOptions {
        plans: Plans::SaveOnly,
        task: rendezvous.as_ref().map(|rendezvous| rendezvous.task()),
        ..SessionOptions::default()
    };
    // The values are made once the session says which tensors it leaves out (other tasks'),
    // so that each process makes only its own; the time spent making them is not the
    // session's.
    let (mut making, mut unmade) = (Duration::ZERO, None);
    let session = Session::from_spec_with_values_when_bound(&spec, options, |left_out| {
        let start = Instant::now();
        let values = values_of(&spec, left_out).map_err(|err| unmade = Some(err.to_string()));
        making = start.elapsed();
        values.ok()
    })?;
    if let Some(err) = unmade {
        return Err(err.into());
    }
    let mut session = match &rendezvous {
        Some(rendezvous) => session.with_cluster(Arc::clone(rendezvous)),
        None => session,
    };
    let setup = started.elapsed().saturating_sub(making);
    let mut times: Vec<Duration> = Vec::with_capacity(saves);
    for k in 1..=saves {
        let prefix = format!("{dir}/ckpt-{k}");
        let started = Instant::now();
        session.save(&prefix)?;
        times.push(started.elapsed());
    }
    let lead = rendezvous
        .as_ref()
        .is_none_or(|rendezvous| rendezvous.task() == 0);
    if lead {
        times.sort();
        println!(
            "session {:.3} s; {saves} saves: median {:.3} s, best {:.3} s",
            setup.as_secs_f64(),
            times[times.len() / 2].as_secs_f64(),
            times[0].as_secs_f64()
        );
    }
    // MPI ends with the last handle on the rendezvous.
    drop(session.leave_cluster());
    drop(rendezvous);
    Ok(())
}

/// A value for every variable of `spec` but those `left_out`: variable `i`, element `j` is
/// `i + j / 1000`.
fn values_of(
    spec: &SpecFile,
    left_out: &BTreeMap<String, LeftOut>,
) -> Result<BTreeMap<String, HostTensor>, Box<dyn Error>> {
    let mut values = BTreeMap::new();
    for (i, variable) in spec.variables.iter().enumerate() {
        if left_out.contains_key(&variable.checkpoint_key) {
            continue;
        }
        if variable.dtype != "float32" {
            return Err(format!(
                "{}: only float32 variables are made here, not {}",
                variable.checkpoint_key, variable.dtype
            )
            .into());
        }
        let shape: Vec<u64> = (variable.shape.iter())
            .map(|&dim| u64::try_from(dim))
            .collect::<Result<_, _>>()?;
        let n: u64 = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|j| i as f32 + j as f32 / 1000.0).collect();
        values.insert(
            variable.checkpoint_key.clone(),
            HostTensor::from_f32s(shape, &data)?,
        );
    }
    Ok(values)
}
