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
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::object_graph::{
    Attribute, ChildRef, NodeId, OBJECT_GRAPH_KEY, ObjectGraph, ObjectGraphError, ObjectNode,
    VARIABLE_VALUE,
};

use super::build::{PYTHON_STATE, value_keys};
use super::writer::{AfterWrite, Pending, Write, write_failure};
use super::{CheckpointError, STATE_FILE, parent_dir};
use crate::bundle::WriteOptions;
use crate::exec::VariableStore;
use crate::exec::{Backend, BundleIo, CheckpointIo, DEFAULT_DEVICE, HostTensor, VarKey};
use crate::export::object_graph::encode;
use crate::export::{CheckpointState, checkpoint_state_text};
use crate::session::{Run, Runner};
use crate::trace::{Init, ReadKind, SaveableTensor, Scalar, TraceOptions, Trackable, VariableDef};

/// The local name and shared name of `tf.train.Checkpoint`'s save counter.
pub const SAVE_COUNTER: &str = "save_counter";

/// The checkpoint key of the save counter's value.
pub const SAVE_COUNTER_KEY: &str = "save_counter/.ATTRIBUTES/VARIABLE_VALUE";

/// A `tf.train.Checkpoint` in eager mode: an object graph (as [`super::build_object_graph`]
/// builds it, without `save_counter`) and the value of every attribute, by checkpoint key.
///
/// [`Checkpoint::write`] writes exactly what TensorFlow's `write(prefix)` writes for the same
/// tree and values; [`Checkpoint::save`] also counts (`save_counter`, a child of the root once
/// it exists, written by every later write) and rewrites the directory's `checkpoint` file.
#[derive(Debug)]
pub struct Checkpoint {
    graph: ObjectGraph,
    values: BTreeMap<String, HostTensor>,
    devices: BTreeMap<String, String>,
    save_counter: Option<i64>,
    write_options: WriteOptions,
    options: TraceOptions,
    pending: Vec<String>,
    async_writes: bool,
    in_flight: Pending,
}

