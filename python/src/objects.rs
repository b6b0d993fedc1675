//! Object-based checkpoints: `saveplan.Checkpoint(**tree)` writes, saves and restores what
//! `tf.train.Checkpoint(**children)` does for a tree of `tf.Module`s and `tf.Variable`s,
//! through the crate's [`ObjectSpec`] (the object spec `saveplan save` takes), and
//! [`Manager`] is `tf.train.CheckpointManager`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use saveplan::checkpoint::{
    Assertion, Checkpoint, CheckpointError, CheckpointManager, ManagerOptions, ObjectEntry,
    ObjectSpec, ObjectSpecError, RestoreKind, SlotSpec,
};
use saveplan::exec::HostTensor;

use crate::errors::{Kind, from_checkpoint, from_spec, message, raise};
use crate::write::{Held, Values, hold, parse_dtype};

/// One object of a tree from Python: `(path, also, slot, dtype name, shape, values)`. `path`
/// is the variable's local names from the root (empty for a slot variable), `also` more
/// paths to the same variable, `slot` `(variable path, optimizer path, slot name)` for a slot
/// variable; the values as [`crate::write::PyTensor`] has them.
pub type TreeObject<'py> = (
    Vec<String>,
    Vec<Vec<String>>,
    Option<(Vec<String>, Vec<String>, String)>,
    String,
    Vec<i64>,
    Bound<'py, PyAny>,
);

/// The spec of a tree and its values by checkpoint key (copied into tensors).
fn build(
    py: Python<'_>,
    objects: &[TreeObject<'_>],
) -> PyResult<(ObjectSpec, Vec<String>, BTreeMap<String, HostTensor>)> {
    let mut entries = Vec::with_capacity(objects.len());
    let mut held: Vec<Held<'_>> = Vec::with_capacity(objects.len());
    for (path, also, slot, dtype_name, shape, values) in objects {
        let key = path.join("/");
        let dtype = parse_dtype(&key, dtype_name)?;
        held.push(hold(&key, dtype, values)?);
        entries.push(ObjectEntry {
            path: path.clone(),
            object: false,
            dtype: dtype_name.clone(),
            shape: Some(shape.clone()),
            device: None,
            name: None,
            slot: slot.as_ref().map(|(variable, optimizer, name)| SlotSpec {
                variable: variable.clone(),
                optimizer: optimizer.clone(),
                name: name.clone(),
            }),
            attribute: None,
            suffix: None,
            also: also.clone(),
            same_as: None,
        });
    }
    let spec = ObjectSpec {
        objects: entries,
        options: None,
        root: false,
    };
    let (_, keys) = spec.object_graph().map_err(|err| from_spec(py, err))?;
    let mut values = BTreeMap::new();
    for ((key, held), (_, _, _, dtype_name, shape, _)) in keys.iter().zip(&held).zip(objects) {
        let dtype = parse_dtype(key, dtype_name)?;
        let dims = shape
            .iter()
            .map(|&dim| u64::try_from(dim))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|_| PyValueError::new_err(format!("`{key}`: invalid shape {shape:?}")))?;
        let tensor = match held.values()? {
            Values::Bytes(bytes) => HostTensor::from_bytes(dtype, dims, bytes.to_vec()),
            Values::Strings(strings) => HostTensor::from_strings(dims, strings.to_vec()),
        }
        .map_err(|err| PyValueError::new_err(format!("`{key}`: {}", message(&err))))?;
        values.insert(key.clone(), tensor);
    }
    Ok((spec, keys, values))
}

/// The [`Checkpoint`] of a spec and its values, with `save_counter` set as given. (A
/// `Checkpoint` is not `Send`: each is made on the thread that uses it, with the GIL
/// released.)
fn checkpoint_of(
    spec: &ObjectSpec,
    values: BTreeMap<String, HostTensor>,
    save_counter: Option<i64>,
) -> Result<Checkpoint, Failure> {
    let mut checkpoint = spec.checkpoint(values).map_err(Failure::Spec)?;
    checkpoint.set_save_counter(save_counter);
    Ok(checkpoint)
}

