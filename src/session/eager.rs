//! Eager mode: [`EagerBuilder`], a tracer builder that runs each op as soon as it is traced,
//! and [`EagerSaver`], `MultiDeviceSaver.save`/`restore` as eager TensorFlow runs them.
//!
//! The eager builder records each op in a graph (for names and error messages) and runs its
//! kernel at once on a [`VariableStore`](crate::exec::VariableStore) and a [`CheckpointIo`](crate::exec::CheckpointIo), keeping the op's outputs so
//! later ops take them as inputs. `Placeholder`s take their value from the builder's feeds
//! (the eager tensors a call passes, such as the prefix). Devices resolve as in graph mode
//! (against [`DEFAULT_DEVICE`], index `*` → 0) and only name the op in errors. A failing op
//! stops the trace with an error naming the op and its device; the ops before it have run,
//! so a failed save leaves at most temporary shard files, never the final `prefix.index`
//! (the merge is the last op).
//!
//! [`EagerSaver`] chooses between running the plan op by op and running a traced function,
//! following TensorFlow's rule; see [`super::function_cache`].

use std::collections::BTreeMap;

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{Attrs, Graph, Module, Op, OpId, Port, VerifyErrors, Versions, verify_module};

use super::function_cache::{CacheEvent, Call, FunctionCache, FunctionKey, RetracePolicy};
use crate::exec::{
    Backend, CompiledPlan, DEFAULT_DEVICE, ExecError, Executor, HostTensor, Kernel, KernelCx,
    KernelError, RunContext, resolve_device,
};
use crate::trace::{
    Builder, FlatOps, FlatParts, TraceError, TraceOptions, Trackable, VariableOps, count_tasks,
    trace_flat_with,
};

/// A [`Builder`] that runs every op as it is added.
pub struct EagerBuilder<'a> {
    graph: Graph,
    run: RunContext<'a>,
    feeds: BTreeMap<String, HostTensor>,
    /// Each op's outputs once it ran, by [`OpId::index`] (ops are numbered as they are added).
    outputs: Vec<Option<Vec<HostTensor>>>,
    default_device: DeviceSpec,
    /// The last requested device and what it resolved to: a trace asks for one device op
    /// after op, and resolving it (parse, merge, print) was a tenth of an eager save.
    last_device: Option<(std::sync::Arc<str>, String)>,
    /// Why the last op failed to run, until [`EagerBuilder::take_failure`] takes it.
    failure: Option<ExecError>,
}

impl<'a> EagerBuilder<'a> {
    /// A builder running ops on `run`'s variables and checkpoint backend; a `Placeholder`
    /// named like a key of `feeds` outputs that value.
    pub fn new(run: RunContext<'a>, feeds: BTreeMap<String, HostTensor>) -> EagerBuilder<'a> {
        EagerBuilder {
            graph: Graph::new(),
            run,
            feeds,
            outputs: Vec::new(),
            default_device: DeviceSpec::parse(DEFAULT_DEVICE)
                .expect("the default device is a valid device"),
            last_device: None,
            failure: None,
        }
    }

    /// Why the op the tracer stopped at ([`TraceError::Stopped`]) failed to run.
    pub fn take_failure(&mut self) -> Option<ExecError> {
        self.failure.take()
    }

    /// Traces `parts` of the flat plan of `trackables` through this builder, running each op
    /// as it is added; a failing op is reported with its own error (naming it and its device).
    pub fn trace(
        &mut self,
        trackables: &[Trackable],
        options: &TraceOptions,
        parts: FlatParts,
    ) -> Result<FlatOps, EagerFailure> {
        match trace_flat_with(&mut *self, trackables, options, parts) {
            Ok((_, ops)) => Ok(ops),
            Err(TraceError::Stopped { op }) => Err(match self.take_failure() {
                Some(failure) => EagerFailure::Op(failure),
                None => EagerFailure::Trace(TraceError::Stopped { op }),
            }),
            Err(err) => Err(EagerFailure::Trace(err)),
        }
    }

    /// The outputs op `id` produced, when it ran.
    pub fn outputs(&self, id: OpId) -> Option<&[HostTensor]> {
        self.outputs.get(id.index())?.as_deref()
    }

    /// The ops that ran, in order, as a graph.
    pub fn into_graph(self) -> Graph {
        self.graph
    }

    /// Runs op `id` (already in the graph) on the values of its inputs.
    fn execute(&mut self, id: OpId, inputs: &[(OpId, Port)]) -> Result<(), ExecError> {
        let device = self.resolve_device(id)?;
        let node = self.graph.op(id);
        let name = node.name.as_str();
        let outputs = match &node.op {
            Op::Placeholder => {
                let value = self.feeds.get(name).cloned().ok_or(ExecError::Unfed {
                    name: name.to_owned(),
                })?;
                vec![value]
            }
            _ => {
                let kernel = Kernel::resolve(node)?;
                let op_error = |source: KernelError| ExecError::Op {
                    name: name.to_owned(),
                    device: device.clone(),
                    source: Box::new(source),
                };
                let mut values = Vec::with_capacity(inputs.len());
                for (src, port) in inputs {
                    let value = match port {
                        Port::Index(index) => self
                            .outputs
                            .get(src.index())
                            .and_then(Option::as_ref)
                            .and_then(|outputs| outputs.get(*index as usize)),
                        Port::Named { .. } => None,
                    };
                    let value = value.cloned().ok_or_else(|| {
                        op_error(KernelError::invalid(format!(
                            "input `{}` has no value",
                            self.graph.op(*src).name
                        )))
                    })?;
                    values.push(value);
                }
                let cx = KernelCx {
                    variables: self.run.variables,
                    io: self.run.io,
                    cluster: self.run.cluster,
                    name,
                    device: &device,
                };
                kernel.run(&cx, &values).map_err(op_error)?
            }
        };
        if self.outputs.len() <= id.index() {
            self.outputs.resize_with(id.index() + 1, || None);
        }
        self.outputs[id.index()] = Some(outputs);
        Ok(())
    }

    /// The canonical device op `id` runs on, as the plan compiler resolves it (the last
    /// resolution again when it asks for the same device).
    fn resolve_device(&mut self, id: OpId) -> Result<String, ExecError> {
        let node = self.graph.op(id);
        if let Some((requested, resolved)) = &self.last_device
            && **requested == *node.device
        {
            return Ok(resolved.clone());
        }
        let resolved = resolve_device(&node.name, &node.device, &self.default_device)?;
        self.last_device = Some((node.device.clone(), resolved.clone()));
        Ok(resolved)
    }
}

impl Builder for EagerBuilder<'_> {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        let inputs: Vec<(OpId, Port)> = inputs.collect();
        // Record the op as the graph builder does; every control input was emitted, so it
        // already ran.
        let id = Builder::emit(
            &mut self.graph,
            name,
            op,
            device,
            attrs,
            &mut inputs.iter().cloned(),
            controls,
        )?;
        if let Err(failure) = self.execute(id, &inputs) {
            let op = self.graph.op(id).name.clone();
            self.failure = Some(failure);
            return Err(TraceError::Stopped { op });
        }
        Ok(id)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        // Both ops already ran, `src` first: it was emitted first.
        self.graph.add_control(src, dst);
    }

    fn mark_manual_control(&mut self, op: OpId) {
        // Only the record changes: the attribute does not affect how an op runs.
        Builder::mark_manual_control(&mut self.graph, op);
    }

    fn graph(&self) -> &Graph {
        &self.graph
    }
}

