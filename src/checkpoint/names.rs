//! Name-based restore (FORMATS.md 13.13): what `tf.train.Checkpoint.restore`/`read` do with a
//! checkpoint that has no object graph (a TF1 `tf.compat.v1.train.Saver` checkpoint).
//!
//! Every attribute of every object of ours is looked up by its `full_name` (the variable's
//! shared name, `tf.Variable(name=…)`): when that exact name is a key of the bundle the value is
//! read from it with the checkpoint's dtype (a different dtype of ours fails at assignment, as
//! TensorFlow's `AssignVariableOp` does); otherwise the object is recorded as not restored.
//! All three assertions of the returned status are the same check (TensorFlow's
//! `NameBasedSaverStatus`): no attribute of ours left unrestored, `save_counter` excepted.
//! Checkpoint keys nobody asked for never fail an assertion; the report lists them as unused.
//! Objects attached later are restored on attachment through the pending restores, like
//! object-based ones ([`Checkpoint::attach`]).
//!
//! One difference: TensorFlow restores each variable with its own `RestoreV2` and assignment,
//! so a dtype mismatch leaves the variables before it restored; here every dtype and shape is
//! checked first and a failing restore changes nothing, as object-based restores do.

use std::collections::BTreeSet;

use saveplan_ir::object_graph::VARIABLE_VALUE;

use super::build::value_keys;
use super::save::{SAVE_COUNTER_KEY, counter_tensor, shape_of, with_save_counter};
use super::status::{
    Checks, LoadStatus, Pair, ReportCounts, ReportValue, RestoreKind, RestoreMatch, RestoreReport,
    Source, ValueStatus, node_names, node_repr, python_list, segment_paths, tensor_type,
};
use super::{Checkpoint, CheckpointError};
use crate::bundle::BundleReader;
use crate::exec::HostTensor;

