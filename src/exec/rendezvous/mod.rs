//! The rendezvous: how the tasks of a partitioned plan hand each other tensors.
//!
//! A plan that spans several tasks runs as one partition per task; every edge that crosses
//! tasks became a send on the producer's task and a receive on the consumer's (a crossing
//! control edge became an empty constant sent the same way, so only tensors ever move).
//! [`Rendezvous`] is what those two ends meet through, with TensorFlow's contract:
//!
//! * [`Rendezvous::send`] never waits for the receiver;
//! * [`Rendezvous::recv`] waits until the value sent under the same [`RendezvousKey`] arrives
//!   ([`Rendezvous::recv_async`]: calls back when it does, where the implementation can);
//! * [`Rendezvous::barrier`] waits until every task reached it;
//! * [`Rendezvous::abort`] fails every pending and every later call, on every task, with the
//!   aborting task and its reason ([`RendezvousError::Aborted`]), so that one failure stops the
//!   whole cluster instead of leaving peers waiting for values that will never come.
//!
//! Two implementations ship: [`LocalRendezvous`], channels between the tasks of one process
//! (the single-process executor), and `MpiRendezvous` (cargo feature `mpi`), one process per
//! task over MPI point-to-point messages. A framework with collectives of its own implements
//! the trait and checks its implementation with the [`conformance`] scenarios, which both
//! shipped implementations pass (in-process under `cargo test`, under `mpirun` in CI).
//!
//! Values cross processes in the [`wire`] format: dtype, shape and elements; resource handles
//! are local to a process and never cross.

pub mod conformance;
mod gather;
#[cfg(any(feature = "mpi", test))]
mod launcher;
mod local;
#[cfg(feature = "mpi")]
mod mpi;
pub mod wire;

use thiserror::Error;

pub use gather::{GatherNames, gather};
pub use local::{Deadline, LocalRendezvous, LocalTask};
#[cfg(feature = "mpi")]
pub use mpi::MpiRendezvous;

use super::tensor::HostTensor;

/// Which value a send and its receive exchange: the producing and consuming tasks (indices
/// into the cluster's tasks in sorted `(job, replica, task)` order) and the tensor's name on
/// the wire (the partitioner's `tensor_name` attribute, unique per crossing edge).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RendezvousKey {
    /// The sending task.
    pub src: usize,
    /// The receiving task.
    pub dst: usize,
    /// The crossing edge's name, as the send/recv pair's `tensor_name` attribute holds it.
    pub tensor: String,
}

impl RendezvousKey {
    /// The key of `tensor` sent by task `src` to task `dst`.
    pub fn new(src: usize, dst: usize, tensor: impl Into<String>) -> RendezvousKey {
        RendezvousKey {
            src,
            dst,
            tensor: tensor.into(),
        }
    }
}

/// Why a rendezvous call failed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RendezvousError {
    /// A task aborted the run (its own failure, or it was told to stop).
    #[error("task {task} failed: {reason}")]
    Aborted {
        /// The task that aborted.
        task: usize,
        /// What it reported.
        reason: String,
    },
    /// A key names a task the cluster does not have.
    #[error("no task {task}: the cluster has {n_tasks} task(s)")]
    NoSuchTask {
        /// The task named.
        task: usize,
        /// How many tasks there are.
        n_tasks: usize,
    },
    /// A call was made on behalf of another task than the caller's own.
    #[error("task {caller} cannot {what} for task {task}")]
    WrongTask {
        /// The task making the call.
        caller: usize,
        /// `send` or `receive`.
        what: &'static str,
        /// The task the key names at that end.
        task: usize,
    },
    /// The same key was sent twice before it was received.
    #[error("tensor {tensor} from task {src} to task {dst} was sent twice")]
    SentTwice {
        /// The tensor's name.
        tensor: String,
        /// The sending task.
        src: usize,
        /// The receiving task.
        dst: usize,
    },
    /// A value that cannot leave its process (a resource handle) was sent.
    #[error("tensor {tensor} cannot cross tasks: {dtype} values are local to a process")]
    NotTransferable {
        /// The tensor's name.
        tensor: String,
        /// Its dtype.
        dtype: String,
    },
    /// A message from a peer could not be decoded.
    #[error("a message from task {src} is malformed: {what}")]
    BadMessage {
        /// The sending task.
        src: usize,
        /// What is wrong with it.
        what: String,
    },
    /// The transport under the rendezvous failed or could not start.
    #[error("{0}")]
    Transport(String),
}

