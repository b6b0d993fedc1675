//! [`CheckpointIo`]: the storage behind `SaveV2`, `RestoreV2` and `MergeV2Checkpoints`.
//!
//! The kernels validate their inputs and attributes, then hand plain requests to this trait,
//! so the same plan can write TensorFlow bundles on disk ([`BundleIo`]) or, in tests, an
//! in-memory record.

use std::sync::{Arc, Mutex};

use saveplan_ir::DType;

use super::sync::lock;
use super::tensor::{HostTensor, TensorData, TensorError};
pub use crate::bundle::MergeFlags;
use crate::bundle::{
    self, BundleError, BundleReader, BundleWriter, MergeOptions, TensorValues, Values, WriteOptions,
};

/// What a checkpoint backend reports; the kernel wraps it with the op's name and device.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// Reading, writing or merging bundle files failed.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// A resource tensor (a variable handle) given to `SaveV2`.
    #[error("cannot save resource tensor `{key}`")]
    ResourceTensor {
        /// The checkpoint key.
        key: String,
    },
    /// A dtype the bundle format cannot store.
    #[error("cannot store {dtype} tensors in a bundle")]
    UnstorableDType {
        /// The dtype.
        dtype: DType,
    },
    /// A dimension past `i64`, which a bundle cannot record.
    #[error("tensor `{key}` has a dimension past 2^63")]
    ShapeOutOfRange {
        /// The checkpoint key.
        key: String,
    },
    /// A stored tensor of another dtype than the op declares.
    #[error("tensor `{key}` is {stored} in the checkpoint, expected {expected}")]
    DTypeMismatch {
        /// The checkpoint key.
        key: String,
        /// The dtype in the checkpoint.
        stored: DType,
        /// The dtype the op declares.
        expected: DType,
    },
    /// A stored value that does not make a host tensor.
    #[error("tensor `{key}`")]
    Tensor {
        /// The checkpoint key.
        key: String,
        /// Why.
        #[source]
        source: TensorError,
    },
    /// A failure of a backend other than the bundle (its own files, a network store).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads and writes checkpoint bundles. Implementations must be usable from several threads at
/// once: ops on different device queues may save different shards concurrently.
pub trait CheckpointIo: Sync {
    /// Writes one bundle at `prefix` holding `tensors`, in the given order (`SaveV2`).
    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError>;

    /// Reads `tensors` from the bundle at `prefix`, one value per request, in order
    /// (`RestoreV2`).
    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError>;

    /// [`CheckpointIo::restore`] within one run ([`RunIo`]), which may keep what it opened in
    /// `opened` for the run's other restores of the same prefix. The default ignores `opened`;
    /// [`BundleIo`] keeps the opened [`BundleReader`], so the `RestoreV2` ops of an
    /// eight-task plan parse the index once instead of eight times.
    fn restore_in_run(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
        opened: &OpenedBundles,
    ) -> Result<Vec<HostTensor>, IoError> {
        let _ = opened;
        self.restore(prefix, tensors)
    }

    /// Merges the bundles at `sources` into one at `destination` (`MergeV2Checkpoints`).
    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError>;

    /// Checks, before a save plan runs, that a checkpoint can be written at `prefix`. The
    /// default accepts every prefix; [`BundleIo`] refuses an empty one and an existing
    /// directory ([`crate::bundle::check_write_prefix`]).
    fn check_save_prefix(&self, prefix: &str) -> Result<(), IoError> {
        let _ = prefix;
        Ok(())
    }

    /// Starts a save at `prefix`: checks it ([`CheckpointIo::check_save_prefix`]) and returns
    /// a guard the caller holds until the save has ended. The default guard holds nothing;
    /// [`BundleIo`]'s holds the prefix's [`bundle::SaveLock`] (waiting while another save
    /// holds it), so concurrent saves to one prefix run one after the other.
    fn begin_save(&self, prefix: &str) -> Result<SaveGuard, IoError> {
        self.check_save_prefix(prefix)?;
        Ok(SaveGuard { _lock: None })
    }
}

