//! Reading tensors: whole or by slice, into the caller's buffer or an owned value, strings,
//! and the checks `saveplan verify` runs (every checksum, slices covering their tensor).

use super::super::dtype::{DType, is_element_list, num_elements};
use super::super::error::{BundleError, Result};
use super::super::slice::{
    ShapeAndSlice, TensorSlice, encode_slice_key, for_each_overlap_run, overlap_volume,
};
use super::index::bad_entry;
use super::{BundleReader, Entry, Tensor, Values};

impl BundleReader {
    /// Reads tensor `key` whole, assembling it from its slices if it was saved sliced.
    pub fn read(&self, key: &str) -> Result<Tensor> {
        let entry = self.require(key)?;
        self.read_slice(key, &TensorSlice::full(entry.shape.len()))
    }

    /// Reads a whole fixed-width tensor into `out`, which must be exactly its size. An unsliced
    /// tensor is read straight into `out` (no intermediate copy).
    pub fn read_into(&self, key: &str, out: &mut [u8]) -> Result<()> {
        let entry = self.require(key)?;
        if entry.slices.is_empty() && entry.dtype.element_size().is_some() {
            // Its one stored piece is the tensor, whose size was checked against its shape
            // when the index was read: nothing to resolve (a restore of many small tensors
            // does this for each).
            if out.len() as u64 != entry.size {
                let shape = entry.shape.clone();
                return Err(self.size_mismatch(entry, shape, entry.size, out.len()));
            }
            return self.read_piece_into(entry, out);
        }
        self.read_slice_into(key, &TensorSlice::full(entry.shape.len()), out)
    }

    /// Reads the `DT_STRING` (or `DT_VARIANT`, as opaque bytes) tensor `key` whole.
    pub fn read_strings(&self, key: &str) -> Result<Vec<Vec<u8>>> {
        match self.read(key)?.values {
            Values::Strings(strings) => Ok(strings),
            Values::Bytes(_) => Err(self.wrong_dtype(key, "string", self.require(key)?.dtype)),
        }
    }

    /// Reads what RestoreV2 returns for one `shape_and_slices` element: `""` is the whole
    /// tensor; otherwise the spec's full shape must equal the stored one and its slice is cut out
    /// of (or assembled from) the stored data.
    pub fn read_spec(&self, key: &str, spec: &str) -> Result<Tensor> {
        if spec.is_empty() {
            return self.read(key);
        }
        let entry = self.require(key)?;
        let bad_spec = |detail: String| BundleError::BadSliceSpec {
            path: self.index_path.clone(),
            key: key.to_string(),
            spec: spec.to_string(),
            detail,
        };
        let parsed = ShapeAndSlice::parse(spec).map_err(|err| bad_spec(err.to_string()))?;
        if parsed.full_shape != entry.shape {
            return Err(bad_spec(format!(
                "shape {:?} differs from the stored shape {:?}",
                parsed.full_shape, entry.shape
            )));
        }
        self.read_slice(key, &parsed.slice)
    }

    /// Reads the part `slice` of tensor `key` (relative to its full shape).
    pub fn read_slice(&self, key: &str, slice: &TensorSlice) -> Result<Tensor> {
        let entry = self.require(key)?;
        let region = self.resolve(entry, slice)?;
        let shape: Vec<i64> = region.iter().map(|&(_, length)| length).collect();
        let n_elements = num_elements(&shape).unwrap_or(0);
        self.check_available(entry, &region)?;
        let values = match entry.dtype.element_size() {
            Some(element_size) => {
                let size = self.checked_len(entry, n_elements, element_size)?;
                let mut out = vec![0u8; size];
                self.fill_bytes(entry, &region, &mut out, element_size)?;
                Values::Bytes(out)
            }
            None => Values::Strings(self.fill_strings(entry, &region, n_elements)?),
        };
        Ok(Tensor {
            dtype: entry.dtype,
            shape,
            values,
        })
    }

    /// Reads the part `slice` of fixed-width tensor `key` into `out` (exactly the slice's size).
    pub fn read_slice_into(&self, key: &str, slice: &TensorSlice, out: &mut [u8]) -> Result<()> {
        let entry = self.require(key)?;
        let Some(element_size) = entry.dtype.element_size() else {
            return Err(self.wrong_dtype(key, "a fixed-width dtype", entry.dtype));
        };
        let region = self.resolve(entry, slice)?;
        let n_elements = region
            .iter()
            .fold(1u64, |acc, &(_, length)| acc.saturating_mul(length as u64));
        let size = self.checked_len(entry, n_elements, element_size)?;
        if out.len() != size {
            let shape = region.iter().map(|&(_, length)| length).collect();
            return Err(self.size_mismatch(entry, shape, size as u64, out.len()));
        }
        self.fill_bytes(entry, &region, out, element_size)
    }

