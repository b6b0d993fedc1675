//! Cutting a full tensor into the slice a partitioned variable holds, and putting slices back
//! together, for any dtype a [`HostTensor`] holds (fixed-width bytes or strings).

use saveplan_ir::DType;

use crate::bundle::slice::for_each_overlap_run;
use crate::exec::{HostTensor, TensorData, TensorError};

/// A region of a tensor: `(start, length)` per dimension.
pub type Region = Vec<(i64, i64)>;

/// The whole of a tensor of shape `shape`, as a region.
pub fn full_region(shape: &[u64]) -> Region {
    shape.iter().map(|&dim| (0, dim as i64)).collect()
}

/// The part of `full` inside `region` (relative to `full`'s shape), as a new tensor.
pub fn extract(full: &HostTensor, region: &[(i64, i64)]) -> Result<HostTensor, TensorError> {
    let src = full_region(full.shape());
    let shape: Vec<u64> = region.iter().map(|&(_, length)| length as u64).collect();
    let n_elements = shape.iter().product::<u64>() as usize;
    match full.data() {
        data @ (TensorData::Bytes(_) | TensorData::Mapped(_)) => {
            let bytes = data.bytes().unwrap_or_default();
            let size = full.dtype().element_size().unwrap_or(1);
            let mut out = vec![0u8; n_elements * size];
            for_each_overlap_run(&src, region, |from, to, run| {
                let (from, to, run) = (
                    from as usize * size,
                    to as usize * size,
                    run as usize * size,
                );
                out[to..to + run].copy_from_slice(&bytes[from..from + run]);
            });
            HostTensor::from_bytes(full.dtype(), shape, out)
        }
        TensorData::Strings(strings) => {
            let mut out = vec![Vec::new(); n_elements];
            for_each_overlap_run(&src, region, |from, to, run| {
                let (from, to, run) = (from as usize, to as usize, run as usize);
                out[to..to + run].clone_from_slice(&strings[from..from + run]);
            });
            HostTensor::from_strings(shape, out)
        }
        TensorData::Resources(_) => Err(TensorError::UnsupportedDType {
            dtype: DType::Resource,
        }),
    }
}

/// A tensor of `dtype` and `shape` assembled from `parts` (each a region and its values).
/// Callers check first that the parts cover the shape ([`saveplan_ir::slice::covered_volume`]); elements no
/// part covers would be zero (empty strings).
pub fn assemble(
    dtype: DType,
    shape: &[u64],
    parts: &[(&[(i64, i64)], HostTensor)],
) -> Result<HostTensor, TensorError> {
    let dst = full_region(shape);
    let n_elements = shape.iter().product::<u64>() as usize;
    if dtype == DType::String {
        let mut out = vec![Vec::new(); n_elements];
        for (region, part) in parts {
            let Some(strings) = part.strings() else {
                continue;
            };
            for_each_overlap_run(region, &dst, |from, to, run| {
                let (from, to, run) = (from as usize, to as usize, run as usize);
                out[to..to + run].clone_from_slice(&strings[from..from + run]);
            });
        }
        return HostTensor::from_strings(shape.to_vec(), out);
    }
    let size = dtype
        .element_size()
        .ok_or(TensorError::UnsupportedDType { dtype })?;
    let mut out = vec![0u8; n_elements * size];
    for (region, part) in parts {
        let Some(bytes) = part.bytes() else { continue };
        for_each_overlap_run(region, &dst, |from, to, run| {
            let (from, to, run) = (
                from as usize * size,
                to as usize * size,
                run as usize * size,
            );
            out[to..to + run].copy_from_slice(&bytes[from..from + run]);
        });
    }
    HostTensor::from_bytes(dtype, shape.to_vec(), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extract_then_assemble_gives_back_the_tensor() {
        let values: Vec<i32> = (0..12).collect();
        let full = HostTensor::from_i32s(vec![4, 3], &values).unwrap();
        let top = extract(&full, &[(0, 2), (0, 3)]).unwrap();
        let bottom = extract(&full, &[(2, 2), (0, 3)]).unwrap();
        assert_eq!(
            top,
            HostTensor::from_i32s(vec![2, 3], &values[..6]).unwrap()
        );
        let column = extract(&full, &[(0, 4), (1, 1)]).unwrap();
        assert_eq!(
            column,
            HostTensor::from_i32s(vec![4, 1], &[1, 4, 7, 10]).unwrap()
        );
        let parts = [
            (&[(0, 2), (0, 3)][..], top),
            (&[(2, 2), (0, 3)][..], bottom),
        ];
        assert_eq!(assemble(DType::Int32, &[4, 3], &parts).unwrap(), full);
    }

    #[test]
    fn strings_are_sliced_by_element() {
        let full =
            HostTensor::from_strings(vec![3], vec![b"a".to_vec(), b"bc".to_vec(), Vec::new()])
                .unwrap();
        let tail = extract(&full, &[(1, 2)]).unwrap();
        assert_eq!(tail.strings().unwrap(), [b"bc".to_vec(), Vec::new()]);
        let whole = assemble(DType::String, &[3], &[(&[(1, 2)][..], tail)]).unwrap();
        assert_eq!(
            whole.strings().unwrap(),
            [Vec::new(), b"bc".to_vec(), Vec::new()]
        );
    }
}
