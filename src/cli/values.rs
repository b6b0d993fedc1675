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
use safetensors::tensor::TensorInfo;
use safetensors::tensor::{Dtype, TensorView};
use saveplan::bundle::{BundleReader, MappedTensor, Values, index_path};
use saveplan::exec::HostTensor;
use saveplan::trace::LeftOut;
use saveplan_ir::DType;

use saveplan::checkpoint::resolve_prefix;

use super::output::one_line;

/// When the tensors of a `.safetensors` values file are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Making {
    /// As the file is read: every tensor.
    Now,
    /// When the caller waits for them ([`ValuesReading::wait_leaving_out`]), but those it
    /// says are another process's: a rank saving its task's share of a plan makes its own.
    WhenAsked,
}

/// A values file read: its tensors, or a `.safetensors` file checked whole whose tensors are
/// made when asked ([`Making::WhenAsked`]).
enum Read {
    Made(BTreeMap<String, HostTensor>),
    Unmade(Safetensors),
}

/// Reads a values file: a `.safetensors` file, or a TF checkpoint prefix (for string tensors,
/// which safetensors cannot hold), or a directory or `checkpoint` state file (its latest
/// checkpoint). A `.safetensors` file's tensors are made as `making` says.
fn read_values(path: &Path, making: Making) -> anyhow::Result<Read> {
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
        let file = Safetensors::read(path)?;
        match making {
            Making::Now => file.make(&BTreeMap::new()).map(Read::Made),
            Making::WhenAsked => Ok(Read::Unmade(file)),
        }
    } else {
        read_checkpoint(path).map(Read::Made)
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
    with_values_read_beside(path, Making::Now, |reading| {
        let done = work();
        (done, reading.wait())
    })
}

/// Runs `work` while another thread reads the values file `path` with [`read_values`], its
/// tensors made as `making` says; `work` waits for them when it needs them
/// ([`ValuesReading::wait`]), as late as it can.
pub fn with_values_read_beside<T>(
    path: &Path,
    making: Making,
    work: impl FnOnce(ValuesReading<'_>) -> T,
) -> T {
    std::thread::scope(|scope| {
        work(ValuesReading(
            scope.spawn(move || read_values(path, making)),
        ))
    })
}

/// A values file being read on another thread ([`with_values_read_beside`]).
pub struct ValuesReading<'scope>(std::thread::ScopedJoinHandle<'scope, anyhow::Result<Read>>);

impl ValuesReading<'_> {
    /// The values read, once the read is done (a panic of the reading thread goes on here).
    pub fn wait(self) -> anyhow::Result<BTreeMap<String, HostTensor>> {
        self.wait_leaving_out(&BTreeMap::new())
    }

    /// [`ValuesReading::wait`], with the tensors named in `left_out` left unmade when they
    /// are still to be made ([`Making::WhenAsked`]); the file was checked whole all the same.
    pub fn wait_leaving_out(
        self,
        left_out: &BTreeMap<String, LeftOut>,
    ) -> anyhow::Result<BTreeMap<String, HostTensor>> {
        let read = self
            .0
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        match read {
            Read::Made(values) => Ok(values),
            Read::Unmade(file) => file.make(left_out),
        }
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
    Safetensors::read(path)?.make(&BTreeMap::new())
}

/// A `.safetensors` file read and checked whole (header, dtypes, shapes), its tensors still to
/// be made ([`Safetensors::make`]).
struct Safetensors {
    path: PathBuf,
    map: Option<Arc<memmap2::Mmap>>,
    header: header::Header,
}

impl Safetensors {
    /// Maps the file `path` (or fetches the object it names) and checks it: its errors are
    /// [`read_safetensors`]'s, the first bad tensor in the file's order named.
    fn read(path: &Path) -> anyhow::Result<Safetensors> {
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
        let buffer: &[u8] = map.as_deref().map(|map| &map[..]).unwrap_or_default();
        let header = header::read(buffer)
            .with_context(|| format!("{}: not a valid safetensors file", path.display()))?;
        // Every tensor's dtype and shape checked in the file's order, those of tensors left
        // out later included; a shape is built (`shape_of`, whose error this is) only when a
        // dimension does not fit, not for each of 100,000 tensors.
        for header::Entry { name, info } in &header.entries {
            dtype_of(path, name, info)?;
            if info.shape.iter().any(|&dim| i64::try_from(dim).is_err()) {
                shape_of(path, name, info)?;
            }
        }
        Ok(Safetensors {
            path: path.to_path_buf(),
            map,
            header,
        })
    }

