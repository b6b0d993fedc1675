//! [`MpiRendezvous`]: one process per task, MPI point-to-point messages between them.
//!
//! MPI is initialized on a progress thread of ours, the only thread that calls MPI
//! (`MPI_THREAD_FUNNELED` is all it asks of the library). The run's threads hand it outgoing
//! messages through a channel and wait on a mailbox it fills; it posts every send as a
//! non-blocking `MPI_Isend` and keeps receiving whatever arrives, so two tasks sending large
//! values to each other at once never wait on each other. With nothing to do it sleeps between
//! looks at MPI, longer the longer nothing happens, as far as what it watches for allows
//! ([`Watching`]): 100 µs at most while a message is in flight, 1 ms while a thread of the run
//! waits for one, 10 ms when none does (a thread that starts waiting wakes it), so that an
//! idle rendezvous costs a framework's process next to nothing. Messages are tagged:
//!
//! * `DATA`: a value in the [`super::wire`] form, split into parts of at most 1 GiB (MPI counts
//!   are 32-bit); each part starts with the whole message's length, and parts from one sender
//!   arrive in order (MPI's non-overtaking rule);
//! * `HEAD` then `BODY`: a fixed-width value of [`DIRECT`] bytes or more, its bytes not copied
//!   on either side: the head ([`wire::Head`]: name, dtype, shape, byte length), then the bytes
//!   sent from the tensor's own storage in parts of at most 1 GiB; a body of one part is
//!   received into the buffer the value keeps;
//! * `ABORT`: the aborting task's reason, sent to every other task, with the number of barriers
//!   it saw released (so a peer never sees a barrier fail that the aborting task had passed);
//! * `ARRIVE` / `RELEASE`: a barrier, counted by task 0, which releases every task.
//!
//! Dropping the rendezvous finishes every posted send, meets the other tasks in a
//! non-blocking barrier (receiving meanwhile, so no peer's send is left unmatched) and
//! finalizes MPI. A task killed outright is Open MPI's to handle: `mpirun` then ends every
//! other task of the job.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use mpi::Threading;
use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Destination, MatchedReceiveVec, Source};

use super::wire;
use super::{RecvDone, Rendezvous, RendezvousError, RendezvousKey, check_recv, check_send};
use crate::exec::sync::{lock, unpoisoned};
use crate::exec::tensor::HostTensor;

const DATA: i32 = 1;
const ABORT: i32 = 2;
const ARRIVE: i32 = 3;
const RELEASE: i32 = 4;
const HEAD: i32 = 5;
const BODY: i32 = 6;
/// The largest part of a message, in bytes (MPI counts are `int`).
const PART: usize = 1 << 30;
/// Values of this many bytes or more cross as `HEAD` and `BODY`, not copied into a message.
const DIRECT: usize = 1 << 20;

/// The rendezvous of this process's task, over MPI's world communicator: rank `r` is task
/// `r`. There is one per process ([`MpiRendezvous::start`] initializes MPI).
pub struct MpiRendezvous {
    task: usize,
    n_tasks: usize,
    shared: Arc<Shared>,
    commands: Mutex<Sender<Command>>,
    progress: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MpiRendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiRendezvous")
            .field("task", &self.task)
            .field("n_tasks", &self.n_tasks)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// A [`Command::Wake`] is on its way to the progress thread: no need to send another.
    wake_pending: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Values received and not yet taken, by sender and name.
    mailbox: HashMap<(usize, String), HostTensor>,
    /// Receives waiting for their value ([`Rendezvous::recv_async`]), by sender and name.
    waiting: HashMap<(usize, String), RecvDone>,
    /// Threads of the run blocked in [`Rendezvous::recv`] or [`Rendezvous::barrier`].
    blocked: usize,
    /// The first abort seen (this task's or a peer's).
    aborted: Option<(usize, String)>,
    /// Barriers released so far.
    released: u64,
    /// A failure of the transport itself, reported to every later call.
    failed: Option<String>,
}

impl State {
    fn check(&self) -> Result<(), RendezvousError> {
        if let Some((task, reason)) = &self.aborted {
            return Err(RendezvousError::Aborted {
                task: *task,
                reason: reason.clone(),
            });
        }
        match &self.failed {
            Some(what) => Err(RendezvousError::Transport(what.clone())),
            None => Ok(()),
        }
    }
}

