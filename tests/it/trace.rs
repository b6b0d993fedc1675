//! Tracer tests: every input in `tests/inputs/trace/` traces to what TensorFlow built for the
//! same input in `tests/fixtures/tf-2.21/graph/*/` (`flat_graph.pbtxt` and `flat.json`,
//! `graph.pbtxt` and `saver_def.pbtxt`, `fn_save.pbtxt`), compared node by node after the
//! verifier and the exporter, and to one snapshot in `snapshots/`; every input in `err/` fails
//! with a snapshotted error. The eager form is compared with `g7_eager_traced`'s
//! `traced_save.function_def.pbtxt`, `traced_restore.function_def.pbtxt` and
//! `traced_save.graph.pbtxt`. Registered savers are compared, flat and `to_proto()` form, with
//! the graphs TensorFlow traced for a Python twin of the test saver
//! (`tests/fixtures/saveplan/registered_saver`, our own generator), and a partitioned variable
//! on several tasks with TensorFlow's flat graph (`tests/fixtures/saveplan/partitioned_tasks`,
//! likewise); parallel-device variables
//! and unique temporary prefixes have no TensorFlow 2.21 fixture and are checked structurally
//! and by snapshot.

use crate::support::stack_saver::StackSaver;
use crate::support::{ErrorForm, TRACE_CASES, error_chain, manifest_path, settings};

use std::fmt::Write as _;
use std::path::Path;

use saveplan::trace::spec::SpecFile;
use saveplan::trace::{
    FlatTrace, FunctionOptions, FunctionTrace, TraceError, TraceOptions, VariableOps,
    trace_eager_functions, trace_flat, trace_flat_as, trace_functions, trace_save_function,
};
use saveplan_ir::{AttrValue, Function, Module, Op};
use saveplan_proto::tensorflow as tf;

