//! `MultiDeviceSaver.restore`: one `RestoreV2` per task, each trackable's assigns once all of
//! its tensors are read, then the registered savers' restores.

use rustc_hash::FxHashMap;

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{AttrValue, Op, OpId, Port, Tensor};

use super::{Inputs, Tracer, VarOp};
use crate::trace::builder::{Builder, attrs, out};
use crate::trace::registered::SaverCx;
use crate::trace::{ReadKind, TraceError, TraceOptions, TracedEntry, TracedOp};

/// What [`Tracer::restore`] traced.
pub(in crate::trace) struct Restored {
    /// TensorFlow's `restore_ops` dict: per checkpoint key (in insertion order) the last
    /// restore op of its trackable.
    pub(in crate::trace) ops: Vec<(String, OpId)>,
    /// Every `AssignVariableOp` of a restored value, in creation order.
    pub(in crate::trace) assigns: Vec<OpId>,
}

impl<B: Builder> Tracer<B> {
    /// `MultiDeviceSaver.restore`: one `RestoreV2` per task, then each trackable's
    /// `Identity` + `AssignVariableOp` pairs once all of its tensors are read.
    pub(in crate::trace) fn restore(
        &mut self,
        inputs: &Inputs<'_>,
        prefix: (OpId, Port),
    ) -> Result<Restored, TraceError> {
        let cpu0 = DeviceSpec::parse("cpu:0").expect("`cpu:0` is a valid device");
        let io = inputs.io_device.as_ref().unwrap_or(&cpu0);
        let mut restored: Vec<Option<(OpId, Port)>> = vec![None; inputs.tensors.len()];
        let mut pending: Vec<usize> = (0..inputs.n_trackables())
            .map(|trackable| inputs.members(trackable).len())
            .collect();
        let mut restore_ops: Vec<(String, OpId)> = Vec::new();
        let mut assigns: Vec<OpId> = Vec::with_capacity(inputs.tensors.len());
        let mut restore_op_of: FxHashMap<&str, usize> =
            FxHashMap::with_capacity_and_hasher(inputs.tensors.len(), Default::default());
        for task in &inputs.tasks {
            // Constants are saved, never restored.
            let tensors: Vec<usize> = task
                .tensors
                .iter()
                .copied()
                .filter(|&index| inputs.tensors[index].variable.read != ReadKind::Constant)
                .collect();
            if tensors.is_empty() {
                continue;
            }
            // The restore device of each tensor device on this task, built once.
            let mut merged: FxHashMap<u32, String> = FxHashMap::default();
            let device = task.spec.make_merged_spec(io).to_string();
            let restore = self.restore_v2(inputs, &device, prefix.clone(), &tensors)?;
            for (slot, &index) in tensors.iter().enumerate() {
                restored[index] = Some((restore, Port::Index(slot as u32)));
            }
            for index in group_by_key(inputs, &tensors) {
                let trackable = inputs.trackable_of[index];
                pending[trackable] -= 1;
                if pending[trackable] > 0 {
                    continue;
                }
                for member in inputs.members(trackable) {
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
                    assigns.push(assign);
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
        Ok(Restored {
            ops: restore_ops,
            assigns,
        })
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
        if let Some(keys) = &mut self.keys {
            let entries = tensors.iter().map(|&i| TracedEntry {
                checkpoint_key: inputs.tensors[i].checkpoint_key.clone(),
                slice_spec: inputs.tensors[i].slice_spec.clone(),
                variable: i as u32,
                cut: false,
            });
            keys.restores.push(TracedOp {
                name: scope.clone(),
                entries: entries.collect(),
            });
        }
        self.op(
            scope,
            Op::RestoreV2,
            device,
            restore_attrs,
            [prefix, out(names), out(specs)],
        )
    }

    /// Runs the registered savers' restore functions on the user's prefix, after every default
    /// restore op (`MultiDeviceSaver.restore`).
    pub(in crate::trace) fn restore_registered(
        &mut self,
        options: &TraceOptions,
        prefix: (OpId, Port),
    ) -> Result<(), TraceError> {
        for saver in &options.registered_savers {
            let mut cx = SaverCx::new(&mut self.names, &mut self.graph);
            saver.restore(&mut cx, prefix.clone())?;
        }
        Ok(())
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
