//! `tf.train.Checkpoint`'s `save_counter` in the object graph (FORMATS.md 13.8): its name, its
//! key, its node (the root's last child once it exists) and its value as our value.

use saveplan_ir::DType;
use saveplan_ir::object_graph::{
    Attribute, ChildRef, NodeId, ObjectGraph, ObjectGraphError, ObjectNode, VARIABLE_VALUE,
};

use super::values::OurValue;

/// The local name and shared name of `tf.train.Checkpoint`'s save counter.
pub const SAVE_COUNTER: &str = "save_counter";

/// The checkpoint key of the save counter's value.
pub const SAVE_COUNTER_KEY: &str = "save_counter/.ATTRIBUTES/VARIABLE_VALUE";

/// `graph` with a `save_counter` variable as the root's last child: its node id is the next
/// after the root's other children (breadth-first order), later nodes move up by one.
/// `graph` must be within the caps with it ([`try_with_save_counter`]; `Checkpoint::new`
/// checks it).
pub fn with_save_counter(graph: &ObjectGraph) -> ObjectGraph {
    try_with_save_counter(graph).expect("Checkpoint::new checked it")
}

/// [`with_save_counter`], or the cap of [`ObjectGraph::new`] the counter's node and edge
/// would pass.
pub fn try_with_save_counter(graph: &ObjectGraph) -> Result<ObjectGraph, ObjectGraphError> {
    let mut graph = ObjectGraph::new(nodes_with_save_counter(graph.nodes().to_vec()))?;
    graph.fill_checkpoint_keys();
    graph.fill_has_values();
    Ok(graph)
}

/// Whether [`try_with_save_counter`] succeeds: the cap of [`ObjectGraph::new`] the counter's
/// node and edge would pass, if any (what `Checkpoint::new` checks). Checks what it checks
/// on a copy of what the caps count (the edges and their names, the slot-variable references,
/// how many attributes each node has), without copying the attributes' names and keys or
/// deriving those of the graph it would make.
pub fn check_save_counter_fits(graph: &ObjectGraph) -> Result<(), ObjectGraphError> {
    let skeleton = (graph.nodes().iter())
        .map(|node| ObjectNode {
            children: node.children.clone(),
            attributes: (node.attributes.iter())
                .map(|_| Attribute {
                    name: String::new(),
                    full_name: String::new(),
                    checkpoint_key: String::new(),
                })
                .collect(),
            slot_variables: node.slot_variables.clone(),
            ..ObjectNode::default()
        })
        .collect();
    ObjectGraph::new(nodes_with_save_counter(skeleton)).map(drop)
}

/// `nodes` (a graph's) with `save_counter`'s node inserted after the root's children (its key
/// not filled in), the later ids shifted.
fn nodes_with_save_counter(mut nodes: Vec<ObjectNode>) -> Vec<ObjectNode> {
    let id = nodes[0]
        .children
        .iter()
        .map(|child| child.node_id.0)
        .max()
        .unwrap_or(0)
        + 1;
    let shift = |node: &mut NodeId| {
        if node.0 >= id {
            node.0 += 1;
        }
    };
    for node in &mut nodes {
        node.children.iter_mut().for_each(|c| shift(&mut c.node_id));
        for slot in &mut node.slot_variables {
            shift(&mut slot.original_variable_node_id);
            shift(&mut slot.slot_variable_node_id);
        }
    }
    nodes[0].children.push(ChildRef {
        node_id: NodeId(id),
        local_name: SAVE_COUNTER.to_owned(),
    });
    let counter = ObjectNode {
        attributes: vec![Attribute {
            name: VARIABLE_VALUE.to_owned(),
            full_name: SAVE_COUNTER.to_owned(),
            checkpoint_key: String::new(),
        }],
        ..ObjectNode::default()
    };
    nodes.insert(id as usize, counter);
    nodes
}

/// `save_counter`'s value: an int64 scalar.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counter([u8; 8]);

impl Counter {
    pub(crate) fn new(value: i64) -> Counter {
        Counter(value.to_le_bytes())
    }
}

impl OurValue for Counter {
    fn dtype(&self) -> DType {
        DType::Int64
    }

    fn dims(&self) -> &[u64] {
        &[]
    }

    fn bytes(&self) -> Option<&[u8]> {
        Some(&self.0)
    }
}
