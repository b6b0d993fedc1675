//! `BundleWriter`: writes one `prefix.index` + `prefix.data-00000-of-00001` exactly as
//! TensorFlow's SaveV2 does (data in insertion order, index sorted), through temporary files
//! that are moved into place by a journaled commit ([`super::journal`]), so a crash leaves
//! the bundle that was at the prefix or the new one. At a URL prefix the same commit runs in
//! the spool while the data goes straight into the data object's upload, which
//! [`super::remote`] completes when it publishes.

use prost::Message;
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::crc;
use super::dtype::{DType, is_element_list, num_elements};
use super::error::{BundleError, Result};
use super::journal::{self, unique_name};
use super::proto::{BundleEntryProto, BundleHeaderProto, VersionDef, shape_proto, slice_proto};
use super::slice::{ShapeAndSlice, TensorSlice, encode_slice_key, overlap_volume};
use super::sstable::TableBuilder;
use super::string::encode_strings;
use super::variant::encode_variants;
use super::{data_path, index_path};
use crate::storage::local::{self as fsops, TrackedFile};
use crate::storage::object::Upload;

/// A slice resolved against its tensor: `(start, length)` per dimension.
type Region = Vec<(i64, i64)>;

/// How a [`BundleWriter`] (and a merge) writes files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// `fsync` every written file and its directory before returning from `finish`.
    pub fsync: bool,
}

/// The values of one tensor (or one slice of it) handed to the writer.
#[derive(Clone, Copy, Debug)]
pub enum TensorValues<'a> {
    /// Row-major little-endian element bytes of a fixed-width dtype.
    Bytes(&'a [u8]),
    /// The elements of a `DT_STRING` tensor (or a `DT_VARIANT` tensor's opaque elements),
    /// row-major.
    Strings(&'a [Vec<u8>]),
}

/// Writes one single-shard tensor bundle. Call the `add*` methods in the order the data should
/// be laid out, then [`BundleWriter::finish`]. Dropping an unfinished writer removes its
/// temporary files.
pub struct BundleWriter {
    /// Where the files are written: the prefix, or the local spool of a URL prefix.
    prefix: PathBuf,
    /// A URL prefix the finished bundle is published to ([`super::remote`]).
    remote: Option<PathBuf>,
    data_final: PathBuf,
    data_temp: PathBuf,
    data: Option<BufWriter<DataSink>>,
    /// The data object's upload once all its bytes are written (completed by `finish`).
    upload: Option<Upload>,
    offset: u64,
    /// Encoded (key, BundleEntryProto) pairs in insertion order; sorted by `finish`.
    entries: EntryTable,
    /// Full-tensor entries of sliced tensors, completed by `finish`, with the regions of the
    /// slices added so far.
    sliced: BTreeMap<String, (BundleEntryProto, Vec<Region>)>,
    options: WriteOptions,
    /// The key of a [`TensorStream`] dropped before it was finished: its bytes are in the data
    /// file without an entry, so `finish` refuses to complete the bundle.
    abandoned: Option<String>,
}

/// Where the data bytes go: the data file, or, for a bundle published to a URL, straight into
/// the upload of its data object, which sends them as they are written and lands only when the
/// commit completes it ([`super::remote`]); the spool then holds the index and an empty data
/// file, which stand for the bundle in the local commit.
enum DataSink {
    File(TrackedFile),
    Upload(Upload),
}

impl Write for DataSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            DataSink::File(file) => file.write(buf),
            DataSink::Upload(upload) => {
                upload.write(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            DataSink::File(file) => file.flush(),
            DataSink::Upload(_) => Ok(()),
        }
    }
}

/// A tensor being streamed into the data file with [`BundleWriter::begin`].
pub struct TensorStream<'w> {
    writer: &'w mut BundleWriter,
    key: Vec<u8>,
    dtype: DType,
    entry: BundleEntryProto,
    remaining: u64,
    crc: u32,
    done: bool,
}

impl BundleWriter {
    /// Starts a bundle at `prefix` with default options (no fsync).
    pub fn create(prefix: impl AsRef<Path>) -> Result<BundleWriter> {
        BundleWriter::with_options(prefix, WriteOptions::default())
    }

