//! [`VariableStore`]: resource variables keyed by (container, shared name), holding host
//! tensors that are put, read and taken without copying their elements.
//!
//! This is what `VarHandleOp`, `ReadVariableOp`, `AssignVariableOp` and `VarIsInitializedOp`
//! act on, and what a caller fills before running a save plan and reads after a restore plan.
//! As in TensorFlow, a variable comes into existence with its first assignment and keeps the
//! dtype of that assignment; a handle alone creates nothing.

use std::fmt;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The map a [`VariableStore`] locks.
type VariableMap = HashMap<VarKey, Variable, FxBuildHasher>;

use hashbrown::{Equivalent, HashMap};
use rustc_hash::FxBuildHasher;
use saveplan_ir::DType;

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

/// Field by field, in the order both types hash them (`&str` hashes as `String` does), so a
/// borrowed key finds the owned one.
impl Equivalent<VarKey> for VarKeyRef<'_> {
    fn equivalent(&self, key: &VarKey) -> bool {
        self.container == key.container && self.shared_name == key.shared_name
    }
}

/// A thread-safe set of resource variables.
///
/// Every value is a [`HostTensor`], whose storage is reference counted: [`VariableStore::get`]
/// hands out a clone that shares the elements, [`VariableStore::put`] stores the given tensor
/// as is and [`VariableStore::take`] moves it out again.
#[derive(Debug, Default)]
pub struct VariableStore {
    /// A hash map: lookups of long, similar names are the hot path of a run. Nothing iterates
    /// it except [`VariableStore::keys`], which sorts.
    variables: RwLock<VariableMap>,
}

/// One variable: its dtype, fixed by the first assignment, and its value.
#[derive(Debug)]
struct Variable {
    dtype: DType,
    value: HostTensor,
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

    /// The store locked for reading, for many reads under one lock (a fused save step's). No
    /// assignment can proceed while it is held.
    pub fn reader(&self) -> VariableReader<'_> {
        VariableReader { map: self.read() }
    }

    /// The store locked for writing, for many assignments under one lock (a fused restore
    /// step's, [`crate::session::Session::assign`]). Nothing else can use the store while it
    /// is held.
    pub fn writer(&self) -> VariableWriter<'_> {
        VariableWriter { map: self.write() }
    }

    /// Removes the variable `key` and returns its value, if it existed.
    pub fn take<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> Option<HostTensor> {
        self.write()
            .remove(&key.into())
            .map(|variable| variable.value)
    }

    /// Whether `key` exists and holds a value (what `VarIsInitializedOp` reports).
    pub fn is_initialized<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> bool {
        self.read().contains_key(&key.into())
    }

    /// Every variable key, sorted.
    pub fn keys(&self) -> Vec<VarKey> {
        let mut keys: Vec<VarKey> = self.read().keys().cloned().collect();
        keys.sort_unstable();
        keys
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store holds no variable.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Locks the map for reading. A poisoned lock is still consistent, because no code
    /// panics while holding it.
    fn read(&self) -> RwLockReadGuard<'_, VariableMap> {
        self.variables
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Locks the map for writing (see [`VariableStore::read`] on poisoning).
    fn write(&self) -> RwLockWriteGuard<'_, VariableMap> {
        self.variables
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A [`VariableStore`] locked for reading ([`VariableStore::reader`]).
pub struct VariableReader<'s> {
    map: RwLockReadGuard<'s, VariableMap>,
}

impl VariableReader<'_> {
    /// The value of `key`, sharing its storage: [`VariableStore::get`].
    pub fn get<'k>(&self, key: impl Into<VarKeyRef<'k>>) -> Result<HostTensor, VariableError> {
        let key = key.into();
        self.map
            .get(&key)
            .map(|variable| variable.value.clone())
            .ok_or_else(|| VariableError::NotFound { key: key.to_key() })
    }

    /// The value of `key`, which must hold `dtype`: [`VariableStore::read_as`].
    pub fn read_as<'k>(
        &self,
        key: impl Into<VarKeyRef<'k>>,
        dtype: DType,
    ) -> Result<HostTensor, VariableError> {
        let key = key.into();
        let value = self.get(key)?;
        if value.dtype() != dtype {
            return Err(VariableError::DTypeMismatch {
                key: key.to_key(),
                held: value.dtype(),
                requested: dtype,
            });
        }
        Ok(value)
    }
}

/// A [`VariableStore`] locked for writing ([`VariableStore::writer`]).
pub struct VariableWriter<'s> {
    map: RwLockWriteGuard<'s, VariableMap>,
}

impl VariableWriter<'_> {
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
        let key = key.into();
        if value.dtype() != dtype {
            return Err(VariableError::DTypeMismatch {
                key: key.to_key(),
                held: dtype,
                requested: value.dtype(),
            });
        }
        match self.map.get_mut(&key) {
            Some(variable) => {
                if variable.dtype != dtype {
                    return Err(VariableError::DTypeMismatch {
                        key: key.to_key(),
                        held: variable.dtype,
                        requested: dtype,
                    });
                }
                if validate_shape && variable.value.shape() != value.shape() {
                    return Err(VariableError::ShapeMismatch {
                        key: key.to_key(),
                        held: variable.value.shape().to_vec(),
                        requested: value.shape().to_vec(),
                    });
                }
                Ok(Some(std::mem::replace(&mut variable.value, value)))
            }
            None => {
                self.map.insert(key.to_key(), Variable { dtype, value });
                Ok(None)
            }
        }
    }
}
