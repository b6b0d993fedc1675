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

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use saveplan_ir::DType;
use saveplan_ir::object_graph::{Attribute, NodeId, ObjectGraph, ObjectNode, VARIABLE_VALUE};
use serde::Serialize;

use super::build::value_keys;
use super::save::{EagerVariables, SAVE_COUNTER, counter_tensor, shape_of, with_save_counter};
use super::{Checkpoint, CheckpointError, is_object_based, read_object_graph};
use crate::bundle::{BundleError, BundleReader};
use crate::exec::{BundleIo, HostTensor, RunContext, TensorData};
use crate::export::object_graph::node_text;
use crate::session::EagerSaver;
use crate::trace::TraceOptions;

/// `restore()` (creates `save_counter`, which is then restored or left unbound) or `read()`
/// (does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreKind {
    /// `Checkpoint.restore(path)`.
    Restore,
    /// `Checkpoint.read(path)`.
    Read,
}

/// One of the load status's assertions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Assertion {
    /// `assert_consumed()`.
    Consumed,
    /// `assert_existing_objects_matched()`.
    ExistingObjectsMatched,
    /// `assert_nontrivial_match()`.
    NontrivialMatch,
}

impl Assertion {
    /// TensorFlow's method name (`assert_consumed`).
    pub fn method(self) -> &'static str {
        match self {
            Assertion::Consumed => "assert_consumed",
            Assertion::ExistingObjectsMatched => "assert_existing_objects_matched",
            Assertion::NontrivialMatch => "assert_nontrivial_match",
        }
    }
}

/// A failed assertion; its text is TensorFlow's `AssertionError` message, byte for byte
/// (multi-line where TensorFlow's is).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AssertionError {
    /// Which assertion failed.
    pub assertion: Assertion,
    /// TensorFlow's message.
    pub message: String,
}

/// What `restore()`/`read()` return: TensorFlow's `CheckpointLoadStatus`, its
/// `NameBasedSaverStatus` for a checkpoint without an object graph
/// ([`LoadStatus::is_name_based`]), or for `restore(None)` its `InitializationOnlyStatus`.
#[derive(Clone, Debug)]
pub struct LoadStatus {
    pub(super) checks: Option<Checks>,
    pub(super) warnings: Vec<String>,
    pub(super) partial: bool,
    /// For a name-based status (TensorFlow's `NameBasedSaverStatus`): the prefix restored.
    pub(super) name_based: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Checks {
    pub(super) consumed: Option<String>,
    pub(super) existing: Option<String>,
    pub(super) nontrivial: Option<String>,
}

const NO_CHECKPOINT: &str = "No checkpoint specified (save_path=None); nothing is being restored.";

impl LoadStatus {
    fn initialization_only() -> LoadStatus {
        LoadStatus {
            checks: None,
            warnings: Vec::new(),
            partial: false,
            name_based: None,
        }
    }

    /// Whether this is a name-based status (TensorFlow's `NameBasedSaverStatus`): the
    /// checkpoint had no object graph and values were matched by variable name (FORMATS.md
    /// 13.13). [`Checkpoint::refresh_status`] re-checks it against objects attached since.
    pub fn is_name_based(&self) -> bool {
        self.name_based.is_some()
    }

    /// Whether this is `restore(None)`'s `InitializationOnlyStatus`.
    pub fn is_initialization_only(&self) -> bool {
        self.checks.is_none()
    }

    /// Runs one assertion.
    pub fn check(&self, assertion: Assertion) -> Result<(), AssertionError> {
        let failure = match &self.checks {
            None => Some(NO_CHECKPOINT),
            Some(checks) => match assertion {
                Assertion::Consumed => checks.consumed.as_deref(),
                Assertion::ExistingObjectsMatched => checks.existing.as_deref(),
                Assertion::NontrivialMatch => checks.nontrivial.as_deref(),
            },
        };
        match failure {
            None => Ok(()),
            Some(message) => Err(AssertionError {
                assertion,
                message: message.to_owned(),
            }),
        }
    }