impl Shared {
    /// Applies `change`, wakes every waiter, and fails every waiting receive once the
    /// rendezvous is aborted or broken.
    fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = lock(&self.state);
        change(&mut state);
        self.wake(state);
    }

    /// Wakes every waiter on `state` (released here), failing the waiting receives when the
    /// rendezvous is aborted or broken.
    fn wake(&self, mut state: MutexGuard<'_, State>) {
        let failed = match state.check() {
            Ok(()) => None,
            Err(err) => Some((
                err,
                state
                    .waiting
                    .drain()
                    .map(|(_, done)| done)
                    .collect::<Vec<_>>(),
            )),
        };
        drop(state);
        self.changed.notify_all();
        if let Some((err, waiting)) = failed {
            for done in waiting {
                done(Err(err.clone()));
            }
        }
    }

    fn wait<'a>(&'a self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        unpoisoned(self.changed.wait(guard))
    }
}

enum Command {
    /// A value in the wire form, led by its 8-byte length.
    Send {
        dst: usize,
        message: Vec<u8>,
    },
    /// A fixed-width value's head and the value, whose bytes are sent from its storage.
    SendDirect {
        dst: usize,
        head: Vec<u8>,
        value: HostTensor,
    },
    Abort {
        reason: String,
    },
    Barrier,
    /// Nothing to do but look at MPI again at once: a thread of the run has started waiting
    /// for what arrives (the thread may be asleep for a while when nothing was awaited).
    Wake,
    Shutdown,
}

impl MpiRendezvous {
    /// Initializes MPI on a progress thread and returns this process's task. Fails in one line
    /// when MPI cannot start (for instance when MPI was already initialized in this process).
    pub fn start() -> Result<MpiRendezvous, RendezvousError> {
        let shared = Arc::new(Shared::default());
        let (commands, inbox) = mpsc::channel();
        let (ready, started) = mpsc::channel();
        let progress_shared = Arc::clone(&shared);
        let progress = std::thread::Builder::new()
            .name("saveplan-mpi".into())
            .spawn(move || progress_thread(progress_shared, inbox, ready))
            .map_err(|error| {
                RendezvousError::Transport(format!("cannot start the MPI thread: {error}"))
            })?;
        match started.recv() {
            Ok(Ok((task, n_tasks))) => Ok(MpiRendezvous {
                task,
                n_tasks,
                shared,
                commands: Mutex::new(commands),
                progress: Some(progress),
            }),
            Ok(Err(error)) => {
                let _ = progress.join();
                Err(error)
            }
            Err(_) => {
                let _ = progress.join();
                Err(RendezvousError::Transport(
                    "the MPI thread ended before MPI started".into(),
                ))
            }
        }
    }

    /// The environment variable that lets [`MpiRendezvous::start`] skip Open MPI's PCI
    /// discovery, when Open MPI's launcher started every rank of the job on this host and the
    /// user has not chosen hwloc's components (`HWLOC_COMPONENTS`): `Some((name, value))`, to
    /// be set before `start` while the process has no other thread
    /// ([`crate::process::set_env_if_single_threaded`]; the `saveplan` binary does). The
    /// discovery reads every PCI device's configuration space, which on a VM exits to the
    /// hypervisor at each read: 4 ranks on a 2-core VM started about 0.05 s sooner without it
    /// (docs/cluster.md). `None` on several hosts, where Open MPI reads the PCI topology to
    /// give each process its nearest network card.
    pub fn one_host_setting() -> Option<(&'static str, &'static str)> {
        super::launcher::one_host_discovery(std::env::vars_os())
    }

    fn command(&self, command: Command) -> Result<(), RendezvousError> {
        lock(&self.commands)
            .send(command)
            .map_err(|_| RendezvousError::Transport("the MPI progress thread has stopped".into()))
    }

    /// Has the progress thread look at MPI at once ([`Command::Wake`]), unless a wake is on its
    /// way already. A thread that has stopped set `failed` before it stopped ([`Stopped`]),
    /// which whoever waits is told.
    fn wake_progress(&self) {
        if !self.shared.wake_pending.swap(true, Ordering::SeqCst) {
            let _ = self.command(Command::Wake);
        }
    }

