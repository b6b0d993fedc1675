//! [`VariableStore`]: resource variables keyed by (container, shared name), holding host
//! tensors that are put, read and taken without copying their elements.
//!
//! This is what `VarHandleOp`, `ReadVariableOp`, `AssignVariableOp` and `VarIsInitializedOp`
//! act on, and what a caller fills before running a save plan and reads after a restore plan.
//! As in TensorFlow, a variable comes into existence with its first assignment and keeps the
//! dtype of that assignment; a handle alone creates nothing.
//!
//! Each key the store has seen owns a [`VarSlot`]: a position that stays valid for the
//! store's life (a taken variable leaves its slot empty). Code that uses the same variables
//! again and again ([`crate::session::Session`], a fused save or restore step) resolves its
//! keys to slots once and then indexes, with no hashing or key comparison per tensor.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;
use saveplan_ir::DType;

use super::sync::{lock, unpoisoned};
use super::tensor::{HostTensor, ResourceHandle};

/// Identifies a variable: the `container` and `shared_name` of its `VarHandleOp`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VarKey {
    /// The resource container; often empty.
    pub container: String,
    /// The resource name.
    pub shared_name: String,
}

/// A borrowed [`VarKey`]: what the variable kernels look variables up with, taken from a
/// resource handle without allocating. Every method of [`VariableStore`] takes either form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VarKeyRef<'a> {
    /// The resource container; often empty.
    pub container: &'a str,
    /// The resource name.
    pub shared_name: &'a str,
}

impl VarKeyRef<'_> {
    /// The owned key (for errors and for creating a variable).
    pub fn to_key(self) -> VarKey {
        VarKey::new(self.container, self.shared_name)
    }
}

impl ResourceHandle {
    /// The key of the variable this handle names, borrowed from it.
    pub fn key(&self) -> VarKeyRef<'_> {
        VarKeyRef {
            container: &self.container,
            shared_name: &self.shared_name,
        }
    }
}

impl<'a> From<&'a VarKey> for VarKeyRef<'a> {
    fn from(key: &'a VarKey) -> VarKeyRef<'a> {
        VarKeyRef {
            container: &key.container,
            shared_name: &key.shared_name,
        }
    }
}

/// A variable's position in one [`VariableStore`], from [`VariableStore::slot`] or
/// [`VariableWriter::slot`]: valid for that store's whole life, whether or not the variable
/// exists at the moment. Used with another store, it is refused
/// ([`VariableError::ForeignSlot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VarSlot {
    /// The store's identity ([`VariableStore`]'s `id`).
    store: u64,
    /// The position in the store's slot vector.
    index: u32,
}

/// Identities of stores, so that a slot names its store. Starts at 1.
static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

/// A thread-safe set of resource variables.
///
/// Every value is a [`HostTensor`], whose storage is reference counted: [`VariableStore::get`]
/// hands out a clone that shares the elements, [`VariableStore::put`] stores the given tensor
/// as is and [`VariableStore::take`] moves it out again.
#[derive(Debug)]
pub struct VariableStore {
    /// This store's identity, carried by its [`VarSlot`]s.
    id: u64,
    /// The slots and their index.
    table: RwLock<Table>,
}

impl Default for VariableStore {
    fn default() -> VariableStore {
        VariableStore {
            id: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            table: RwLock::new(Table::default()),
        }
    }
}

/// Every key the store has seen, each with its slot.
#[derive(Debug, Default)]
struct Table {
    /// Positions in `slots`, hashed by their slot's key: lookups of long, similar names are
    /// what resolving a key costs. Nothing iterates it.
    index: HashTable<u32>,
    /// One per key, in first-use order; never removed.
    slots: Vec<Slot>,
    /// How many slots hold a variable.
    live: usize,
}

/// One key and its variable, if it exists.
#[derive(Debug)]
struct Slot {
    key: VarKey,
    variable: Option<Variable>,
}

/// One variable: its dtype, fixed by the first assignment, and its value.
#[derive(Debug)]
struct Variable {
    dtype: DType,
    value: HostTensor,
}

