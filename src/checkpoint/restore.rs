//! The reading side of a restore by object or by name (FORMATS.md 13.10–13.13): what the
//! object layer is handed and what it hands back.
//!
//! A restore walks once ([`Checkpoint::match_checkpoint`](super::Checkpoint::match_checkpoint)):
//! the prefix is opened and its bundle checked once ([`open`], [`BundleReader::open`]); the
//! object layer's matcher ([`crate::object::match_checkpoint`]) reads that reader's index
//! through [`Stored`] (its [`StoredValues`]) and our tensors through [`OurValue`]; the
//! [`RestoreMatch`] keeps the reader, and after every dtype and shape was checked against the
//! index (so a failed restore changes nothing) the matched values are read from it in one batch
//! ([`read_pairs`]: [`restore_from`], as one `RestoreV2` of the whole tensors). A read error is
//! [`CheckpointError::ReadValues`], naming the prefix.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::CheckpointError;
use crate::bundle::{BundleError, BundleReader};
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};
use crate::object::{
    LoadStatus, Matched, OurValue, Pair, RestoreReport, StoredEntry, StoredValues,
};

/// The outcome of matching a checkpoint against a [`Checkpoint`](super::Checkpoint)'s objects, before any value
/// is read: the report, the load status the restore will return, and the values to read from
/// the checkpoint, open.
#[derive(Clone, Debug)]
pub struct RestoreMatch {
    /// The prefix matched.
    pub(super) prefix: String,
    /// The checkpoint matched, open: its values are read from this reader, so a restore opens
    /// and checks the bundle once.
    pub(super) source: Source,
    /// What the object layer matched.
    pub(super) matched: Matched,
}

/// The open checkpoint a [`RestoreMatch`] was made against.
#[derive(Clone)]
pub(super) struct Source(pub(super) Arc<BundleReader>);

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({})", self.0.prefix().display())
    }
}

impl RestoreMatch {
    /// The report of every value.
    pub fn report(&self) -> &RestoreReport {
        &self.matched.report
    }

    /// The keys (in our objects' graph) of the values the restore assigns, `save_counter`'s
    /// included when it is restored.
    pub fn restored_keys(&self) -> Vec<String> {
        (self.matched.pairs.iter())
            .map(|pair| pair.our_key.clone())
            .collect()
    }

    /// The load status the restore returns.
    pub fn status(&self) -> &LoadStatus {
        &self.matched.status
    }
}

/// Opens the checkpoint at `prefix`; a missing index is [`CheckpointError::NotFound`].
pub(super) fn open(prefix: &str) -> Result<BundleReader, CheckpointError> {
    BundleReader::open(prefix).map_err(|err| match err {
        BundleError::IndexNotFound { .. } => CheckpointError::NotFound {
            prefix: prefix.to_owned(),
        },
        other => CheckpointError::Bundle(other),
    })
}

/// Reads `pairs` from the open checkpoint `source` (at `prefix`), as one `RestoreV2` of the
/// whole tensors reads them (sliced ones assembled): our key → value.
pub(super) fn read_pairs(
    source: &Source,
    prefix: &str,
    pairs: &[Pair],
) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
    let requests: Vec<RestoreRequest<'_>> = pairs
        .iter()
        .map(|pair| RestoreRequest {
            name: &pair.checkpoint_key,
            shape_and_slice: "",
            dtype: pair.program.0,
        })
        .collect();
    let values =
        restore_from(&source.0, &requests).map_err(|source| CheckpointError::ReadValues {
            prefix: prefix.to_owned(),
            source: Box::new(source),
        })?;
    Ok(pairs
        .iter()
        .map(|pair| pair.our_key.clone())
        .zip(values)
        .collect())
}

/// An open bundle as the object layer reads it: its index.
pub(super) struct Stored<'a>(pub(super) &'a BundleReader);

impl StoredValues for Stored<'_> {
    fn entry(&self, key: &str) -> Option<StoredEntry<'_>> {
        self.0.entry(key).map(stored_entry)
    }

    fn entries_from(&self, start: &str) -> impl Iterator<Item = StoredEntry<'_>> {
        // The entries are sorted by key.
        let entries = self.0.entries();
        let at = entries.partition_point(|entry| entry.key.as_str() < start);
        entries[at..].iter().map(stored_entry)
    }
}

fn stored_entry(entry: &crate::bundle::Entry) -> StoredEntry<'_> {
    StoredEntry {
        key: &entry.key,
        dtype: entry.dtype,
        shape: &entry.shape,
    }
}

impl OurValue for HostTensor {
    fn dtype(&self) -> saveplan_ir::DType {
        HostTensor::dtype(self)
    }

    fn dims(&self) -> &[u64] {
        self.shape()
    }

    fn bytes(&self) -> Option<&[u8]> {
        HostTensor::bytes(self)
    }
}