    /// Starts a bundle at `prefix`, creating its directory if needed; the prefix must pass
    /// [`check_write_prefix`].
    pub fn with_options(prefix: impl AsRef<Path>, options: WriteOptions) -> Result<BundleWriter> {
        let mut prefix = prefix.as_ref().to_path_buf();
        check_write_prefix(&prefix)?;
        let remote = super::remote::is_remote(&prefix).then(|| prefix.clone());
        let mut options = options;
        if let Some(url) = &remote {
            prefix = super::remote::spool(url);
            // The spool is scratch space (the store makes the checkpoint durable): no fsync.
            options.fsync = false;
        }
        if let Some(dir) = prefix.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            fsops::create_dir_all(dir)
                .map_err(|err| BundleError::io(dir, "create directory", err))?;
        }
        let data_final = data_path(&prefix, 0, 1);
        let data_temp = unique_name(&data_final, ".tempstate");
        // A bundle published from here (not one of TensorFlow's temporary parts, merged in
        // the spool) uploads its data object as it writes it.
        let upload = match &remote {
            Some(url) if !super::remote::is_temp_part(url) => {
                let object = data_path(url, 0, 1);
                Some(
                    Upload::start(&object)
                        .map_err(|err| BundleError::io(&object, "upload", err))?,
                )
            }
            _ => None,
        };
        let file = fsops::create(&data_temp)
            .map(TrackedFile)
            .map_err(|err| BundleError::io(&data_temp, "create", err))?;
        let sink = match upload {
            Some(upload) => DataSink::Upload(upload),
            None => DataSink::File(file),
        };
        Ok(BundleWriter {
            prefix,
            remote,
            data_final,
            data_temp,
            data: Some(BufWriter::with_capacity(1 << 20, sink)),
            upload: None,
            offset: 0,
            entries: EntryTable::default(),
            sliced: BTreeMap::new(),
            options,
            abandoned: None,
        })
    }

    /// The prefix being written.
    pub fn prefix(&self) -> &Path {
        self.remote.as_deref().unwrap_or(&self.prefix)
    }

    /// Adds a whole fixed-width tensor.
    pub fn add(&mut self, key: &str, dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<()> {
        self.add_values(key, dtype, shape, TensorValues::Bytes(bytes))
    }

    /// Adds a whole `DT_STRING` tensor.
    pub fn add_strings(&mut self, key: &str, shape: &[i64], strings: &[Vec<u8>]) -> Result<()> {
        self.add_values(key, DType::String, shape, TensorValues::Strings(strings))
    }

    /// Adds a whole tensor of either kind.
    pub fn add_values(
        &mut self,
        key: &str,
        dtype: DType,
        shape: &[i64],
        values: TensorValues<'_>,
    ) -> Result<()> {
        self.check_key(key)?;
        self.check_size(key, dtype, shape, values)?;
        let entry = self.write_values(dtype, shape, values)?;
        self.entries.push(key.as_bytes(), &entry);
        Ok(())
    }

    /// Adds one slice of tensor `key` whose full shape is `full_shape`; `values` hold the slice
    /// in row-major order. A slice covering the whole tensor is stored as an ordinary entry.
    pub fn add_slice(
        &mut self,
        key: &str,
        dtype: DType,
        full_shape: &[i64],
        slice: &TensorSlice,
        values: TensorValues<'_>,
    ) -> Result<()> {
        self.check_key(key)?;
        let bad_spec = |detail: String| BundleError::BadSliceSpec {
            path: self.prefix.clone(),
            key: key.to_string(),
            spec: slice.to_string(),
            detail,
        };
        let slice_shape = slice
            .slice_shape(full_shape)
            .map_err(|err| bad_spec(err.to_string()))?;
        if slice.is_full_for(full_shape) {
            return self.add_values(key, dtype, full_shape, values);
        }
        self.check_size(key, dtype, &slice_shape, values)?;
        let region = slice
            .resolve(full_shape)
            .map_err(|err| bad_spec(err.to_string()))?;
        if let Some((full, regions)) = self.sliced.get(key) {
            if full.dtype != dtype.number() || full.shape != Some(shape_proto(full_shape)) {
                return Err(self.conflict(key, "slices disagree on dtype or full shape".into()));
            }
            if regions
                .iter()
                .any(|other| overlap_volume(other, &region) > 0)
            {
                return Err(
                    self.conflict(key, format!("slice {slice} overlaps a slice added before"))
                );
            }
        }
        let entry = self.write_values(dtype, &slice_shape, values)?;
        self.entries.push(&encode_slice_key(key, slice), &entry);
        let (full, regions) = self.sliced.entry(key.to_string()).or_insert_with(|| {
            let full = BundleEntryProto {
                dtype: dtype.number(),
                shape: Some(shape_proto(full_shape)),
                ..Default::default()
            };
            (full, Vec::new())
        });
        full.slices.push(slice_proto(slice));
        regions.push(region);
        Ok(())
    }

    /// Adds a tensor as SaveV2 does with one `shape_and_slices` element: `""` adds the whole
    /// tensor of shape `shape`, otherwise `spec` (`"4 3 0,2:0,3"`) names the full shape and the
    /// slice, whose shape must equal `shape`.
    pub fn add_with_spec(
        &mut self,
        key: &str,
        dtype: DType,
        shape: &[i64],
        spec: &str,
        values: TensorValues<'_>,
    ) -> Result<()> {
        if spec.is_empty() {
            return self.add_values(key, dtype, shape, values);
        }
        let bad_spec = |detail: String| BundleError::BadSliceSpec {
            path: self.prefix.clone(),
            key: key.to_string(),
            spec: spec.to_string(),
            detail,
        };
        let parsed = ShapeAndSlice::parse(spec).map_err(|err| bad_spec(err.to_string()))?;
        let slice_shape = parsed
            .slice
            .slice_shape(&parsed.full_shape)
            .map_err(|err| bad_spec(err.to_string()))?;
        if slice_shape != shape {
            return Err(bad_spec(format!(
                "slice shape {slice_shape:?} differs from the tensor's shape {shape:?}"
            )));
        }
        self.add_slice(key, dtype, &parsed.full_shape, &parsed.slice, values)
    }

    /// Starts streaming a whole fixed-width tensor of `dtype` and `shape` whose bytes are
    /// then passed in pieces to [`TensorStream::write`]; nothing is buffered beyond the data
    /// file's write buffer.
    pub fn begin(&mut self, key: &str, dtype: DType, shape: &[i64]) -> Result<TensorStream<'_>> {
        self.check_key(key)?;
        let Some(element_size) = dtype.element_size() else {
            return Err(BundleError::WrongDType {
                path: self.prefix.clone(),
                key: key.to_string(),
                expected: "a fixed-width dtype",
                actual: dtype,
            });
        };
        let size = self.expected_size(key, dtype, shape, element_size)?;
        let entry = BundleEntryProto {
            dtype: dtype.number(),
            shape: Some(shape_proto(shape)),
            offset: self.offset as i64,
            size: size as i64,
            ..Default::default()
        };
        Ok(TensorStream {
            key: key.as_bytes().to_vec(),
            writer: self,
            dtype,
            entry,
            remaining: size,
            crc: 0,
            done: false,
        })
    }

    /// Writes the index and moves both files into place (replacing a bundle at the prefix as
    /// one step, see [`super::journal`]). On failure no new file of the bundle is left behind
    /// and a bundle that was at the prefix is unchanged.
    pub fn finish(mut self) -> Result<()> {
        let result = self.finish_files();
        if result.is_err() {
            let _ = fsops::remove_file(&self.data_temp);
        }
        result?;
        match &self.remote {
            // TensorFlow's temporary parts stay in the spool for the merge that follows.
            Some(url) if !super::remote::is_temp_part(url) => {
                super::remote::publish(&self.prefix, url, self.upload.take())
            }
            _ => Ok(()),
        }
    }

    fn finish_files(&mut self) -> Result<()> {
        if let Some(key) = self.abandoned.take() {
            return Err(self.conflict(
                &key,
                "a streamed tensor was dropped before it was finished".into(),
            ));
        }
        let data = self
            .data
            .take()
            .expect("`finish` consumes the writer, so the data file is still open");
        match data
            .into_inner()
            .map_err(|err| BundleError::io(&self.data_temp, "write", err.into_error()))?
        {
            DataSink::File(file) if self.options.fsync => {
                fsops::sync(&file.0)
                    .map_err(|err| BundleError::io(&self.data_temp, "fsync", err))?;
            }
            DataSink::File(_) => {}
            DataSink::Upload(upload) => self.upload = Some(upload),
        }
        let sliced = std::mem::take(&mut self.sliced);
        for (key, (entry, _)) in sliced {
            self.entries.push(key.as_bytes(), &entry);
        }
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort();
        if let Some(key) = entries.first_duplicate() {
            let key = String::from_utf8_lossy(key).into_owned();
            return Err(self.conflict(&key, "added more than once".into()));
        }
        if entries.iter().next().is_some_and(|(key, _)| key.is_empty()) {
            return Err(self.conflict("", "the empty key is reserved for the bundle header".into()));
        }
        // The index is complete on disk before anything moves; the data file goes into place
        // first, so a reader that sees the index finds its data.
        let staged = unique_name(&index_path(&self.prefix), ".merging");
        write_index(&staged, 1, entries.iter(), self.options)?;
        let moves = [(self.data_temp.clone(), self.data_final.clone())];
        let committed = journal::commit(&self.prefix, &moves, &staged, self.options.fsync);
        if committed.is_err() {
            let _ = fsops::remove_file(&staged);
        }
        committed
    }

    fn conflict(&self, key: &str, detail: String) -> BundleError {
        BundleError::Conflict {
            path: self.prefix.clone(),
            key: key.to_string(),
            detail,
        }
    }

    fn expected_size(
        &self,
        key: &str,
        dtype: DType,
        shape: &[i64],
        element_size: usize,
    ) -> Result<u64> {
        num_elements(shape)
            .and_then(|n| n.checked_mul(element_size as u64))
            .ok_or_else(|| BundleError::BadEntry {
                path: self.prefix.clone(),
                key: key.to_string(),
                detail: format!("invalid shape {shape:?} for {dtype}"),
            })
    }

    /// Tensor names must be non-empty (the empty key holds the header) and must not start with
    /// a NUL byte (that prefix marks slice keys).
    fn check_key(&self, key: &str) -> Result<()> {
        if key.is_empty() || key.starts_with('\0') {
            return Err(self.conflict(
                key,
                "tensor names must be non-empty and must not start with a NUL byte".into(),
            ));
        }
        Ok(())
    }

    fn check_size(
        &self,
        key: &str,
        dtype: DType,
        shape: &[i64],
        values: TensorValues<'_>,
    ) -> Result<()> {
        let (expected, actual) = match (dtype.element_size(), values) {
            (Some(element_size), TensorValues::Bytes(bytes)) => (
                self.expected_size(key, dtype, shape, element_size)?,
                bytes.len() as u64,
            ),
            (None, TensorValues::Strings(strings)) if is_element_list(dtype) => (
                self.expected_size(key, dtype, shape, 1)?,
                strings.len() as u64,
            ),
            (_, values) => {
                return Err(BundleError::WrongDType {
                    path: self.prefix.clone(),
                    key: key.to_string(),
                    expected: match values {
                        TensorValues::Bytes(_) => "a fixed-width dtype for byte values",
                        TensorValues::Strings(_) => "string or variant for string values",
                    },
                    actual: dtype,
                });
            }
        };
        if expected != actual {
            return Err(BundleError::SizeMismatch {
                path: self.prefix.clone(),
                key: key.to_string(),
                dtype,
                shape: shape.to_vec(),
                expected,
                actual,
            });
        }
        Ok(())
    }

    /// Appends the values to the data file and returns their entry (without slices).
    fn write_values(
        &mut self,
        dtype: DType,
        shape: &[i64],
        values: TensorValues<'_>,
    ) -> Result<BundleEntryProto> {
        let offset = self.offset;
        let (size, crc32c) = match values {
            TensorValues::Bytes(bytes) => {
                (bytes.len() as u64, crc::mask(self.write_data_crc(bytes)?))
            }
            TensorValues::Strings(strings) => {
                let encoded = if dtype == DType::Variant {
                    encode_variants(strings)
                } else {
                    encode_strings(strings)
                };
                self.write_data(&encoded.bytes)?;
                (encoded.bytes.len() as u64, encoded.crc32c)
            }
        };
        Ok(BundleEntryProto {
            dtype: dtype.number(),
            shape: Some(shape_proto(shape)),
            shard_id: 0,
            offset: offset as i64,
            size: size as i64,
            crc32c,
            slices: Vec::new(),
        })
    }

    /// Appends `bytes` and returns their (unmasked) CRC32C. Large tensors bypass the write
    /// buffer: one `write` call hands them to the file while a rayon task checksums them on
    /// another core, so the checksum costs no wall time when a core is free.
    fn write_data_crc(&mut self, bytes: &[u8]) -> Result<u32> {
        const DIRECT_MIN: usize = 1 << 20;
        if bytes.len() < DIRECT_MIN {
            self.write_data(bytes)?;
            return Ok(crc::crc32c(bytes));
        }
        let data = self
            .data
            .as_mut()
            .expect("the data file stays open until `finish`");
        let write = |data: &mut BufWriter<DataSink>| -> std::io::Result<u32> {
            data.flush()?;
            let file = data.get_mut();
            // The write goes first: it is the critical path, and it runs at once on this
            // worker while an idle one steals the checksum.
            let (written, crc) = rayon::join(|| file.write_all(bytes), || crc::crc32c(bytes));
            written.map(|()| crc)
        };
        let crc = write(data).map_err(|err| BundleError::io(&self.data_temp, "write", err))?;
        self.offset += bytes.len() as u64;
        Ok(crc)
    }

    fn write_data(&mut self, bytes: &[u8]) -> Result<()> {
        let data = self
            .data
            .as_mut()
            .expect("the data file stays open until `finish`");
        data.write_all(bytes)
            .map_err(|err| BundleError::io(&self.data_temp, "write", err))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }
}