/// What [`Rendezvous::recv_async`] calls once a value arrives, or the run is aborted.
pub type RecvDone = Box<dyn FnOnce(Result<HostTensor, RendezvousError>) + Send>;

/// The meeting point of a partitioned plan's tasks, as one task sees it.
///
/// Implementations are shared between the threads of a task's run (`Send + Sync`), and every
/// method may be called from any of them. See the [module docs](self) for the contract and
/// [`conformance`] for the scenarios an implementation must pass.
pub trait Rendezvous: Send + Sync {
    /// This task's index among the cluster's tasks.
    fn task(&self) -> usize;

    /// How many tasks the cluster has.
    fn n_tasks(&self) -> usize;

    /// Hands `value` to task `key.dst`; returns without waiting for the receiver.
    fn send(&self, key: &RendezvousKey, value: HostTensor) -> Result<(), RendezvousError>;

    /// Waits for the value task `key.src` sends under `key`, or for an abort.
    fn recv(&self, key: &RendezvousKey) -> Result<HostTensor, RendezvousError>;

    /// Calls `done` with what [`Rendezvous::recv`] of `key` would return, from whichever
    /// thread delivers it (at once if the value is there), without waiting. An implementation
    /// that cannot returns `Err(done)` untouched (the default), and the caller then waits with
    /// [`Rendezvous::recv`] on a thread of its own: the executor asks this of every receive,
    /// so that a task receiving from many others needs no thread per receive.
    fn recv_async(&self, key: &RendezvousKey, done: RecvDone) -> Result<(), RecvDone> {
        let _ = key;
        Err(done)
    }

    /// Waits until every task has called `barrier` as often as this one, or for an abort.
    fn barrier(&self) -> Result<(), RendezvousError>;

    /// Fails every pending and later call on every task with [`RendezvousError::Aborted`]
    /// naming this task and `reason`. The first abort wins; later ones change nothing.
    fn abort(&self, reason: &str);
}

/// Where a run of one task's partition stands in its cluster: the rendezvous it meets the
/// other tasks through, and the cluster's tasks (`/job:J/replica:R/task:T`, sorted) that
/// turn the devices of a send/receive pair into task numbers.
#[derive(Clone, Copy)]
pub struct ClusterRun<'a> {
    /// This task's rendezvous.
    pub rendezvous: &'a dyn Rendezvous,
    /// Every task of the cluster, sorted by `(job, replica, task)`: task `i` is `tasks[i]`.
    pub tasks: &'a [ClusterTask],
}

/// A task of a cluster: its job, replica and task number (sorted in that order).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterTask {
    /// The job name.
    pub job: String,
    /// The replica.
    pub replica: u32,
    /// The task.
    pub task: u32,
}

impl ClusterTask {
    /// The task a parsed device is on (a missing replica or task is 0); `None` when it names
    /// no job.
    pub fn of_spec(spec: &saveplan_ir::device::DeviceSpec) -> Option<ClusterTask> {
        Some(ClusterTask {
            job: spec.job.clone()?,
            replica: spec.replica.unwrap_or(0),
            task: spec.task.unwrap_or(0),
        })
    }

    /// The task `device` is on; `None` when it does not parse or names no job.
    pub fn of_device(device: &str) -> Option<ClusterTask> {
        ClusterTask::of_spec(&saveplan_ir::device::DeviceSpec::parse(device).ok()?)
    }
}

impl std::fmt::Display for ClusterTask {
    /// `/job:J/replica:R/task:T`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "/job:{}/replica:{}/task:{}",
            self.job, self.replica, self.task
        )
    }
}

