//! The in-process rendezvous passes every conformance scenario with 1 to 4 tasks (the MPI one
//! passes the same scenarios under `mpirun`, `tests/mpi/run.sh`), and keeps its own promises:
//! a key is delivered once, a run leaves nothing behind, an abort wakes every waiter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saveplan::exec::HostTensor;
use saveplan::exec::rendezvous::{
    LocalRendezvous, Rendezvous, RendezvousError, RendezvousKey, conformance,
};

/// Runs `scenario` on every task of a fresh `n`-task rendezvous, one thread per task.
fn run_everywhere(n: usize, name: &str, scenario: conformance::Scenario) -> Arc<LocalRendezvous> {
    let cluster = LocalRendezvous::new(n);
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|task| {
                let view = cluster.task(task).unwrap();
                scope.spawn(move || scenario(&view).err().map(|e| format!("task {task}: {e}")))
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| handle.join().unwrap())
            .collect()
    });
    assert!(errors.is_empty(), "{name} on {n} task(s): {errors:?}");
    cluster
}

#[test]
fn every_scenario_passes_on_one_to_four_tasks() {
    for n in 1..=4 {
        for (name, scenario) in conformance::SCENARIOS {
            let cluster = run_everywhere(n, name, *scenario);
            if *name != "abort_reaches_every_task" && *name != "bad_keys_are_refused" {
                assert_eq!(
                    cluster.pending(),
                    0,
                    "{name} on {n} task(s) left values behind"
                );
            }
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
    for round in 0..20 {
        let cluster = LocalRendezvous::new(4);
        let errors: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|task| {
                    let view = cluster.task(task).unwrap();
                    scope.spawn(move || {
                        for (name, scenario) in conformance::SCENARIOS {
                            if let Err(error) = scenario(&view) {
                                return Some(format!("task {task}: {name}: {error}"));
                            }
                        }
                        None
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .collect()
        });
        assert!(errors.is_empty(), "round {round}: {errors:?}");
    }
}
