//! Hostile object graphs and object specs: what one graph may cost is capped
//! (`saveplan_ir::object_graph`'s `MAX_OBJECT_*`, each error one line naming its cap), a chain of
//! slot variables costs one name per link, and a fresh variable is bounded as a constant is
//! before anything is allocated. The per-variable cost of an object spec is counted in
//! allocations of the calling thread, at N and 4N variables and at depth D and 4D.

use std::cell::Cell;
use std::path::Path;

use prost::Message;
use saveplan::bundle::{BundleReader, BundleWriter, DType};
use saveplan::checkpoint::{OBJECT_GRAPH_KEY, ObjectSpec, RestoreKind, read_object_graph};
use saveplan_ir::object_graph::{MAX_OBJECT_DEPTH, MAX_OBJECT_NODES};
use saveplan_proto::tensorflow::{self as pb, trackable_object_graph as tog};

use crate::support::{ErrorForm, error_chain};

/// A node of a serialized graph.
pub type Node = tog::TrackableObject;

/// The value [`write_checkpoint`] stores under each key.
pub const VALUE: [f32; 2] = [1.5, -2.0];

/// An edge to `node_id` named `name`.
pub fn edge(node_id: i32, name: &str) -> tog::trackable_object::ObjectReference {
    tog::trackable_object::ObjectReference {
        node_id,
        local_name: name.to_owned(),
    }
}

/// A reference to slot variable `slot`, slot `name` of `variable`.
pub fn slot_ref(
    variable: i32,
    name: &str,
    slot: i32,
) -> tog::trackable_object::SlotVariableReference {
    tog::trackable_object::SlotVariableReference {
        original_variable_node_id: variable,
        slot_name: name.to_owned(),
        slot_variable_node_id: slot,
    }
}

/// A variable's node, its value under `key`.
pub fn variable(key: &str) -> Node {
    Node {
        attributes: vec![tog::trackable_object::SerializedTensor {
            name: "VARIABLE_VALUE".to_owned(),
            full_name: "Variable".to_owned(),
            checkpoint_key: key.to_owned(),
        }],
        ..Node::default()
    }
}

/// Writes a CRC-valid checkpoint at `prefix` holding `graph` (as given: nothing checks it)
/// and the float32 `[2]` value [`VALUE`] under each key in `keys`.
pub fn write_checkpoint(prefix: &Path, graph: &[u8], keys: &[&str]) {
    let mut writer = BundleWriter::create(prefix).unwrap();
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort_unstable();
    for key in sorted {
        let bytes: Vec<u8> = VALUE.iter().flat_map(|x| x.to_le_bytes()).collect();
        writer.add(key, DType::Float, &[2], &bytes).unwrap();
    }
    writer
        .add_strings(OBJECT_GRAPH_KEY, &[], &[graph.to_vec()])
        .unwrap();
    writer.finish().unwrap();
}

/// The serialized graph of `nodes`.
pub fn encoded(nodes: Vec<Node>) -> Vec<u8> {
    pb::TrackableObjectGraph { nodes }.encode_to_vec()
}

/// A root with variable `v` and optimizer `opt`, then `links` slot variables, each the
/// optimizer and the variable of the next: TensorFlow's node names doubled per link.
pub fn slot_chain(links: usize) -> Vec<Node> {
    let mut nodes = vec![
        Node {
            children: vec![edge(1, "v"), edge(2, "opt")],
            ..Node::default()
        },
        variable("v/.ATTRIBUTES/VARIABLE_VALUE"),
        Node::default(),
    ];
    let mut previous = (2, 1);
    for link in 0..links {
        let id = nodes.len() as i32;
        nodes.push(variable(&format!("slot_{link}")));
        nodes[previous.0 as usize]
            .slot_variables
            .push(slot_ref(previous.1, "m", id));
        previous = (id, id);
    }
    nodes
}

