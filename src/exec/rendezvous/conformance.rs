//! Scenarios every [`Rendezvous`] must pass, run by every task of a cluster at once (each
//! task calls the same scenario with its own view, as an MPI program runs).
//!
//! `cargo test` runs them over [`super::LocalRendezvous`] with 1 to 4 tasks; CI runs them
//! under `mpirun` over `MpiRendezvous` (the `mpi_rendezvous` example). A framework that
//! implements [`Rendezvous`] over its own collectives runs them the same way:
//!
//! ```
//! use saveplan::exec::rendezvous::{LocalRendezvous, Rendezvous, conformance};
//! let cluster = LocalRendezvous::new(3);
//! std::thread::scope(|scope| {
//!     for task in 0..3 {
//!         let view = cluster.task(task).unwrap();
//!         scope.spawn(move || {
//!             for (name, scenario) in conformance::SCENARIOS {
//!                 scenario(&view).unwrap_or_else(|error| panic!("{name}: {error}"));
//!             }
//!         });
//!     }
//! });
//! ```
//!
//! The last scenario, [`abort_reaches_every_task`], leaves the rendezvous aborted.

use std::sync::mpsc;
use std::time::Duration;

use super::{RecvDone, Rendezvous, RendezvousError, RendezvousKey};
use crate::exec::tensor::HostTensor;

/// A scenario: run by every task with its own view; `Err` says what went wrong.
pub type Scenario = fn(&dyn Rendezvous) -> Result<(), String>;

/// Every scenario, by name, in the order to run them (the one that aborts last).
pub const SCENARIOS: &[(&str, Scenario)] = &[
    ("ring", ring),
    ("all_to_all_out_of_order", all_to_all_out_of_order),
    ("large_value", large_value),
    ("barriers_separate_rounds", barriers_separate_rounds),
    ("bad_keys_are_refused", bad_keys_are_refused),
    ("receives_call_back", receives_call_back),
    ("abort_reaches_every_task", abort_reaches_every_task),
];

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

fn err(error: RendezvousError) -> String {
    error.to_string()
}

fn ring_value(task: usize, round: usize) -> HostTensor {
    let values: Vec<f32> = (0..5)
        .map(|i| (task * 100 + round * 10 + i) as f32)
        .collect();
    HostTensor::from_f32s(vec![5], &values).expect("5 values")
}

/// Each task sends a float tensor to the next task and receives one from the previous.
pub fn ring(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let next = (task + 1) % n;
    let previous = (task + n - 1) % n;
    r.send(&RendezvousKey::new(task, next, "ring"), ring_value(task, 0))
        .map_err(err)?;
    let got = r
        .recv(&RendezvousKey::new(previous, task, "ring"))
        .map_err(err)?;
    expect(got == ring_value(previous, 0), || {
        format!("task {task} received {got:?} from task {previous}")
    })
}

/// Each task sends a string tensor to every task (itself included) and receives them in the
/// reverse order of sending.
pub fn all_to_all_out_of_order(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let value = |src: usize, dst: usize| {
        HostTensor::string_vector([
            format!("{src}->{dst}"),
            String::new(),
            "x".repeat(src + dst),
        ])
    };
    for dst in 0..n {
        r.send(&RendezvousKey::new(task, dst, "all"), value(task, dst))
            .map_err(err)?;
    }
    for src in (0..n).rev() {
        let got = r.recv(&RendezvousKey::new(src, task, "all")).map_err(err)?;
        expect(got == value(src, task), || {
            format!("task {task} received {got:?} from task {src}")
        })?;
    }
    Ok(())
}

