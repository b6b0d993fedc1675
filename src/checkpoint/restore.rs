//! Restoring object-based checkpoints by object: `tf.train.Checkpoint.restore` / `.read` in
//! eager mode (FORMATS.md 13.10–13.11), the load status and its assertions with TensorFlow's
//! exact messages, and a [`RestoreReport`] listing every value once.
//!
//! Matching walks the checkpoint's object graph breadth-first against ours: node 0 is bound to
//! our root; for each bound node, each child edge to a node not yet bound is looked up among
//! our object's children **by local name** (an edge to an already bound node is skipped, so a
//! node shared in the checkpoint restores only the object found first); slot variables are
//! bound through their optimizer, variable and slot name. Each bound pair's attributes match by
//! attribute name, and values are read from the `checkpoint_key` the checkpoint stores, never
//! from a key recomputed from our graph. Values are read with one `RestoreV2` through the
//! eager `MultiDeviceSaver` plan ([`EagerSaver`]); dtypes and shapes are checked against the
//! bundle's index first, so a failed restore changes nothing.
//!
//! A checkpoint without an object graph (a TF1 `Saver` checkpoint) is matched by variable
//! name instead (`names.rs`, 13.13). A legacy saveable's attribute (13.15) matches all its
//! values: our value keys extending its key, read from the checkpoint's key plus the same
//! suffixes.
//!
//! Restore-on-create (13.12): every restore stays pending on the [`Checkpoint`];
//! [`Checkpoint::attach`] gives the objects attached later their values from the pending
//! restores, the newest first.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use saveplan_ir::DType;
use saveplan_ir::object_graph::{Attribute, GraphIndex, NodeId, ObjectGraph};