    /// `assert_consumed()`: every object matched, every checkpoint value used.
    pub fn assert_consumed(&self) -> Result<&LoadStatus, AssertionError> {
        self.check(Assertion::Consumed).map(|()| self)
    }

    /// `assert_existing_objects_matched()`: every object with values matched (extra checkpoint
    /// values are fine).
    pub fn assert_existing_objects_matched(&self) -> Result<&LoadStatus, AssertionError> {
        self.check(Assertion::ExistingObjectsMatched).map(|()| self)
    }

    /// `assert_nontrivial_match()`: something besides the root matched.
    pub fn assert_nontrivial_match(&self) -> Result<&LoadStatus, AssertionError> {
        self.check(Assertion::NontrivialMatch).map(|()| self)
    }

    /// `expect_partial()`: silences [`LoadStatus::warnings`]; the assertions are unaffected.
    pub fn expect_partial(mut self) -> LoadStatus {
        self.partial = true;
        self
    }

    /// The warnings TensorFlow logs when this status is dropped with values unrestored (none
    /// after [`LoadStatus::expect_partial`]).
    pub fn warnings(&self) -> &[String] {
        if self.partial { &[] } else { &self.warnings }
    }
}

/// Where a value stands after matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueStatus {
    /// In both; restored.
    Matched,
    /// In both, but the dtype or shape differs; restoring fails.
    Mismatched,
    /// In the checkpoint, but no object of ours takes it.
    Unused,
    /// An object of ours with no value in the checkpoint.
    Missing,
}

impl ValueStatus {
    fn label(self) -> &'static str {
        match self {
            ValueStatus::Matched => "matched",
            ValueStatus::Mismatched => "mismatched",
            ValueStatus::Unused => "unused",
            ValueStatus::Missing => "missing",
        }
    }
}

/// A dtype and shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorType {
    /// The dtype's Python name.
    pub dtype: String,
    /// The shape.
    pub shape: Vec<i64>,
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(i64::to_string).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))
    }
}

/// One value of a [`RestoreReport`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportValue {
    /// The object's path: local names from the root (ours, or the checkpoint's for unused
    /// values; in a name-based report the `/`-separated parts of an unused key); a slot
    /// variable ends with `<slot> of <optimizer path>`.
    pub path: Vec<String>,
    /// The attribute name (`VARIABLE_VALUE` for a variable).
    pub attribute: String,
    /// Where it stands.
    pub status: ValueStatus,
    /// The key the checkpoint stores it under (absent for missing values).
    pub checkpoint_key: Option<String>,
    /// Our dtype and shape (absent for unused values).
    pub program: Option<TensorType>,
    /// The checkpoint's dtype and shape (absent for missing values).
    pub checkpoint: Option<TensorType>,
}

/// Counts of a report, by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReportCounts {
    /// Restored values.
    pub matched: usize,
    /// Values whose dtype or shape differs.
    pub mismatched: usize,
    /// Checkpoint values nobody takes.
    pub unused: usize,
    /// Our values the checkpoint lacks.
    pub missing: usize,
}

impl ReportCounts {
    pub(super) fn add(&mut self, status: ValueStatus) {
        *match status {
            ValueStatus::Matched => &mut self.matched,
            ValueStatus::Mismatched => &mut self.mismatched,
            ValueStatus::Unused => &mut self.unused,
            ValueStatus::Missing => &mut self.missing,
        } += 1;
    }
}

impl fmt::Display for ReportCounts {
    /// The non-zero counts (`3 matched, 1 unused`), or `nothing`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [
            (self.matched, "matched"),
            (self.mismatched, "mismatched"),
            (self.unused, "unused"),
            (self.missing, "missing"),
        ]
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, label)| format!("{count} {label}"))
        .collect();
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Every value of a restore, once: matched, mismatched, in the checkpoint only (unused) or in
/// the program only (missing), by object path. [`fmt::Display`] prints it as a tree with
/// counts per object; it serializes to JSON with `serde`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// The checkpoint prefix.
    pub prefix: String,
    /// Whether values were matched by variable name: the checkpoint has no object graph
    /// (a TF1 `Saver` checkpoint, FORMATS.md 13.13).
    pub name_based: bool,
    /// The totals.
    pub counts: ReportCounts,
    /// The values, sorted by path and attribute.
    pub values: Vec<ReportValue>,
}

