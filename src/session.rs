//! [`Session`]: graph-mode save and restore of a checkpoint plan, compiled once and run many
//! times, with the user's values going in and coming out by checkpoint key.
//!
//! A session is built from a plan and the names that drive it ([`SaverNames`]: the prefix
//! tensor to feed, the save target to fetch, the restore ops to run), like a TensorFlow
//! session running a `SaverDef`:
//!
//! * [`Session::from_spec`] traces a spec file with [`trace_flat_as`] (the plan TensorFlow's
//!   `MultiDeviceSaver.save`/`restore` adds to a graph, without the variables' initializers,
//!   which a session never runs);
//! * [`Session::from_meta_graph`] takes a `MetaGraphDef` and its `SaverDef`
//!   (`save_tensor_name` fetched with `filename_tensor_name` fed; `restore_op_name` run);
//! * [`Session::new`] takes any module and [`SaverNames`] ([`infer_targets`] finds them
//!   in a flat graph without a `SaverDef`).
//!
//! Values are bound to variables by reading the plan itself (see [`bind`]): each `SaveV2`
//! names its checkpoint keys and the variable each saved tensor reads; each `RestoreV2` output
//! is followed to the `AssignVariableOp` that stores it. A partitioned variable is one
//! checkpoint key with several slices: [`Session::assign`] takes the full tensor and cuts it,
//! [`Session::values`] puts the restored slices back together.
//!
//! # Failure safety
//!
//! The plans TensorFlow builds (and the tracer copies) write every shard under a temporary
//! prefix (`<prefix>_temp/part-…`) and only `MergeV2Checkpoints` moves them to the final
//! prefix, so a save that fails before the merge (a missing value is caught before anything
//! runs; a failing `SaveV2`) leaves an existing checkpoint at the prefix untouched. The merge
//! checks every source and destination name, writes the merged index to a temporary file and
//! moves the files into place as one journaled commit, so even a crash leaves the old
//! checkpoint or the new one ([`crate::bundle::journal`]). A save holds the prefix's lock
//! ([`CheckpointIo::begin_save`]): concurrent saves to one prefix run one after the other.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use saveplan::exec::HostTensor;
//! use saveplan::session::{Session, SessionOptions};
//! use saveplan::trace::spec::SpecFile;
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SpecFile::parse(&std::fs::read_to_string("spec.json")?)?;
//! let session = Session::from_spec(&spec, SessionOptions::default())?;
//! let mut values = BTreeMap::new();
//! values.insert("v".to_owned(), HostTensor::from_f32s(vec![3], &[1.0, 2.0, 3.0])?);
//! session.assign(values)?;
//! session.save("/tmp/ckpt")?;
//! session.restore("/tmp/ckpt")?;
//! let restored = session.values()?;
//! # Ok(())
//! # }
//! ```

pub mod bind;
mod bound;
mod capture;
pub mod eager;
pub mod error;
pub mod function_cache;
mod keys;
mod options;
pub mod runner;
mod targets;
pub mod values;

use rustc_hash::FxHashSet;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use saveplan_ir::{Module, SaverNames, verify_module};

pub use bind::Binding;
pub use capture::{Background, CapturedWrite, WriterError};
pub use eager::{EagerBuilder, EagerError, EagerFailure, EagerSaver};
pub use error::{
    BadCheckpointOp, InconsistentKey, MissingSavePlan, RunError, SessionError, Unbound,
};
pub use function_cache::{
    CacheEvent, Call, FunctionCache, FunctionKey, OptionsKey, RetracePolicy, RetraceReason,
};
pub use keys::{CheckpointTensor, Part};
pub use options::{Mode, Plans, SessionOptions, UnknownMode};
pub use runner::{Run, Runner};
pub use targets::{infer_targets, meta_graph_targets};

use crate::exec::rendezvous::{ClusterTask, GatherNames, Rendezvous, gather};
use crate::exec::{
    Backend, BundleIo, CheckpointIo, HostTensor, StepEvent, TaskPlans, VarKey, VarKeyRef,
    VariableStore,
};
use crate::export::MetaGraph;
use crate::trace::spec::SpecFile;
use crate::trace::{
    LeftOut, VariableOps, trace_flat_as, trace_flat_save_as, trace_flat_save_share,
    trace_flat_share,
};
use bound::Bound;
use keys::Keys;