fn fixture(case: &str, file: &str) -> String {
    let path = manifest_path(&format!("tests/fixtures/tf-2.21/graph/{case}/{file}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn trace_file(path: &Path) -> Result<FlatTrace, TraceError> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    trace_text(&text)
}

fn trace_text(text: &str) -> Result<FlatTrace, TraceError> {
    let spec = SpecFile::parse(text)?;
    trace_flat(&spec.trackables()?, &spec.options()?)
}

// ---------------------------------------------------------------------------------------------
// IR → protobuf through the exporter, after the verifier.

fn graph_def(module: &Module) -> tf::GraphDef {
    if let Err(errors) = saveplan_ir::verify::verify_module(module) {
        panic!("the traced module does not verify:\n{errors}");
    }
    saveplan::export::graph_def(module).expect("traced modules export")
}

fn function_def(function: &Function) -> tf::FunctionDef {
    saveplan::export::function_def(function).expect("traced functions export")
}

// ---------------------------------------------------------------------------------------------
// Snapshot rendering: the saver names and the IR's canonical text.

fn render_trace(trace: &FlatTrace, save_function: &Module) -> String {
    let mut text = String::from("## saver\n");
    let saver = &trace.saver;
    writeln!(text, "filename_tensor_name: {}", saver.filename_tensor_name).unwrap();
    writeln!(text, "save_op_name: {}", saver.save_target).unwrap();
    for (key, op) in &trace.restore_ops {
        writeln!(text, "restore_op[{key}]: {op}").unwrap();
    }
    writeln!(text, "\n## trace\n{}", trace.module).unwrap();
    // The function alone: its outer graph repeats the variable creation above.
    let library_only = Module {
        library: save_function.library.clone(),
        ..Module::default()
    };
    writeln!(text, "## save function\n{library_only}").unwrap();
    text
}

// ---------------------------------------------------------------------------------------------
// Tests.

/// The traced flat graph equals TensorFlow's, node by node (name, op, inputs in order with
/// control inputs, device, attributes), in TensorFlow's creation order.
#[test]
fn flat_graphs_match_tensorflow() {
    for case in &TRACE_CASES {
        let input = manifest_path(&format!("tests/inputs/trace/{case}.json"));
        let trace = trace_file(&input)
            .unwrap_or_else(|e| panic!("{case}: {}", error_chain(&e, ErrorForm::CausedBy)));
        let ours = graph_def(&trace.module);
        let theirs: tf::GraphDef = saveplan_proto::from_text(&fixture(case, "flat_graph.pbtxt"))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let our_names: Vec<&str> = ours.node.iter().map(|n| n.name.as_str()).collect();
        let their_names: Vec<&str> = theirs.node.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(our_names, their_names, "{case}: node names and order");
        for (our, their) in ours.node.iter().zip(&theirs.node) {
            assert_eq!(our, their, "{case}: node `{}`", their.name);
        }
        assert_eq!(ours.versions, theirs.versions, "{case}: versions");
    }
}

/// The saver names agree with what TensorFlow reported in `flat.json`.
#[test]
fn saver_names_match_flat_json() {
    for case in &TRACE_CASES {
        let input = manifest_path(&format!("tests/inputs/trace/{case}.json"));
        let trace = trace_file(&input).unwrap();
        let flat: serde_json::Value = serde_json::from_str(&fixture(case, "flat.json")).unwrap();
        assert_eq!(
            trace.saver.filename_tensor_name, flat["filename_tensor_name"],
            "{case}"
        );
        assert_eq!(trace.saver.save_target, flat["save_op_name"], "{case}");
        let restore_ops: std::collections::BTreeMap<String, String> =
            serde_json::from_value(flat["restore_ops"].clone()).unwrap();
        assert_eq!(trace.restore_ops, restore_ops, "{case}");
    }
}

/// Every graph fixture's `case.json` is a valid spec file as it is, and traces. Where the case
/// needs no extra fields (g1 has its `init`, g6 uses `tf.zeros`) the whole graph is exact; for
/// g2–g4 only the variables' initial values are missing, so everything from the
/// `saver_filename` placeholder on is exact. (g5's `case.json` lacks the partition's handle
/// names and read kind, see `tests/inputs/trace/g5_sliced.json`.)
#[test]
fn case_json_files_are_spec_files() {
    for case in &TRACE_CASES {
        let trace = trace_text(&fixture(case, "case.json"))
            .unwrap_or_else(|e| panic!("{case}: {}", error_chain(&e, ErrorForm::CausedBy)));
        if *case == "g5_sliced" {
            continue;
        }
        let theirs: tf::GraphDef =
            saveplan_proto::from_text(&fixture(case, "flat_graph.pbtxt")).unwrap();
        let ours = graph_def(&trace.module);
        if matches!(*case, "g1_single_cpu" | "g6_max_shard_size") {
            assert_eq!(ours, theirs, "{case}");
            continue;
        }
        let plan = |graph: &tf::GraphDef| {
            let start = graph
                .node
                .iter()
                .position(|n| n.name == "saver_filename")
                .expect("the plan starts at the placeholder");
            graph.node[start..].to_vec()
        };
        assert_eq!(plan(&ours), plan(&theirs), "{case}");
    }
}

/// The graph fixtures with a `to_proto()` graph.
const FUNCTION_CASES: &[&str] = &["g1_single_cpu", "g2_two_cpus", "g3_two_tasks", "g5_sliced"];

/// The process-dependent parts of a fixture's function form: function names and the
/// `config_proto` bytes of its calls.
fn function_options(theirs: &tf::GraphDef) -> FunctionOptions {
    let names: Vec<String> = theirs
        .library
        .as_ref()
        .map(|library| {
            library
                .function
                .iter()
                .filter_map(|f| f.signature.as_ref().map(|s| s.name.clone()))
                .collect()
        })
        .unwrap_or_default();
    let find = |part: &str| names.iter().find(|n| n.contains(part)).unwrap().clone();
    let call = theirs
        .node
        .iter()
        .find(|n| n.op == "StatefulPartitionedCall")
        .unwrap();
    let config_proto = match &call.attr["config_proto"].value {
        Some(tf::attr_value::Value::S(bytes)) => bytes.clone(),
        other => panic!("config_proto is {other:?}"),
    };
    FunctionOptions {
        save_function: find("_traced_save_"),
        restore_function: find("_traced_restore_"),
        config_proto,
    }
}

fn trace_function_case(case: &str) -> (FunctionTrace, tf::GraphDef) {
    let theirs: tf::GraphDef = saveplan_proto::from_text(&fixture(case, "graph.pbtxt")).unwrap();
    let text =
        std::fs::read_to_string(manifest_path(&format!("tests/inputs/trace/{case}.json"))).unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let trace = trace_functions(&spec.trackables().unwrap(), &function_options(&theirs))
        .unwrap_or_else(|e| panic!("{case}: {}", error_chain(&e, ErrorForm::CausedBy)));
    (trace, theirs)
}

/// `to_proto()`'s graph: the outer nodes and both library functions equal TensorFlow's
/// (signature, attributes, argument attributes, body nodes in order, ret and control_ret).
#[test]
fn function_graphs_match_tensorflow() {
    for case in FUNCTION_CASES {
        let (trace, theirs) = trace_function_case(case);
        let ours = graph_def(&trace.module);
        assert_eq!(ours.node, theirs.node, "{case}: outer graph");
        assert_eq!(ours.versions, theirs.versions, "{case}: versions");
        let our_fns = &ours.library.as_ref().unwrap().function;
        let their_fns = &theirs.library.as_ref().unwrap().function;
        assert_eq!(our_fns.len(), their_fns.len(), "{case}");
        for (our, their) in our_fns.iter().zip(their_fns) {
            let name = &their.signature.as_ref().unwrap().name;
            assert_eq!(our.signature, their.signature, "{case}: {name} signature");
            let our_nodes: Vec<&str> = our.node_def.iter().map(|n| n.name.as_str()).collect();
            let their_nodes: Vec<&str> = their.node_def.iter().map(|n| n.name.as_str()).collect();
            assert_eq!(our_nodes, their_nodes, "{case}: {name} node order");
            for (a, b) in our.node_def.iter().zip(&their.node_def) {
                assert_eq!(a, b, "{case}: {name} node `{}`", b.name);
            }
            assert_eq!(our, their, "{case}: {name}");
        }
        assert_eq!(ours, theirs, "{case}");
    }
}

/// The save plan with options traced into a function equals TensorFlow's `fn_save.pbtxt`, and
/// the variables it captures are the ones the flat form creates.
#[test]
fn save_functions_match_tensorflow() {
    for case in &TRACE_CASES {
        let theirs: tf::FunctionDef =
            saveplan_proto::from_text(&fixture(case, "fn_save.pbtxt")).unwrap();
        let name = &theirs.signature.as_ref().unwrap().name;
        let input = manifest_path(&format!("tests/inputs/trace/{case}.json"));
        let spec = SpecFile::parse(&std::fs::read_to_string(&input).unwrap()).unwrap();
        let trackables = spec.trackables().unwrap();
        let module = trace_save_function(&trackables, &spec.options().unwrap(), name)
            .unwrap_or_else(|e| panic!("{case}: {}", error_chain(&e, ErrorForm::CausedBy)));
        let ours = function_def(&module.library.functions[0]);
        let our_nodes: Vec<&str> = ours.node_def.iter().map(|n| n.name.as_str()).collect();
        let their_nodes: Vec<&str> = theirs.node_def.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(our_nodes, their_nodes, "{case}: node order");
        for (a, b) in ours.node_def.iter().zip(&theirs.node_def) {
            assert_eq!(a, b, "{case}: node `{}`", b.name);
        }
        assert_eq!(ours, theirs, "{case}");
        let flat_nodes = graph_def(&trace_file(&input).unwrap().module).node;
        let outer_nodes = graph_def(&module).node;
        assert_eq!(
            outer_nodes,
            flat_nodes[..outer_nodes.len()],
            "{case}: variables"
        );
    }
}

/// The `SaverDef` names agree with `saver_def.pbtxt`.
#[test]
fn saver_def_matches_tensorflow() {
    for case in FUNCTION_CASES {
        let (trace, _) = trace_function_case(case);
        let theirs: tf::SaverDef =
            saveplan_proto::from_text(&fixture(case, "saver_def.pbtxt")).unwrap();
        let names = &trace.saver_def;
        assert_eq!(
            names.filename_tensor_name, theirs.filename_tensor_name,
            "{case}"
        );
        assert_eq!(names.save_tensor_name, theirs.save_tensor_name, "{case}");
        assert_eq!(names.restore_op_name, theirs.restore_op_name, "{case}");
    }
}

fn render_input(path: &Path) -> String {
    let trace =
        trace_file(path).unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    let spec = SpecFile::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let trackables = spec.trackables().unwrap();
    let save_fn = "__inference_traced_save";
    let module = trace_save_function(&trackables, &spec.options().unwrap(), save_fn)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    render_trace(&trace, &module)
}

/// The fixture cases g1–g6 (their inputs are also the compile tests' inputs).
#[test]
fn trace_snapshots() {
    settings().bind(|| {
        insta::glob!("..", "inputs/trace/*.json", |path| {
            insta::assert_snapshot!(render_input(path));
        });
    });
}

/// Inputs for features beyond g1–g6: the eager case, parallel devices, unique temporary ids.
#[test]
fn trace_extra_snapshots() {
    settings().bind(|| {
        insta::glob!("..", "inputs/trace/extra/*.json", |path| {
            insta::assert_snapshot!(render_input(path));
        });
    });
}

#[test]
fn trace_errors() {
    settings().bind(|| {
        insta::glob!("..", "inputs/trace/err/*.json", |path| {
            let err = trace_file(path).expect_err("inputs in err/ must fail");
            insta::assert_snapshot!(error_chain(&err, ErrorForm::CausedBy));
        });
    });
}

// ---------------------------------------------------------------------------------------------
// The eager form (g7).

fn assert_function_eq(ours: &tf::FunctionDef, theirs: &tf::FunctionDef, what: &str) {
    let our_nodes: Vec<&str> = ours.node_def.iter().map(|n| n.name.as_str()).collect();
    let their_nodes: Vec<&str> = theirs.node_def.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(our_nodes, their_nodes, "{what}: node order");
    assert_eq!(ours.signature, theirs.signature, "{what}: signature");
    for (a, b) in ours.node_def.iter().zip(&theirs.node_def) {
        assert_eq!(a, b, "{what}: node `{}`", b.name);
    }
    assert_eq!(ours, theirs, "{what}");
}

/// `_traced_save` and `_traced_restore` traced from eager TensorFlow: both function defs and
/// the save function's graph equal the fixtures.
#[test]
fn eager_functions_match_tensorflow() {
    let case = "g7_eager_traced";
    let save: tf::FunctionDef =
        saveplan_proto::from_text(&fixture(case, "traced_save.function_def.pbtxt")).unwrap();
    let restore: tf::FunctionDef =
        saveplan_proto::from_text(&fixture(case, "traced_restore.function_def.pbtxt")).unwrap();
    let save_graph: tf::GraphDef =
        saveplan_proto::from_text(&fixture(case, "traced_save.graph.pbtxt")).unwrap();
    let options = FunctionOptions {
        save_function: save.signature.as_ref().unwrap().name.clone(),
        restore_function: restore.signature.as_ref().unwrap().name.clone(),
        config_proto: Vec::new(),
    };
    let input = manifest_path(&format!("tests/inputs/trace/extra/{case}.json"));
    let spec = SpecFile::parse(&std::fs::read_to_string(&input).unwrap()).unwrap();
    let trace = trace_eager_functions(&spec.trackables().unwrap(), &options)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    graph_def(&trace.module);
    let functions = &trace.module.library.functions;
    assert_function_eq(&function_def(&functions[0]), &save, "traced_save");
    assert_function_eq(&function_def(&functions[1]), &restore, "traced_restore");
    let ours = graph_def(&trace.save_graph);
    let our_names: Vec<&str> = ours.node.iter().map(|n| n.name.as_str()).collect();
    let their_names: Vec<&str> = save_graph.node.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(our_names, their_names, "traced_save graph: node order");
    for (a, b) in ours.node.iter().zip(&save_graph.node) {
        assert_eq!(a, b, "traced_save graph: node `{}`", b.name);
    }
    assert_eq!(ours, save_graph, "traced_save graph");
}

// ---------------------------------------------------------------------------------------------
// Options and savers without a TensorFlow 2.21 fixture.

fn traced_input(name: &str) -> FlatTrace {
    trace_file(&manifest_path(&format!("tests/inputs/trace/extra/{name}")))
        .unwrap_or_else(|e| panic!("{name}: {}", error_chain(&e, ErrorForm::CausedBy)))
}

fn string_const(trace: &FlatTrace, name: &str) -> Vec<String> {
    let graph = &trace.module.graph;
    let op = graph.find(name).unwrap_or_else(|| panic!("no op `{name}`"));
    match graph.op(op).attrs.get("value") {
        Some(AttrValue::Tensor(tensor)) => tensor
            .strings()
            .unwrap()
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        other => panic!("`{name}` holds {other:?}"),
    }
}

/// A unique temporary id changes only the `_temp` suffix constant.
#[test]
fn unique_temp_id_names_the_temporary_directory() {
    let trace = traced_input("unique_temp_id.json");
    assert_eq!(
        string_const(&trace, "Const_1"),
        ["_temp_0123456789abcdef0123456789abcdef/part"]
    );
    assert_eq!(string_const(&trace, "Const"), [".part"]);
    let plain = trace_text(
        r#"{"variables": [{"checkpoint_key": "v", "dtype": "float32", "shape": [2],
            "device": "/job:localhost/replica:0/task:0/device:CPU:0"}]}"#,
    )
    .unwrap();
    assert_eq!(string_const(&plain, "Const_1"), ["_temp/part"]);
    // Apart from that constant both plans are the same.
    let text = trace
        .module
        .to_string()
        .replace("_temp_0123456789abcdef0123456789abcdef", "_temp");
    assert_eq!(text, plain.module.to_string());
}

