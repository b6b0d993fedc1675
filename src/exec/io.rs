//! [`CheckpointIo`]: the storage behind `SaveV2`, `RestoreV2` and `MergeV2Checkpoints`.
//!
//! The kernels validate their inputs and attributes, then hand plain requests to this trait,
//! so the same plan can write TensorFlow bundles on disk ([`BundleIo`]) or, in tests, an
//! in-memory record.

use saveplan_ir::DType;

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
        // Where no lock file can be made (the directory cannot be created or written), the
        // save cannot write its files either: it runs unlocked and fails with its op's error.
        Ok(SaveGuard {
            _lock: bundle::SaveLock::acquire(prefix).ok(),
        })
    }

    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        let mut writer = BundleWriter::with_options(prefix, self.write)?;
        for request in tensors {
            let tensor = request.tensor;
            let dtype = bundle_dtype(tensor.dtype())?;
            let shape = bundle_shape(tensor.shape()).ok_or_else(|| IoError::ShapeOutOfRange {
                key: request.name.to_owned(),
            })?;
            let values = match tensor.data() {
                TensorData::Bytes(bytes) => TensorValues::Bytes(bytes),
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
        let reader = BundleReader::open(prefix)?;
        let mut out = Vec::with_capacity(tensors.len());
        for request in tensors {
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

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        let options = MergeOptions {
            flags,
            write: self.write,
        };
        bundle::merge_bundles(sources, destination, options)?;
        Ok(())
    }
}

/// `dtype` itself if bundles can store it.
fn bundle_dtype(dtype: DType) -> Result<DType, IoError> {
    if bundle::dtype::is_storable(dtype) {
        Ok(dtype)
    } else {
        Err(IoError::UnstorableDType { dtype })
    }
}

/// A host shape as the bundle's signed dimensions, if each fits.
fn bundle_shape(shape: &[u64]) -> Option<Vec<i64>> {
    shape.iter().map(|&dim| i64::try_from(dim).ok()).collect()
}
