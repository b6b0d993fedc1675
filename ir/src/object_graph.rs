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
//!
//! # What one graph may cost
//!
//! Every walk over a graph is linear in its size, and a graph's size is capped so that what
//! derives from it (each node's path, printed or made into keys) stays bounded too. The caps
//! are far above any real model (a Keras model of a million variables has paths a dozen names
//! deep) and each error names its cap:
//!
//! * [`MAX_OBJECT_NODES`] nodes (1,048,576);
//! * [`MAX_OBJECT_REFERENCES`] children edges, attributes and slot-variable references, all
//!   nodes together (4,194,304), checked before a serialized graph is decoded;
//! * [`MAX_OBJECT_DEPTH`] local names in one node's first-discovered path (1,000);
//! * [`MAX_OBJECT_PATH_NAMES`] local names (8,388,608) and [`MAX_OBJECT_PATH_BYTES`] bytes
//!   (268,435,456, each name with one separator) in the paths the graph's names, keys and
//!   printed tree are made of, all together: one path per child edge, one more per edge that
//!   is not first-discovered (its target's), one per attribute (its object's) and two per
//!   slot-variable reference (its optimizer's and its variable's).
//!
//! A slot variable is named from its variable's and optimizer's own paths, never from another
//! slot variable's name, so no name grows with a chain of slots.

/// The tensor key under which a checkpoint stores its serialized object graph.
pub const OBJECT_GRAPH_KEY: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";
/// The attribute name of a variable's value.
pub const VARIABLE_VALUE: &str = "VARIABLE_VALUE";
/// The path component that separates an object path from an attribute name in a key.
pub const ATTRIBUTES: &str = ".ATTRIBUTES";
/// The path component that separates a variable's path from its optimizer's in a slot key.
pub const OPTIMIZER_SLOT: &str = ".OPTIMIZER_SLOT";

/// Most nodes an object graph may have.
pub const MAX_OBJECT_NODES: usize = 1 << 20;
/// Most children edges, attributes and slot-variable references an object graph may have, all
/// nodes together.
pub const MAX_OBJECT_REFERENCES: usize = 1 << 22;
/// Most local names in one node's first-discovered path.
pub const MAX_OBJECT_DEPTH: usize = 1_000;
/// Most local names in the paths an object graph's names, keys and printed tree are made of,
/// all together (see the module docs for which paths).
pub const MAX_OBJECT_PATH_NAMES: u64 = 1 << 23;
/// Most bytes in the paths an object graph's names, keys and printed tree are made of, all
/// together, each local name counted with one separator.
pub const MAX_OBJECT_PATH_BYTES: u64 = 1 << 28;

/// The id of a node: its index in [`ObjectGraph::nodes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ObjectGraph {
    nodes: Vec<ObjectNode>,
}

/// One object (`TrackableObject`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ObjectNode {
    /// Named edges to children, in the object's own order.
    pub children: Vec<ChildRef>,
    /// The tensors saved for this object, in order.
    pub attributes: Vec<Attribute>,
    /// On an optimizer: its slot variables.
    pub slot_variables: Vec<SlotVariable>,
    /// The registered saver that saves this object, if any.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub registered_saver: Option<RegisteredSaver>,
    /// Whether the object or anything reachable from it has values; `None` when the field was
    /// absent (TensorFlow 2.21 always writes it, see [`ObjectGraph::computed_has_values`]).
    pub has_checkpoint_values: Option<bool>,
}

/// A named edge to a child (`ObjectReference`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ChildRef {
    /// The child.
    pub node_id: NodeId,
    /// The child's name in its parent, unescaped (`a/b.c`).
    pub local_name: String,
}