/// Why an eager trace stopped: the tracer's own error, or the op that failed to run (its
/// error names the op and its device). Both render as the error they hold.
#[derive(Debug, thiserror::Error)]
pub enum EagerFailure {
    /// Tracing failed.
    #[error(transparent)]
    Trace(TraceError),
    /// An op failed while it ran.
    #[error(transparent)]
    Op(ExecError),
    /// The traced function breaks an invariant of the IR (a tracer bug; every violation is
    /// listed).
    #[error("the traced function is not valid: {0}")]
    Invalid(VerifyErrors),
}

/// Errors of eager saving and restoring.
#[derive(Debug, thiserror::Error)]
pub enum EagerError {
    /// Tracing failed, or an op failed while it ran eagerly (the message names the op and
    /// its device).
    #[error("eager {call} of `{prefix}` failed")]
    Trace {
        /// Which call.
        call: Call,
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: EagerFailure,
    },
    /// Compiling or running the traced function failed.
    #[error("{call} function for `{prefix}` failed")]
    Function {
        /// Which call.
        call: Call,
        /// The prefix.
        prefix: String,
        /// Why.
        #[source]
        source: ExecError,
    },
    /// Creating the variables failed.
    #[error("creating the variables failed")]
    Create(#[source] EagerFailure),
}

/// `MultiDeviceSaver` in eager mode: saves and restores a fixed set of trackables, op by op
/// for a single task and through a traced function (cached per [`RetracePolicy`]) for several
/// tasks. Each call acts on the variables and checkpoint backend of the [`RunContext`] it is
/// given.
pub struct EagerSaver {
    trackables: Vec<Trackable>,
    n_tasks: usize,
    backend: Backend,
    cache: FunctionCache,
}

impl EagerSaver {
    /// A saver of `trackables`; traced functions run on the interpreter and follow
    /// TensorFlow's policy (a new function, so a new trace, per call).
    pub fn new(trackables: Vec<Trackable>) -> Result<EagerSaver, TraceError> {
        let n_tasks = count_tasks(&trackables)?;
        Ok(EagerSaver {
            trackables,
            n_tasks,
            backend: Backend::Interp,
            cache: FunctionCache::new(RetracePolicy::TensorFlow),
        })
    }

    /// The same saver running traced functions on `backend`.
    pub fn with_backend(self, backend: Backend) -> EagerSaver {
        EagerSaver { backend, ..self }
    }

