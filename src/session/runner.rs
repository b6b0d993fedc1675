//! [`Runner`]: the one plan runner. Whatever runs a save or restore plan against a prefix goes
//! through it: a [`Session`](super::Session) in graph or eager mode, and the object-based
//! writes of [`crate::checkpoint`] (`write`, a traced `write`, TF1 graph mode and asynchronous
//! writes); the CLI's `save`, `restore`, `run` and object specs reach it through those two.
//!
//! A runner takes a compiled plan (or the eager saver), the variables and a prefix ([`Run`]).
//! Its modes are data:
//!
//! * **What runs.** Compiled plans, one per call, run with the prefix fed after the save plan's
//!   fixed feeds (graph mode; TF1 graph mode feeds the serialized object graph first,
//!   [`Runner::with_save_feeds`]), or eager TensorFlow's `MultiDeviceSaver` ([`EagerSaver`]:
//!   op by op for one task, a traced function for several, retraced by TensorFlow's rule, see
//!   [`super::function_cache`]). An object-based write traces its plan once and runs it
//!   compiled ([`Runner::trace_save`]): the plan eager TensorFlow runs, so the same files.
//! * **How a save's files are written.** Straight through the checkpoint backend while the
//!   plan runs, holding the prefix's save lock ([`Runner::run`]), or captured
//!   ([`Runner::capture`]: the tensors the plan saves kept, shared, not copied) and written
//!   afterwards under the lock ([`CapturedWrite::commit`]), at once or on a background thread
//!   ([`Background`](super::Background), one write in flight: asynchronous checkpoints).
//!
//! A save takes the prefix's lock only once the plan it runs is known to exist, so a plan left
//! out is refused before anything touches the prefix (the lock cleans up what killed saves
//! left there).

use std::sync::Mutex;

use saveplan_ir::verify_module;

use super::capture::{CapturedWrite, RecordingIo};
use super::eager::EagerSaver;
use super::error::RunError;
use super::function_cache::{CacheEvent, Call};
use super::options::Mode;
use crate::exec::rendezvous::Rendezvous;
use crate::exec::sync::lock;
use crate::exec::{
    Backend, CheckpointIo, HostTensor, RunContext, RunIo, StepEvent, TaskPlans, VariableStore,
};
use crate::trace::{TraceOptions, Trackable, VariableOps, trace_flat_save_as};

/// A plan (or the eager saver) ready to run against any prefix: see the [module docs](self).
pub struct Runner {
    runs: Runs,
    backend: Backend,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("mode", &self.mode())
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// What a [`Runner`] runs.
enum Runs {
    /// Compiled plans, run with the prefix fed after `save_feeds` (save) or alone (restore);
    /// `init`, the variables' initializer (TF1 graph mode), takes no feed.
    Compiled {
        init: Option<TaskPlans>,
        save: Option<TaskPlans>,
        restore: Option<TaskPlans>,
        save_feeds: Vec<HostTensor>,
    },
    /// The eager saver and the options its calls trace with.
    Eager {
        saver: Mutex<EagerSaver>,
        options: Box<TraceOptions>,
    },
}

/// One call of a [`Runner`]: the prefix, the variables the plan reads and assigns, the
/// checkpoint backend and an observer of its steps.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    /// The checkpoint prefix fed to the plan.
    pub prefix: &'a str,
    /// The variables.
    pub variables: &'a VariableStore,
    /// Where the plan's file operations go.
    pub io: &'a dyn CheckpointIo,
    /// Called after every step of a compiled plan.
    pub observer: Option<&'a (dyn Fn(&StepEvent<'_>) + Sync)>,
    /// When set, this process runs one task of the plan, `cluster.task()`, and meets the
    /// others (in other processes) through it ([`TaskPlans::run_task`]); when `None`, every
    /// task runs here ([`TaskPlans::run`]).
    pub cluster: Option<&'a dyn Rendezvous>,
}

impl Runner {
    /// A runner of compiled plans (either may be left out) on `backend`.
    pub fn compiled(
        save: Option<TaskPlans>,
        restore: Option<TaskPlans>,
        backend: Backend,
    ) -> Runner {
        Runner {
            runs: Runs::Compiled {
                init: None,
                save,
                restore,
                save_feeds: Vec::new(),
            },
            backend,
        }
    }

    /// The same runner feeding `feeds` to the save plan, in its compile order, before the
    /// prefix (TF1 graph mode's `write` takes the serialized object graph first). An eager
    /// runner takes the prefix alone and is returned unchanged.
    pub fn with_save_feeds(mut self, feeds: Vec<HostTensor>) -> Runner {
        if let Runs::Compiled { save_feeds, .. } = &mut self.runs {
            *save_feeds = feeds;
        }
        self
    }