/// Why an object-checkpoint call failed, before it becomes a Python exception.
enum Failure {
    Spec(ObjectSpecError),
    Checkpoint(CheckpointError),
}

impl From<CheckpointError> for Failure {
    fn from(err: CheckpointError) -> Failure {
        Failure::Checkpoint(err)
    }
}

impl Failure {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Spec(err) => from_spec(py, err),
            Failure::Checkpoint(err) => from_checkpoint(py, err),
        }
    }
}

/// `Checkpoint(**tree).write(prefix)` (`save = false`) or `.save(prefix)` (`save = true`,
/// counting from `save_counter`): writes with the GIL released and returns the path written
/// and the counter after the write.
#[pyfunction]
#[pyo3(signature = (prefix, objects, save_counter, save))]
pub fn write_objects(
    py: Python<'_>,
    prefix: String,
    objects: Vec<TreeObject<'_>>,
    save_counter: Option<i64>,
    save: bool,
) -> PyResult<(String, Option<i64>)> {
    let (spec, _, values) = build(py, &objects)?;
    py.detach(|| {
        let mut checkpoint = checkpoint_of(&spec, values, save_counter)?;
        let path = if save {
            checkpoint.save(&prefix)?
        } else {
            checkpoint.write(&prefix)?
        };
        Ok((path, checkpoint.save_counter()))
    })
    .map_err(|err: Failure| err.into_py(py))
}

/// `Checkpoint(**tree).restore(prefix)` (`read = false`) or `.read(prefix)`: matches the
/// checkpoint against the tree and restores what matched. Returns the report as JSON text,
/// each object's value afterwards (as [`crate::read::Reader::read`] returns values, in the
/// order given), the counter, and the message of each failing assertion (`assert_consumed`,
/// `assert_existing_objects_matched`, `assert_nontrivial_match`; `None` when it passes).
#[pyfunction]
#[pyo3(signature = (prefix, objects, save_counter, read))]
pub fn restore_objects<'py>(
    py: Python<'py>,
    prefix: String,
    objects: Vec<TreeObject<'py>>,
    save_counter: Option<i64>,
    read: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let (spec, keys, values) = build(py, &objects)?;
    let kind = if read {
        RestoreKind::Read
    } else {
        RestoreKind::Restore
    };
    let restored = py.detach(|| {
        let mut checkpoint = checkpoint_of(&spec, values, save_counter)?;
        let matched = checkpoint.match_checkpoint(&prefix, kind)?;
        let report = matched.report().clone();
        let status = checkpoint.apply(matched)?;
        let failures = [
            Assertion::Consumed,
            Assertion::ExistingObjectsMatched,
            Assertion::NontrivialMatch,
        ]
        .map(|assertion| {
            (
                assertion,
                status.check(assertion).err().map(|err| err.message),
            )
        });
        Ok((
            report,
            failures,
            checkpoint.values().clone(),
            checkpoint.save_counter(),
        ))
    });
    let (report, failures, restored, counter) = restored.map_err(|err: Failure| err.into_py(py))?;
    let result = PyDict::new(py);
    let report = serde_json::to_string(&report)
        .map_err(|err| raise(py, Kind::Unknown, format!("restore report: {err}")))?;
    result.set_item("report", report)?;
    let values = PyList::empty(py);
    for key in &keys {
        let value = restored.get(key);
        let value = match value {
            Some(tensor) => match (tensor.bytes(), tensor.strings()) {
                (Some(bytes), _) => PyArray1::from_slice(py, bytes).into_any(),
                (None, Some(strings)) => {
                    PyList::new(py, strings.iter().map(|s| PyBytes::new(py, s)))?.into_any()
                }
                (None, None) => py.None().into_bound(py),
            },
            None => py.None().into_bound(py),
        };
        values.append(value)?;
    }
    result.set_item("values", values)?;
    result.set_item("save_counter", counter)?;
    for (assertion, failure) in failures {
        result.set_item(assertion.method(), failure)?;
    }
    Ok(result)
}

