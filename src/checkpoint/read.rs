//! Reading a checkpoint's values without knowing them in advance: dtypes and shapes come from
//! the checkpoint's index, and a value is named by its checkpoint key, its object's path
//! (`model/layers/0/kernel`) or its variable's full name (the attribute's `full_name`, the
//! name a name-based restore uses).

use std::collections::BTreeMap;

use saveplan_ir::object_graph::{GraphIndex, OBJECT_GRAPH_KEY, ObjectGraph, VARIABLE_VALUE};

use super::{CheckpointError, is_object_based, read_object_graph};
use crate::bundle::{BundleError, BundleReader};
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};

/// Every value of the checkpoint at `prefix` (the object graph aside), by checkpoint key, with
/// the dtype and shape it is stored with; sliced tensors are assembled whole.
pub fn read_all(prefix: &str) -> Result<BTreeMap<String, HostTensor>, CheckpointError> {
    let reader = open(prefix)?;
    let keys: Vec<&str> = (reader.entries().iter())
        .map(|entry| entry.key.as_str())
        .filter(|key| *key != OBJECT_GRAPH_KEY)
        .collect();
    let values = read_keys(&reader, prefix, &keys)?;
    Ok(keys.into_iter().map(str::to_owned).zip(values).collect())
}

/// One value of the checkpoint at `prefix`, with the dtype and shape it is stored with,
/// named as [`resolve_name`] resolves names.
pub fn read_value(prefix: &str, name: &str) -> Result<HostTensor, CheckpointError> {
    let reader = open(prefix)?;
    let key = resolve_name(&reader, name)?;
    let mut values = read_keys(&reader, prefix, &[&key])?;
    Ok(values.remove(0))
}

/// The checkpoint key `name` names in the checkpoint `reader` reads: a key it stores; else,
/// in an object-based checkpoint, the value of the object at the path `name` (unescaped
/// local names joined with `/`: a variable's value, or with an attribute name last, that
/// attribute's) or of the variable whose full name is `name`. A name that means several
/// values is [`CheckpointError::AmbiguousName`], listing their keys; one that means none,
/// [`CheckpointError::NoSuchValue`].
pub fn resolve_name(reader: &BundleReader, name: &str) -> Result<String, CheckpointError> {
    if name != OBJECT_GRAPH_KEY && reader.entry(name).is_some() {
        return Ok(name.to_owned());
    }
    let mut candidates = Vec::new();
    if is_object_based(reader) {
        let graph = read_object_graph(reader)?;
        candidates = name_candidates(&graph, name);
    }
    match candidates.as_slice() {
        [key] => Ok(key.clone()),
        [] => Err(CheckpointError::NoSuchValue {
            prefix: reader.prefix().display().to_string(),
            name: name.to_owned(),
        }),
        _ => Err(CheckpointError::AmbiguousName {
            name: name.to_owned(),
            candidates,
        }),
    }
}

/// The keys of the values `name` names in `graph` as an object path (along any of an object's
/// paths: an object shared by two parents is found by both) or a full name, sorted.
fn name_candidates(graph: &ObjectGraph, name: &str) -> Vec<String> {
    let index = GraphIndex::new(graph);
    let parts: Vec<&str> = name.split('/').collect();
    let mut keys = Vec::new();
    // The object at the path: its variable's value.
    if let Some(attribute) =
        (index.node_at(&parts)).and_then(|node| index.attribute(node, VARIABLE_VALUE))
    {
        keys.push(attribute.checkpoint_key.clone());
    }
    // The object at all but the last name: its attribute of that name.
    if let Some((last, rest)) = parts.split_last()
        && let Some(attribute) = index
            .node_at(rest)
            .and_then(|node| index.attribute(node, last))
    {
        keys.push(attribute.checkpoint_key.clone());
    }
    for node in graph.nodes() {
        for attribute in &node.attributes {
            if attribute.full_name == name {
                keys.push(attribute.checkpoint_key.clone());
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

fn open(prefix: &str) -> Result<BundleReader, CheckpointError> {
    BundleReader::open(prefix).map_err(|err| match err {
        BundleError::IndexNotFound { .. } => CheckpointError::NotFound {
            prefix: prefix.to_owned(),
        },
        other => CheckpointError::Bundle(other),
    })
}

/// Reads whole tensors by key, each with its stored dtype.
fn read_keys(
    reader: &BundleReader,
    prefix: &str,
    keys: &[&str],
) -> Result<Vec<HostTensor>, CheckpointError> {
    let requests: Vec<RestoreRequest<'_>> = (keys.iter())
        .filter_map(|key| reader.entry(key))
        .map(|entry| RestoreRequest {
            name: &entry.key,
            shape_and_slice: "",
            dtype: entry.dtype,
        })
        .collect();
    restore_from(reader, &requests).map_err(|source| CheckpointError::ReadValues {
        prefix: prefix.to_owned(),
        source: Box::new(source),
    })
}