    /// The same runner with `init`, a plan that assigns the variables their initial values
    /// and takes no feed (TF1 graph mode's `global_variables_initializer()`), run by
    /// [`Runner::initialize`]. An eager runner is returned unchanged.
    pub fn with_init(mut self, plan: TaskPlans) -> Runner {
        if let Runs::Compiled { init, .. } = &mut self.runs {
            *init = Some(plan);
        }
        self
    }

    /// A runner of eager TensorFlow's `MultiDeviceSaver`: `saver`'s calls traced with
    /// `options`, its functions run on `backend`.
    pub fn eager(saver: EagerSaver, options: TraceOptions, backend: Backend) -> Runner {
        Runner {
            runs: Runs::Eager {
                saver: Mutex::new(saver.with_backend(backend)),
                options: Box::new(options),
            },
            backend,
        }
    }

    /// Traces the save plan of `trackables` once (the ops eager TensorFlow's
    /// `MultiDeviceSaver.save` runs, each variable's handle and read attached,
    /// [`VariableOps::Attach`], as the eager saver traces them) and compiles it for `backend`:
    /// a runner that saves them compiled, as an object-based write does, rather than op by op.
    /// With `only`, the plan is compiled for that task of its cluster alone
    /// ([`TaskPlans::compile_for`]: this process runs that task, [`Run::cluster`]).
    pub fn trace_save(
        trackables: &[Trackable],
        options: &TraceOptions,
        backend: Backend,
        only: Option<usize>,
    ) -> Result<Runner, RunError> {
        let trace = trace_flat_save_as(trackables, options, VariableOps::Attach)
            .map_err(|err| RunError::Trace(Box::new(err)))?;
        let plan = verify_module(&trace.module)
            .map_err(RunError::Invalid)
            .and_then(|verified| {
                TaskPlans::compile_for(
                    verified,
                    &[trace.saver.save_target.as_str()],
                    &[trace.saver.filename_tensor_name.as_str()],
                    backend,
                    only,
                )
                .map_err(|source| RunError::Compile {
                    what: Call::Save.name(),
                    source: Box::new(source),
                })
            });
        // The runner keeps nothing of the trace; freeing a graph of N variables is left to a
        // pool thread, as a session leaves it.
        let module = trace.module;
        rayon::spawn(move || drop(module));
        Ok(Runner::compiled(Some(plan?), None, backend))
    }

    /// Graph mode (compiled plans) or eager mode.
    pub fn mode(&self) -> Mode {
        match self.runs {
            Runs::Compiled { .. } => Mode::Graph,
            Runs::Eager { .. } => Mode::Eager,
        }
    }

    /// The backend the plans (in eager mode, the traced functions) run on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The compiled plan of `call`, task by task; `None` in eager mode and for a plan the
    /// runner was made without.
    pub fn task_plans(&self, call: Call) -> Option<&TaskPlans> {
        match (&self.runs, call) {
            (Runs::Compiled { save, .. }, Call::Save) => save.as_ref(),
            (Runs::Compiled { restore, .. }, Call::Restore) => restore.as_ref(),
            (Runs::Eager { .. }, _) => None,
        }
    }

    /// What eager mode's function cache did on each call so far, oldest first; empty for
    /// compiled plans.
    pub fn trace_log(&self) -> Vec<CacheEvent> {
        match &self.runs {
            Runs::Compiled { .. } => Vec::new(),
            Runs::Eager { saver, .. } => lock(saver).trace_log().to_vec(),
        }
    }

    /// Runs `call` against `run.prefix`, its file operations going straight to `run.io`
    /// (through one run's view of it, [`RunIo`], so its restores share what they open); a
    /// save holds the prefix's save lock ([`CheckpointIo::begin_save`]) until it ends. Returns
    /// what a compiled plan fetches (nothing in eager mode).
    ///
    /// With [`Run::cluster`], this process runs its task alone: task 0 takes the save lock
    /// while the others wait at a barrier, every task meets the others at a barrier once its
    /// share ran (so a task that failed, wherever it is, fails them all), and task 0 lets the
    /// lock go last. Fetches held by other tasks are left out.
    pub fn run(&self, call: Call, run: Run<'_>) -> Result<Vec<HostTensor>, RunError> {
        let runs = self.runs_for(call)?;
        // Every process finds the same, so none is left waiting: checked before the lock.
        if let Some(cluster) = run.cluster
            && let Err(err) = runs.check_cluster(cluster)
        {
            // A size every process finds the same; a plan compiled for another task only this
            // one: the others are told, not left at the barrier.
            cluster.abort(&crate::exec::error_line(&err));
            return Err(err);
        }
        let lead = run.cluster.is_none_or(|cluster| cluster.task() == 0);
        // Held until the save ends: BundleIo's lock on the prefix.
        let guard = match call {
            Call::Save if lead => Some(run.io.begin_save(run.prefix).map_err(|err| {
                if let Some(cluster) = run.cluster {
                    cluster.abort(&format!("cannot save to {}: {err}", run.prefix));
                }
                RunError::Prefix(Box::new(err))
            })?),
            _ => None,
        };
        if let Some(cluster) = run.cluster {
            cluster.barrier().map_err(RunError::Cluster)?;
        }
        let io = RunIo::new(run.io);
        let mut cx = RunContext::new(run.variables).with_io(&io);
        if let Some(observer) = run.observer {
            cx = cx.with_observer(observer);
        }
        let fetched = runs.execute(call, run.prefix, &cx, run.cluster)?;
        if let Some(cluster) = run.cluster {
            cluster.barrier().map_err(RunError::Cluster)?;
        }
        drop(guard);
        Ok(fetched)
    }