/// The bundles one run has opened for reading, by prefix ([`CheckpointIo::restore_in_run`]).
#[derive(Default)]
pub struct OpenedBundles {
    /// Per prefix, its reader once opened, behind the prefix's own lock.
    readers: Mutex<Vec<(String, Arc<OpenedBundle>)>>,
}

/// The reader of one prefix, opened by the first restore that needs it.
type OpenedBundle = Mutex<Option<Arc<BundleReader>>>;

impl OpenedBundles {
    /// The reader of `prefix`, opened now if this run has not opened it yet. Restores of one
    /// prefix on several devices open it once (the others wait for it); restores of other
    /// prefixes do not wait.
    fn reader(&self, prefix: &str) -> Result<Arc<BundleReader>, IoError> {
        let cell = {
            let mut readers = lock(&self.readers);
            match readers.iter().find(|(opened, _)| opened == prefix) {
                Some((_, cell)) => Arc::clone(cell),
                None => {
                    let cell = Arc::new(Mutex::new(None));
                    readers.push((prefix.to_owned(), Arc::clone(&cell)));
                    cell
                }
            }
        };
        let mut opened = lock(&cell);
        if let Some(reader) = opened.as_ref() {
            return Ok(Arc::clone(reader));
        }
        let reader = Arc::new(BundleReader::open(prefix)?);
        *opened = Some(Arc::clone(&reader));
        Ok(reader)
    }

    /// Forgets every reader: after a write, a prefix must be opened again.
    fn clear(&self) {
        lock(&self.readers).clear();
    }
}

/// The checkpoint backend of one run: `inner`'s, with the bundles opened by the run's
/// restores kept until the run ends ([`CheckpointIo::restore_in_run`]). A save or merge in the
/// same run forgets them, so a restore never reads an index older than a write before it.
pub struct RunIo<'a> {
    inner: &'a dyn CheckpointIo,
    opened: OpenedBundles,
}

impl<'a> RunIo<'a> {
    /// A run's view of `inner`.
    pub fn new(inner: &'a dyn CheckpointIo) -> RunIo<'a> {
        RunIo {
            inner,
            opened: OpenedBundles::default(),
        }
    }
}

impl CheckpointIo for RunIo<'_> {
    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        self.opened.clear();
        self.inner.save(prefix, tensors)
    }

    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError> {
        self.inner.restore_in_run(prefix, tensors, &self.opened)
    }

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        self.opened.clear();
        self.inner.merge(sources, destination, flags)
    }

    fn check_save_prefix(&self, prefix: &str) -> Result<(), IoError> {
        self.inner.check_save_prefix(prefix)
    }

    fn begin_save(&self, prefix: &str) -> Result<SaveGuard, IoError> {
        self.inner.begin_save(prefix)
    }
}

/// Held for the duration of one save ([`CheckpointIo::begin_save`]); dropping it ends the
/// save (for [`BundleIo`]: cleans up and releases the prefix's lock).
#[derive(Debug)]
pub struct SaveGuard {
    _lock: Option<bundle::SaveLock>,
}

/// One tensor (or slice) for [`CheckpointIo::save`].
#[derive(Clone, Copy, Debug)]
pub struct SaveRequest<'a> {
    /// The checkpoint key.
    pub name: &'a str,
    /// `""` for a whole tensor, else the full shape and the slice (`"10 8 0,3:0,8"`).
    pub shape_and_slice: &'a str,
    /// The value (the slice's part when sliced).
    pub tensor: &'a HostTensor,
}

/// One tensor (or slice) for [`CheckpointIo::restore`].
#[derive(Clone, Copy, Debug)]
pub struct RestoreRequest<'a> {
    /// The checkpoint key.
    pub name: &'a str,
    /// `""` for a whole tensor, else the full shape and the slice to read.
    pub shape_and_slice: &'a str,
    /// The dtype the op declares for this output.
    pub dtype: DType,
}

