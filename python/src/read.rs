//! Reading: [`Reader`] opens a checkpoint (a prefix, a directory or a `checkpoint` state
//! file) and hands tensors to NumPy without copying them, reading many in parallel with the
//! GIL released.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapMut;
use numpy::ndarray::{ArrayView1, ArrayViewMut1};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rayon::prelude::*;
use saveplan::bundle::{BundleError, BundleReader, Entry, MappedTensor};
use saveplan::checkpoint::{self, CheckpointError};

use crate::errors::{from_bundle, from_checkpoint};

/// Keeps the memory map of a data file alive while a NumPy array views part of it: the base
/// object of every array [`Reader::read`] returns with `mmap=True`.
#[pyclass(frozen, module = "saveplan._saveplan")]
pub struct MappedOwner {
    tensor: MappedTensor,
}

/// A tensor as Python gets it: `(values, dtype name, shape)`.
type PyValue<'py> = (Bound<'py, PyAny>, String, Vec<i64>);

/// A tensor's values, read with the GIL released, before they become Python objects.
enum Loaded {
    /// Bytes Rust read into its own buffer.
    Owned(Vec<u8>),
    /// A view into a data file's memory map.
    Mapped(MappedTensor),
    /// `DT_STRING` elements.
    Strings(Vec<Vec<u8>>),
}

/// An open checkpoint: `saveplan.CheckpointReader`'s native half.
#[pyclass(frozen, module = "saveplan._saveplan")]
pub struct Reader {
    inner: Arc<BundleReader>,
}

/// The prefix `path` stands for: itself, or the latest checkpoint of a directory or
/// `checkpoint` state file.
#[pyfunction]
pub fn resolve_prefix(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let prefix = py
        .detach(|| checkpoint::resolve_prefix(&path))
        .map_err(|err| from_checkpoint(py, err))?;
    Ok(prefix.to_string_lossy().into_owned())
}

/// `tf.train.latest_checkpoint(dir)`: the prefix the directory's `checkpoint` file names, or
/// `None` when there is no such file or it names no existing checkpoint (TensorFlow's
/// `None`). An unreadable or unparsable state file is an error.
#[pyfunction]
pub fn latest_checkpoint(py: Python<'_>, dir: PathBuf) -> PyResult<Option<String>> {
    match py.detach(|| checkpoint::latest_checkpoint(&dir)) {
        Ok(prefix) => Ok(Some(prefix.to_string_lossy().into_owned())),
        Err(
            CheckpointError::NoStateFile { .. }
            | CheckpointError::NoLatestCheckpoint { .. }
            | CheckpointError::MissingLatestCheckpoint { .. }
            | CheckpointError::BadStateFile { .. },
        ) => Ok(None),
        Err(err) => Err(from_checkpoint(py, err)),
    }
}

#[pymethods]
impl Reader {
    /// Opens the checkpoint at `path` (a prefix, a directory or a `checkpoint` state file).
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Reader> {
        let opened = py.detach(|| -> Result<BundleReader, OpenError> {
            let prefix = checkpoint::resolve_prefix(&path)?;
            Ok(BundleReader::open(prefix)?)
        });
        match opened {
            Ok(reader) => Ok(Reader {
                inner: Arc::new(reader),
            }),
            Err(OpenError::Checkpoint(err)) => Err(from_checkpoint(py, err)),
            Err(OpenError::Bundle(err)) => Err(from_bundle(py, err)),
        }
    }

    /// The prefix opened.
    #[getter]
    fn prefix(&self) -> String {
        self.inner.prefix().to_string_lossy().into_owned()
    }

    /// Every tensor as `(key, dtype name, shape)`, sorted by key (stored slices as their
    /// tensor, the header excluded), as `tf.train.list_variables` lists them.
    fn entries(&self) -> Vec<(String, String, Vec<i64>)> {
        self.inner
            .entries()
            .iter()
            .map(|entry| (entry.key.clone(), dtype_name(entry), entry.shape.clone()))
            .collect()
    }

    /// Whether the checkpoint has tensor `key`.
    fn has(&self, key: &str) -> bool {
        self.inner.entry(key).is_some()
    }

