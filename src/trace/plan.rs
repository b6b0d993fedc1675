//! The plan emitter shared by both forms: variable creation, `MultiDeviceSaver.save` and
//! `MultiDeviceSaver.restore`, op by op with TensorFlow's names, devices and attributes
//! (FORMATS.md §8.2).
//!
//! In the flat form every op lands in one graph. In the function form the save and restore
//! plans are bodies of library functions, and the variables (created in the outer graph)
//! enter them as captured arguments: [`Tracer::var_input`] creates the `_Arg` at the first use,
//! named after the scope of the consuming op as TensorFlow names capture placeholders.

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{AttrValue, Attrs, DType, Graph, Op, OpId, Port, Shape, Tensor};

use super::builder::Builder;
use super::consts;
use super::registered::SaverCx;
use super::{
    Init, ReadKind, SaveableTensor, ShardableTensor, Sharding, SliceSpec, TraceError, TraceOptions,
    Trackable, UniqueNames,
};

/// The `GraphDef.versions.producer` TensorFlow 2.21 writes.
pub(super) const PRODUCER: i32 = 2474;

/// The device of the temporary-prefix ops (`with ops.device("CPU")`).
const ANY_CPU: &str = "/device:CPU:*";

/// Elements from which `tf.zeros` builds a `Fill` instead of a constant (`_constant_if_small`).
const ZEROS_FILL_THRESHOLD: i64 = 1000;

/// The validated input: tensors flattened in trackable order, grouped by task.
pub(super) struct Inputs<'a> {
    pub(super) tensors: Vec<&'a SaveableTensor>,
    /// The distinct devices of the tensors, in order of first appearance.
    device_table: Vec<Device>,
    /// The device of each tensor, as an index into `device_table`.
    device_of: Vec<u32>,
    /// The trackable of each tensor.
    trackable_of: Vec<usize>,
    /// The tensors of each trackable.
    trackables: Vec<Vec<usize>>,
    /// Tasks in order of first appearance.
    tasks: Vec<Task>,
    io_device: Option<DeviceSpec>,
}

/// One distinct device string of the input, parsed once.
struct Device {
    /// The canonical device string.
    name: String,
    /// The parsed device.
    spec: DeviceSpec,
    /// The device's task: its `CPU:0`.
    host: String,
}

struct Task {
    spec: DeviceSpec,
    name: String,
    tensors: Vec<usize>,
}

/// Where a tensor `SaveV2` saves comes from.
#[derive(Copy, Clone)]
enum SaveSource {
    /// The graph-mode read of variable `i`.
    Read(usize),
    /// An op traced in this graph (a saveable read or a `Slice`).
    Op(OpId),
}

/// Which op of a variable a plan uses.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum VarOp {
    Handle,
    Read,
}

/// One entry of a `SaveV2`: where it goes and the tensor that holds it.
struct SavedTensor {
    key: String,
    slice_spec: String,
    dtype: DType,
    tensor: SaveSource,
}

/// A created variable: its handle and its graph-mode read.
#[derive(Clone)]
pub(super) struct Variable {
    pub(super) handle: OpId,
    pub(super) handle_name: String,
    pub(super) read: OpId,
    pub(super) read_name: String,
}

/// Emits ops through one builder (a graph, or an eager executor) with one name table.
pub(super) struct Tracer<B = Graph> {
    pub(super) graph: B,
    pub(super) names: UniqueNames,
    pub(super) vars: VarSource,
    /// Stateful ops on resources traced so far (function bodies list them as control outputs).
    pub(super) resource_ops: Vec<OpId>,
}

/// Where the plan finds the variables.
pub(super) enum VarSource {
    /// In the same graph (the flat form, and the outer graph of the function form).
    Local(Vec<Variable>),
    /// In an outer graph: captured as function arguments on first use.
    Captured(Captures),
}

/// The captured arguments of a function body.
pub(super) struct Captures {
    pub(super) outer: Vec<Variable>,
    by_var: HashMap<(usize, VarOp), OpId>,
    /// The captures in argument order (argument 0, the prefix, is not among them).
    pub(super) args: Vec<CapturedArg>,
    /// Trace a `FuncGraph` as TensorFlow prints it: captures become `Placeholder`s named
    /// after the capture path, on the variable's device, instead of `_Arg`s.
    pub(super) placeholders: bool,
}

/// One captured outer tensor and the `_Arg` standing for it.
pub(super) struct CapturedArg {
    /// The argument name (lower-cased capture path with `/` → `_`).
    pub(super) name: String,
    /// Its dtype (`resource` for a handle).
    pub(super) dtype: DType,
    /// The outer op whose output 0 is passed in.
    pub(super) outer: OpId,
    /// The outer op's name (`_user_specified_name`).
    pub(super) outer_name: String,
    /// The value's shape (`_output_shapes`), absent for handles.
    pub(super) shape: Option<Shape>,
}

impl Captures {
    pub(super) fn new(outer: Vec<Variable>) -> Captures {
        Captures {
            outer,
            by_var: HashMap::new(),
            args: Vec::new(),
            placeholders: false,
        }
    }
}

