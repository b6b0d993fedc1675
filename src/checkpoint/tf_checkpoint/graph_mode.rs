//! `tf.train.Checkpoint.write(prefix)` and `read(prefix).run_restore_ops()` in TF1 graph
//! mode (a `tf.Graph` and a `Session`; FORMATS.md 13.5, 13.6, fixture `o9/graph`).
//!
//! [`Checkpoint::graph_mode`] traces the graph TensorFlow builds
//! ([`trace_graph_mode_write`]): the checkpoint's variables created in the graph (named
//! after their attribute's `full_name`, uniquified as a graph uniquifies names, so two
//! `Variable`s become `Variable` and `Variable_1`) with their current values as initial
//! values and the `init` op, then the save ops, then the restore ops. The object graph and
//! both prefixes are `Const`s fed at run time; the object graph fed is the checkpoint's with
//! the uniquified variable names as `full_name`s, which is all that distinguishes the files
//! from a traced [`Checkpoint::write_traced`].
//!
//! [`GraphModeWrite::session`] compiles the three runs a TensorFlow session makes (`init`,
//! the write with the object graph and prefix fed, the restore ops with the read prefix
//! fed) for either backend and runs them on its own variables through the one plan runner
//! ([`Runner`]: compiled plans, the object graph a fixed feed of the write, `init` its
//! initializer).

use std::collections::BTreeMap;

use saveplan_ir::object_graph::ObjectGraph;
use saveplan_ir::{DType, Module, verify_module};

use super::Checkpoint;
use super::write::{counter_tensor, object_graph_trackable};
use crate::checkpoint::CheckpointError;
use crate::exec::{
    Backend, BundleIo, ExecError, HostTensor, IoError, TaskPlans, VarKey, VariableError,
    VariableStore,
};
use crate::export::object_graph::encode;
use crate::session::{Call, Run, RunError, Runner};
use crate::trace::{GraphModeTrace, Init, Scalar, TraceError, trace_graph_mode_write};

/// The name a `tf.Variable` created in graph mode without a name asks for.
const DEFAULT_VARIABLE_NAME: &str = "Variable";

/// The device `write` places the object graph constant on.
const OBJECT_GRAPH_DEVICE: &str = "/device:CPU:0";

/// Why the graph-mode form of a write could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum GraphModeFailure {
    /// The plan could not be traced.
    #[error(transparent)]
    Trace(TraceError),
    /// A value's dtype cannot be an initial value in the graph.
    #[error("`{key}`: {dtype} values cannot be written as initial values")]
    InitialValue {
        /// The checkpoint key.
        key: String,
        /// Its dtype.
        dtype: DType,
    },
    /// The traced graph breaks an invariant of the IR.
    #[error("the traced graph is not valid")]
    Invalid(#[source] saveplan_ir::VerifyErrors),
    /// A plan could not be compiled for the backend.
    #[error("cannot compile `{what}`")]
    Compile {
        /// Which run: `init`, `write` or `read`.
        what: &'static str,
        /// Why.
        #[source]
        source: ExecError,
    },
    /// The prefix cannot be written.
    #[error(transparent)]
    Prefix(IoError),
    /// Running a plan failed.
    #[error("running `{what}`")]
    Run {
        /// Which run: `init`, `write` or `read`.
        what: &'static str,
        /// Why.
        #[source]
        source: ExecError,
    },
    /// A variable has no value, or a value of another dtype or shape.
    #[error("variable `{name}`")]
    Variable {
        /// The variable's name in the graph.
        name: String,
        /// Why.
        #[source]
        source: VariableError,
    },
    /// The write ran but did not return its prefix as a string scalar.
    #[error("`write` returned no prefix")]
    NoPrefixReturned,
    /// The runner failed otherwise.
    #[error(transparent)]
    Runner(Box<RunError>),
}

impl GraphModeFailure {
    /// The runner's error `err` of the run `what` (`write` or `read`).
    fn of_run(what: &'static str, err: RunError) -> GraphModeFailure {
        match err {
            RunError::Prefix(source) => GraphModeFailure::Prefix(*source),
            RunError::Plan(source) => GraphModeFailure::Run {
                what,
                source: *source,
            },
            other => GraphModeFailure::Runner(Box::new(other)),
        }
    }

    fn into_error(self, what: &'static str) -> CheckpointError {
        CheckpointError::GraphMode {
            what,
            source: Box::new(self),
        }
    }
}