    /// Blocks until `ready` gives an answer from the state, counted in [`State::blocked`] while
    /// it waits. As the wait starts (once counted, so that the progress thread, looking at MPI
    /// at once, sees a thread waiting) the progress thread is sent `command` if there is one,
    /// else woken ([`Command::Wake`]): any command has it look at MPI at once.
    fn wait_until<T>(
        &self,
        mut command: Option<Command>,
        mut ready: impl FnMut(&mut State) -> Option<Result<T, RendezvousError>>,
    ) -> Result<T, RendezvousError> {
        let mut state = lock(&self.shared.state);
        let mut blocked = false;
        let answer = loop {
            if let Some(answer) = ready(&mut state) {
                break answer;
            }
            if !blocked {
                blocked = true;
                state.blocked += 1;
                match command.take() {
                    Some(command) => {
                        if let Err(err) = self.command(command) {
                            break Err(err);
                        }
                    }
                    None => self.wake_progress(),
                }
            }
            state = self.shared.wait(state);
        };
        if blocked {
            state.blocked -= 1;
        }
        answer
    }
}

impl Rendezvous for MpiRendezvous {
    fn task(&self) -> usize {
        self.task
    }

    fn n_tasks(&self) -> usize {
        self.n_tasks
    }

    fn send(&self, key: &RendezvousKey, value: HostTensor) -> Result<(), RendezvousError> {
        check_send(key, &value, self.task, self.n_tasks)?;
        lock(&self.shared.state).check()?;
        if value.bytes().is_some_and(|bytes| bytes.len() >= DIRECT) {
            let mut head = Vec::new();
            if wire::encode_head(&key.tensor, &value, &mut head).is_some() {
                return self.command(Command::SendDirect {
                    dst: key.dst,
                    head,
                    value,
                });
            }
        }
        // Framed as its first part is sent: the length first, so that a value of one part
        // (all but values over 1 GiB) goes to MPI without another copy.
        let mut message = vec![0; 8];
        wire::encode(&key.tensor, &value, &mut message);
        let length = (message.len() - 8) as u64;
        message[..8].copy_from_slice(&length.to_le_bytes());
        self.command(Command::Send {
            dst: key.dst,
            message,
        })
    }

    fn recv(&self, key: &RendezvousKey) -> Result<HostTensor, RendezvousError> {
        check_recv(key, self.task, self.n_tasks)?;
        let wanted = (key.src, key.tensor.clone());
        self.wait_until(None, |state| match state.check() {
            Err(err) => Some(Err(err)),
            Ok(()) => state.mailbox.remove(&wanted).map(Ok),
        })
    }

    fn barrier(&self) -> Result<(), RendezvousError> {
        let target = {
            let state = lock(&self.shared.state);
            state.check()?;
            state.released + 1
        };
        // Sent once this thread counts as waiting (no barrier is released before it is sent).
        self.wait_until(Some(Command::Barrier), |state| {
            if state.released >= target {
                return Some(Ok(()));
            }
            state.check().err().map(Err)
        })
    }

    fn recv_async(&self, key: &RendezvousKey, done: RecvDone) -> Result<(), RecvDone> {
        if let Err(err) = check_recv(key, self.task, self.n_tasks) {
            done(Err(err));
            return Ok(());
        }
        let wanted = (key.src, key.tensor.clone());
        let mut state = lock(&self.shared.state);
        let ready = match state.check() {
            Err(err) => Err(err),
            Ok(()) => match state.mailbox.remove(&wanted) {
                Some(value) => Ok(value),
                None => {
                    state.waiting.insert(wanted, done);
                    drop(state);
                    self.wake_progress();
                    return Ok(());
                }
            },
        };
        drop(state);
        done(ready);
        Ok(())
    }

    fn abort(&self, reason: &str) {
        let first = {
            let mut state = lock(&self.shared.state);
            let first = state.aborted.is_none();
            if first {
                state.aborted = Some((self.task, reason.to_owned()));
            }
            self.shared.wake(state);
            first
        };
        if first {
            // If the thread has stopped there is no one left to tell.
            let _ = self.command(Command::Abort {
                reason: reason.to_owned(),
            });
        }
    }
}

