//! [`Bound`]: a session's variables and the checkpoint tensors bound to them; values go in
//! by key (checked, then cut into parts) and come out by key (assembled from restored slices).

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use saveplan_ir::DType;

use super::error::SessionError;
use super::keys::{BoundKeys, CheckpointTensor, Part};
use super::values;
use crate::exec::{HostTensor, VarKeyRef, VarSlot, VariableStore};

/// A session's variables and the checkpoint tensors bound to them: the part of a session made
/// while its plans compile (and given its values then,
/// [`Session::new_with_values`](super::Session::new_with_values)).
pub(super) struct Bound {
    pub(super) saved: BTreeMap<String, CheckpointTensor>,
    pub(super) restored: BTreeMap<String, CheckpointTensor>,
    pub(super) variables: VariableStore,
    /// The slots of the saved tensors' parts in `variables`, in key and part order; resolved
    /// by the first [`Session::assign`](super::Session::assign) or save.
    saved_slots: OnceLock<Box<[VarSlot]>>,
    /// The slots of the restored tensors' parts, likewise; resolved by the first
    /// [`Session::values`](super::Session::values).
    restored_slots: OnceLock<Box<[VarSlot]>>,
    /// Whether the last [`Session::assign`](super::Session::assign) gave every saved variable
    /// a value.
    all_assigned: AtomicBool,
}

impl Bound {
    /// The session part of `keys`, with no variable set yet.
    pub(super) fn new((saved, restored): BoundKeys) -> Bound {
        Bound {
            saved,
            restored,
            variables: VariableStore::new(),
            saved_slots: OnceLock::new(),
            restored_slots: OnceLock::new(),
            all_assigned: AtomicBool::new(false),
        }
    }

