//! What a restore returns and reports: the load status (`CheckpointLoadStatus`,
//! `NameBasedSaverStatus`, `InitializationOnlyStatus`) with its assertions and TensorFlow's
//! exact messages (FORMATS.md 13.11, 13.13), the [`RestoreReport`] listing every value once,
//! and the text TensorFlow's messages are made of (node names and paths, Python reprs of
//! shapes, lists and variables). Both ways of matching, by object (`restore.rs`) and by name
//! (`names.rs`), build these; this file knows neither.

use std::collections::BTreeMap;
use std::fmt;

use saveplan_ir::DType;
use saveplan_ir::object_graph::{NodeId, ObjectGraph, ObjectNode, VARIABLE_VALUE};
use serde::Serialize;

use super::save::shape_of;
use crate::exec::{HostTensor, TensorData};

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
    pub(super) fn initialization_only() -> LoadStatus {
        LoadStatus {
            checks: None,
            warnings: Vec::new(),
            partial: false,
            name_based: None,
        }
    }

    /// Whether this is a name-based status (TensorFlow's `NameBasedSaverStatus`): the
    /// checkpoint had no object graph and values were matched by variable name (FORMATS.md
    /// 13.13). [`Checkpoint::refresh_status`](super::Checkpoint::refresh_status) re-checks it against objects attached since.
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

/// The outcome of matching a checkpoint against a [`Checkpoint`](super::Checkpoint)'s objects, before any value is
/// read: the report, the load status the restore will return, and the values to read.
#[derive(Clone, Debug)]
pub struct RestoreMatch {
    pub(super) prefix: String,
    /// The checkpoint matched, open: its values are read from this reader, so a restore opens
    /// and checks the bundle once.
    pub(super) source: Source,
    pub(super) kind: RestoreKind,
    pub(super) pairs: Vec<Pair>,
    pub(super) report: RestoreReport,
    pub(super) status: LoadStatus,
}

/// The open checkpoint a [`RestoreMatch`] was made against.
#[derive(Clone)]
pub(super) struct Source(pub(super) std::sync::Arc<crate::bundle::BundleReader>);

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({})", self.0.prefix().display())
    }
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

/// TensorFlow's names of nodes (`ObjectGraphProtoPrettyPrinter.node_names`): `(root)` and the
/// first-discovered path's local names joined with `.`; a slot variable
/// `<optimizer>'s state '<slot>' for <variable>`, its optimizer and variable named by their own
/// paths (`node N` for one no child edge reaches) where TensorFlow names them recursively: a
/// chain of slots, each the optimizer of the next, doubled the name per link. Each name is its
/// parent's and one local name, built once.
pub(super) fn node_names(graph: &ObjectGraph) -> Vec<String> {
    let tree = graph.path_tree();
    let own: Vec<Option<String>> = tree.fold("(root)".to_owned(), |parent, name| {
        format!("{parent}.{name}")
    });
    let own_name = |id: NodeId| own[id.index()].clone().unwrap_or_else(|| id.to_string());
    let mut names: Vec<String> = own
        .iter()
        .map(|name| name.clone().unwrap_or_default())
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            names[slot.slot_variable_node_id.index()] = format!(
                "{}'s state '{}' for {}",
                own_name(NodeId(optimizer as u32)),
                slot.slot_name,
                own_name(slot.original_variable_node_id)
            );
        }
    }
    names
}

/// Each node's path as local names; a slot variable's is its variable's own path and
/// `<slot> of <optimizer path>` (`node N` for an optimizer no child edge reaches).
pub(super) fn segment_paths(graph: &ObjectGraph) -> Vec<Vec<String>> {
    let tree = graph.path_tree();
    let own_path =
        |id: NodeId| -> Vec<String> { tree.path(id).into_iter().map(str::to_owned).collect() };
    let mut paths: Vec<Vec<String>> = (0..graph.nodes().len())
        .map(|idx| own_path(NodeId(idx as u32)))
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        let optimizer = NodeId(optimizer as u32);
        for slot in &node.slot_variables {
            let optimizer_path = if tree.is_reached(optimizer) {
                super::display_path(&tree.path(optimizer))
            } else {
                optimizer.to_string()
            };
            let mut path = own_path(slot.original_variable_node_id);
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
