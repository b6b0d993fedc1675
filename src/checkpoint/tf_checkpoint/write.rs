//! Writing object-based checkpoints: [`Checkpoint`], `tf.train.Checkpoint.write` and `.save`
//! in eager mode (FORMATS.md 13.5–13.8).
//!
//! A write runs the `MultiDeviceSaver` save plan eager TensorFlow runs, traced once and run
//! compiled through the one plan runner ([`Runner::trace_save`], captured by
//! [`Runner::capture`]; `writer.rs` writes the files): every attribute of the object graph is
//! one saveable (a variable read at save time), and the serialized object graph is one more, a
//! string `Const` on `/cpu:0` ([`ReadKind::Constant`]). Tensors are saved in node order with
//! the object graph last, so the data file holds them in that order; the bundle writer is the
//! only code writing the files. Devices are resolved as eager TensorFlow places its tensors
//! (against [`DEFAULT_DEVICE`]), so local variables and the object graph share one task and
//! one shard; [`Checkpoint::write_traced`] places the object graph as a traced `write` does,
//! on a task of its own (two shards).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::object_graph::{Attribute, OBJECT_GRAPH_KEY, ObjectGraph};

use super::Checkpoint;
use crate::checkpoint::writer::{AfterWrite, Write, write_failure};
use crate::checkpoint::{CheckpointError, STATE_FILE, parent_dir};
use crate::exec::rendezvous::Rendezvous;
use crate::exec::{
    Backend, BundleIo, CheckpointIo, DEFAULT_DEVICE, HostTensor, VarKeyRef, VariableStore,
};
use crate::export::object_graph::encode;
use crate::export::{CheckpointState, checkpoint_state_text};
use crate::object::PYTHON_STATE;
use crate::object::counter::with_save_counter;
use crate::session::{Run, Runner};
use crate::trace::{Init, ReadKind, SaveableTensor, Scalar, Trackable, VariableDef};

impl Checkpoint {
    /// `tf.train.Checkpoint.write(prefix)`: writes `prefix.index` and its data file(s), creating
    /// the parent directory. Returns the prefix (asynchronously: see
    /// [`Checkpoint::with_async`]).
    pub fn write(&self, prefix: &str) -> Result<String, CheckpointError> {
        self.write_then(prefix, None)
    }

    /// `write(prefix)` as a `tf.function` wrapping it runs (FORMATS.md 13.5, 13.6): the object
    /// graph constant is on the bare `/device:CPU:0`, a task of its own, so the checkpoint has
    /// two shards (the variables, then the object graph); the parent directory is not created.
    pub fn write_traced(&self, prefix: &str) -> Result<String, CheckpointError> {
        self.sync()?;
        let captured = self.capture(prefix, true)?;
        self.finish(prefix, captured, None)
    }

    /// [`Checkpoint::write`], then `after` (TensorFlow's write callback, handed the write's
    /// result, which it returns or replaces) once the files are written or failed: at once, or
    /// on the background thread of an asynchronous checkpoint.
    pub(in crate::checkpoint) fn write_then(
        &self,
        prefix: &str,
        after: Option<AfterWrite>,
    ) -> Result<String, CheckpointError> {
        self.sync()?;
        create_parent(Path::new(prefix))?;
        let captured = self.capture(prefix, false)?;
        self.finish(prefix, captured, after)
    }

    /// Writes `captured` and runs `after`, now or (asynchronously) on a background thread.
    fn finish(
        &self,
        prefix: &str,
        captured: Write,
        after: Option<AfterWrite>,
    ) -> Result<String, CheckpointError> {
        let write = move || {
            let written = captured.commit();
            match after {
                Some(after) => after(written),
                None => written,
            }
        };
        if self.async_writes {
            self.in_flight.start(prefix, write)?;
        } else {
            write()?;
        }
        Ok(prefix.to_owned())
    }

    /// Runs the save plan of a write to `prefix` and captures what it would write: the plan
    /// eager TensorFlow's `MultiDeviceSaver` runs, traced once and run compiled by the one
    /// plan runner ([`Runner::trace_save`], [`Runner::capture`]).
    fn capture(&self, prefix: &str, traced: bool) -> Result<Write, CheckpointError> {
        let prepared = self.prepare(prefix, traced, None)?;
        let captured = (prepared.runner)
            .capture(prepared.run(prefix, None))
            .map_err(|source| write_error(prefix, write_failure(source)))?;
        Ok(Write {
            captured,
            io: prepared.io,
        })
    }

