//! `TrackableObjectGraph` ↔ [`ObjectGraph`]: the serialized object graph an object-based
//! checkpoint stores under `_CHECKPOINTABLE_OBJECT_GRAPH`, byte for byte as TensorFlow writes
//! it (FORMATS.md 13.2: fields in number order, proto3 defaults omitted, a present
//! `has_checkpoint_values` always written, `2a 00` when false).

use prost::Message as _;
use saveplan_ir::object_graph::{
    Attribute, ChildRef, MAX_OBJECT_NODES, MAX_OBJECT_REFERENCES, NodeId, ObjectGraph,
    ObjectGraphError, ObjectNode, RegisteredSaver, SlotVariable,
};
use saveplan_proto::tensorflow::{self as pb, trackable_object_graph as tog};

/// Why bytes are not a valid object graph.
#[derive(Debug, thiserror::Error)]
pub enum ObjectGraphDecodeError {
    /// The bytes are not a `TrackableObjectGraph` message.
    #[error("the object graph is not a valid TrackableObjectGraph message")]
    Protobuf(#[source] prost::DecodeError),
    /// A node id is negative.
    #[error("node {node}: {field} is negative ({value})")]
    NegativeId {
        /// The node holding the reference.
        node: usize,
        /// Which field.
        field: &'static str,
        /// The value as stored.
        value: i32,
    },
    /// The nodes do not form a graph (an id names no node, or there are no nodes).
    #[error(transparent)]
    Graph(#[from] ObjectGraphError),
}

/// Encodes `graph` as TensorFlow writes it.
pub fn encode(graph: &ObjectGraph) -> Vec<u8> {
    to_proto(graph).encode_to_vec()
}

/// Decodes a serialized `TrackableObjectGraph` and checks that every id names a node. The
/// nodes and references are counted on the wire first, so a graph above
/// [`MAX_OBJECT_NODES`] or [`MAX_OBJECT_REFERENCES`] is refused before anything is decoded
/// (decoding costs some hundred bytes per node or reference, and an empty one is two bytes).
pub fn decode(bytes: &[u8]) -> Result<ObjectGraph, ObjectGraphDecodeError> {
    let (mut n_nodes, mut n_references) = (0usize, 0usize);
    for_each_message(bytes, &mut |field, node| {
        if field == 1 {
            n_nodes += 1;
            for_each_message(node, &mut |field, _| {
                n_references += usize::from((1..=3).contains(&field));
            });
        }
    });
    if n_nodes > MAX_OBJECT_NODES {
        return Err(ObjectGraphError::TooManyNodes { n_nodes }.into());
    }
    if n_references > MAX_OBJECT_REFERENCES {
        return Err(ObjectGraphError::TooManyReferences { n_references }.into());
    }
    let message =
        pb::TrackableObjectGraph::decode(bytes).map_err(ObjectGraphDecodeError::Protobuf)?;
    let nodes = message
        .nodes
        .into_iter()
        .enumerate()
        .map(|(idx, node)| node_from_proto(idx, node))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ObjectGraph::new(nodes)?)
}

/// Calls `f` with the field number and bytes of each length-delimited field of the message
/// `bytes`, skipping the others; stops quietly at the first malformed field (decoding reports
/// it).
fn for_each_message(bytes: &[u8], f: &mut dyn FnMut(u32, &[u8])) {
    let mut rest = bytes;
    while let Some(field) = super::wire::next_field(&mut rest) {
        if let Some(payload) = field.payload() {
            f(field.number, payload);
        }
    }
}

/// One node in protobuf text format, as Python prints a `TrackableObject` (`str(node)`:
/// one field per line, trailing newline), the form TensorFlow's load-status messages quote.
pub fn node_text(node: &ObjectNode) -> String {
    saveplan_proto::text::to_text(&node_to_proto(node))
}

fn to_proto(graph: &ObjectGraph) -> pb::TrackableObjectGraph {
    let nodes = graph.nodes().iter().map(node_to_proto).collect();
    pb::TrackableObjectGraph { nodes }
}

fn node_to_proto(node: &ObjectNode) -> tog::TrackableObject {
    tog::TrackableObject {
        children: node
            .children
            .iter()
            .map(|child| tog::trackable_object::ObjectReference {
                node_id: id_to_proto(child.node_id),
                local_name: child.local_name.clone(),
            })
            .collect(),
        attributes: node
            .attributes
            .iter()
            .map(|attribute| tog::trackable_object::SerializedTensor {
                name: attribute.name.clone(),
                full_name: attribute.full_name.clone(),
                checkpoint_key: attribute.checkpoint_key.clone(),
            })
            .collect(),
        slot_variables: node
            .slot_variables
            .iter()
            .map(|slot| tog::trackable_object::SlotVariableReference {
                original_variable_node_id: id_to_proto(slot.original_variable_node_id),
                slot_name: slot.slot_name.clone(),
                slot_variable_node_id: id_to_proto(slot.slot_variable_node_id),
            })
            .collect(),
        registered_saver: node
            .registered_saver
            .as_ref()
            .map(|saver| pb::RegisteredSaver {
                name: saver.name.clone(),
                object_name: saver.object_name.clone(),
            }),
        has_checkpoint_values: node.has_checkpoint_values,
    }
}

/// Node ids come from a `Vec` index; a graph with more than `i32::MAX` nodes cannot exist in
/// memory as protobuf either, so the conversion saturates rather than fails.
fn id_to_proto(id: NodeId) -> i32 {
    i32::try_from(id.0).unwrap_or(i32::MAX)
}

fn id_from_proto(
    node: usize,
    field: &'static str,
    value: i32,
) -> Result<NodeId, ObjectGraphDecodeError> {
    u32::try_from(value)
        .map(NodeId)
        .map_err(|_| ObjectGraphDecodeError::NegativeId { node, field, value })
}

fn node_from_proto(
    idx: usize,
    node: tog::TrackableObject,
) -> Result<ObjectNode, ObjectGraphDecodeError> {
    let children = node
        .children
        .into_iter()
        .map(|child| {
            Ok(ChildRef {
                node_id: id_from_proto(idx, "children.node_id", child.node_id)?,
                local_name: child.local_name,
            })
        })
        .collect::<Result<_, ObjectGraphDecodeError>>()?;
    let slot_variables = node
        .slot_variables
        .into_iter()
        .map(|slot| {
            Ok(SlotVariable {
                original_variable_node_id: id_from_proto(
                    idx,
                    "slot_variables.original_variable_node_id",
                    slot.original_variable_node_id,
                )?,
                slot_name: slot.slot_name,
                slot_variable_node_id: id_from_proto(
                    idx,
                    "slot_variables.slot_variable_node_id",
                    slot.slot_variable_node_id,
                )?,
            })
        })
        .collect::<Result<_, ObjectGraphDecodeError>>()?;
    Ok(ObjectNode {
        children,
        attributes: node
            .attributes
            .into_iter()
            .map(|attribute| Attribute {
                name: attribute.name,
                full_name: attribute.full_name,
                checkpoint_key: attribute.checkpoint_key,
            })
            .collect(),
        slot_variables,
        registered_saver: node.registered_saver.map(|saver| RegisteredSaver {
            name: saver.name,
            object_name: saver.object_name,
        }),
        has_checkpoint_values: node.has_checkpoint_values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn false_has_values_is_an_empty_message_and_node_0_is_omitted() {
        let root = ObjectNode {
            children: vec![ChildRef {
                node_id: NodeId(0),
                local_name: "root".into(),
            }],
            has_checkpoint_values: Some(false),
            ..ObjectNode::default()
        };
        let graph = ObjectGraph::new(vec![root]).unwrap();
        let bytes = encode(&graph);
        assert_eq!(
            bytes,
            [
                0x0a, 0x0a, 0x0a, 0x06, 0x12, 0x04, b'r', b'o', b'o', b't', 0x2a, 0x00
            ]
        );
        assert_eq!(decode(&bytes).unwrap(), graph);
    }

    #[test]
    fn hostile_bytes_are_errors() {
        assert!(matches!(
            decode(&[0x0a, 0x05, 0xff]),
            Err(ObjectGraphDecodeError::Protobuf(_))
        ));
        // One node with a child edge to node -1.
        let bytes = [
            0x0a, 0x0d, 0x0a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0x01,
        ];
        let err = decode(&bytes).unwrap_err();
        assert_eq!(err.to_string(), "node 0: children.node_id is negative (-1)");
        assert!(matches!(
            decode(&[]),
            Err(ObjectGraphDecodeError::Graph(ObjectGraphError::Empty))
        ));
    }
}
