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
pub mod eager;
pub mod error;
pub mod function_cache;
pub mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::hash::BuildHasher;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use saveplan_ir::{DType, Module, Op, SaverNames, saver_ops, verify_module};

pub use bind::Binding;
pub use eager::{EagerBuilder, EagerError, EagerFailure, EagerSaver};
pub use error::{BadCheckpointOp, InconsistentKey, MissingSavePlan, SessionError, Unbound};
pub use function_cache::{
    CacheEvent, Call, FunctionCache, FunctionKey, OptionsKey, RetracePolicy, RetraceReason,
};

use saveplan_ir::slice::{ShapeAndSlice, SliceError};

use crate::bundle::WriteOptions;
use crate::exec::sync::lock;
use crate::exec::{
    Backend, BundleIo, CheckpointIo, CompiledPlan, Executor, HostTensor, RunContext, RunIo,
    StepEvent, VarKey, VarKeyRef, VarSlot, VariableStore,
};
use crate::export::MetaGraph;
use crate::trace::spec::SpecFile;
use crate::trace::{TraceOptions, TracedKeys, VariableOps, trace_flat_as, trace_flat_save_as};
use values::Region;

/// How a session runs its save and restore.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Graph mode, as a TensorFlow session runs a `SaverDef`: the plans are compiled once and
    /// run with the prefix fed.
    #[default]
    Graph,
    /// Eager TensorFlow's `MultiDeviceSaver`: each call runs its ops as they are traced (one
    /// task), or traces a function and runs it (several tasks; see [`Session::trace_log`]).
    /// Only a session made from a spec has the trackables this needs.
    Eager,
}

/// How a session runs its plans.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionOptions {
    /// How checkpoint files are written (fsync or not).
    pub write: WriteOptions,
    /// The executor: the reference interpreter (default) or the JIT.
    pub backend: Backend,
    /// Graph (default) or eager mode.
    pub mode: Mode,
    /// Which plans a graph-mode session compiles and binds (default: both). Eager mode
    /// traces each call and ignores it.
    pub plans: Plans,
}

/// The plans a graph-mode [`Session`] compiles and binds keys for. A program that only saves
/// (the CLI's `save` and `run --save`) or only restores skips the other plan's compile and
/// binding, about a third of [`Session::new`]'s work at 100,000 variables; the plan left out
/// fails with [`SessionError::PlanLeftOut`] when asked to run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Plans {
    /// The save and the restore plan.
    #[default]
    Both,
    /// The save plan only.
    SaveOnly,
    /// The restore plan only.
    RestoreOnly,
}

impl Plans {
    /// Whether the save plan is compiled.
    pub fn save(self) -> bool {
        self != Plans::RestoreOnly
    }

    /// Whether the restore plan is compiled.
    pub fn restore(self) -> bool {
        self != Plans::SaveOnly
    }
}

/// A compiled save and restore plan with its variables.
pub struct Session {
    targets: SaverNames,
    runner: Runner,
    bound: Bound,
    io: Box<dyn CheckpointIo + Send>,
}

/// A session's variables and the checkpoint tensors bound to them: the part of a session made
/// while its plans compile (and given its values then, [`Session::new_with_values`]).
struct Bound {
    saved: BTreeMap<String, CheckpointTensor>,
    restored: BTreeMap<String, CheckpointTensor>,
    variables: VariableStore,
    /// The slots of the saved tensors' parts in `variables`, in key and part order; resolved
    /// by the first [`Session::assign`] or save.
    saved_slots: OnceLock<Box<[VarSlot]>>,
    /// The slots of the restored tensors' parts, likewise; resolved by the first
    /// [`Session::values`].
    restored_slots: OnceLock<Box<[VarSlot]>>,
    /// Whether the last [`Session::assign`] gave every saved variable a value.
    all_assigned: AtomicBool,
}

impl Bound {
    /// The session part of `keys`, with no variable set yet.
    fn new((saved, restored): BoundKeys) -> Bound {
        Bound {
            saved,
            restored,
            variables: VariableStore::new(),
            saved_slots: OnceLock::new(),
            restored_slots: OnceLock::new(),
            all_assigned: AtomicBool::new(false),
        }
    }

