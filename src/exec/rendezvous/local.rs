//! [`LocalRendezvous`]: the tasks of one process meet in one shared mailbox.
//!
//! Values are moved, never copied (a [`HostTensor`] shares its storage); a receive waits on
//! one condition variable that every send, barrier arrival and abort wakes.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{RecvDone, Rendezvous, RendezvousError, RendezvousKey, check_recv, check_send};
use crate::exec::sync::{lock, unpoisoned};
use crate::exec::tensor::HostTensor;

/// The in-process rendezvous of `n_tasks` tasks; each task takes its view with
/// [`LocalRendezvous::task`].
pub struct LocalRendezvous {
    n_tasks: usize,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Sent and not yet received.
    mailbox: HashMap<RendezvousKey, HostTensor>,
    /// Receives waiting for their value ([`Rendezvous::recv_async`]).
    waiting: HashMap<RendezvousKey, RecvDone>,
    /// The first abort: the task and its reason.
    aborted: Option<(usize, String)>,
    /// Tasks that reached the current barrier.
    arrived: usize,
    /// Barriers completed so far.
    generation: u64,
}

impl State {
    fn check(&self) -> Result<(), RendezvousError> {
        match &self.aborted {
            Some((task, reason)) => Err(RendezvousError::Aborted {
                task: *task,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for LocalRendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRendezvous")
            .field("n_tasks", &self.n_tasks)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl LocalRendezvous {
    /// A rendezvous for `n_tasks` tasks of this process.
    pub fn new(n_tasks: usize) -> Arc<LocalRendezvous> {
        Arc::new(LocalRendezvous {
            n_tasks,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    /// Task `task`'s view of the rendezvous.
    pub fn task(self: &Arc<Self>, task: usize) -> Result<LocalTask, RendezvousError> {
        if task >= self.n_tasks {
            return Err(RendezvousError::NoSuchTask {
                task,
                n_tasks: self.n_tasks,
            });
        }
        Ok(LocalTask {
            shared: Arc::clone(self),
            task,
        })
    }

    /// The first abort, if any: the aborting task and its reason.
    pub fn aborted(&self) -> Option<(usize, String)> {
        lock(&self.state).aborted.clone()
    }

    /// Values sent and not yet received (a finished run leaves none).
    pub fn pending(&self) -> usize {
        lock(&self.state).mailbox.len()
    }

    fn wait<'a>(&'a self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        unpoisoned(self.changed.wait(guard))
    }
}

/// One task's view of a [`LocalRendezvous`].
#[derive(Clone)]
pub struct LocalTask {
    shared: Arc<LocalRendezvous>,
    task: usize,
}

impl std::fmt::Debug for LocalTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTask")
            .field("task", &self.task)
            .finish_non_exhaustive()
    }
}

impl LocalTask {
    /// Aborts the rendezvous as this task with `reason` unless the returned [`Deadline`] is
    /// dropped within `within`: a bound on a run of in-process tasks (a test's, or a
    /// framework's watchdog), so that a task waiting for what never comes fails with
    /// [`RendezvousError::Aborted`] rather than waiting forever.
    pub fn deadline(&self, within: Duration, reason: &str) -> Deadline {
        let (done, waited) = mpsc::channel::<()>();
        let task = LocalTask {
            shared: Arc::clone(&self.shared),
            task: self.task,
        };
        let reason = reason.to_owned();
        let thread = std::thread::spawn(move || {
            if waited.recv_timeout(within) == Err(RecvTimeoutError::Timeout) {
                task.abort(&reason);
            }
        });
        Deadline {
            done: Some(done),
            thread: Some(thread),
        }
    }
}

/// A pending abort of a [`LocalRendezvous`] ([`LocalTask::deadline`]); dropping it in time
/// cancels it.
#[derive(Debug)]
#[must_use = "a deadline dropped at once is cancelled"]
pub struct Deadline {
    done: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Deadline {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Rendezvous for LocalTask {
    fn task(&self) -> usize {
        self.task
    }

    fn n_tasks(&self) -> usize {
        self.shared.n_tasks
    }

    fn send(&self, key: &RendezvousKey, value: HostTensor) -> Result<(), RendezvousError> {
        check_send(key, &value, self.task, self.shared.n_tasks)?;
        let mut state = lock(&self.shared.state);
        state.check()?;
        if state.mailbox.contains_key(key) {
            return Err(RendezvousError::SentTwice {
                tensor: key.tensor.clone(),
                src: key.src,
                dst: key.dst,
            });
        }
        if let Some(done) = state.waiting.remove(key) {
            drop(state);
            done(Ok(value));
            return Ok(());
        }
        state.mailbox.insert(key.clone(), value);
        drop(state);
        self.shared.changed.notify_all();
        Ok(())
    }

    fn recv_async(&self, key: &RendezvousKey, done: RecvDone) -> Result<(), RecvDone> {
        if let Err(err) = check_recv(key, self.task, self.shared.n_tasks) {
            done(Err(err));
            return Ok(());
        }
        let mut state = lock(&self.shared.state);
        let ready = match state.check() {
            Err(err) => Err(err),
            Ok(()) => match state.mailbox.remove(key) {
                Some(value) => Ok(value),
                None => {
                    state.waiting.insert(key.clone(), done);
                    return Ok(());
                }
            },
        };
        drop(state);
        done(ready);
        Ok(())
    }

    fn recv(&self, key: &RendezvousKey) -> Result<HostTensor, RendezvousError> {
        check_recv(key, self.task, self.shared.n_tasks)?;
        let mut state = lock(&self.shared.state);
        loop {
            state.check()?;
            if let Some(value) = state.mailbox.remove(key) {
                return Ok(value);
            }
            state = self.shared.wait(state);
        }
    }

    fn barrier(&self) -> Result<(), RendezvousError> {
        let mut state = lock(&self.shared.state);
        state.check()?;
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.shared.n_tasks {
            state.arrived = 0;
            state.generation += 1;
            drop(state);
            self.shared.changed.notify_all();
            return Ok(());
        }
        // A barrier that completed counts even if an abort follows at once (the aborting
        // task may have passed it already).
        while state.generation == generation {
            state.check()?;
            state = self.shared.wait(state);
        }
        Ok(())
    }

    fn abort(&self, reason: &str) {
        let mut state = lock(&self.shared.state);
        let (task, reason) = state
            .aborted
            .get_or_insert_with(|| (self.task, reason.to_owned()))
            .clone();
        let waiting: Vec<RecvDone> = state.waiting.drain().map(|(_, done)| done).collect();
        drop(state);
        self.shared.changed.notify_all();
        for done in waiting {
            done(Err(RendezvousError::Aborted {
                task,
                reason: reason.clone(),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive of what never comes fails once the deadline passes, with its reason; a
    /// deadline dropped in time aborts nothing.
    #[test]
    fn a_deadline_aborts_a_wait_unless_dropped_in_time() {
        let cluster = LocalRendezvous::new(2);
        let (zero, one) = (cluster.task(0).unwrap(), cluster.task(1).unwrap());
        let cancelled = one.deadline(Duration::from_millis(200), "too late");
        drop(cancelled); // joins its thread: had it not been cancelled, it would have aborted
        assert!(cluster.aborted().is_none());
        let _deadline = one.deadline(Duration::from_millis(50), "the deadline passed");
        let key = RendezvousKey::new(1, 0, "never");
        match zero.recv(&key) {
            Err(RendezvousError::Aborted { task: 1, reason }) => {
                assert_eq!(reason, "the deadline passed");
            }
            other => panic!("{other:?}"),
        }
    }
}