    /// Tensor `key` as `(values, dtype name, shape)`: `values` is a `uint8` array of the
    /// element bytes (viewing the mapped file when `mmap`, else a buffer Rust filled), or, for
    /// a string tensor, a list of `bytes`.
    #[pyo3(signature = (key, mmap = false))]
    fn read<'py>(&self, py: Python<'py>, key: &str, mmap: bool) -> PyResult<PyValue<'py>> {
        let entry = self.require(py, key)?.clone();
        let loaded = py
            .detach(|| load(&self.inner, &entry, mmap))
            .map_err(|err| from_bundle(py, err))?;
        Ok((to_python(py, loaded)?, dtype_name(&entry), entry.shape))
    }

    /// [`Reader::read`] of each of `keys`, read in parallel with the GIL released. Unknown
    /// keys are a `NotFoundError` before anything is read.
    #[pyo3(signature = (keys, mmap = false))]
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
        mmap: bool,
    ) -> PyResult<Vec<PyValue<'py>>> {
        let entries = keys
            .iter()
            .map(|key| self.require(py, key).cloned())
            .collect::<PyResult<Vec<Entry>>>()?;
        if mmap {
            let loaded = py
                .detach(|| {
                    entries
                        .par_iter()
                        .map(|entry| load(&self.inner, entry, true))
                        .collect::<Result<Vec<Loaded>, BundleError>>()
                })
                .map_err(|err| from_bundle(py, err))?;
            return entries
                .into_iter()
                .zip(loaded)
                .map(|(entry, loaded)| {
                    Ok((to_python(py, loaded)?, dtype_name(&entry), entry.shape))
                })
                .collect();
        }
        let (mut arena, loaded) = py
            .detach(|| read_into_arena(&self.inner, &entries))
            .map_err(|err| from_bundle(py, err))?;
        let base = arena.as_mut_ptr();
        let owner = Bound::new(py, ArenaOwner { _map: arena })?;
        entries
            .into_iter()
            .zip(loaded)
            .map(|(entry, loaded)| {
                let values = match loaded {
                    InArena::Bytes(range) => {
                        // SAFETY: `range` lies inside the arena (`read_into_arena` cut it out
                        // of it), the arena is never moved or unmapped while `owner` lives,
                        // and the ranges of different tensors do not overlap, so each array
                        // owns its bytes.
                        let view = unsafe {
                            ArrayViewMut1::from_shape_ptr(range.len(), base.add(range.start))
                        };
                        unsafe { PyArray1::borrow_from_array(&view, owner.clone().into_any()) }
                            .into_any()
                    }
                    InArena::Other(loaded) => to_python(py, loaded)?,
                };
                Ok((values, dtype_name(&entry), entry.shape))
            })
            .collect()
    }

    /// The stored object graph as plain data: `{"nodes": [...], "paths": [...]}`, each node a
    /// dict of `children` (`(node id, local name)`), `attributes` (`(name, full name,
    /// checkpoint key)`) and `slot_variables` (`(variable node id, slot name, slot node
    /// id)`), each path the node's first-discovered list of local names (`None` when
    /// unreachable). A `ValueError` for a checkpoint without an object graph.
    fn object_graph<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let graph = py
            .detach(|| checkpoint::read_object_graph(&self.inner))
            .map_err(|err| from_checkpoint(py, err))?;
        let nodes = PyList::empty(py);
        for node in graph.nodes() {
            let item = PyDict::new(py);
            let children: Vec<(u32, &str)> = node
                .children
                .iter()
                .map(|child| (child.node_id.0, child.local_name.as_str()))
                .collect();
            let attributes: Vec<(&str, &str, &str)> = node
                .attributes
                .iter()
                .map(|attribute| {
                    (
                        attribute.name.as_str(),
                        attribute.full_name.as_str(),
                        attribute.checkpoint_key.as_str(),
                    )
                })
                .collect();
            let slots: Vec<(u32, &str, u32)> = node
                .slot_variables
                .iter()
                .map(|slot| {
                    (
                        slot.original_variable_node_id.0,
                        slot.slot_name.as_str(),
                        slot.slot_variable_node_id.0,
                    )
                })
                .collect();
            item.set_item("children", children)?;
            item.set_item("attributes", attributes)?;
            item.set_item("slot_variables", slots)?;
            nodes.append(item)?;
        }
        let result = PyDict::new(py);
        result.set_item("nodes", nodes)?;
        result.set_item("paths", graph.paths())?;
        Ok(result)
    }
}

impl Reader {
    fn require(&self, py: Python<'_>, key: &str) -> PyResult<&Entry> {
        self.inner.entry(key).ok_or_else(|| {
            from_bundle(
                py,
                BundleError::KeyNotFound {
                    path: saveplan::bundle::index_path(self.inner.prefix()),
                    key: key.to_owned(),
                },
            )
        })
    }
}

/// Why a checkpoint did not open.
enum OpenError {
    Checkpoint(CheckpointError),
    Bundle(BundleError),
}

impl From<CheckpointError> for OpenError {
    fn from(err: CheckpointError) -> OpenError {
        OpenError::Checkpoint(err)
    }
}

impl From<BundleError> for OpenError {
    fn from(err: BundleError) -> OpenError {
        OpenError::Bundle(err)
    }
}

/// The dtype's TensorFlow name (`float32`); `DT_<number>` for one saveplan does not know.
fn dtype_name(entry: &Entry) -> String {
    entry
        .dtype
        .name()
        .map_or_else(|| format!("DT_{}", entry.dtype.number()), str::to_owned)
}

/// The buffer [`Reader::read_many`] reads every fixed-width tensor into: one anonymous
/// memory map, its pages populated in one call before the reads (instead of one page fault
/// at a time), which the NumPy arrays of those tensors share as their base object.
#[pyclass(frozen, module = "saveplan._saveplan")]
pub struct ArenaOwner {
    _map: MmapMut,
}

/// Where a tensor read by [`read_into_arena`] is.
enum InArena {
    /// Its bytes, at this range of the arena.
    Bytes(Range<usize>),
    /// Values outside the arena (strings).
    Other(Loaded),
}