/// The TF1 graph-mode graph of a checkpoint's `write` and `read().run_restore_ops()`, and
/// the names that run it.
#[derive(Clone, Debug)]
pub struct GraphModeWrite {
    trace: GraphModeTrace,
    object_graph: ObjectGraph,
    variables: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The graph TensorFlow builds for this checkpoint in TF1 graph mode: its variables
    /// (placed with [`Checkpoint::with_device`]; unplaced ones get no device) created with
    /// their current values, `init`, the write and the read's restore ops, exactly as
    /// `graph_mode.graph.pbtxt` of `o9` shows them.
    pub fn graph_mode(&self) -> Result<GraphModeWrite, CheckpointError> {
        let fail = |failure: GraphModeFailure| failure.into_error("tracing");
        let graph = self.object_graph();
        let counter = counter_tensor(self.save_counter().unwrap_or(0));
        let mut trackables = Vec::new();
        for saved in self.saved_values(&graph, &counter) {
            let name = match saved.attribute.full_name.as_str() {
                "" => DEFAULT_VARIABLE_NAME,
                name => name,
            };
            let device = saved.device.unwrap_or_default().to_owned();
            let init = Init::Values(scalars(saved.key, saved.value).map_err(fail)?);
            trackables.push(saved.trackable(device, name.to_owned(), init));
        }
        // Fed with the serialized object graph at run time.
        trackables.push(object_graph_trackable(
            OBJECT_GRAPH_DEVICE.to_owned(),
            Vec::new(),
        ));
        let trace = trace_graph_mode_write(&trackables, self.trace_options())
            .map_err(|source| fail(GraphModeFailure::Trace(source)))?;
        // Each restored key's variable: the handle its `AssignVariableOp` assigns.
        let module_graph = &trace.module.graph;
        let variables: BTreeMap<String, String> = (trace.restore_ops.iter())
            .filter_map(|(key, assign)| {
                let assign = module_graph.find(assign)?;
                let handle = module_graph.input_at(assign, 0)?;
                Some((key.clone(), module_graph.op(handle.src).name.clone()))
            })
            .collect();
        let mut nodes = graph.into_nodes();
        for attribute in nodes.iter_mut().flat_map(|node| &mut node.attributes) {
            if let Some(name) = variables.get(&attribute.checkpoint_key) {
                attribute.full_name.clone_from(name);
            }
        }
        let object_graph =
            ObjectGraph::new(nodes).expect("renaming attributes keeps the graph consistent");
        Ok(GraphModeWrite {
            trace,
            object_graph,
            variables,
        })
    }
}

impl GraphModeWrite {
    /// The graph: variables, `init`, the write and the read's restore ops.
    pub fn module(&self) -> &Module {
        &self.trace.module
    }

    /// The object graph the write stores: the checkpoint's, with the variables' names in the
    /// graph as `full_name`s.
    pub fn object_graph(&self) -> &ObjectGraph {
        &self.object_graph
    }

    /// The `init` op (`global_variables_initializer()`).
    pub fn init_op(&self) -> &str {
        &self.trace.init
    }

    /// The object graph constant, fed with the serialized object graph (`Const:0`).
    pub fn object_graph_tensor(&self) -> &str {
        self.trace
            .constants
            .first()
            .map_or("", |(_, tensor)| tensor.as_str())
    }

    /// The write's prefix constant, fed with the path (`Const_1:0`).
    pub fn prefix_tensor(&self) -> &str {
        &self.trace.prefix
    }

    /// The tensor `write` returns: the prefix, once the merge ran (`Identity_4:0`).
    pub fn save_tensor(&self) -> &str {
        &self.trace.save
    }

    /// The read's prefix constant, fed with the path (`Const_4:0`).
    pub fn restore_prefix_tensor(&self) -> &str {
        &self.trace.restore_prefix
    }

    /// TensorFlow's `restore_ops`: per checkpoint key, the last restore op of its variable.
    pub fn restore_ops(&self) -> &BTreeMap<String, String> {
        &self.trace.restore_ops
    }

    /// Per restored checkpoint key, the name of its variable in the graph.
    pub fn variables(&self) -> &BTreeMap<String, String> {
        &self.variables
    }

    /// Compiles `init`, the write and the restore ops for `backend`, as a TensorFlow
    /// session runs them, over variables of its own (uninitialized until
    /// [`GraphModeSession::run_init`]).
    pub fn session(&self, backend: Backend) -> Result<GraphModeSession, CheckpointError> {
        let fail = |failure: GraphModeFailure| failure.into_error("compiling");
        let module = self.module();
        let verified =
            verify_module(module).map_err(|errors| fail(GraphModeFailure::Invalid(errors)))?;
        let compile = |what: &'static str, targets: &[&str], feeds: &[&str]| {
            TaskPlans::compile(verified, targets, feeds, backend)
                .map_err(|source| fail(GraphModeFailure::Compile { what, source }))
        };
        let init = compile("init", &[self.init_op()], &[])?;
        let write = compile(
            "write",
            &[self.save_tensor()],
            &[self.object_graph_tensor(), self.prefix_tensor()],
        )?;
        let restore_ops: Vec<&str> = self.restore_ops().values().map(String::as_str).collect();
        let read = compile("read", &restore_ops, &[self.restore_prefix_tensor()])?;
        let object_graph = HostTensor::string_scalar(encode(&self.object_graph));
        Ok(GraphModeSession {
            runner: Runner::compiled(Some(write), Some(read), backend)
                .with_init(init)
                .with_save_feeds(vec![object_graph]),
            variables: self.variables.clone(),
            store: VariableStore::new(),
            io: BundleIo::default(),
        })
    }
}