/// The hash of a key in a store's index (owned keys hash through their borrowed form).
fn hash_key(key: VarKeyRef<'_>) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl Table {
    /// The position of `key`'s slot, if the store has seen it.
    fn find(&self, key: VarKeyRef<'_>) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash_key(key), |&index| {
                VarKeyRef::from(&slots[index as usize].key) == key
            })
            .copied()
    }

    /// Makes room for `n` more keys.
    fn make_room(&mut self, n: usize) {
        let Table { index, slots, .. } = self;
        index.reserve(n, |&index| hash_key((&slots[index as usize].key).into()));
        slots.reserve(n);
    }

    /// The position of `key`'s slot, made (empty) if the store has not seen it.
    fn reserve(&mut self, key: VarKeyRef<'_>) -> u32 {
        let Table { index, slots, .. } = self;
        // One hash and one probe, whether the key is new or not.
        let entry = index.entry(
            hash_key(key),
            |&index| VarKeyRef::from(&slots[index as usize].key) == key,
            |&index| hash_key((&slots[index as usize].key).into()),
        );
        match entry {
            Entry::Occupied(found) => *found.get(),
            Entry::Vacant(vacant) => {
                let position = u32::try_from(slots.len()).expect("fewer than 2^32 variables");
                slots.push(Slot {
                    key: key.to_key(),
                    variable: None,
                });
                vacant.insert(position);
                position
            }
        }
    }

    /// Sets `slot`'s value like `AssignVariableOp` (see [`VariableWriter::assign`]).
    fn assign(
        &mut self,
        slot: u32,
        dtype: DType,
        value: HostTensor,
        validate_shape: bool,
    ) -> Result<Option<HostTensor>, VariableError> {
        let slot = &mut self.slots[slot as usize];
        if value.dtype() != dtype {
            return Err(VariableError::DTypeMismatch {
                key: slot.key.clone(),
                held: dtype,
                requested: value.dtype(),
            });
        }
        match &mut slot.variable {
            Some(variable) => {
                if variable.dtype != dtype {
                    return Err(VariableError::DTypeMismatch {
                        key: slot.key.clone(),
                        held: variable.dtype,
                        requested: dtype,
                    });
                }
                if validate_shape && variable.value.shape() != value.shape() {
                    return Err(VariableError::ShapeMismatch {
                        key: slot.key.clone(),
                        held: variable.value.shape().to_vec(),
                        requested: value.shape().to_vec(),
                    });
                }
                Ok(Some(std::mem::replace(&mut variable.value, value)))
            }
            None => {
                slot.variable = Some(Variable { dtype, value });
                self.live += 1;
                Ok(None)
            }
        }
    }

    /// The value in `slot`, sharing its storage, which must hold `dtype` if given.
    fn read(&self, slot: u32, dtype: Option<DType>) -> Result<HostTensor, VariableError> {
        self.value(slot, dtype).cloned()
    }

    /// The value in `slot`, borrowed, which must hold `dtype` if given.
    fn value(&self, slot: u32, dtype: Option<DType>) -> Result<&HostTensor, VariableError> {
        let slot = &self.slots[slot as usize];
        let Some(variable) = &slot.variable else {
            return Err(VariableError::NotFound {
                key: slot.key.clone(),
            });
        };
        match dtype {
            Some(dtype) if variable.dtype != dtype => Err(VariableError::DTypeMismatch {
                key: slot.key.clone(),
                held: variable.dtype,
                requested: dtype,
            }),
            _ => Ok(&variable.value),
        }
    }
}

/// Errors from variable operations.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VariableError {
    /// No variable with this key exists (it was never assigned, or was taken).
    #[error("variable `{key}` does not exist or is not initialized")]
    NotFound {
        /// The variable.
        key: VarKey,
    },
    /// A value or read of another dtype than the variable holds.
    #[error("variable `{key}` holds {held}, not {requested}")]
    DTypeMismatch {
        /// The variable.
        key: VarKey,
        /// The variable's dtype.
        held: DType,
        /// The dtype asked for.
        requested: DType,
    },
    /// An assignment with `validate_shape` whose shape differs from the current value's.
    #[error("variable `{key}` has shape {held:?}, cannot assign shape {requested:?}")]
    ShapeMismatch {
        /// The variable.
        key: VarKey,
        /// The current shape.
        held: Vec<u64>,
        /// The assigned shape.
        requested: Vec<u64>,
    },
    /// A [`VarSlot`] of another store.
    #[error("a variable slot of another variable store was used")]
    ForeignSlot,
}