    /// [`Session::assign`].
    fn assign(&self, values: BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
        // Checked in place first, so that nothing is stored unless all fit; the walk that
        // stores them then pairs the two maps by position.
        self.check_assignment(&values)?;
        self.all_assigned.store(false, Ordering::Release);
        // Every saved tensor has its value, in key order: the order of the slots.
        let mut slots = self.saved_slots().iter();
        // One lock for every put (nothing below touches the store otherwise).
        let mut writer = self.variables.writer();
        for ((_, value), tensor) in values.into_iter().zip(self.saved.values()) {
            let mut value = Some(value);
            for (index, part) in tensor.parts.iter().enumerate() {
                let slot = *slots.next().expect("one slot per part");
                let whole = value.as_ref().expect("taken by the last part only");
                let part_value = match &part.region {
                    // The last part takes the value itself: a clone would touch its reference
                    // counts, a cache miss per variable that is most of assigning a small one.
                    None if index + 1 == tensor.parts.len() => {
                        value.take().expect("taken by the last part only")
                    }
                    None => whole.clone(),
                    Some(region) => {
                        values::extract(whole, region).map_err(|source| SessionError::Tensor {
                            key: tensor.key.clone(),
                            source,
                        })?
                    }
                };
                writer
                    .put_at(slot, part_value)
                    .map_err(|source| SessionError::Variable {
                        key: tensor.key.clone(),
                        source,
                    })?;
            }
        }
        drop(writer);
        self.all_assigned.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether `values` gives exactly the saved tensors, each with its dtype and shape: the
    /// first given key not saved, else the first wrong value, else the first saved key not
    /// given, is the error.
    fn check_assignment(&self, values: &BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
        // Both maps are sorted by key, so one walk pairs them without lookups.
        let mut given = values.iter().peekable();
        let mut missing = None;
        for tensor in self.saved.values() {
            // One comparison per pair (they are long, similar strings): the given key is taken
            // when it is not past this tensor's.
            let mut order = std::cmp::Ordering::Greater;
            let taken = given.next_if(|(key, _)| {
                order = key.as_str().cmp(&tensor.key);
                order.is_le()
            });
            match (taken, order) {
                (Some((key, _)), std::cmp::Ordering::Less) => {
                    return Err(SessionError::UnknownKey { key: key.clone() });
                }
                (Some((_, value)), _) => check_value(tensor, value)?,
                (None, _) => {
                    missing.get_or_insert_with(|| tensor.key.clone());
                }
            }
        }
        if let Some((key, _)) = given.next() {
            return Err(SessionError::UnknownKey { key: key.clone() });
        }
        match missing {
            Some(key) => Err(SessionError::MissingValue { key }),
            None => Ok(()),
        }
    }

    /// The slots of the saved tensors' parts (see `saved_slots`). Takes the store's write
    /// lock the first time: not to be called while holding it.
    fn saved_slots(&self) -> &[VarSlot] {
        self.part_slots(&self.saved, &self.saved_slots)
    }

    /// The slots of the restored tensors' parts, likewise.
    fn restored_slots(&self) -> &[VarSlot] {
        self.part_slots(&self.restored, &self.restored_slots)
    }

    /// The slots of every part of `tensors` in `variables`, in order, resolved once into
    /// `cell`.
    fn part_slots<'s>(
        &'s self,
        tensors: &BTreeMap<String, CheckpointTensor>,
        cell: &'s OnceLock<Box<[VarSlot]>>,
    ) -> &'s [VarSlot] {
        cell.get_or_init(|| {
            let parts = tensors.values().flat_map(|tensor| &tensor.parts);
            self.variables
                .slots(parts.map(|part| VarKeyRef::from(&part.variable)))
        })
    }
}

/// What runs a session's save and restore.
enum Runner {
    /// Graph mode: the compiled save and restore plans (those [`Plans`] asked for).
    Graph {
        save: Option<Executor>,
        restore: Option<Executor>,
        backend: Backend,
    },
    /// Eager mode: the spec's saver and the options it was traced with.
    Eager {
        saver: Mutex<EagerSaver>,
        options: Box<TraceOptions>,
        backend: Backend,
    },
}

/// A checkpoint key and the variables holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointTensor {
    /// The checkpoint key.
    pub key: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its full shape, when the plan fixes it (always for a sliced tensor).
    pub shape: Option<Vec<u64>>,
    /// The variables holding it: one for a whole tensor, one per slice otherwise.
    pub parts: Vec<Part>,
}

