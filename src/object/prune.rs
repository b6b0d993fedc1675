//! An object graph made to match the values written beside it when some were left out
//! (`convert --skip-strings`, `convert --keys`): TensorFlow's `Checkpoint.read` looks up every
//! attribute the graph names and fails with `NotFoundError` on a missing key, so the graph
//! written must name only what is there.

use std::collections::BTreeSet;

use saveplan_ir::object_graph::ObjectGraph;

/// `graph` without the attributes whose values are among `left_out` (an attribute's own key,
/// or, for a legacy saveable whose key is a prefix, any key extending it: the attribute goes
/// whole), `has_checkpoint_values` recomputed; `None` when no attribute names a key left out
/// (the graph is then kept as it is, byte for byte).
pub fn without_attributes_of(
    graph: &ObjectGraph,
    left_out: &BTreeSet<&str>,
) -> Option<ObjectGraph> {
    let names_left_out = |key: &str| {
        // Keys extending `key` sort right after it.
        left_out
            .range(key..)
            .next()
            .is_some_and(|first| first.starts_with(key))
    };
    let touched = graph.nodes().iter().any(|node| {
        node.attributes
            .iter()
            .any(|attribute| names_left_out(&attribute.checkpoint_key))
    });
    if !touched {
        return None;
    }
    let mut nodes = graph.nodes().to_vec();
    for node in &mut nodes {
        node.attributes
            .retain(|attribute| !names_left_out(&attribute.checkpoint_key));
    }
    let mut pruned = ObjectGraph::new(nodes).expect("only attributes were removed");
    pruned.fill_has_values();
    Some(pruned)
}

#[cfg(test)]
mod tests {
    use saveplan_ir::object_graph::{Attribute, ChildRef, NodeId, ObjectNode};

    use super::*;

    fn attribute(name: &str, key: &str) -> Attribute {
        Attribute {
            name: name.to_owned(),
            full_name: String::new(),
            checkpoint_key: key.to_owned(),
        }
    }

    #[test]
    fn attributes_of_left_out_keys_go_and_the_rest_stays() {
        let graph = ObjectGraph::new(vec![
            ObjectNode {
                children: vec![ChildRef {
                    node_id: NodeId(1),
                    local_name: "net".to_owned(),
                }],
                ..ObjectNode::default()
            },
            ObjectNode {
                attributes: vec![
                    attribute("VARIABLE_VALUE", "net/.ATTRIBUTES/VARIABLE_VALUE"),
                    attribute("table", "net/.ATTRIBUTES/table"),
                    attribute("names", "net/.ATTRIBUTES/names"),
                ],
                ..ObjectNode::default()
            },
        ])
        .unwrap();
        let none = BTreeSet::new();
        assert!(without_attributes_of(&graph, &none).is_none());
        let left_out = BTreeSet::from(["net/.ATTRIBUTES/names", "net/.ATTRIBUTES/table-keys"]);
        let pruned = without_attributes_of(&graph, &left_out).unwrap();
        let kept: Vec<&str> = pruned.nodes()[1]
            .attributes
            .iter()
            .map(|attribute| attribute.name.as_str())
            .collect();
        assert_eq!(kept, ["VARIABLE_VALUE"]);
        assert_eq!(pruned.nodes()[0].has_checkpoint_values, Some(true));
    }
}