/// Writes, reads and merges TensorFlow V2 bundles on the local file system, byte-identical to
/// TensorFlow's `SaveV2` and `MergeV2Checkpoints` (see [`crate::bundle`]).
///
/// A save writes the tensors' own buffers to the data file (no copy in between). A restore
/// hands out whole fixed-width tensors as checksummed views into the data file's read-only
/// memory map ([`TensorData::Mapped`], on Unix): nothing is copied, the pages are the page
/// cache's, and the file stays mapped while a value read from it lives. Checkpoints are
/// replaced by renames, so a later save to the same prefix does not change such values; a
/// file truncated or rewritten in place by another program would (see
/// [`BundleReader::map`]). Slices and strings are read into buffers of their own.
#[derive(Clone, Copy, Debug, Default)]
pub struct BundleIo {
    /// How files are written (fsync or not).
    pub write: WriteOptions,
}

impl CheckpointIo for BundleIo {
    fn check_save_prefix(&self, prefix: &str) -> Result<(), IoError> {
        Ok(crate::bundle::check_write_prefix(std::path::Path::new(
            prefix,
        ))?)
    }

    fn begin_save(&self, prefix: &str) -> Result<SaveGuard, IoError> {
        self.check_save_prefix(prefix)?;
        // A lock that cannot be taken is an error: two saves to one prefix never run
        // unlocked side by side.
        Ok(SaveGuard {
            _lock: Some(bundle::SaveLock::acquire(prefix)?),
        })
    }

    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        let mut writer = BundleWriter::with_options(prefix, self.write)?;
        // One buffer for every tensor's signed dimensions: nothing is allocated per tensor.
        let mut shape: Vec<i64> = Vec::new();
        for request in tensors {
            let tensor = request.tensor;
            let dtype = bundle_dtype(tensor.dtype())?;
            bundle_shape(tensor.shape(), &mut shape).ok_or_else(|| IoError::ShapeOutOfRange {
                key: request.name.to_owned(),
            })?;
            let values = match tensor.data() {
                data @ (TensorData::Bytes(_) | TensorData::Mapped(_)) => {
                    TensorValues::Bytes(data.bytes().unwrap_or_default())
                }
                TensorData::Strings(strings) => TensorValues::Strings(strings),
                TensorData::Resources(_) => {
                    return Err(IoError::ResourceTensor {
                        key: request.name.to_owned(),
                    });
                }
            };
            writer.add_with_spec(request.name, dtype, &shape, request.shape_and_slice, values)?;
        }
        writer.finish()?;
        Ok(())
    }

    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError> {
        restore_from(&BundleReader::open(prefix)?, tensors)
    }

    fn restore_in_run(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
        opened: &OpenedBundles,
    ) -> Result<Vec<HostTensor>, IoError> {
        restore_from(opened.reader(prefix)?.as_ref(), tensors)
    }

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        let options = MergeOptions {
            flags,
            write: self.write,
        };
        bundle::merge_bundles(sources, destination, options)?;
        Ok(())
    }
}

/// [`BundleIo`] with one checkpoint open already (a caller that read its index first, say to
/// see whether it is object-based): restores of that prefix read from the open reader, so the
/// bundle is not opened and checked again; everything else is [`BundleIo`]'s.
pub struct OpenedBundleIo {
    io: BundleIo,
    prefix: String,
    reader: Arc<BundleReader>,
}

impl OpenedBundleIo {
    /// `io`, with `reader` (opened at `prefix`) serving the restores of `prefix`.
    pub fn new(io: BundleIo, prefix: impl Into<String>, reader: Arc<BundleReader>) -> Self {
        OpenedBundleIo {
            io,
            prefix: prefix.into(),
            reader,
        }
    }
}

impl CheckpointIo for OpenedBundleIo {
    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        self.io.save(prefix, tensors)
    }

    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError> {
        self.restore_in_run(prefix, tensors, &OpenedBundles::default())
    }

    fn restore_in_run(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
        opened: &OpenedBundles,
    ) -> Result<Vec<HostTensor>, IoError> {
        match prefix == self.prefix {
            true => restore_from(&self.reader, tensors),
            false => self.io.restore_in_run(prefix, tensors, opened),
        }
    }

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        self.io.merge(sources, destination, flags)
    }

    fn check_save_prefix(&self, prefix: &str) -> Result<(), IoError> {
        self.io.check_save_prefix(prefix)
    }

    fn begin_save(&self, prefix: &str) -> Result<SaveGuard, IoError> {
        self.io.begin_save(prefix)
    }
}