/// One variable holding a checkpoint tensor or a slice of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The variable.
    pub variable: VarKey,
    /// The slice spec as the plan writes it; empty for a whole tensor.
    pub slice_spec: String,
    /// The slice, `(start, length)` per dimension of the full tensor; `None` for a whole one.
    pub region: Option<Region>,
}

/// The names a `SaverDef`-carrying meta graph runs.
pub fn meta_graph_targets(meta: &MetaGraph) -> Result<SaverNames, SessionError> {
    let saver = meta.saver_def.as_ref().ok_or(SessionError::NoSaverDef)?;
    Ok(saver.names())
}

/// Finds the targets of a flat graph without a `SaverDef` (TensorFlow's `flat_graph`, or
/// ours): the save target is the one top-level `MergeV2Checkpoints` (or, without one, the
/// one `SaveV2`), the prefix is the one string `Placeholder` it depends on, and the restore
/// targets are the `AssignVariableOp`s (TF1: `Assign`s) fed by a top-level `RestoreV2`.
pub fn infer_targets(module: &Module) -> Result<SaverNames, SessionError> {
    let graph = &module.graph;
    let find_all = |op: Op| -> Vec<_> {
        graph
            .ops()
            .into_iter()
            .filter(|&id| graph.op(id).op == op)
            .collect()
    };
    let merges = find_all(Op::MergeV2Checkpoints);
    let candidates = if merges.is_empty() {
        find_all(Op::SaveV2)
    } else {
        merges
    };
    let save = match candidates.as_slice() {
        [one] => *one,
        [] => {
            return Err(SessionError::NoSavePlan(MissingSavePlan::NoSaveOp));
        }
        _ => {
            return Err(SessionError::NoSavePlan(MissingSavePlan::SeveralSaves));
        }
    };
    let string_placeholder = |id| {
        let node = graph.op(id);
        node.op == Op::Placeholder
            && node.attrs.get("dtype") == Some(&saveplan_ir::AttrValue::Type(DType::String))
    };
    let mut placeholders: Vec<String> = graph
        .ancestors([save])
        .into_iter()
        .filter(|&id| string_placeholder(id))
        .map(|id| graph.op(id).name.clone())
        .collect();
    placeholders.sort();
    let [filename] = placeholders.as_slice() else {
        return Err(SessionError::NoSavePlan(MissingSavePlan::Placeholders {
            count: placeholders.len(),
        }));
    };
    Ok(SaverNames {
        filename_tensor_name: format!("{filename}:0"),
        save_target: graph.op(save).name.clone(),
        restore_targets: saver_ops::restore_targets(graph),
    })
}

