//! Scale test: tracing 100,000 variables over 8 tasks (a quarter of that in debug builds)
//! gives the expected plan, and the plan grows linearly: the number of ops and edges per
//! added variable is the same from N/4 to N/2 as from N/2 to N. The parallel verifier and
//! GraphDef encoder give the same output on any number of threads, and a plan large enough
//! for its graph to be built on a thread of its own is the graph built on the tracer's. Speed is measured by
//! `cargo bench --bench trace` (see `benches/trace.rs`), not here.

use crate::support::exec::in_pool;

use saveplan::trace::{
    BACKGROUND_MIN_OPS, FlatParts, Init, ReadKind, SaveableTensor, TraceOptions, Trackable,
    VariableDef, VariableOps, trace_flat, trace_flat_as, trace_flat_save_as, trace_flat_with,
};
use saveplan_ir::{DType, Graph, Op};

/// The size in optimized builds; a quarter of it in debug builds to keep `cargo test`
/// light (the structure checked is the same).
const N_VARIABLES: usize = if cfg!(debug_assertions) {
    25_000
} else {
    100_000
};
const N_TASKS: usize = 8;

fn trackables(n: usize) -> Vec<Trackable> {
    (0..n)
        .map(|i| Trackable {
            tensors: vec![SaveableTensor {
                checkpoint_key: format!("layer_{i}/kernel"),
                slice_spec: String::new(),
                dtype: DType::Float,
                shape: vec![4, 4],
                device: format!("/job:worker/replica:0/task:{}/device:CPU:0", i % N_TASKS),
                variable: VariableDef {
                    name: Some("kernel".to_owned()),
                    init: Init::Zeros,
                    read: ReadKind::Graph,
                },
            }],
        })
        .collect()
}

fn trace(n: usize) -> Graph {
    trace_flat(&trackables(n), &TraceOptions::default())
        .unwrap()
        .module
        .graph
}

fn n_edges(graph: &Graph) -> usize {
    graph.edges().len()
}

#[test]
fn hundred_thousand_variables_over_eight_tasks() {
    let graph = trace(N_VARIABLES);
    let ops = graph.ops();
    let count = |kind: Op| ops.iter().filter(|&&id| graph.op(id).op == kind).count();
    assert_eq!(count(Op::SaveV2), N_TASKS);
    assert_eq!(count(Op::RestoreV2), N_TASKS);
    assert_eq!(count(Op::VarHandleOp), N_VARIABLES);
    assert_eq!(count(Op::AssignVariableOp), 2 * N_VARIABLES);
    let save = graph.find("SaveV2_7").expect("the eighth shard's SaveV2");
    assert_eq!(graph.num_inputs(save) as usize, 3 + N_VARIABLES / N_TASKS);
    // All handles share the name `kernel`, so TensorFlow's suffixes run up to `kernel_<n-1>`.
    let last = format!("kernel_{}", N_VARIABLES - 1);
    assert!(graph.find(&last).is_some());
}

#[test]
fn plan_size_is_linear_in_the_number_of_variables() {
    let sizes = [N_VARIABLES / 4, N_VARIABLES / 2, N_VARIABLES];
    let graphs: Vec<Graph> = sizes.iter().map(|&n| trace(n)).collect();
    let ops: Vec<usize> = graphs.iter().map(Graph::len).collect();
    let edges: Vec<usize> = graphs.iter().map(n_edges).collect();
    // Each step doubles the variables added, so it must double the ops and edges added.
    assert_eq!(ops[2] - ops[1], 2 * (ops[1] - ops[0]), "ops {ops:?}");
    assert_eq!(
        edges[2] - edges[1],
        2 * (edges[1] - edges[0]),
        "edges {edges:?}"
    );
    // Seven ops per variable (zeros, handle, IsInitialized, Assign, Read, restore Identity
    // and AssignVariableOp), and nothing else that grows.
    assert_eq!(ops[1] - ops[0], 7 * (sizes[1] - sizes[0]));
}

