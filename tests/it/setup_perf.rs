//! Scale tests of setup and import, by work counted, not time: the edges the IR's graph
//! walks visit (`Graph::edges_visited`, debug builds) while a plan of N variables is traced,
//! verified and compiled into a `Session` (save and restore plans, keys bound), and while a
//! GraphDef of it is imported (from the decoded message and straight from its bytes),
//! verified, checked, printed and compiled again. Every added variable must cost the same:
//! from N to 2N the work grows twice as much as from N/2 to N. With one task the `SaveV2` has
//! one input per variable, so an op whose N inputs cost N² anywhere on these paths fails the
//! test. A session's JIT code waits for its first run ([`saveplan::exec::Executor::lazy`]).

use prost::Message;
use saveplan::analysis::check_module;
use saveplan::exec::Backend;
use saveplan::export::{Loaded, MessageKind, import_binary_direct, import_graph_def};
use saveplan::session::{Session, SessionOptions};
use saveplan::trace::{
    FlatTrace, Init, ReadKind, SaveableTensor, TraceOptions, Trackable, VariableDef, trace_flat,
};
use saveplan_ir::{DType, Module, to_dot};
use saveplan_proto::tensorflow as pb;

/// N, 2N and 4N variables (N/2, N and 2N in the terms of the module header).
const SIZES: [usize; 3] = [1_000, 2_000, 4_000];

fn trace(n: usize) -> FlatTrace {
    let trackables: Vec<Trackable> = (0..n)
        .map(|i| Trackable {
            tensors: vec![SaveableTensor {
                checkpoint_key: format!("layer_{i}/kernel"),
                slice_spec: String::new(),
                dtype: DType::Float,
                shape: vec![64],
                device: "/job:localhost/replica:0/task:0/device:CPU:0".to_owned(),
                variable: VariableDef {
                    name: Some("kernel".to_owned()),
                    init: Init::Zeros,
                    read: ReadKind::Graph,
                },
            }],
        })
        .collect();
    trace_flat(&trackables, &TraceOptions::default()).unwrap()
}

/// A session on `module`, on every backend.
fn sessions(module: &Module, trace: &FlatTrace) {
    for backend in Backend::available() {
        let options = SessionOptions {
            backend,
            ..SessionOptions::default()
        };
        Session::new(module, trace.saver.clone(), options).unwrap();
    }
}

/// Edges visited by tracing, verifying, compiling and binding `n` variables.
fn setup_work(n: usize) -> u64 {
    let trace = trace(n);
    sessions(&trace.module, &trace);
    trace.module.graph.edges_visited()
}

/// Edges visited by importing a GraphDef of `n` variables, then verifying, checking,
/// printing (text and DOT) and compiling it.
fn import_work(n: usize) -> u64 {
    let trace = trace(n);
    let bytes = saveplan::export::encode_graph_def(&trace.module).unwrap();
    // Both imports: of the decoded message, and straight from the bytes (what the CLI does).
    let graph_def = pb::GraphDef::decode(bytes.as_slice()).unwrap();
    let decoded = import_graph_def(&graph_def).unwrap();
    let module = import_binary_direct(&bytes, MessageKind::GraphDef)
        .and_then(Loaded::into_module)
        .unwrap();
    assert_eq!(module.graph.len(), trace.module.graph.len());
    assert_eq!(decoded.graph.len(), module.graph.len());
    assert!(check_module(&module).is_empty());
    assert!(!module.to_string().is_empty());
    assert!(!to_dot(&module).is_empty());
    sessions(&module, &trace);
    decoded.graph.edges_visited() + module.graph.edges_visited()
}

/// Asserts that the work added from `SIZES[1]` to `SIZES[2]` is twice the work added from
/// `SIZES[0]` to `SIZES[1]` (within 2 %): constant work per variable.
fn assert_linear(what: &str, work: impl Fn(usize) -> u64) {
    let counts: Vec<u64> = SIZES.iter().map(|&n| work(n)).collect();
    let first = counts[1] - counts[0];
    let second = counts[2] - counts[1];
    assert!(first > 0, "{what}: no edges visited {counts:?}");
    assert!(
        second.abs_diff(2 * first) * 50 <= 2 * first,
        "{what}: edges visited {counts:?} for {SIZES:?} variables grow faster than linearly"
    );
}

#[test]
fn setup_work_per_variable_is_constant() {
    assert_linear("setup", setup_work);
}

#[test]
fn import_work_per_input_is_constant() {
    assert_linear("import", import_work);
}

#[cfg(feature = "jit")]
#[test]
fn a_lazy_executor_generates_native_code_only_when_asked() {
    use saveplan::exec::Executor;
    let trace = trace(10);
    let session = Session::new(
        &trace.module,
        trace.saver.clone(),
        SessionOptions::default(),
    )
    .unwrap();
    let plan = session.save_plan().unwrap().whole_plan().unwrap().clone();
    let lazy = Executor::lazy(plan.clone(), Backend::Jit).unwrap();
    assert_eq!(lazy.backend(), Backend::Jit);
    assert!(lazy.jit_plan().is_none());
    let eager = Executor::new(plan, Backend::Jit).unwrap();
    assert!(eager.jit_plan().is_some_and(|jit| jit.n_functions() > 0));
}