/// A graph-mode write and read compiled for one backend, with its variables.
#[derive(Debug)]
pub struct GraphModeSession {
    /// `init`, the write (the object graph fed first) and the restore ops.
    runner: Runner,
    variables: BTreeMap<String, String>,
    store: VariableStore,
    io: BundleIo,
}

impl GraphModeSession {
    /// `session.run(init)`: assigns every variable its initial value.
    pub fn run_init(&self) -> Result<(), CheckpointError> {
        (self.runner.initialize(&self.store))
            .map_err(|err| GraphModeFailure::of_run("init", err).into_error("running"))
    }

    /// `session.run(write)` with the object graph and `prefix` fed: writes `prefix.index` and
    /// its data files (the parent directory must exist), holding the prefix's save lock, and
    /// returns the prefix the graph returns.
    pub fn write(&self, prefix: &str) -> Result<String, CheckpointError> {
        let fail = |failure: GraphModeFailure| CheckpointError::Write {
            prefix: prefix.to_owned(),
            source: Box::new(super::write::WriteFailure::GraphMode(Box::new(failure))),
        };
        let fetched = (self.runner.run(Call::Save, self.run(prefix)))
            .map_err(|err| fail(GraphModeFailure::of_run("write", err)))?;
        let returned = (fetched.first().and_then(HostTensor::as_string_scalar))
            .ok_or_else(|| fail(GraphModeFailure::NoPrefixReturned))?;
        Ok(String::from_utf8_lossy(returned).into_owned())
    }

    /// `read(prefix).run_restore_ops()`: runs the restore ops with `prefix` fed.
    pub fn run_restore_ops(&self, prefix: &str) -> Result<(), CheckpointError> {
        (self.runner.run(Call::Restore, self.run(prefix))).map_err(|err| {
            CheckpointError::Read {
                prefix: prefix.to_owned(),
                source: Box::new(GraphModeFailure::of_run("read", err)),
            }
        })?;
        Ok(())
    }

    /// A call of the runner with `prefix` on the session's variables and files.
    fn run<'a>(&'a self, prefix: &'a str) -> Run<'a> {
        Run {
            prefix,
            variables: &self.store,
            io: &self.io,
            observer: None,
            cluster: None,
        }
    }

    /// The value of every restored variable, by checkpoint key.
    pub fn values(&self) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
        let mut values = BTreeMap::new();
        for (key, name) in &self.variables {
            let value = (self.store.get(&VarKey::new("", name.as_str()))).map_err(|source| {
                GraphModeFailure::Variable {
                    name: name.clone(),
                    source,
                }
                .into_error("reading")
            })?;
            values.insert(key.clone(), value);
        }
        Ok(values)
    }

    /// The backend the plans run on.
    pub fn backend(&self) -> Backend {
        self.runner.backend()
    }
}

/// The elements of `value` as initial values (little-endian bytes decoded per dtype).
fn scalars(key: &str, value: &HostTensor) -> Result<Vec<Scalar>, GraphModeFailure> {
    let unsupported = || GraphModeFailure::InitialValue {
        key: key.to_owned(),
        dtype: value.dtype(),
    };
    if let Some(strings) = value.strings() {
        return Ok(strings.iter().cloned().map(Scalar::Bytes).collect());
    }
    let bytes = value.bytes().ok_or_else(unsupported)?;
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> Scalar) -> Vec<Scalar> {
        bytes
            .chunks_exact(N)
            .map(|chunk| f(chunk.try_into().unwrap_or([0; N])))
            .collect()
    }
    Ok(match value.dtype() {
        DType::Float => each(bytes, |b| Scalar::Float(f64::from(f32::from_le_bytes(b)))),
        DType::Double => each(bytes, |b| Scalar::Float(f64::from_le_bytes(b))),
        DType::Int8 => each(bytes, |b| Scalar::Int(i64::from(i8::from_le_bytes(b)))),
        DType::Int16 => each(bytes, |b| Scalar::Int(i64::from(i16::from_le_bytes(b)))),
        DType::Int32 => each(bytes, |b| Scalar::Int(i64::from(i32::from_le_bytes(b)))),
        DType::Int64 => each(bytes, |b| Scalar::Int(i64::from_le_bytes(b))),
        DType::UInt8 => each(bytes, |b| Scalar::Int(i64::from(u8::from_le_bytes(b)))),
        DType::UInt16 => each(bytes, |b| Scalar::Int(i64::from(u16::from_le_bytes(b)))),
        DType::UInt32 => each(bytes, |b| Scalar::Int(i64::from(u32::from_le_bytes(b)))),
        DType::Bool => each(bytes, |[b]: [u8; 1]| Scalar::Bool(b != 0)),
        _ => return Err(unsupported()),
    })
}