/// One saved tensor of an object (`SerializedTensor`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
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
    /// More nodes than [`MAX_OBJECT_NODES`].
    #[error(
        "the object graph has {n_nodes} nodes, above the limit of {MAX_OBJECT_NODES} (MAX_OBJECT_NODES)"
    )]
    TooManyNodes {
        /// How many nodes there are.
        n_nodes: usize,
    },
    /// More references than [`MAX_OBJECT_REFERENCES`].
    #[error(
        "the object graph has {n_references} children edges, attributes and slot-variable references, above the limit of {MAX_OBJECT_REFERENCES} (MAX_OBJECT_REFERENCES)"
    )]
    TooManyReferences {
        /// How many there are (counted up to the first past the limit).
        n_references: usize,
    },
    /// A first-discovered path longer than [`MAX_OBJECT_DEPTH`].
    #[error(
        "{node}: its path from the root is more than {MAX_OBJECT_DEPTH} objects deep (MAX_OBJECT_DEPTH)"
    )]
    TooDeep {
        /// The first node found that deep.
        node: NodeId,
    },
    /// The paths of the graph's edges, attributes and slots hold more than
    /// [`MAX_OBJECT_PATH_NAMES`] local names together.
    #[error(
        "the object paths of the graph's edges, attributes and slots hold more than {MAX_OBJECT_PATH_NAMES} local names together (MAX_OBJECT_PATH_NAMES)"
    )]
    TooManyPathNames,
    /// The paths of the graph's edges, attributes and slots are longer than
    /// [`MAX_OBJECT_PATH_BYTES`] together.
    #[error(
        "the object paths of the graph's edges, attributes and slots are longer than {MAX_OBJECT_PATH_BYTES} bytes together (MAX_OBJECT_PATH_BYTES)"
    )]
    PathsTooLong,
}

/// Each node's first-discovered edge from the root (13.1), the breadth-first tree every path
/// is read from: a path is its parent's path and one local name, so no path is stored whole.
#[derive(Clone, Debug)]
pub struct PathTree<'a> {
    /// For each node, its parent in the tree and the local name of the edge; `None` for the
    /// root and for nodes no child edge reaches (slot variables).
    pub parent: Vec<Option<(NodeId, &'a str)>>,
    /// The reached nodes in breadth-first order, the root first: every parent before its
    /// children.
    pub order: Vec<NodeId>,
}

impl<'a> PathTree<'a> {
    /// Whether a child edge reaches `id` (the root counts as reached).
    pub fn is_reached(&self, id: NodeId) -> bool {
        id == NodeId::ROOT || self.parent[id.index()].is_some()
    }

    /// The local names of `id`'s path from the root, root side first (empty for the root and
    /// for unreached nodes).
    pub fn path(&self, id: NodeId) -> Vec<&'a str> {
        let mut names = Vec::new();
        let mut at = id;
        while let Some((parent, name)) = self.parent[at.index()] {
            names.push(name);
            at = parent;
        }
        names.reverse();
        names
    }

    /// Whether `child`, an edge of `parent`, is the edge that first discovered its target.
    pub fn is_first_edge(&self, parent: NodeId, child: &ChildRef) -> bool {
        matches!(
            self.parent[child.node_id.index()],
            Some((first, name)) if first == parent && std::ptr::eq(name, child.local_name.as_str())
        )
    }

    /// For each node, `f(parent's value, local name)` along the tree, starting from `root` at
    /// the root: each node's value built from its parent's, in one pass. `None` for nodes no
    /// child edge reaches.
    pub fn fold<T: Clone>(&self, root: T, mut f: impl FnMut(&T, &str) -> T) -> Vec<Option<T>> {
        let mut values: Vec<Option<T>> = vec![None; self.parent.len()];
        values[0] = Some(root);
        for &id in &self.order[1..] {
            let (parent, name) = self.parent[id.index()].expect("reached nodes have a parent");
            let value = f(
                values[parent.index()].as_ref().expect("parents come first"),
                name,
            );
            values[id.index()] = Some(value);
        }
        values
    }
}