    /// The save plan of a write to `prefix`, traced and compiled (for task `only` of its
    /// cluster alone, when given), with its variables holding the values: `traced` places the
    /// object graph as a traced `write` does. The prefix is checked first.
    pub(super) fn prepare(
        &self,
        prefix: &str,
        traced: bool,
        only: Option<usize>,
    ) -> Result<PreparedWrite, CheckpointError> {
        // The graph given, not a copy of it, until `save_counter` exists.
        let graph = match self.save_counter {
            None => Cow::Borrowed(&self.graph),
            Some(_) => Cow::Owned(with_save_counter(&self.graph)),
        };
        let counter_value = counter_tensor(self.save_counter.unwrap_or(0));
        let saved = self.saved_values(&graph, &counter_value);
        let io = BundleIo {
            write: self.write_options,
        };
        // On other cores: the object graph is encoded while the trackables are made, and the
        // values are put into the variables while the plan is traced and compiled (as a
        // plain spec's session binds its values while its plan compiles).
        let (runner, variables) = std::thread::scope(|scope| {
            let encoding = scope.spawn(|| encode(&graph));
            let trackables = eager_trackables(&saved);
            let object_graph = join(encoding);
            let mut trackables = trackables?;
            let device = match traced {
                true => "/device:CPU:0".to_owned(),
                false => eager_device(OBJECT_GRAPH_KEY, OBJECT_GRAPH_DEVICE)?,
            };
            trackables.push(object_graph_trackable(device, object_graph));
            io.check_save_prefix(prefix)
                .map_err(|source| write_error(prefix, WriteFailure::Prefix(source)))?;
            let filling = scope.spawn(|| eager_store(&saved));
            let runner = Runner::trace_save(&trackables, &self.options, Backend::Interp, only);
            let variables = join(filling)?;
            let runner = runner.map_err(|source| write_error(prefix, write_failure(source)))?;
            Ok::<_, CheckpointError>((runner, variables))
        })?;
        Ok(PreparedWrite {
            runner,
            variables,
            io,
        })
    }

    /// `tf.train.Checkpoint.save(file_prefix)`: creates `save_counter` at 0 if needed, adds one,
    /// writes `<file_prefix>-<counter>` and rewrites the `checkpoint` file of its directory
    /// (FORMATS.md 13.8) through a temporary file and a rename. Returns the path written.
    pub fn save(&mut self, file_prefix: &str) -> Result<String, CheckpointError> {
        let path = self.next_save_path(file_prefix, None)?;
        let prefix = PathBuf::from(&path);
        let after: AfterWrite = Box::new(move |written| {
            written?;
            write_state_file(&prefix)
        });
        self.write_then(&path, Some(after))
    }

    /// Waits for the write in flight, adds one to `save_counter` (creating it at 0) and returns
    /// `<file_prefix>-<number>`, the counter's new value unless `number` is given.
    pub(in crate::checkpoint) fn next_save_path(
        &mut self,
        file_prefix: &str,
        number: Option<i64>,
    ) -> Result<String, CheckpointError> {
        self.sync()?;
        let counter = self.save_counter.unwrap_or(0) + 1;
        self.save_counter = Some(counter);
        Ok(format!("{file_prefix}-{}", number.unwrap_or(counter)))
    }

    /// Every value a write of `graph` (the [`Checkpoint::object_graph`]) saves, in the order
    /// TensorFlow writes them: node order, `PythonState` attributes after every tensor
    /// attribute (13.5), a legacy saveable's values in key order. `counter` is the value of
    /// `save_counter`, the only attribute without a value.
    pub(in crate::checkpoint) fn saved_values<'a>(
        &'a self,
        graph: &'a ObjectGraph,
        counter: &'a HostTensor,
    ) -> Vec<SavedValue<'a>> {
        let (tensors, python): (Vec<&Attribute>, Vec<&Attribute>) =
            attributes(graph).partition(|attribute| attribute.name != PYTHON_STATE);
        let mut saved = Vec::with_capacity(self.values.len() + 1);
        for attribute in tensors.into_iter().chain(python) {
            let key = attribute.checkpoint_key.as_str();
            let mut save = |value_key: &'a str| {
                let device = (self.devices.get(value_key))
                    .or_else(|| self.devices.get(key))
                    .map(String::as_str);
                saved.push(SavedValue {
                    key: value_key,
                    attribute,
                    device,
                    value: self.values.get(value_key).unwrap_or(counter),
                });
            };
            // The values of an attribute are the one under its key but for a legacy
            // saveable's ([`Checkpoint::new`] found them).
            match self.legacy_keys.get(key) {
                Some(keys) => keys.iter().for_each(|value_key| save(value_key)),
                None => save(key),
            }
        }
        saved
    }
}