    /// Runs the initializer ([`Runner::with_init`]) on `variables`: no prefix, no file.
    pub fn initialize(&self, variables: &VariableStore) -> Result<(), RunError> {
        let init = match &self.runs {
            Runs::Compiled {
                init: Some(init), ..
            } => init,
            _ => return Err(RunError::LeftOut { what: "init" }),
        };
        init.run(&RunContext::new(variables), Vec::new())
            .map_err(|err| RunError::Plan(Box::new(err)))?;
        Ok(())
    }

    /// Runs the save plan against `run.prefix` without writing a file: what each `SaveV2` and
    /// `MergeV2Checkpoints` would write is captured, to be written by
    /// [`CapturedWrite::commit`] (at once, or on a [`Background`](super::Background) thread).
    /// The prefix is not locked meanwhile (nothing is written); the caller checks it first
    /// ([`CheckpointIo::check_save_prefix`]) when it wants a bad prefix refused before the
    /// plan runs. A restore the plan makes reads through `run.io`.
    pub fn capture(&self, run: Run<'_>) -> Result<CapturedWrite, RunError> {
        if run.cluster.is_some() {
            return Err(RunError::CaptureInCluster);
        }
        let runs = self.runs_for(Call::Save)?;
        let recording = RecordingIo::new(run.io);
        let mut cx = RunContext::new(run.variables).with_io(&recording);
        if let Some(observer) = run.observer {
            cx = cx.with_observer(observer);
        }
        runs.execute(Call::Save, run.prefix, &cx, run.cluster)?;
        Ok(recording.into_write(run.prefix))
    }

    /// What runs `call`, or [`RunError::LeftOut`].
    fn runs_for(&self, call: Call) -> Result<Ready<'_>, RunError> {
        let left_out = || RunError::LeftOut { what: call.name() };
        Ok(match (&self.runs, call) {
            (
                Runs::Compiled {
                    save, save_feeds, ..
                },
                Call::Save,
            ) => Ready::Plan(save.as_ref().ok_or_else(left_out)?, save_feeds),
            (Runs::Compiled { restore, .. }, Call::Restore) => {
                Ready::Plan(restore.as_ref().ok_or_else(left_out)?, &[])
            }
            (Runs::Eager { saver, options }, _) => Ready::Eager(saver, options),
        })
    }
}

/// The plan (or saver) one call runs, with its fixed feeds.
enum Ready<'r> {
    Plan(&'r TaskPlans, &'r [HostTensor]),
    Eager(&'r Mutex<EagerSaver>, &'r TraceOptions),
}

impl Ready<'_> {
    /// Whether this can run as one task of `cluster`: a compiled plan with one task per
    /// process of it (eager mode runs in one process).
    fn check_cluster(&self, cluster: &dyn Rendezvous) -> Result<(), RunError> {
        match self {
            Ready::Plan(plan, _) => plan
                .check_cluster(cluster)
                .map_err(|err| RunError::Plan(Box::new(err))),
            Ready::Eager(..) => Err(RunError::EagerCluster),
        }
    }

    /// Runs `call` with `prefix` on `cx`: every task here, or `cluster`'s task alone.
    fn execute(
        self,
        call: Call,
        prefix: &str,
        cx: &RunContext<'_>,
        cluster: Option<&dyn Rendezvous>,
    ) -> Result<Vec<HostTensor>, RunError> {
        match self {
            Ready::Plan(plan, fixed) => {
                let mut feeds = Vec::with_capacity(fixed.len() + 1);
                feeds.extend_from_slice(fixed);
                feeds.push(HostTensor::string_scalar(prefix));
                let ran = match cluster {
                    None => plan.run(cx, feeds),
                    Some(cluster) => (plan.run_task(cluster, cx, &feeds))
                        .map(|fetched| fetched.into_iter().flatten().collect()),
                };
                ran.map_err(|err| {
                    // A failure before the plan ran (the cluster's size) stops the others too.
                    if let Some(cluster) = cluster {
                        cluster.abort(&crate::exec::error_line(&err));
                    }
                    RunError::Plan(Box::new(err))
                })
            }
            Ready::Eager(saver, options) => {
                lock(saver)
                    .call(cx, call, prefix, options)
                    .map_err(|err| RunError::Eager(Box::new(err)))?;
                Ok(Vec::new())
            }
        }
    }
}
