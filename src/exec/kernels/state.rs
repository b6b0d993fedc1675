//! Variable kernels: `VarHandleOp`, `ReadVariableOp`, `AssignVariableOp`,
//! `VarIsInitializedOp` and the resource-handle input they share.

use saveplan_ir::{DType, Shape};

use super::{KernelCx, input, typed_input};
use crate::exec::error::KernelError;
use crate::exec::tensor::{HostTensor, ResourceHandle};
use crate::exec::variables::VarKey;

/// `VarHandleOp`: a scalar resource handle naming the variable; creates nothing.
pub(super) fn var_handle(
    cx: &KernelCx<'_>,
    container: &str,
    shared_name: &str,
    dtype: DType,
    shape: &Shape,
) -> HostTensor {
    HostTensor::resource(ResourceHandle {
        container: container.to_owned(),
        shared_name: shared_name.to_owned(),
        device: cx.device.to_owned(),
        dtype,
        shape: shape.clone(),
    })
}

/// Input `index` as a scalar resource handle, turned into the variable key.
pub(super) fn handle(inputs: &[HostTensor], index: usize) -> Result<VarKey, KernelError> {
    let tensor = typed_input(inputs, index, DType::Resource)?;
    let handle = tensor
        .as_resource_scalar()
        .ok_or_else(|| super::not_scalar(index, tensor))?;
    Ok(VarKey::new(&handle.container, &handle.shared_name))
}

/// `ReadVariableOp`: the variable's value, which must have `dtype`.
pub(super) fn read_variable(
    cx: &KernelCx<'_>,
    dtype: DType,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let key = handle(inputs, 0)?;
    Ok(vec![cx.variables.read_as(&key, dtype)?])
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
    cx.variables.assign(&key, dtype, value, validate_shape)?;
    Ok(Vec::new())
}

/// `VarIsInitializedOp`: whether the variable exists and holds a value.
pub(super) fn var_is_initialized(
    cx: &KernelCx<'_>,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let key = handle(inputs, 0)?;
    Ok(vec![HostTensor::bool_scalar(
        cx.variables.is_initialized(&key),
    )])
}
