//! Restoring object-based checkpoints: `tf.train.Checkpoint.restore` / `.read` in eager mode
//! (FORMATS.md 13.10–13.13), the driver around the object layer's matcher
//! ([`crate::object::match_checkpoint`]).
//!
//! A restore walks once: the prefix is opened and its bundle checked once
//! ([`BundleReader::open`]); the matcher reads that reader's index (through
//! [`StoredValues`]) and its object graph, or matches by variable name when it has none (a
//! TF1 `Saver` checkpoint); every dtype and shape is checked against the index before a value
//! is read, so a failed restore changes nothing; then the matched values are read from the
//! same reader in one batch ([`restore_from`], as one `RestoreV2` of the whole tensors) and
//! assigned.
//!
//! Restore-on-create (13.12): every restore stays pending on the [`Checkpoint`];
//! [`Checkpoint::attach`] gives the objects attached later their values from the pending
//! restores, the newest first ([`NewValues`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use saveplan_ir::object_graph::ObjectGraph;

use super::SAVE_COUNTER_KEY;
use super::{Checkpoint, CheckpointError, is_object_based, read_object_graph};
use crate::bundle::{BundleError, BundleReader};
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};
use crate::export::object_graph::node_text;
use crate::object::{
    LoadStatus, Matched, NewValues, OurValue, Ours, Pair, RestoreKind, RestoreReport, StoredEntry,
    StoredValues, Theirs, failure, match_checkpoint,
};

/// The outcome of matching a checkpoint against a [`Checkpoint`]'s objects, before any value
/// is read: the report, the load status the restore will return, and the values to read from
/// the checkpoint, open.
#[derive(Clone, Debug)]
pub struct RestoreMatch {
    prefix: String,
    /// The checkpoint matched, open: its values are read from this reader, so a restore opens
    /// and checks the bundle once.
    source: Source,
    matched: Matched,
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

impl Checkpoint {
    /// `tf.train.Checkpoint.restore(save_path)`: matches the checkpoint at `prefix` against
    /// this checkpoint's objects, restores every matched value and creates `save_counter`
    /// (restored when the checkpoint has one). `None` restores nothing and returns the
    /// initialization-only status. A dtype or shape mismatch is an error naming the object,
    /// and then nothing changes (not even `save_counter`). A checkpoint without an object
    /// graph is restored by variable name (FORMATS.md 13.13).
    pub fn restore(&mut self, prefix: Option<&str>) -> Result<LoadStatus, CheckpointError> {
        let Some(prefix) = prefix else {
            return Ok(LoadStatus::initialization_only());
        };
        let matched = self.match_checkpoint(prefix, RestoreKind::Restore)?;
        self.apply(matched)
    }

    /// `tf.train.Checkpoint.read(save_path)`: [`Checkpoint::restore`] without creating
    /// `save_counter`.
    pub fn read(&mut self, prefix: &str) -> Result<LoadStatus, CheckpointError> {
        let matched = self.match_checkpoint(prefix, RestoreKind::Read)?;
        self.apply(matched)
    }

    /// Matches the checkpoint at `prefix` against this checkpoint's objects without reading a
    /// value: the report and status a restore of `kind` would give. The checkpoint is opened
    /// (and checked) here, once; [`Checkpoint::apply`] reads the values from it.
    pub fn match_checkpoint(
        &self,
        prefix: &str,
        kind: RestoreKind,
    ) -> Result<RestoreMatch, CheckpointError> {
        // An asynchronous write in flight finishes first (FORMATS.md 13.14).
        self.sync()?;
        let reader = Arc::new(open(prefix)?);
        let theirs = match is_object_based(&reader) {
            true => Some(read_object_graph(&reader)?),
            false => None,
        };
        let theirs = theirs.as_ref().map(|graph| Theirs { graph, node_text });
        let ours = Ours {
            graph: self.graph(),
            values: self.values(),
            save_counter: self.save_counter(),
        };
        let matched = match_checkpoint(&ours, theirs, &Stored(&reader), prefix, kind)?;
        Ok(RestoreMatch {
            prefix: prefix.to_owned(),
            source: Source(reader),
            matched,
        })
    }