use super::build::value_keys;
use super::save::{SAVE_COUNTER_KEY, counter_tensor, shape_of, with_save_counter};
use super::status::{
    Checks, LoadStatus, Pair, ReportCounts, ReportValue, RestoreKind, RestoreMatch, RestoreReport,
    Source, ValueStatus, node_names, node_repr, python_list, python_shape, segment_paths,
    tensor_type,
};
use super::{Checkpoint, CheckpointError, is_object_based, read_object_graph};
use crate::bundle::{BundleError, BundleReader};
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};
use crate::export::object_graph::node_text;

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
    /// value: the report and status a restore of `kind` would give.
    pub fn match_checkpoint(
        &self,
        prefix: &str,
        kind: RestoreKind,
    ) -> Result<RestoreMatch, CheckpointError> {
        // An asynchronous write in flight finishes first (FORMATS.md 13.14).
        self.sync()?;
        let reader = BundleReader::open(prefix).map_err(|err| match err {
            BundleError::IndexNotFound { .. } => CheckpointError::NotFound {
                prefix: prefix.to_owned(),
            },
            other => CheckpointError::Bundle(other),
        })?;
        let reader = std::sync::Arc::new(reader);
        if !is_object_based(&reader) {
            return Ok(super::names::match_names(self, &reader, prefix, kind));
        }
        let theirs = read_object_graph(&reader)?;
        let counter = match (kind, self.save_counter()) {
            (_, Some(value)) => Some(value),
            (RestoreKind::Restore, None) => Some(0),
            (RestoreKind::Read, None) => None,
        };
        let ours = match counter {
            Some(_) => with_save_counter(self.graph()),
            None => self.graph().clone(),
        };
        let counter_value = counter_tensor(counter.unwrap_or(0));
        let value_of = |key: &str| -> HostTensor {
            self.values()
                .get(key)
                .cloned()
                .unwrap_or_else(|| counter_value.clone())
        };
        let owned = value_keys(&ours, self.values())?;
        // Our values missing from the checkpoint: one per value key of the attribute.
        let missing_values = |path: &[String], attribute: &Attribute| -> Vec<ReportValue> {
            let key = attribute.checkpoint_key.as_str();
            let keys = owned.get(key).filter(|keys| !keys.is_empty());
            keys.map_or_else(|| vec![key], Clone::clone)
                .into_iter()
                .map(|value_key| {
                    let value = value_of(value_key);
                    ReportValue {
                        path: path.to_vec(),
                        attribute: attribute.name.clone(),
                        status: ValueStatus::Missing,
                        checkpoint_key: None,
                        program: Some(tensor_type((value.dtype(), shape_of(&value)))),
                        checkpoint: None,
                    }
                })
                .collect()
        };
        let bound = bind(&theirs, &ours);
        let mut ours_bound = vec![None; ours.nodes().len()];
        for (their, our) in bound.iter().enumerate() {
            if let Some(our) = our {
                ours_bound[our.index()] = Some(NodeId(their as u32));
            }
        }
        let their_names = node_names(&theirs);
        let our_names = node_names(&ours);
        let their_paths = segment_paths(&theirs);
        let our_paths = segment_paths(&ours);
        let stored = |key: &str| {
            reader
                .entry(key)
                .map(|entry| (entry.dtype, entry.shape.clone()))
        };
        let repr = |node: NodeId| node_repr(ours.node(node), &our_names[node.index()], &value_of);

        let mut pairs = Vec::new();
        let mut values = Vec::new();
        let mut unused_attributes: Vec<(usize, Vec<String>)> = Vec::new();
        let mut warnings = Vec::new();
        for (index, node) in theirs.nodes().iter().enumerate() {
            let Some(our_id) = bound[index] else {
                for attribute in &node.attributes {
                    values.extend(unused_values(
                        &reader,
                        &their_paths[index],
                        &attribute.name,
                        &attribute.checkpoint_key,
                    ));
                }
                if !node.attributes.is_empty() {
                    warnings.push(format!(
                        "Value in checkpoint could not be found in the restored object: {}",
                        their_names[index]
                    ));
                }
                continue;
            };
            let our = ours.node(our_id);
            let mut unused = Vec::new();
            for attribute in &node.attributes {
                match our.attributes.iter().find(|a| a.name == attribute.name) {
                    Some(our_attribute) => {
                        // A legacy saveable's values are its key plus suffixes, in both.
                        let our_key = our_attribute.checkpoint_key.as_str();
                        let our_keys = owned.get(our_key).filter(|keys| !keys.is_empty());
                        for value_key in our_keys.map_or_else(|| vec![our_key], Clone::clone) {
                            let suffix = &value_key[our_key.len()..];
                            let their_key = format!("{}{suffix}", attribute.checkpoint_key);
                            let found = stored(&their_key);
                            let value = value_of(value_key);
                            let program = (value.dtype(), shape_of(&value));
                            let status = match &found {
                                Some(found) if *found == program => ValueStatus::Matched,
                                _ => ValueStatus::Mismatched,
                            };
                            values.push(ReportValue {
                                path: our_paths[our_id.index()].clone(),
                                attribute: attribute.name.clone(),
                                status,
                                checkpoint_key: Some(their_key.clone()),
                                program: Some(tensor_type(program)),
                                checkpoint: found.clone().map(tensor_type),
                            });
                            pairs.push(Pair {
                                checkpoint_key: their_key,
                                our_key: value_key.to_owned(),
                                name: our_names[our_id.index()].clone(),
                                value,
                                stored: found,
                                by_name: false,
                            });
                        }
                    }
                    None => {
                        unused.push(attribute.name.clone());
                        values.extend(unused_values(
                            &reader,
                            &their_paths[index],
                            &attribute.name,
                            &attribute.checkpoint_key,
                        ));
                    }
                }
            }
            if !unused.is_empty() {
                unused_attributes.push((index, unused));
            }
            let mut missing: Vec<&str> = Vec::new();
            for attribute in &our.attributes {
                if node.attributes.iter().any(|t| t.name == attribute.name) {
                    continue;
                }
                missing.push(&attribute.name);
                values.extend(missing_values(&our_paths[our_id.index()], attribute));
            }
            if !missing.is_empty() {
                warnings.push(format!(
                    "An attribute in the restored object could not be found in the checkpoint. Object: {}, attribute: {}",
                    their_names[index],
                    python_list(&missing)
                ));
            }
        }
        let mut unbound_reprs = Vec::new();
        for (index, node) in ours.nodes().iter().enumerate() {
            if ours_bound[index].is_some() || node.attributes.is_empty() {
                continue;
            }
            unbound_reprs.push(repr(NodeId(index as u32)));
            for attribute in &node.attributes {
                values.extend(missing_values(&our_paths[index], attribute));
            }
        }
        unbound_reprs.sort();
        values.sort_by(|a, b| (&a.path, &a.attribute).cmp(&(&b.path, &b.attribute)));
        let mut counts = ReportCounts::default();
        values.iter().for_each(|value| counts.add(value.status));

        let existing = (!unbound_reprs.is_empty()).then(|| {
            let shown = unbound_reprs.len().min(10);
            format!(
                "Found {} Python objects that were not bound to checkpointed values, likely due to changes in the Python program. Showing {shown} of {} unmatched objects: [{}]",
                unbound_reprs.len(),
                unbound_reprs.len(),
                unbound_reprs[..shown].join(", ")
            )
        });
        let unresolved = theirs.nodes().iter().enumerate().find_map(|(index, node)| {
            (!node.attributes.is_empty() && bound[index].is_none()).then(|| {
                format!(
                    "Unresolved object in checkpoint {}: {}",
                    their_names[index],
                    node_text(node)
                )
            })
        });
        let unused_message = (!unused_attributes.is_empty()).then(|| {
            let lines: Vec<String> = unused_attributes
                .iter()
                .map(|(index, names)| {
                    let our = bound[*index].expect("unused attributes are of bound nodes");
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!(
                        "{} ({}): {}",
                        their_names[*index],
                        repr(our),
                        python_list(&names)
                    )
                })
                .collect();
            format!(
                "Unused attributes in these objects (the attributes exist in the checkpoint but were not restored):\n{}",
                lines.join("\n")
            )
        });
        let n_bound = bound.iter().filter(|b| b.is_some()).count();
        let nontrivial = (n_bound <= 1).then(|| {
            if unbound_reprs.is_empty() {
                "Nothing to load.\n\nNo dependencies have been added to <tf.train.Checkpoint> yet."
                    .to_owned()
            } else {
                format!(
                    "Nothing except the root object matched a checkpointed value. Typically this means that the checkpoint does not match the Python program. The following objects have no matching checkpointed value: [{}]",
                    unbound_reprs.join(", ")
                )
            }
        });
        if !warnings.is_empty() {
            warnings.insert(0, "Detecting that an object or model or tf.train.Checkpoint is being deleted with unrestored values. See the following logs for the specific values in question. To silence these warnings, use `status.expect_partial()`. See https://www.tensorflow.org/api_docs/python/tf/train/Checkpoint#restorefor details about the status object returned by the restore function.".to_owned());
        }
        let checks = Checks {
            consumed: existing.clone().or(unresolved).or(unused_message),
            existing,
            nontrivial,
        };
        Ok(RestoreMatch {
            prefix: prefix.to_owned(),
            source: Source(std::sync::Arc::clone(&reader)),
            kind,
            pairs,
            report: RestoreReport {
                prefix: prefix.to_owned(),
                name_based: false,
                counts,
                values,
            },
            status: LoadStatus {
                checks: Some(checks),
                warnings,
                partial: false,
                name_based: None,
            },
        })
    }

    /// Reads and assigns the values of a match (made on this checkpoint, unchanged since):
    /// checks every dtype and shape first, then one `RestoreV2` for all of them; on any error
    /// nothing changes.
    pub fn apply(&mut self, matched: RestoreMatch) -> Result<LoadStatus, CheckpointError> {
        if let Some(error) = failure(&matched.pairs) {
            return Err(error);
        }
        let restored = read_pairs(&matched.source, &matched.prefix, &matched.pairs)?;
        if matched.kind == RestoreKind::Restore && self.save_counter().is_none() {
            self.set_save_counter(Some(0));
        }
        self.assign_restored(restored)?;
        self.pending_restores_mut().push(matched.prefix.clone());
        Ok(matched.status)
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
        match self.restore_new(&new_keys) {
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
    fn restore_new(&mut self, new_keys: &[String]) -> Result<Vec<String>, CheckpointError> {
        // Sets: every matched pair is looked up in both.
        let new_keys: BTreeSet<&str> = new_keys.iter().map(String::as_str).collect();
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut reads: Vec<(Source, String, Vec<Pair>)> = Vec::new();
        for prefix in self.pending_restores().iter().rev() {
            let matched = self.match_checkpoint(prefix, RestoreKind::Read)?;
            let pairs: Vec<Pair> = matched
                .pairs
                .into_iter()
                .filter(|pair| {
                    new_keys.contains(pair.our_key.as_str()) && !done.contains(&pair.our_key)
                })
                .collect();
            if let Some(error) = failure(&pairs) {
                return Err(error);
            }
            done.extend(pairs.iter().map(|pair| pair.our_key.clone()));
            reads.push((matched.source, prefix.clone(), pairs));
        }
        let mut restored = BTreeMap::new();
        for (source, prefix, pairs) in reads {
            restored.extend(read_pairs(&source, &prefix, &pairs)?);
        }
        self.assign_restored(restored)?;
        Ok(done.into_iter().collect())
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

/// The report values of a checkpoint attribute nobody takes: its key, or, for a legacy
/// saveable whose key is only a prefix (FORMATS.md 13.4), each bundle key extending it.
fn unused_values(
    reader: &BundleReader,
    path: &[String],
    attribute: &str,
    key: &str,
) -> Vec<ReportValue> {
    let entries: Vec<_> = match reader.entry(key) {
        Some(entry) => vec![entry],
        None => {
            // The entries are sorted by key: those extending `key` follow its place.
            let entries = reader.entries();
            let start = entries.partition_point(|entry| entry.key.as_str() < key);
            entries[start..]
                .iter()
                .take_while(|entry| entry.key.starts_with(key))
                .filter(|entry| !entry.key[key.len()..].contains('/'))
                .collect()
        }
    };
    let value = |key: &str, checkpoint| ReportValue {
        path: path.to_vec(),
        attribute: attribute.to_owned(),
        status: ValueStatus::Unused,
        checkpoint_key: Some(key.to_owned()),
        program: None,
        checkpoint,
    };
    if entries.is_empty() {
        return vec![value(key, None)];
    }
    entries
        .into_iter()
        .map(|entry| {
            value(
                &entry.key,
                Some(tensor_type((entry.dtype, entry.shape.clone()))),
            )
        })
        .collect()
}

/// The first problem that makes restoring `pairs` fail, as TensorFlow orders them: a dtype
/// mismatch or missing key (the batched `RestoreV2` fails), then a shape mismatch (at
/// assignment).
fn failure(pairs: &[Pair]) -> Option<CheckpointError> {
    let dtype = pairs.iter().find_map(|pair| match &pair.stored {
        None => Some(CheckpointError::RestoreKeyMissing {
            path: pair.name.clone(),
            key: pair.checkpoint_key.clone(),
        }),
        Some((dtype, _)) if *dtype != pair.value.dtype() && pair.by_name => {
            Some(CheckpointError::AssignDType {
                path: pair.name.clone(),
                expected: cc_dtype_name(pair.value.dtype()),
                found: cc_dtype_name(*dtype),
            })
        }
        Some((dtype, _)) if *dtype != pair.value.dtype() => Some(CheckpointError::RestoreDType {
            path: pair.name.clone(),
            key: pair.checkpoint_key.clone(),
            expected: pair.value.dtype(),
            found: *dtype,
        }),
        _ => None,
    });
    dtype.or_else(|| {
        pairs.iter().find_map(|pair| {
            let (_, shape) = pair.stored.as_ref()?;
            (shape != &shape_of(&pair.value)).then(|| CheckpointError::RestoreShape {
                path: pair.name.clone(),
                expected: python_shape(&shape_of(&pair.value)),
                found: python_shape(shape),
            })
        })
    })
}

/// A dtype as TensorFlow's C++ messages name it (`DataTypeString`: `float`, `double`).
fn cc_dtype_name(dtype: DType) -> String {
    dtype.proto_name().map_or_else(
        || dtype.to_string(),
        |name| name.trim_start_matches("DT_").to_ascii_lowercase(),
    )
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
            dtype: pair.value.dtype(),
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

/// Binds checkpoint nodes to our nodes (13.10): breadth-first by local name, then slot
/// variables through bound optimizers and variables, until nothing more binds. Our children
/// and slots are looked up in an index, and each round of slots considers only the slot
/// references of nodes bound since the last, in their order in the graph: linear in the
/// graphs.
fn bind(theirs: &ObjectGraph, ours: &ObjectGraph) -> Vec<Option<NodeId>> {
    let lookup = GraphIndex::new(ours);
    // Their slot references by the nodes they depend on: (optimizer, index in its list).
    let mut depending: Vec<Vec<(usize, usize)>> = vec![Vec::new(); theirs.nodes().len()];
    for (optimizer, node) in theirs.nodes().iter().enumerate() {
        for (index, slot) in node.slot_variables.iter().enumerate() {
            depending[optimizer].push((optimizer, index));
            depending[slot.original_variable_node_id.index()].push((optimizer, index));
        }
    }
    let mut binding = Binding {
        bound: vec![None; theirs.nodes().len()],
        taken: vec![false; ours.nodes().len()],
        queue: VecDeque::new(),
        fresh: Vec::new(),
    };
    binding.bind(NodeId::ROOT, Some(NodeId::ROOT));
    loop {
        while let Some(their) = binding.queue.pop_front() {
            let our = binding.bound[their.index()].expect("queued nodes are bound");
            for edge in &theirs.node(their).children {
                binding.bind(edge.node_id, lookup.child(our, &edge.local_name));
            }
        }
        let mut pending: Vec<(usize, usize)> = (binding.fresh.drain(..))
            .flat_map(|node| depending[node.index()].iter().copied())
            .collect();
        pending.sort_unstable();
        pending.dedup();
        for (their_optimizer, index) in pending {
            let slot = &theirs.nodes()[their_optimizer].slot_variables[index];
            let (Some(our_optimizer), Some(our_variable)) = (
                binding.bound[their_optimizer],
                binding.bound[slot.original_variable_node_id.index()],
            ) else {
                continue;
            };
            let our_slot = lookup.slot(our_optimizer, our_variable, &slot.slot_name);
            binding.bind(slot.slot_variable_node_id, our_slot);
        }
        if binding.queue.is_empty() {
            return binding.bound;
        }
    }
}

/// The state of [`bind`]: each checkpoint node's node of ours, ours taken, the nodes whose
/// children are still to bind, and the nodes bound since the last round of slots.
struct Binding {
    bound: Vec<Option<NodeId>>,
    taken: Vec<bool>,
    queue: VecDeque<NodeId>,
    fresh: Vec<NodeId>,
}

impl Binding {
    /// Binds `their` to `our`, unless there is no `our` or either is bound already.
    fn bind(&mut self, their: NodeId, our: Option<NodeId>) {
        let Some(our) = our else { return };
        if self.bound[their.index()].is_some() || self.taken[our.index()] {
            return;
        }
        self.bound[their.index()] = Some(our);
        self.taken[our.index()] = true;
        self.queue.push_back(their);
        self.fresh.push(their);
    }
}