impl fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.name_based { " (name-based)" } else { "" };
        writeln!(f, "restore of {}{mode}: {}", self.prefix, self.counts)?;
        let mut root = ReportTree::default();
        for value in &self.values {
            let node = value.path.iter().fold(&mut root, |node, name| {
                node.children.entry(name.as_str()).or_default()
            });
            node.values.push(value);
        }
        root.write(f, "(root)", 0)
    }
}

/// The report's values by object: each object's own values and its children by name.
#[derive(Default)]
struct ReportTree<'a> {
    values: Vec<&'a ReportValue>,
    children: BTreeMap<&'a str, ReportTree<'a>>,
}

impl ReportTree<'_> {
    fn counts(&self, counts: &mut ReportCounts) {
        self.values
            .iter()
            .for_each(|value| counts.add(value.status));
        self.children
            .values()
            .for_each(|child| child.counts(counts));
    }

    /// `name`, a variable's own value on its line, the counts of the subtree when there is
    /// more below, then other attributes as `[name]` and the children.
    fn write(&self, f: &mut fmt::Formatter<'_>, name: &str, depth: usize) -> fmt::Result {
        let indent = "  ".repeat(depth);
        let is_variable =
            |value: &ReportValue| value.attribute == saveplan_ir::object_graph::VARIABLE_VALUE;
        let own = self.values.iter().find(|v| is_variable(v));
        let others: Vec<&ReportValue> = self
            .values
            .iter()
            .copied()
            .filter(|v| !is_variable(v))
            .collect();
        write!(f, "{indent}{name}")?;
        if let Some(value) = own {
            write!(f, ": {}", value_text(value))?;
        }
        if !self.children.is_empty() || !others.is_empty() {
            let mut counts = ReportCounts::default();
            self.counts(&mut counts);
            write!(f, "  ({counts})")?;
        }
        writeln!(f)?;
        for value in others {
            writeln!(f, "{indent}  [{}]: {}", value.attribute, value_text(value))?;
        }
        for (name, child) in &self.children {
            child.write(f, name, depth + 1)?;
        }
        Ok(())
    }
}

/// `matched float32[2]`, `mismatched int32[] in the program, int64[] in the checkpoint`.
fn value_text(value: &ReportValue) -> String {
    let detail = match (&value.program, &value.checkpoint) {
        (Some(ours), Some(theirs)) if ours != theirs => {
            format!("{ours} in the program, {theirs} in the checkpoint")
        }
        (Some(ours), _) => ours.to_string(),
        (None, Some(theirs)) => theirs.to_string(),
        (None, None) => "not in the checkpoint index".to_owned(),
    };
    format!("{} {detail}", value.status.label())
}

/// A matched attribute: where to read it and where it goes.
#[derive(Clone, Debug)]
pub(super) struct Pair {
    pub(super) checkpoint_key: String,
    pub(super) our_key: String,
    /// The object's path for messages (`(root).model.c`).
    pub(super) name: String,
    pub(super) value: HostTensor,
    pub(super) stored: Option<(DType, Vec<i64>)>,
    /// Matched by name (13.13): the value is read with the checkpoint's dtype and a dtype
    /// mismatch fails at assignment, with TensorFlow's `AssignVariableOp` message.
    pub(super) by_name: bool,
}

/// The outcome of matching a checkpoint against a [`Checkpoint`]'s objects, before any value is
/// read: the report, the load status the restore will return, and the values to read.
#[derive(Clone, Debug)]
pub struct RestoreMatch {
    pub(super) prefix: String,
    pub(super) kind: RestoreKind,
    pub(super) pairs: Vec<Pair>,
    pub(super) report: RestoreReport,
    pub(super) status: LoadStatus,
}

impl RestoreMatch {
    /// The report of every value.
    pub fn report(&self) -> &RestoreReport {
        &self.report
    }

