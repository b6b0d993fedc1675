//! What a restore returns and reports: the load status (`CheckpointLoadStatus`,
//! `NameBasedSaverStatus`, `InitializationOnlyStatus`) with its assertions and TensorFlow's
//! exact messages (FORMATS.md 13.11, 13.13), the [`RestoreReport`] listing every value once,
//! and what matching gives ([`Matched`]: the values to read as [`Pair`]s, the report, the
//! status). Both ways of matching (`matching.rs`) build these; this file knows neither.

use std::collections::BTreeMap;
use std::fmt;

use saveplan_ir::DType;
use serde::Serialize;

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
    /// `restore(None)`'s `InitializationOnlyStatus`.
    pub fn initialization_only() -> LoadStatus {
        LoadStatus {
            checks: None,
            warnings: Vec::new(),
            partial: false,
            name_based: None,
        }
    }

    /// Whether this is a name-based status (TensorFlow's `NameBasedSaverStatus`): the
    /// checkpoint had no object graph and values were matched by variable name (FORMATS.md
    /// 13.13). [`Checkpoint::refresh_status`](crate::checkpoint::Checkpoint::refresh_status) re-checks it against objects attached since.
    pub fn is_name_based(&self) -> bool {
        self.name_based.is_some()
    }

    /// For a name-based status, the prefix restored.
    pub fn name_based_prefix(&self) -> Option<&str> {
        self.name_based.as_deref()
    }

    /// This status, silenced when `other` is ([`LoadStatus::expect_partial`]).
    pub fn with_partial_of(mut self, other: &LoadStatus) -> LoadStatus {
        self.partial = other.partial;
        self
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

/// A matched value: where to read it, where it goes, and its dtype and shape on both sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The key the checkpoint stores it under.
    pub checkpoint_key: String,
    /// Its key among our values.
    pub our_key: String,
    /// The object's path for messages (`(root).model.c`).
    pub name: String,
    /// Our value's dtype and shape.
    pub program: (DType, Vec<i64>),
    /// The checkpoint's, if it stores the key.
    pub stored: Option<(DType, Vec<i64>)>,
    /// Matched by name (13.13): the value is read with the checkpoint's dtype and a dtype
    /// mismatch fails at assignment, with TensorFlow's `AssignVariableOp` message.
    pub by_name: bool,
}

/// The outcome of matching a checkpoint against our objects, before any value is read: the
/// values to read, the report, and the load status the restore will return.
#[derive(Clone, Debug)]
pub struct Matched {
    /// `restore()` or `read()`.
    pub kind: RestoreKind,
    /// The values to read, in the order a restore reads them.
    pub pairs: Vec<Pair>,
    /// Every value, once.
    pub report: RestoreReport,
    /// The status the restore returns.
    pub status: LoadStatus,
}
