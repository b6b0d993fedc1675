//! Tensor slices, the vocabulary every layer shares for partitioned variables: [`Extent`],
//! [`TensorSlice`] (`TensorSliceProto`), slice specs (`shape_and_slices` elements such as
//! `"4 3 0,2:0,3"`: [`ShapeAndSlice`], parsed and printed exactly as TensorFlow writes them),
//! and regions (concrete `(start, length)` per dimension): their overlap
//! ([`overlap_volume`]) and the runs of elements two regions share ([`for_each_overlap_run`]).
//! The tracer builds specs, the plan checks look for overlaps and gaps, the session cuts and
//! assembles values, and the bundle stores slices under keys of its own encoding.

use std::fmt;

/// One dimension of a [`TensorSlice`]: `start` and `length`, or the whole dimension.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Extent {
    /// First index taken (0 for a whole dimension).
    pub start: i64,
    /// Number of indices taken, or `None` for the whole dimension (`-` in a spec).
    pub length: Option<i64>,
}

impl Extent {
    /// The whole dimension (`-`).
    pub const FULL: Extent = Extent {
        start: 0,
        length: None,
    };

    /// `start,length`.
    pub fn new(start: i64, length: i64) -> Extent {
        Extent {
            start,
            length: Some(length),
        }
    }
}

/// A rectangular part of a tensor: one [`Extent`] per dimension (`TensorSliceProto`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct TensorSlice {
    extents: Vec<Extent>,
}

/// A parsed `shape_and_slices` string: the full tensor shape and the slice taken of it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ShapeAndSlice {
    /// The shape of the whole tensor.
    pub full_shape: Vec<i64>,
    /// The part of it.
    pub slice: TensorSlice,
}

/// Why a slice spec (or a bundle's slice key) could not be used.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum SliceError {
    /// A `shape_and_slices` element without a full shape before the slice.
    #[error("expected the full shape followed by the slice")]
    NoFullShape,
    /// A dimension of the full shape that is not a non-negative integer.
    #[error("bad dimension `{dim}`")]
    BadDimension {
        /// The text of the dimension.
        dim: String,
    },
    /// An extent that is neither `-` nor `start,length`.
    #[error("extent `{extent}` is neither `-` nor `start,length`")]
    BadExtent {
        /// The text of the extent.
        extent: String,
    },
    /// An extent whose start is not an integer.
    #[error("bad start `{start}`")]
    BadStart {
        /// The text of the start.
        start: String,
    },
    /// An extent whose length is not an integer.
    #[error("bad length `{length}`")]
    BadLength {
        /// The text of the length.
        length: String,
    },
    /// An extent with a negative start or length.
    #[error("negative extent `{extent}`")]
    NegativeExtent {
        /// The text of the extent.
        extent: String,
    },
    /// A slice whose rank differs from its tensor's.
    #[error("slice has rank {slice}, tensor has rank {tensor}")]
    RankMismatch {
        /// The slice's rank.
        slice: usize,
        /// The tensor's rank.
        tensor: usize,
    },
    /// An extent reaching past its dimension.
    #[error("extent `{extent}` does not fit in a dimension of size {dim}")]
    OutOfBounds {
        /// The extent, as a spec prints it.
        extent: Extent,
        /// The dimension's size.
        dim: i64,
    },
    /// A bundle's slice key that does not decode (FORMATS.md §5).
    #[error("{reason}")]
    BadKey {
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl TensorSlice {
    /// A slice made of the given extents.
    pub fn new(extents: Vec<Extent>) -> TensorSlice {
        TensorSlice { extents }
    }

    /// The slice taking everything of a tensor of rank `rank`.
    pub fn full(rank: usize) -> TensorSlice {
        TensorSlice {
            extents: vec![Extent::FULL; rank],
        }
    }

    /// The extents, one per dimension.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.extents.len()
    }

    /// Parses the slice part of a spec: `-` or `start,length` per dimension, joined by `:`.
    pub fn parse(text: &str) -> Result<TensorSlice, SliceError> {
        let extents = text
            .split(':')
            .map(|part| {
                if part == "-" {
                    return Ok(Extent::FULL);
                }
                let (start, length) =
                    part.split_once(',').ok_or_else(|| SliceError::BadExtent {
                        extent: part.to_owned(),
                    })?;
                let start: i64 = start.parse().map_err(|_| SliceError::BadStart {
                    start: start.to_owned(),
                })?;
                let length: i64 = length.parse().map_err(|_| SliceError::BadLength {
                    length: length.to_owned(),
                })?;
                if start < 0 || length < 0 {
                    return Err(SliceError::NegativeExtent {
                        extent: part.to_owned(),
                    });
                }
                Ok(Extent::new(start, length))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TensorSlice { extents })
    }

    /// Resolves the slice against `shape`: concrete `(start, length)` per dimension, checked to
    /// lie inside the tensor.
    pub fn resolve(&self, shape: &[i64]) -> Result<Vec<(i64, i64)>, SliceError> {
        if self.extents.len() != shape.len() {
            return Err(SliceError::RankMismatch {
                slice: self.extents.len(),
                tensor: shape.len(),
            });
        }
        self.extents
            .iter()
            .zip(shape)
            .map(|(extent, &dim)| {
                let length = extent.length.unwrap_or(dim);
                let end = extent.start.checked_add(length);
                match end {
                    Some(end) if extent.start >= 0 && length >= 0 && end <= dim => {
                        Ok((extent.start, length))
                    }
                    _ => Err(SliceError::OutOfBounds {
                        extent: *extent,
                        dim,
                    }),
                }
            })
            .collect()
    }

    /// Whether the slice covers all of a tensor of shape `shape` (such a slice is stored as an
    /// ordinary entry).
    pub fn is_full_for(&self, shape: &[i64]) -> bool {
        self.extents.len() == shape.len()
            && self.extents.iter().zip(shape).all(|(extent, &dim)| {
                extent.start == 0 && extent.length.is_none_or(|length| length == dim)
            })
    }

    /// The shape of the part of a `shape` tensor this slice takes.
    pub fn slice_shape(&self, shape: &[i64]) -> Result<Vec<i64>, SliceError> {
        Ok(self
            .resolve(shape)?
            .into_iter()
            .map(|(_, length)| length)
            .collect())
    }
}

impl fmt::Display for Extent {
    /// Prints the spec form: `-` or `start,length`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.length {
            None => f.write_str("-"),
            Some(length) => write!(f, "{},{}", self.start, length),
        }
    }
}

