//! [`Checkpoint`], `tf.train.Checkpoint` in eager mode: the objects and their values, and
//! the methods of the type: making one (of a graph and values, [`Checkpoint::new`], or of a
//! framework's [`Saveable`] objects, [`Checkpoint::of`]), its options and state, restoring and
//! reading by object or by name ([`Checkpoint::restore`], [`Checkpoint::match_checkpoint`],
//! [`Checkpoint::apply`]), restore-on-create ([`Checkpoint::attach`]) and handing the values
//! back ([`Checkpoint::assign_to`]).
//!
//! Matching, statuses and restore-on-create's bookkeeping are the object layer's
//! ([`crate::object`]); reading the matched values from the reader they were matched against
//! is `restore.rs`'s. The type's other methods live beside it, one file per job: `write.rs`
//! (`write`, `save`, `write_traced`: the save plan run through the plan runner, the state
//! file), `cluster.rs` (a write or restore as one process per task of a cluster,
//! [`Checkpoint::write_in`], [`Checkpoint::apply_in`]) and `graph_mode.rs` (the TF1
//! graph-mode form, [`Checkpoint::graph_mode`]); how a write's files are made is the
//! checkpoint layer's `writer.rs`.

use std::collections::BTreeMap;

use saveplan_ir::object_graph::ObjectGraph;

mod cluster;
mod graph_mode;
mod write;

pub use graph_mode::{GraphModeFailure, GraphModeSession, GraphModeWrite};
pub use write::WriteFailure;
pub(in crate::checkpoint) use write::write_state;

use crate::bundle::WriteOptions;
use crate::checkpoint::framework::{RestoreNode, Saveable, graph_and_values};
use crate::checkpoint::restore::RestoreMatch;
use crate::checkpoint::writer::Pending;
use crate::checkpoint::{CheckpointError, SAVE_COUNTER, SAVE_COUNTER_KEY};
use crate::exec::HostTensor;
use crate::object::ObjectError;
use crate::object::build::value_keys;
use crate::object::counter::{check_save_counter_fits, with_save_counter};
use crate::object::matching::{NewValues, Ours};
use crate::object::status::{LoadStatus, RestoreKind};
use crate::trace::TraceOptions;

/// A `tf.train.Checkpoint` in eager mode: an object graph (as [`crate::object::build_object_graph`]
/// builds it, without `save_counter`) and the value of every attribute, by checkpoint key.
///
/// [`Checkpoint::write`] writes exactly what TensorFlow's `write(prefix)` writes for the same
/// tree and values; [`Checkpoint::save`] also counts (`save_counter`, a child of the root once
/// it exists, written by every later write) and rewrites the directory's `checkpoint` file.
#[derive(Debug)]
pub struct Checkpoint {
    /// The objects, without `save_counter`.
    pub(super) graph: ObjectGraph,
    /// The value of every attribute, by checkpoint key (checked by [`Checkpoint::new`]).
    pub(super) values: BTreeMap<String, HostTensor>,
    /// The value keys of each attribute whose values are not the one under its own key (a
    /// legacy saveable's, FORMATS.md 13.15), by attribute key, in key order (found by
    /// [`Checkpoint::new`]).
    pub(super) legacy_keys: BTreeMap<String, Vec<String>>,
    /// Devices by checkpoint key ([`Checkpoint::with_device`]).
    pub(super) devices: BTreeMap<String, String>,
    /// `save_counter`'s value, once it exists.
    pub(super) save_counter: Option<i64>,
    /// How files are written ([`Checkpoint::with_write_options`]).
    pub(super) write_options: WriteOptions,
    /// How writes are traced ([`Checkpoint::with_options`]).
    pub(super) options: TraceOptions,
    /// The prefixes restored so far, oldest first (restore-on-create).
    pub(super) pending: Vec<String>,
    /// Whether writes are asynchronous ([`Checkpoint::with_async`]).
    pub(super) async_writes: bool,
    /// The asynchronous write in flight, if any.
    pub(super) in_flight: Pending,
}