impl ClusterRun<'_> {
    /// The number of the task `device` is on (a missing replica or task is 0).
    pub fn task_of(&self, device: &str) -> Option<usize> {
        let wanted = ClusterTask::of_device(device)?;
        self.tasks.binary_search(&wanted).ok()
    }
}

/// Ends one step every task of a cluster takes together, with this task's `outcome`: an
/// error aborts the rendezvous with its line (`line`), so that every task fails with it; a
/// success meets the other tasks at a barrier, so that this task fails too if another's part
/// of the step failed (task 0 writing a file the others wrote into, say).
pub fn settle<T, E: From<RendezvousError>>(
    rendezvous: &dyn Rendezvous,
    outcome: Result<T, E>,
    line: impl FnOnce(&E) -> String,
) -> Result<T, E> {
    match outcome {
        Err(err) => {
            rendezvous.abort(&line(&err));
            Err(err)
        }
        Ok(value) => {
            rendezvous.barrier()?;
            Ok(value)
        }
    }
}

/// Checks that `key` is a send of task `caller` to a task of a cluster of `n_tasks`, and that
/// `value` can leave its process (a resource handle names a variable of its own task's store).
pub(crate) fn check_send(
    key: &RendezvousKey,
    value: &HostTensor,
    caller: usize,
    n_tasks: usize,
) -> Result<(), RendezvousError> {
    check_end(key, caller, n_tasks, "send", key.src)?;
    if value.resources().is_some() {
        return Err(RendezvousError::NotTransferable {
            tensor: key.tensor.clone(),
            dtype: value.dtype().to_string(),
        });
    }
    Ok(())
}

/// Checks that `key` is a receive of task `caller` from a task of a cluster of `n_tasks`.
pub(crate) fn check_recv(
    key: &RendezvousKey,
    caller: usize,
    n_tasks: usize,
) -> Result<(), RendezvousError> {
    check_end(key, caller, n_tasks, "receive", key.dst)
}

/// Both ends of `key` are tasks of the cluster, and `own` (the caller's end) is `caller`.
fn check_end(
    key: &RendezvousKey,
    caller: usize,
    n_tasks: usize,
    what: &'static str,
    own: usize,
) -> Result<(), RendezvousError> {
    if let Some(task) = [key.src, key.dst].into_iter().find(|&task| task >= n_tasks) {
        return Err(RendezvousError::NoSuchTask { task, n_tasks });
    }
    if own != caller {
        return Err(RendezvousError::WrongTask {
            caller,
            what,
            task: own,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trait is usable as a trait object (compile-only).
    #[allow(dead_code)]
    fn object_safe(rendezvous: &dyn Rendezvous) -> usize {
        rendezvous.task() + rendezvous.n_tasks()
    }

    /// A step task 0 fails after the others succeeded fails them too, with task 0's line; a
    /// step every task succeeds in returns each one's value.
    #[test]
    fn settle_fails_every_task_with_the_failing_ones_line() {
        let line = |err: &RendezvousError| err.to_string();
        for fails in [false, true] {
            let rendezvous = LocalRendezvous::new(3);
            let outcomes: Vec<Result<usize, RendezvousError>> = std::thread::scope(|scope| {
                let running: Vec<_> = (0..3)
                    .map(|task| {
                        let view = rendezvous.task(task).unwrap();
                        scope.spawn(move || {
                            let outcome = match (task, fails) {
                                (0, true) => Err(RendezvousError::Transport("disk full".into())),
                                _ => Ok(task),
                            };
                            settle(&view, outcome, line)
                        })
                    })
                    .collect();
                running
                    .into_iter()
                    .map(|thread| thread.join().unwrap())
                    .collect()
            });
            for (task, outcome) in outcomes.into_iter().enumerate() {
                match (fails, outcome) {
                    (false, Ok(value)) => assert_eq!(value, task),
                    (true, Err(RendezvousError::Aborted { task: 0, reason })) if task > 0 => {
                        assert!(reason.contains("disk full"), "{reason}");
                    }
                    (true, Err(RendezvousError::Transport(_))) if task == 0 => {}
                    (fails, outcome) => panic!("task {task} (task 0 fails: {fails}): {outcome:?}"),
                }
            }
        }
    }
}
