//! Value files of `save`, `restore`, `run` and `convert`: `.safetensors` files (or checkpoint
//! prefixes) read into tensors by key, tensors by key written as `.safetensors`, the mapping
//! between TensorFlow and safetensors dtypes, and what a checkpoint path on the command line
//! stands for ([`checkpoint_prefix`]).

pub mod header;
pub mod in_place;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use safetensors::tensor::{Dtype, TensorView};
use saveplan::bundle::{BundleReader, MappedTensor, Values, index_path};
use saveplan::exec::HostTensor;
use saveplan_ir::DType;

use saveplan::checkpoint::resolve_prefix;

use super::output::one_line;

/// Reads a values file: a `.safetensors` file, or a TF checkpoint prefix (for string tensors,
/// which safetensors cannot hold), or a directory or `checkpoint` state file (its latest
/// checkpoint).
pub fn read_values(path: &Path) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    let path = &checkpoint_prefix(path)?;
    let is_safetensors = path.extension().is_some_and(|ext| ext == "safetensors")
        || !saveplan::storage::exists(&index_path(path)).unwrap_or(false);
    if is_safetensors {
        // A FIFO, a device or a folder would block or fail late: only regular files are read.
        if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
            return Err(ValuesError::NotAFile {
                path: path.to_path_buf(),
            }
            .into());
        }
        read_safetensors(path)
    } else {
        read_checkpoint(path)
    }
}

/// Runs `work` while another thread reads the values file `path` with [`read_values`], and
/// gives both results: reading a file of 100,000 tensors takes about 0.05 s of one core
/// (`header.rs`; 0.2 s through the safetensors crate's own parse), which loading a graph or a
/// spec leaves free in places. The caller reports
/// `work`'s errors, and those of what it does next, before the file's, as if the file were
/// read after them.
pub fn read_values_beside<T>(
    path: &Path,
    work: impl FnOnce() -> T,
) -> (T, anyhow::Result<BTreeMap<String, HostTensor>>) {
    with_values_read_beside(path, |reading| {
        let done = work();
        (done, reading.wait())
    })
}

/// Runs `work` while another thread reads the values file `path` with [`read_values`]; `work`
/// waits for them when it needs them ([`ValuesReading::wait`]), as late as it can.
pub fn with_values_read_beside<T>(path: &Path, work: impl FnOnce(ValuesReading<'_>) -> T) -> T {
    std::thread::scope(|scope| work(ValuesReading(scope.spawn(move || read_values(path)))))
}

/// A values file being read on another thread ([`with_values_read_beside`]).
pub struct ValuesReading<'scope>(
    std::thread::ScopedJoinHandle<'scope, anyhow::Result<BTreeMap<String, HostTensor>>>,
);

impl ValuesReading<'_> {
    /// The values read, once the read is done (a panic of the reading thread goes on here).
    pub fn wait(self) -> anyhow::Result<BTreeMap<String, HostTensor>> {
        self.0
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// The values `read` gave; when reading them failed, the error of `first` (what would have
/// failed before the values were read: making the session) if it fails, else the read's.
pub fn values_or_earlier_error<T>(
    read: anyhow::Result<BTreeMap<String, HostTensor>>,
    first: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    read.or_else(|err| {
        first()?;
        Err(err)
    })
}

/// Why a values file is refused.
#[derive(Debug, thiserror::Error)]
pub enum ValuesError {
    /// The path exists but is not a regular file (a FIFO, a device, a folder).
    #[error("{}: not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: std::path::PathBuf,
    },
    /// A `.safetensors` header the safetensors crate refuses, as it says it ([`header`]).
    #[error(transparent)]
    Header(#[from] safetensors::SafeTensorError),
    /// A `.safetensors` header that names a tensor twice ([`header`]).
    #[error("tensor `{0}` is named twice in the header")]
    NamedTwice(String),
}

/// Reads every tensor of a `.safetensors` file without copying it: each tensor is a view into
/// one read-only memory map of the file ([`MappedTensor::in_map`]), shared by all of them and
/// unmapped when the last is dropped. Copying a 1 GiB file into buffers of their own took
/// 1 GiB of fresh memory, and on a VM the kernel's first touch of it cost more than the save
/// that follows. As with any memory-mapped read, another program truncating the file while the
/// tensors are in use faults the process.
pub fn read_safetensors(path: &Path) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    let map = if saveplan::storage::is_url(path) {
        // An object: fetched whole into an anonymous map the tensors then share.
        let bytes = saveplan::storage::read(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        if bytes.is_empty() {
            None
        } else {
            let mut anon = memmap2::MmapMut::map_anon(bytes.len())
                .with_context(|| format!("{}: cannot read", path.display()))?;
            anon.copy_from_slice(&bytes);
            Some(Arc::new(anon.make_read_only().with_context(|| {
                format!("{}: cannot read", path.display())
            })?))
        }
    } else {
        map_file(path)?
    };
    tensors_of_map(path, map)
}

/// The read-only memory map of the local file `path` (`None` when empty).
fn map_file(path: &Path) -> anyhow::Result<Option<Arc<memmap2::Mmap>>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let empty = file.metadata().is_ok_and(|meta| meta.len() == 0);
    // SAFETY: the map is read-only; as with any memory-mapped read, another program
    // truncating the file in the meantime would fault the process. An empty file cannot be
    // mapped; it is no safetensors file either.
    Ok(if empty {
        None
    } else {
        Some(Arc::new(
            unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("{}: cannot read", path.display()))?,
        ))
    })
}