impl Drop for MpiRendezvous {
    fn drop(&mut self) {
        let _ = self.command(Command::Shutdown);
        if let Some(progress) = self.progress.take() {
            let _ = progress.join();
        }
    }
}

/// A posted send and what owns the buffer it reads, freed once the send completes.
struct Posted {
    request: Request<'static, [u8], StaticScope>,
    buffer: Owner,
}

/// What keeps a posted send's bytes alive.
enum Owner {
    /// A message of ours, leaked by `post` until the send completes.
    Leaked(*mut [u8]),
    /// A value whose storage (shared, never moved or changed while shared) is sent in place.
    Value(#[expect(dead_code, reason = "held, never read: it keeps the bytes alive")] HostTensor),
}

impl Owner {
    /// Frees what this owner holds: MPI is done with the bytes.
    fn release(self) {
        if let Owner::Leaked(buffer) = self {
            // SAFETY: the buffer came from `Box::leak` in `post`, and MPI is done with it now
            // that its send completed.
            drop(unsafe { Box::from_raw(buffer) });
        }
    }
}

/// Owns MPI: initializes it, moves messages, finalizes it.
fn progress_thread(
    shared: Arc<Shared>,
    commands: Receiver<Command>,
    ready: Sender<Result<(usize, usize), RendezvousError>>,
) {
    // Dropped last of this function's own, before `commands`: a run's thread whose command
    // cannot be sent finds the rendezvous failed.
    let _stopped = Stopped(Arc::clone(&shared));
    let Some((universe, _threading)) = mpi::initialize_with_threading(Threading::Funneled) else {
        let _ = ready.send(Err(RendezvousError::Transport(
            "MPI is already initialized in this process".into(),
        )));
        return;
    };
    let world = universe.world();
    let (task, n_tasks) = (world.rank() as usize, world.size() as usize);
    if ready.send(Ok((task, n_tasks))).is_err() {
        return;
    }
    let mut mover = Mover {
        world,
        task,
        n_tasks,
        shared,
        posted: Vec::new(),
        partial: BTreeMap::new(),
        bodies: BTreeMap::new(),
        arrived: BTreeMap::new(),
        barriers: 0,
    };
    let mut idle = 0u32;
    loop {
        // Waits for the run's next command only as long as the backoff says (what arrives
        // from MPI is looked at again after that).
        let command = match wait(idle, || mover.watching()) {
            None => commands
                .try_recv()
                .map_err(|error| error == TryRecvError::Disconnected),
            Some(timeout) => commands
                .recv_timeout(timeout)
                .map_err(|error| error == RecvTimeoutError::Disconnected),
        };
        let mut worked = false;
        match command {
            Ok(Command::Shutdown) | Err(true) => break,
            Ok(command) => {
                mover.command(command);
                worked = true;
            }
            Err(false) => {}
        }
        worked |= mover.receive_all();
        worked |= mover.complete_sends();
        idle = if worked { 0 } else { idle.saturating_add(1) };
    }
    mover.shutdown();
    drop(mover);
    super::launcher::links_without_delay();
    drop(universe);
}

/// Fails the rendezvous when the progress thread ends, however it ends (a panic too): every
/// later call, every waiting thread and every waiting receive is then told, rather than left
/// waiting for a thread that is gone. (Once the rendezvous is dropped nobody is left to tell.)
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.update(|state| {
            (state.failed).get_or_insert_with(|| "the MPI progress thread has stopped".into());
        });
    }
}

/// What the progress thread watches MPI for, which says how long it may sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watching {
    /// A message of ours in flight (a send posted, a message partly received): MPI moves it
    /// only as the thread calls it, so it looks again within 100 µs, as it always did.
    Transfer,
    /// A thread of the run waits for a value or a barrier: what arrives is seen within a
    /// small part of the time already waited (the sleeps grow 1 µs a round, up to 1 ms: after
    /// a wait of T µs, at most about √(2T) µs; 140 µs into a wait of 10 ms).
    Awaited,
    /// Nothing: all that may come is a peer's abort or a value no thread waits for yet (a
    /// thread that starts waiting wakes the progress thread at once, by [`Command::Wake`] or
    /// by its own command), so the sleeps grow 10 µs a round, up to 10 ms.
    Nothing,
}