impl Checkpoint {
    /// A checkpoint of `graph` with `values` (checkpoint key → tensor): every attribute of the
    /// graph needs a value, and every value an attribute: its key is the attribute's key, or,
    /// for a legacy saveable (FORMATS.md 13.15), extends it (`table/.ATTRIBUTES/table` →
    /// `…/table-keys`, `…/table-values`, written in key order).
    pub fn new(
        graph: ObjectGraph,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Checkpoint, CheckpointError> {
        if graph.nodes().first().is_some_and(|root| {
            root.children
                .iter()
                .any(|child| child.local_name == SAVE_COUNTER)
        }) {
            return Err(CheckpointError::SaveCounterTaken);
        }
        // The graph a save writes, with `save_counter`, must be within the caps too.
        try_with_save_counter(&graph)?;
        let owned = value_keys(&graph, &values)?;
        if let Some((key, _)) = owned.iter().find(|(_, keys)| keys.is_empty()) {
            return Err(CheckpointError::MissingValue {
                key: (*key).to_owned(),
            });
        }
        Ok(Checkpoint {
            graph,
            values,
            devices: BTreeMap::new(),
            save_counter: None,
            write_options: WriteOptions::default(),
            options: TraceOptions::default(),
            pending: Vec::new(),
            async_writes: false,
            in_flight: Pending::default(),
        })
    }

    /// Places the variable saved under `key` on `device` (a TensorFlow device string; by
    /// default the local CPU). Variables on other tasks make more shards.
    pub fn with_device(mut self, key: impl Into<String>, device: impl Into<String>) -> Checkpoint {
        self.devices.insert(key.into(), device.into());
        self
    }

    /// The same checkpoint writing files with `options` (fsync or not).
    pub fn with_write_options(mut self, options: WriteOptions) -> Checkpoint {
        self.write_options = options;
        self
    }

    /// The same checkpoint written with `options` (TensorFlow's `CheckpointOptions`: io device,
    /// sharding policy).
    pub fn with_options(mut self, options: TraceOptions) -> Checkpoint {
        self.options = options;
        self
    }

    /// The same checkpoint writing asynchronously or not (`CheckpointOptions(enable_async=…)`,
    /// FORMATS.md 13.14). Enabling it creates `save_counter` (at 0) if it does not exist yet,
    /// as TensorFlow does, so an asynchronous [`Checkpoint::write`] stores it.
    ///
    /// An asynchronous `write`/`save` returns once the values are captured: the plan runs at
    /// once and keeps each tensor it saves (shared, not copied: changing a value afterwards
    /// replaces it and does not change the write), and a background thread writes the files
    /// (and, for `save`, the `checkpoint` file). One write is in flight at a time: the next
    /// `write`/`save`, [`Checkpoint::restore`], [`Checkpoint::read`] and [`Checkpoint::sync`]
    /// wait for it, and the first of them returns its error. A failed write leaves no file at
    /// its prefix. Dropping the checkpoint waits for the write in flight.
    pub fn with_async(mut self, enable: bool) -> Checkpoint {
        self.async_writes = enable;
        if enable && self.save_counter.is_none() {
            self.save_counter = Some(0);
        }
        self
    }

    /// The options writes are traced with ([`Checkpoint::with_options`]).
    pub fn trace_options(&self) -> &TraceOptions {
        &self.options
    }

    /// Whether writes are asynchronous ([`Checkpoint::with_async`]).
    pub fn is_async(&self) -> bool {
        self.async_writes
    }

    /// `tf.train.Checkpoint.sync()`: waits for the asynchronous write in flight, if any, and
    /// returns its error. Synchronous checkpoints have none in flight.
    pub fn sync(&self) -> Result<(), CheckpointError> {
        self.in_flight.wait()
    }

    /// The value of `save_counter`; `None` until the first [`Checkpoint::save`] or
    /// [`Checkpoint::set_save_counter`].
    pub fn save_counter(&self) -> Option<i64> {
        self.save_counter
    }

    /// Creates `save_counter` with `value` (as a restore does), or removes it with `None`.
    pub fn set_save_counter(&mut self, value: Option<i64>) {
        self.save_counter = value;
    }

    /// The object graph of the objects (without `save_counter`).
    pub fn graph(&self) -> &ObjectGraph {
        &self.graph
    }

    /// The prefixes of the restores so far, oldest first: restore-on-create takes new values
    /// from them, the newest first ([`Checkpoint::attach`]).
    pub fn pending_restores(&self) -> &[String] {
        &self.pending
    }

    pub(super) fn pending_restores_mut(&mut self) -> &mut Vec<String> {
        &mut self.pending
    }

    /// Replaces the objects and values (checked as [`Checkpoint::new`] checks them), keeping
    /// the counter, devices, options and pending restores; returns the old ones.
    pub(super) fn replace_objects(
        &mut self,
        graph: ObjectGraph,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<(ObjectGraph, BTreeMap<String, HostTensor>), CheckpointError> {
        let checked = Checkpoint::new(graph, values)?;
        Ok((
            std::mem::replace(&mut self.graph, checked.graph),
            std::mem::replace(&mut self.values, checked.values),
        ))
    }

    /// The values, by checkpoint key (without `save_counter`).
    pub fn values(&self) -> &BTreeMap<String, HostTensor> {
        &self.values
    }

    /// Replaces the value saved under `key` (same rules as [`Checkpoint::new`]).
    pub fn set_value(&mut self, key: &str, value: HostTensor) -> Result<(), CheckpointError> {
        match self.values.get_mut(key) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(CheckpointError::UnknownValue {
                key: key.to_owned(),
            }),
        }
    }

    /// The object graph a write stores: the graph given, with `save_counter` (a child of the
    /// root, after its other children) once it exists.
    pub fn object_graph(&self) -> ObjectGraph {
        match self.save_counter {
            None => self.graph.clone(),
            Some(_) => with_save_counter(&self.graph),
        }
    }

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

    /// [`Checkpoint::write`], then `after` (TensorFlow's write callback) once the files are
    /// written: at once, or on the background thread of an asynchronous checkpoint.
    pub(super) fn write_then(
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
            captured.commit()?;
            after.map_or(Ok(()), |after| after())
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
        // The graph given, not a copy of it, until `save_counter` exists.
        let graph = match self.save_counter {
            None => Cow::Borrowed(&self.graph),
            Some(_) => Cow::Owned(with_save_counter(&self.graph)),
        };
        let counter_value = counter_tensor(self.save_counter.unwrap_or(0));
        let saved = self.saved_values(&graph, &counter_value)?;
        let EagerVariables {
            mut trackables,
            store: variables,
        } = EagerVariables::new(saved.into_iter().map(|saved| {
            let device = saved.device.unwrap_or("/cpu:0");
            (saved.key, device, saved.value.clone())
        }))?;
        trackables.push(Trackable {
            tensors: vec![SaveableTensor {
                checkpoint_key: OBJECT_GRAPH_KEY.to_owned(),
                slice_spec: String::new(),
                dtype: saveplan_ir::DType::String,
                shape: Vec::new(),
                device: if traced {
                    "/device:CPU:0".to_owned()
                } else {
                    eager_device(OBJECT_GRAPH_KEY, "/cpu:0")?
                },
                variable: VariableDef {
                    name: None,
                    init: Init::Values(vec![Scalar::Bytes(encode(&graph))]),
                    read: ReadKind::Constant,
                },
            }],
        });
        let io = BundleIo {
            write: self.write_options,
        };
        let write_error = |source| CheckpointError::Write {
            prefix: prefix.to_owned(),
            source: Box::new(source),
        };
        io.check_save_prefix(prefix)
            .map_err(|source| write_error(WriteFailure::Prefix(source)))?;
        let runner = Runner::trace_save(&trackables, &self.options, Backend::Interp)
            .map_err(|source| write_error(write_failure(source)))?;
        let captured = runner
            .capture(Run {
                prefix,
                variables: &variables,
                io: &io,
                observer: None,
            })
            .map_err(|source| write_error(write_failure(source)))?;
        Ok(Write { captured, io })
    }

    /// `tf.train.Checkpoint.save(file_prefix)`: creates `save_counter` at 0 if needed, adds one,
    /// writes `<file_prefix>-<counter>` and rewrites the `checkpoint` file of its directory
    /// (FORMATS.md 13.8) through a temporary file and a rename. Returns the path written.
    pub fn save(&mut self, file_prefix: &str) -> Result<String, CheckpointError> {
        let path = self.next_save_path(file_prefix, None)?;
        let prefix = PathBuf::from(&path);
        let after: AfterWrite = Box::new(move || write_state_file(&prefix));
        self.write_then(&path, Some(after))
    }

    /// Waits for the write in flight, adds one to `save_counter` (creating it at 0) and returns
    /// `<file_prefix>-<number>`, the counter's new value unless `number` is given.
    pub(super) fn next_save_path(
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
    pub(super) fn saved_values<'a>(
        &'a self,
        graph: &'a ObjectGraph,
        counter: &'a HostTensor,
    ) -> Result<Vec<SavedValue<'a>>, CheckpointError> {
        let owned = value_keys(graph, &self.values)?;
        let (tensors, python): (Vec<&Attribute>, Vec<&Attribute>) =
            attributes(graph).partition(|attribute| attribute.name != PYTHON_STATE);
        let mut saved = Vec::new();
        for attribute in tensors.into_iter().chain(python) {
            let key = attribute.checkpoint_key.as_str();
            let keys = owned.get(key).filter(|keys| !keys.is_empty());
            let keys = keys.map_or_else(|| vec![key], Clone::clone);
            for value_key in keys {
                let device = (self.devices.get(value_key))
                    .or_else(|| self.devices.get(key))
                    .map(String::as_str);
                saved.push(SavedValue {
                    key: value_key,
                    attribute,
                    device,
                    value: self.values.get(value_key).unwrap_or(counter),
                });
            }
        }
        Ok(saved)
    }
}