/// Encoded (key, `BundleEntryProto`) pairs, their bytes in one buffer. A bundle of 100,000
/// small tensors would otherwise make 200,000 small allocations a save, which one thread's
/// heap pays for twice: in their churn (with a pool of one thread, as a rank bound to one core
/// has, glibc's `malloc` and mimalloc spent several times longer allocating) and in the keys
/// the sort compares lying scattered over the heap.
#[derive(Default)]
pub(super) struct EntryTable {
    /// Each entry's key, then its encoded value.
    bytes: Vec<u8>,
    spans: Vec<EntrySpan>,
}

/// Where one entry of an [`EntryTable`] lies: its key at `start..start + key_len`, its value
/// right after it, `value_len` bytes.
#[derive(Clone, Copy)]
struct EntrySpan {
    start: usize,
    key_len: usize,
    value_len: usize,
}

impl EntryTable {
    /// A table with room for `entries` entries' spans.
    pub(super) fn with_capacity(entries: usize) -> EntryTable {
        EntryTable {
            bytes: Vec::new(),
            spans: Vec::with_capacity(entries),
        }
    }

    /// Appends `key` and `entry`, encoded.
    fn push(&mut self, key: &[u8], entry: &BundleEntryProto) {
        self.push_encoded(key, |out| {
            entry.encode(out).expect("a Vec grows as needed");
        });
    }