/// The tensors of a safetensors file's map, each a view into it.
fn tensors_of_map(
    path: &Path,
    map: Option<Arc<memmap2::Mmap>>,
) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    let buffer: &[u8] = map.as_deref().map(|map| &map[..]).unwrap_or_default();
    let mut header = header::read(buffer)
        .with_context(|| format!("{}: not a valid safetensors file", path.display()))?;
    // Collected, then sorted once (files are most often written in key order), not inserted
    // one by one; the header refused names given twice.
    let entries = std::mem::take(&mut header.entries);
    let mut out = Vec::with_capacity(entries.len());
    for header::Entry { name, info } in entries {
        let Some(dtype) = from_safetensors(info.dtype) else {
            bail!(
                "{}: tensor `{name}` has safetensors dtype {}, which TensorFlow has no type for",
                path.display(),
                info.dtype
            );
        };
        let shape: Vec<i64> = (info.shape.iter())
            .map(|&dim| i64::try_from(dim))
            .collect::<Result<_, _>>()
            .with_context(|| format!("{}: tensor `{name}`: shape too large", path.display()))?;
        let range = header.range(&info);
        let mapped = map
            .clone()
            .and_then(|map| MappedTensor::in_map(map, range, dtype, shape))
            .with_context(|| {
                format!("{}: tensor `{name}` lies outside the file", path.display())
            })?;
        let tensor = HostTensor::from_mapped(mapped)
            .with_context(|| format!("{}: tensor `{name}`", path.display()))?;
        out.push((name, tensor));
    }
    Ok(out.into_iter().collect())
}

/// Reads every tensor of a checkpoint (sliced ones whole).
fn read_checkpoint(prefix: &Path) -> anyhow::Result<BTreeMap<String, HostTensor>> {
    let reader = BundleReader::open(prefix)?;
    let mut out = BTreeMap::new();
    for entry in reader.entries() {
        let tensor = reader.read(&entry.key)?;
        let shape: Vec<u64> = tensor.shape.iter().map(|&dim| dim.max(0) as u64).collect();
        let value = match tensor.values {
            Values::Bytes(bytes) => HostTensor::from_bytes(entry.dtype, shape, bytes),
            Values::Strings(elements) if entry.dtype == DType::Variant => {
                HostTensor::from_variants(shape, elements)
            }
            Values::Strings(strings) => HostTensor::from_strings(shape, strings),
        }
        .with_context(|| format!("{}: tensor `{}`", prefix.display(), entry.key))?;
        out.insert(entry.key.clone(), value);
    }
    Ok(out)
}

/// Makes `out` ready to be written before any work is done: its missing folders are created,
/// and a folder at `out` itself is an error (one line, before a checkpoint is read).
pub fn prepare_out(out: &Path) -> anyhow::Result<()> {
    if saveplan::storage::is_url(out) {
        // An object store has no folders to make.
        return Ok(());
    }
    if out.is_dir() {
        bail!(
            "{}: is a folder, not a file or prefix to write",
            out.display()
        );
    }
    match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent)
            .with_context(|| format!("{}: cannot create folder", parent.display())),
        _ => Ok(()),
    }
}

/// Whether `out` names a `.safetensors` file (else a checkpoint prefix).
pub fn is_safetensors_name(out: &Path) -> bool {
    out.extension().is_some_and(|ext| ext == "safetensors")
}

/// Writes restored values to `out`: a `.safetensors` file when it is named so, else a
/// checkpoint prefix (one shard, string tensors kept; written under the prefix's save lock,
/// as a save is).
pub fn write_values(out: &Path, tensors: &BTreeMap<String, HostTensor>) -> anyhow::Result<()> {
    if is_safetensors_name(out) {
        return write_safetensors(out, tensors);
    }
    let _lock = saveplan::bundle::SaveLock::acquire(out)?;
    let mut writer = saveplan::bundle::BundleWriter::create(out)?;
    let mut shape = Vec::new();
    for (key, tensor) in tensors {
        shape.clear();
        shape.extend(tensor.shape().iter().map(|&dim| dim as i64));
        let values = match (tensor.bytes(), tensor.strings()) {
            (Some(bytes), _) => saveplan::bundle::TensorValues::Bytes(bytes),
            (None, Some(strings)) => saveplan::bundle::TensorValues::Strings(strings),
            (None, None) => bail!("tensor `{key}` holds resource handles, not values"),
        };
        writer.add_with_spec(key, tensor.dtype(), &shape, "", values)?;
    }
    writer.finish()?;
    Ok(())
}