impl VarKey {
    /// A key from a container and a shared name.
    pub fn new(container: impl Into<String>, shared_name: impl Into<String>) -> VarKey {
        VarKey {
            container: container.into(),
            shared_name: shared_name.into(),
        }
    }
}

impl fmt::Display for VarKey {
    /// Prints `shared_name`, or `container/shared_name` when the container is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.container.is_empty() {
            f.write_str(&self.shared_name)
        } else {
            write!(f, "{}/{}", self.container, self.shared_name)
        }
    }
}

impl VariableStore {
    /// An empty store.
    pub fn new() -> VariableStore {
        VariableStore::default()
    }

    /// Stores `value` in the variable `key`, creating it with the value's dtype if needed.
    /// Returns the previous value. Fails if the variable exists with another dtype.
    pub fn put<'k>(
        &self,
        key: impl Into<VarKeyRef<'k>>,
        value: HostTensor,
    ) -> Result<Option<HostTensor>, VariableError> {
        self.assign(key, value.dtype(), value, false)
    }

    /// Stores `value` like `AssignVariableOp` with attrs `dtype` and `validate_shape`: the value
    /// must have the declared dtype, an existing variable must hold that dtype, and with
    /// `validate_shape` an existing value must have the same shape.
    pub fn assign<'k>(
        &self,
        key: impl Into<VarKeyRef<'k>>,
        dtype: DType,
        value: HostTensor,
        validate_shape: bool,
    ) -> Result<Option<HostTensor>, VariableError> {
        self.writer().assign(key, dtype, value, validate_shape)
    }

    /// The value of `key`, sharing its storage.
    pub fn get<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> Result<HostTensor, VariableError> {
        self.reader().get(key)
    }

    /// The value of `key`, which must hold `dtype` (what `ReadVariableOp` checks).
    pub fn read_as<'k>(
        &self,
        key: impl Into<VarKeyRef<'k>>,
        dtype: DType,
    ) -> Result<HostTensor, VariableError> {
        self.reader().read_as(key, dtype)
    }

    /// The slot of `key` in this store, made if the store has not seen the key (the variable
    /// itself still does not exist until it is assigned).
    pub fn slot<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> VarSlot {
        self.writer().slot(key)
    }

    /// The slots of `keys`, in order ([`VariableStore::slot`] of each). Only the read lock is
    /// taken when the store has seen every key already, so resolutions that repeat (a fused
    /// step whose keys are fed at each run) do not stop other readers.
    pub fn slots<'k>(
        &self,
        keys: impl IntoIterator<Item = VarKeyRef<'k>> + Clone,
    ) -> Box<[VarSlot]> {
        let known: Option<Box<[VarSlot]>> = {
            let table = self.read();
            keys.clone()
                .into_iter()
                .map(|key| {
                    table.find(key).map(|index| VarSlot {
                        store: self.id,
                        index,
                    })
                })
                .collect()
        };
        known.unwrap_or_else(|| {
            let keys = keys.into_iter();
            let mut writer = self.writer();
            // Room for every key at once, rather than a table grown (rehashed) many times.
            writer.table.make_room(keys.size_hint().0);
            keys.map(|key| writer.slot(key)).collect()
        })
    }

    /// Whether `slot` is one of this store's.
    pub fn owns(&self, slot: VarSlot) -> bool {
        slot.store == self.id
    }

    /// The store locked for reading, for many reads under one lock (a fused save step's). No
    /// assignment can proceed while it is held.
    pub fn reader(&self) -> VariableReader<'_> {
        VariableReader {
            id: self.id,
            table: self.read(),
        }
    }

    /// The store locked for writing, for many assignments under one lock (a fused restore
    /// step's, [`crate::session::Session::assign`]). Nothing else can use the store while it
    /// is held.
    pub fn writer(&self) -> VariableWriter<'_> {
        VariableWriter {
            id: self.id,
            table: self.write(),
        }
    }

    /// Removes the variable `key` and returns its value, if it existed. Its slot stays, empty.
    pub fn take<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> Option<HostTensor> {
        let mut table = self.write();
        let slot = table.find(key.into())?;
        let variable = table.slots[slot as usize].variable.take()?;
        table.live -= 1;
        Some(variable.value)
    }

    /// Removes every variable but those of `used` (what one task of a cluster uses), under
    /// one lock, one hash lookup per variable; their slots stay, empty.
    pub fn keep_only<'k>(&self, used: impl IntoIterator<Item = &'k VarKey>) {
        let used: rustc_hash::FxHashSet<&VarKey> = used.into_iter().collect();
        let mut guard = self.write();
        let table = &mut *guard;
        let mut removed = 0;
        for slot in &mut table.slots {
            if slot.variable.is_some() && !used.contains(&slot.key) {
                slot.variable = None;
                removed += 1;
            }
        }
        table.live -= removed;
    }

    /// Whether `key` exists and holds a value (what `VarIsInitializedOp` reports).
    pub fn is_initialized<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> bool {
        let table = self.read();
        table
            .find(key.into())
            .is_some_and(|slot| table.slots[slot as usize].variable.is_some())
    }

    /// Every variable key, sorted.
    pub fn keys(&self) -> Vec<VarKey> {
        let mut keys: Vec<VarKey> = self
            .read()
            .slots
            .iter()
            .filter(|slot| slot.variable.is_some())
            .map(|slot| slot.key.clone())
            .collect();
        keys.sort_unstable();
        keys
    }

    /// Every variable with its value, sorted by key, read under one lock.
    pub fn entries(&self) -> Vec<(VarKey, HostTensor)> {
        let mut entries: Vec<(VarKey, HostTensor)> = (self.read().slots.iter())
            .filter_map(|slot| Some((slot.key.clone(), slot.variable.as_ref()?.value.clone())))
            .collect();
        entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        entries
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.read().live
    }

    /// Whether the store holds no variable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Locks the table for reading, poisoned or not.
    fn read(&self) -> RwLockReadGuard<'_, Table> {
        unpoisoned(self.table.read())
    }

    /// Locks the table for writing, poisoned or not.
    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        unpoisoned(self.table.write())
    }
}

