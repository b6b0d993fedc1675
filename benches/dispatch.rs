//! Per-op dispatch overhead of the two executors: the interpreter and the JIT run plans of many
//! cheap ops (`Identity`), a long chain and a wide fan, on 1 and 8 device queues. The floor is
//! the ideal schedule with no synchronization: a plain loop over each queue's steps (gather
//! inputs from the slot table, run the kernel, store outputs: what any executor must do),
//! queue after queue for the chain, queues in parallel on rayon for the fan (whose queues are
//! independent). A backend's time per op minus the floor is what its dispatching costs. Times are the fastest of several runs, backends interleaved,
//! because the machine may be shared.
//!
//! `cargo bench --bench dispatch` (set `DISPATCH_OPS` to change the plan size, default 100000;
//! `RAYON_NUM_THREADS` to change the pool).
#![expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::sync::OnceLock;

use rayon::prelude::*;
use std::time::{Duration, Instant};

use saveplan::exec::{
    Backend, CompiledPlan, Executor, HostTensor, KernelCx, RunContext, VariableStore,
};
use saveplan_ir::{AttrValue, Attrs, DType, Module, Op, Port};

/// How the ops of a benchmark plan depend on each other.
#[derive(Copy, Clone, Debug)]
enum Shape {
    /// `x → op0 → op1 → …`; queue `q` holds a contiguous block, so a chain over 8 queues waits
    /// across queues 7 times.
    Chain,
    /// `x → op_i` for every `i`, queues assigned round robin: no dependencies at all.
    Fan,
}

/// The runs timed per configuration (the fastest is reported).
const RUNS: usize = 9;

fn main() {
    let n_ops: usize = std::env::var("DISPATCH_OPS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(100_000);
    println!(
        "dispatch: {n_ops} Identity ops per plan, {} rayon threads, fastest of {RUNS} runs",
        rayon::current_num_threads()
    );
    println!(
        "{:<6} {:>6} | {:>6} {:>7} {:>7} | {:>14} {:>11} | {:>6} | {:>9} {:>8}",
        "shape",
        "queues",
        "floor",
        "interp",
        "jit",
        "interp overhd",
        "jit overhd",
        "ratio",
        "jit build",
        "jit code"
    );
    println!(
        "{:<6} {:>6} | {:>22} | {:>26} |",
        "", "", "ns/op", "ns/op over floor"
    );
    for shape in [Shape::Chain, Shape::Fan] {
        for n_queues in [1, 8] {
            report(shape, n_ops, n_queues);
        }
    }
}

/// Times both backends on one plan and prints a row.
fn report(shape: Shape, n_ops: usize, n_queues: usize) {
    let (module, targets) = build(shape, n_ops, n_queues);
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let module = saveplan_ir::verify_module(&module).expect("the plan is valid");
    let plan = CompiledPlan::compile(module, &targets, &["x"]).expect("the plan compiles");
    assert_eq!(plan.steps().len(), n_ops);
    assert_eq!(plan.queues().len(), n_queues);
    let interp = Executor::new(plan.clone(), Backend::Interp).expect("the interpreter");
    let start = Instant::now();
    let jit = Executor::new(plan.clone(), Backend::Jit).expect("the JIT compiles the plan");
    let jit_build = start.elapsed();
    let code_bytes = jit.jit_plan().expect("a JIT executor").code_bytes();
    let variables = VariableStore::new();
    let cx = RunContext::new(&variables);
    let mut best = [Duration::MAX; 3];
    for _ in 0..=RUNS {
        let floor = time(|| walk(&plan, &cx, matches!(shape, Shape::Fan)));
        let interp = time(|| run(&interp, &cx));
        let jit = time(|| run(&jit, &cx));
        for (best, time) in best.iter_mut().zip([floor, interp, jit]) {
            *best = (*best).min(time);
        }
    }
    let [floor, interp, jit] = best.map(|time| time.as_secs_f64() * 1e9 / n_ops as f64);
    let (interp_over, jit_over) = (interp - floor, jit - floor);
    println!(
        "{:<6} {:>6} | {floor:>6.1} {interp:>7.1} {jit:>7.1} | {interp_over:>14.1} {jit_over:>11.1} | {:>5.1}x | {:>7.0}ms {:>6}KB",
        format!("{shape:?}").to_lowercase(),
        n_queues,
        interp_over / jit_over,
        jit_build.as_secs_f64() * 1e3,
        code_bytes / 1024,
    );
}

/// How long `f` takes.
fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Runs `exec` on the feed `x`.
fn run(exec: &Executor, cx: &RunContext<'_>) {
    let out = exec
        .run(cx, vec![HostTensor::string_scalar("x")])
        .expect("the plan runs");
    drop(std::hint::black_box(out));
}

/// The floor: the steps of each queue in order, with a slot table like the executors', queue
/// after queue on this thread or (`parallel`, for plans whose queues are independent) one rayon
/// task per queue. In the chain a queue depends only on earlier ones.
fn walk(plan: &CompiledPlan, run: &RunContext<'_>, parallel: bool) {
    let slots: Vec<OnceLock<HostTensor>> = (0..plan.n_slots()).map(|_| OnceLock::new()).collect();
    let _ = slots[0].set(HostTensor::string_scalar("x"));
    let walk_queue = |queue: &saveplan::exec::Queue| {
        for step in queue.steps.iter().map(|&id| plan.step(id)) {
            let inputs: Vec<HostTensor> = step
                .inputs
                .iter()
                .map(|slot| slots[slot.0 as usize].get().cloned().expect("in order"))
                .collect();
            let cx = KernelCx {
                variables: run.variables,
                io: run.io,
                cluster: run.cluster,
                name: &step.name,
                device: &queue.device,
            };
            let saveplan::exec::Work::Kernel(kernel) = &step.work else {
                unreachable!("the benchmark's plans call no functions")
            };
            let outputs = kernel.run(&cx, &inputs).expect("identity runs");
            for (slot, value) in step.outputs.iter().zip(outputs) {
                let _ = slots[slot.0 as usize].set(value);
            }
        }
    };
    if parallel {
        plan.queues().par_iter().for_each(walk_queue);
    } else {
        plan.queues().iter().for_each(walk_queue);
    }
    drop(std::hint::black_box(slots));
}

/// A module of `n_ops` `Identity` ops reading the fed string `x`, and its targets.
fn build(shape: Shape, n_ops: usize, n_queues: usize) -> (Module, Vec<String>) {
    let mut module = Module::default();
    let graph = &mut module.graph;
    let mut attrs = Attrs::new();
    attrs.insert("dtype".to_owned(), AttrValue::Type(DType::String));
    let x = graph
        .add_op("x", Op::Placeholder, "", attrs)
        .expect("a fresh name");
    let mut previous = x;
    let mut targets = Vec::new();
    for i in 0..n_ops {
        let queue = match shape {
            Shape::Chain => i * n_queues / n_ops,
            Shape::Fan => i % n_queues,
        };
        let name = format!("op{i}");
        let id = graph
            .add_op(
                &name,
                Op::Identity,
                format!("/device:CPU:{queue}"),
                Attrs::new(),
            )
            .expect("a fresh name");
        let input = match shape {
            Shape::Chain => previous,
            Shape::Fan => x,
        };
        graph.push_input(id, input, Port::Index(0));
        previous = id;
        if matches!(shape, Shape::Fan) || i + 1 == n_ops {
            targets.push(name);
        }
    }
    (module, targets)
}