/// A write's save plan ready to run ([`Checkpoint::prepare`]).
pub(super) struct PreparedWrite {
    /// The plan, traced and compiled.
    pub runner: Runner,
    /// The variables it saves, holding the values.
    pub variables: VariableStore,
    /// Where its files go.
    pub io: BundleIo,
}

impl PreparedWrite {
    /// The runner's call of the plan against `prefix`, in `cluster` when given.
    pub fn run<'a>(&'a self, prefix: &'a str, cluster: Option<&'a dyn Rendezvous>) -> Run<'a> {
        Run {
            prefix,
            variables: &self.variables,
            io: &self.io,
            observer: None,
            cluster,
        }
    }
}

/// Where eager TensorFlow places the serialized object graph (and, unplaced, every value):
/// resolved against [`DEFAULT_DEVICE`], the client's own task.
pub(super) const OBJECT_GRAPH_DEVICE: &str = "/cpu:0";

/// The error of a write to `prefix` that failed with `source`.
pub(super) fn write_error(prefix: &str, source: WriteFailure) -> CheckpointError {
    CheckpointError::Write {
        prefix: prefix.to_owned(),
        source: Box::new(source),
    }
}

/// One value a write saves ([`Checkpoint::saved_values`]).
pub(in crate::checkpoint) struct SavedValue<'a> {
    /// Its checkpoint key.
    pub key: &'a str,
    /// The attribute it belongs to.
    pub attribute: &'a Attribute,
    /// The device it was placed on ([`Checkpoint::with_device`]), if any.
    pub device: Option<&'a str>,
    /// The value.
    pub value: &'a HostTensor,
}

/// The saved values as eager `tf.Variable`s (`var_0`, `var_1`, … in the order given): the
/// trackables a saver traces for them, one saveable each, placed as eager TensorFlow places
/// it ([`eager_store`] holds their values).
fn eager_trackables(saved: &[SavedValue<'_>]) -> Result<Vec<Trackable>, CheckpointError> {
    let devices = eager_devices(saved)?;
    let mut trackables = Vec::with_capacity(saved.len() + 1);
    for (index, (saved, device)) in saved.iter().zip(devices).enumerate() {
        trackables.push(saved.trackable(device, variable_name(index), Init::Zeros));
    }
    Ok(trackables)
}

impl SavedValue<'_> {
    /// The trackable a saver traces for this value: one saveable, a variable named `name` on
    /// `device` made with `init`, read at save time.
    pub(in crate::checkpoint) fn trackable(
        &self,
        device: String,
        name: String,
        init: Init,
    ) -> Trackable {
        Trackable {
            tensors: vec![SaveableTensor {
                checkpoint_key: self.key.to_owned(),
                slice_spec: String::new(),
                dtype: self.value.dtype(),
                shape: shape_of(self.value),
                device,
                variable: VariableDef {
                    name: Some(name),
                    init,
                    read: ReadKind::Saveable,
                },
            }],
        }
    }
}

/// The serialized object graph's saveable: a string constant holding `serialized` on `device`.
pub(in crate::checkpoint) fn object_graph_trackable(
    device: String,
    serialized: Vec<u8>,
) -> Trackable {
    Trackable {
        tensors: vec![SaveableTensor {
            checkpoint_key: OBJECT_GRAPH_KEY.to_owned(),
            slice_spec: String::new(),
            dtype: saveplan_ir::DType::String,
            shape: Vec::new(),
            device,
            variable: VariableDef {
                name: None,
                init: Init::Values(vec![Scalar::Bytes(serialized)]),
                read: ReadKind::Constant,
            },
        }],
    }
}