/// One value a write saves ([`Checkpoint::saved_values`]).
pub(super) struct SavedValue<'a> {
    /// Its checkpoint key.
    pub key: &'a str,
    /// The attribute it belongs to.
    pub attribute: &'a Attribute,
    /// The device it was placed on ([`Checkpoint::with_device`]), if any.
    pub device: Option<&'a str>,
    /// The value.
    pub value: &'a HostTensor,
}

/// Values as eager `tf.Variable`s (`var_0`, `var_1`, … in the order given): the trackables a
/// saver traces for them, one saveable each, and the store holding their values: what a write
/// runs its save plan over.
pub(super) struct EagerVariables {
    /// One trackable per value, placed as eager TensorFlow places it.
    pub trackables: Vec<Trackable>,
    /// The values, under [`EagerVariables::key`].
    pub store: VariableStore,
}

impl EagerVariables {
    /// The variables of `values`: (checkpoint key, device, value) each.
    pub fn new<'a>(
        values: impl IntoIterator<Item = (&'a str, &'a str, HostTensor)>,
    ) -> Result<EagerVariables, CheckpointError> {
        let mut trackables = Vec::new();
        let store = VariableStore::new();
        for (index, (key, device, value)) in values.into_iter().enumerate() {
            trackables.push(Trackable {
                tensors: vec![SaveableTensor {
                    checkpoint_key: key.to_owned(),
                    slice_spec: String::new(),
                    dtype: value.dtype(),
                    shape: shape_of(&value),
                    device: eager_device(key, device)?,
                    variable: VariableDef {
                        name: Some(Self::name(index)),
                        init: Init::Zeros,
                        read: ReadKind::Saveable,
                    },
                }],
            });
            store
                .put(&Self::key(index), value)
                .map_err(|source| CheckpointError::Variable {
                    key: key.to_owned(),
                    source,
                })?;
        }
        Ok(EagerVariables { trackables, store })
    }

    /// The variable holding value `index`.
    pub fn key(index: usize) -> VarKey {
        VarKey::new("", Self::name(index))
    }

    fn name(index: usize) -> String {
        format!("var_{index}")
    }
}

