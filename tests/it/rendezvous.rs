//! The in-process rendezvous passes every conformance scenario with 1 to 4 tasks (the MPI one
//! passes the same scenarios under `mpirun`, `tests/mpi/run.sh`), and keeps its own promises:
//! a key is delivered once, a run leaves nothing behind, an abort wakes every waiter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saveplan::exec::HostTensor;
use saveplan::exec::rendezvous::{
    LocalRendezvous, Rendezvous, RendezvousError, RendezvousKey, conformance,
};

/// Runs `scenarios`, one after another, on every task of a fresh `n`-task rendezvous, one
/// thread per task, as a program runs them; fails with each task's first error.
fn run_everywhere(n: usize, scenarios: &[(&str, conformance::Scenario)]) -> Arc<LocalRendezvous> {
    let cluster = LocalRendezvous::new(n);
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|task| {
                let view = cluster.task(task).unwrap();
                scope.spawn(move || {
                    scenarios.iter().find_map(|(name, scenario)| {
                        scenario(&view)
                            .err()
                            .map(|e| format!("task {task}: {name}: {e}"))
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| handle.join().unwrap())
            .collect()
    });
    assert!(errors.is_empty(), "on {n} task(s): {errors:?}");
    cluster
}

#[test]
fn every_scenario_passes_on_one_to_four_tasks() {
    for n in 1..=4 {
        for scenario in conformance::SCENARIOS {
            let cluster = run_everywhere(n, std::slice::from_ref(scenario));
            // Every value sent was received, and refused sends left nothing.
            assert_eq!(
                cluster.pending(),
                0,
                "{} on {n} task(s) left values behind",
                scenario.0
            );
        }
    }
}

#[test]
fn a_key_is_delivered_once_and_sent_once() {
    let cluster = LocalRendezvous::new(2);
    let (a, b) = (cluster.task(0).unwrap(), cluster.task(1).unwrap());
    let key = RendezvousKey::new(0, 1, "edge_1_x");
    a.send(&key, HostTensor::int32_scalar(7)).unwrap();
    assert_eq!(
        a.send(&key, HostTensor::int32_scalar(8)),
        Err(RendezvousError::SentTwice {
            tensor: "edge_1_x".into(),
            src: 0,
            dst: 1
        })
    );
    assert_eq!(b.recv(&key).unwrap().as_i32_scalar(), Some(7));
    assert_eq!(cluster.pending(), 0);
    // Received, the key can carry the next run's value.
    a.send(&key, HostTensor::int32_scalar(9)).unwrap();
    assert_eq!(b.recv(&key).unwrap().as_i32_scalar(), Some(9));
    assert!(matches!(
        cluster.task(2),
        Err(RendezvousError::NoSuchTask {
            task: 2,
            n_tasks: 2
        })
    ));
}

#[test]
fn an_abort_wakes_a_blocked_receive_at_once() {
    let cluster = LocalRendezvous::new(2);
    let waiter = cluster.task(1).unwrap();
    let started = Instant::now();
    let got = std::thread::scope(|scope| {
        let handle = scope.spawn(|| waiter.recv(&RendezvousKey::new(0, 1, "never")));
        std::thread::sleep(Duration::from_millis(50));
        cluster.task(0).unwrap().abort("disk full");
        handle.join().unwrap()
    });
    assert_eq!(
        got.unwrap_err().to_string(),
        "task 0 failed: disk full",
        "the error names the task and what it reported"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The scenarios one after another on one cluster, as a program runs them (the abort of the
/// last one may land while a slower task still leaves the barrier before it), many times over.
#[test]
fn the_scenarios_in_sequence_on_one_cluster() {
    for _ in 0..20 {
        run_everywhere(4, conformance::SCENARIOS);
    }
}