    /// The same saver with a function cache following `policy`.
    pub fn with_policy(self, policy: RetracePolicy) -> EagerSaver {
        EagerSaver {
            cache: FunctionCache::new(policy),
            ..self
        }
    }

    /// The number of distinct tasks of the saved tensors.
    pub fn n_tasks(&self) -> usize {
        self.n_tasks
    }

    /// Whether a call runs through a traced function: TensorFlow does so in eager mode when
    /// the tensors span more than one task (custom devices, the other reason for restore, are
    /// not modelled).
    pub fn uses_function(&self) -> bool {
        self.n_tasks > 1
    }

    /// Creates every variable of `run` eagerly with its initial value (`tf.Variable(...)`).
    pub fn create_variables(&self, run: &RunContext<'_>) -> Result<(), EagerError> {
        let mut builder = EagerBuilder::new(*run, BTreeMap::new());
        let parts = FlatParts {
            variables: VariableOps::Create,
            save: false,
            restore: false,
        };
        builder
            .trace(&self.trackables, &TraceOptions::default(), parts)
            .map_err(EagerError::Create)?;
        Ok(())
    }

    /// `saver.save(prefix, options)`: writes the checkpoint at `prefix` from `run`'s
    /// variables through `run`'s checkpoint backend.
    pub fn save(
        &mut self,
        run: &RunContext<'_>,
        prefix: &str,
        options: &TraceOptions,
    ) -> Result<(), EagerError> {
        self.call(run, Call::Save, prefix, options)
    }

    /// `saver.restore(prefix, options)`: assigns every variable of `run` from the checkpoint.
    pub fn restore(
        &mut self,
        run: &RunContext<'_>,
        prefix: &str,
        options: &TraceOptions,
    ) -> Result<(), EagerError> {
        self.call(run, Call::Restore, prefix, options)
    }

    /// `save` or `restore`, as `call` says.
    pub fn call(
        &mut self,
        run: &RunContext<'_>,
        call: Call,
        prefix: &str,
        options: &TraceOptions,
    ) -> Result<(), EagerError> {
        let trace_error = |source| EagerError::Trace {
            call,
            prefix: prefix.to_owned(),
            source,
        };
        let function_error = |source| EagerError::Function {
            call,
            prefix: prefix.to_owned(),
            source,
        };
        let feed = HostTensor::string_scalar(prefix);
        if !self.uses_function() {
            self.cache.record(CacheEvent::Eager { call });
            let feeds = BTreeMap::from([(PREFIX_PLACEHOLDER.to_owned(), feed)]);
            EagerBuilder::new(*run, feeds)
                .trace(&self.trackables, options, Self::parts(call))
                .map_err(trace_error)?;
            return Ok(());
        }
        let key = FunctionKey::new(call, &self.trackables, self.n_tasks, options);
        let executor = match self.cache.lookup(&key) {
            Some(executor) => executor,
            None => {
                let executor = self
                    .trace_function(call, options)
                    .map_err(|err| match err {
                        FunctionTraceError::Trace(source) => trace_error(source),
                        FunctionTraceError::Exec(source) => function_error(source),
                    })?;
                self.cache.insert(key, executor)
            }
        };
        executor.run(run, vec![feed]).map_err(function_error)?;
        Ok(())
    }

    /// What the function cache did on each call so far, oldest first.
    pub fn trace_log(&self) -> &[CacheEvent] {
        self.cache.events()
    }

    fn parts(call: Call) -> FlatParts {
        FlatParts {
            variables: VariableOps::Attach,
            save: call == Call::Save,
            restore: call == Call::Restore,
        }
    }

    /// Traces `call` into a graph (the body of TensorFlow's `tf_function_save` or
    /// `tf_function_restore`) and compiles it with the prefix as its only feed. Every traced
    /// op is a target, as every stateful op of a `tf.function` runs.
    fn trace_function(
        &self,
        call: Call,
        options: &TraceOptions,
    ) -> Result<Executor, FunctionTraceError> {
        let (graph, _) =
            trace_flat_with(Graph::new(), &self.trackables, options, Self::parts(call))
                .map_err(|err| FunctionTraceError::Trace(EagerFailure::Trace(err)))?;
        let targets: Vec<String> = graph
            .ops()
            .into_iter()
            .map(|id| graph.op(id).name.clone())
            .collect();
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        let module = Module {
            graph,
            versions: Some(Versions::default()),
            ..Module::default()
        };
        let feed = format!("{PREFIX_PLACEHOLDER}:0");
        let verified = verify_module(&module)
            .map_err(|errors| FunctionTraceError::Trace(EagerFailure::Invalid(errors)))?;
        let plan = CompiledPlan::compile(verified, &targets, &[feed.as_str()])
            .map_err(FunctionTraceError::Exec)?;
        Executor::new(plan, self.backend).map_err(FunctionTraceError::Exec)
    }
}

/// The name of the prefix placeholder the flat plan traces.
const PREFIX_PLACEHOLDER: &str = "saver_filename";

enum FunctionTraceError {
    Trace(EagerFailure),
    Exec(ExecError),
}
