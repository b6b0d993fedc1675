//! The spec of a checkpoint (`saveplan spec`): an [`ObjectSpec`] whose tree is the object
//! graph a checkpoint stores, node for node, or a plain [`SpecFile`] of its keys, such that
//! saving the checkpoint's own values with it writes the checkpoint's bytes again.
//!
//! Object specs list every edge of the object graph in breadth-first order: a node's first
//! edge declares it (a node without values as an `object` entry), any other is a `same_as`
//! entry naming its first path, then the slot variables. The spec's graph is rebuilt and
//! compared with the stored one: whatever a spec cannot say (a registered saver, a child order
//! no spec gives, several data files whose devices the checkpoint does not store) is
//! [`CheckpointError::NoSpec`], never a spec that would write other bytes.

use saveplan_ir::object_graph::{NodeId, OBJECT_GRAPH_KEY, ObjectGraph, VARIABLE_VALUE};

use super::{CheckpointError, ObjectEntry, ObjectSpec, SAVE_COUNTER, SlotSpec, read_object_graph};
use crate::bundle::{BundleReader, DType, Entry};
use crate::trace::spec::{SpecFile, VariableSpec};

/// The object spec of an object-based checkpoint: saving the checkpoint's values with it
/// writes the same files.
pub fn object_spec_of(reader: &BundleReader) -> Result<ObjectSpec, CheckpointError> {
    let graph = read_object_graph(reader)?;
    let refuse = |reason: String| CheckpointError::NoSpec {
        prefix: reader.prefix().to_owned(),
        reason,
    };
    one_data_file(reader).map_err(refuse)?;
    if let Some(id) = (graph.nodes().iter()).position(|node| node.registered_saver.is_some()) {
        return Err(refuse(format!("node {id} has a registered saver")));
    }
    let tree = graph.path_tree();
    let owned =
        |id: NodeId| -> Vec<String> { tree.path(id).into_iter().map(str::to_owned).collect() };
    // Every edge in breadth-first order, so each entry adds one edge after its siblings: a
    // first-discovered edge declares its object, another is `same_as` its target's path.
    let mut objects = Vec::new();
    for &parent in &tree.order {
        for child in &graph.node(parent).children {
            let id = child.node_id;
            if id == NodeId::ROOT {
                continue; // the `root` edge of `Checkpoint(root=…)`
            }
            let mut path = owned(parent);
            path.push(child.local_name.clone());
            if !tree.is_first_edge(parent, child) {
                objects.push(ObjectEntry {
                    path,
                    same_as: Some(owned(id)),
                    ..ObjectEntry::default()
                });
            } else if graph.node(id).attributes.is_empty() {
                objects.push(ObjectEntry {
                    path,
                    object: true,
                    ..ObjectEntry::default()
                });
            } else {
                objects.extend(attribute_entries(reader, &graph, id, path).map_err(refuse)?);
            }
        }
    }
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            let slot_node = slot.slot_variable_node_id;
            let mut entries =
                attribute_entries(reader, &graph, slot_node, Vec::new()).map_err(refuse)?;
            if entries.len() != 1 || entries[0].attribute.is_some() {
                return Err(refuse(format!("slot variable {slot_node} is no variable")));
            }
            entries[0].slot = Some(SlotSpec {
                variable: owned(slot.original_variable_node_id),
                optimizer: owned(NodeId(optimizer as u32)),
                name: slot.slot_name.clone(),
            });
            objects.extend(entries);
        }
    }
    // `tf.train.Checkpoint(root=module)`: the root's self edge.
    let root =
        (graph.node(NodeId::ROOT).children.iter()).any(|child| child.node_id == NodeId::ROOT);
    let spec = ObjectSpec {
        objects,
        options: None,
        root,
    };
    let (built, keys) = spec.object_graph().map_err(|err| refuse(err.to_string()))?;
    // The counter is not in the spec's tree: a write adds it as the root's last child.
    let counted = (0..spec.objects.len()).any(|index| spec.is_counter(index).unwrap_or(false));
    let built = if counted {
        crate::object::with_save_counter(&built)
    } else {
        built
    };
    if let Some(reason) = difference(&graph, &built) {
        return Err(refuse(reason));
    }
    // Every tensor but the graph's own is the value of an entry, and a whole one.
    let listed: std::collections::BTreeSet<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|key| !key.is_empty())
        .collect();
    if let Some(entry) = (reader.entries().iter()).find(|entry| {
        entry.key != OBJECT_GRAPH_KEY
            && (!listed.contains(entry.key.as_str()) || !entry.slices.is_empty())
    }) {
        return Err(refuse(format!(
            "`{}` is no whole value of an attribute of its object graph",
            entry.key
        )));
    }
    Ok(spec)
}