impl<'a> Inputs<'a> {
    pub(super) fn collect(
        trackables: &'a [Trackable],
        options: &TraceOptions,
    ) -> Result<Inputs<'a>, TraceError> {
        let io_device = options
            .io_device
            .as_deref()
            .map(DeviceSpec::parse)
            .transpose()
            .map_err(|source| TraceError::BadIoDevice { source })?;
        let n_tensors: usize = trackables.iter().map(|t| t.tensors.len()).sum();
        let mut inputs = Inputs {
            tensors: Vec::with_capacity(n_tensors),
            device_table: Vec::new(),
            device_of: Vec::with_capacity(n_tensors),
            trackable_of: Vec::with_capacity(n_tensors),
            trackables: Vec::with_capacity(trackables.len()),
            tasks: Vec::new(),
            io_device,
        };
        let mut seen: FxHashSet<(&str, &str)> =
            FxHashSet::with_capacity_and_hasher(n_tensors, Default::default());
        let mut task_index: FxHashMap<String, usize> = FxHashMap::default();
        // Per distinct device string: its entry in `device_table` and its task.
        let mut by_device: FxHashMap<&str, (u32, usize)> = FxHashMap::default();
        for (trackable_idx, trackable) in trackables.iter().enumerate() {
            let mut members = Vec::with_capacity(trackable.tensors.len());
            for tensor in &trackable.tensors {
                validate(tensor)?;
                if !seen.insert((&tensor.checkpoint_key, &tensor.slice_spec)) {
                    return Err(TraceError::DuplicateKey {
                        key: tensor.checkpoint_key.clone(),
                        slice_spec: tensor.slice_spec.clone(),
                    });
                }
                let (device, task) = match by_device.get(tensor.device.as_str()) {
                    Some(&known) => known,
                    None => {
                        let spec = DeviceSpec::parse(&tensor.device).map_err(|source| {
                            TraceError::BadDevice {
                                key: tensor.checkpoint_key.clone(),
                                source,
                            }
                        })?;
                        let task_spec = spec.set_cpu0();
                        let task_name = task_spec.to_string();
                        let task = *task_index.entry(task_name.clone()).or_insert_with(|| {
                            inputs.tasks.push(Task {
                                spec: task_spec,
                                name: task_name.clone(),
                                tensors: Vec::new(),
                            });
                            inputs.tasks.len() - 1
                        });
                        let device = inputs.device_table.len() as u32;
                        inputs.device_table.push(Device {
                            name: spec.to_string(),
                            spec,
                            host: task_name,
                        });
                        by_device.insert(&tensor.device, (device, task));
                        (device, task)
                    }
                };
                let index = inputs.tensors.len();
                inputs.tasks[task].tensors.push(index);
                inputs.device_of.push(device);
                inputs.tensors.push(tensor);
                inputs.trackable_of.push(trackable_idx);
                members.push(index);
            }
            inputs.trackables.push(members);
        }
        if inputs.tensors.is_empty() {
            return Err(TraceError::Empty);
        }
        Ok(inputs)
    }
}

impl Inputs<'_> {
    /// The number of distinct tasks.
    pub(super) fn n_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The canonical device string of tensor `index`.
    fn device(&self, index: usize) -> &str {
        &self.device_table[self.device_of[index] as usize].name
    }

    /// The parsed device of tensor `index`.
    fn spec(&self, index: usize) -> &DeviceSpec {
        &self.device_table[self.device_of[index] as usize].spec
    }

    /// The `CPU:0` of tensor `index`'s task.
    fn host(&self, index: usize) -> &str {
        &self.device_table[self.device_of[index] as usize].host
    }
}

/// Checks that a unique temporary id is safe inside a path component.
fn check_temp_id(id: &str) -> Result<(), TraceError> {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if id.is_empty() || !id.chars().all(valid) {
        return Err(TraceError::BadTempId { id: id.to_owned() });
    }
    Ok(())
}

/// Checks what can be checked on one tensor alone: shape, slice spec and initial value.
fn validate(tensor: &SaveableTensor) -> Result<(), TraceError> {
    let key = &tensor.checkpoint_key;
    if tensor.shape.iter().any(|&dim| dim < 0) {
        return Err(TraceError::BadShape {
            key: key.clone(),
            shape: tensor.shape.clone(),
        });
    }
    if !tensor.slice_spec.is_empty() {
        let bad = |reason: String| TraceError::BadSliceSpec {
            key: key.clone(),
            spec: tensor.slice_spec.clone(),
            reason,
        };
        let spec = SliceSpec::parse(&tensor.slice_spec).map_err(bad)?;
        if spec.lengths != tensor.shape {
            return Err(bad(format!(
                "the slice has shape {:?} but the variable has shape {:?}",
                spec.lengths, tensor.shape
            )));
        }
    }
    if let Init::Values(values) = &tensor.variable.init {
        let n_elements: i64 = tensor.shape.iter().product();
        if values.len() != 1 && i64::try_from(values.len()).ok() != Some(n_elements) {
            return Err(TraceError::BadInit {
                key: key.clone(),
                reason: format!(
                    "{} values for a tensor of {n_elements} elements",
                    values.len()
                ),
            });
        }
    }
    Ok(())
}