    /// Appends `key` and the value `encode` appends to the buffer it is given (it must only
    /// append).
    pub(super) fn push_encoded(&mut self, key: &[u8], encode: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        encode(&mut self.bytes);
        debug_assert!(
            self.bytes.len() >= start + key.len(),
            "`encode` only appends"
        );
        self.spans.push(EntrySpan {
            start,
            key_len: key.len(),
            value_len: self.bytes.len() - start - key.len(),
        });
    }

    /// The key of `span`.
    fn key(&self, span: &EntrySpan) -> &[u8] {
        &self.bytes[span.start..span.start + span.key_len]
    }

    /// Sorts the entries by key (bytewise, as the index's table orders them).
    fn sort(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        spans.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)));
        self.spans = spans;
    }

    /// A key two neighbouring entries share (after [`EntryTable::sort`]: a key added twice).
    fn first_duplicate(&self) -> Option<&[u8]> {
        (self.spans.windows(2))
            .find(|pair| self.key(&pair[0]) == self.key(&pair[1]))
            .map(|pair| self.key(&pair[0]))
    }

    /// The (key, encoded entry) pairs in their order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|span| {
            let value = span.start + span.key_len;
            (self.key(span), &self.bytes[value..value + span.value_len])
        })
    }
}

impl Drop for BundleWriter {
    fn drop(&mut self) {
        if self.data.take().is_some() {
            // The writer was not finished: its temporary data file is garbage.
            let _ = fsops::remove_file(&self.data_temp);
        }
    }
}

