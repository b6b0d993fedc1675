//! Checkpoint kernels: `SaveV2`, `RestoreV2` and `MergeV2Checkpoints`, which validate their
//! inputs and hand the work to the run's [`crate::exec::CheckpointIo`].

use saveplan_ir::DType;

use super::{KernelCx, of_dtype, typed_input, utf8_scalar};
use crate::exec::error::KernelError;
use crate::exec::io::{CheckpointIo, MergeFlags, RestoreRequest, SaveRequest};
use crate::exec::tensor::HostTensor;

/// `SaveV2(prefix, tensor_names, shape_and_slices, tensors...)`.
pub(super) fn save_v2(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    save_v2_lent(cx, dtypes, inputs, &[])
}

/// [`save_v2`] with the tensors at some positions lent from elsewhere: `(position, tensor)`
/// in `lent` saves `tensor` as tensor `position` (input `3 + position`), whatever that input
/// holds. The fused save lends the variables it borrowed under their lock.
pub(super) fn save_v2_lent(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
    lent: &[(u32, &HostTensor)],
) -> Result<Vec<HostTensor>, KernelError> {
    let (prefix, names, specs) = prefix_names_specs(inputs, dtypes.len())?;
    if inputs.len() != 3 + dtypes.len() {
        return Err(KernelError::invalid(format!(
            "expected {} tensors, got {}",
            dtypes.len(),
            inputs.len().saturating_sub(3)
        )));
    }
    let mut tensors: Vec<&HostTensor> = inputs[3..].iter().collect();
    for &(position, tensor) in lent {
        tensors[position as usize] = tensor;
    }
    let requests = dtypes
        .iter()
        .zip(tensors)
        .enumerate()
        .map(|(position, (&dtype, tensor))| {
            Ok(SaveRequest {
                name: names[position],
                shape_and_slice: specs[position],
                tensor: of_dtype(tensor, 3 + position, dtype)?,
            })
        })
        .collect::<Result<Vec<_>, KernelError>>()?;
    backend(cx)?
        .save(prefix, &requests)
        .map_err(|source| KernelError::Checkpoint {
            source: Box::new(source),
        })?;
    Ok(Vec::new())
}

/// `RestoreV2(prefix, tensor_names, shape_and_slices) -> tensors...`.
pub(super) fn restore_v2(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let (prefix, names, specs) = prefix_names_specs(inputs, dtypes.len())?;
    let requests: Vec<RestoreRequest<'_>> = dtypes
        .iter()
        .enumerate()
        .map(|(position, &dtype)| RestoreRequest {
            name: names[position],
            shape_and_slice: specs[position],
            dtype,
        })
        .collect();
    let tensors =
        backend(cx)?
            .restore(prefix, &requests)
            .map_err(|source| KernelError::Checkpoint {
                source: Box::new(source),
            })?;
    if tensors.len() != dtypes.len() {
        return Err(KernelError::invalid(format!(
            "the checkpoint backend returned {} tensors for {} names",
            tensors.len(),
            dtypes.len()
        )));
    }
    for (tensor, request) in tensors.iter().zip(&requests) {
        if tensor.dtype() != request.dtype {
            return Err(KernelError::invalid(format!(
                "tensor `{}` in the checkpoint is {}, expected {}",
                request.name,
                tensor.dtype(),
                request.dtype
            )));
        }
    }
    Ok(tensors)
}

/// `MergeV2Checkpoints(checkpoint_prefixes, destination_prefix)`.
pub(super) fn merge_v2(
    cx: &KernelCx<'_>,
    flags: MergeFlags,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let sources = typed_input(inputs, 0, DType::String)?;
    if sources.shape().len() > 1 {
        return Err(KernelError::InputShape {
            input: 0,
            expected: "a scalar or a vector".to_owned(),
            got: sources.shape().to_vec(),
        });
    }
    let sources = utf8_elements(sources, 0)?;
    let destination = utf8_scalar(inputs, 1)?;
    backend(cx)?
        .merge(&sources, destination, flags)
        .map_err(|source| KernelError::Checkpoint {
            source: Box::new(source),
        })?;
    Ok(Vec::new())
}

/// The run's checkpoint backend, which checkpoint ops need.
fn backend<'a>(cx: &KernelCx<'a>) -> Result<&'a dyn CheckpointIo, KernelError> {
    cx.io
        .ok_or_else(|| KernelError::invalid("the run has no checkpoint backend"))
}

/// The inputs `SaveV2` and `RestoreV2` share: the prefix, then `len` tensor names and `len`
/// shape-and-slice specs.
fn prefix_names_specs(
    inputs: &[HostTensor],
    len: usize,
) -> Result<(&str, Vec<&str>, Vec<&str>), KernelError> {
    Ok((
        utf8_scalar(inputs, 0)?,
        utf8_vector(inputs, 1, len)?,
        utf8_vector(inputs, 2, len)?,
    ))
}

/// Input `index` as a vector of `len` UTF-8 strings.
fn utf8_vector(inputs: &[HostTensor], index: usize, len: usize) -> Result<Vec<&str>, KernelError> {
    let tensor = typed_input(inputs, index, DType::String)?;
    if tensor.shape() != [len as u64] {
        return Err(KernelError::InputShape {
            input: index,
            expected: format!("shape [{len}]"),
            got: tensor.shape().to_vec(),
        });
    }
    utf8_elements(tensor, index)
}

/// The elements of string tensor input `index`, which must be UTF-8.
fn utf8_elements(tensor: &HostTensor, index: usize) -> Result<Vec<&str>, KernelError> {
    tensor
        .strings()
        .unwrap_or_default()
        .iter()
        .map(|bytes| {
            std::str::from_utf8(bytes)
                .map_err(|_| KernelError::invalid(format!("input {index} is not valid UTF-8")))
        })
        .collect()
}