    /// The keys (in our objects' graph) of the values the restore assigns, `save_counter`'s
    /// included when it is restored.
    pub fn restored_keys(&self) -> Vec<String> {
        self.pairs.iter().map(|pair| pair.our_key.clone()).collect()
    }

    /// The load status the restore returns.
    pub fn status(&self) -> &LoadStatus {
        &self.status
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
        let restored = read_pairs(&matched.prefix, &matched.pairs)?;
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
        let mut done: Vec<String> = Vec::new();
        let mut reads: Vec<(String, Vec<Pair>)> = Vec::new();
        for prefix in self.pending_restores().iter().rev() {
            let matched = self.match_checkpoint(prefix, RestoreKind::Read)?;
            let pairs: Vec<Pair> = matched
                .pairs
                .into_iter()
                .filter(|pair| new_keys.contains(&pair.our_key) && !done.contains(&pair.our_key))
                .collect();
            if let Some(error) = failure(&pairs) {
                return Err(error);
            }
            done.extend(pairs.iter().map(|pair| pair.our_key.clone()));
            reads.push((prefix.clone(), pairs));
        }
        let mut restored = BTreeMap::new();
        for (prefix, pairs) in reads {
            restored.extend(read_pairs(&prefix, &pairs)?);
        }
        self.assign_restored(restored)?;
        done.sort();
        Ok(done)
    }

