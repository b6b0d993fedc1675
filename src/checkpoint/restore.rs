//! The reading side of a restore by object or by name (FORMATS.md 13.10–13.13): what the
//! object layer is handed and what it hands back.
//!
//! A restore walks once ([`Checkpoint::match_checkpoint`](super::Checkpoint::match_checkpoint)):
//! the prefix is opened and its bundle checked once ([`open`], [`BundleReader::open`]); the
//! object layer's matcher ([`crate::object::match_stored`]) is handed that reader's index as
//! plain data ([`StoredIndex`]) and reads our tensors through [`OurValue`]; the
//! [`RestoreMatch`] keeps the reader, and after every dtype and shape was checked against the
//! index (so a failed restore changes nothing) the matched values are read from it in one batch
//! ([`read_pairs`]: [`restore_from`], as one `RestoreV2` of the whole tensors). A read error is
//! [`CheckpointError::ReadValues`], naming the prefix.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::{CheckpointError, is_object_based, read_object_graph};
use crate::bundle::{BundleError, BundleReader};
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};
use crate::export::object_graph::node_text;
use crate::object::matching::{NewValues, Ours, Theirs, failure, match_stored};
use crate::object::status::{LoadStatus, Matched, Pair, RestoreKind, RestoreReport};
use crate::object::values::OurValue;
use crate::object::values::{StoredEntry, StoredIndex};

/// The outcome of matching a checkpoint against a [`Checkpoint`](super::Checkpoint)'s objects, before any value
/// is read: the report, the load status the restore will return, and the values to read from
/// the checkpoint, open.
#[derive(Clone, Debug)]
pub struct RestoreMatch {
    /// The prefix matched.
    pub(super) prefix: String,
    /// The checkpoint matched, open: its values are read from this reader, so a restore opens
    /// and checks the bundle once.
    source: Source,
    /// What the object layer matched.
    pub(super) matched: Matched,
}

/// The open checkpoint a [`RestoreMatch`] was made against.
#[derive(Clone)]
struct Source(Arc<BundleReader>);

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({})", self.0.prefix().display())
    }
}

impl RestoreMatch {
    /// Opens the checkpoint at `prefix`, once, and matches it against `ours` for a restore of
    /// `kind`: by object, or by name when it has no object graph. Reads no value.
    pub(super) fn open(
        prefix: &str,
        kind: RestoreKind,
        ours: &Ours<'_, HostTensor>,
    ) -> Result<RestoreMatch, CheckpointError> {
        let reader = Arc::new(open(prefix)?);
        let stored = stored_index(&reader);
        let theirs = match is_object_based(&reader) {
            true => Some(read_object_graph(&reader)?),
            false => None,
        };
        let theirs = theirs.as_ref().map(|graph| Theirs { graph, node_text });
        let matched = match_stored(ours, theirs, &stored, prefix, kind)?;
        Ok(RestoreMatch {
            prefix: prefix.to_owned(),
            source: Source(reader),
            matched,
        })
    }

    /// The matched values, by our key, read from the checkpoint they were matched in; when one
    /// cannot be restored (its dtype or shape differs, its key is missing) that is the error
    /// and nothing is read.
    pub(super) fn read(&self) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
        self.read_where(|_| true)
    }

    /// [`RestoreMatch::read`] of the values whose key (ours) `keep` takes: every value is
    /// checked all the same, so each process of a cluster restore fails alike.
    pub(super) fn read_where(
        &self,
        keep: impl Fn(&str) -> bool,
    ) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
        if let Some(error) = failure(&self.matched.pairs) {
            return Err(error.into());
        }
        let pairs = (self.matched.pairs.iter()).filter(|pair| keep(&pair.our_key));
        read_pairs(&self.source, &self.prefix, pairs.collect())
    }

    /// This match cut to the values restore-on-create takes from it ([`NewValues::take`]).
    pub(super) fn keep_new(
        mut self,
        new_values: &mut NewValues,
    ) -> Result<RestoreMatch, CheckpointError> {
        self.matched.pairs = new_values.take(std::mem::take(&mut self.matched.pairs))?;
        Ok(self)
    }

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
fn read_pairs(
    source: &Source,
    prefix: &str,
    pairs: Vec<&Pair>,
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

/// The index of the open bundle `reader`, as the object layer reads it.
fn stored_index(reader: &BundleReader) -> StoredIndex<'_> {
    StoredIndex::new(reader.entries().iter().map(|entry| StoredEntry {
        key: &entry.key,
        dtype: entry.dtype,
        shape: &entry.shape,
    }))
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