/// The position of `slot` in the store `id`, or [`VariableError::ForeignSlot`].
fn position(id: u64, slot: VarSlot) -> Result<u32, VariableError> {
    if slot.store == id {
        Ok(slot.index)
    } else {
        Err(VariableError::ForeignSlot)
    }
}

/// A [`VariableStore`] locked for reading ([`VariableStore::reader`]).
pub struct VariableReader<'s> {
    id: u64,
    table: RwLockReadGuard<'s, Table>,
}

impl VariableReader<'_> {
    /// The value of `key`, sharing its storage: [`VariableStore::get`].
    pub fn get<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> Result<HostTensor, VariableError> {
        self.read_key(key.into(), None)
    }

    /// The value of `key`, which must hold `dtype`: [`VariableStore::read_as`].
    pub fn read_as<'k>(
        &self,
        key: impl Into<VarKeyRef<'k>>,
        dtype: DType,
    ) -> Result<HostTensor, VariableError> {
        self.read_key(key.into(), Some(dtype))
    }

    /// The value of `key`, which must hold `dtype` if given.
    fn read_key(
        &self,
        key: VarKeyRef<'_>,
        dtype: Option<DType>,
    ) -> Result<HostTensor, VariableError> {
        match self.table.find(key) {
            Some(slot) => self.table.read(slot, dtype),
            None => Err(VariableError::NotFound { key: key.to_key() }),
        }
    }

    /// The value in `slot`, sharing its storage: [`VariableReader::get`] without a lookup.
    pub fn get_at(&self, slot: VarSlot) -> Result<HostTensor, VariableError> {
        self.table.read(position(self.id, slot)?, None)
    }

    /// The value in `slot`, which must hold `dtype`: [`VariableReader::read_as`] without a
    /// lookup.
    pub fn read_as_at(&self, slot: VarSlot, dtype: DType) -> Result<HostTensor, VariableError> {
        self.table.read(position(self.id, slot)?, Some(dtype))
    }

    /// The value in `slot`, which must hold `dtype`, borrowed for as long as the lock is held:
    /// [`VariableReader::read_as_at`] without sharing the storage (no reference count is
    /// touched, which for a hundred thousand small variables is most of reading them).
    pub fn value_as_at(&self, slot: VarSlot, dtype: DType) -> Result<&HostTensor, VariableError> {
        self.table.value(position(self.id, slot)?, Some(dtype))
    }

    /// Whether the variable in `slot` exists.
    pub fn is_initialized_at(&self, slot: VarSlot) -> Result<bool, VariableError> {
        let index = position(self.id, slot)?;
        Ok(self.table.slots[index as usize].variable.is_some())
    }
}