/// How long the progress thread may wait for a command after `idle` rounds with nothing to
/// do: not at all at first (spinning, then yielding), then longer each round, as far as what
/// it is `watching` for allows ([`Watching`], asked only once the thread would sleep).
fn wait(idle: u32, watching: impl FnOnce() -> Watching) -> Option<Duration> {
    match idle {
        0..=64 => {
            std::hint::spin_loop();
            None
        }
        65..=256 => {
            std::thread::yield_now();
            None
        }
        _ => {
            let rounds = u64::from(idle - 256);
            let micros = match watching() {
                Watching::Transfer => rounds.min(100),
                Watching::Awaited => rounds.min(1_000),
                Watching::Nothing => (rounds * 10).min(10_000),
            };
            Some(Duration::from_micros(micros))
        }
    }
}

struct Mover {
    world: SimpleCommunicator,
    task: usize,
    n_tasks: usize,
    shared: Arc<Shared>,
    posted: Vec<Posted>,
    /// Parts received so far of a message still arriving, by sender: expected length, bytes.
    partial: BTreeMap<usize, (usize, Vec<u8>)>,
    /// The value whose `BODY` is arriving, by sender: its head and the bytes so far.
    bodies: BTreeMap<usize, (wire::Head, Vec<u8>)>,
    /// Task 0 only: arrivals per barrier number.
    arrived: BTreeMap<u64, usize>,
    /// Barriers this task entered.
    barriers: u64,
}

impl Mover {
    /// What this task waits on MPI for now ([`wait`]).
    fn watching(&self) -> Watching {
        if !(self.posted.is_empty() && self.partial.is_empty() && self.bodies.is_empty()) {
            return Watching::Transfer;
        }
        let state = lock(&self.shared.state);
        match state.blocked > 0 || !state.waiting.is_empty() {
            true => Watching::Awaited,
            false => Watching::Nothing,
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Send { dst, message } => self.post_message(dst, message),
            Command::SendDirect { dst, head, value } => {
                self.post(dst, head, HEAD);
                let bytes = value.bytes().expect("a fixed-width value");
                // SAFETY: the bytes are the value's shared storage, which nothing changes or
                // frees while `value` (a clone of it kept with each part's send) is alive.
                let bytes: &'static [u8] =
                    unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
                for part in bytes.chunks(PART) {
                    let request = (self.world.process_at_rank(dst as i32)).immediate_send_with_tag(
                        StaticScope,
                        part,
                        BODY,
                    );
                    self.posted.push(Posted {
                        request,
                        buffer: Owner::Value(value.clone()),
                    });
                }
            }
            Command::Abort { reason } => {
                // The barriers this task saw released travel with the abort: a peer that hears
                // of the abort before the release of a barrier the aborting task had passed
                // still sees that barrier complete.
                let released = lock(&self.shared.state).released;
                let mut message = released.to_le_bytes().to_vec();
                message.extend_from_slice(reason.as_bytes());
                let task = self.task;
                for peer in (0..self.n_tasks).filter(|&peer| peer != task) {
                    self.post(peer, message.clone(), ABORT);
                }
            }
            Command::Barrier => {
                self.barriers += 1;
                if self.task == 0 {
                    self.arrive(self.barriers);
                } else {
                    self.post(0, self.barriers.to_le_bytes().to_vec(), ARRIVE);
                }
            }
            Command::Wake => self.shared.wake_pending.store(false, Ordering::SeqCst),
            Command::Shutdown => {}
        }
    }

    /// Posts `message` (led by its length) to `dst` as parts of at most [`PART`] bytes, each
    /// led by the total length: as it is when it fits one part.
    fn post_message(&mut self, dst: usize, message: Vec<u8>) {
        if message.len() - 8 <= PART {
            return self.post(dst, message, DATA);
        }
        let total: [u8; 8] = message[..8].try_into().expect("8 bytes");
        for part in message[8..].chunks(PART) {
            let mut buffer = Vec::with_capacity(8 + part.len());
            buffer.extend_from_slice(&total);
            buffer.extend_from_slice(part);
            self.post(dst, buffer, DATA);
        }
    }