    /// `out_len` bytes given for the region of shape `shape` of tensor `entry`, which takes
    /// `expected` bytes.
    fn size_mismatch(
        &self,
        entry: &Entry,
        shape: Vec<i64>,
        expected: u64,
        out_len: usize,
    ) -> BundleError {
        BundleError::SizeMismatch {
            path: self.index_path.clone(),
            key: entry.key.clone(),
            dtype: entry.dtype,
            shape,
            expected,
            actual: out_len as u64,
        }
    }

    /// Reads every tensor and every stored slice, checking every checksum; returns the failures
    /// in key order (empty if all is well).
    pub fn verify(&self) -> Vec<BundleError> {
        self.entries
            .iter()
            .filter_map(|entry| self.verify_entry(&entry.key).err())
            .collect()
    }

    /// Reads the stored bytes of tensor `key` (every stored slice of a sliced tensor) and checks
    /// their checksums, without assembling the tensor. Whether a sliced tensor can be read
    /// whole is [`BundleReader::check_coverage`].
    pub fn verify_entry(&self, key: &str) -> Result<()> {
        let entry = self.require(key)?;
        let stored = if entry.slices.is_empty() {
            std::slice::from_ref(entry)
        } else {
            self.slice_entries(key)
        };
        for piece in stored {
            let bytes = self.read_piece(piece)?;
            self.check_piece(piece, &bytes)?;
        }
        Ok(())
    }

    /// Checks that tensor `key` can be read whole: a sliced tensor's stored slices must cover
    /// its full shape ([`BundleError::SlicesDoNotCover`]). The part bundles of a sharded save
    /// (`<prefix>_temp/part-*`) hold slices that do not, legitimately; a checkpoint does not.
    pub fn check_coverage(&self, key: &str) -> Result<()> {
        let entry = self.require(key)?;
        if entry.slices.is_empty() {
            return Ok(());
        }
        let regions = entry
            .slices
            .iter()
            .map(|slice| self.resolve(entry, slice))
            .collect::<Result<Vec<_>>>()?;
        let regions: Vec<&[(i64, i64)]> = regions.iter().map(Vec::as_slice).collect();
        let whole: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
        let covered = saveplan_ir::slice::covered_volume(&whole, &regions);
        let n_elements = entry
            .shape
            .iter()
            .map(|&dim| dim.max(0) as u64)
            .product::<u64>();
        if covered != n_elements {
            return Err(BundleError::SlicesDoNotCover {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                covered,
                n_elements,
            });
        }
        Ok(())
    }

    pub(super) fn require(&self, key: &str) -> Result<&Entry> {
        self.entry(key).ok_or_else(|| BundleError::KeyNotFound {
            path: self.index_path.clone(),
            key: key.to_string(),
        })
    }

    pub(super) fn wrong_dtype(
        &self,
        key: &str,
        expected: &'static str,
        actual: DType,
    ) -> BundleError {
        BundleError::WrongDType {
            path: self.index_path.clone(),
            key: key.to_string(),
            expected,
            actual,
        }
    }

    pub(super) fn resolve(&self, entry: &Entry, slice: &TensorSlice) -> Result<Vec<(i64, i64)>> {
        slice
            .resolve(&entry.shape)
            .map_err(|err| BundleError::BadSliceSpec {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                spec: slice.to_string(),
                detail: err.to_string(),
            })
    }

    pub(super) fn checked_len(
        &self,
        entry: &Entry,
        n_elements: u64,
        element_size: usize,
    ) -> Result<usize> {
        n_elements
            .checked_mul(element_size as u64)
            .and_then(|size| usize::try_from(size).ok())
            .ok_or_else(|| {
                bad_entry(
                    &self.index_path,
                    &entry.key,
                    "tensor too large for this machine",
                )
            })
    }