/// `unique_temp_prefix: true` draws a fresh 32-digit hex id per `options()` call.
#[test]
fn unique_temp_prefix_draws_fresh_ids() {
    let spec =
        SpecFile::parse(r#"{"variables": [], "options": {"unique_temp_prefix": true}}"#).unwrap();
    let a = spec.options().unwrap().unique_temp_id.unwrap();
    let b = spec.options().unwrap().unique_temp_id.unwrap();
    assert_eq!(a.len(), 32);
    assert!(
        a.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(a, b);
}

/// A parallel variable saves one tensor per component, each read on its own device, so the
/// shards follow the components' tasks; all components are restored together.
#[test]
fn parallel_components_shard_by_task() {
    let trace = traced_input("parallel_device.json");
    assert_eq!(
        string_const(&trace, "SaveV2/tensor_names"),
        ["layer/kernel/.ATTRIBUTES/VARIABLE_VALUE"]
    );
    assert_eq!(
        string_const(&trace, "SaveV2_1/tensor_names"),
        [
            "layer/kernel/.ATTRIBUTES/parallel_component_1",
            "step/.ATTRIBUTES/VARIABLE_VALUE"
        ]
    );
    let graph = &trace.module.graph;
    let device = |name: &str| graph.op(graph.find(name).unwrap()).device.to_string();
    assert_eq!(
        device("ReadVariableOp"),
        "/job:worker/replica:0/task:0/device:CPU:0"
    );
    assert_eq!(
        device("ReadVariableOp_1"),
        "/job:worker/replica:0/task:1/device:CPU:0"
    );
    assert_eq!(
        device("SaveV2"),
        "/job:worker/replica:0/task:0/device:CPU:0"
    );
    assert_eq!(
        device("SaveV2_1"),
        "/job:worker/replica:0/task:1/device:CPU:0"
    );
    // Component 0 is restored only once component 1 (read on task 1) is there, so the
    // kernel's assigns come after the second `RestoreV2`; they take the restored tensors
    // directly.
    let restore_1 = graph.find("RestoreV2_1").unwrap();
    for name in ["AssignVariableOp", "AssignVariableOp_1"] {
        let assign = graph.find(name).unwrap();
        assert!(graph.seq(assign) > graph.seq(restore_1), "{name}");
        let value = &graph.inputs(assign)[1].1;
        assert_eq!(graph.op(value.src).op, Op::RestoreV2, "{name}");
    }
    let kernel = "layer/kernel/.ATTRIBUTES/VARIABLE_VALUE";
    let component = "layer/kernel/.ATTRIBUTES/parallel_component_1";
    assert_eq!(trace.restore_ops[kernel], "AssignVariableOp");
    assert_eq!(trace.restore_ops[component], "AssignVariableOp_1");
}

/// Registered savers run before the default shards on their own `<prefix>-<name>` prefix,
/// their prefixes lead the merge (without counting in `num_shards`), and their restores run
/// after every default restore op.
#[test]
fn registered_savers_join_the_merge() {
    let text =
        std::fs::read_to_string(manifest_path("tests/inputs/trace/g3_two_tasks.json")).unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let options = TraceOptions {
        registered_savers: vec![Box::new(StackSaver)],
        ..spec.options().unwrap()
    };
    let trace = trace_flat(&spec.trackables().unwrap(), &options)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    let graph = &trace.module.graph;
    let find = |name: &str| graph.find(name).unwrap_or_else(|| panic!("no op `{name}`"));
    // The saver's prefix: `StringJoin(prefix, "-test.Stack")`, right after the temp prefix.
    let path = find("StringJoin_1");
    assert_eq!(&*graph.op(path).device, "/device:CPU:*");
    assert_eq!(
        graph.op(find("saver_filename")).name,
        graph.op(graph.inputs(path)[0].1.src).name
    );
    assert_eq!(string_const(&trace, "Const_2"), ["-test.Stack"]);
    assert_eq!(graph.inputs(find("stack_save/SaveV2"))[0].1.src, path);
    let pack = find("MergeV2Checkpoints/checkpoint_prefixes");
    let pack_inputs = graph.inputs(pack);
    assert_eq!(pack_inputs[0].1.src, find("stack_save/Identity"));
    assert_eq!(graph.op(pack).attrs.get("N"), Some(&AttrValue::I(3)));
    match graph.op(find("num_shards")).attrs.get("value") {
        Some(AttrValue::Tensor(tensor)) => assert_eq!(tensor.as_i64_scalar(), Some(2)),
        other => panic!("num_shards holds {other:?}"),
    }
    // The default shards come after the registered save; its restore after every assign.
    assert!(graph.seq(find("stack_save/SaveV2")) < graph.seq(find("SaveV2")));
    let restore = find("stack_restore/RestoreV2");
    let last_assign = graph
        .ops()
        .into_iter()
        .filter(|&op| graph.op(op).op == Op::AssignVariableOp)
        .map(|op| graph.seq(op))
        .max()
        .unwrap();
    assert!(graph.seq(restore) > last_assign);
    assert_eq!(graph.inputs(restore)[0].1.src, find("saver_filename"));
    settings().bind(|| {
        insta::assert_snapshot!("trace@registered_saver", trace.module.to_string());
    });
}

/// The registered-saver fixture TensorFlow traced (`tests/fixtures/saveplan/registered_saver`,
/// written by `tests/fixtures/generators/gen_registered_saver.py` with a Python twin of
/// [`StackSaver`] over g3's variables).
fn registered_fixture(file: &str) -> String {
    let path = manifest_path(&format!("tests/fixtures/saveplan/registered_saver/{file}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn g3_trackables() -> Vec<saveplan::trace::Trackable> {
    let text =
        std::fs::read_to_string(manifest_path("tests/inputs/trace/g3_two_tasks.json")).unwrap();
    SpecFile::parse(&text).unwrap().trackables().unwrap()
}

/// Asserts two GraphDefs are equal, naming the first node that differs.
fn assert_same_nodes(what: &str, ours: &[tf::NodeDef], theirs: &[tf::NodeDef]) {
    let our_names: Vec<&str> = ours.iter().map(|n| n.name.as_str()).collect();
    let their_names: Vec<&str> = theirs.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(our_names, their_names, "{what}: node names and order");
    for (our, their) in ours.iter().zip(theirs) {
        assert_eq!(our, their, "{what}: node `{}`", their.name);
    }
}

/// With a registered saver, the flat graph equals the one TensorFlow traced for the same
/// saver, including `_has_manual_control_dependencies` on the saver's `SaveV2` (it is used in
/// a `control_dependencies` block), and the saver names equal TensorFlow's.
#[test]
fn registered_saver_flat_graph_matches_tensorflow() {
    let options = TraceOptions {
        registered_savers: vec![Box::new(StackSaver)],
        ..TraceOptions::default()
    };
    let trace = trace_flat(&g3_trackables(), &options)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    let ours = graph_def(&trace.module);
    let theirs: tf::GraphDef =
        saveplan_proto::from_text(&registered_fixture("flat_graph.pbtxt")).unwrap();
    assert_same_nodes("registered saver, flat", &ours.node, &theirs.node);
    assert_eq!(ours, theirs);
    let flat: serde_json::Value = serde_json::from_str(&registered_fixture("flat.json")).unwrap();
    assert_eq!(
        trace.saver.filename_tensor_name,
        flat["filename_tensor_name"]
    );
    assert_eq!(trace.saver.save_target, flat["save_op_name"]);
    let restore_ops: std::collections::BTreeMap<String, String> =
        serde_json::from_value(flat["restore_ops"].clone()).unwrap();
    assert_eq!(trace.restore_ops, restore_ops);
}

/// With a registered saver, `to_proto()`'s graph equals TensorFlow's: the saver's ops are
/// inlined into both function bodies (its save ahead of the default shards, its restore after
/// the default assigns and before the trailing `Identity`) and are not control outputs.
#[test]
fn registered_saver_function_graph_matches_tensorflow() {
    let theirs: tf::GraphDef =
        saveplan_proto::from_text(&registered_fixture("graph.pbtxt")).unwrap();
    let trace = saveplan::trace::trace_functions_with_savers(
        &g3_trackables(),
        vec![Box::new(StackSaver)],
        &function_options(&theirs),
    )
    .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    let ours = graph_def(&trace.module);
    assert_same_nodes("registered saver, outer graph", &ours.node, &theirs.node);
    let our_fns = &ours.library.as_ref().unwrap().function;
    let their_fns = &theirs.library.as_ref().unwrap().function;
    assert_eq!(our_fns.len(), their_fns.len());
    for (our, their) in our_fns.iter().zip(their_fns) {
        let name = &their.signature.as_ref().unwrap().name;
        assert_same_nodes(name, &our.node_def, &their.node_def);
        assert_eq!(our, their, "{name}");
    }
    assert_eq!(ours, theirs);
    let saver_def: tf::SaverDef =
        saveplan_proto::from_text(&registered_fixture("saver_def.pbtxt")).unwrap();
    let names = &trace.saver_def;
    assert_eq!(names.filename_tensor_name, saver_def.filename_tensor_name);
    assert_eq!(names.save_tensor_name, saver_def.save_tensor_name);
    assert_eq!(names.restore_op_name, saver_def.restore_op_name);
}

/// The streaming `encode_graph_def` writes the same bytes as `graph_def` + prost for every
/// traced form: flat graphs, graphs with a function library, and the eager functions.
#[test]
fn streamed_encoding_equals_graph_def() {
    use prost::Message;
    let check = |module: &Module, what: &str| {
        let expected = graph_def(module).encode_to_vec();
        let streamed = saveplan::export::encode_graph_def(module).expect("traced modules export");
        assert!(expected == streamed, "{what}: streamed bytes differ");
    };
    for case in &TRACE_CASES {
        let input = manifest_path(&format!("tests/inputs/trace/{case}.json"));
        check(&trace_file(&input).unwrap().module, case);
    }
    for case in FUNCTION_CASES {
        check(&trace_function_case(case).0.module, case);
    }
    check(
        &traced_input("parallel_device.json").module,
        "parallel_device",
    );
    let eager_input = manifest_path("tests/inputs/trace/extra/g7_eager_traced.json");
    let spec = SpecFile::parse(&std::fs::read_to_string(eager_input).unwrap()).unwrap();
    let options = FunctionOptions {
        save_function: "save".to_owned(),
        restore_function: "restore".to_owned(),
        config_proto: Vec::new(),
    };
    let eager = trace_eager_functions(&spec.trackables().unwrap(), &options).unwrap();
    check(&eager.module, "g7 functions");
    check(&eager.save_graph, "g7 save graph");
    // Imported TensorFlow graphs too (inputs with `Port::Named` outputs, libraries).
    for case in TRACE_CASES.iter().chain(FUNCTION_CASES) {
        for file in ["flat_graph.pbtxt", "graph.pbtxt"] {
            let path = manifest_path(&format!("tests/fixtures/tf-2.21/graph/{case}/{file}"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let theirs: tf::GraphDef = saveplan_proto::from_text(&text).unwrap();
            let module = saveplan::export::import_graph_def(&theirs).unwrap();
            check(&module, &format!("{case}/{file}"));
        }
    }
}

/// A partitioned variable whose slices sit on several tasks (rows on tasks 0, 1 and 3, columns
/// on two CPUs of task 2; `tests/fixtures/saveplan/partitioned_tasks`, written by
/// `tests/fixtures/generators/gen_partitioned_tasks.py`): the spec, whose slices say nothing
/// about how they are read, traces TensorFlow's flat graph node for node and in TensorFlow's
/// order (slices read when the save runs; each slice's `Identity` + `AssignVariableOp` created
/// after its task's `RestoreV2`), with TensorFlow's saver names.
#[test]
fn partitioned_variable_on_several_tasks_matches_tensorflow() {
    let fixture = |file: &str| {
        let path = manifest_path(&format!("tests/fixtures/saveplan/partitioned_tasks/{file}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let trace = trace_text(&fixture("spec.json"))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e, ErrorForm::CausedBy)));
    let ours = graph_def(&trace.module);
    let theirs: tf::GraphDef = saveplan_proto::from_text(&fixture("flat_graph.pbtxt")).unwrap();
    let mut our_sorted: Vec<_> = ours.node.iter().map(|n| n.name.clone()).collect();
    let mut their_sorted: Vec<_> = theirs.node.iter().map(|n| n.name.clone()).collect();
    our_sorted.sort();
    their_sorted.sort();
    assert_eq!(our_sorted, their_sorted, "the same nodes");
    assert_same_nodes("partitioned on several tasks", &ours.node, &theirs.node);
    assert_eq!(ours, theirs);
    let flat: serde_json::Value = serde_json::from_str(&fixture("flat.json")).unwrap();
    assert_eq!(
        trace.saver.filename_tensor_name,
        flat["filename_tensor_name"]
    );
    assert_eq!(trace.saver.save_target, flat["save_op_name"]);
    let restore_ops: std::collections::BTreeMap<String, String> =
        serde_json::from_value(flat["restore_ops"].clone()).unwrap();
    assert_eq!(trace.restore_ops, restore_ops);
}

// ---------------------------------------------------------------------------------------------
// What a session traces: the plans without the variables' initializers.

/// Every spec input that traces, and specs for the initializer forms the inputs lack: given
/// values, a zeros `Fill` (1000 elements and more), a saved constant and a variable named
/// like the `zeros` scope (whose name depends on the initializer names being taken).
fn handles_cases() -> Vec<(String, String)> {
    let mut cases: Vec<(String, String)> = Vec::new();
    for dir in ["tests/inputs/trace", "tests/inputs/trace/extra"] {
        let mut paths: Vec<_> = std::fs::read_dir(manifest_path(dir))
            .expect("the inputs folder")
            .map(|entry| entry.expect("a folder entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).expect("the input");
            cases.push((path.display().to_string(), text));
        }
    }
    let cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
    let own = serde_json::json!({"variables": [
        {"checkpoint_key": "zeros", "dtype": "float32", "shape": [2], "device": cpu},
        {"checkpoint_key": "big", "dtype": "float32", "shape": [40, 30], "device": cpu},
        {"checkpoint_key": "given", "dtype": "int64", "shape": [3], "device": cpu,
         "init": [1, 2, 3]},
        {"checkpoint_key": "Zeros_1", "name": "zeros", "dtype": "float32", "shape": [],
         "device": cpu},
        {"checkpoint_key": "sliced", "dtype": "float32", "shape": [2],
         "slice_spec": "4 0,2", "device": cpu},
    ]});
    cases.push(("initializer forms".to_owned(), own.to_string()));
    cases
}

#[test]
fn handles_trace_is_the_full_trace_without_initializers() {
    for (what, text) in handles_cases() {
        let spec = SpecFile::parse(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
        let trackables = spec.trackables().expect("trackables");
        let options = spec.options().expect("options");
        let full = trace_flat(&trackables, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
        let handles = trace_flat_as(&trackables, &options, VariableOps::Handles)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(handles.saver, full.saver, "{what}: saver names");
        assert_eq!(handles.restore_ops, full.restore_ops, "{what}: restore ops");
        // The ops every plan reaches in the full trace are all in the handles trace…
        let graph = &full.module.graph;
        let find = |name: &str| {
            let name = name.split(':').next().expect("a tensor name");
            graph.find(name).unwrap_or_else(|| panic!("{what}: {name}"))
        };
        let mut roots = vec![find(&full.saver.save_target)];
        roots.extend(full.saver.restore_targets.iter().map(|name| find(name)));
        roots.push(find(&full.saver.filename_tensor_name));
        let reached: std::collections::BTreeSet<String> = graph
            .ancestors(roots)
            .into_iter()
            .map(|id| graph.op(id).name.clone())
            .collect();
        let ours: std::collections::BTreeSet<String> = handles
            .module
            .graph
            .ops()
            .into_iter()
            .map(|id| handles.module.graph.op(id).name.clone())
            .collect();
        assert!(
            ours.is_superset(&reached),
            "{what}: the ops the plans reach"
        );
        // …it has nothing the full trace lacks (the node comparison below), and what it
        // leaves out is only initializers.
        for id in graph.ops() {
            let op = graph.op(id);
            if !ours.contains(&op.name) {
                assert!(
                    matches!(
                        op.op,
                        Op::Const | Op::Fill | Op::VarIsInitializedOp | Op::AssignVariableOp
                    ),
                    "{what}: {} ({:?}) left out",
                    op.name,
                    op.op
                );
            }
        }
        // Op for op, the same nodes (name, op, inputs, device, attributes), in the same order.
        let theirs: Vec<tf::NodeDef> = graph_def(&full.module)
            .node
            .into_iter()
            .filter(|node| ours.contains(&node.name))
            .collect();
        assert_same_nodes(&what, &graph_def(&handles.module).node, &theirs);
    }
}

#[test]
fn handles_trace_refuses_what_the_full_trace_refuses() {
    let mut paths: Vec<_> = std::fs::read_dir(manifest_path("tests/inputs/trace/err"))
        .expect("the error inputs")
        .map(|entry| entry.expect("a folder entry").path())
        .collect();
    paths.sort();
    let mut checked = 0;
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("the input");
        let Ok(spec) = SpecFile::parse(&text) else {
            continue;
        };
        let (Ok(trackables), Ok(options)) = (spec.trackables(), spec.options()) else {
            continue;
        };
        let full = trace_flat(&trackables, &options).map(|_| ());
        let handles = trace_flat_as(&trackables, &options, VariableOps::Handles).map(|_| ());
        assert!(full.is_err(), "{}: the full trace fails", path.display());
        assert_eq!(
            handles.map_err(|e| e.to_string()),
            full.map_err(|e| e.to_string()),
            "{}",
            path.display()
        );
        checked += 1;
    }
    // `bad_init.json` (an initial value of the wrong size) at least reaches the tracer.
    assert!(checked >= 1, "no error input reached the tracer");
}

/// The flat trace names as restore targets the assigns its restore made; a search of the
/// graph for every assign of a `RestoreV2` output finds the same ops in the same order.
#[test]
fn flat_restore_targets_are_the_graphs_restore_assigns() {
    for (what, text) in handles_cases() {
        let spec = SpecFile::parse(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
        let trackables = spec.trackables().expect("trackables");
        let options = spec.options().expect("options");
        for variables in [VariableOps::Create, VariableOps::Handles] {
            let trace = trace_flat_as(&trackables, &options, variables)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let searched = saveplan_ir::saver_ops::restore_targets(&trace.module.graph);
            assert!(!searched.is_empty(), "{what}: no restore targets");
            assert_eq!(
                trace.saver.restore_targets, searched,
                "{what} ({variables:?})"
            );
        }
    }
}