/// A host tensor's shape as the tracer's signed dimensions.
pub(super) fn shape_of(value: &HostTensor) -> Vec<i64> {
    value.shape().iter().map(|&dim| dim as i64).collect()
}

/// `save_counter`'s value as a tensor (an int64 scalar).
pub(super) fn counter_tensor(value: i64) -> HostTensor {
    HostTensor::int64_scalar(value)
}

/// Why writing (or reading) a checkpoint failed.
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
    /// Running the TF1 graph-mode form failed ([`super::GraphModeSession`]).
    #[error(transparent)]
    GraphMode(Box<super::GraphModeFailure>),
}

/// Every attribute of `graph`, in node order.
fn attributes(graph: &ObjectGraph) -> impl Iterator<Item = &Attribute> {
    graph.nodes().iter().flat_map(|node| node.attributes.iter())
}

/// `device` as eager TensorFlow places a tensor: merged onto the local CPU.
pub(super) fn eager_device(key: &str, device: &str) -> Result<String, CheckpointError> {
    let spec = DeviceSpec::parse(device).map_err(|source| CheckpointError::BadDevice {
        key: key.to_owned(),
        device: device.to_owned(),
        source,
    })?;
    let default = DeviceSpec::parse(DEFAULT_DEVICE).expect("the default device is valid");
    Ok(default.make_merged_spec(&spec).to_string())
}

/// `graph` with a `save_counter` variable as the root's last child: its node id is the next
/// after the root's other children (breadth-first order), later nodes move up by one.
pub(super) fn with_save_counter(graph: &ObjectGraph) -> ObjectGraph {
    try_with_save_counter(graph).expect("Checkpoint::new checked it")
}

/// [`with_save_counter`], or the cap of [`ObjectGraph::new`] the counter's node and edge
/// would pass.
fn try_with_save_counter(graph: &ObjectGraph) -> Result<ObjectGraph, ObjectGraphError> {
    let mut nodes = graph.clone().into_nodes();
    let id = nodes[0]
        .children
        .iter()
        .map(|child| child.node_id.0)
        .max()
        .unwrap_or(0)
        + 1;
    let shift = |node: &mut NodeId| {
        if node.0 >= id {
            node.0 += 1;
        }
    };
    for node in &mut nodes {
        node.children.iter_mut().for_each(|c| shift(&mut c.node_id));
        for slot in &mut node.slot_variables {
            shift(&mut slot.original_variable_node_id);
            shift(&mut slot.slot_variable_node_id);
        }
    }
    nodes[0].children.push(ChildRef {
        node_id: NodeId(id),
        local_name: SAVE_COUNTER.to_owned(),
    });
    let counter = ObjectNode {
        attributes: vec![Attribute {
            name: VARIABLE_VALUE.to_owned(),
            full_name: SAVE_COUNTER.to_owned(),
            checkpoint_key: String::new(),
        }],
        ..ObjectNode::default()
    };
    nodes.insert(id as usize, counter);
    let mut graph = ObjectGraph::new(nodes)?;
    graph.fill_checkpoint_keys();
    graph.fill_has_values();
    Ok(graph)
}

fn create_parent(prefix: &Path) -> Result<(), CheckpointError> {
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
pub(super) fn write_state(dir: &Path, state: &CheckpointState) -> Result<(), CheckpointError> {
    let path = dir.join(STATE_FILE);
    crate::bundle::small_file::replace_whole(&path, checkpoint_state_text(state).as_bytes(), true)
        .map_err(|source| CheckpointError::WriteStateFile { path, source })
}