    fn post(&mut self, dst: usize, buffer: Vec<u8>, tag: i32) {
        let buffer: &'static mut [u8] = Box::leak(buffer.into_boxed_slice());
        let pointer: *mut [u8] = buffer;
        let request = self
            .world
            .process_at_rank(dst as i32)
            .immediate_send_with_tag(StaticScope, &*buffer, tag);
        self.posted.push(Posted {
            request,
            buffer: Owner::Leaked(pointer),
        });
    }

    /// Completes the sends that finished; true if any did.
    fn complete_sends(&mut self) -> bool {
        let before = self.posted.len();
        let mut still = Vec::with_capacity(before);
        for posted in self.posted.drain(..) {
            match posted.request.test() {
                Ok(_status) => posted.buffer.release(),
                Err(request) => still.push(Posted {
                    request,
                    buffer: posted.buffer,
                }),
            }
        }
        self.posted = still;
        self.posted.len() < before
    }

    /// Receives every message that has arrived; true if any had.
    fn receive_all(&mut self) -> bool {
        let mut any = false;
        while let Some(matched) = self.world.any_process().immediate_matched_probe() {
            let (bytes, status) = matched.matched_receive_vec::<u8>();
            self.dispatch(status.source_rank() as usize, status.tag(), bytes);
            any = true;
        }
        any
    }

    fn dispatch(&mut self, src: usize, tag: i32, bytes: Vec<u8>) {
        match tag {
            DATA => self.data_part(src, bytes),
            HEAD => self.head(src, &bytes),
            BODY => self.body_part(src, bytes),
            ABORT => match bytes.split_first_chunk::<8>() {
                Some((released, reason)) => {
                    let released = u64::from_le_bytes(*released);
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    self.shared.update(|state| {
                        state.released = state.released.max(released);
                        state.aborted.get_or_insert((src, reason));
                    });
                }
                None => self.bad(src, "an abort without its barrier count"),
            },
            ARRIVE => match <[u8; 8]>::try_from(&bytes[..]) {
                Ok(number) if self.task == 0 => self.arrive(u64::from_le_bytes(number)),
                _ => self.bad(src, "a barrier arrival that is not for task 0"),
            },
            RELEASE => match <[u8; 8]>::try_from(&bytes[..]) {
                Ok(number) => {
                    let number = u64::from_le_bytes(number);
                    self.shared
                        .update(|state| state.released = state.released.max(number));
                }
                Err(_) => self.bad(src, "a barrier release of the wrong size"),
            },
            _ => self.bad(src, &format!("unknown tag {tag}")),
        }
    }

    fn data_part(&mut self, src: usize, bytes: Vec<u8>) {
        let Some((total, part)) = bytes.split_first_chunk::<8>() else {
            return self.bad(src, "a data part without its length");
        };
        let total = u64::from_le_bytes(*total) as usize;
        if part.len() == total && !self.partial.contains_key(&src) {
            // The whole value in one part: decoded where it arrived.
            return self.deliver(src, part);
        }
        let (expected, mut so_far) = self
            .partial
            .remove(&src)
            .unwrap_or_else(|| (total, Vec::with_capacity(total.min(PART))));
        if expected != total || so_far.len() + part.len() > total {
            return self.bad(src, "data parts that do not add up");
        }
        so_far.extend_from_slice(part);
        if so_far.len() < total {
            self.partial.insert(src, (total, so_far));
            return;
        }
        self.deliver(src, &so_far);
    }

    /// The head of a value from `src` whose bytes follow as `BODY` parts.
    fn head(&mut self, src: usize, bytes: &[u8]) {
        if self.bodies.contains_key(&src) {
            return self.bad(src, "a value's head before the last value's bytes ended");
        }
        match wire::Head::decode(bytes) {
            Ok(head) if head.len == 0 => self.deliver_decoded(src, head.value(Vec::new())),
            Ok(head) => {
                self.bodies.insert(src, (head, Vec::new()));
            }
            Err(error) => self.bad(src, &error.to_string()),
        }
    }