/// Writes `tensors` as a `.safetensors` file, with the mode a new file gets (`0666` less the
/// umask), not the private mode of the temporary file it is written through.
pub fn write_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, HostTensor>,
) -> anyhow::Result<()> {
    let mut views = Vec::with_capacity(tensors.len());
    for (key, tensor) in tensors {
        let Some(dtype) = to_safetensors(tensor.dtype()) else {
            bail!(
                "{}: tensor `{key}` is {}: safetensors has no type for it",
                path.display(),
                tensor.dtype()
            );
        };
        let bytes = tensor
            .bytes()
            .with_context(|| format!("tensor `{key}` has no fixed-width bytes"))?;
        let shape: Vec<usize> = tensor.shape().iter().map(|&dim| dim as usize).collect();
        let view =
            TensorView::new(dtype, shape, bytes).with_context(|| format!("tensor `{key}`"))?;
        views.push((key.clone(), view));
    }
    serialize_to_file(views, None, path)
}

/// Writes a `.safetensors` file of `views` (and `metadata`) at `path`, with the mode a new file
/// gets. A failure is `PATH: cannot write: CAUSE`, the cause said once: the safetensors
/// crate's error repeats its IO error and the temporary file's name in its sources.
pub fn serialize_to_file<'a>(
    views: Vec<(String, TensorView<'a>)>,
    metadata: Option<std::collections::HashMap<String, String>>,
    path: &Path,
) -> anyhow::Result<()> {
    if saveplan::storage::is_url(path) {
        let bytes = safetensors::tensor::serialize(views, metadata)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        let put = saveplan::storage::object::Put::Overwrite;
        saveplan::storage::object::put(path, bytes, put)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        return Ok(());
    }
    if let Err(err) = safetensors::tensor::serialize_to_file(views, metadata, path) {
        // An IO error is said by its kind: its message names the temporary file.
        let mut cause: &(dyn std::error::Error + 'static) = &err;
        loop {
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                bail!(
                    "{}: cannot write: {}",
                    path.display(),
                    std::io::Error::from(io.kind())
                );
            }
            match cause.source() {
                Some(source) => cause = source,
                None => bail!("{}: cannot write: {err}", path.display()),
            }
        }
    }
    set_new_file_mode(path)
}

/// Gives `path` the permissions a newly created file gets: `0666` less the process's umask.
#[cfg(unix)]
pub fn set_new_file_mode(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Linux reports the umask in /proc without changing it; elsewhere assume the usual 022.
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("Umask:"))?;
            u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
        })
        .unwrap_or(0o022);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666 & !umask))
        .with_context(|| format!("{}: cannot set permissions", path.display()))
}

/// Gives `path` the permissions a newly created file gets (nothing to do here).
#[cfg(not(unix))]
pub fn set_new_file_mode(_path: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// The safetensors dtype holding the same bytes as a TF dtype, if there is one.
pub(super) fn to_safetensors(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::Float => Dtype::F32,
        DType::Double => Dtype::F64,
        DType::Half => Dtype::F16,
        DType::BFloat16 => Dtype::BF16,
        DType::Int8 => Dtype::I8,
        DType::Int16 => Dtype::I16,
        DType::Int32 => Dtype::I32,
        DType::Int64 => Dtype::I64,
        DType::UInt8 => Dtype::U8,
        DType::UInt16 => Dtype::U16,
        DType::UInt32 => Dtype::U32,
        DType::UInt64 => Dtype::U64,
        DType::Bool => Dtype::BOOL,
        DType::Complex64 => Dtype::C64,
        DType::Float8E5M2 => Dtype::F8_E5M2,
        DType::Float8E4M3FN => Dtype::F8_E4M3,
        DType::Float8E4M3FNUZ => Dtype::F8_E4M3FNUZ,
        DType::Float8E5M2FNUZ => Dtype::F8_E5M2FNUZ,
        _ => return None,
    })
}

/// The TF dtype holding the same bytes as a safetensors dtype, if there is one.
pub(super) fn from_safetensors(dtype: Dtype) -> Option<DType> {
    DType::ALL
        .iter()
        .copied()
        .find(|&candidate| to_safetensors(candidate) == Some(dtype))
}

/// The checkpoint prefix a command-line path stands for: the path itself, or for a directory
/// or a `checkpoint` state file the latest checkpoint it names.
pub fn checkpoint_prefix(path: &Path) -> anyhow::Result<PathBuf> {
    resolve_prefix(path).map_err(|err| one_line(&err))
}