    /// The tensors, each a view into the file's map, but those named in `left_out` (sorted,
    /// as the tensors are, so the two are walked together).
    fn make(
        mut self,
        left_out: &BTreeMap<String, LeftOut>,
    ) -> anyhow::Result<BTreeMap<String, HostTensor>> {
        let path = &self.path;
        // Sorted once (files are most often written in key order) and collected, not
        // inserted one by one; the header refused names given twice.
        let mut entries = std::mem::take(&mut self.header.entries);
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let mut left_out = left_out.keys().peekable();
        let mut out = Vec::with_capacity(entries.len());
        for header::Entry { name, info } in entries {
            while left_out.next_if(|key| **key < name).is_some() {}
            if left_out.next_if(|key| **key == name).is_some() {
                continue;
            }
            let (dtype, shape) = (dtype_of(path, &name, &info)?, shape_of(path, &name, &info)?);
            let range = self.header.range(&info);
            let mapped = (self.map.clone())
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
}

/// The dtype of the tensor `name` of the file `path`, refused when TensorFlow has none for it.
pub(super) fn dtype_of(path: &Path, name: &str, info: &TensorInfo) -> anyhow::Result<DType> {
    from_safetensors(info.dtype).with_context(|| {
        format!(
            "{}: tensor `{name}` has safetensors dtype {}, which TensorFlow has no type for",
            path.display(),
            info.dtype
        )
    })
}

/// The shape of the tensor `name` of the file `path`, refused when a dimension exceeds i64.
fn shape_of(path: &Path, name: &str, info: &TensorInfo) -> anyhow::Result<Vec<i64>> {
    (info.shape.iter())
        .map(|&dim| i64::try_from(dim))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: tensor `{name}`: shape too large", path.display()))
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
fn from_safetensors(dtype: Dtype) -> Option<DType> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use saveplan::trace::TracedVariable;

    /// A `.safetensors` file at `path` of float32[1] tensors named `names` (in that order in
    /// the file), with `odd` of dtype `F8_E8M0` (one byte) instead when given.
    fn file(path: &Path, names: &[&str], odd: Option<&str>) {
        let mut header = serde_json::Map::new();
        let mut at = 0;
        for name in names {
            let (dtype, len) = if Some(*name) == odd {
                ("F8_E8M0", 1)
            } else {
                ("F32", 4)
            };
            let entry =
                serde_json::json!({"dtype": dtype, "shape": [1], "data_offsets": [at, at + len]});
            header.insert((*name).to_owned(), entry);
            at += len;
        }
        write(path, &serde_json::Value::Object(header), at);
    }

    /// A `.safetensors` file at `path` of `header` (padded to 8 bytes) and `data` bytes.
    fn write(path: &Path, header: &serde_json::Value, data: usize) {
        let mut text = header.to_string().into_bytes();
        text.resize(text.len().next_multiple_of(8), b' ');
        let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&text);
        bytes.resize(bytes.len() + data, 7);
        std::fs::write(path, bytes).unwrap();
    }

    fn left_out(names: &[&str]) -> BTreeMap<String, LeftOut> {
        let variable = TracedVariable {
            shared_name: String::new(),
            dtype: DType::Float,
            shape: vec![1],
        };
        (names.iter())
            .map(|name| {
                (
                    (*name).to_owned(),
                    LeftOut {
                        variable: variable.clone(),
                        task: 1,
                    },
                )
            })
            .collect()
    }

    /// Made once asked, the tensors are those of the file but the ones left out, whatever
    /// order the file holds them in; made at once, all of them.
    #[test]
    fn the_tensors_left_out_are_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.safetensors");
        file(&path, &["d", "a", "c", "b"], None);
        let keys = |values: BTreeMap<String, HostTensor>| values.into_keys().collect::<Vec<_>>();
        let made = Safetensors::read(&path)
            .unwrap()
            .make(&left_out(&["b", "c", "z"]));
        assert_eq!(keys(made.unwrap()), ["a", "d"]);
        let all = with_values_read_beside(&path, Making::Now, |reading| {
            reading.wait_leaving_out(&left_out(&["b"]))
        });
        assert_eq!(keys(all.unwrap()), ["a", "b", "c", "d"]);
        let asked = with_values_read_beside(&path, Making::WhenAsked, |reading| {
            reading.wait_leaving_out(&left_out(&["a", "d"]))
        });
        assert_eq!(keys(asked.unwrap()), ["b", "c"]);
    }

    /// A file is checked whole before any tensor is left out: a shape with a dimension past
    /// i64 (of no bytes, so the header is valid) is refused, naming its tensor, even when that
    /// tensor is another process's, and the same when every tensor is made.
    #[test]
    fn a_shape_too_large_is_refused_whatever_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.safetensors");
        let header = serde_json::json!({
            "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
            "b": {"dtype": "F32", "shape": [u64::MAX, 0], "data_offsets": [4, 4]},
        });
        write(&path, &header, 4);
        for (making, out) in [(Making::WhenAsked, &["b"][..]), (Making::Now, &[][..])] {
            let refused = with_values_read_beside(&path, making, |reading| {
                reading.wait_leaving_out(&left_out(out))
            });
            let error = format!("{:#}", refused.unwrap_err());
            assert!(
                error.contains("tensor `b`: shape too large"),
                "{making:?}: {error}"
            );
        }
    }

    /// A file is checked whole before any tensor is left out: a dtype TensorFlow has none for
    /// is refused, naming its tensor, even when that tensor is another process's.
    #[test]
    fn a_file_is_checked_whole_whatever_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.safetensors");
        file(&path, &["a", "b", "c"], Some("b"));
        let refused = with_values_read_beside(&path, Making::WhenAsked, |reading| {
            reading.wait_leaving_out(&left_out(&["b"]))
        });
        let error = format!("{:#}", refused.unwrap_err());
        assert!(
            error.contains("tensor `b` has safetensors dtype F8_E8M0"),
            "{error}"
        );
    }
}