    /// A part of the bytes of the value from `src` whose head came last.
    fn body_part(&mut self, src: usize, part: Vec<u8>) {
        let Some((head, mut so_far)) = self.bodies.remove(&src) else {
            return self.bad(src, "a value's bytes without its head");
        };
        if so_far.len() + part.len() > head.len {
            return self.bad(src, "value bytes past the length its head gives");
        }
        // A body of one part is the value's storage as MPI received it.
        let so_far = match so_far.is_empty() && part.len() == head.len {
            true => part,
            false => {
                so_far.reserve_exact(head.len - so_far.len());
                so_far.extend_from_slice(&part);
                so_far
            }
        };
        if so_far.len() < head.len {
            self.bodies.insert(src, (head, so_far));
            return;
        }
        self.deliver_decoded(src, head.value(so_far));
    }

    /// Decodes a whole value from `src` into the mailbox.
    fn deliver(&self, src: usize, message: &[u8]) {
        self.deliver_decoded(src, wire::decode(message));
    }

    /// Hands a value from `src` to its waiting receive, or puts it in the mailbox.
    fn deliver_decoded(&self, src: usize, decoded: Result<(String, HostTensor), wire::WireError>) {
        match decoded {
            Ok((name, value)) => {
                let mut state = lock(&self.shared.state);
                match state.waiting.remove(&(src, name.clone())) {
                    Some(done) => {
                        drop(state);
                        done(Ok(value));
                    }
                    None => {
                        state.mailbox.insert((src, name), value);
                        self.shared.wake(state);
                    }
                }
            }
            Err(error) => self.bad(src, &error.to_string()),
        }
    }

    /// Task 0 counts an arrival at barrier `number`; the last one releases every task.
    fn arrive(&mut self, number: u64) {
        let count = self.arrived.entry(number).or_insert(0);
        *count += 1;
        if *count < self.n_tasks {
            return;
        }
        self.arrived.remove(&number);
        for peer in 1..self.n_tasks {
            self.post(peer, number.to_le_bytes().to_vec(), RELEASE);
        }
        self.shared
            .update(|state| state.released = state.released.max(number));
    }

    fn bad(&self, src: usize, what: &str) {
        let error = RendezvousError::BadMessage {
            src,
            what: what.to_owned(),
        };
        self.shared.update(|state| {
            state.failed.get_or_insert(error.to_string());
        });
    }

