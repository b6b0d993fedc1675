//! The object graph of an object-based checkpoint (`TrackableObjectGraph`, FORMATS.md 13) as
//! plain data, and the checkpoint-key vocabulary built on it: local-name escaping, object
//! paths, attribute keys and slot-variable keys.
//!
//! A graph is a list of nodes; a node's index is its id and node 0 is the root. Nodes have
//! ordered, named edges to children (an object reachable by several paths is stored once and
//! every edge to it is written), attributes (the saved tensors of the node: a variable has one,
//! `VARIABLE_VALUE`) and, on an optimizer, references to slot variables, which are nodes of
//! their own but nobody's children. The types mirror the protobuf message field by field, so a
//! decoded graph encodes back to the same bytes; protobuf itself lives in `saveplan::export`.
//! [`ObjectGraph::new`] checks that every id names a node, so the key functions never index
//! out of bounds.

use std::collections::VecDeque;

/// The tensor key under which a checkpoint stores its serialized object graph.
pub const OBJECT_GRAPH_KEY: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";
/// The attribute name of a variable's value.
pub const VARIABLE_VALUE: &str = "VARIABLE_VALUE";
/// The path component that separates an object path from an attribute name in a key.
pub const ATTRIBUTES: &str = ".ATTRIBUTES";
/// The path component that separates a variable's path from its optimizer's in a slot key.
pub const OPTIMIZER_SLOT: &str = ".OPTIMIZER_SLOT";

/// The id of a node: its index in [`ObjectGraph::nodes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The root of the traversal.
    pub const ROOT: NodeId = NodeId(0);

    /// The id as an index into [`ObjectGraph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A checkpoint's object graph (`TrackableObjectGraph`). Every id in it names a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectGraph {
    nodes: Vec<ObjectNode>,
}

/// One object (`TrackableObject`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectNode {
    /// Named edges to children, in the object's own order.
    pub children: Vec<ChildRef>,
    /// The tensors saved for this object, in order.
    pub attributes: Vec<Attribute>,
    /// On an optimizer: its slot variables.
    pub slot_variables: Vec<SlotVariable>,
    /// The registered saver that saves this object, if any.
    pub registered_saver: Option<RegisteredSaver>,
    /// Whether the object or anything reachable from it has values; `None` when the field was
    /// absent (TensorFlow 2.21 always writes it, see [`ObjectGraph::computed_has_values`]).
    pub has_checkpoint_values: Option<bool>,
}

/// A named edge to a child (`ObjectReference`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRef {
    /// The child.
    pub node_id: NodeId,
    /// The child's name in its parent, unescaped (`a/b.c`).
    pub local_name: String,
}

/// One saved tensor of an object (`SerializedTensor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The attribute name (`VARIABLE_VALUE` for a variable).
    pub name: String,
    /// The variable's shared name, used only by name-based loading; empty for other tensors.
    pub full_name: String,
    /// The bundle key of the tensor (for legacy saveables, a prefix of the real keys).
    pub checkpoint_key: String,
}

/// A slot variable of an optimizer (`SlotVariableReference`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotVariable {
    /// The variable the slot belongs to.
    pub original_variable_node_id: NodeId,
    /// The slot's name (`m`, `v`).
    pub slot_name: String,
    /// The node of the slot variable itself.
    pub slot_variable_node_id: NodeId,
}

/// A saver registered for an object (`RegisteredSaver`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisteredSaver {
    /// The registered name of the saver.
    pub name: String,
    /// The object's name within the saver.
    pub object_name: String,
}

/// What makes a list of nodes not an object graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectGraphError {
    /// The graph has no node 0.
    #[error("the object graph has no nodes")]
    Empty,
    /// An id names no node.
    #[error("{node}: {field} names node {target}, but the graph has {n_nodes} nodes")]
    NoSuchNode {
        /// The node holding the reference.
        node: NodeId,
        /// Which field (`children`, `slot_variables.original_variable_node_id`, …).
        field: &'static str,
        /// The id as stored.
        target: i64,
        /// How many nodes there are.
        n_nodes: usize,
    },
}