/// The plain spec of a checkpoint: every key with its dtype and shape, a sliced tensor as its
/// slices (with `slice_spec`), in the order the data file holds them.
pub fn plain_spec_of(reader: &BundleReader) -> Result<SpecFile, CheckpointError> {
    one_data_file(reader).map_err(|reason| CheckpointError::NoSpec {
        prefix: reader.prefix().to_owned(),
        reason,
    })?;
    let mut stored: Vec<(&Entry, String)> = Vec::new();
    for entry in reader.entries() {
        if entry.slices.is_empty() {
            stored.push((entry, String::new()));
            continue;
        }
        let dims: Vec<String> = entry.shape.iter().map(i64::to_string).collect();
        for slice in reader.slice_entries(&entry.key) {
            let extent = slice
                .slice
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            stored.push((slice, format!("{} {extent}", dims.join(" "))));
        }
    }
    stored.sort_by_key(|(entry, _)| (entry.shard, entry.offset));
    let variables = stored
        .into_iter()
        .map(|(entry, slice_spec)| {
            Ok(VariableSpec {
                checkpoint_key: entry.key.clone(),
                dtype: dtype_name(entry.dtype).map_err(|reason| CheckpointError::NoSpec {
                    prefix: reader.prefix().to_owned(),
                    reason,
                })?,
                shape: entry.shape.clone(),
                slice_spec,
                ..VariableSpec::default()
            })
        })
        .collect::<Result<Vec<_>, CheckpointError>>()?;
    Ok(SpecFile {
        variables,
        options: None,
    })
}

/// A checkpoint of several data files was saved from several tasks, which it does not name.
fn one_data_file(reader: &BundleReader) -> Result<(), String> {
    match reader.num_shards() {
        1 => Ok(()),
        n => Err(format!(
            "it has {n} data files, written from devices a checkpoint does not store"
        )),
    }
}

/// The TensorFlow name of a stored dtype.
fn dtype_name(dtype: DType) -> Result<String, String> {
    dtype
        .name()
        .map(str::to_owned)
        .ok_or_else(|| format!("it holds a tensor of dtype {dtype}, which has no name"))
}

/// The entries of node `id`'s attributes (at `path`; empty for a slot variable): one variable,
/// or one per attribute and, for a legacy saveable, per stored key extending its key.
fn attribute_entries(
    reader: &BundleReader,
    graph: &ObjectGraph,
    id: NodeId,
    path: Vec<String>,
) -> Result<Vec<ObjectEntry>, String> {
    let node = graph.node(id);
    let entry_of = |key: &str| -> Result<ObjectEntry, String> {
        let stored = reader
            .entry(key)
            .ok_or_else(|| format!("{id}: no tensor `{key}`"))?;
        Ok(ObjectEntry {
            path: path.clone(),
            dtype: dtype_name(stored.dtype)?,
            shape: Some(stored.shape.clone()),
            ..ObjectEntry::default()
        })
    };
    if let [attribute] = node.attributes.as_slice()
        && attribute.name == VARIABLE_VALUE
        && reader.entry(&attribute.checkpoint_key).is_some()
    {
        let mut entry = entry_of(&attribute.checkpoint_key)?;
        // The checkpoint's own counter is written under its own name, whatever an entry says.
        if path != [SAVE_COUNTER] {
            entry.name = Some(attribute.full_name.clone());
        }
        return Ok(vec![entry]);
    }
    let mut entries = Vec::new();
    for attribute in &node.attributes {
        let key = &attribute.checkpoint_key;
        let full_name = (!attribute.full_name.is_empty()).then(|| attribute.full_name.clone());
        if reader.entry(key).is_some() {
            entries.push(ObjectEntry {
                attribute: Some(attribute.name.clone()),
                name: full_name,
                ..entry_of(key)?
            });
            continue;
        }
        let start = reader
            .entries()
            .partition_point(|entry| entry.key.as_str() <= key.as_str());
        let extending = reader.entries()[start..]
            .iter()
            .take_while(|entry| entry.key.starts_with(key.as_str()));
        let before = entries.len();
        for stored in extending {
            entries.push(ObjectEntry {
                attribute: Some(attribute.name.clone()),
                name: full_name.clone(),
                suffix: Some(stored.key[key.len()..].to_owned()),
                ..entry_of(&stored.key)?
            });
        }
        if entries.len() == before {
            return Err(format!("{id}: no tensor `{key}`"));
        }
    }
    Ok(entries)
}

/// The first difference between the stored graph and the one a spec builds, as a reason.
fn difference(stored: &ObjectGraph, built: &ObjectGraph) -> Option<String> {
    if stored.nodes().len() != built.nodes().len() {
        return Some(format!(
            "its object graph has {} nodes, a spec of it {} (nodes no child edge reaches?)",
            stored.nodes().len(),
            built.nodes().len()
        ));
    }
    let paths = stored.paths();
    (stored.nodes().iter().zip(built.nodes()).enumerate())
        .find(|(_, (a, b))| a != b)
        .map(|(id, (a, b))| {
            let what = if a.children != b.children {
                "its children (order or targets)"
            } else if a.attributes != b.attributes {
                "its attributes"
            } else if a.slot_variables != b.slot_variables {
                "its slot variables"
            } else {
                "has_checkpoint_values"
            };
            let path = paths[id]
                .as_deref()
                .map_or_else(|| format!("node {id}"), super::display_path);
            format!("{path}: {what} cannot be given by a spec")
        })
}