/// A chain of `depth` children from the root, `x` each.
pub fn child_chain(depth: usize) -> Vec<Node> {
    (0..=depth)
        .map(|index| Node {
            children: if index < depth {
                vec![edge(index as i32 + 1, "x")]
            } else {
                Vec::new()
            },
            ..Node::default()
        })
        .collect()
}

fn one_line(err: &dyn std::error::Error) -> String {
    let text = error_chain(err, ErrorForm::OneLine);
    assert!(!text.trim_end().contains('\n'), "not one line: {text}");
    text
}

#[test]
fn a_chain_of_slot_variables_costs_one_name_per_link() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    write_checkpoint(
        &prefix,
        &encoded(slot_chain(64)),
        &["v/.ATTRIBUTES/VARIABLE_VALUE"],
    );
    let reader = BundleReader::open(&prefix).unwrap();
    let graph = read_object_graph(&reader).unwrap();
    // Only the first slot has a variable and an optimizer reached through children.
    let prefixes = graph.key_prefixes();
    assert_eq!(
        prefixes[3].as_deref(),
        Some("v/.OPTIMIZER_SLOT/opt/m"),
        "{prefixes:?}"
    );
    assert!(prefixes[4..].iter().all(Option::is_none), "{prefixes:?}");
    let spec =
        ObjectSpec::parse(r#"{"objects":[{"path":["v"],"dtype":"float32","shape":[2]}]}"#).unwrap();
    let checkpoint = spec.fresh_checkpoint().unwrap();
    let matched = checkpoint
        .match_checkpoint(&prefix.to_string_lossy(), RestoreKind::Read)
        .unwrap();
    let warnings = matched.status().warnings();
    // TensorFlow's header, then one per slot.
    assert_eq!(warnings.len(), 65, "{warnings:?}");
    // Slots named by their own optimizer and variable: `node N` for those not reached.
    assert!(
        warnings[1].ends_with("(root).opt's state 'm' for (root).v"),
        "{}",
        warnings[1]
    );
    assert!(
        warnings[2].ends_with("node 3's state 'm' for node 3"),
        "{}",
        warnings[2]
    );
    assert!(warnings[1..].iter().all(|warning| warning.len() < 200));
}

#[test]
fn a_chain_deeper_than_max_object_depth_is_one_line_naming_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    write_checkpoint(&prefix, &encoded(child_chain(10_000)), &[]);
    let reader = BundleReader::open(&prefix).unwrap();
    let err = read_object_graph(&reader).unwrap_err();
    let text = one_line(&err);
    assert!(text.contains("MAX_OBJECT_DEPTH"), "{text}");
    assert!(text.contains("node 1001"), "{text}");
    // At the cap it reads, and every path is there.
    write_checkpoint(&prefix, &encoded(child_chain(MAX_OBJECT_DEPTH)), &[]);
    let reader = BundleReader::open(&prefix).unwrap();
    let graph = read_object_graph(&reader).unwrap();
    let paths = graph.object_paths();
    assert_eq!(
        paths[MAX_OBJECT_DEPTH].as_ref().unwrap().len(),
        2 * 1000 - 1
    );
}

#[test]
fn empty_nodes_past_max_object_nodes_are_refused_before_decoding() {
    // An empty node is two bytes (`0a 00`).
    let bytes: Vec<u8> = [0x0a, 0x00].repeat(MAX_OBJECT_NODES + 1);
    let err = saveplan::export::object_graph::decode(&bytes).unwrap_err();
    let text = one_line(&err);
    assert!(
        text.contains(&format!("{} nodes", MAX_OBJECT_NODES + 1))
            && text.contains("MAX_OBJECT_NODES"),
        "{text}"
    );
    // A fan-out of empty edges is counted the same way.
    let edges = [0x0a, 0x00].repeat(saveplan_ir::object_graph::MAX_OBJECT_REFERENCES + 1);
    let mut node = vec![0x0a];
    prost::encoding::encode_varint(edges.len() as u64, &mut node);
    node.extend_from_slice(&edges);
    let text = one_line(&saveplan::export::object_graph::decode(&node).unwrap_err());
    assert!(text.contains("MAX_OBJECT_REFERENCES"), "{text}");
}

