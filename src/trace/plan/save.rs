//! `MultiDeviceSaver.save`: the temporary prefix, the registered savers' saves, the reads
//! and slices of the saved tensors, one `ShardedFilename` + `SaveV2` per shard, and the `Pack`
//! of shard prefixes feeding `MergeV2Checkpoints`.

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{AttrValue, Attrs, DType, Op, OpId, Port, Tensor};

use super::group::Task;
use super::{Inputs, Tracer, VarOp};
use crate::trace::builder::{Builder, attrs, out};
use crate::trace::registered::SaverCx;
use crate::trace::{
    ConstError, ReadKind, ShardableTensor, Sharding, TraceError, TraceOptions, TracedEntry,
    TracedOp, consts,
};

/// The device of the temporary-prefix ops (`with ops.device("CPU")`).
const ANY_CPU: &str = "/device:CPU:*";

/// Where a tensor `SaveV2` saves comes from.
#[derive(Copy, Clone)]
enum SaveSource {
    /// The graph-mode read of variable `i`.
    Read(usize),
    /// An op traced in this graph (a saveable read or a `Slice`).
    Op(OpId),
}

/// One entry of a `SaveV2`: where it goes and the tensor that holds it.
struct SavedTensor {
    key: String,
    slice_spec: String,
    dtype: DType,
    tensor: SaveSource,
    /// The input tensor (its variable) it is, or is cut from.
    index: usize,
    /// Whether it is a piece cut by a `Slice` op.
    cut: bool,
}

/// Checks that a unique temporary id is safe inside a path component.
fn check_temp_id(id: &str) -> Result<(), TraceError> {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if id.is_empty() || !id.chars().all(valid) {
        return Err(TraceError::BadTempId { id: id.to_owned() });
    }
    Ok(())
}

impl<B: Builder> Tracer<B> {
    /// `MultiDeviceSaver.save`: returns the `MergeV2Checkpoints` op.
    pub(in crate::trace) fn save(
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
            let mut cx = SaverCx::new(&mut self.names, &mut self.graph);
            merged_prefixes.extend(saver.save(&mut cx, out(path))?);
        }
        let mut save_tensors: Vec<SaveSource> =
            (0..inputs.tensors.len()).map(SaveSource::Read).collect();
        for task in &inputs.tasks {
            for &index in &task.tensors {
                save_tensors[index] = match inputs.tensors[index].variable.read {
                    ReadKind::Graph | ReadKind::Constant => continue,
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
                saves.push(self.save_v2(inputs, device, shard_prefix, shard)?);
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
            let bad = |reason: ConstError| TraceError::BadSliceBounds {
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
                    index,
                    cut: entry.slice.is_some(),
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
        shard: Vec<SavedTensor>,
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
        for entry in &shard {
            data.push(match entry.tensor {
                SaveSource::Op(op) => out(op),
                SaveSource::Read(var) => self.var_input(inputs, var, VarOp::Read, &scope)?,
            });
        }
        if let Some(keys) = &mut self.keys {
            keys.saves.push(TracedOp {
                name: scope.clone(),
                entries: shard
                    .into_iter()
                    .map(|entry| TracedEntry {
                        checkpoint_key: entry.key,
                        slice_spec: entry.slice_spec,
                        variable: entry.index as u32,
                        cut: entry.cut,
                    })
                    .collect(),
            });
        }
        self.op(scope, Op::SaveV2, device, save_attrs, data)
    }
}