/// Lookups into an [`ObjectGraph`] by name, each O(1): a node's first child of a local name, an
/// optimizer's first slot of a variable and slot name, a node's first attribute of a name.
/// Matching a graph against another, or paths against a graph, through these costs the paths,
/// not their product with a node's children.
#[derive(Clone, Debug, Default)]
pub struct GraphIndex<'a> {
    children: rustc_hash::FxHashMap<(NodeId, &'a str), NodeId>,
    slots: rustc_hash::FxHashMap<(NodeId, NodeId, &'a str), NodeId>,
    attributes: rustc_hash::FxHashMap<(NodeId, &'a str), &'a Attribute>,
}

impl<'a> GraphIndex<'a> {
    /// The index of `graph`.
    pub fn new(graph: &'a ObjectGraph) -> GraphIndex<'a> {
        let mut index = GraphIndex::default();
        for (idx, node) in graph.nodes.iter().enumerate() {
            let id = NodeId(idx as u32);
            for child in &node.children {
                index
                    .children
                    .entry((id, child.local_name.as_str()))
                    .or_insert(child.node_id);
            }
            for slot in &node.slot_variables {
                index
                    .slots
                    .entry((id, slot.original_variable_node_id, slot.slot_name.as_str()))
                    .or_insert(slot.slot_variable_node_id);
            }
            for attribute in &node.attributes {
                index
                    .attributes
                    .entry((id, attribute.name.as_str()))
                    .or_insert(attribute);
            }
        }
        index
    }

    /// The first child of `parent` named `name`.
    pub fn child(&self, parent: NodeId, name: &str) -> Option<NodeId> {
        self.children.get(&(parent, name)).copied()
    }

    /// The node at `path` from the root, following each name's first child.
    pub fn node_at<S: AsRef<str>>(&self, path: &[S]) -> Option<NodeId> {
        path.iter()
            .try_fold(NodeId::ROOT, |node, name| self.child(node, name.as_ref()))
    }

    /// The first slot variable `slot_name` of `variable` held by `optimizer`.
    pub fn slot(&self, optimizer: NodeId, variable: NodeId, slot_name: &str) -> Option<NodeId> {
        self.slots.get(&(optimizer, variable, slot_name)).copied()
    }

    /// The first attribute of `node` named `name`.
    pub fn attribute(&self, node: NodeId, name: &str) -> Option<&'a Attribute> {
        self.attributes.get(&(node, name)).copied()
    }
}

impl ObjectGraph {
    /// A graph of `nodes`, after checking that every id in them names a node.
    pub fn new(nodes: Vec<ObjectNode>) -> Result<ObjectGraph, ObjectGraphError> {
        if nodes.is_empty() {
            return Err(ObjectGraphError::Empty);
        }
        let n_nodes = nodes.len();
        if n_nodes > MAX_OBJECT_NODES {
            return Err(ObjectGraphError::TooManyNodes { n_nodes });
        }
        let n_references: usize = nodes
            .iter()
            .map(|node| node.children.len() + node.attributes.len() + node.slot_variables.len())
            .sum();
        if n_references > MAX_OBJECT_REFERENCES {
            return Err(ObjectGraphError::TooManyReferences { n_references });
        }
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
        let graph = ObjectGraph { nodes };
        graph.check_paths()?;
        Ok(graph)
    }

    /// Checks the first-discovered paths against [`MAX_OBJECT_DEPTH`], and the paths the
    /// graph's names, keys and printed tree are made of against [`MAX_OBJECT_PATH_NAMES`] and
    /// [`MAX_OBJECT_PATH_BYTES`]: one per child edge of a reached node (its parent's path and
    /// its local name), one more per edge that is not first-discovered (its target's path),
    /// one per attribute (its object's path) and two per slot-variable reference (the
    /// optimizer's and the variable's paths). Each from its parent's depth and length, in one
    /// pass: linear in the graph.
    fn check_paths(&self) -> Result<(), ObjectGraphError> {
        let tree = self.path_tree();
        // Each reached node's path: (local names, bytes with one separator per name).
        let mut own: Vec<(u64, u64)> = vec![(0, 0); self.nodes.len()];
        for &id in &tree.order[1..] {
            let (parent, name) = tree.parent[id.index()].expect("reached nodes have a parent");
            let (names, bytes) = own[parent.index()];
            if names as usize >= MAX_OBJECT_DEPTH {
                return Err(ObjectGraphError::TooDeep { node: id });
            }
            own[id.index()] = (names + 1, bytes + name.len() as u64 + 1);
        }
        let (mut names, mut bytes) = (0u64, 0u64);
        let mut add = |(n, b): (u64, u64)| {
            names += n;
            bytes += b;
            if names > MAX_OBJECT_PATH_NAMES {
                Err(ObjectGraphError::TooManyPathNames)
            } else if bytes > MAX_OBJECT_PATH_BYTES {
                Err(ObjectGraphError::PathsTooLong)
            } else {
                Ok(())
            }
        };
        for (idx, node) in self.nodes.iter().enumerate() {
            let id = NodeId(idx as u32);
            let (n, b) = own[idx];
            for _ in &node.attributes {
                add((n, b))?;
            }
            for slot in &node.slot_variables {
                add((n, b))?;
                add(own[slot.original_variable_node_id.index()])?;
            }
            if !tree.is_reached(id) {
                continue;
            }
            for child in &node.children {
                add((n + 1, b + child.local_name.len() as u64 + 1))?;
                if !tree.is_first_edge(id, child) {
                    add(own[child.node_id.index()])?;
                }
            }
        }
        Ok(())
    }

    /// Each reached node's object path (13.4): its first-discovered path's local names,
    /// escaped and joined with `/` (`""` for the root), each built from its parent's. `None`
    /// for nodes no child edge reaches.
    pub fn object_paths(&self) -> Vec<Option<String>> {
        self.path_tree().fold(String::new(), |parent, name| {
            let escaped = escape_local_name(name);
            if parent.is_empty() {
                escaped
            } else {
                format!("{parent}/{escaped}")
            }
        })
    }

    /// The breadth-first tree of first-discovered edges (13.1), in child order, so the
    /// shortest path wins and ties go to the earlier edge. Linear in the graph.
    pub fn path_tree(&self) -> PathTree<'_> {
        let mut parent: Vec<Option<(NodeId, &str)>> = vec![None; self.nodes.len()];
        let mut order = vec![NodeId::ROOT];
        let mut next = 0;
        while let Some(&id) = order.get(next) {
            next += 1;
            for child in &self.node(id).children {
                let target = child.node_id;
                if target != NodeId::ROOT && parent[target.index()].is_none() {
                    parent[target.index()] = Some((id, child.local_name.as_str()));
                    order.push(target);
                }
            }
        }
        PathTree { parent, order }
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
    /// earlier edge. `None` for nodes no child edge reaches (slot variables). Each path is a
    /// list of its own; [`ObjectGraph::path_tree`] shares the prefixes.
    pub fn paths(&self) -> Vec<Option<Vec<&str>>> {
        let tree = self.path_tree();
        let mut paths = Vec::with_capacity(self.nodes.len());
        for idx in 0..self.nodes.len() {
            let id = NodeId(idx as u32);
            paths.push(tree.is_reached(id).then(|| tree.path(id)));
        }
        paths
    }

    /// For each node, the part of its keys before `/.ATTRIBUTES/` (13.4): the escaped object
    /// path for objects reached through children (`""` for the root), and
    /// `<variable path>/.OPTIMIZER_SLOT/<optimizer path>/<escaped slot name>` for slot
    /// variables. `None` for a node that is neither.
    pub fn key_prefixes(&self) -> Vec<Option<String>> {
        let tree = self.path_tree();
        let mut prefixes = self.object_paths();
        // A slot's variable and optimizer are named by their own paths, never by another
        // slot's key (TensorFlow gives slots only to objects reached through children), so a
        // chain of slots costs one key each.
        for (optimizer, node) in self.nodes.iter().enumerate() {
            for slot in &node.slot_variables {
                let slot_id = slot.slot_variable_node_id.index();
                let (variable, optimizer) =
                    (slot.original_variable_node_id, NodeId(optimizer as u32));
                if prefixes[slot_id].is_some()
                    || !tree.is_reached(variable)
                    || !tree.is_reached(optimizer)
                {
                    continue;
                }
                let (Some(variable), Some(optimizer)) =
                    (&prefixes[variable.index()], &prefixes[optimizer.index()])
                else {
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