/// A compiled save and restore plan with its variables.
pub struct Session {
    targets: SaverNames,
    runner: Runner,
    bound: Bound,
    io: Box<dyn CheckpointIo + Send>,
    /// When set, this process runs one task of the plans ([`Session::with_cluster`]).
    cluster: Option<Arc<dyn Rendezvous>>,
    /// The tensors other tasks save and restore, which a session tracing its task's share of
    /// a spec leaves out ([`SessionOptions::task`]), by checkpoint key: a saving session
    /// ignores their values, a restoring one still knows them ([`Session::restored_tensors`],
    /// [`Session::restored_owners`]).
    left_out: Arc<BTreeMap<String, LeftOut>>,
}

/// `values` without those of the keys `left_out` names (both sorted: walked together).
fn without(
    mut values: BTreeMap<String, HostTensor>,
    left_out: &BTreeMap<String, LeftOut>,
) -> BTreeMap<String, HostTensor> {
    if !left_out.is_empty() {
        let mut left_out = left_out.keys().peekable();
        // `retain` visits the keys in ascending order.
        values.retain(|key, _| {
            while left_out.next_if(|out| *out < key).is_some() {}
            left_out.next_if(|out| *out == key).is_none()
        });
    }
    values
}

/// Whether [`Session::from_spec`] traces the save plan alone: a graph-mode session that only
/// saves needs no restore ops, so it traces half the ops, named as in the full trace.
fn traces_save_only(options: &SessionOptions) -> bool {
    options.mode == Mode::Graph && !options.plans.restore()
}

/// The task whose share of a spec [`Session::from_spec`] traces ([`SessionOptions::task`]):
/// one process of a cluster, in graph mode, running one of the plans.
fn shared_task(options: &SessionOptions) -> Option<usize> {
    let one_plan = options.plans != Plans::Both;
    options
        .task
        .filter(|_| options.mode == Mode::Graph && one_plan)
}

/// Heap a session's trace writes per op it traces, measured at 100,000 float32[64] variables
/// on 1 and 8 tasks (the trace's extent in mimalloc's heap, holes included).
const TRACE_HEAP_PER_OP: usize = 1100;

impl Session {
    /// About how many bytes of heap [`Session::from_spec`] writes while it traces a spec of
    /// `n_variables` variables into a session of these `options`: four ops per variable of
    /// about 1.1 KB each, two ops when a graph-mode session only saves. For a program that
    /// has that much heap populated ahead on another core
    /// ([`crate::process::prefault_heap`]), as the `saveplan` binary does.
    pub fn trace_heap_estimate(n_variables: usize, options: &SessionOptions) -> usize {
        let ops_per_variable = if traces_save_only(options) { 2 } else { 4 };
        n_variables
            .saturating_mul(ops_per_variable)
            .saturating_mul(TRACE_HEAP_PER_OP)
    }

    /// About how many variables [`Session::from_spec`] traces of `spec`: all of them, but
    /// about one task's share for a session that traces its task's share
    /// ([`SessionOptions::task`]; reckoned from the distinct device strings, each taken for a
    /// task of its own). For [`Session::trace_heap_estimate`].
    pub fn traced_variables(spec: &SpecFile, options: &SessionOptions) -> usize {
        let n = spec.variables.len();
        if shared_task(options).is_none() {
            return n;
        }
        let devices: FxHashSet<&str> = (spec.variables.iter())
            .map(|variable| variable.device.as_str())
            .collect();
        n / devices.len().max(1) + devices.len()
    }