impl Drop for TensorStream<'_> {
    fn drop(&mut self) {
        if !self.done && self.writer.abandoned.is_none() {
            self.writer.abandoned = Some(String::from_utf8_lossy(&self.key).into_owned());
        }
    }
}

impl TensorStream<'_> {
    /// Appends the next `chunk` of the tensor's bytes.
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        if chunk.len() as u64 > self.remaining {
            return Err(
                self.size_error(self.entry.size as u64 - self.remaining + chunk.len() as u64)
            );
        }
        self.crc = crc::extend(self.crc, chunk);
        self.writer.write_data(chunk)?;
        self.remaining -= chunk.len() as u64;
        Ok(())
    }

    /// Completes the tensor; fails if fewer bytes than its size were written.
    pub fn finish(mut self) -> Result<()> {
        if self.remaining != 0 {
            return Err(self.size_error(self.entry.size as u64 - self.remaining));
        }
        self.entry.crc32c = crc::mask(self.crc);
        self.writer.entries.push(&self.key, &self.entry);
        self.done = true;
        Ok(())
    }

    fn size_error(&self, actual: u64) -> BundleError {
        BundleError::SizeMismatch {
            path: self.writer.prefix.clone(),
            key: String::from_utf8_lossy(&self.key).into_owned(),
            dtype: self.dtype,
            shape: self
                .entry
                .shape
                .as_ref()
                .map(|shape| shape.dim.iter().map(|dim| dim.size).collect())
                .unwrap_or_default(),
            expected: self.entry.size as u64,
            actual,
        }
    }
}