impl ObjectGraph {
    /// A graph of `nodes`, after checking that every id in them names a node.
    pub fn new(nodes: Vec<ObjectNode>) -> Result<ObjectGraph, ObjectGraphError> {
        if nodes.is_empty() {
            return Err(ObjectGraphError::Empty);
        }
        let n_nodes = nodes.len();
        let check = |node: usize, field: &'static str, target: NodeId| {
            if target.index() < n_nodes {
                Ok(())
            } else {
                Err(ObjectGraphError::NoSuchNode {
                    node: NodeId(node as u32),
                    field,
                    target: i64::from(target.0),
                    n_nodes,
                })
            }
        };
        for (idx, node) in nodes.iter().enumerate() {
            for child in &node.children {
                check(idx, "children", child.node_id)?;
            }
            for slot in &node.slot_variables {
                check(
                    idx,
                    "slot_variables.original_variable_node_id",
                    slot.original_variable_node_id,
                )?;
                check(
                    idx,
                    "slot_variables.slot_variable_node_id",
                    slot.slot_variable_node_id,
                )?;
            }
        }
        Ok(ObjectGraph { nodes })
    }

    /// The nodes, in id order.
    pub fn nodes(&self) -> &[ObjectNode] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &ObjectNode {
        &self.nodes[id.index()]
    }

    /// Gives the nodes back.
    pub fn into_nodes(self) -> Vec<ObjectNode> {
        self.nodes
    }

    /// For each node, its first-discovered path from the root (13.1): the edges' local names,
    /// unescaped. Breadth-first in child order, so the shortest path wins and ties go to the
    /// earlier edge. `None` for nodes no child edge reaches (slot variables).
    pub fn paths(&self) -> Vec<Option<Vec<&str>>> {
        let mut paths: Vec<Option<Vec<&str>>> = vec![None; self.nodes.len()];
        paths[0] = Some(Vec::new());
        let mut queue = VecDeque::from([NodeId::ROOT]);
        while let Some(id) = queue.pop_front() {
            for child in &self.node(id).children {
                if paths[child.node_id.index()].is_none() {
                    let mut path = paths[id.index()].clone().unwrap_or_default();
                    path.push(&child.local_name);
                    paths[child.node_id.index()] = Some(path);
                    queue.push_back(child.node_id);
                }
            }
        }
        paths
    }

    /// For each node, the part of its keys before `/.ATTRIBUTES/` (13.4): the escaped object
    /// path for objects reached through children (`""` for the root), and
    /// `<variable path>/.OPTIMIZER_SLOT/<optimizer path>/<escaped slot name>` for slot
    /// variables. `None` for a node that is neither.
    pub fn key_prefixes(&self) -> Vec<Option<String>> {
        let paths = self.paths();
        let mut prefixes: Vec<Option<String>> = paths
            .iter()
            .map(|path| path.as_ref().map(|names| object_path(names)))
            .collect();
        for (optimizer, node) in self.nodes.iter().enumerate() {
            for slot in &node.slot_variables {
                let slot_id = slot.slot_variable_node_id.index();
                if prefixes[slot_id].is_some() {
                    continue;
                }
                let (Some(variable), Some(optimizer)) = (
                    &prefixes[slot.original_variable_node_id.index()],
                    &prefixes[optimizer],
                ) else {
                    continue;
                };
                prefixes[slot_id] = Some(format!(
                    "{variable}/{OPTIMIZER_SLOT}/{optimizer}/{}",
                    escape_local_name(&slot.slot_name)
                ));
            }
        }
        prefixes
    }

    /// The key each attribute of each node gets by 13.4's rules (`None` where the node has no
    /// key prefix), node by node and attribute by attribute.
    pub fn derived_keys(&self) -> Vec<Vec<Option<String>>> {
        let prefixes = self.key_prefixes();
        self.nodes
            .iter()
            .zip(&prefixes)
            .map(|(node, prefix)| {
                node.attributes
                    .iter()
                    .map(|attribute| {
                        prefix
                            .as_deref()
                            .map(|prefix| attribute_key(prefix, &attribute.name))
                    })
                    .collect()
            })
            .collect()
    }

    /// `has_checkpoint_values` of each node as TensorFlow computes it (13.2): true iff the node
    /// has attributes, slot variables or a registered saver, or a node reachable from it
    /// through children does.
    pub fn computed_has_values(&self) -> Vec<bool> {
        let mut parents: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (idx, node) in self.nodes.iter().enumerate() {
            for child in &node.children {
                parents[child.node_id.index()].push(idx);
            }
        }
        let mut has_values: Vec<bool> = self
            .nodes
            .iter()
            .map(|node| {
                !node.attributes.is_empty()
                    || !node.slot_variables.is_empty()
                    || node.registered_saver.is_some()
            })
            .collect();
        let mut stack: Vec<usize> = (0..self.nodes.len()).filter(|&i| has_values[i]).collect();
        while let Some(idx) = stack.pop() {
            for &parent in &parents[idx] {
                if !has_values[parent] {
                    has_values[parent] = true;
                    stack.push(parent);
                }
            }
        }
        has_values
    }

    /// Sets every attribute's `checkpoint_key` to the key 13.4 derives for it, where there is
    /// one (see [`ObjectGraph::derived_keys`]).
    pub fn fill_checkpoint_keys(&mut self) {
        let keys = self.derived_keys();
        for (node, keys) in self.nodes.iter_mut().zip(keys) {
            for (attribute, key) in node.attributes.iter_mut().zip(keys) {
                if let Some(key) = key {
                    attribute.checkpoint_key = key;
                }
            }
        }
    }

    /// Sets every node's `has_checkpoint_values` to [`ObjectGraph::computed_has_values`].
    pub fn fill_has_values(&mut self) {
        let values = self.computed_has_values();
        for (node, value) in self.nodes.iter_mut().zip(values) {
            node.has_checkpoint_values = Some(value);
        }
    }
}