    fn assign_restored(
        &mut self,
        restored: BTreeMap<String, HostTensor>,
    ) -> Result<(), CheckpointError> {
        for (key, value) in restored {
            if key == format!("{SAVE_COUNTER}/.ATTRIBUTES/VARIABLE_VALUE")
                && !self.values().contains_key(&key)
            {
                let counter = match value.bytes() {
                    Some(bytes) if bytes.len() == 8 => {
                        i64::from_le_bytes(bytes.try_into().expect("eight bytes"))
                    }
                    _ => 0,
                };
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
        None => reader
            .entries()
            .iter()
            .filter(|entry| entry.key.starts_with(key) && !entry.key[key.len()..].contains('/'))
            .collect(),
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

/// Reads `pairs` from the checkpoint at `prefix` with one `RestoreV2` through the eager
/// `MultiDeviceSaver` plan: our key → value.
fn read_pairs(
    prefix: &str,
    pairs: &[Pair],
) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
    let mut restored = BTreeMap::new();
    if pairs.is_empty() {
        return Ok(restored);
    }
    let EagerVariables {
        trackables,
        store: variables,
    } = EagerVariables::new(
        pairs
            .iter()
            .map(|pair| (pair.checkpoint_key.as_str(), "/cpu:0", pair.value.clone())),
    )?;
    let read_error = |source| CheckpointError::Read {
        prefix: prefix.to_owned(),
        source: Box::new(source),
    };
    let io = BundleIo::default();
    let mut saver = EagerSaver::new(trackables)
        .map_err(|source| read_error(super::WriteFailure::Trace(source)))?;
    saver
        .restore(
            &RunContext::new(&variables).with_io(&io),
            prefix,
            &TraceOptions::default(),
        )
        .map_err(|source| read_error(super::WriteFailure::Eager(source)))?;
    for (index, pair) in pairs.iter().enumerate() {
        let value = variables
            .get(&EagerVariables::key(index))
            .map_err(|source| CheckpointError::Variable {
                key: pair.our_key.clone(),
                source,
            })?;
        restored.insert(pair.our_key.clone(), value);
    }
    Ok(restored)
}

/// Binds checkpoint nodes to our nodes (13.10): breadth-first by local name, then slot
/// variables through bound optimizers and variables, until nothing more binds.
fn bind(theirs: &ObjectGraph, ours: &ObjectGraph) -> Vec<Option<NodeId>> {
    let mut bound: Vec<Option<NodeId>> = vec![None; theirs.nodes().len()];
    let mut taken = vec![false; ours.nodes().len()];
    bound[0] = Some(NodeId::ROOT);
    taken[0] = true;
    let mut queue = VecDeque::from([NodeId::ROOT]);
    loop {
        while let Some(their) = queue.pop_front() {
            let our = bound[their.index()].expect("queued nodes are bound");
            for edge in &theirs.node(their).children {
                if bound[edge.node_id.index()].is_some() {
                    continue;
                }
                let Some(child) = ours
                    .node(our)
                    .children
                    .iter()
                    .find(|c| c.local_name == edge.local_name)
                else {
                    continue;
                };
                if taken[child.node_id.index()] {
                    continue;
                }
                bound[edge.node_id.index()] = Some(child.node_id);
                taken[child.node_id.index()] = true;
                queue.push_back(edge.node_id);
            }
        }
        for (their_optimizer, node) in theirs.nodes().iter().enumerate() {
            let Some(our_optimizer) = bound[their_optimizer] else {
                continue;
            };
            for slot in &node.slot_variables {
                let Some(our_variable) = bound[slot.original_variable_node_id.index()] else {
                    continue;
                };
                if bound[slot.slot_variable_node_id.index()].is_some() {
                    continue;
                }
                let Some(our_slot) = ours.node(our_optimizer).slot_variables.iter().find(|s| {
                    s.original_variable_node_id == our_variable && s.slot_name == slot.slot_name
                }) else {
                    continue;
                };
                if taken[our_slot.slot_variable_node_id.index()] {
                    continue;
                }
                bound[slot.slot_variable_node_id.index()] = Some(our_slot.slot_variable_node_id);
                taken[our_slot.slot_variable_node_id.index()] = true;
                queue.push_back(slot.slot_variable_node_id);
            }
        }
        if queue.is_empty() {
            return bound;
        }
    }
}

/// TensorFlow's names of nodes (`ObjectGraphProtoPrettyPrinter.node_names`): `(root)` and the
/// first-discovered path's local names joined with `.`; a slot variable
/// `<optimizer>'s state '<slot>' for <variable>`.
pub(super) fn node_names(graph: &ObjectGraph) -> Vec<String> {
    let mut names: Vec<String> = graph
        .paths()
        .iter()
        .map(|path| match path {
            Some(path) => super::display_path(path),
            None => String::new(),
        })
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            names[slot.slot_variable_node_id.index()] = format!(
                "{}'s state '{}' for {}",
                names[optimizer],
                slot.slot_name,
                names[slot.original_variable_node_id.index()]
            );
        }
    }
    names
}

/// Each node's path as local names; a slot variable's is its variable's path and
/// `<slot> of <optimizer path>`.
pub(super) fn segment_paths(graph: &ObjectGraph) -> Vec<Vec<String>> {
    let mut paths: Vec<Vec<String>> = graph
        .paths()
        .into_iter()
        .map(|path| {
            path.unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
                .collect()
        })
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            let optimizer_path = super::display_path(
                &paths[optimizer]
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            let mut path = paths[slot.original_variable_node_id.index()].clone();
            path.push(format!("{} of {optimizer_path}", slot.slot_name));
            paths[slot.slot_variable_node_id.index()] = path;
        }
    }
    paths
}

pub(super) fn tensor_type((dtype, shape): (DType, Vec<i64>)) -> TensorType {
    TensorType {
        dtype: dtype.to_string(),
        shape,
    }
}

