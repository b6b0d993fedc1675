//! Sharding policies: how the tensors of one task are split into shards (one `SaveV2` each).
//!
//! These mirror `tf.train.experimental.ShardByTaskPolicy` and `MaxShardSizePolicy`
//! (`checkpoint/sharding/sharding_policies.py`); [`ShardingPolicy`] is the extension point
//! for custom policies, as TensorFlow's `ShardingCallback` is.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use saveplan_ir::DType;

use saveplan_ir::slice::{self, Extent, ShapeAndSlice, SliceError};

use super::TraceError;

/// A tensor of one task as a policy sees it.
#[derive(Clone, Debug)]
pub struct ShardableTensor<'a> {
    /// The checkpoint key.
    pub checkpoint_key: &'a str,
    /// The slice spec (`""` for a whole tensor).
    pub slice_spec: &'a str,
    /// The element type.
    pub dtype: DType,
    /// The shape of this tensor (of the slice, for a sliced variable).
    pub shape: &'a [i64],
}

/// What a policy returns: shards in order, plus the `Slice` ops it needs in creation order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sharding {
    /// The shards, each written by one `SaveV2`.
    pub shards: Vec<Shard>,
    /// Pieces cut out of tensors, in the order TensorFlow creates their `Slice` ops.
    pub slices: Vec<TensorSlice>,
}

/// One shard: `(checkpoint key, slice spec)` entries in `SaveV2` order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shard {
    /// The entries.
    pub entries: Vec<ShardEntry>,
}

/// One tensor (or piece of a tensor) in a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEntry {
    /// The checkpoint key.
    pub checkpoint_key: String,
    /// The slice spec written to `shape_and_slices`.
    pub slice_spec: String,
    /// The index of the source tensor in the policy's input.
    pub tensor: usize,
    /// The index into [`Sharding::slices`] when the entry is a piece cut by a `Slice` op.
    pub slice: Option<usize>,
}

/// A `Slice` of a source tensor: `begin` and `size` relative to that tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSlice {
    /// The index of the source tensor in the policy's input.
    pub tensor: usize,
    /// The start of the piece in each dimension.
    pub begin: Vec<i64>,
    /// The size of the piece in each dimension.
    pub size: Vec<i64>,
}

/// Splits the tensors of one task into shards.
pub trait ShardingPolicy {
    /// A one-line description (TensorFlow's `ShardingCallback.description`).
    fn description(&self) -> &str;

    /// What identifies the policy and its parameters, for caches of traced functions (two
    /// policies with the same key shard alike); the description by default.
    fn cache_key(&self) -> String {
        self.description().to_owned()
    }

