//! Reading a checkpoint's values without knowing them in advance: dtypes and shapes come from
//! the checkpoint's index, and a value is named by its checkpoint key, its object's path
//! (`model/layers/0/kernel`) or its variable's full name (the attribute's `full_name`, the
//! name a name-based restore uses; [`crate::object::name_candidates`]).

use std::collections::BTreeMap;

use saveplan_ir::object_graph::OBJECT_GRAPH_KEY;

use super::restore::open;
use super::{CheckpointError, is_object_based, read_object_graph};
use crate::bundle::BundleReader;
use crate::exec::HostTensor;
use crate::exec::io::{RestoreRequest, restore_from};
use crate::object::name_candidates;

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

/// The reverse direction (FORMATS.md 13.13): how a TF1 `Saver` restores an object-based
/// checkpoint, each attribute's `full_name` → its `checkpoint_key`
/// ([`crate::object::full_name_keys`] of the checkpoint's object graph).
/// [`CheckpointError::NameBased`] when the checkpoint has no object graph.
pub fn full_name_keys(reader: &BundleReader) -> Result<BTreeMap<String, String>, CheckpointError> {
    Ok(crate::object::full_name_keys(&read_object_graph(reader)?))
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