/// The device of each saved value as eager TensorFlow places it ([`eager_device`]; unplaced,
/// [`OBJECT_GRAPH_DEVICE`]).
pub(super) fn eager_devices(saved: &[SavedValue<'_>]) -> Result<Vec<String>, CheckpointError> {
    // The last device placed and where it went: most values share one.
    let mut placed: Option<(&str, String)> = None;
    (saved.iter())
        .map(|saved| {
            let given = saved.device.unwrap_or(OBJECT_GRAPH_DEVICE);
            match &placed {
                Some((last, eager)) if *last == given => Ok(eager.clone()),
                _ => {
                    let eager = eager_device(saved.key, given)?;
                    placed = Some((given, eager.clone()));
                    Ok(eager)
                }
            }
        })
        .collect()
}

/// The store of the variables of [`eager_trackables`]: each saved value under its variable's
/// name (the container empty).
fn eager_store(saved: &[SavedValue<'_>]) -> Result<VariableStore, CheckpointError> {
    let store = VariableStore::new();
    let mut writer = store.writer();
    writer.reserve(saved.len());
    for (index, saved) in saved.iter().enumerate() {
        let name = variable_name(index);
        let variable = VarKeyRef {
            container: "",
            shared_name: &name,
        };
        writer
            .put(variable, saved.value.clone())
            .map_err(|source| CheckpointError::Variable {
                key: saved.key.to_owned(),
                source,
            })?;
    }
    drop(writer);
    Ok(store)
}

/// The name of the variable holding saved value `index`.
fn variable_name(index: usize) -> String {
    format!("var_{index}")
}

/// What a scoped thread returned; its panic goes on here.
fn join<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A host tensor's shape as the tracer's signed dimensions.
pub(in crate::checkpoint) fn shape_of(value: &HostTensor) -> Vec<i64> {
    value.shape().iter().map(|&dim| dim as i64).collect()
}

/// `save_counter`'s value as a tensor (an int64 scalar).
pub(in crate::checkpoint) fn counter_tensor(value: i64) -> HostTensor {
    HostTensor::int64_scalar(value)
}

/// Why writing a checkpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    /// The prefix cannot be written.
    #[error(transparent)]
    Prefix(crate::exec::IoError),
    /// The plan could not be traced.
    #[error(transparent)]
    Trace(crate::trace::TraceError),
    /// Running the plan failed.
    #[error(transparent)]
    Eager(crate::session::EagerError),
    /// Writing the files the plan made failed.
    #[error(transparent)]
    Files(crate::exec::IoError),
    /// Making or running the write's compiled plan failed.
    #[error(transparent)]
    Run(crate::session::RunError),
    /// Running the TF1 graph-mode form failed ([`crate::checkpoint::GraphModeSession`]).
    #[error(transparent)]
    GraphMode(Box<crate::checkpoint::GraphModeFailure>),
}

/// Every attribute of `graph`, in node order.
fn attributes(graph: &ObjectGraph) -> impl Iterator<Item = &Attribute> {
    graph.nodes().iter().flat_map(|node| node.attributes.iter())
}

/// `device` as eager TensorFlow places a tensor: merged onto the local CPU.
pub(in crate::checkpoint) fn eager_device(
    key: &str,
    device: &str,
) -> Result<String, CheckpointError> {
    let spec = DeviceSpec::parse(device).map_err(|source| CheckpointError::BadDevice {
        key: key.to_owned(),
        device: device.to_owned(),
        source,
    })?;
    let default = DeviceSpec::parse(DEFAULT_DEVICE).expect("the default device is valid");
    Ok(default.make_merged_spec(&spec).to_string())
}

pub(super) fn create_parent(prefix: &Path) -> Result<(), CheckpointError> {
    crate::bundle::lock::create_parent_dir(prefix).map_err(CheckpointError::Bundle)
}

/// Writes the `checkpoint` state file next to `prefix`, naming it (relative) as the latest
/// and only checkpoint.
fn write_state_file(prefix: &Path) -> Result<(), CheckpointError> {
    let name = prefix
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_state(
        parent_dir(prefix),
        &CheckpointState {
            model_checkpoint_path: name.clone(),
            all_model_checkpoint_paths: vec![name],
            ..CheckpointState::default()
        },
    )
}

/// Writes `state` as the `checkpoint` file of `dir`, always whole and synced
/// ([`crate::bundle::small_file`]).
pub(in crate::checkpoint) fn write_state(
    dir: &Path,
    state: &CheckpointState,
) -> Result<(), CheckpointError> {
    let path = dir.join(STATE_FILE);
    crate::bundle::small_file::replace_whole(&path, checkpoint_state_text(state).as_bytes(), true)
        .map_err(|source| CheckpointError::WriteStateFile { path, source })
}