impl Checkpoint {
    /// A checkpoint of `graph` with `values` (checkpoint key → tensor): every attribute of the
    /// graph needs a value, and every value an attribute: its key is the attribute's key, or,
    /// for a legacy saveable (FORMATS.md 13.15), extends it (`table/.ATTRIBUTES/table` →
    /// `…/table-keys`, `…/table-values`, written in key order).
    pub fn new(
        graph: ObjectGraph,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Checkpoint, CheckpointError> {
        if graph.nodes().first().is_some_and(|root| {
            root.children
                .iter()
                .any(|child| child.local_name == SAVE_COUNTER)
        }) {
            return Err(CheckpointError::SaveCounterTaken);
        }
        // The graph a save writes, with `save_counter`, must be within the caps too: checked
        // on another core while the values are matched to the attributes.
        let (fits, owned) = rayon::join(
            || check_save_counter_fits(&graph),
            || value_keys(&graph, &values),
        );
        fits.map_err(ObjectError::from)?;
        let owned = owned?;
        if let Some((key, _)) = owned.iter().find(|(_, keys)| keys.is_empty()) {
            return Err(CheckpointError::MissingValue {
                key: (*key).to_owned(),
            });
        }
        // The keys of values and attributes never change after this (`set_value` replaces a
        // value under its key), so a write reads whose values an attribute has from here.
        let legacy_keys = (owned.into_iter())
            .filter(|(key, keys)| keys.as_slice() != [*key])
            .map(|(key, keys)| {
                let keys = keys.into_iter().map(str::to_owned).collect();
                (key.to_owned(), keys)
            })
            .collect();
        Ok(Checkpoint {
            graph,
            values,
            legacy_keys,
            devices: BTreeMap::new(),
            save_counter: None,
            write_options: WriteOptions::default(),
            options: TraceOptions::default(),
            pending: Vec::new(),
            async_writes: false,
            in_flight: Pending::default(),
        })
    }

    /// Places the variable saved under `key` on `device` (a TensorFlow device string; by
    /// default the local CPU). Variables on other tasks make more shards.
    pub fn with_device(mut self, key: impl Into<String>, device: impl Into<String>) -> Checkpoint {
        self.devices.insert(key.into(), device.into());
        self
    }

    /// The same checkpoint writing files with `options` (fsync or not).
    pub fn with_write_options(mut self, options: WriteOptions) -> Checkpoint {
        self.write_options = options;
        self
    }

    /// The same checkpoint written with `options` (TensorFlow's `CheckpointOptions`: io device,
    /// sharding policy).
    pub fn with_options(mut self, options: TraceOptions) -> Checkpoint {
        self.options = options;
        self
    }

    /// The same checkpoint writing asynchronously or not (`CheckpointOptions(enable_async=…)`,
    /// FORMATS.md 13.14). Enabling it creates `save_counter` (at 0) if it does not exist yet,
    /// as TensorFlow does, so an asynchronous [`Checkpoint::write`] stores it.
    ///
    /// An asynchronous `write`/`save` returns once the values are captured: the plan runs at
    /// once and keeps each tensor it saves (shared, not copied: changing a value afterwards
    /// replaces it and does not change the write), and a background thread writes the files
    /// (and, for `save`, the `checkpoint` file). One write is in flight at a time: the next
    /// `write`/`save`, [`Checkpoint::restore`], [`Checkpoint::read`] and [`Checkpoint::sync`]
    /// wait for it, and the first of them returns its error. A failed write leaves no file at
    /// its prefix. Dropping the checkpoint waits for the write in flight.
    pub fn with_async(mut self, enable: bool) -> Checkpoint {
        self.async_writes = enable;
        if enable && self.save_counter.is_none() {
            self.save_counter = Some(0);
        }
        self
    }

    /// The options writes are traced with ([`Checkpoint::with_options`]).
    pub fn trace_options(&self) -> &TraceOptions {
        &self.options
    }

    /// Whether writes are asynchronous ([`Checkpoint::with_async`]).
    pub fn is_async(&self) -> bool {
        self.async_writes
    }

    /// `tf.train.Checkpoint.sync()`: waits for the asynchronous write in flight, if any, and
    /// returns its error. Synchronous checkpoints have none in flight.
    pub fn sync(&self) -> Result<(), CheckpointError> {
        self.in_flight.wait()
    }

    /// The value of `save_counter`; `None` until the first [`Checkpoint::save`] or
    /// [`Checkpoint::set_save_counter`].
    pub fn save_counter(&self) -> Option<i64> {
        self.save_counter
    }

    /// Creates `save_counter` with `value` (as a restore does), or removes it with `None`.
    pub fn set_save_counter(&mut self, value: Option<i64>) {
        self.save_counter = value;
    }

    /// The object graph of the objects (without `save_counter`).
    pub fn graph(&self) -> &ObjectGraph {
        &self.graph
    }

    /// The prefixes of the restores so far, oldest first: restore-on-create takes new values
    /// from them, the newest first ([`Checkpoint::attach`]).
    pub fn pending_restores(&self) -> &[String] {
        &self.pending
    }

    pub(super) fn pending_restores_mut(&mut self) -> &mut Vec<String> {
        &mut self.pending
    }

    /// Replaces the objects and values (checked as [`Checkpoint::new`] checks them), keeping
    /// the counter, devices, options and pending restores; returns the old ones.
    pub(super) fn replace_objects(
        &mut self,
        graph: ObjectGraph,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<(ObjectGraph, BTreeMap<String, HostTensor>), CheckpointError> {
        let checked = Checkpoint::new(graph, values)?;
        self.legacy_keys = checked.legacy_keys;
        Ok((
            std::mem::replace(&mut self.graph, checked.graph),
            std::mem::replace(&mut self.values, checked.values),
        ))
    }

    /// The values, by checkpoint key (without `save_counter`).
    pub fn values(&self) -> &BTreeMap<String, HostTensor> {
        &self.values
    }

    /// Replaces the value saved under `key` (same rules as [`Checkpoint::new`]).
    pub fn set_value(&mut self, key: &str, value: HostTensor) -> Result<(), CheckpointError> {
        match self.values.get_mut(key) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(ObjectError::UnknownValue {
                key: key.to_owned(),
            }
            .into()),
        }
    }

    /// The object graph a write stores: the graph given, with `save_counter` (a child of the
    /// root, after its other children) once it exists.
    pub fn object_graph(&self) -> ObjectGraph {
        match self.save_counter {
            None => self.graph.clone(),
            Some(_) => with_save_counter(&self.graph),
        }
    }

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
        let ours = Ours {
            graph: self.graph(),
            values: self.values(),
            save_counter: self.save_counter(),
        };
        RestoreMatch::open(prefix, kind, &ours)
    }