/// The verifier and `encode_graph_def` work on batches of ops in parallel; their output must
/// not depend on the thread count, and the encoding must equal prost's encoding of the
/// `GraphDef` built whole.
#[test]
fn parallel_export_and_verify_do_not_depend_on_the_thread_count() {
    use prost::Message;
    // 20,000 variables make 140,000 ops: dozens of batches.
    let mut module = trace_flat(&trackables(20_000), &TraceOptions::default())
        .unwrap()
        .module;
    let whole = saveplan::export::graph_def(&module)
        .unwrap()
        .encode_to_vec();
    for threads in [1, 2, 4] {
        let streamed = in_pool(threads, || saveplan::export::encode_graph_def(&module));
        assert!(
            streamed.unwrap() == whole,
            "encode_graph_def on {threads} threads differs from graph_def + encode"
        );
    }
    // Break ops spread over many batches, last first: the errors must come in op order.
    let reads: Vec<_> = module
        .graph
        .ops()
        .into_iter()
        .filter(|&id| module.graph.op(id).op == Op::ReadVariableOp)
        .step_by(1_500)
        .collect();
    for &id in reads.iter().rev() {
        module.graph.op_mut(id).attrs().remove("dtype");
    }
    let reports: Vec<Vec<String>> = [1, 2, 4]
        .into_iter()
        .map(|threads| {
            let errors = in_pool(threads, || saveplan_ir::verify_module(&module))
                .expect_err("ops without dtype are rejected");
            errors.0.iter().map(ToString::to_string).collect()
        })
        .collect();
    assert!(reports.len() == 3 && reports[0].len() >= reads.len());
    let expected: Vec<&str> = reads.iter().map(|&id| &*module.graph.op(id).name).collect();
    let named: Vec<&str> = reports[0]
        .iter()
        .filter_map(|line| line.split('`').nth(1))
        .collect();
    let mut first_mentions = named.clone();
    first_mentions.dedup();
    assert_eq!(first_mentions, expected, "errors follow op order");
    assert_eq!(reports[0], reports[1]);
    assert_eq!(reports[0], reports[2]);
}

/// `trace_flat` of a plan large enough for a background graph builds op for op, edge for
/// edge, the graph the tracer builds on its own thread.
#[test]
fn background_graph_matches_the_tracers_own() {
    let n = BACKGROUND_MIN_OPS / 7 + 1000;
    let trackables = trackables(n);
    let options = TraceOptions::default();
    let flat = trace_flat(&trackables, &options).unwrap();
    assert!(flat.module.graph.len() > BACKGROUND_MIN_OPS);
    let parts = FlatParts {
        variables: VariableOps::Create,
        save: true,
        restore: true,
    };
    let (graph, _) = trace_flat_with(Graph::new(), &trackables, &options, parts).unwrap();
    assert_eq!(flat.module.graph.to_string(), graph.to_string());
}

/// `trace_flat_save_as` traces the first ops of `trace_flat_as`, op for op and name for name,
/// and stops where the restore plan starts; small plans and background-built ones alike.
#[test]
fn a_save_only_trace_is_the_full_traces_beginning() {
    let options = TraceOptions::default();
    for n in [3, BACKGROUND_MIN_OPS / 4 + 100] {
        let trackables = trackables(n);
        let full = trace_flat_as(&trackables, &options, VariableOps::Handles).unwrap();
        let save = trace_flat_save_as(&trackables, &options, VariableOps::Handles).unwrap();
        let (full_graph, save_graph) = (&full.module.graph, &save.module.graph);
        let in_order = |graph: &Graph| {
            let mut ids = graph.ops();
            ids.sort_by_key(|&id| graph.seq(id));
            ids
        };
        let (full_ops, save_ops) = (in_order(full_graph), in_order(save_graph));
        assert!(
            save_ops.len() < full_ops.len(),
            "{n}: the restore plan is left out"
        );
        for (&a, &b) in save_ops.iter().zip(&full_ops) {
            assert_eq!(save_graph.op(a), full_graph.op(b), "{n}");
        }
        let restore_start = full_graph.op(full_ops[save_ops.len()]);
        assert_eq!(restore_start.name, "RestoreV2/tensor_names", "{n}");
        assert_eq!(save.saver.save_target, full.saver.save_target);
        assert_eq!(
            save.saver.filename_tensor_name,
            full.saver.filename_tensor_name
        );
        assert!(save.saver.restore_targets.is_empty() && save.restore_ops.is_empty());
    }
}