/// Whether [`Session::from_spec`] traces the save plan alone: a graph-mode session that only
/// saves needs no restore ops, so it traces half the ops, named as in the full trace.
fn traces_save_only(options: &SessionOptions) -> bool {
    options.mode == Mode::Graph && !options.plans.restore()
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

    /// Traces `spec` once ([`trace_flat_as`] with [`VariableOps::Handles`]: every op the
    /// save and restore plans reach, named as `trace_flat` names it, and no initializers)
    /// and binds its checkpoint keys to variables (read off the tracer's record,
    /// `FlatTrace::keys`, when it has one; walked in the graph otherwise). In graph mode the
    /// traced save and restore plans are compiled (a session without its restore plan,
    /// [`Plans::SaveOnly`], traces the save plan alone: [`trace_flat_save_as`]); in eager mode
    /// each call runs the spec's [`EagerSaver`] instead.
    pub fn from_spec(spec: &SpecFile, options: SessionOptions) -> Result<Session, SessionError> {
        Session::from_spec_given(spec, options, || None)
    }

    /// [`Session::from_spec`], then [`Session::assign`] of `values`, with the values put in
    /// on one core while the plans compile on the other (in eager mode, after). Errors come
    /// in the order of the two calls.
    pub fn from_spec_with_values(
        spec: &SpecFile,
        options: SessionOptions,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Session, SessionError> {
        Session::from_spec_given(spec, options, move || Some(values))
    }

    /// [`Session::from_spec_with_values`], asking `values` for the values only once the keys
    /// are bound (on the thread that bound them, while the plans compile on the other; in
    /// eager mode, after): they can still be in the making, read from a file on another
    /// thread while the spec traces. When `values` gives `None` (it failed; the caller knows
    /// why), the session is made without them. Errors come in the order of the two calls.
    pub fn from_spec_with_values_when_bound(
        spec: &SpecFile,
        options: SessionOptions,
        values: impl FnOnce() -> Option<BTreeMap<String, HostTensor>> + Send,
    ) -> Result<Session, SessionError> {
        Session::from_spec_given(spec, options, values)
    }

    /// [`Session::from_spec`], with the values `values` gives assigned, if any.
    fn from_spec_given(
        spec: &SpecFile,
        options: SessionOptions,
        values: impl FnOnce() -> Option<BTreeMap<String, HostTensor>> + Send,
    ) -> Result<Session, SessionError> {
        let trackables = spec.trackables()?;
        let trace_options = spec.options()?;
        let trace = if traces_save_only(&options) {
            trace_flat_save_as(&trackables, &trace_options, VariableOps::Handles)?
        } else {
            trace_flat_as(&trackables, &trace_options, VariableOps::Handles)?
        };
        // The session takes the saver's names (one per restored variable) as they are, and
        // the keys the tracer bound, when it bound them all.
        let (module, names) = (trace.module, trace.saver);
        let keys = match &trace.keys {
            Some(traced) => Keys::Traced(traced),
            None => Keys::Walk,
        };
        let session = match options.mode {
            Mode::Graph => Session::compiled(&module, names, keys, options, values),
            Mode::Eager => {
                let saver = EagerSaver::new(trackables)?.with_backend(options.backend);
                let runner = Runner::Eager {
                    saver: Mutex::new(saver),
                    options: Box::new(trace_options),
                    backend: options.backend,
                };
                Session::bound(&module, names, keys, runner, options).and_then(|session| {
                    match values() {
                        Some(values) => session.assign(values).map(|()| session),
                        None => Ok(session),
                    }
                })
            }
        };
        // The session keeps nothing else of the trace. Freeing a graph of N variables
        // (millions of small allocations, ~0.2 s at 100k) is left to a pool thread, so that
        // the caller gets its session without waiting for it.
        rayon::spawn(move || drop(module));
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
    /// ([`Executor::lazy`]), so a session pays only for the plans it runs.
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
            CompiledPlan::compile(verified, targets, &feeds)
                .and_then(|plan| Executor::lazy(plan, options.backend))
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
        let runner = Runner::Graph {
            save,
            restore,
            backend: options.backend,
        };
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
        }
    }

    /// Replaces the checkpoint backend (the default writes TensorFlow bundles on disk).
    pub fn with_io(mut self, io: Box<dyn CheckpointIo + Send>) -> Session {
        self.io = io;
        self
    }

    /// The targets the session runs.
    pub fn targets(&self) -> &SaverNames {
        &self.targets
    }

    /// The tensors the save plan writes, by checkpoint key.
    pub fn saved_tensors(&self) -> &BTreeMap<String, CheckpointTensor> {
        &self.bound.saved
    }

    /// The tensors the restore plan reads, by checkpoint key.
    pub fn restored_tensors(&self) -> &BTreeMap<String, CheckpointTensor> {
        &self.bound.restored
    }

    /// The compiled save plan; `None` in eager mode, which traces each call, and when
    /// [`SessionOptions::plans`] left it out.
    pub fn save_plan(&self) -> Option<&CompiledPlan> {
        match &self.runner {
            Runner::Graph { save, .. } => save.as_ref().map(Executor::plan),
            Runner::Eager { .. } => None,
        }
    }

    /// The compiled restore plan; `None` in eager mode and when [`SessionOptions::plans`]
    /// left it out.
    pub fn restore_plan(&self) -> Option<&CompiledPlan> {
        match &self.runner {
            Runner::Graph { restore, .. } => restore.as_ref().map(Executor::plan),
            Runner::Eager { .. } => None,
        }
    }

    /// The backend the plans (in eager mode, the traced functions) run on.
    pub fn backend(&self) -> Backend {
        match &self.runner {
            Runner::Graph { backend, .. } | Runner::Eager { backend, .. } => *backend,
        }
    }

    /// The mode the session runs in.
    pub fn mode(&self) -> Mode {
        match self.runner {
            Runner::Graph { .. } => Mode::Graph,
            Runner::Eager { .. } => Mode::Eager,
        }
    }

    /// What eager mode's function cache did on each call so far, oldest first (when and why
    /// a call traced a function); empty in graph mode.
    pub fn trace_log(&self) -> Vec<CacheEvent> {
        match &self.runner {
            Runner::Graph { .. } => Vec::new(),
            Runner::Eager { saver, .. } => lock(saver).trace_log().to_vec(),
        }
    }

    /// The variables.
    pub fn variables(&self) -> &VariableStore {
        &self.bound.variables
    }

    /// Puts `values` (checkpoint key → full tensor) into the variables the save plan reads.
    /// Every key must be saved by the plan and every saved key given, with the plan's dtype
    /// and shape; nothing is stored unless all are. A whole tensor is moved into its variable
    /// without copying; a sliced one is cut into its parts.
    pub fn assign(&self, values: BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
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
        // After a complete `assign` every variable has a value; otherwise check each one.
        if !self.bound.all_assigned.load(Ordering::Acquire) {
            // One entry per part, in the slots' order.
            let owners = self
                .bound
                .saved
                .values()
                .flat_map(|tensor| tensor.parts.iter().map(move |_| tensor));
            let slots = self.bound.saved_slots();
            let reader = self.bound.variables.reader();
            for (tensor, &slot) in owners.zip(slots) {
                if !reader.is_initialized_at(slot).unwrap_or(false) {
                    return Err(SessionError::MissingValue {
                        key: tensor.key.clone(),
                    });
                }
            }
        }
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

    /// The values of the variables the restore plan assigns, by checkpoint key: whole tensors
    /// shared with the variables, sliced ones assembled into their full shape. A sliced tensor
    /// whose restored slices do not cover its full shape is an error
    /// ([`SessionError::SlicesDoNotCover`]), never a value with zeros where nothing was read.
    pub fn values(&self) -> Result<BTreeMap<String, HostTensor>, SessionError> {
        // In key order (`restored` is sorted), so the map is built in bulk, not by searches.
        let mut out = Vec::with_capacity(self.bound.restored.len());
        let slots = self.bound.restored_slots();
        let mut next_slot = 0;
        // One lock for every read.
        let reader = self.bound.variables.reader();
        for tensor in self.bound.restored.values() {
            let part_slots = &slots[next_slot..next_slot + tensor.parts.len()];
            next_slot += tensor.parts.len();
            let read = |part: &Part, slot: VarSlot| {
                let value = reader
                    .get_at(slot)
                    .map_err(|source| SessionError::Variable {
                        key: tensor.key.clone(),
                        source,
                    })?;
                // Compared in place: this runs once per restored tensor.
                let shape_ok = match &part.region {
                    Some(region) => region
                        .iter()
                        .map(|&(_, len)| len as u64)
                        .eq(value.shape().iter().copied()),
                    None => tensor
                        .shape
                        .as_ref()
                        .is_none_or(|shape| shape.as_slice() == value.shape()),
                };
                if value.dtype() != tensor.dtype || !shape_ok {
                    let expected_shape: Option<Vec<u64>> = match &part.region {
                        Some(region) => Some(region.iter().map(|&(_, len)| len as u64).collect()),
                        None => tensor.shape.clone(),
                    };
                    let describe = |dtype: DType, shape: Option<&[u64]>| match shape {
                        Some(shape) => format!("{dtype} {shape:?}"),
                        None => dtype.to_string(),
                    };
                    return Err(SessionError::RestoredMismatch {
                        key: tensor.key.clone(),
                        expected: describe(tensor.dtype, expected_shape.as_deref()),
                        got: describe(value.dtype(), Some(value.shape())),
                    });
                }
                Ok(value)
            };
            let value = match (tensor.parts.as_slice(), &tensor.shape) {
                ([first, ..], _) if first.region.is_none() => read(first, part_slots[0])?,
                (parts, Some(shape)) => {
                    let mut pieces = Vec::with_capacity(parts.len());
                    for (part, &slot) in parts.iter().zip(part_slots) {
                        let region = part.region.as_deref().unwrap_or_default();
                        pieces.push((region, read(part, slot)?));
                    }
                    let regions: Vec<&[(i64, i64)]> =
                        pieces.iter().map(|(region, _)| *region).collect();
                    let covered =
                        saveplan_ir::slice::covered_volume(&values::full_region(shape), &regions);
                    let n_elements = shape.iter().product::<u64>();
                    if covered != n_elements {
                        // Never hand back invented zeros for what no slice restored.
                        return Err(SessionError::SlicesDoNotCover {
                            key: tensor.key.clone(),
                            shape: shape.clone(),
                            covered,
                            n_elements,
                        });
                    }
                    values::assemble(tensor.dtype, shape, &pieces).map_err(|source| {
                        SessionError::Tensor {
                            key: tensor.key.clone(),
                            source,
                        }
                    })?
                }
                _ => continue,
            };
            out.push((tensor.key.clone(), value));
        }
        Ok(BTreeMap::from_iter(out))
    }

    /// Runs `call` with `prefix`: the compiled plan with the prefix fed, or the eager saver.
    fn run(
        &self,
        call: Call,
        prefix: &str,
        observer: Option<&(dyn Fn(&StepEvent<'_>) + Sync)>,
    ) -> Result<(), SessionError> {
        /// What runs the call.
        enum Runs<'s> {
            Plan(&'s Executor),
            Eager(&'s Mutex<EagerSaver>, &'s TraceOptions),
        }
        // A plan the session left out is refused before anything touches the prefix (a
        // save's lock cleans up what killed saves left there).
        let left_out = || SessionError::PlanLeftOut { what: call.name() };
        let runs = match (&self.runner, call) {
            (Runner::Graph { save, .. }, Call::Save) => {
                Runs::Plan(save.as_ref().ok_or_else(left_out)?)
            }
            (Runner::Graph { restore, .. }, Call::Restore) => {
                Runs::Plan(restore.as_ref().ok_or_else(left_out)?)
            }
            (Runner::Eager { saver, options, .. }, _) => Runs::Eager(saver, options),
        };
        // Held until the save ends: BundleIo's lock on the prefix.
        let _guard = if call == Call::Save {
            let guard = self
                .io
                .begin_save(prefix)
                .map_err(|source| SessionError::BadPrefix {
                    prefix: prefix.to_owned(),
                    source: Box::new(source),
                })?;
            Some(guard)
        } else {
            None
        };
        // One run's view of the backend: its restore ops share the bundles they open.
        let io = RunIo::new(self.io.as_ref());
        let mut cx = RunContext::new(&self.bound.variables).with_io(&io);
        if let Some(observer) = observer {
            cx = cx.with_observer(observer);
        }
        let plan = match runs {
            Runs::Plan(plan) => plan,
            Runs::Eager(saver, options) => {
                return Ok(lock(saver).call(&cx, call, prefix, options)?);
            }
        };
        plan.run(&cx, vec![HostTensor::string_scalar(prefix)])
            .map_err(|source| SessionError::Run {
                what: call.name(),
                prefix: prefix.to_owned(),
                source: Box::new(source),
            })?;
        Ok(())
    }
}

impl From<EagerError> for SessionError {
    fn from(err: EagerError) -> SessionError {
        SessionError::Eager(Box::new(err))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Graph => "graph",
            Mode::Eager => "eager",
        })
    }
}

impl FromStr for Mode {
    type Err = UnknownMode;

    /// Parses `graph` or `eager`.
    fn from_str(text: &str) -> Result<Mode, UnknownMode> {
        match text {
            "graph" => Ok(Mode::Graph),
            "eager" => Ok(Mode::Eager),
            _ => Err(UnknownMode {
                name: text.to_owned(),
            }),
        }
    }
}

/// A mode name other than `graph` or `eager`.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("unknown mode `{name}` (expected `graph` or `eager`)")]
pub struct UnknownMode {
    /// The name given.
    pub name: String,
}

/// Checks a value against the tensor the plan saves.
fn check_value(tensor: &CheckpointTensor, value: &HostTensor) -> Result<(), SessionError> {
    if value.dtype() != tensor.dtype {
        return Err(SessionError::DTypeMismatch {
            key: tensor.key.clone(),
            expected: tensor.dtype,
            got: value.dtype(),
        });
    }
    if let Some(shape) = &tensor.shape
        && value.shape() != shape.as_slice()
    {
        return Err(SessionError::ShapeMismatch {
            key: tensor.key.clone(),
            expected: shape.clone(),
            got: value.shape().to_vec(),
        });
    }
    Ok(())
}

/// The tensors a session's save plan writes and its restore plan reads, by checkpoint key.
type BoundKeys = (
    BTreeMap<String, CheckpointTensor>,
    BTreeMap<String, CheckpointTensor>,
);

/// How a session finds which variable each checkpoint key of its plans is.
#[derive(Copy, Clone)]
enum Keys<'t> {
    /// By walking the graph from its `SaveV2` and `RestoreV2` ops ([`bind`]).
    Walk,
    /// From what the tracer recorded as it traced them.
    Traced(&'t TracedKeys),
}

impl Keys<'_> {
    /// The checkpoint keys of `module`'s save plan (for `save_target`) and restore plan (for
    /// `restore_targets`), bound to variables; none for a plan left out (`None`). The two
    /// are independent: done at the same time.
    fn bind(
        self,
        module: &Module,
        save_target: Option<&str>,
        restore_targets: Option<&[&str]>,
    ) -> Result<BoundKeys, SessionError> {
        let (saved, restored) = rayon::join(
            || match (save_target, self) {
                (None, _) => Ok(BTreeMap::new()),
                (Some(target), Keys::Walk) => group(bind::bind_save(module, &[target])?),
                (Some(_), Keys::Traced(keys)) => {
                    group(bind::traced_bindings(&keys.saves, &keys.variables)?)
                }
            },
            || match (restore_targets, self) {
                (None, _) => Ok(BTreeMap::new()),
                (Some(targets), Keys::Walk) => group(bind::bind_restore(module, targets)?),
                (Some(_), Keys::Traced(keys)) => {
                    group(bind::traced_bindings(&keys.restores, &keys.variables)?)
                }
            },
        );
        Ok((saved?, restored?))
    }
}