    /// [`Session::assign`](super::Session::assign).
    pub(super) fn assign(&self, values: BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
        // Checked in place first, so that nothing is stored unless all fit; the walk that
        // stores them then pairs the two maps by position.
        self.check_assignment(&values)?;
        self.all_assigned.store(false, Ordering::Release);
        // Every saved tensor has its value, in key order: the order of the slots.
        let mut slots = self.saved_slots().iter();
        // One lock for every put (nothing below touches the store otherwise).
        let mut writer = self.variables.writer();
        for ((_, value), tensor) in values.into_iter().zip(self.saved.values()) {
            let mut value = Some(value);
            for (index, part) in tensor.parts.iter().enumerate() {
                let slot = *slots.next().expect("one slot per part");
                let whole = value.as_ref().expect("taken by the last part only");
                let part_value = match &part.region {
                    // The last part takes the value itself: a clone would touch its reference
                    // counts, a cache miss per variable that is most of assigning a small one.
                    None if index + 1 == tensor.parts.len() => {
                        value.take().expect("taken by the last part only")
                    }
                    None => whole.clone(),
                    Some(region) => {
                        values::extract(whole, region).map_err(|source| SessionError::Tensor {
                            key: tensor.key.clone(),
                            source,
                        })?
                    }
                };
                writer
                    .put_at(slot, part_value)
                    .map_err(|source| SessionError::Variable {
                        key: tensor.key.clone(),
                        source,
                    })?;
            }
        }
        drop(writer);
        self.all_assigned.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether `values` gives exactly the saved tensors, each with its dtype and shape: the
    /// first given key not saved, else the first wrong value, else the first saved key not
    /// given, is the error.
    fn check_assignment(&self, values: &BTreeMap<String, HostTensor>) -> Result<(), SessionError> {
        // Both maps are sorted by key, so one walk pairs them without lookups.
        let mut given = values.iter().peekable();
        let mut missing = Missing::default();
        for tensor in self.saved.values() {
            // One comparison per pair (they are long, similar strings): the given key is taken
            // when it is not past this tensor's.
            let mut order = std::cmp::Ordering::Greater;
            let taken = given.next_if(|(key, _)| {
                order = key.as_str().cmp(&tensor.key);
                order.is_le()
            });
            match (taken, order) {
                (Some((key, _)), std::cmp::Ordering::Less) => {
                    return Err(SessionError::UnknownKey { key: key.clone() });
                }
                (Some((_, value)), _) => check_value(tensor, value)?,
                (None, _) => missing.add(&tensor.key),
            }
        }
        if let Some((key, _)) = given.next() {
            return Err(SessionError::UnknownKey { key: key.clone() });
        }
        missing.result()
    }

    /// The slots of the saved tensors' parts (see `saved_slots`). Takes the store's write
    /// lock the first time: not to be called while holding it.
    fn saved_slots(&self) -> &[VarSlot] {
        self.part_slots(&self.saved, &self.saved_slots)
    }

    /// The slots of the restored tensors' parts, likewise.
    fn restored_slots(&self) -> &[VarSlot] {
        self.part_slots(&self.restored, &self.restored_slots)
    }

    /// The slots of every part of `tensors` in `variables`, in order, resolved once into
    /// `cell`.
    fn part_slots<'s>(
        &'s self,
        tensors: &BTreeMap<String, CheckpointTensor>,
        cell: &'s OnceLock<Box<[VarSlot]>>,
    ) -> &'s [VarSlot] {
        cell.get_or_init(|| {
            let parts = tensors.values().flat_map(|tensor| &tensor.parts);
            self.variables
                .slots(parts.map(|part| VarKeyRef::from(&part.variable)))
        })
    }

    /// [`Session::save`](super::Session::save)'s check: every variable the save plan reads
    /// has a value (the first saved key without one is the error).
    pub(super) fn check_initialized(&self) -> Result<(), SessionError> {
        // After a complete `assign` every variable has a value; otherwise check each one.
        if !self.all_assigned.load(Ordering::Acquire) {
            // One entry per part, in the slots' order.
            let owners = self
                .saved
                .values()
                .flat_map(|tensor| tensor.parts.iter().map(move |_| tensor));
            let slots = self.saved_slots();
            let reader = self.variables.reader();
            let mut missing = Missing::default();
            let mut last: Option<&str> = None;
            for (tensor, &slot) in owners.zip(slots) {
                // A tensor of several parts counts once.
                if last != Some(tensor.key.as_str())
                    && !reader.is_initialized_at(slot).unwrap_or(false)
                {
                    missing.add(&tensor.key);
                    last = Some(tensor.key.as_str());
                }
            }
            return missing.result();
        }
        Ok(())
    }

    /// [`Session::values_where`](super::Session::values_where): the values of the restored
    /// tensors `keep` takes (by index, in key order).
    pub(super) fn values_where(
        &self,
        keep: impl Fn(usize) -> bool,
    ) -> Result<BTreeMap<String, HostTensor>, SessionError> {
        // In key order (`restored` is sorted), so the map is built in bulk, not by searches.
        let mut out = Vec::with_capacity(self.restored.len());
        let slots = self.restored_slots();
        let mut next_slot = 0;
        // One lock for every read.
        let reader = self.variables.reader();
        for (index, tensor) in self.restored.values().enumerate() {
            let part_slots = &slots[next_slot..next_slot + tensor.parts.len()];
            next_slot += tensor.parts.len();
            if !keep(index) {
                continue;
            }
            let read = |part: &Part, slot: VarSlot| {
                let value = reader
                    .get_at(slot)
                    .map_err(|source| SessionError::Variable {
                        key: tensor.key.clone(),
                        source,
                    })?;
                // Compared in place: this runs once per restored tensor.
                let shape_ok = match &part.region {
                    Some(region) => region
                        .iter()
                        .map(|&(_, len)| len as u64)
                        .eq(value.shape().iter().copied()),
                    None => tensor
                        .shape
                        .as_ref()
                        .is_none_or(|shape| shape.as_slice() == value.shape()),
                };
                if value.dtype() != tensor.dtype || !shape_ok {
                    let expected_shape: Option<Vec<u64>> = match &part.region {
                        Some(region) => Some(region.iter().map(|&(_, len)| len as u64).collect()),
                        None => tensor.shape.clone(),
                    };
                    let describe = |dtype: DType, shape: Option<&[u64]>| match shape {
                        Some(shape) => format!("{dtype} {shape:?}"),
                        None => dtype.to_string(),
                    };
                    return Err(SessionError::RestoredMismatch {
                        key: tensor.key.clone(),
                        expected: describe(tensor.dtype, expected_shape.as_deref()),
                        got: describe(value.dtype(), Some(value.shape())),
                    });
                }
                Ok(value)
            };
            let value = match (tensor.parts.as_slice(), &tensor.shape) {
                ([first, ..], _) if first.region.is_none() => read(first, part_slots[0])?,
                (parts, Some(shape)) => {
                    let mut pieces = Vec::with_capacity(parts.len());
                    for (part, &slot) in parts.iter().zip(part_slots) {
                        let region = part.region.as_deref().unwrap_or_default();
                        pieces.push((region, read(part, slot)?));
                    }
                    let regions: Vec<&[(i64, i64)]> =
                        pieces.iter().map(|(region, _)| *region).collect();
                    let covered =
                        saveplan_ir::slice::covered_volume(&values::full_region(shape), &regions);
                    let n_elements = shape.iter().product::<u64>();
                    if covered != n_elements {
                        // Never hand back invented zeros for what no slice restored.
                        return Err(SessionError::SlicesDoNotCover {
                            key: tensor.key.clone(),
                            shape: shape.clone(),
                            covered,
                            n_elements,
                        });
                    }
                    values::assemble(tensor.dtype, shape, &pieces).map_err(|source| {
                        SessionError::Tensor {
                            key: tensor.key.clone(),
                            source,
                        }
                    })?
                }
                _ => continue,
            };
            out.push((tensor.key.clone(), value));
        }
        Ok(BTreeMap::from_iter(out))
    }
}

/// Checks a value against the tensor the plan saves.
fn check_value(tensor: &CheckpointTensor, value: &HostTensor) -> Result<(), SessionError> {
    if value.dtype() != tensor.dtype {
        return Err(SessionError::DTypeMismatch {
            key: tensor.key.clone(),
            expected: tensor.dtype,
            got: value.dtype(),
        });
    }
    if let Some(shape) = &tensor.shape
        && value.shape() != shape.as_slice()
    {
        return Err(SessionError::ShapeMismatch {
            key: tensor.key.clone(),
            expected: shape.clone(),
            got: value.shape().to_vec(),
        });
    }
    Ok(())
}

/// The keys without a value, counted, the first few kept ([`SessionError::MissingValue`]).
#[derive(Default)]
struct Missing {
    keys: Vec<String>,
    count: usize,
}

impl Missing {
    fn add(&mut self, key: &str) {
        if self.keys.len() < super::error::MISSING_NAMED {
            self.keys.push(key.to_owned());
        }
        self.count += 1;
    }

    fn result(self) -> Result<(), SessionError> {
        match self.count {
            0 => Ok(()),
            count => Err(SessionError::MissingValue {
                keys: self.keys,
                count,
            }),
        }
    }
}
