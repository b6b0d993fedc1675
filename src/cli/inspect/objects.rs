//! `saveplan inspect PREFIX --objects [--json]`: the object graph of an object-based
//! checkpoint, as an indented tree of objects and their tensors, or as the graph's nodes in
//! JSON with the protobuf's field names.
//!
//! The tree follows each object's first-discovered path (the one its keys use): an object
//! reached by several paths is shown once, with a note naming the other paths, and the other
//! edges print as `name: see PATH`. Slot variables are shown under their variable.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use saveplan::bundle::{BundleReader, Entry};
use saveplan::checkpoint::{NodeId, ObjectGraph};
use saveplan_ir::object_graph::{PathTree, SlotVariable, object_path};

use super::shape_text;

/// The tree text of `graph`, with dtypes and shapes from `reader`. Linear in the graph and its
/// printed paths, which [`ObjectGraph::new`]'s caps bound.
pub fn tree(graph: &ObjectGraph, reader: &BundleReader) -> String {
    let paths = graph.object_paths();
    let path_tree = graph.path_tree();
    // Every edge that is not a node's first-discovered one, by target.
    let mut also: BTreeMap<NodeId, Vec<String>> = BTreeMap::new();
    for &id in &path_tree.order {
        for child in &graph.node(id).children {
            if !path_tree.is_first_edge(id, child) {
                also.entry(child.node_id)
                    .or_default()
                    .push(join(paths[id.index()].as_deref(), &child.local_name));
            }
        }
    }
    // Each variable's slot variables, optimizers in id order.
    let mut slots: Vec<Vec<(usize, &SlotVariable)>> = vec![Vec::new(); graph.nodes().len()];
    let mut is_slot = vec![false; graph.nodes().len()];
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            slots[slot.original_variable_node_id.index()].push((optimizer, slot));
            is_slot[slot.slot_variable_node_id.index()] = true;
        }
    }
    let printer = Printer {
        graph,
        reader,
        paths: &paths,
        also: &also,
        path_tree: &path_tree,
        slots: &slots,
    };
    let mut out = String::new();
    printer.object(&mut out, NodeId::ROOT, 0);
    for (idx, _) in graph.nodes().iter().enumerate() {
        let id = NodeId(idx as u32);
        if !path_tree.is_reached(id) && !is_slot[idx] {
            let _ = writeln!(out, "unreachable [{id}]");
            printer.attributes(&mut out, id, 1);
        }
    }
    out
}

/// `--objects --json`: `{"nodes": [...]}`, one object per node in node order, every field
/// present in the protobuf's field order (the IR's own `Serialize`), `registered_saver` only
/// when set, `has_checkpoint_values` computed where the checkpoint left it out.
pub fn json(graph: &ObjectGraph) -> anyhow::Result<String> {
    let computed = graph.computed_has_values();
    let mut nodes = graph.nodes().to_vec();
    for (node, computed) in nodes.iter_mut().zip(computed) {
        node.has_checkpoint_values.get_or_insert(computed);
    }
    let graph = ObjectGraph::new(nodes)?;
    Ok(serde_json::to_string_pretty(&graph)?)
}

fn join(parent: Option<&str>, local_name: &str) -> String {
    let escaped = object_path(&[local_name]);
    match parent {
        Some("") | None => escaped,
        Some(parent) => format!("{parent}/{escaped}"),
    }
}

struct Printer<'a> {
    graph: &'a ObjectGraph,
    reader: &'a BundleReader,
    paths: &'a [Option<String>],
    also: &'a BTreeMap<NodeId, Vec<String>>,
    /// Each node's first-discovered edge.
    path_tree: &'a PathTree<'a>,
    /// For each variable, its slot variables and their optimizers.
    slots: &'a [Vec<(usize, &'a SlotVariable)>],
}

impl Printer<'_> {
    fn object(&self, out: &mut String, id: NodeId, depth: usize) {
        let indent = "  ".repeat(depth);
        let path = match self.paths[id.index()].as_deref() {
            Some("") | None => "(root)",
            Some(path) => path,
        };
        let _ = write!(out, "{indent}{path} [{id}]");
        if let Some(others) = self.also.get(&id) {
            let _ = write!(out, ", also reached as {}", others.join(", "));
        }
        if self.graph.node(id).has_checkpoint_values == Some(false) {
            out.push_str(", no values");
        }
        out.push('\n');
        self.attributes(out, id, depth + 1);
        self.slots_of(out, id, depth + 1);
        let node = self.graph.node(id);
        for child in &node.children {
            if self.path_tree.is_first_edge(id, child) {
                self.object(out, child.node_id, depth + 1);
            } else {
                let target = self.paths[child.node_id.index()]
                    .as_deref()
                    .filter(|path| !path.is_empty())
                    .unwrap_or("(root)");
                let _ = writeln!(
                    out,
                    "{indent}  {}: see {target} [{}]",
                    join(self.paths[id.index()].as_deref(), &child.local_name),
                    child.node_id
                );
            }
        }
    }

    /// The slot variables whose variable is `id`, from every optimizer.
    fn slots_of(&self, out: &mut String, id: NodeId, depth: usize) {
        let indent = "  ".repeat(depth);
        for &(optimizer, slot) in &self.slots[id.index()] {
            let optimizer_path = self.paths[optimizer].as_deref().unwrap_or("?");
            let _ = writeln!(
                out,
                "{indent}slot {} of {optimizer_path} [{}]",
                slot.slot_name, slot.slot_variable_node_id
            );
            self.attributes(out, slot.slot_variable_node_id, depth + 1);
        }
    }

    fn attributes(&self, out: &mut String, id: NodeId, depth: usize) {
        let indent = "  ".repeat(depth);
        for attribute in &self.graph.node(id).attributes {
            let key = &attribute.checkpoint_key;
            if let Some(entry) = self.reader.entry(key) {
                let _ = writeln!(out, "{indent}{}: {}", attribute.name, entry_text(entry));
                continue;
            }
            // Legacy saveables store several tensors under one key prefix (13.15).
            // The entries are sorted by key: those extending `key` follow each other from
            // where `key` would be.
            let all = self.reader.entries();
            let start = all.partition_point(|entry| entry.key.as_str() < key.as_str());
            let entries: Vec<&Entry> = all[start..]
                .iter()
                .take_while(|entry| entry.key.starts_with(key.as_str()))
                .collect();
            if entries.is_empty() {
                let _ = writeln!(out, "{indent}{}: missing ({key})", attribute.name);
            }
            for entry in entries {
                let _ = writeln!(
                    out,
                    "{indent}{}: {} {}",
                    attribute.name,
                    entry.key,
                    entry_text(entry)
                );
            }
        }
    }
}

fn entry_text(entry: &Entry) -> String {
    format!(
        "{} {}",
        entry.dtype.proto_name().unwrap_or("DT_INVALID"),
        shape_text(&entry.shape)
    )
}