    /// Fills `out` (the region `region` of fixed-width tensor `entry`) from the stored data.
    pub(super) fn fill_bytes(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        out: &mut [u8],
        element_size: usize,
    ) -> Result<()> {
        let full: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
        if entry.slices.is_empty() && region == full.as_slice() {
            return self.read_piece_into(entry, out);
        }
        let size = element_size as u64;
        self.for_each_piece(entry, region, |piece, piece_region| {
            let bytes = self.read_piece(piece)?;
            self.check_piece(piece, &bytes)?;
            for_each_overlap_run(piece_region, region, |src, dst, run| {
                let (src, dst, len) = (
                    (src * size) as usize,
                    (dst * size) as usize,
                    (run * size) as usize,
                );
                out[dst..dst + len].copy_from_slice(&bytes[src..src + len]);
            });
            Ok(())
        })
    }

    pub(super) fn fill_strings(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        n_elements: u64,
    ) -> Result<Vec<Vec<u8>>> {
        let whole = region
            .iter()
            .zip(&entry.shape)
            .all(|(&(start, length), &dim)| start == 0 && length == dim);
        if entry.slices.is_empty() && whole {
            let bytes = self.read_piece(entry)?;
            return self.decode_piece_strings(entry, &bytes);
        }
        let mut out = vec![Vec::new(); usize::try_from(n_elements).unwrap_or(0)];
        self.for_each_piece(entry, region, |piece, piece_region| {
            let bytes = self.read_piece(piece)?;
            let strings = self.decode_piece_strings(piece, &bytes)?;
            for_each_overlap_run(piece_region, region, |src, dst, run| {
                for offset in 0..run as usize {
                    out[dst as usize + offset] = strings[src as usize + offset].clone();
                }
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `visit(piece, piece_region)` for every stored piece overlapping `region` and checks
    /// that together they cover it.
    pub(super) fn for_each_piece(
        &self,
        entry: &Entry,
        region: &[(i64, i64)],
        mut visit: impl FnMut(&Entry, &[(i64, i64)]) -> Result<()>,
    ) -> Result<()> {
        if entry.slices.is_empty() {
            let full: Vec<(i64, i64)> = entry.shape.iter().map(|&dim| (0, dim)).collect();
            return visit(entry, &full);
        }
        let mut pieces = Vec::with_capacity(entry.slices.len());
        for slice in &entry.slices {
            let piece_region = self.resolve(entry, slice)?;
            let key = encode_slice_key(&entry.key, slice);
            let stored = self.slice_entries(&entry.key).iter().find(|stored| {
                stored
                    .slice
                    .as_ref()
                    .is_some_and(|stored_slice| encode_slice_key(&entry.key, stored_slice) == key)
            });
            let Some(stored) = stored else {
                return Err(bad_entry(
                    &self.index_path,
                    &entry.key,
                    &format!("stored slice {slice} has no entry"),
                ));
            };
            pieces.push((stored, piece_region));
        }
        for (idx, (_, a)) in pieces.iter().enumerate() {
            if pieces[..idx].iter().any(|(_, b)| overlap_volume(a, b) > 0) {
                return Err(bad_entry(
                    &self.index_path,
                    &entry.key,
                    "stored slices overlap",
                ));
            }
        }
        let wanted = region
            .iter()
            .fold(1u64, |acc, &(_, length)| acc.saturating_mul(length as u64));
        let covered: u64 = pieces
            .iter()
            .map(|(_, piece_region)| overlap_volume(piece_region, region))
            .sum();
        if covered != wanted {
            return Err(BundleError::SliceNotCovered {
                path: self.index_path.clone(),
                key: entry.key.clone(),
                slice: TensorSlice::new(
                    region
                        .iter()
                        .map(|&(start, length)| super::super::slice::Extent::new(start, length))
                        .collect(),
                )
                .to_string(),
            });
        }
        for (stored, piece_region) in pieces {
            if wanted == 0 || overlap_volume(&piece_region, region) > 0 {
                visit(stored, &piece_region)?;
            }
        }
        Ok(())
    }

    /// Checks, before anything is allocated, that the stored pieces needed for `region` lie
    /// inside their data files, so a damaged index cannot make a read allocate more memory than
    /// the files hold.
    pub(super) fn check_available(&self, entry: &Entry, region: &[(i64, i64)]) -> Result<()> {
        self.for_each_piece(entry, region, |piece, _| {
            let (_, len) = self.shard(piece)?;
            self.check_in_file(piece, len)?;
            if is_element_list(piece.dtype)
                && num_elements(&piece.shape).is_none_or(|n| n > piece.size)
            {
                let detail = "fewer bytes than elements".to_string();
                return Err(BundleError::BadStrings {
                    path: self.data_file(piece),
                    key: piece.key.clone(),
                    detail,
                });
            }
            Ok(())
        })
    }
}