/// `tf.train.CheckpointManager`'s native half: numbers, keeps and deletes saves in a
/// directory. It keeps nothing but its settings: each call makes the crate's
/// [`CheckpointManager`] afresh, which takes its books from the directory's `checkpoint` file
/// (the checkpoints it lists, their timestamps, the last preserved one), where the previous
/// save left them.
#[pyclass(frozen, module = "saveplan._saveplan")]
pub struct Manager {
    directory: PathBuf,
    max_to_keep: Option<usize>,
    checkpoint_name: String,
    keep_every_n_hours: Option<f64>,
}

#[pymethods]
impl Manager {
    /// A manager of `directory`; the tree comes with each save.
    #[new]
    #[pyo3(signature = (directory, max_to_keep, checkpoint_name = "ckpt".to_owned(), keep_checkpoint_every_n_hours = None))]
    fn new(
        directory: PathBuf,
        max_to_keep: Option<usize>,
        checkpoint_name: String,
        keep_checkpoint_every_n_hours: Option<f64>,
    ) -> PyResult<Manager> {
        if max_to_keep == Some(0) {
            return Err(PyValueError::new_err(
                "Expected a positive integer or `None` for `max_to_keep`, got 0.",
            ));
        }
        Ok(Manager {
            directory,
            max_to_keep,
            checkpoint_name,
            keep_every_n_hours: keep_checkpoint_every_n_hours,
        })
    }

    /// `save(checkpoint_number)`: writes the tree as the next numbered checkpoint, records
    /// it in the `checkpoint` file and deletes what is past `max_to_keep`. Returns the path
    /// and the counter after the save.
    #[pyo3(signature = (objects, save_counter, checkpoint_number = None))]
    fn save(
        &self,
        py: Python<'_>,
        objects: Vec<TreeObject<'_>>,
        save_counter: Option<i64>,
        checkpoint_number: Option<i64>,
    ) -> PyResult<(String, Option<i64>)> {
        let (spec, _, values) = build(py, &objects)?;
        py.detach(|| {
            let checkpoint = checkpoint_of(&spec, values, save_counter)?;
            let mut manager = CheckpointManager::new(checkpoint, &self.directory, self.options())?;
            let path = manager.save(checkpoint_number, false)?;
            let path = path.map_or_else(String::new, |path| path.to_string_lossy().into_owned());
            Ok((path, manager.checkpoint().save_counter()))
        })
        .map_err(|err: Failure| err.into_py(py))
    }

    /// The checkpoints the directory's `checkpoint` file lists as managed, oldest first.
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let paths = self.with_manager(py, |manager| manager.checkpoints())?;
        Ok(paths
            .iter()
            .map(|path| path.to_string_lossy().into_owned())
            .collect())
    }

    /// The newest checkpoint, or `None`.
    fn latest_checkpoint(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let latest = self.with_manager(py, |manager| manager.latest_checkpoint())?;
        Ok(latest.map(|path| path.to_string_lossy().into_owned()))
    }
}

impl Manager {
    fn options(&self) -> ManagerOptions {
        let mut options = ManagerOptions::new(self.max_to_keep)
            .with_checkpoint_name(self.checkpoint_name.clone());
        if let Some(hours) = self.keep_every_n_hours {
            options = options.with_keep_every_n_hours(hours);
        }
        options
    }

    /// `f` of a manager with no objects, reading the directory's books.
    fn with_manager<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&CheckpointManager) -> T + Send,
    ) -> PyResult<T> {
        let empty = ObjectSpec {
            objects: Vec::new(),
            options: None,
            root: false,
        };
        py.detach(|| {
            let checkpoint = checkpoint_of(&empty, BTreeMap::new(), None)?;
            let manager = CheckpointManager::new(checkpoint, &self.directory, self.options())?;
            Ok(f(&manager))
        })
        .map_err(|err: Failure| err.into_py(py))
    }
}
