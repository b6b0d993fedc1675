//! Variable kernels: `VarHandleOp`, `ReadVariableOp`, `AssignVariableOp`,
//! `VarIsInitializedOp` and the resource-handle input they share; TF1 reference variables
//! (`VariableV2`, `Assign`), whose reference is a resource handle with a `_ref` dtype, read as a
//! value wherever a value input takes it.

use saveplan_ir::DType;

use super::{KernelCx, VariableAttrs, input, typed_input};
use crate::exec::error::KernelError;
use crate::exec::tensor::{HostTensor, ResourceHandle};
use crate::exec::variables::VarKeyRef;

/// `VarHandleOp` (and `VariableV2`, with the `_ref` dtype): a scalar resource handle naming
/// the variable `var` on the op's device; creates nothing. The handle of the kernel's first run
/// is kept and shared by later runs on the same device.
pub(crate) fn var_handle(cx: &KernelCx<'_>, var: &VariableAttrs, dtype: DType) -> HostTensor {
    let made = var.handle.get().filter(|tensor| {
        tensor
            .as_resource_scalar()
            .is_some_and(|handle| handle.device == cx.device && handle.dtype == dtype)
    });
    if let Some(tensor) = made {
        return tensor.clone();
    }
    let tensor = HostTensor::resource(ResourceHandle {
        container: var.container.clone(),
        shared_name: var.shared_name.clone(),
        device: cx.device.to_owned(),
        dtype,
        shape: var.shape.clone(),
    });
    let _ = var.handle.set(tensor.clone());
    tensor
}

/// Input `index` as a scalar resource handle, turned into the variable key (borrowed: nothing
/// is allocated).
pub(crate) fn handle(inputs: &[HostTensor], index: usize) -> Result<VarKeyRef<'_>, KernelError> {
    let tensor = typed_input(inputs, index, DType::Resource)?;
    let handle = tensor
        .as_resource_scalar()
        .ok_or_else(|| super::not_scalar(index, tensor))?;
    Ok(handle.key())
}

/// `ReadVariableOp`: the variable's value, which must have `dtype`.
pub(super) fn read_variable(
    cx: &KernelCx<'_>,
    dtype: DType,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let key = handle(inputs, 0)?;
    Ok(vec![cx.variables.read_as(key, dtype)?])
}

/// `AssignVariableOp`: stores the value input (shared, not copied) in the variable.
pub(super) fn assign_variable(
    cx: &KernelCx<'_>,
    dtype: DType,
    validate_shape: bool,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let key = handle(inputs, 0)?;
    let value = input(inputs, 1)?.clone();
    cx.variables.assign(key, dtype, value, validate_shape)?;
    Ok(Vec::new())
}

/// Whether `tensor` is a TF1 reference (a resource handle with a `_ref` dtype).
pub(crate) fn is_ref(tensor: &HostTensor) -> bool {
    tensor.dtype() == DType::Resource
        && tensor
            .as_resource_scalar()
            .is_some_and(|handle| handle.dtype.is_ref())
}

/// The inputs with every TF1 reference from index `keep` on replaced by its variable's value,
/// or `None` when there is none (the common case: nothing is copied).
pub(super) fn deref_refs(
    cx: &KernelCx<'_>,
    inputs: &[HostTensor],
    keep: usize,
) -> Result<Option<Vec<HostTensor>>, KernelError> {
    if !inputs.iter().skip(keep).any(is_ref) {
        return Ok(None);
    }
    let mut values = inputs.to_vec();
    for tensor in values.iter_mut().skip(keep) {
        if let Some(value) = deref_ref(cx, tensor)? {
            *tensor = value;
        }
    }
    Ok(Some(values))
}

/// The value of the variable `tensor` refers to, when it is a TF1 reference.
pub(super) fn deref_ref(
    cx: &KernelCx<'_>,
    tensor: &HostTensor,
) -> Result<Option<HostTensor>, KernelError> {
    if !is_ref(tensor) {
        return Ok(None);
    }
    let handle = tensor
        .as_resource_scalar()
        .expect("a reference is a resource scalar");
    Ok(Some(
        cx.variables.read_as(handle.key(), handle.dtype.base())?,
    ))
}

/// `Assign`: stores the value input in the variable of the TF1 reference at input 0 and
/// returns that reference.
pub(super) fn assign_ref(
    cx: &KernelCx<'_>,
    dtype: DType,
    validate_shape: bool,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let reference = typed_input(inputs, 0, DType::Resource)?;
    let handle = reference
        .as_resource_scalar()
        .filter(|handle| handle.dtype.is_ref())
        .ok_or_else(|| KernelError::invalid("input 0 of Assign is not a variable reference"))?;
    let key = handle.key();
    let value = input(inputs, 1)?.clone();
    cx.variables.assign(key, dtype, value, validate_shape)?;
    Ok(vec![reference.clone()])
}

/// `VarIsInitializedOp`: whether the variable exists and holds a value.
pub(super) fn var_is_initialized(
    cx: &KernelCx<'_>,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let key = handle(inputs, 0)?;
    Ok(vec![HostTensor::bool_scalar(
        cx.variables.is_initialized(key),
    )])
}