/// Checks that a checkpoint can be written at `prefix`: it is not empty (that would write
/// hidden `.index` and `.data-*` files in the current folder), not a URL ([`super::check_local`])
/// and not an existing directory (`out/` would put hidden files inside it), and its `.index` is
/// not a directory either.
pub fn check_write_prefix(prefix: &Path) -> Result<()> {
    if prefix.as_os_str().is_empty() {
        return Err(BundleError::EmptyPrefix);
    }
    if crate::storage::is_url(prefix) {
        return Ok(());
    }
    if prefix.is_dir() {
        return Err(BundleError::PrefixIsDirectory {
            path: prefix.to_path_buf(),
        });
    }
    let index = index_path(prefix);
    if index.is_dir() {
        let err = std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory");
        return Err(BundleError::io(&index, "replace index file", err));
    }
    Ok(())
}

/// Writes an index file at `path` (a temporary name: the file is partial if this fails, and
/// then deleted): the header entry then `entries` (sorted, encoded `BundleEntryProto`s).
pub(crate) fn write_index<'a>(
    path: &Path,
    num_shards: i32,
    entries: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    options: WriteOptions,
) -> Result<()> {
    let header = BundleHeaderProto {
        num_shards,
        endianness: 0,
        version: Some(VersionDef {
            producer: 1,
            min_consumer: 0,
            bad_consumers: Vec::new(),
        }),
    };
    let mut table = TableBuilder::new();
    table.add(b"", &header.encode_to_vec());
    for (key, value) in entries {
        table.add(key, value);
    }
    let bytes = table.finish();
    if let Err(err) = fsops::write_file(path, &bytes, options.fsync) {
        let _ = fsops::remove_file(path);
        return Err(BundleError::io(path, "write", err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry whose encoding names `shard`, to tell the values apart.
    fn entry(shard: i32) -> BundleEntryProto {
        BundleEntryProto {
            shard_id: shard,
            size: 4,
            ..BundleEntryProto::default()
        }
    }

    #[test]
    fn entry_table_sorts_keys_bytewise_and_keeps_each_value_with_its_key() {
        let mut table = EntryTable::default();
        let keys: [&[u8]; 5] = [b"b", b"ab", b"a", b"a\0", b"\xff"];
        for (shard, key) in keys.iter().enumerate() {
            table.push(key, &entry(shard as i32));
        }
        table.sort();
        let sorted: Vec<(Vec<u8>, Vec<u8>)> = table
            .iter()
            .map(|(key, value)| (key.to_vec(), value.to_vec()))
            .collect();
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = (keys.iter().enumerate())
            .map(|(shard, key)| (key.to_vec(), entry(shard as i32).encode_to_vec()))
            .collect();
        expected.sort();
        assert_eq!(sorted, expected);
        assert_eq!(table.first_duplicate(), None);
        table.push(b"ab", &entry(9));
        table.sort();
        assert_eq!(table.first_duplicate(), Some(&b"ab"[..]));
    }
}
