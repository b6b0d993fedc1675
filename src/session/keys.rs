//! Which variable each checkpoint key of a session's plans is: [`CheckpointTensor`] and its
//! [`Part`]s, bound by walking the graph ([`super::bind`]) or read off the tracer's record
//! (`Keys`), and grouped by key with the parts of a key checked to agree.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use saveplan_ir::slice::{ShapeAndSlice, SliceError};
use saveplan_ir::{DType, Module};

use super::bind::{self, Binding};
use super::error::{InconsistentKey, SessionError};
use super::values::Region;
use crate::exec::VarKey;
use crate::trace::{LeftOut, TracedKeys};

/// A checkpoint key and the variables holding it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointTensor {
    /// The checkpoint key.
    pub key: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its full shape, when the plan fixes it (always for a sliced tensor).
    pub shape: Option<Vec<u64>>,
    /// The variables holding it: one for a whole tensor, one per slice otherwise.
    pub parts: Vec<Part>,
}

/// One variable holding a checkpoint tensor or a slice of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The variable.
    pub variable: VarKey,
    /// The slice spec as the plan writes it; empty for a whole tensor.
    pub slice_spec: String,
    /// The slice, `(start, length)` per dimension of the full tensor; `None` for a whole one.
    pub region: Option<Region>,
}

/// The tensors a session's save plan writes and its restore plan reads, by checkpoint key.
pub(super) type BoundKeys = (
    BTreeMap<String, CheckpointTensor>,
    BTreeMap<String, CheckpointTensor>,
);

/// How a session finds which variable each checkpoint key of its plans is.
#[derive(Copy, Clone)]
pub(super) enum Keys<'t> {
    /// By walking the graph from its `SaveV2` and `RestoreV2` ops ([`bind`]).
    Walk,
    /// From what the tracer recorded as it traced them, and, for a trace of one task's share
    /// of a spec, the tensors it left out, which the other tasks' restore plans read.
    Traced(&'t TracedKeys, &'t BTreeMap<String, LeftOut>),
}

impl Keys<'_> {
    /// The checkpoint keys of `module`'s save plan (for `save_target`) and restore plan (for
    /// `restore_targets`), bound to variables; none for a plan left out (`None`). The two
    /// are independent: done at the same time.
    pub(super) fn bind(
        self,
        module: &Module,
        save_target: Option<&str>,
        restore_targets: Option<&[&str]>,
    ) -> Result<BoundKeys, SessionError> {
        let (saved, restored) = rayon::join(
            || match (save_target, self) {
                (None, _) => Ok(BTreeMap::new()),
                (Some(target), Keys::Walk) => group(bind::bind_save(module, &[target])?),
                (Some(_), Keys::Traced(keys, _)) => {
                    group(bind::traced_bindings(&keys.saves, &keys.variables)?)
                }
            },
            || match (restore_targets, self) {
                (None, _) => Ok(BTreeMap::new()),
                (Some(targets), Keys::Walk) => group(bind::bind_restore(module, targets)?),
                (Some(_), Keys::Traced(keys, left_out)) => {
                    let traced = group(bind::traced_bindings(&keys.restores, &keys.variables)?)?;
                    Ok(with_left_out(traced, left_out))
                }
            },
        );
        Ok((saved?, restored?))
    }
}

/// `tensors` and the whole variables a share left out (none of them a key of `tensors`: each
/// input tensor is traced or left out), by key. Both come sorted: collected into one map (two
/// sorted runs, merged), not inserted one by one.
fn with_left_out(
    tensors: BTreeMap<String, CheckpointTensor>,
    left_out: &BTreeMap<String, LeftOut>,
) -> BTreeMap<String, CheckpointTensor> {
    if left_out.is_empty() {
        return tensors;
    }
    let left_out = left_out.iter().map(|(key, left_out)| {
        let variable = &left_out.variable;
        let tensor = CheckpointTensor {
            key: key.clone(),
            dtype: variable.dtype,
            shape: bind::known_dims(variable.shape.iter().copied()),
            parts: vec![Part {
                variable: VarKey::new("", variable.shared_name.as_str()),
                slice_spec: String::new(),
                region: None,
            }],
        };
        (key.clone(), tensor)
    });
    tensors.into_iter().chain(left_out).collect()
}

/// Groups bindings by checkpoint key, checking that the parts of a key agree.
fn group(bindings: Vec<Binding>) -> Result<BTreeMap<String, CheckpointTensor>, SessionError> {
    // The tensors in order of first binding, found by key through a table of their positions
    // (a key is hashed once and stored once, in its tensor).
    let mut tensors: Vec<CheckpointTensor> = Vec::with_capacity(bindings.len());
    let mut by_key: HashTable<usize> = HashTable::with_capacity(bindings.len());
    let hash = |key: &str| FxBuildHasher.hash_one(key);
    for binding in bindings {
        let inconsistent = |reason: InconsistentKey| SessionError::InconsistentKey {
            key: binding.checkpoint_key.clone(),
            reason,
        };
        let bad_spec = |reason: SliceError| {
            inconsistent(InconsistentKey::BadSliceSpec {
                spec: binding.slice_spec.clone(),
                reason,
            })
        };
        let (shape, region) = if binding.slice_spec.is_empty() {
            (binding.shape.clone(), None)
        } else if binding.sliced_by_plan {
            let parsed = ShapeAndSlice::parse(&binding.slice_spec).map_err(bad_spec)?;
            (
                Some(parsed.full_shape.iter().map(|&dim| dim as u64).collect()),
                None,
            )
        } else {
            let parsed = ShapeAndSlice::parse(&binding.slice_spec).map_err(bad_spec)?;
            let region = parsed.region().map_err(bad_spec)?;
            let full: Vec<u64> = parsed.full_shape.iter().map(|&dim| dim as u64).collect();
            (Some(full), Some(region))
        };
        let key_hash = hash(&binding.checkpoint_key);
        let found = by_key
            .find(key_hash, |&i| tensors[i].key == binding.checkpoint_key)
            .copied();
        let part = Part {
            variable: binding.variable,
            slice_spec: match region {
                Some(_) => binding.slice_spec.clone(),
                None => String::new(),
            },
            region,
        };
        let Some(index) = found else {
            by_key.insert_unique(key_hash, tensors.len(), |&i| hash(&tensors[i].key));
            tensors.push(CheckpointTensor {
                key: binding.checkpoint_key,
                dtype: binding.dtype,
                shape,
                parts: vec![part],
            });
            continue;
        };
        let existing = &mut tensors[index];
        if existing.dtype != binding.dtype {
            return Err(inconsistent(InconsistentKey::DTypes {
                first: existing.dtype,
                second: binding.dtype,
            }));
        }
        if existing.shape != shape {
            return Err(inconsistent(InconsistentKey::FullShapes));
        }
        if existing.parts[0].region.is_some() != part.region.is_some() {
            return Err(inconsistent(InconsistentKey::WholeAndSliced));
        }
        // A variable the plan slices itself appears once per slice: keep it once.
        if !existing
            .parts
            .iter()
            .any(|known| known.variable == part.variable && known.region == part.region)
        {
            existing.parts.push(part);
        }
    }
    Ok(tensors
        .into_iter()
        .map(|tensor| (tensor.key.clone(), tensor))
        .collect())
}