/// Matches the name-based checkpoint `reader` (at `prefix`) against `checkpoint`'s objects.
pub(super) fn match_names(
    checkpoint: &Checkpoint,
    reader: &std::sync::Arc<BundleReader>,
    prefix: &str,
    kind: RestoreKind,
) -> RestoreMatch {
    let counter = match (kind, checkpoint.save_counter()) {
        (_, Some(value)) => Some(value),
        (RestoreKind::Restore, None) => Some(0),
        (RestoreKind::Read, None) => None,
    };
    let ours = match counter {
        Some(_) => with_save_counter(checkpoint.graph()),
        None => checkpoint.graph().clone(),
    };
    let counter_value = counter_tensor(counter.unwrap_or(0));
    let value_of = |key: &str| -> HostTensor {
        checkpoint
            .values()
            .get(key)
            .cloned()
            .unwrap_or_else(|| counter_value.clone())
    };
    let counter_key = SAVE_COUNTER_KEY;
    // Checked when the checkpoint was made; `save_counter` has no value key.
    let owned = value_keys(&ours, checkpoint.values()).unwrap_or_default();
    let names = node_names(&ours);
    let paths = segment_paths(&ours);

    let mut pairs = Vec::new();
    let mut values = Vec::new();
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    let mut not_restored = Vec::new();
    for (index, node) in ours.nodes().iter().enumerate() {
        let mut missing: Vec<&str> = Vec::new();
        for attribute in &node.attributes {
            let value = value_of(&attribute.checkpoint_key);
            let program = (value.dtype(), shape_of(&value));
            let entry = Some(attribute.full_name.as_str())
                .filter(|name| !name.is_empty())
                .and_then(|name| reader.entry(name));
            let Some(entry) = entry else {
                // A legacy saveable has several values; each is missing.
                let key = attribute.checkpoint_key.as_str();
                let keys = owned.get(key).filter(|keys| !keys.is_empty());
                for value_key in keys.map_or_else(|| vec![key], Clone::clone) {
                    let value = value_of(value_key);
                    values.push(ReportValue {
                        path: paths[index].clone(),
                        attribute: attribute.name.clone(),
                        status: ValueStatus::Missing,
                        checkpoint_key: None,
                        program: Some(tensor_type((value.dtype(), shape_of(&value)))),
                        checkpoint: None,
                    });
                }
                if attribute.checkpoint_key != counter_key {
                    missing.push(&attribute.full_name);
                }
                continue;
            };
            let found = (entry.dtype, entry.shape.clone());
            values.push(ReportValue {
                path: paths[index].clone(),
                attribute: attribute.name.clone(),
                status: if found == program {
                    ValueStatus::Matched
                } else {
                    ValueStatus::Mismatched
                },
                checkpoint_key: Some(entry.key.clone()),
                program: Some(tensor_type(program)),
                checkpoint: Some(tensor_type(found.clone())),
            });
            taken.insert(&attribute.full_name);
            pairs.push(Pair {
                checkpoint_key: entry.key.clone(),
                our_key: attribute.checkpoint_key.clone(),
                name: names[index].clone(),
                value,
                stored: Some(found),
                by_name: true,
            });
        }
        if !missing.is_empty() {
            not_restored.push(format!(
                "\n    {}: {}",
                node_repr(node, &names[index], &value_of),
                python_list(&missing)
            ));
        }
    }
    for entry in reader.entries() {
        if taken.contains(entry.key.as_str()) {
            continue;
        }
        values.push(ReportValue {
            path: entry.key.split('/').map(str::to_owned).collect(),
            attribute: VARIABLE_VALUE.to_owned(),
            status: ValueStatus::Unused,
            checkpoint_key: Some(entry.key.clone()),
            program: None,
            checkpoint: Some(tensor_type((entry.dtype, entry.shape.clone()))),
        });
    }
    values.sort_by(|a, b| (&a.path, &a.attribute).cmp(&(&b.path, &b.attribute)));
    let mut counts = ReportCounts::default();
    values.iter().for_each(|value| counts.add(value.status));
    let message = (!not_restored.is_empty()).then(|| {
        format!(
            "Some objects had attributes which were not restored: {}",
            not_restored.concat()
        )
    });
    RestoreMatch {
        prefix: prefix.to_owned(),
        source: Source(std::sync::Arc::clone(reader)),
        kind,
        pairs,
        report: RestoreReport {
            prefix: prefix.to_owned(),
            name_based: true,
            counts,
            values,
        },
        status: LoadStatus {
            checks: Some(Checks {
                consumed: message.clone(),
                existing: message.clone(),
                nontrivial: message,
            }),
            warnings: Vec::new(),
            partial: false,
            name_based: Some(prefix.to_owned()),
        },
    }
}

impl Checkpoint {
    /// The status `status` has now: a name-based status (TensorFlow's `NameBasedSaverStatus`
    /// checks the objects as they are when an assertion runs) is matched again against the
    /// objects of this checkpoint, attached ones included; any other status is returned as is.
    pub fn refresh_status(&self, status: &LoadStatus) -> Result<LoadStatus, CheckpointError> {
        let Some(prefix) = &status.name_based else {
            return Ok(status.clone());
        };
        let mut fresh = self.match_checkpoint(prefix, RestoreKind::Read)?.status;
        fresh.partial = status.partial;
        Ok(fresh)
    }
}

/// The reverse direction (FORMATS.md 13.13): how a TF1 `Saver` restores an object-based
/// checkpoint. Each attribute's `full_name` (a variable's shared name) → its `checkpoint_key`,
/// read from the checkpoint's object graph; attributes without a `full_name` are left out,
/// and when several attributes share one `full_name` the last in node order wins, as in
/// TensorFlow's mapping. [`CheckpointError::NameBased`] when the checkpoint has no object graph.
pub fn full_name_keys(
    reader: &BundleReader,
) -> Result<std::collections::BTreeMap<String, String>, CheckpointError> {
    let graph = super::read_object_graph(reader)?;
    Ok(graph
        .nodes()
        .iter()
        .flat_map(|node| &node.attributes)
        .filter(|attribute| !attribute.full_name.is_empty())
        .map(|attribute| {
            (
                attribute.full_name.clone(),
                attribute.checkpoint_key.clone(),
            )
        })
        .collect())
}