/// A shape as Python prints a tuple: `()`, `(2,)`, `(2, 3)`.
pub(super) fn python_shape(shape: &[i64]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A list of strings as Python prints it: `['a', 'b']`.
pub(super) fn python_list(names: &[&str]) -> String {
    let items: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!("[{}]", items.join(", "))
}

/// `repr()` of one of our objects: a variable's (one `VARIABLE_VALUE`) as an eager `tf.Variable`'s,
/// anything else `<object (root).path>`.
pub(super) fn node_repr(
    node: &ObjectNode,
    name: &str,
    value_of: &dyn Fn(&str) -> HostTensor,
) -> String {
    match node.attributes.as_slice() {
        [attribute] if attribute.name == VARIABLE_VALUE => {
            variable_repr(&attribute.full_name, &value_of(&attribute.checkpoint_key))
        }
        _ => format!("<object {name}>"),
    }
}

/// `repr()` of an eager `tf.Variable`:
/// `<tf.Variable 'Variable:0' shape=(2,) dtype=float32, numpy=array([0., 0.], dtype=float32)>`.
pub(super) fn variable_repr(full_name: &str, value: &HostTensor) -> String {
    let numpy = numpy_repr(value);
    // Python puts a multi-line array on a line of its own.
    let newline = if numpy.contains('\n') { "\n" } else { "" };
    format!(
        "<tf.Variable '{full_name}:0' shape={} dtype={}, numpy={newline}{numpy}>",
        python_shape(&shape_of(value)),
        value.dtype(),
    )
}

/// numpy's `repr` of a value (scalars as numbers, arrays as `array([...], dtype=…)`, one row per
/// line for two and more dimensions, without numpy's wrapping of long rows).
fn numpy_repr(value: &HostTensor) -> String {
    let Some(elements) = elements(value) else {
        return "...".to_owned();
    };
    if value.shape().is_empty() {
        return elements
            .first()
            .map_or_else(String::new, |e| e.scalar.clone());
    }
    let items: Vec<&str> = elements.iter().map(|e| e.array.as_str()).collect();
    let body = nest(value.shape(), &items, 0);
    let dtype = value.dtype();
    if matches!(dtype, DType::Double | DType::Int64 | DType::Bool) {
        format!("array({body})")
    } else {
        format!("array({body}, dtype={dtype})")
    }
}

struct Element {
    scalar: String,
    array: String,
}

/// Nests `items` into numpy's array text: `, ` between elements of the last axis; between
/// sub-arrays a comma, one newline per inner axis and the indent of `array(` plus the depth.
fn nest(shape: &[u64], items: &[&str], depth: usize) -> String {
    match shape {
        [] => items.first().copied().unwrap_or_default().to_owned(),
        [_] => format!("[{}]", items.join(", ")),
        [first, rest @ ..] => {
            let stride = items.len() / (*first).max(1) as usize;
            let parts: Vec<String> = (0..*first as usize)
                .map(|i| nest(rest, &items[i * stride..(i + 1) * stride], depth + 1))
                .collect();
            let separator = format!(",{}{}", "\n".repeat(rest.len()), " ".repeat(7 + depth));
            format!("[{}]", parts.join(&separator))
        }
    }
}

fn elements(value: &HostTensor) -> Option<Vec<Element>> {
    let (TensorData::Bytes(_) | TensorData::Mapped(_)) = value.data() else {
        return None;
    };
    let bytes = value.bytes()?;
    let float = |x: f64, text: String| Element {
        array: if x.fract() == 0.0 && x.is_finite() && x.abs() < 1e16 {
            format!("{}.", x as i64)
        } else {
            text.clone()
        },
        scalar: text,
    };
    let int = |text: String| Element {
        array: text.clone(),
        scalar: text,
    };
    Some(match value.dtype() {
        DType::Float => bytes
            .chunks_exact(4)
            .map(|c| {
                let x = f32::from_le_bytes(c.try_into().expect("4 bytes"));
                float(f64::from(x), format!("{x:?}"))
            })
            .collect(),
        DType::Double => bytes
            .chunks_exact(8)
            .map(|c| {
                let x = f64::from_le_bytes(c.try_into().expect("8 bytes"));
                float(x, format!("{x:?}"))
            })
            .collect(),
        DType::Int32 => bytes
            .chunks_exact(4)
            .map(|c| int(i32::from_le_bytes(c.try_into().expect("4 bytes")).to_string()))
            .collect(),
        DType::Int64 => bytes
            .chunks_exact(8)
            .map(|c| int(i64::from_le_bytes(c.try_into().expect("8 bytes")).to_string()))
            .collect(),
        DType::Bool => bytes
            .iter()
            .map(|b| int(if *b != 0 { "True" } else { "False" }.to_owned()))
            .collect(),
        _ => return None,
    })
}