#[test]
fn a_huge_declared_shape_is_refused_before_anything_is_allocated() {
    for shape in ["[1099511627776,1024]", "[100000,100000]"] {
        let text = format!(
            r#"{{"objects":[{{"path":["model","kernel"],"dtype":"float32","shape":{shape}}}]}}"#
        );
        let spec = ObjectSpec::parse(&text).unwrap();
        let err = spec.fresh_checkpoint().unwrap_err();
        let text = one_line(&err);
        assert!(
            text.starts_with("entry 0: a float32 variable of shape")
                && text.ends_with("above the 2147483648-byte limit for constants"),
            "{text}"
        );
    }
}

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting the calling thread's allocations.
pub struct Counting;

// SAFETY: every call goes to the system allocator unchanged; the counter is a `Cell` without a
// destructor, which allocates nothing.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

/// The calling thread's allocations while `work` runs.
fn allocations(work: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    work();
    ALLOCATIONS.with(Cell::get) - before
}

/// Builds the object graph of `text`, a fresh checkpoint of it and the match of that against
/// itself.
fn spec_work(text: &str) -> u64 {
    let spec = ObjectSpec::parse(text).unwrap();
    allocations(|| {
        spec.object_graph().unwrap();
        spec.fresh_checkpoint().unwrap();
    })
}

#[test]
fn an_object_spec_costs_the_same_per_variable_and_per_level() {
    let flat = |n: usize| {
        let objects: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"path":["v{i}"],"dtype":"float32","shape":[2]}}"#))
            .collect();
        format!(r#"{{"objects":[{}]}}"#, objects.join(","))
    };
    let deep = |depth: usize| {
        let path: Vec<String> = (0..depth).map(|i| format!(r#""l{i}""#)).collect();
        format!(
            r#"{{"objects":[{{"path":[{}],"dtype":"float32","shape":[2]}}]}}"#,
            path.join(",")
        )
    };
    let (small, large) = (spec_work(&flat(500)), spec_work(&flat(2_000)));
    assert!(
        large * 10 <= small * 45,
        "flat: {small} allocations for 500 variables, {large} for 2,000"
    );
    let (small, large) = (spec_work(&deep(200)), spec_work(&deep(800)));
    assert!(
        large * 10 <= small * 45,
        "deep: {small} allocations at depth 200, {large} at depth 800"
    );
}

/// An object spec of `n` float32[2] root variables.
fn flat_spec(n: usize) -> String {
    let objects: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"path":["v{i}"],"dtype":"float32","shape":[2]}}"#))
        .collect();
    format!(r#"{{"objects":[{}]}}"#, objects.join(","))
}

/// A write by object spec costs the same per variable (issue 35, item 4): its save plan is
/// traced once and run compiled by the one plan runner. Counted in the allocations of a
/// one-thread pool that runs the whole write (the plan's trace, compile and run included).
#[test]
fn an_object_spec_write_costs_the_same_per_variable() {
    let dir = tempfile::tempdir().unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let write_work = |n: usize| {
        let spec = ObjectSpec::parse(&flat_spec(n)).unwrap();
        let prefix = dir.path().join(format!("ckpt_{n}"));
        let prefix = prefix.to_str().unwrap();
        pool.install(|| {
            let checkpoint = spec.fresh_checkpoint().unwrap();
            allocations(|| assert_eq!(checkpoint.write(prefix).unwrap(), prefix))
        })
    };
    let (small, large) = (write_work(500), write_work(2_000));
    assert!(
        large * 10 <= small * 45,
        "write: {small} allocations for 500 variables, {large} for 2,000"
    );
}