/// Groups bindings by checkpoint key, checking that the parts of a key agree.
fn group(bindings: Vec<Binding>) -> Result<BTreeMap<String, CheckpointTensor>, SessionError> {
    // The tensors in order of first binding, found by key through a table of their positions
    // (a key is hashed once and stored once, in its tensor).
    let mut tensors: Vec<CheckpointTensor> = Vec::with_capacity(bindings.len());
    let mut by_key: HashTable<usize> = HashTable::with_capacity(bindings.len());
    let hash = |key: &str| FxBuildHasher.hash_one(key);
    for binding in bindings {
        let inconsistent = |reason: InconsistentKey| SessionError::InconsistentKey {
            key: binding.checkpoint_key.clone(),
            reason,
        };
        let bad_spec = |reason: SliceError| {
            inconsistent(InconsistentKey::BadSliceSpec {
                spec: binding.slice_spec.clone(),
                reason,
            })
        };
        let (shape, region) = if binding.slice_spec.is_empty() {
            (binding.shape.clone(), None)
        } else if binding.sliced_by_plan {
            let parsed = ShapeAndSlice::parse(&binding.slice_spec).map_err(bad_spec)?;
            (
                Some(parsed.full_shape.iter().map(|&dim| dim as u64).collect()),
                None,
            )
        } else {
            let parsed = ShapeAndSlice::parse(&binding.slice_spec).map_err(bad_spec)?;
            let region = parsed.region().map_err(bad_spec)?;
            let full: Vec<u64> = parsed.full_shape.iter().map(|&dim| dim as u64).collect();
            (Some(full), Some(region))
        };
        let key_hash = hash(&binding.checkpoint_key);
        let found = by_key
            .find(key_hash, |&i| tensors[i].key == binding.checkpoint_key)
            .copied();
        let part = Part {
            variable: binding.variable,
            slice_spec: match region {
                Some(_) => binding.slice_spec.clone(),
                None => String::new(),
            },
            region,
        };
        let Some(index) = found else {
            by_key.insert_unique(key_hash, tensors.len(), |&i| hash(&tensors[i].key));
            tensors.push(CheckpointTensor {
                key: binding.checkpoint_key,
                dtype: binding.dtype,
                shape,
                parts: vec![part],
            });
            continue;
        };
        let existing = &mut tensors[index];
        if existing.dtype != binding.dtype {
            return Err(inconsistent(InconsistentKey::DTypes {
                first: existing.dtype,
                second: binding.dtype,
            }));
        }
        if existing.shape != shape {
            return Err(inconsistent(InconsistentKey::FullShapes));
        }
        if existing.parts[0].region.is_some() != part.region.is_some() {
            return Err(inconsistent(InconsistentKey::WholeAndSliced));
        }
        // A variable the plan slices itself appears once per slice: keep it once.
        if !existing
            .parts
            .iter()
            .any(|known| known.variable == part.variable && known.region == part.region)
        {
            existing.parts.push(part);
        }
    }
    Ok(tensors
        .into_iter()
        .map(|tensor| (tensor.key.clone(), tensor))
        .collect())
}