/// Alignment of each tensor in the arena (a cache line; NumPy and PyTorch want at most 16).
const ARENA_ALIGN: usize = 64;

/// Reads `entries` in parallel: every fixed-width tensor into its own aligned range of one
/// fresh arena, strings as lists.
fn read_into_arena(
    reader: &BundleReader,
    entries: &[Entry],
) -> Result<(MmapMut, Vec<InArena>), BundleError> {
    let mut ranges = Vec::with_capacity(entries.len());
    let mut total = 0usize;
    for entry in entries {
        let Some(element_size) = entry.dtype.element_size() else {
            ranges.push(None);
            continue;
        };
        let size = saveplan::bundle::dtype::num_elements(&entry.shape)
            .and_then(|count| usize::try_from(count).ok())
            .and_then(|count| count.checked_mul(element_size))
            .ok_or_else(|| too_large(reader.prefix(), entry))?;
        let start = total
            .checked_next_multiple_of(ARENA_ALIGN)
            .and_then(|start| start.checked_add(size).map(|end| start..end))
            .ok_or_else(|| too_large(reader.prefix(), entry))?;
        total = start.end;
        ranges.push(Some(start));
    }
    let mut arena = MmapMut::map_anon(total.max(1)).map_err(|source| BundleError::Io {
        path: reader.prefix().to_owned(),
        op: "allocate memory for",
        source,
    })?;
    #[cfg(target_os = "linux")]
    {
        // Only a hint: without MADV_POPULATE_WRITE (Linux < 5.14) the reads fault pages in.
        let _ = arena.advise(memmap2::Advice::PopulateWrite);
    }
    // Disjoint mutable slices of the arena, one per fixed-width tensor, in entry order.
    let mut slices: Vec<Option<&mut [u8]>> = Vec::with_capacity(entries.len());
    let mut rest: &mut [u8] = &mut arena[..];
    let mut consumed = 0usize;
    for range in &ranges {
        match range {
            Some(range) => {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(range.start - consumed);
                let (slice, tail) = tail.split_at_mut(range.len());
                rest = tail;
                consumed = range.end;
                slices.push(Some(slice));
            }
            None => slices.push(None),
        }
    }
    let loaded = entries
        .par_iter()
        .zip(slices)
        .zip(&ranges)
        .map(|((entry, slice), range)| match (slice, range) {
            (Some(slice), Some(range)) => {
                reader.read_into(&entry.key, slice)?;
                Ok(InArena::Bytes(range.clone()))
            }
            _ => Ok(InArena::Other(load(reader, entry, false)?)),
        })
        .collect::<Result<Vec<InArena>, BundleError>>()?;
    Ok((arena, loaded))
}

/// Reads one tensor (no Python involved: runs with the GIL released).
fn load(reader: &BundleReader, entry: &Entry, mmap: bool) -> Result<Loaded, BundleError> {
    match entry.dtype.element_size() {
        None => Ok(Loaded::Strings(reader.read_strings(&entry.key)?)),
        Some(_) if mmap => Ok(Loaded::Mapped(reader.map_entry(entry)?)),
        Some(element_size) => {
            let count = saveplan::bundle::dtype::num_elements(&entry.shape).unwrap_or(0);
            let size = usize::try_from(count)
                .ok()
                .and_then(|count| count.checked_mul(element_size))
                .ok_or_else(|| too_large(reader.prefix(), entry))?;
            let mut out = vec![0u8; size];
            reader.read_into(&entry.key, &mut out)?;
            Ok(Loaded::Owned(out))
        }
    }
}

fn too_large(prefix: &Path, entry: &Entry) -> BundleError {
    BundleError::SizeMismatch {
        path: saveplan::bundle::index_path(prefix),
        key: entry.key.clone(),
        dtype: entry.dtype,
        shape: entry.shape.clone(),
        expected: u64::MAX,
        actual: entry.size,
    }
}

/// The Python form of loaded values, without copying fixed-width bytes.
fn to_python(py: Python<'_>, loaded: Loaded) -> PyResult<Bound<'_, PyAny>> {
    Ok(match loaded {
        Loaded::Owned(bytes) => PyArray1::from_vec(py, bytes).into_any(),
        Loaded::Mapped(tensor) if tensor.is_empty() => {
            PyArray1::<u8>::from_vec(py, Vec::new()).into_any()
        }
        Loaded::Mapped(tensor) => {
            let owner = Bound::new(py, MappedOwner { tensor })?;
            let view = ArrayView1::from(&owner.get().tensor[..]);
            // SAFETY: the array's base object is `owner`, which owns the tensor and with it
            // the memory map; the bytes are never moved or unmapped while `owner` lives.
            let array = unsafe { PyArray1::borrow_from_array(&view, owner.clone().into_any()) };
            array.readwrite().make_nonwriteable();
            array.into_any()
        }
        Loaded::Strings(strings) => {
            PyList::new(py, strings.iter().map(|s| PyBytes::new(py, s)))?.into_any()
        }
    })
}