/// What `RestoreV2` returns for `tensors` from the open bundle `reader`.
pub fn restore_from(
    reader: &BundleReader,
    tensors: &[RestoreRequest<'_>],
) -> Result<Vec<HostTensor>, IoError> {
    {
        let mut out = Vec::with_capacity(tensors.len());
        // Names usually come in index order: each lookup tries the entry after the last one.
        let mut next = 0;
        // Tensors in a row often have one shape, which they then share.
        let mut shape = None;
        for request in tensors {
            let position = reader.entry_position_from(next, request.name);
            if let Some(at) = position {
                next = at + 1;
            }
            let entry = position.map(|at| &reader.entries()[at]);
            if let Some(value) = restore_mapped(reader, entry, request, &mut shape)? {
                out.push(value);
                continue;
            }
            let tensor = reader.read_spec(request.name, request.shape_and_slice)?;
            let dtype = tensor.dtype;
            if dtype != request.dtype {
                return Err(IoError::DTypeMismatch {
                    key: request.name.to_owned(),
                    stored: dtype,
                    expected: request.dtype,
                });
            }
            // The reader checks every stored dimension is non-negative.
            let shape = tensor.shape.iter().map(|&dim| dim.max(0) as u64).collect();
            let value = match tensor.values {
                Values::Bytes(bytes) => HostTensor::from_bytes(dtype, shape, bytes),
                Values::Strings(elements) if dtype == DType::Variant => {
                    HostTensor::from_variants(shape, elements)
                }
                Values::Strings(strings) => HostTensor::from_strings(shape, strings),
            };
            out.push(value.map_err(|source| IoError::Tensor {
                key: request.name.to_owned(),
                source,
            })?);
        }
        Ok(out)
    }
}

/// A whole fixed-width tensor of the declared dtype as a view into its data file's memory map
/// ([`BundleReader::map`]: checksum checked, nothing copied), on Unix; `None` for everything
/// else (slices, strings, a dtype mismatch, a missing key: `entry` is the request's entry in
/// `reader`, if any), which the copying read handles with its own errors. The shape is shared
/// with the last mapped tensor's, `shape`, when they are the same. On other systems a
/// mapped file cannot be replaced while it is mapped, so a later save to the same prefix would
/// fail: there every read copies.
fn restore_mapped(
    reader: &BundleReader,
    entry: Option<&bundle::Entry>,
    request: &RestoreRequest<'_>,
    shape: &mut Option<Arc<[u64]>>,
) -> Result<Option<HostTensor>, IoError> {
    if !cfg!(unix) || !request.shape_and_slice.is_empty() {
        return Ok(None);
    }
    let Some(entry) = entry else {
        return Ok(None);
    };
    if entry.dtype != request.dtype || entry.dtype.element_size().is_none() {
        return Ok(None);
    }
    let mapped = reader.map_entry(entry)?;
    HostTensor::from_mapped_sharing(mapped, shape)
        .map(Some)
        .map_err(|source| IoError::Tensor {
            key: request.name.to_owned(),
            source,
        })
}

/// `dtype` itself if bundles can store it.
fn bundle_dtype(dtype: DType) -> Result<DType, IoError> {
    if bundle::dtype::is_storable(dtype) {
        Ok(dtype)
    } else {
        Err(IoError::UnstorableDType { dtype })
    }
}

/// A host shape as the bundle's signed dimensions in `out` (cleared first), if each fits.
fn bundle_shape(shape: &[u64], out: &mut Vec<i64>) -> Option<()> {
    out.clear();
    for &dim in shape {
        out.push(i64::try_from(dim).ok()?);
    }
    Some(())
}