    /// Reads and assigns the values of a match (made on this checkpoint, unchanged since):
    /// checks every dtype and shape first, then one `RestoreV2` for all of them; on any error
    /// nothing changes.
    pub fn apply(&mut self, matched: RestoreMatch) -> Result<LoadStatus, CheckpointError> {
        let RestoreMatch {
            prefix,
            source,
            matched,
        } = matched;
        if let Some(error) = failure(&matched.pairs) {
            return Err(error.into());
        }
        let restored = read_pairs(&source, &prefix, &matched.pairs)?;
        if matched.kind == RestoreKind::Restore && self.save_counter().is_none() {
            self.set_save_counter(Some(0));
        }
        self.assign_restored(restored)?;
        self.pending_restores_mut().push(prefix);
        Ok(matched.status)
    }

    /// The status `status` has now: a name-based status (TensorFlow's `NameBasedSaverStatus`
    /// checks the objects as they are when an assertion runs) is matched again against the
    /// objects of this checkpoint, attached ones included; any other status is returned as is.
    pub fn refresh_status(&self, status: &LoadStatus) -> Result<LoadStatus, CheckpointError> {
        let Some(prefix) = status.name_based_prefix() else {
            return Ok(status.clone());
        };
        let fresh = self.match_checkpoint(prefix, RestoreKind::Read)?;
        Ok(fresh.matched.status.with_partial_of(status))
    }

    /// Restore-on-create (FORMATS.md 13.12): replaces the objects by `graph`, this checkpoint's
    /// objects with more attached (`values` holds the initial value of every new attribute, by
    /// its key in `graph`). Each new value a pending restore of this checkpoint has is
    /// restored at once, the newest restore winning; a dtype or shape mismatch is an error and
    /// then nothing changes. Returns the keys restored.
    pub fn attach(
        &mut self,
        graph: ObjectGraph,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Vec<String>, CheckpointError> {
        let mut all = self.values().clone();
        let new_keys: Vec<String> = values
            .keys()
            .filter(|key| !all.contains_key(*key))
            .cloned()
            .collect();
        all.extend(values);
        let old = self.replace_objects(graph, all)?;
        match self.restore_new(new_keys) {
            Ok(done) => Ok(done),
            Err(err) => {
                let (graph, values) = old;
                self.replace_objects(graph, values)
                    .expect("the old objects were valid");
                Err(err)
            }
        }
    }

    /// Restores `new_keys` from the pending restores, newest first.
    fn restore_new(&mut self, new_keys: Vec<String>) -> Result<Vec<String>, CheckpointError> {
        let mut new_values = NewValues::new(new_keys);
        let mut reads: Vec<(Source, String, Vec<Pair>)> = Vec::new();
        for prefix in self.pending_restores().iter().rev() {
            let matched = self.match_checkpoint(prefix, RestoreKind::Read)?;
            let pairs = new_values.take(matched.matched.pairs)?;
            reads.push((matched.source, prefix.clone(), pairs));
        }
        let mut restored = BTreeMap::new();
        for (source, prefix, pairs) in reads {
            restored.extend(read_pairs(&source, &prefix, &pairs)?);
        }
        self.assign_restored(restored)?;
        Ok(new_values.into_keys())
    }

    fn assign_restored(
        &mut self,
        restored: BTreeMap<String, HostTensor>,
    ) -> Result<(), CheckpointError> {
        for (key, value) in restored {
            if key == SAVE_COUNTER_KEY && !self.values().contains_key(&key) {
                // Matched against our int64 scalar counter: a mismatch failed before.
                let counter = value.as_i64_scalar().unwrap_or(0);
                self.set_save_counter(Some(counter));
            } else {
                self.set_value(&key, value)?;
            }
        }
        Ok(())
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