    /// Reads and assigns the values of a match (made on this checkpoint, unchanged since):
    /// checks every dtype and shape first, then one `RestoreV2` for all of them; on any error
    /// nothing changes.
    pub fn apply(&mut self, matched: RestoreMatch) -> Result<LoadStatus, CheckpointError> {
        let restored = matched.read()?;
        self.assign_match(matched, restored)
    }

    /// Assigns `restored`, the values read of `matched`, creating `save_counter` for a
    /// restore, and returns the match's status.
    fn assign_match(
        &mut self,
        matched: RestoreMatch,
        restored: BTreeMap<String, HostTensor>,
    ) -> Result<LoadStatus, CheckpointError> {
        if matched.matched.kind == RestoreKind::Restore && self.save_counter().is_none() {
            self.set_save_counter(Some(0));
        }
        self.assign_restored(restored)?;
        self.pending_restores_mut().push(matched.prefix);
        Ok(matched.matched.status)
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
        let mut reads = Vec::new();
        for prefix in self.pending_restores().iter().rev() {
            let matched = self.match_checkpoint(prefix, RestoreKind::Read)?;
            reads.push(matched.keep_new(&mut new_values)?);
        }
        let mut restored = BTreeMap::new();
        for matched in reads {
            restored.extend(matched.read()?);
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

    /// `tf.train.Checkpoint(**children)` of `root`'s children, with the values of every object
    /// reachable from it ([`Checkpoint::new`] of their graph and values).
    pub fn of(root: &dyn Saveable) -> Result<Checkpoint, CheckpointError> {
        let (graph, values) = graph_and_values(root)?;
        Checkpoint::new(graph, values)
    }

    /// Takes `root`'s current objects and values (after training steps, say), keeping the
    /// counter, devices, options and pending restores: what a [`crate::checkpoint::CheckpointManager`]
    /// saves next.
    pub fn update(&mut self, root: &dyn Saveable) -> Result<(), CheckpointError> {
        let (graph, values) = graph_and_values(root)?;
        self.replace_objects(graph, values).map(drop)
    }

    /// Gives every object reachable from `root` its values in this checkpoint (after a
    /// [`Checkpoint::read`] or [`Checkpoint::restore`], the restored ones) through
    /// [`Saveable::restore`].
    pub fn assign_to(&self, root: &mut dyn Saveable) -> Result<(), CheckpointError> {
        root.restore(&mut RestoreNode::root(self.graph(), self.values()))
    }
}
