//! Checkpoint kernels: `SaveV2`, `RestoreV2` and `MergeV2Checkpoints`, which validate their
//! inputs and hand the work to the run's [`crate::exec::CheckpointIo`].

use saveplan_ir::DType;

use super::{KernelCx, of_dtype, typed_input, utf8_scalar};
use crate::exec::error::KernelError;
use crate::exec::io::{CheckpointIo, MergeFlags, RestoreRequest, SaveRequest};
use crate::exec::tensor::HostTensor;

/// The input of `SaveV2`'s first tensor.
const FIRST_TENSOR: usize = saveplan_ir::saver_ops::save_v2::FIRST_TENSOR as usize;

/// `SaveV2(prefix, tensor_names, shape_and_slices, tensors...)`.
pub(super) fn save_v2(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let tensors = inputs
        .get(FIRST_TENSOR..)
        .unwrap_or_default()
        .iter()
        .collect();
    save_v2_of(cx, dtypes, inputs, tensors)
}

/// [`save_v2`] with the prefix, names and specs the first three of `head`, and the tensors
/// to save `tensors`, in position order (a fused save lends the variables it borrowed under
/// their lock). The errors are those of the inputs as one list.
pub(super) fn save_v2_of(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    head: &[HostTensor],
    tensors: Vec<&HostTensor>,
) -> Result<Vec<HostTensor>, KernelError> {
    let (prefix, names, specs) = prefix_names_specs(head, dtypes.len())?;
    let requests = if tensors.len() != dtypes.len() {
        Err(KernelError::invalid(format!(
            "expected {} tensors, got {}",
            dtypes.len(),
            tensors.len()
        )))
    } else {
        dtypes
            .iter()
            .zip(tensors)
            .zip(names.iter().zip(specs))
            .enumerate()
            .map(|(position, ((&dtype, tensor), (name, spec)))| {
                Ok(SaveRequest {
                    name: utf8(name, 1)?,
                    shape_and_slice: utf8(spec, 2)?,
                    tensor: of_dtype(tensor, FIRST_TENSOR + position, dtype)?,
                })
            })
            .collect::<Result<Vec<_>, KernelError>>()
    };
    let requests = requests.map_err(|err| first_error(names, specs, err))?;
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
    let requests = dtypes
        .iter()
        .zip(names.iter().zip(specs))
        .map(|(&dtype, (name, spec))| {
            Ok(RestoreRequest {
                name: utf8(name, 1)?,
                shape_and_slice: utf8(spec, 2)?,
                dtype,
            })
        })
        .collect::<Result<Vec<_>, KernelError>>()
        .map_err(|err| first_error(names, specs, err))?;
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
    // Against the compact dtypes, not the requests: this touches every restored tensor once
    // more, and the requests are ten times their size.
    if let Some(index) = tensors
        .iter()
        .zip(dtypes)
        .position(|(tensor, &dtype)| tensor.dtype() != dtype)
    {
        return Err(KernelError::invalid(format!(
            "tensor `{}` in the checkpoint is {}, expected {}",
            requests[index].name,
            tensors[index].dtype(),
            dtypes[index]
        )));
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

/// The elements of a string vector input, UTF-8 or not.
type Strings<'a> = &'a [Vec<u8>];

/// The inputs `SaveV2` and `RestoreV2` share: the prefix, then `len` tensor names and `len`
/// shape-and-slice specs. Their elements are checked for UTF-8 as the requests are made
/// ([`utf8`]); an error then is replaced by [`first_error`].
fn prefix_names_specs(
    inputs: &[HostTensor],
    len: usize,
) -> Result<(&str, Strings<'_>, Strings<'_>), KernelError> {
    let prefix = utf8_scalar(inputs, 0)?;
    let names = string_vector(inputs, 1, len)?;
    let specs = string_vector(inputs, 2, len).map_err(|err| first_error(names, &[], err))?;
    Ok((prefix, names, specs))
}

/// The error the ops report first, given that `err` came up while the requests were made of
/// `names` and `specs`: the inputs are checked one after another, every name (input 1), then
/// every spec (input 2), then the rest.
fn first_error(names: &[Vec<u8>], specs: &[Vec<u8>], err: KernelError) -> KernelError {
    let utf8_all = |elements: &[Vec<u8>], index| {
        elements
            .iter()
            .try_for_each(|bytes| utf8(bytes, index).map(drop))
    };
    utf8_all(names, 1)
        .and_then(|()| utf8_all(specs, 2))
        .err()
        .unwrap_or(err)
}

/// Input `index` as the elements of a vector of `len` strings.
fn string_vector(
    inputs: &[HostTensor],
    index: usize,
    len: usize,
) -> Result<&[Vec<u8>], KernelError> {
    let tensor = typed_input(inputs, index, DType::String)?;
    if tensor.shape() != [len as u64] {
        return Err(KernelError::InputShape {
            input: index,
            expected: format!("shape [{len}]"),
            got: tensor.shape().to_vec(),
        });
    }
    Ok(tensor.strings().unwrap_or_default())
}

/// Element `bytes` of string input `index`, which must be UTF-8.
fn utf8(bytes: &[u8], index: usize) -> Result<&str, KernelError> {
    std::str::from_utf8(bytes)
        .map_err(|_| KernelError::invalid(format!("input {index} is not valid UTF-8")))
}

/// The elements of string tensor input `index`, which must be UTF-8.
fn utf8_elements(tensor: &HostTensor, index: usize) -> Result<Vec<&str>, KernelError> {
    tensor
        .strings()
        .unwrap_or_default()
        .iter()
        .map(|bytes| utf8(bytes, index))
        .collect()
}