    /// Shards `tensors` (all on one task, in saver order).
    fn shard(&self, tensors: &[ShardableTensor<'_>]) -> Result<Sharding, TraceError>;
}

/// One shard per task holding all its tensors (TensorFlow's default).
#[derive(Copy, Clone, Debug, Default)]
pub struct ShardByTask;

/// Shards of at most `max_shard_size` bytes, cutting tensors with `Slice` ops.
#[derive(Copy, Clone, Debug)]
pub struct MaxShardSize {
    /// The byte limit of a shard.
    pub max_shard_size: u64,
}

impl ShardingPolicy for ShardByTask {
    fn description(&self) -> &str {
        "Split tensors into shards based on their device spec task."
    }

    fn shard(&self, tensors: &[ShardableTensor<'_>]) -> Result<Sharding, TraceError> {
        let mut shard = ShardBuilder::with_capacity(tensors.len());
        for (index, tensor) in tensors.iter().enumerate() {
            shard.insert(
                tensor.checkpoint_key,
                tensor.slice_spec.to_owned(),
                index,
                None,
            );
        }
        Ok(Sharding {
            shards: vec![shard.finish()],
            slices: Vec::new(),
        })
    }
}

impl ShardingPolicy for MaxShardSize {
    fn description(&self) -> &str {
        "Split tensors into shards with a max shard size."
    }

    fn cache_key(&self) -> String {
        format!("MaxShardSizePolicy(max_shard_size={})", self.max_shard_size)
    }

    fn shard(&self, tensors: &[ShardableTensor<'_>]) -> Result<Sharding, TraceError> {
        let max = i64::try_from(self.max_shard_size).unwrap_or(i64::MAX);
        let mut partitioner = Partitioner {
            max,
            remaining: max,
            shards: vec![ShardBuilder::default()],
            large: Vec::new(),
            slices: Vec::new(),
        };
        for (index, tensor) in tensors.iter().enumerate() {
            partitioner.add_tensor(index, tensor)?;
        }
        let mut shards = Vec::new();
        if !partitioner.shards[0].is_empty() {
            shards.extend(partitioner.shards.into_iter().map(ShardBuilder::finish));
        }
        shards.extend(partitioner.large.into_iter().map(ShardBuilder::finish));
        Ok(Sharding {
            shards,
            slices: partitioner.slices,
        })
    }
}

/// A shard under construction: entries grouped by checkpoint key in first-insertion order,
/// like the nested `{key: {slice_spec: tensor}}` dicts TensorFlow builds.
#[derive(Default)]
struct ShardBuilder {
    /// The entries of each key (never empty), in first-insertion order.
    groups: Vec<Vec<ShardEntry>>,
    /// The position of each key's group, found through the key of its first entry.
    by_key: HashTable<usize>,
}

impl ShardBuilder {
    /// An empty shard with room for `n_keys` keys (growing the key table would hash every
    /// key again, each a read of its group at a random place).
    fn with_capacity(n_keys: usize) -> ShardBuilder {
        ShardBuilder {
            groups: Vec::with_capacity(n_keys),
            by_key: HashTable::with_capacity(n_keys),
        }
    }

    fn insert(&mut self, key: &str, slice_spec: String, tensor: usize, slice: Option<usize>) {
        let entry = ShardEntry {
            checkpoint_key: key.to_owned(),
            slice_spec,
            tensor,
            slice,
        };
        let hash = FxBuildHasher.hash_one(key);
        let groups = &mut self.groups;
        let Some(&group) = self
            .by_key
            .find(hash, |&group| groups[group][0].checkpoint_key == key)
        else {
            groups.push(vec![entry]);
            self.by_key.insert_unique(hash, groups.len() - 1, |&group| {
                FxBuildHasher.hash_one(&groups[group][0].checkpoint_key)
            });
            return;
        };
        let entries = &mut groups[group];
        // A repeated (key, spec) replaces the value in place, as a dict assignment does.
        match entries
            .iter_mut()
            .find(|e| e.slice_spec == entry.slice_spec)
        {
            Some(existing) => *existing = entry,
            None => entries.push(entry),
        }
    }

    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn finish(self) -> Shard {
        Shard {
            entries: self.groups.into_iter().flatten().collect(),
        }
    }
}

/// The state of `MaxShardSizePolicy.MaxShardSizePartitioner`.
struct Partitioner {
    max: i64,
    remaining: i64,
    shards: Vec<ShardBuilder>,
    large: Vec<ShardBuilder>,
    slices: Vec<TensorSlice>,
}

/// The tensor being cut: its place in the full tensor and the part not yet placed.
struct Working<'t> {
    index: usize,
    key: &'t str,
    full_shape: Vec<i64>,
    root_shape: Vec<i64>,
    root_offset: Vec<i64>,
    dtype_size: i64,
    offset: Vec<i64>,
    shape: Vec<i64>,
}

impl Partitioner {
    fn add_tensor(&mut self, index: usize, tensor: &ShardableTensor<'_>) -> Result<(), TraceError> {
        let key = tensor.checkpoint_key;
        let (full_shape, root_shape, root_offset) = if tensor.slice_spec.is_empty() {
            let shape = tensor.shape.to_vec();
            (shape.clone(), shape, vec![0; tensor.shape.len()])
        } else {
            let bad = |reason: SliceError| TraceError::BadSliceSpec {
                key: key.to_owned(),
                spec: tensor.slice_spec.to_owned(),
                reason: reason.into(),
            };
            let spec = ShapeAndSlice::parse(tensor.slice_spec).map_err(bad)?;
            let region = spec.region().map_err(bad)?;
            let (offsets, lengths) = region.into_iter().unzip();
            (spec.full_shape, lengths, offsets)
        };
        // Graph-mode TensorFlow cannot size strings (no session) and never sizes variants.
        let dtype_size = match tensor.dtype {
            DType::String | DType::Variant => 0,
            dtype => dtype.element_size().map_or(0, |size| size as i64),
        };
        let total_size = root_shape.iter().product::<i64>() * dtype_size;
        if root_shape.is_empty() {
            self.add_scalar(index, key, tensor.slice_spec, total_size);
            return Ok(());
        }
        let mut work = Working {
            index,
            key,
            offset: root_offset.clone(),
            shape: root_shape.clone(),
            full_shape,
            root_shape,
            root_offset,
            dtype_size,
        };
        let mut working_size = total_size;
        while working_size > self.remaining {
            let (axis, part_size) = self.next_partition(&work);
            if part_size == 0 {
                if self.remaining == self.max {
                    // TensorFlow loops forever here: no slice fits even an empty shard.
                    return Err(TraceError::ShardSizeTooSmall {
                        key: key.to_owned(),
                        max_shard_size: self.max as u64,
                    });
                }
                self.shards.push(ShardBuilder::default());
                self.remaining = self.max;
            } else {
                self.add_partition(&mut work, axis, part_size);
                working_size = work.shape.iter().product::<i64>() * dtype_size;
            }
        }
        if work.shape.iter().product::<i64>() > 0 {
            let begin: Vec<i64> = sub(&work.offset, &work.root_offset);
            let slice = self.push_slice(index, begin, work.shape.clone());
            let spec = spec_string(&work.full_shape, &work.offset, &work.shape);
            last(&mut self.shards).insert(key, spec, index, Some(slice));
        }
        self.remaining -= working_size;
        Ok(())
    }

    fn add_scalar(&mut self, index: usize, key: &str, slice_spec: &str, total_size: i64) {
        if total_size > self.max {
            let mut shard = ShardBuilder::default();
            shard.insert(key, slice_spec.to_owned(), index, None);
            self.large.push(shard);
            return;
        }
        if total_size > self.remaining {
            self.shards.push(ShardBuilder::default());
            self.remaining = self.max;
        }
        last(&mut self.shards).insert(key, slice_spec.to_owned(), index, None);
        self.remaining -= total_size;
    }

    /// The axis and size of the next piece: the axis needing the fewest pieces to fit the
    /// remaining space (`_get_next_partition`). A size of 0 means nothing fits.
    fn next_partition(&self, work: &Working<'_>) -> (usize, i64) {
        let num_elems: i64 = work.shape.iter().product();
        // `None` stands for Python's `math.inf`.
        let num_partitions = |axis: usize| -> Option<i64> {
            let axis_len = work.shape[axis];
            let bytes_per_slice = (num_elems / axis_len) * work.dtype_size;
            let slices_per_shard = self.remaining / bytes_per_slice;
            (slices_per_shard != 0).then(|| div_ceil(axis_len, slices_per_shard))
        };
        let mut min_parts = num_partitions(0);
        let mut min_axis = 0;
        for axis in 1..work.shape.len() {
            let parts = num_partitions(axis);
            let part_size = match parts {
                Some(parts) => (num_elems * work.dtype_size) as f64 / parts as f64,
                None => 0.0,
            };
            let fewer = match (parts, min_parts) {
                (Some(parts), Some(min)) => parts < min,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if fewer && part_size <= self.remaining as f64 {
                min_axis = axis;
                min_parts = parts;
            }
        }
        let size = min_parts.map_or(0, |parts| div_ceil(work.shape[min_axis], parts));
        (min_axis, size)
    }

    /// Places a piece of `part_size` along `axis` (`_add_partition`).
    fn add_partition(&mut self, work: &mut Working<'_>, axis: usize, part_size: i64) {
        let mut relative = sub(&work.offset, &work.root_offset);
        let mut slice_shape = sub(&work.root_shape, &relative);
        slice_shape[axis] = part_size;
        let slice_bytes = slice_shape.iter().product::<i64>() * work.dtype_size;
        let slice = self.push_slice(work.index, relative.clone(), slice_shape.clone());
        let spec = spec_string(&work.full_shape, &work.offset, &slice_shape);
        if slice_bytes > self.max {
            let mut shard = ShardBuilder::default();
            shard.insert(work.key, spec, work.index, Some(slice));
            self.large.push(shard);
        } else {
            // `next_partition` only returns pieces that fit the remaining space.
            last(&mut self.shards).insert(work.key, spec, work.index, Some(slice));
            self.remaining -= slice_bytes;
            if self.remaining == 0 {
                self.shards.push(ShardBuilder::default());
                self.remaining = self.max;
            }
        }
        work.offset[axis] += part_size;
        relative[axis] += part_size;
        work.shape = sub(&work.root_shape, &relative);
    }

    fn push_slice(&mut self, tensor: usize, begin: Vec<i64>, size: Vec<i64>) -> usize {
        self.slices.push(TensorSlice {
            tensor,
            begin,
            size,
        });
        self.slices.len() - 1
    }
}

fn last(shards: &mut [ShardBuilder]) -> &mut ShardBuilder {
    shards
        .last_mut()
        .expect("the partitioner always holds at least one shard")
}

fn sub(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

fn div_ceil(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn spec_string(full_shape: &[i64], offsets: &[i64], lengths: &[i64]) -> String {
    let extents = offsets
        .iter()
        .zip(lengths)
        .map(|(&offset, &length)| Extent::new(offset, length))
        .collect();
    ShapeAndSlice {
        full_shape: full_shape.to_vec(),
        slice: slice::TensorSlice::new(extents),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_shard_size_cuts_like_tensorflow() {
        // The `g6` / `c6` case: float32[10,8] and int32[3] with a 100-byte limit.
        let tensors = [
            ShardableTensor {
                checkpoint_key: "big",
                slice_spec: "",
                dtype: DType::Float,
                shape: &[10, 8],
            },
            ShardableTensor {
                checkpoint_key: "small",
                slice_spec: "",
                dtype: DType::Int32,
                shape: &[3],
            },
        ];
        let sharding = MaxShardSize {
            max_shard_size: 100,
        }
        .shard(&tensors)
        .unwrap();
        let specs: Vec<Vec<&str>> = sharding
            .shards
            .iter()
            .map(|shard| {
                shard
                    .entries
                    .iter()
                    .map(|e| e.slice_spec.as_str())
                    .collect()
            })
            .collect();
        assert_eq!(
            specs,
            [
                vec!["10 8 0,3:0,8"],
                vec!["10 8 3,3:0,8"],
                vec!["10 8 6,2:0,8", "10 8 8,1:0,8", "10 8 9,1:0,1"],
                vec!["10 8 9,1:1,7", "3 0,3"],
            ]
        );
        assert_eq!(sharding.slices.len(), 7);
        assert_eq!(sharding.slices[5].begin, [9, 1]);
        assert_eq!(sharding.slices[5].size, [1, 7]);
    }

    #[test]
    fn a_limit_no_row_fits_is_an_error() {
        let tensors = [ShardableTensor {
            checkpoint_key: "big",
            slice_spec: "",
            dtype: DType::Float,
            shape: &[10, 8],
        }];
        let err = MaxShardSize { max_shard_size: 2 }
            .shard(&tensors)
            .unwrap_err();
        assert!(matches!(err, TraceError::ShardSizeTooSmall { .. }));
    }
}