    /// Traces `spec` once ([`trace_flat_as`] with [`VariableOps::Handles`]: every op the
    /// save and restore plans reach, named as `trace_flat` names it, and no initializers)
    /// and binds its checkpoint keys to variables (read off the tracer's record,
    /// `FlatTrace::keys`, when it has one; walked in the graph otherwise). In graph mode the
    /// traced save and restore plans are compiled (a session without its restore plan,
    /// [`Plans::SaveOnly`], traces the save plan alone: [`trace_flat_save_as`]); in eager mode
    /// each call runs the spec's [`EagerSaver`] instead.
    ///
    /// `spec` is lent (`&spec`) or handed over (`spec`): a spec handed over is freed as its
    /// trackables are made ([`SpecFile::into_trackables`]), so that the trace takes its memory
    /// back rather than fresh pages. Every `from_spec_*` takes it either way.
    pub fn from_spec<'a>(
        spec: impl Into<Cow<'a, SpecFile>>,
        options: SessionOptions,
    ) -> Result<Session, SessionError> {
        Session::from_spec_given(spec.into(), options, |_| None)
    }

    /// [`Session::from_spec`], then [`Session::assign`] of `values`, with the values put in
    /// on one core while the plans compile on the other (in eager mode, after). Errors come
    /// in the order of the two calls.
    pub fn from_spec_with_values<'a>(
        spec: impl Into<Cow<'a, SpecFile>>,
        options: SessionOptions,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Session, SessionError> {
        Session::from_spec_given(spec.into(), options, move |_| Some(values))
    }

    /// [`Session::from_spec_with_values`], asking `values` for the values only once the keys
    /// are bound (on the thread that bound them, while the plans compile on the other; in
    /// eager mode, after): they can still be in the making, read from a file on another
    /// thread while the spec traces. `values` is handed the tensors whose values the session
    /// ignores, by checkpoint key: the other tasks' that a session saving its task's share
    /// leaves out ([`SessionOptions::task`]; none otherwise), which it need not make. When
    /// `values` gives `None` (it failed; the caller knows why), the session is made without
    /// them. Errors come in the order of the two calls.
    pub fn from_spec_with_values_when_bound<'a>(
        spec: impl Into<Cow<'a, SpecFile>>,
        options: SessionOptions,
        values: impl FnOnce(&BTreeMap<String, LeftOut>) -> Option<BTreeMap<String, HostTensor>> + Send,
    ) -> Result<Session, SessionError> {
        Session::from_spec_given(spec.into(), options, values)
    }

    /// [`Session::from_spec`], with the values `values` gives (handed the tensors whose
    /// values are ignored) assigned, if any.
    fn from_spec_given(
        spec: Cow<'_, SpecFile>,
        options: SessionOptions,
        values: impl FnOnce(&BTreeMap<String, LeftOut>) -> Option<BTreeMap<String, HostTensor>> + Send,
    ) -> Result<Session, SessionError> {
        // A spec handed over is let go of as its trackables are made, so that they and the
        // trace take its memory back (its errors first, then the options', as for one lent).
        let (trackables, trace_options) = match spec {
            Cow::Borrowed(spec) => (spec.trackables()?, spec.options()?),
            Cow::Owned(spec) => {
                let trace_options = spec.options();
                (spec.into_trackables()?, trace_options?)
            }
        };
        // A task of a cluster that only saves or only restores traces its share when the
        // plan allows it; the values of the keys it leaves out are other tasks' to check and
        // save, and the tensors it leaves out other tasks' to restore.
        let share = match shared_task(&options) {
            Some(task) if traces_save_only(&options) => {
                trace_flat_save_share(&trackables, &trace_options, task)?
            }
            Some(task) => trace_flat_share(&trackables, &trace_options, task)?,
            None => None,
        };
        let (trace, left_out) = match share {
            Some(share) => (share.trace, share.left_out),
            None if traces_save_only(&options) => (
                trace_flat_save_as(&trackables, &trace_options, VariableOps::Handles)?,
                BTreeMap::new(),
            ),
            None => (
                trace_flat_as(&trackables, &trace_options, VariableOps::Handles)?,
                BTreeMap::new(),
            ),
        };
        let left_out = Arc::new(left_out);
        // Only a session that saves takes values (one that only restores refuses every one).
        let ignored = match options.plans.save() {
            true => Arc::clone(&left_out),
            false => Arc::default(),
        };
        let values = move || values(&ignored).map(|values| without(values, &ignored));
        // The session takes the saver's names (one per restored variable) as they are, and
        // the keys the tracer bound, when it bound them all (with those a share left out).
        let (module, names) = (trace.module, trace.saver);
        let keys = match &trace.keys {
            Some(traced) => Keys::Traced(traced, &left_out),
            None => Keys::Walk,
        };
        let (session, trackables) = match options.mode {
            Mode::Graph => (
                Session::compiled(&module, names, keys, options, values),
                Some(trackables),
            ),
            Mode::Eager => {
                let saver = EagerSaver::new(trackables)?;
                let runner = Runner::eager(saver, trace_options, options.backend);
                let session =
                    Session::bound(&module, names, keys, runner, options).and_then(|session| {
                        match values() {
                            Some(values) => session.assign(values).map(|()| session),
                            None => Ok(session),
                        }
                    });
                (session, None)
            }
        };
        let session = session.map(|session| Session {
            left_out,
            ..session
        });
        // The session keeps nothing else of the trace or of the input. Freeing a graph of N
        // variables (millions of small allocations, ~0.2 s at 100k) and the N trackables is
        // left to a pool thread, so that the caller gets its session without waiting for it.
        rayon::spawn(move || drop((module, trackables)));
        session
    }

    /// Compiles the save and restore plans of a meta graph's `SaverDef`.
    pub fn from_meta_graph(
        meta: &MetaGraph,
        options: SessionOptions,
    ) -> Result<Session, SessionError> {
        let targets = meta_graph_targets(meta)?;
        Session::new(&meta.module, targets, options)
    }

    /// Compiles the save and restore plans of `module` for `targets` and binds their
    /// checkpoint keys to variables (graph mode only: eager mode needs a spec).
    /// With the JIT backend, each plan's native code is generated at its first run
    /// ([`crate::exec::Executor::lazy`]), so a session pays only for the plans it runs.
    pub fn new(
        module: &Module,
        targets: SaverNames,
        options: SessionOptions,
    ) -> Result<Session, SessionError> {
        Session::compiled(module, targets, Keys::Walk, options, || None)
    }

    /// [`Session::new`], then [`Session::assign`] of `values`, with the values put in on one
    /// core while the plans compile on the other. Errors come in the order of the two calls.
    pub fn new_with_values(
        module: &Module,
        targets: SaverNames,
        options: SessionOptions,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Session, SessionError> {
        Session::compiled(module, targets, Keys::Walk, options, move || Some(values))
    }

    /// [`Session::new`], with the checkpoint keys bound as `keys` says and `values` assigned
    /// when given.
    fn compiled(
        module: &Module,
        targets: SaverNames,
        keys: Keys<'_>,
        options: SessionOptions,
        values: impl FnOnce() -> Option<BTreeMap<String, HostTensor>> + Send,
    ) -> Result<Session, SessionError> {
        if options.mode == Mode::Eager {
            return Err(SessionError::EagerNeedsSpec);
        }
        let feeds = [targets.filename_tensor_name.as_str()];
        let restore_targets: Vec<&str> =
            targets.restore_targets.iter().map(String::as_str).collect();
        let compile = |verified, targets: &[&str], what| {
            TaskPlans::compile_for(verified, targets, &feeds, options.backend, options.task)
                .map_err(|source| SessionError::Compile {
                    what,
                    source: Box::new(source),
                })
        };
        // Four independent walks of one graph, done at the same time: the two plans, after
        // the verifier (the one place a graph to run enters: verified here, trusted by the
        // plan compiler), and the two key bindings, which read any graph and so need not
        // wait for it. This thread verifies and compiles the restore plan, the longest job;
        // the other binds the keys (about as long as verifying and the restore plan together,
        // far shorter when the tracer bound them), makes the session of them and puts in the
        // values given, and then takes the save plan if it is still left to be taken.
        let wanted = options.plans;
        let (plans, bound) = rayon::join(
            || {
                let verified = verify_module(module).map_err(SessionError::Invalid)?;
                let (restore, save) = rayon::join(
                    || {
                        wanted
                            .restore()
                            .then(|| compile(verified, &restore_targets, "restore"))
                            .transpose()
                    },
                    || {
                        wanted
                            .save()
                            .then(|| compile(verified, &[&targets.save_target], "save"))
                            .transpose()
                    },
                );
                // Errors come in a fixed order, whichever job ends first: the verifier's,
                // the save plan's, the restore plan's, then (below) the keys'.
                let save = save?;
                Ok::<_, SessionError>((save, restore?))
            },
            || {
                let keys = keys.bind(
                    module,
                    wanted.save().then_some(targets.save_target.as_str()),
                    wanted.restore().then_some(&restore_targets),
                )?;
                let bound = Bound::new(keys);
                if let Some(values) = values() {
                    bound.assign(values)?;
                }
                Ok::<_, SessionError>(bound)
            },
        );
        let (save, restore) = plans?;
        let runner = Runner::compiled(save, restore, options.backend);
        Ok(Session::assemble(targets, runner, bound?, options))
    }

    /// A session running `runner`, with the checkpoint keys of `module`'s plans for
    /// `targets` bound to variables.
    fn bound(
        module: &Module,
        targets: SaverNames,
        keys: Keys<'_>,
        runner: Runner,
        options: SessionOptions,
    ) -> Result<Session, SessionError> {
        let restore_targets: Vec<&str> =
            targets.restore_targets.iter().map(String::as_str).collect();
        let keys = keys.bind(module, Some(&targets.save_target), Some(&restore_targets))?;
        Ok(Session::assemble(
            targets,
            runner,
            Bound::new(keys),
            options,
        ))
    }

    /// A session of its parts.
    fn assemble(
        targets: SaverNames,
        runner: Runner,
        bound: Bound,
        options: SessionOptions,
    ) -> Session {
        Session {
            targets,
            runner,
            bound,
            io: Box::new(BundleIo {
                write: options.write,
            }),
            cluster: None,
            left_out: Arc::default(),
        }
    }

    /// Replaces the checkpoint backend (the default writes TensorFlow bundles on disk).
    pub fn with_io(mut self, io: Box<dyn CheckpointIo + Send>) -> Session {
        self.io = io;
        self
    }

    /// The same session running one task of its plans, `rendezvous.task()`, in a cluster of
    /// processes that meet through `rendezvous` (one process per task of the plan, in sorted
    /// `(job, replica, task)` order: [`Session::tasks`]). Every process saves to and
    /// restores from a prefix all of them reach. Without it (the default), every task runs
    /// in this process.
    ///
    /// The variables only other tasks use are let go of here: give every value first
    /// ([`Session::assign`] takes the whole map, the same in every process), and this process
    /// keeps its task's alone (values memory-mapped from a file are then never read for the
    /// others).
    pub fn with_cluster(mut self, rendezvous: Arc<dyn Rendezvous>) -> Session {
        let task = rendezvous.task();
        // Only when every plan is split by task (a whole plan uses every variable).
        let plans: Vec<&TaskPlans> = [Call::Save, Call::Restore]
            .into_iter()
            .filter_map(|call| self.runner.task_plans(call))
            .collect();
        let used: Option<Vec<&[VarKey]>> = (!plans.is_empty())
            .then(|| {
                (plans.iter())
                    .map(|plans| plans.task_variables(task))
                    .collect()
            })
            .flatten();
        if let Some(used) = used {
            self.bound.variables.keep_only(used.into_iter().flatten());
        }
        self.cluster = Some(rendezvous);
        self
    }

    /// Takes the session out of its cluster ([`Session::with_cluster`]): returns the
    /// rendezvous, if it had one, and the session then runs every task itself. For a
    /// process that is done with the cluster and lets its rendezvous go (MPI's ends when the
    /// last holder drops it) while it leaves the rest of the session to the exit.
    pub fn leave_cluster(&mut self) -> Option<Arc<dyn Rendezvous>> {
        self.cluster.take()
    }

    /// The tasks the plan of `call` runs on, sorted by `(job, replica, task)`: one
    /// (`/job:localhost/replica:0/task:0` when its ops name no task) unless it spans several.
    /// `None` in eager mode and for a plan left out.
    pub fn tasks(&self, call: Call) -> Option<&[ClusterTask]> {
        self.runner.task_plans(call).map(TaskPlans::tasks)
    }

    /// The targets the session runs.
    pub fn targets(&self) -> &SaverNames {
        &self.targets
    }

    /// The tensors the save plan writes, by checkpoint key.
    pub fn saved_tensors(&self) -> &BTreeMap<String, CheckpointTensor> {
        &self.bound.saved
    }

    /// The tensors the restore plan reads, by checkpoint key (also, in a session of one task's
    /// share of a spec, [`SessionOptions::task`], those the other tasks' shares read).
    pub fn restored_tensors(&self) -> &BTreeMap<String, CheckpointTensor> {
        &self.bound.restored
    }

    /// The compiled save plan, task by task ([`TaskPlans::whole_plan`] when it runs whole);
    /// `None` in eager mode, which traces each call, and when [`SessionOptions::plans`] left
    /// it out.
    pub fn save_plan(&self) -> Option<&TaskPlans> {
        self.runner.task_plans(Call::Save)
    }

    /// The compiled restore plan, task by task; `None` in eager mode and when
    /// [`SessionOptions::plans`] left it out.
    pub fn restore_plan(&self) -> Option<&TaskPlans> {
        self.runner.task_plans(Call::Restore)
    }

    /// The backend the plans (in eager mode, the traced functions) run on.
    pub fn backend(&self) -> Backend {
        self.runner.backend()
    }

    /// The mode the session runs in.
    pub fn mode(&self) -> Mode {
        self.runner.mode()
    }

    /// What eager mode's function cache did on each call so far, oldest first (when and why
    /// a call traced a function); empty in graph mode.
    pub fn trace_log(&self) -> Vec<CacheEvent> {
        self.runner.trace_log()
    }

    /// The variables.
    pub fn variables(&self) -> &VariableStore {
        &self.bound.variables
    }

    /// Puts `values` (checkpoint key → full tensor) into the variables the save plan reads.
    /// Every key must be saved by the plan and every saved key given, with the plan's dtype
    /// and shape; nothing is stored unless all are. A whole tensor is moved into its variable
    /// without copying; a sliced one is cut into its parts.
    /// A session that traced its task's share of a spec to save it
    /// ([`SessionOptions::task`]) ignores the values of the keys other tasks save.
    pub fn assign(&self, values: BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
        let values = match self.save_plan() {
            Some(_) => without(values, &self.left_out),
            // No plan saves them: every value is refused, as the whole plan's session does.
            None => values,
        };
        self.bound.assign(values)
    }

    /// Runs the save plan with `prefix` fed. Fails before running anything if a variable the
    /// plan reads has no value.
    pub fn save(&self, prefix: &str) -> Result<(), SessionError> {
        self.save_observed(prefix, None)
    }

    /// [`Session::save`], calling `observer` after every step.
    pub fn save_observed(
        &self,
        prefix: &str,
        observer: Option<&(dyn Fn(&StepEvent<'_>) + Sync)>,
    ) -> Result<(), SessionError> {
        self.bound.check_initialized()?;
        self.run(Call::Save, prefix, observer)
    }

    /// Runs the restore plan with `prefix` fed; read the values with [`Session::values`].
    pub fn restore(&self, prefix: &str) -> Result<(), SessionError> {
        self.restore_observed(prefix, None)
    }

    /// [`Session::restore`], calling `observer` after every step.
    pub fn restore_observed(
        &self,
        prefix: &str,
        observer: Option<&(dyn Fn(&StepEvent<'_>) + Sync)>,
    ) -> Result<(), SessionError> {
        self.run(Call::Restore, prefix, observer)
    }

    /// In a cluster run ([`Session::with_cluster`]), after a restore: every other task sends
    /// the variables it holds to task 0, which takes them into its own, so that task 0's
    /// [`Session::values`] are the whole restore's. Returns whether this process holds them
    /// (task 0, or a session without a cluster, which has nothing to gather).
    pub fn gather(&self) -> Result<bool, SessionError> {
        self.gather_where(|_| true)
    }

    /// [`Session::gather`] of the variables `send` keeps alone: the others stay where they
    /// are (their values written some other way, as `restore --out` writes a large tensor
    /// in place from the task that holds it). Task 0 holds its variables' lock from the
    /// first value it takes to the end of the gather: another thread using the session's
    /// variables meanwhile waits for it.
    pub fn gather_where(&self, send: impl Fn(&VarKey) -> bool) -> Result<bool, SessionError> {
        let Some(cluster) = self.cluster.as_deref() else {
            return Ok(true);
        };
        let store = &self.bound.variables;
        // Task 0 holds its own already; the others' come in as (container, name) pairs.
        let own = || -> Result<Vec<(Vec<String>, HostTensor)>, SessionError> {
            if cluster.task() == 0 {
                return Ok(Vec::new());
            }
            Ok((store.entries().into_iter())
                .filter(|(key, _)| send(key))
                .map(|(key, value)| (gather_name(key), value))
                .collect())
        };
        // Put under one lock for the whole gather, taken at the first value (on task 0, which
        // reads nothing of the store meanwhile).
        let mut writer = None;
        let take = |name: &[&str], value: HostTensor| {
            let key = gathered_key(name);
            (writer.get_or_insert_with(|| store.writer()))
                .put(key, value)
                .map(drop)
                .map_err(|source| SessionError::Variable {
                    key: key.shared_name.to_owned(),
                    source,
                })
        };
        let names = GatherNames {
            arity: 2,
            what: "(container, name) pairs",
        };
        gather(cluster, names, own, take)
    }

    /// The values of the variables the restore plan assigns, by checkpoint key: whole tensors
    /// shared with the variables, sliced ones assembled into their full shape. A sliced tensor
    /// whose restored slices do not cover its full shape is an error
    /// ([`SessionError::SlicesDoNotCover`]), never a value with zeros where nothing was read.
    pub fn values(&self) -> Result<BTreeMap<String, HostTensor>, SessionError> {
        self.bound.values_where(|_| true)
    }

    /// [`Session::values`] of the tensors `keep` takes, by their index in
    /// [`Session::restored_tensors`]' order.
    pub fn values_where(
        &self,
        keep: impl Fn(usize) -> bool,
    ) -> Result<BTreeMap<String, HostTensor>, SessionError> {
        self.bound.values_where(keep)
    }

    /// In a cluster run ([`Session::with_cluster`]) whose restore plan is split by task: for
    /// each tensor the restore plan reads, in [`Session::restored_tensors`]' order, the first
    /// task (index into [`Session::tasks`]) whose partition holds every variable of it, or
    /// `None` when its slices are held by several tasks. The same in every process of the
    /// cluster (it comes from the plan alone); `None` without a cluster, or for a restore plan
    /// that runs whole.
    pub fn restored_owners(&self) -> Option<Vec<Option<usize>>> {
        self.cluster.as_ref()?;
        let plans = self.runner.task_plans(Call::Restore)?;
        let held: Vec<&[VarKey]> = (0..plans.tasks().len())
            .map(|task| plans.task_variables(task))
            .collect::<Option<_>>()?;
        let owners = (self.bound.restored.values())
            .map(|tensor| {
                // A tensor the share left out is its task's, a whole variable.
                if let Some(left_out) = self.left_out.get(&tensor.key) {
                    return Some(left_out.task);
                }
                (held.iter()).position(|variables| {
                    (tensor.parts.iter())
                        .all(|part| variables.binary_search(&part.variable).is_ok())
                })
            })
            .collect();
        Some(owners)
    }

    /// The rendezvous of a cluster run ([`Session::with_cluster`]), if the session has one.
    pub fn cluster(&self) -> Option<&dyn Rendezvous> {
        self.cluster.as_deref()
    }

    /// Runs `call` with `prefix` through the session's [`Runner`].
    fn run(
        &self,
        call: Call,
        prefix: &str,
        observer: Option<&(dyn Fn(&StepEvent<'_>) + Sync)>,
    ) -> Result<(), SessionError> {
        let run = Run {
            prefix,
            variables: &self.bound.variables,
            io: self.io.as_ref(),
            observer,
            cluster: self.cluster.as_deref(),
        };
        self.runner.run(call, run).map_err(|err| match err {
            RunError::LeftOut { what } => SessionError::PlanLeftOut { what },
            RunError::Prefix(source) => SessionError::BadPrefix {
                prefix: prefix.to_owned(),
                source,
            },
            RunError::Plan(source) => SessionError::Run {
                what: call.name(),
                prefix: prefix.to_owned(),
                source,
            },
            RunError::Eager(source) => SessionError::Eager(source),
            RunError::Cluster(source) => SessionError::Cluster(source),
            other => SessionError::Runner(Box::new(other)),
        })?;
        Ok(())
    }
}

/// The name a variable travels under in a gather ([`Session::gather_where`]): its container
/// and its shared name.
fn gather_name(key: VarKey) -> Vec<String> {
    vec![key.container, key.shared_name]
}

/// The variable of a name [`gather_name`] made (the gather hands over names of two strings).
fn gathered_key<'a>(name: &[&'a str]) -> VarKeyRef<'a> {
    VarKeyRef {
        container: name.first().copied().unwrap_or_default(),
        shared_name: name.get(1).copied().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gathered_name_is_the_variable_it_was_made_of() {
        for key in [
            VarKey::new("", "v"),
            VarKey::new("box", "v/w"),
            VarKey::new("c", ""),
        ] {
            let name = gather_name(key.clone());
            let name: Vec<&str> = name.iter().map(String::as_str).collect();
            assert_eq!(gathered_key(&name).to_key(), key);
        }
    }
}