/// The first task sends 24 MiB to the last, which checks every byte.
pub fn large_value(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let bytes = |len: usize| (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
    const LEN: usize = 24 << 20;
    let key = RendezvousKey::new(0, n - 1, "large");
    if task == 0 {
        let value = HostTensor::from_bytes(saveplan_ir::DType::UInt8, vec![LEN as u64], bytes(LEN))
            .map_err(|error| error.to_string())?;
        r.send(&key, value).map_err(err)?;
    }
    if task == n - 1 {
        let got = r.recv(&key).map_err(err)?;
        expect(got.bytes() == Some(&bytes(LEN)[..]), || {
            format!("task {task} received a different large value")
        })?;
    }
    Ok(())
}

/// Twenty rounds, each a ring send, a receive and a barrier: values of one round never reach
/// another round's receive.
pub fn barriers_separate_rounds(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let next = (task + 1) % n;
    let previous = (task + n - 1) % n;
    for round in 0..20 {
        let name = format!("round{round}");
        r.send(
            &RendezvousKey::new(task, next, &name),
            ring_value(task, round),
        )
        .map_err(err)?;
        let got = r
            .recv(&RendezvousKey::new(previous, task, &name))
            .map_err(err)?;
        expect(got == ring_value(previous, round), || {
            format!("task {task} round {round}: received {got:?}")
        })?;
        r.barrier().map_err(err)?;
    }
    Ok(())
}

/// Keys naming another task's end, or a task the cluster lacks, and resource values are
/// refused without side effects.
pub fn bad_keys_are_refused(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let value = HostTensor::int32_scalar(1);
    let other = (task + 1) % n;
    if n > 1 {
        let refused = r.send(&RendezvousKey::new(other, task, "bad"), value.clone());
        expect(
            matches!(refused, Err(RendezvousError::WrongTask { .. })),
            || format!("task {task}: a send as task {other} gave {refused:?}"),
        )?;
        let refused = r.recv(&RendezvousKey::new(task, other, "bad"));
        expect(
            matches!(refused, Err(RendezvousError::WrongTask { .. })),
            || format!("task {task}: a receive for task {other} gave {refused:?}"),
        )?;
    }
    let refused = r.send(&RendezvousKey::new(task, n, "bad"), value);
    expect(
        refused
            == Err(RendezvousError::NoSuchTask {
                task: n,
                n_tasks: n,
            }),
        || format!("task {task}: a send to task {n} gave {refused:?}"),
    )?;
    let handle = HostTensor::resource(crate::exec::ResourceHandle {
        container: String::new(),
        shared_name: "v".into(),
        device: String::new(),
        dtype: saveplan_ir::DType::Float,
        shape: saveplan_ir::Shape::scalar(),
    });
    let refused = r.send(&RendezvousKey::new(task, other, "handle"), handle);
    expect(
        matches!(refused, Err(RendezvousError::NotTransferable { .. })),
        || format!("task {task}: sending a resource handle gave {refused:?}"),
    )?;
    r.barrier().map_err(err)
}

/// A callback for `recv_async` that hands what arrived to `sender`, tagged with `tag`.
fn callback<T: Send + 'static>(
    sender: &mpsc::Sender<(T, Result<HostTensor, RendezvousError>)>,
    tag: T,
) -> RecvDone {
    let sender = sender.clone();
    Box::new(move |value| {
        let _ = sender.send((tag, value));
    })
}

/// Every task asks to be called back with a value from every other task before any is sent,
/// then sends its own: each callback gets its value, from whichever thread delivers it. (An
/// implementation that cannot call back gives `done` back; the scenario then waits with
/// `recv`, as the executor does.)
pub fn receives_call_back(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let (sender, arrived) = mpsc::channel();
    let mut waited = Vec::new();
    for src in (0..n).filter(|&src| src != task) {
        let key = RendezvousKey::new(src, task, "callback");
        if let Err(done) = r.recv_async(&key, callback(&sender, src)) {
            waited.push((key, done));
        }
    }
    // Every callback is in place before any value is sent.
    r.barrier().map_err(err)?;
    for dst in (0..n).filter(|&dst| dst != task) {
        let value = HostTensor::int32_scalar((task * 10 + dst) as i32);
        r.send(&RendezvousKey::new(task, dst, "callback"), value)
            .map_err(err)?;
    }
    for (key, done) in waited {
        done(r.recv(&key));
    }
    for _ in 1..n {
        let (src, value) = arrived
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| format!("task {task}: a callback never came"))?;
        let value = value.map_err(err)?;
        expect(
            value == HostTensor::int32_scalar((src * 10 + task) as i32),
            || format!("task {task}: the value from task {src} is {value:?}"),
        )?;
    }
    r.barrier().map_err(err)
}

/// The last task aborts; every task's pending receive (waiting or called back) and later
/// barrier fail with its reason.
pub fn abort_reaches_every_task(r: &dyn Rendezvous) -> Result<(), String> {
    let (task, n) = (r.task(), r.n_tasks());
    let aborted = RendezvousError::Aborted {
        task: n - 1,
        reason: "planned failure".into(),
    };
    // Nobody sends this either: the abort fails the callback.
    let (sender, called) = mpsc::channel();
    let calls_back = (task != n - 1)
        && r.recv_async(
            &RendezvousKey::new(n - 1, task, "never either"),
            callback(&sender, ()),
        )
        .is_ok();
    if task == n - 1 {
        r.abort("planned failure");
        // A second abort changes nothing.
        r.abort("another reason");
    } else {
        // Nobody sends this: only the abort can end the wait.
        let got = r.recv(&RendezvousKey::new(n - 1, task, "never"));
        expect(got.as_ref() == Err(&aborted), || {
            format!("task {task}: a receive during the abort gave {got:?}")
        })?;
    }
    if calls_back {
        let got = called
            .recv_timeout(Duration::from_secs(30))
            .map(|(_, got)| got);
        expect(
            got.as_ref().map(Result::as_ref) == Ok(Err(&aborted)),
            || format!("task {task}: a callback during the abort gave {got:?}"),
        )?;
    }
    let got = r.barrier();
    expect(got.as_ref() == Err(&aborted), || {
        format!("task {task}: a barrier after the abort gave {got:?}")
    })?;
    let got = r.send(
        &RendezvousKey::new(task, 0, "late"),
        HostTensor::int32_scalar(0),
    );
    expect(got.as_ref() == Err(&aborted), || {
        format!("task {task}: a send after the abort gave {got:?}")
    })
}