/// Escapes one local name for a checkpoint key (13.4): every `.` becomes `..`, then every `/`
/// becomes `.S` (`a/b.c` → `a.Sb..c`).
pub fn escape_local_name(name: &str) -> String {
    name.replace('.', "..").replace('/', ".S")
}

/// The object path of a list of unescaped local names: escaped and joined with `/`.
pub fn object_path(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| escape_local_name(name))
        .collect::<Vec<_>>()
        .join("/")
}

/// The key of attribute `name` of the object whose key prefix is `prefix`:
/// `<prefix>/.ATTRIBUTES/<escaped name>`.
pub fn attribute_key(prefix: &str, name: &str) -> String {
    format!("{prefix}/{ATTRIBUTES}/{}", escape_local_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_13_4() {
        assert_eq!(escape_local_name("a/b.c"), "a.Sb..c");
        assert_eq!(escape_local_name(".S"), "..S");
        assert_eq!(escape_local_name("dotted.attr"), "dotted..attr");
        assert_eq!(
            attribute_key("custom", "with.Sslash..dot"),
            "custom/.ATTRIBUTES/with..Sslash....dot"
        );
    }

    #[test]
    fn ids_out_of_range_are_errors() {
        let node = ObjectNode {
            children: vec![ChildRef {
                node_id: NodeId(3),
                local_name: "x".into(),
            }],
            ..ObjectNode::default()
        };
        let err = ObjectGraph::new(vec![node]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 0: children names node 3, but the graph has 1 nodes"
        );
        assert_eq!(ObjectGraph::new(Vec::new()), Err(ObjectGraphError::Empty));
    }

    #[test]
    fn shortest_path_wins_and_cycles_terminate() {
        let var = ObjectNode {
            attributes: vec![Attribute {
                name: VARIABLE_VALUE.into(),
                full_name: "kernel".into(),
                checkpoint_key: String::new(),
            }],
            ..ObjectNode::default()
        };
        let edge = |id, name: &str| ChildRef {
            node_id: NodeId(id),
            local_name: name.into(),
        };
        let root = ObjectNode {
            children: vec![edge(1, "encoder"), edge(2, "shared"), edge(0, "root")],
            ..ObjectNode::default()
        };
        let encoder = ObjectNode {
            children: vec![edge(2, "kernel")],
            ..ObjectNode::default()
        };
        let graph = ObjectGraph::new(vec![root, encoder, var, ObjectNode::default()]).unwrap();
        assert_eq!(
            graph.derived_keys()[2],
            vec![Some("shared/.ATTRIBUTES/VARIABLE_VALUE".to_owned())]
        );
        assert_eq!(graph.computed_has_values(), vec![true, true, true, false]);
        assert_eq!(graph.key_prefixes()[3], None);
    }
}