pub(super) fn attrs<const N: usize>(pairs: [(&'static str, AttrValue); N]) -> Attrs {
    Attrs::from(pairs)
}

/// The name a variable's `VarHandleOp` asks for (before uniquing): its own or the key.
fn handle_base_name(tensor: &SaveableTensor) -> &str {
    tensor
        .variable
        .name
        .as_deref()
        .unwrap_or(&tensor.checkpoint_key)
}

pub(super) fn out(op: OpId) -> (OpId, Port) {
    (op, Port::Index(0))
}

impl Tracer {
    /// A tracer for an empty graph sized for about `n_tensors` saved tensors (a flat plan
    /// makes seven ops, eight edges and nine names per variable, plus a few per task; an
    /// eager save function eight ops, nine edges and ten names). Too small a guess costs a
    /// copy of the whole op table at the end.
    pub(super) fn with_capacity(vars: VarSource, n_tensors: usize) -> Tracer {
        let graph = Graph::with_capacity(8 * n_tensors + 64, 10 * n_tensors + 64);
        Tracer::with_builder(graph, vars, n_tensors)
    }
}

impl<B: Builder> Tracer<B> {
    /// A tracer emitting through `builder`, sized for about `n_tensors` saved tensors.
    pub(super) fn with_builder(builder: B, vars: VarSource, n_tensors: usize) -> Tracer<B> {
        Tracer {
            graph: builder,
            names: UniqueNames::with_capacity(10 * n_tensors + 64),
            vars,
            resource_ops: Vec::new(),
        }
    }

    fn in_function(&self) -> bool {
        matches!(self.vars, VarSource::Captured(_))
    }

    /// The handle or read of variable `index` as an input of the op named `scope`; in a
    /// function body the first use captures it as an argument named after `scope`.
    fn var_input(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
        which: VarOp,
        scope: &str,
    ) -> Result<(OpId, Port), TraceError> {
        let captures = match &mut self.vars {
            VarSource::Local(variables) => {
                let variable = &variables[index];
                return Ok(out(match which {
                    VarOp::Handle => variable.handle,
                    VarOp::Read => variable.read,
                }));
            }
            VarSource::Captured(captures) => captures,
        };
        if let Some(&arg) = captures.by_var.get(&(index, which)) {
            return Ok(out(arg));
        }
        let variable = &captures.outer[index];
        let tensor = inputs.tensors[index];
        let (outer, outer_name, dtype, shape) = match which {
            VarOp::Handle => (
                variable.handle,
                variable.handle_name.clone(),
                DType::Resource,
                None,
            ),
            VarOp::Read => (
                variable.read,
                variable.read_name.clone(),
                tensor.dtype,
                Some(Shape::from_dims(&tensor.shape)),
            ),
        };
        let placeholder = self.names.unique_in(scope, &outer_name);
        let name = placeholder.to_lowercase().replace('/', "_");
        let index_attr = captures.args.len() as i64 + 1;
        let arg_attrs = attrs([
            ("T", AttrValue::Type(dtype)),
            ("index", AttrValue::I(index_attr)),
        ]);
        let arg = if captures.placeholders {
            let mut attrs = attrs([
                ("_user_specified_name", AttrValue::s(outer_name.as_str())),
                ("dtype", AttrValue::Type(dtype)),
            ]);
            let shape = shape.clone().unwrap_or_else(Shape::scalar);
            attrs.insert("shape", AttrValue::Shape(shape));
            let device = inputs.device(index);
            self.graph.emit(
                placeholder,
                Op::Placeholder,
                device,
                attrs,
                &mut None.into_iter(),
                &[],
            )?
        } else {
            self.graph.emit(
                name.clone(),
                Op::Arg,
                "",
                arg_attrs,
                &mut None.into_iter(),
                &[],
            )?
        };
        captures.by_var.insert((index, which), arg);
        captures.args.push(CapturedArg {
            name,
            dtype,
            outer,
            outer_name,
            shape,
        });
        Ok(out(arg))
    }

    /// Adds an op with data inputs in order.
    pub(super) fn op(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: impl IntoIterator<Item = (OpId, Port)>,
    ) -> Result<OpId, TraceError> {
        self.graph
            .emit(name, op, device, attrs, &mut inputs.into_iter(), &[])
    }

    fn constant(&mut self, name: String, device: &str, value: Tensor) -> Result<OpId, TraceError> {
        let attrs = attrs([
            ("dtype", AttrValue::Type(value.dtype)),
            ("value", AttrValue::Tensor(Box::new(value))),
        ]);
        self.op(name, Op::Const, device, attrs, [])
    }

    pub(super) fn placeholder(&mut self, name: &str) -> Result<OpId, TraceError> {
        let name = self.names.unique(name);
        let attrs = attrs([
            ("dtype", AttrValue::Type(DType::String)),
            ("shape", AttrValue::Shape(Shape::scalar())),
        ]);
        self.op(name, Op::Placeholder, "", attrs, [])
    }

    /// [`Tracer::create_variable`] for every tensor, in order.
    pub(super) fn create_variables(
        &mut self,
        inputs: &Inputs<'_>,
    ) -> Result<Vec<Variable>, TraceError> {
        (0..inputs.tensors.len())
            .map(|index| self.create_variable(inputs, index))
            .collect()
    }

    /// Creates a graph-mode `ResourceVariable`: initial value, handle, `IsInitialized`,
    /// `Assign` and `Read`.
    pub(super) fn create_variable(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
    ) -> Result<Variable, TraceError> {
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let base = handle_base_name(tensor);
        let (handle_name, initial) = match &tensor.variable.init {
            Init::Zeros => {
                let zeros = self.zeros(tensor, device)?;
                (self.names.unique(base), zeros)
            }
            Init::Values(values) => {
                let handle_name = self.names.unique(base);
                let scope = self.names.unique_in(&handle_name, "Initializer");
                let name = self.names.unique_in(&scope, "initial_value");
                let value =
                    consts::make_tensor(tensor.dtype, &tensor.shape, values).map_err(|reason| {
                        TraceError::BadInit {
                            key: tensor.checkpoint_key.clone(),
                            reason,
                        }
                    })?;
                let attrs = attrs([
                    ("_class", colocation(&handle_name)),
                    ("dtype", AttrValue::Type(tensor.dtype)),
                    ("value", AttrValue::Tensor(Box::new(value))),
                ]);
                let initial = self.op(name, Op::Const, "", attrs, [])?;
                (handle_name, initial)
            }
        };
        let handle = self.var_handle(&handle_name, tensor, device)?;
        let scope = self.names.unique_in(&handle_name, "IsInitialized");
        let name = self.names.unique_in(&scope, "VarIsInitializedOp");
        self.op(
            name,
            Op::VarIsInitializedOp,
            device,
            Attrs::new(),
            [out(handle)],
        )?;
        let name = self.names.unique_in(&handle_name, "Assign");
        self.assign(name, device, tensor.dtype, out(handle), out(initial))?;
        self.variable_read(handle, handle_name, tensor, device)
    }

    /// Looks variable `index` up without creating it: its handle (the same shared name as
    /// [`Tracer::create_variable`] gives it) and, with `read`, a `Read/ReadVariableOp`. Without
    /// it the handle stands in for the read, which a restore never uses.
    pub(super) fn attach_variable(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
        read: bool,
    ) -> Result<Variable, TraceError> {
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let handle_name = self.names.unique(handle_base_name(tensor));
        let handle = self.var_handle(&handle_name, tensor, device)?;
        if !read {
            return Ok(Variable {
                handle,
                read: handle,
                read_name: handle_name.clone(),
                handle_name,
            });
        }
        self.variable_read(handle, handle_name, tensor, device)
    }

    /// The `VarHandleOp` of a graph-mode `ResourceVariable` named `handle_name`.
    fn var_handle(
        &mut self,
        handle_name: &str,
        tensor: &SaveableTensor,
        device: &str,
    ) -> Result<OpId, TraceError> {
        let handle_attrs = attrs([
            ("_class", colocation(handle_name)),
            ("allowed_devices", AttrValue::List(Box::default())),
            ("container", AttrValue::s("")),
            ("debug_name", AttrValue::s(format!("{handle_name}/"))),
            ("dtype", AttrValue::Type(tensor.dtype)),
            ("shape", AttrValue::Shape(Shape::from_dims(&tensor.shape))),
            ("shared_name", AttrValue::s(handle_name)),
        ]);
        self.op(
            handle_name.to_owned(),
            Op::VarHandleOp,
            device,
            handle_attrs,
            [],
        )
    }

    /// The variable's `<name>/Read/ReadVariableOp`, completing its [`Variable`].
    fn variable_read(
        &mut self,
        handle: OpId,
        handle_name: String,
        tensor: &SaveableTensor,
        device: &str,
    ) -> Result<Variable, TraceError> {
        let scope = self.names.unique_in(&handle_name, "Read");
        let name = self.names.unique_in(&scope, "ReadVariableOp");
        let read_attrs = attrs([("dtype", AttrValue::Type(tensor.dtype))]);
        let read = self.op(name, Op::ReadVariableOp, device, read_attrs, [out(handle)])?;
        Ok(Variable {
            handle,
            read,
            read_name: self.graph.graph().op(read).name.clone(),
            handle_name,
        })
    }

    /// `tf.zeros(shape, dtype)` under the variable's device: a filled constant, or for 1000
    /// elements and more a `Fill` of a shape constant and a scalar zero.
    fn zeros(&mut self, tensor: &SaveableTensor, device: &str) -> Result<OpId, TraceError> {
        let scope = self.names.unique("zeros");
        let zero = consts::zero(tensor.dtype);
        let bad = |reason: String| TraceError::BadInit {
            key: tensor.checkpoint_key.clone(),
            reason,
        };
        let n_elements: i64 = tensor.shape.iter().product();
        if n_elements < ZEROS_FILL_THRESHOLD {
            let value = consts::make_tensor(tensor.dtype, &tensor.shape, &[zero]).map_err(bad)?;
            return self.constant(scope, device, value);
        }
        let shape_name = self.names.unique_in(&scope, "shape_as_tensor");
        let shape = consts::int32_vector(&tensor.shape).map_err(bad)?;
        let shape = self.constant(shape_name, device, shape)?;
        let zero_name = self.names.unique_in(&scope, "Const");
        let zero = consts::make_tensor(tensor.dtype, &[], &[zero]).map_err(bad)?;
        let zero = self.constant(zero_name, device, zero)?;
        let attrs = attrs([
            ("T", AttrValue::Type(tensor.dtype)),
            ("index_type", AttrValue::Type(DType::Int32)),
        ]);
        self.op(scope, Op::Fill, device, attrs, [out(shape), out(zero)])
    }

    fn assign(
        &mut self,
        name: String,
        device: &str,
        dtype: DType,
        handle: (OpId, Port),
        value: (OpId, Port),
    ) -> Result<OpId, TraceError> {
        let attrs = attrs([
            ("dtype", AttrValue::Type(dtype)),
            ("validate_shape", AttrValue::B(false)),
        ]);
        self.op(name, Op::AssignVariableOp, device, attrs, [handle, value])
    }

    pub(super) fn identity(
        &mut self,
        device: &str,
        dtype: DType,
        input: (OpId, Port),
    ) -> Result<OpId, TraceError> {
        let name = self.names.unique("Identity");
        let attrs = attrs([("T", AttrValue::Type(dtype))]);
        self.op(name, Op::Identity, device, attrs, [input])
    }

    /// `MultiDeviceSaver.save`: returns the `MergeV2Checkpoints` op.
    pub(super) fn save(
        &mut self,
        inputs: &Inputs<'_>,
        prefix: (OpId, Port),
        options: &TraceOptions,
    ) -> Result<OpId, TraceError> {
        let tmp_prefix = self.temp_prefix(prefix.clone(), options)?;
        let mut registered_paths = Vec::with_capacity(options.registered_savers.len());
        for saver in &options.registered_savers {
            registered_paths.push(self.registered_path(prefix.clone(), saver.name())?);
        }
        // Registered savers run first; their prefixes lead the merge.
        let mut merged_prefixes = Vec::new();
        for (saver, path) in options.registered_savers.iter().zip(registered_paths) {
            let mut cx = SaverCx::new(self);
            merged_prefixes.extend(saver.save(&mut cx, out(path))?);
        }
        let mut save_tensors: Vec<SaveSource> =
            (0..inputs.tensors.len()).map(SaveSource::Read).collect();
        for task in &inputs.tasks {
            for &index in &task.tensors {
                save_tensors[index] = match inputs.tensors[index].variable.read {
                    ReadKind::Graph => continue,
                    ReadKind::Saveable => SaveSource::Op(self.saveable_read(inputs, index)?),
                    ReadKind::ParallelComponent => {
                        SaveSource::Op(self.component_read(inputs, index)?)
                    }
                };
            }
        }
        let mut task_shards = Vec::with_capacity(inputs.tasks.len());
        for task in &inputs.tasks {
            let shardable: Vec<ShardableTensor<'_>> = task
                .tensors
                .iter()
                .map(|&index| {
                    let tensor = inputs.tensors[index];
                    ShardableTensor {
                        checkpoint_key: &tensor.checkpoint_key,
                        slice_spec: tensor.slice_spec.trim(),
                        dtype: tensor.dtype,
                        shape: &tensor.shape,
                    }
                })
                .collect();
            let sharding = options.sharding.shard(&shardable)?;
            let shards = self.cut_slices(inputs, task, &sharding, &save_tensors)?;
            task_shards.push(shards);
        }
        let n_shards: usize = task_shards.iter().map(Vec::len).sum();
        let num_shards = self.names.unique("num_shards");
        let n_shards_value = Tensor::int32_scalar(i32::try_from(n_shards).unwrap_or(i32::MAX));
        let num_shards = self.constant(num_shards, "", n_shards_value)?;
        let io_device = inputs.io_device.as_ref().map(DeviceSpec::to_string);
        let mut shard_prefixes = Vec::with_capacity(n_shards);
        let mut saves = Vec::with_capacity(n_shards);
        for (task, shards) in inputs.tasks.iter().zip(task_shards) {
            for shard in shards {
                let shard_idx = shard_prefixes.len() as i32;
                let shard_prefix =
                    self.sharded_filename(&task.name, tmp_prefix, shard_idx, num_shards)?;
                let device = io_device.as_deref().unwrap_or(&task.name);
                saves.push(self.save_v2(inputs, device, shard_prefix, &shard)?);
                shard_prefixes.push(shard_prefix);
            }
        }
        let last_task = inputs.tasks.last().expect("inputs hold at least one task");
        let merge_device = io_device.unwrap_or_else(|| last_task.spec.set_cpu0().to_string());
        let merge_name = self.names.unique("MergeV2Checkpoints");
        let pack_name = self
            .names
            .unique(&format!("{merge_name}/checkpoint_prefixes"));
        merged_prefixes.extend(shard_prefixes.iter().map(|&p| out(p)));
        let pack_attrs = attrs([
            ("N", AttrValue::I(merged_prefixes.len() as i64)),
            ("T", AttrValue::Type(DType::String)),
            ("axis", AttrValue::I(0)),
        ]);
        let pack = self.op(
            pack_name,
            Op::Pack,
            &merge_device,
            pack_attrs,
            merged_prefixes,
        )?;
        // `with ops.control_dependencies(saves): pack`, which marks every save.
        for save in saves {
            self.graph.mark_manual_control(save);
            self.graph.control(save, pack);
        }
        let merge_attrs = attrs([
            ("allow_missing_files", AttrValue::B(false)),
            ("delete_old_dirs", AttrValue::B(true)),
        ]);
        self.op(
            merge_name,
            Op::MergeV2Checkpoints,
            &merge_device,
            merge_attrs,
            [out(pack), prefix],
        )
    }

    /// `prefix + (".part" if prefix matches ^s3://.* else "_temp/part")`, or
    /// `"_temp_<id>/part"` with a unique temporary id.
    fn temp_prefix(
        &mut self,
        prefix: (OpId, Port),
        options: &TraceOptions,
    ) -> Result<OpId, TraceError> {
        let temp_suffix = match options.unique_temp_id.as_deref() {
            None => "_temp/part".to_owned(),
            Some(id) => {
                check_temp_id(id)?;
                format!("_temp_{id}/part")
            }
        };
        let name = self.names.unique("StaticRegexFullMatch");
        let pattern = attrs([("pattern", AttrValue::s("^s3://.*"))]);
        let is_s3 = self.op(
            name,
            Op::StaticRegexFullMatch,
            ANY_CPU,
            pattern,
            [prefix.clone()],
        )?;
        let name = self.names.unique("Const");
        let part = self.constant(name, ANY_CPU, Tensor::string_scalar(".part"))?;
        let name = self.names.unique("Const");
        let temp = self.constant(name, ANY_CPU, Tensor::string_scalar(temp_suffix))?;
        let name = self.names.unique("Select");
        let select_attrs = attrs([("T", AttrValue::Type(DType::String))]);
        let suffix = self.op(
            name,
            Op::Select,
            ANY_CPU,
            select_attrs,
            [out(is_s3), out(part), out(temp)],
        )?;
        let name = self.names.unique("StringJoin");
        let join_attrs = attrs([("N", AttrValue::I(2)), ("separator", AttrValue::s(""))]);
        self.op(
            name,
            Op::StringJoin,
            ANY_CPU,
            join_attrs,
            [prefix, out(suffix)],
        )
    }

    /// A registered saver's prefix: `StringJoin(prefix, Const("-<name>"))` on any CPU.
    fn registered_path(&mut self, prefix: (OpId, Port), name: &str) -> Result<OpId, TraceError> {
        let const_name = self.names.unique("Const");
        let suffix = self.constant(
            const_name,
            ANY_CPU,
            Tensor::string_scalar(format!("-{name}")),
        )?;
        let join_name = self.names.unique("StringJoin");
        let join_attrs = attrs([("N", AttrValue::I(2)), ("separator", AttrValue::s(""))]);
        self.op(
            join_name,
            Op::StringJoin,
            ANY_CPU,
            join_attrs,
            [prefix, out(suffix)],
        )
    }

    /// Runs the registered savers' restore functions on the user's prefix, after every default
    /// restore op (`MultiDeviceSaver.restore`).
    pub(super) fn restore_registered(
        &mut self,
        options: &TraceOptions,
        prefix: (OpId, Port),
    ) -> Result<(), TraceError> {
        for saver in &options.registered_savers {
            let mut cx = SaverCx::new(self);
            saver.restore(&mut cx, prefix.clone())?;
        }
        Ok(())
    }

    /// The read of one component of a parallel-device variable
    /// (`_ParallelComponentSaveable`): a bare `ReadVariableOp` on the component's device.
    fn component_read(&mut self, inputs: &Inputs<'_>, index: usize) -> Result<OpId, TraceError> {
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let name = self.names.unique("ReadVariableOp");
        let handle = self.var_input(inputs, index, VarOp::Handle, &name)?;
        let read_attrs = attrs([("dtype", AttrValue::Type(tensor.dtype))]);
        let read = self.op(name, Op::ReadVariableOp, device, read_attrs, [handle])?;
        if self.in_function() {
            self.resource_ops.push(read);
        }
        Ok(read)
    }

    /// The read a variable saveable makes at save time; returns the tensor to save.
    fn saveable_read(&mut self, inputs: &Inputs<'_>, index: usize) -> Result<OpId, TraceError> {
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let scope = self.names.unique("Read");
        let name = self.names.unique_in(&scope, "DisableCopyOnRead");
        let handle = self.var_input(inputs, index, VarOp::Handle, &name)?;
        let disable = self.op(
            name,
            Op::DisableCopyOnRead,
            device,
            Attrs::new(),
            [handle.clone()],
        )?;
        let name = self.names.unique_in(&scope, "ReadVariableOp");
        let read_attrs = attrs([("dtype", AttrValue::Type(tensor.dtype))]);
        let read = self.op(name, Op::ReadVariableOp, device, read_attrs, [handle])?;
        if self.in_function() {
            // Automatic control dependencies order ops on the same resource.
            self.graph.control(disable, read);
            self.resource_ops.extend([disable, read]);
        }
        let on_device = self.identity(device, tensor.dtype, out(read))?;
        self.identity(inputs.host(index), tensor.dtype, out(on_device))
    }

    /// Creates the `Slice` ops of a task's sharding and resolves every shard entry to the
    /// tensor `SaveV2` saves. Returns per shard: (key, slice spec, dtype, tensor).
    fn cut_slices(
        &mut self,
        inputs: &Inputs<'_>,
        task: &Task,
        sharding: &Sharding,
        save_tensors: &[SaveSource],
    ) -> Result<Vec<Vec<SavedTensor>>, TraceError> {
        let global = |local: usize| {
            task.tensors
                .get(local)
                .copied()
                .ok_or(TraceError::BadShardEntry {
                    index: local,
                    n_tensors: task.tensors.len(),
                })
        };
        let mut slice_ops = Vec::with_capacity(sharding.slices.len());
        for piece in &sharding.slices {
            let index = global(piece.tensor)?;
            let tensor = inputs.tensors[index];
            let device = inputs.device(index);
            let bad = |reason: String| TraceError::BadSliceSpec {
                key: tensor.checkpoint_key.clone(),
                spec: tensor.slice_spec.clone(),
                reason,
            };
            let scope = self.names.unique("Slice");
            let begin_name = self.names.unique_in(&scope, "begin");
            let begin = self.constant(
                begin_name,
                device,
                consts::int32_vector(&piece.begin).map_err(bad)?,
            )?;
            let size_name = self.names.unique_in(&scope, "size");
            let size = self.constant(
                size_name,
                device,
                consts::int32_vector(&piece.size).map_err(bad)?,
            )?;
            let slice_attrs = attrs([
                ("Index", AttrValue::Type(DType::Int32)),
                ("T", AttrValue::Type(tensor.dtype)),
            ]);
            let source = match save_tensors[index] {
                SaveSource::Op(op) => out(op),
                SaveSource::Read(var) => self.var_input(inputs, var, VarOp::Read, &scope)?,
            };
            slice_ops.push(self.op(
                scope,
                Op::Slice,
                device,
                slice_attrs,
                [source, out(begin), out(size)],
            )?);
        }
        let mut shards = Vec::with_capacity(sharding.shards.len());
        for (shard_idx, shard) in sharding.shards.iter().enumerate() {
            if shard.entries.is_empty() {
                return Err(TraceError::EmptyShard {
                    task: task.name.clone(),
                    shard: shard_idx,
                });
            }
            let mut entries = Vec::with_capacity(shard.entries.len());
            for entry in &shard.entries {
                let index = global(entry.tensor)?;
                let tensor = match entry.slice {
                    Some(slice) => {
                        SaveSource::Op(*slice_ops.get(slice).ok_or(TraceError::BadShardEntry {
                            index: slice,
                            n_tensors: slice_ops.len(),
                        })?)
                    }
                    None => save_tensors[index],
                };
                entries.push(SavedTensor {
                    key: entry.checkpoint_key.clone(),
                    slice_spec: entry.slice_spec.clone(),
                    dtype: inputs.tensors[index].dtype,
                    tensor,
                });
            }
            shards.push(entries);
        }
        Ok(shards)
    }

    fn sharded_filename(
        &mut self,
        task: &str,
        tmp_prefix: OpId,
        shard_idx: i32,
        num_shards: OpId,
    ) -> Result<OpId, TraceError> {
        let scope = self.names.unique("ShardedFilename");
        let shard_name = self.names.unique_in(&scope, "shard");
        let shard = self.constant(shard_name, task, Tensor::int32_scalar(shard_idx))?;
        self.op(
            scope,
            Op::ShardedFilename,
            task,
            Attrs::new(),
            [out(tmp_prefix), out(shard), out(num_shards)],
        )
    }

    fn save_v2(
        &mut self,
        inputs: &Inputs<'_>,
        device: &str,
        shard_prefix: OpId,
        shard: &[SavedTensor],
    ) -> Result<OpId, TraceError> {
        let scope = self.names.unique("SaveV2");
        let names = Tensor::string_vector(shard.iter().map(|e| e.key.as_str()));
        let specs = Tensor::string_vector(shard.iter().map(|e| e.slice_spec.as_str()));
        let names_name = self.names.unique_in(&scope, "tensor_names");
        let names = self.constant(names_name, device, names)?;
        let specs_name = self.names.unique_in(&scope, "shape_and_slices");
        let specs = self.constant(specs_name, device, specs)?;
        let save_attrs = attrs([("dtypes", AttrValue::types(shard.iter().map(|e| e.dtype)))]);
        let mut data = vec![out(shard_prefix), out(names), out(specs)];
        for entry in shard {
            data.push(match entry.tensor {
                SaveSource::Op(op) => out(op),
                SaveSource::Read(var) => self.var_input(inputs, var, VarOp::Read, &scope)?,
            });
        }
        self.op(scope, Op::SaveV2, device, save_attrs, data)
    }

    /// `MultiDeviceSaver.restore`: one `RestoreV2` per task, then each trackable's
    /// `Identity` + `AssignVariableOp` pairs once all of its tensors are read.
    ///
    /// Returns TensorFlow's `restore_ops` dict: per checkpoint key (in insertion order) the
    /// last restore op of its trackable.
    pub(super) fn restore(
        &mut self,
        inputs: &Inputs<'_>,
        prefix: (OpId, Port),
    ) -> Result<Vec<(String, OpId)>, TraceError> {
        let cpu0 = DeviceSpec::parse("cpu:0").expect("`cpu:0` is a valid device");
        let io = inputs.io_device.as_ref().unwrap_or(&cpu0);
        let mut restored: Vec<Option<(OpId, Port)>> = vec![None; inputs.tensors.len()];
        let mut pending: Vec<usize> = inputs.trackables.iter().map(Vec::len).collect();
        let mut restore_ops: Vec<(String, OpId)> = Vec::new();
        let mut restore_op_of: FxHashMap<&str, usize> =
            FxHashMap::with_capacity_and_hasher(inputs.tensors.len(), Default::default());
        for task in &inputs.tasks {
            // The restore device of each tensor device on this task, built once.
            let mut merged: FxHashMap<u32, String> = FxHashMap::default();
            let device = task.spec.make_merged_spec(io).to_string();
            let restore = self.restore_v2(inputs, &device, prefix.clone(), &task.tensors)?;
            for (slot, &index) in task.tensors.iter().enumerate() {
                restored[index] = Some((restore, Port::Index(slot as u32)));
            }
            for index in group_by_key(inputs, &task.tensors) {
                let trackable = inputs.trackable_of[index];
                pending[trackable] -= 1;
                if pending[trackable] > 0 {
                    continue;
                }
                for &member in &inputs.trackables[trackable] {
                    let tensor = inputs.tensors[member];
                    let value = restored[member]
                        .clone()
                        .expect("every tensor of a complete trackable is restored");
                    let assign = if tensor.variable.read == ReadKind::ParallelComponent {
                        // `_ParallelComponentSaveable.restore` assigns the restored tensor
                        // as it is, under the restoring task's device scope.
                        let name = self.names.unique("AssignVariableOp");
                        let handle = self.var_input(inputs, member, VarOp::Handle, &name)?;
                        self.assign(name, &task.name, tensor.dtype, handle, value)?
                    } else {
                        let device_idx = inputs.device_of[member];
                        let device = merged
                            .entry(device_idx)
                            .or_insert_with(|| {
                                task.spec.make_merged_spec(inputs.spec(member)).to_string()
                            })
                            .as_str();
                        let identity = self.identity(device, tensor.dtype, value)?;
                        let name = self.names.unique("AssignVariableOp");
                        let handle = self.var_input(inputs, member, VarOp::Handle, &name)?;
                        self.assign(name, device, tensor.dtype, handle, out(identity))?
                    };
                    if self.in_function() {
                        self.resource_ops.push(assign);
                    }
                    let key = tensor.checkpoint_key.as_str();
                    match restore_op_of.get(key) {
                        Some(&slot) => restore_ops[slot].1 = assign,
                        None => {
                            restore_op_of.insert(key, restore_ops.len());
                            restore_ops.push((key.to_owned(), assign));
                        }
                    }
                }
            }
        }
        Ok(restore_ops)
    }

    fn restore_v2(
        &mut self,
        inputs: &Inputs<'_>,
        device: &str,
        prefix: (OpId, Port),
        tensors: &[usize],
    ) -> Result<OpId, TraceError> {
        let scope = self.names.unique("RestoreV2");
        let keys = tensors
            .iter()
            .map(|&i| inputs.tensors[i].checkpoint_key.as_str());
        let specs = tensors
            .iter()
            .map(|&i| inputs.tensors[i].slice_spec.as_str());
        let names_name = self.names.unique_in(&scope, "tensor_names");
        let names = self.constant(names_name, device, Tensor::string_vector(keys))?;
        let specs_name = self.names.unique_in(&scope, "shape_and_slices");
        let specs = self.constant(specs_name, device, Tensor::string_vector(specs))?;
        let dtypes = tensors.iter().map(|&i| inputs.tensors[i].dtype);
        let restore_attrs = attrs([("dtypes", AttrValue::types(dtypes))]);
        self.op(
            scope,
            Op::RestoreV2,
            device,
            restore_attrs,
            [prefix, out(names), out(specs)],
        )
    }
}

/// The tensors of a task in the order of the `{key: {slice_spec: tensor}}` dict TensorFlow
/// builds from them: grouped by checkpoint key, keys in first-appearance order.
fn group_by_key(inputs: &Inputs<'_>, tensors: &[usize]) -> Vec<usize> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_key: FxHashMap<&str, usize> =
        FxHashMap::with_capacity_and_hasher(tensors.len(), Default::default());
    for &index in tensors {
        let key = inputs.tensors[index].checkpoint_key.as_str();
        let group = *by_key.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(index);
    }
    groups.into_iter().flatten().collect()
}

/// The `_class` attribute colocating an op with `name`.
fn colocation(name: &str) -> AttrValue {
    AttrValue::strings([format!("loc:@{name}")])
}
