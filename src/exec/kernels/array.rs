//! Array kernels: `Select`, `SelectV2`, `Pack`, `Slice` and `Fill`, for any fixed-width or
//! string dtype.

use std::ops::Range;

use saveplan_ir::DType;

use super::{input, typed_input};
use crate::exec::error::KernelError;
use crate::exec::tensor::{HostTensor, element_count};

/// `Select` / `SelectV2`. Supports a scalar condition (picks `t` or `e` whole, without copying),
/// a condition of the same shape as `t` and `e` (element-wise), and for `Select` a vector
/// condition choosing rows of `t` and `e`. Other `SelectV2` broadcasts are unsupported.
pub(super) fn select(v2: bool, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, KernelError> {
    let condition = typed_input(inputs, 0, DType::Bool)?;
    let then = input(inputs, 1)?;
    let otherwise = typed_input(inputs, 2, then.dtype())?;
    let op = if v2 { "SelectV2" } else { "Select" };
    if then.shape() != otherwise.shape() {
        if v2 {
            return Err(KernelError::unsupported(format!(
                "{op} broadcasting `t` of shape {:?} against `e` of shape {:?}",
                then.shape(),
                otherwise.shape()
            )));
        }
        return Err(KernelError::InputShape {
            input: 2,
            expected: format!("shape {:?} like input 1", then.shape()),
            got: otherwise.shape().to_vec(),
        });
    }
    let flags = condition.to_bools().unwrap_or_default();
    if condition.is_scalar() {
        let pick = if flags.first() == Some(&true) {
            then
        } else {
            otherwise
        };
        return Ok(vec![pick.clone()]);
    }
    let rows = if condition.shape() == then.shape() {
        then.num_elements().max(1)
    } else if !v2
        && condition.shape().len() == 1
        && then.shape().first() == condition.shape().first()
    {
        flags.len().max(1)
    } else if v2 {
        return Err(KernelError::unsupported(format!(
            "{op} broadcasting a condition of shape {:?} against shape {:?}",
            condition.shape(),
            then.shape()
        )));
    } else {
        return Err(KernelError::InputShape {
            input: 0,
            expected: format!("a scalar, shape {:?} or its first dimension", then.shape()),
            got: condition.shape().to_vec(),
        });
    };
    let row_len = then.num_elements() / rows;
    let parts = flags.iter().enumerate().map(|(row, &flag)| {
        let source = if flag { then } else { otherwise };
        (source, row * row_len..(row + 1) * row_len)
    });
    Ok(vec![gather(then.dtype(), then.shape().to_vec(), parts)?])
}

/// `Pack`: stacks `N` tensors of one dtype and shape along `axis` (negative counts from the end
/// of the output rank).
pub(super) fn pack(axis: i64, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, KernelError> {
    let first = input(inputs, 0)?;
    for index in 1..inputs.len() {
        let tensor = typed_input(inputs, index, first.dtype())?;
        if tensor.shape() != first.shape() {
            return Err(KernelError::InputShape {
                input: index,
                expected: format!("shape {:?} like input 0", first.shape()),
                got: tensor.shape().to_vec(),
            });
        }
    }
    let rank = first.shape().len();
    let out_rank = rank as i64 + 1;
    let axis_index = if axis < 0 { axis + out_rank } else { axis };
    let axis_index = usize::try_from(axis_index)
        .ok()
        .filter(|&axis| axis <= rank)
        .ok_or_else(|| {
            KernelError::invalid(format!("axis {axis} is out of range for rank {out_rank}"))
        })?;
    let outer = element_count(&first.shape()[..axis_index])?;
    let inner = element_count(&first.shape()[axis_index..])?;
    let mut shape = first.shape().to_vec();
    shape.insert(axis_index, inputs.len() as u64);
    let parts = (0..outer).flat_map(|row| {
        inputs
            .iter()
            .map(move |tensor| (tensor, row * inner..(row + 1) * inner))
    });
    Ok(vec![gather(first.dtype(), shape, parts)?])
}

/// Builds a tensor of `dtype` and `shape` from element ranges of other tensors of that dtype.
fn gather<'a>(
    dtype: DType,
    shape: Vec<u64>,
    parts: impl Iterator<Item = (&'a HostTensor, Range<usize>)>,
) -> Result<HostTensor, KernelError> {
    match dtype {
        DType::String => {
            let mut out = Vec::new();
            for (tensor, range) in parts {
                out.extend_from_slice(tensor.strings().and_then(|s| s.get(range)).unwrap_or(&[]));
            }
            Ok(HostTensor::from_strings(shape, out)?)
        }
        _ => {
            let size = dtype
                .element_size()
                .ok_or_else(|| KernelError::unsupported(format!("{dtype} tensors here")))?;
            let mut out = Vec::new();
            for (tensor, range) in parts {
                if let Some(bytes) = tensor.bytes() {
                    let bytes = bytes.get(range.start * size..range.end * size);
                    out.extend_from_slice(bytes.unwrap_or(&[]));
                }
            }
            Ok(HostTensor::from_bytes(dtype, shape, out)?)
        }
    }
}

/// `Slice(input, begin, size)`: the block of `input` starting at `begin` with extent `size`
/// per dimension (`-1` means to the end). A block covering the whole input shares its storage.
pub(super) fn slice(inputs: &[HostTensor]) -> Result<Vec<HostTensor>, KernelError> {
    let tensor = input(inputs, 0)?;
    let shape = tensor.shape();
    let begin = index_vector(inputs, 1, shape.len())?;
    let size = index_vector(inputs, 2, shape.len())?;
    let mut out_shape = Vec::with_capacity(shape.len());
    for (dim, (&start, &extent)) in begin.iter().zip(&size).enumerate() {
        let full = shape[dim] as i64;
        let extent = if extent == -1 { full - start } else { extent };
        if start < 0 || extent < 0 || start + extent > full {
            return Err(KernelError::invalid(format!(
                "slice [{start}, {start} + {extent}) of dimension {dim} is outside [0, {full})"
            )));
        }
        out_shape.push(extent as u64);
    }
    if out_shape == shape {
        return Ok(vec![tensor.clone()]);
    }
    let Some((&row_len, outer_dims)) = out_shape.split_last() else {
        return Ok(vec![tensor.clone()]);
    };
    // Element strides of the input, innermost last.
    let mut strides = vec![1u64; shape.len()];
    for dim in (0..shape.len().saturating_sub(1)).rev() {
        strides[dim] = strides[dim + 1] * shape[dim + 1];
    }
    let n_rows = element_count(outer_dims)?;
    let mut ranges = Vec::with_capacity(n_rows);
    let mut index = vec![0u64; outer_dims.len()];
    for _ in 0..n_rows {
        let start: u64 = (0..shape.len())
            .map(|dim| {
                let within = index.get(dim).copied().unwrap_or(0);
                (begin[dim] as u64 + within) * strides[dim]
            })
            .sum();
        ranges.push(start as usize..(start + row_len) as usize);
        for dim in (0..outer_dims.len()).rev() {
            index[dim] += 1;
            if index[dim] < outer_dims[dim] {
                break;
            }
            index[dim] = 0;
        }
    }
    let parts = ranges.into_iter().map(|range| (tensor, range));
    Ok(vec![gather(tensor.dtype(), out_shape, parts)?])
}

/// Input `index` as a vector of `len` int32 or int64 values.
/// `Fill`: a tensor of shape `dims` (a rank-1 int32 or int64 tensor of non-negative sizes) with
/// every element equal to the scalar `value`.
pub(super) fn fill(inputs: &[HostTensor]) -> Result<Vec<HostTensor>, KernelError> {
    let dims_input = input(inputs, 0)?;
    let rank = match dims_input.shape() {
        [rank] => *rank as usize,
        other => {
            return Err(KernelError::InputShape {
                input: 0,
                expected: "a vector".to_owned(),
                got: other.to_vec(),
            });
        }
    };
    let dims = index_vector(inputs, 0, rank)?;
    let value = input(inputs, 1)?;
    if !value.is_scalar() {
        return Err(KernelError::InputShape {
            input: 1,
            expected: "a scalar".to_owned(),
            got: value.shape().to_vec(),
        });
    }
    let shape = dims
        .iter()
        .map(|&dim| {
            u64::try_from(dim)
                .map_err(|_| KernelError::invalid(format!("Fill dimension {dim} is negative")))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let n = element_count(&shape)?;
    let tensor = match (value.bytes(), value.strings()) {
        (Some(bytes), _) => HostTensor::from_bytes(value.dtype(), shape, bytes.repeat(n))?,
        (None, Some(strings)) => HostTensor::from_strings(shape, vec![strings[0].clone(); n])?,
        (None, None) => {
            return Err(KernelError::unsupported(format!(
                "Fill of a {} value",
                value.dtype()
            )));
        }
    };
    Ok(vec![tensor])
}

fn index_vector(inputs: &[HostTensor], index: usize, len: usize) -> Result<Vec<i64>, KernelError> {
    let tensor = input(inputs, index)?;
    if tensor.shape() != [len as u64] {
        return Err(KernelError::InputShape {
            input: index,
            expected: format!("shape [{len}]"),
            got: tensor.shape().to_vec(),
        });
    }
    let bytes = tensor.bytes().unwrap_or_default();
    match tensor.dtype() {
        DType::Int32 => Ok(bytes
            .chunks_exact(4)
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect()),
        DType::Int64 => Ok(bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect()),
        other => Err(KernelError::InputDType {
            input: index,
            expected: DType::Int32,
            got: other,
        }),
    }
}