impl fmt::Display for TensorSlice {
    /// Prints the spec form: `0,2:-`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (idx, extent) in self.extents.iter().enumerate() {
            if idx > 0 {
                f.write_str(":")?;
            }
            write!(f, "{extent}")?;
        }
        Ok(())
    }
}

impl ShapeAndSlice {
    /// Parses a `shape_and_slices` element such as `"4 3 0,2:0,3"` or `"5 -"`, checking that the
    /// slice fits the shape. The empty string is not a slice: callers treat it as "whole tensor".
    pub fn parse(text: &str) -> Result<ShapeAndSlice, SliceError> {
        let parts: Vec<&str> = text.split(' ').collect();
        let Some((slice_text, dims)) = parts.split_last().filter(|(_, dims)| !dims.is_empty())
        else {
            return Err(SliceError::NoFullShape);
        };
        let full_shape = dims
            .iter()
            .map(|dim| match dim.parse::<i64>() {
                Ok(size) if size >= 0 => Ok(size),
                _ => Err(SliceError::BadDimension {
                    dim: (*dim).to_owned(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let slice = TensorSlice::parse(slice_text)?;
        slice.resolve(&full_shape)?;
        Ok(ShapeAndSlice { full_shape, slice })
    }
}

impl ShapeAndSlice {
    /// The region the slice takes of the full shape: `(start, length)` per dimension.
    pub fn region(&self) -> Result<Vec<(i64, i64)>, SliceError> {
        self.slice.resolve(&self.full_shape)
    }
}

impl fmt::Display for ShapeAndSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for dim in &self.full_shape {
            write!(f, "{dim} ")?;
        }
        write!(f, "{}", self.slice)
    }
}

/// Number of elements two regions (concrete `(start, length)` per dimension) have in common.
pub fn overlap_volume(a: &[(i64, i64)], b: &[(i64, i64)]) -> u64 {
    a.iter()
        .zip(b)
        .fold(1u64, |acc, (&(a_start, a_len), &(b_start, b_len))| {
            let length = ((a_start + a_len).min(b_start + b_len) - a_start.max(b_start)).max(0);
            acc.saturating_mul(length as u64)
        })
}

/// How many elements of the region `whole` the `regions` cover together, overlaps counted
/// once: equal to `whole`'s volume exactly when they leave no gap.
pub fn covered_volume(whole: &[(i64, i64)], regions: &[&[(i64, i64)]]) -> u64 {
    let disjoint = regions
        .iter()
        .enumerate()
        .all(|(at, a)| regions[at + 1..].iter().all(|b| overlap_volume(a, b) == 0));
    if disjoint {
        return regions
            .iter()
            .map(|region| overlap_volume(region, whole))
            .sum();
    }
    // Overlapping regions (rare, and reported by `saveplan check`): mark each element once.
    let n_elements = whole
        .iter()
        .map(|&(_, length)| length.max(0) as u64)
        .product::<u64>() as usize;
    let mut seen = vec![false; n_elements];
    for region in regions {
        for_each_overlap_run(region, whole, |_, to, run| {
            seen[to as usize..(to + run) as usize].fill(true);
        });
    }
    seen.iter().filter(|&&covered| covered).count() as u64
}

/// Calls `copy(src_index, dst_index, run)` for every contiguous run of elements that lie both in
/// the region `src` and in the region `dst` of one tensor. Regions are concrete `(start, length)`
/// per dimension; indices are row-major element indices relative to each region.
pub fn for_each_overlap_run(
    src: &[(i64, i64)],
    dst: &[(i64, i64)],
    mut copy: impl FnMut(u64, u64, u64),
) {
    debug_assert_eq!(src.len(), dst.len());
    let rank = src.len();
    let mut lo = Vec::with_capacity(rank);
    let mut hi = Vec::with_capacity(rank);
    for (&(s_start, s_len), &(d_start, d_len)) in src.iter().zip(dst) {
        let start = s_start.max(d_start);
        let end = (s_start + s_len).min(d_start + d_len);
        if start >= end {
            return;
        }
        lo.push(start);
        hi.push(end);
    }
    if rank == 0 {
        copy(0, 0, 1);
        return;
    }
    let run = (hi[rank - 1] - lo[rank - 1]) as u64;
    let mut index = lo.clone();
    loop {
        let linear = |region: &[(i64, i64)]| {
            region
                .iter()
                .zip(&index)
                .fold(0u64, |acc, (&(start, length), &at)| {
                    acc * length as u64 + (at - start) as u64
                })
        };
        copy(linear(src), linear(dst), run);
        // Advance the odometer over every dimension except the last.
        let mut dim = rank - 1;
        loop {
            if dim == 0 {
                return;
            }
            dim -= 1;
            index[dim] += 1;
            if index[dim] < hi[dim] {
                break;
            }
            index[dim] = lo[dim];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_and_errors_say_what_is_wrong() {
        let spec = ShapeAndSlice::parse("4 3 2,2:-").unwrap();
        assert_eq!(spec.full_shape, [4, 3]);
        assert_eq!(
            spec.slice.resolve(&spec.full_shape).unwrap(),
            [(2, 2), (0, 3)]
        );
        assert_eq!(spec.to_string(), "4 3 2,2:-");
        for (text, message) in [
            ("0,1", "expected the full shape followed by the slice"),
            ("4 x 0,1:-", "bad dimension `x`"),
            ("4 0;1", "extent `0;1` is neither `-` nor `start,length`"),
            ("4 a,1", "bad start `a`"),
            ("4 0,b", "bad length `b`"),
            ("4 -1,2", "negative extent `-1,2`"),
            ("4 3 0,1", "slice has rank 1, tensor has rank 2"),
            (
                "4 3,2",
                "extent `3,2` does not fit in a dimension of size 4",
            ),
        ] {
            let err = ShapeAndSlice::parse(text).unwrap_err();
            assert_eq!(err.to_string(), message, "{text}");
        }
    }

    #[test]
    fn regions_overlap_by_their_common_volume() {
        assert_eq!(overlap_volume(&[(0, 2), (0, 3)], &[(1, 3), (1, 1)]), 1);
        assert_eq!(overlap_volume(&[(0, 2)], &[(2, 2)]), 0);
        let mut runs = Vec::new();
        for_each_overlap_run(&[(0, 2), (0, 4)], &[(1, 1), (1, 2)], |src, dst, run| {
            runs.push((src, dst, run))
        });
        assert_eq!(runs, [(5, 0, 2)]);
    }
}