    /// Finishes every posted send and meets the other tasks before MPI is finalized,
    /// receiving meanwhile so that no peer's send stays unmatched.
    fn shutdown(&mut self) {
        while !self.posted.is_empty() {
            self.receive_all();
            self.complete_sends();
            std::thread::yield_now();
        }
        let mut barrier = self.world.immediate_barrier();
        loop {
            self.receive_all();
            match barrier.test() {
                Ok(_) => break,
                Err(pending) => barrier = pending,
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        // Messages that crossed the barrier (an abort sent while peers were finishing).
        self.receive_all();
        self.complete_sends();
        while !self.posted.is_empty() {
            self.complete_sends();
            std::thread::yield_now();
        }
    }
}

/// The run's side of the rendezvous without MPI: a rendezvous whose progress thread is played
/// by the test (its commands are read, or dropped to play a thread that has stopped), and its
/// [`Stopped`] guard dropped as the thread's end drops it. A call that should return and
/// does not fails its test after 10 s. `tests/mpi/run.sh` runs these.
#[cfg(test)]
mod tests {
    use super::*;

    const STOPPED: &str = "the MPI progress thread has stopped";
    const PATIENCE: Duration = Duration::from_secs(10);

    /// Task 1 of 2, with the receiving end of its commands: what its progress thread would read.
    fn without_thread() -> (Arc<MpiRendezvous>, Receiver<Command>) {
        let (commands, inbox) = mpsc::channel();
        let rendezvous = MpiRendezvous {
            task: 1,
            n_tasks: 2,
            shared: Arc::new(Shared::default()),
            commands: Mutex::new(commands),
            progress: None,
        };
        (Arc::new(rendezvous), inbox)
    }

    /// Runs `call` on a thread of its own; its answer comes through the receiver.
    fn on_a_thread<T: Send + 'static>(
        rendezvous: &Arc<MpiRendezvous>,
        call: impl FnOnce(&MpiRendezvous) -> Result<T, RendezvousError> + Send + 'static,
    ) -> Receiver<Result<T, RendezvousError>> {
        let (answer, answered) = mpsc::channel();
        let rendezvous = Arc::clone(rendezvous);
        std::thread::spawn(move || answer.send(call(&rendezvous)));
        answered
    }

    fn stopped<T>(result: Result<T, RendezvousError>) -> bool {
        matches!(result, Err(RendezvousError::Transport(what)) if what == STOPPED)
    }

    fn blocked(rendezvous: &MpiRendezvous) -> usize {
        lock(&rendezvous.shared.state).blocked
    }

    /// Waits until `count` threads of the run are blocked waiting.
    fn until_blocked(rendezvous: &MpiRendezvous, count: usize) {
        let start = std::time::Instant::now();
        while blocked(rendezvous) != count {
            assert!(start.elapsed() < PATIENCE, "{count} thread(s) never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_barrier_whose_command_cannot_be_sent_fails_at_once_and_is_not_left_counted() {
        let (rendezvous, inbox) = without_thread();
        drop(inbox);
        let meeting = on_a_thread(&rendezvous, |rendezvous| rendezvous.barrier());
        assert!(stopped(meeting.recv_timeout(PATIENCE).expect("an answer")));
        assert_eq!(blocked(&rendezvous), 0);
    }

    #[test]
    fn a_barrier_sends_its_command_and_waits_counted_until_released() {
        let (rendezvous, inbox) = without_thread();
        let meeting = on_a_thread(&rendezvous, |rendezvous| rendezvous.barrier());
        // The progress thread's part: the command arrives with the thread counted.
        let command = inbox.recv_timeout(PATIENCE).expect("a command");
        assert!(matches!(command, Command::Barrier));
        assert_eq!(blocked(&rendezvous), 1);
        rendezvous.shared.update(|state| state.released += 1);
        assert!(meeting.recv_timeout(PATIENCE).expect("an answer").is_ok());
        assert_eq!(blocked(&rendezvous), 0);
    }

    #[test]
    fn the_progress_thread_stopping_fails_every_waiter_and_every_later_call() {
        let (rendezvous, _inbox) = without_thread();
        let (told, heard) = mpsc::channel();
        let key = RendezvousKey::new(0, 1, "x");
        let done: RecvDone = Box::new(move |result| told.send(stopped(result)).unwrap());
        assert!(rendezvous.recv_async(&key, done).is_ok());
        let receiving = on_a_thread(&rendezvous, |rendezvous| {
            rendezvous.recv(&RendezvousKey::new(0, 1, "y"))
        });
        let meeting = on_a_thread(&rendezvous, |rendezvous| rendezvous.barrier());
        until_blocked(&rendezvous, 2);
        // How the progress thread's end (a return or a panic) drops it.
        drop(Stopped(Arc::clone(&rendezvous.shared)));
        assert!(stopped(
            receiving.recv_timeout(PATIENCE).expect("an answer")
        ));
        assert!(stopped(meeting.recv_timeout(PATIENCE).expect("an answer")));
        assert_eq!(heard.recv_timeout(PATIENCE), Ok(true));
        assert_eq!(blocked(&rendezvous), 0);
        // Every later call fails too, none waits.
        let later = on_a_thread(&rendezvous, move |rendezvous| {
            let value = HostTensor::from_f32s(vec![1], &[1.0]).unwrap();
            let sent = rendezvous.send(&RendezvousKey::new(1, 0, "z"), value);
            Ok([
                stopped(sent),
                stopped(rendezvous.barrier()),
                stopped(rendezvous.recv(&key)),
            ])
        });
        let later = later.recv_timeout(PATIENCE).expect("an answer");
        assert!(matches!(later, Ok([true, true, true])), "{later:?}");
    }

    #[test]
    fn the_guard_keeps_the_first_failure() {
        let (rendezvous, _inbox) = without_thread();
        let shared = &rendezvous.shared;
        shared.update(|state| state.failed = Some("MPI_Isend failed".into()));
        drop(Stopped(Arc::clone(shared)));
        let failed = lock(&shared.state).failed.clone();
        assert_eq!(failed.as_deref(), Some("MPI_Isend failed"));
    }
}