/// A [`VariableStore`] locked for writing ([`VariableStore::writer`]).
pub struct VariableWriter<'s> {
    id: u64,
    table: RwLockWriteGuard<'s, Table>,
}

impl VariableWriter<'_> {
    /// Makes room for `n` more variables at once, rather than growing (rehashing) the store
    /// many times while they are put.
    pub fn reserve(&mut self, n: usize) {
        self.table.make_room(n);
    }

    /// Stores `value` in `key`, creating it with the value's dtype: [`VariableStore::put`].
    pub fn put<'k>(
        &mut self,
        key: impl Into<VarKeyRef<'k>>,
        value: HostTensor,
    ) -> Result<Option<HostTensor>, VariableError> {
        self.assign(key, value.dtype(), value, false)
    }

    /// Stores `value` like `AssignVariableOp`: [`VariableStore::assign`].
    pub fn assign<'k>(
        &mut self,
        key: impl Into<VarKeyRef<'k>>,
        dtype: DType,
        value: HostTensor,
        validate_shape: bool,
    ) -> Result<Option<HostTensor>, VariableError> {
        // A refused assignment still leaves the key its (empty) slot, which changes nothing
        // a caller can see: an empty slot is a variable that does not exist.
        let slot = self.table.reserve(key.into());
        self.table.assign(slot, dtype, value, validate_shape)
    }

    /// The slot of `key`: [`VariableStore::slot`] under this lock.
    pub fn slot<'k>(&mut self, key: impl Into<VarKeyRef<'k>>) -> VarSlot {
        VarSlot {
            store: self.id,
            index: self.table.reserve(key.into()),
        }
    }

    /// Stores `value` in `slot`: [`VariableWriter::put`] without a lookup.
    pub fn put_at(
        &mut self,
        slot: VarSlot,
        value: HostTensor,
    ) -> Result<Option<HostTensor>, VariableError> {
        self.assign_at(slot, value.dtype(), value, false)
    }

    /// Stores `value` in `slot` like `AssignVariableOp`: [`VariableWriter::assign`] without a
    /// lookup.
    pub fn assign_at(
        &mut self,
        slot: VarSlot,
        dtype: DType,
        value: HostTensor,
        validate_shape: bool,
    ) -> Result<Option<HostTensor>, VariableError> {
        let index = position(self.id, slot)?;
        self.table.assign(index, dtype, value, validate_shape)
    }
}

/// The slots of a fixed list of variables (a fused step's), resolved in the last store the
/// list was used with: a plan run again against the same store indexes its variables without
/// looking up their keys. Cloning keeps what was resolved.
#[derive(Debug, Default)]
pub(crate) struct SlotCache(Mutex<Option<Arc<[VarSlot]>>>);

impl Clone for SlotCache {
    fn clone(&self) -> SlotCache {
        SlotCache(Mutex::new(lock(&self.0).clone()))
    }
}

impl SlotCache {
    /// The slots resolved in `store`, if the last resolution was in it.
    pub(crate) fn get(&self, store: &VariableStore) -> Option<Arc<[VarSlot]>> {
        lock(&self.0)
            .as_ref()
            .filter(|slots| slots.first().is_some_and(|&slot| store.owns(slot)))
            .cloned()
    }

    /// Records `slots` (all of one store) as the resolved list.
    pub(crate) fn set(&self, slots: Arc<[VarSlot]>) {
        *lock(&self.0) = Some(slots);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_the_variables_with_values_sorted_by_key() {
        let store = VariableStore::new();
        for (container, name, value) in [("", "c", 3), ("x", "a", 1), ("", "b", 2), ("", "a", 0)] {
            let key = VarKey::new(container, name);
            store.put(&key, HostTensor::int32_scalar(value)).unwrap();
        }
        // A variable taken keeps its slot, empty: not an entry.
        store.take(&VarKey::new("", "b")).unwrap();
        let entries: Vec<(String, HostTensor)> = (store.entries().into_iter())
            .map(|(key, value)| (key.to_string(), value))
            .collect();
        let expected = [("a", 0), ("c", 3), ("x/a", 1)]
            .map(|(key, value)| (key.to_owned(), HostTensor::int32_scalar(value)));
        assert_eq!(entries, expected);
        assert_eq!(store.entries().len(), store.keys().len());
    }
}
