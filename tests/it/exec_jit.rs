//! The JIT against the interpreter where they could differ: plans large enough to span several
//! native chunks per queue with many cross-queue waits, errors inside called functions,
//! panics in host callbacks, and backend selection.

use crate::support::exec::{
    backends, fixture_module, in_pool, input_module, prepare, run_logged, strings, verified,
};
use crate::support::{ErrorForm, error_chain};

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use saveplan::exec::jit::{CHUNK_STEPS, JitPlan};
use saveplan::exec::{Backend, CompiledPlan, HostTensor, RunContext, StepEvent, VariableStore};
use saveplan_ir::{AttrValue, Attrs, Module, Op, Port, Tensor};

const N_OPS: usize = 2000;
const N_QUEUES: usize = 3;

/// A long chain over three devices (blocks of 40 ops, so every block boundary is a wait on
/// another queue), appending `.` every 50 ops, with extra control edges reaching back 17 ops.
fn long_chain() -> Module {
    let mut module = Module::default();
    let graph = &mut module.graph;
    let device = |i: usize| format!("/device:CPU:{}", (i / 40) % N_QUEUES);
    let mut attrs = Attrs::new();
    attrs.insert(
        "dtype".to_owned(),
        AttrValue::Type(saveplan_ir::DType::String),
    );
    let x = graph.add_op("x", Op::Placeholder, "", attrs).unwrap();
    let mut attrs = Attrs::new();
    attrs.insert(
        "value".to_owned(),
        AttrValue::Tensor(Box::new(Tensor::string_scalar("."))),
    );
    attrs.insert(
        "dtype".to_owned(),
        AttrValue::Type(saveplan_ir::DType::String),
    );
    let dot = graph.add_op("dot", Op::Const, device(0), attrs).unwrap();
    let mut ops = Vec::with_capacity(N_OPS);
    let mut previous = x;
    for i in 0..N_OPS {
        let (op, attrs) = if i % 50 == 0 {
            let mut attrs = Attrs::new();
            attrs.insert("N".to_owned(), AttrValue::I(2));
            (Op::StringJoin, attrs)
        } else {
            let mut attrs = Attrs::new();
            attrs.insert("T".to_owned(), AttrValue::Type(saveplan_ir::DType::String));
            (Op::Identity, attrs)
        };
        let id = graph
            .add_op(format!("op{i}"), op, device(i), attrs)
            .unwrap();
        graph.push_input(id, previous, Port::Index(0));
        if i % 50 == 0 {
            graph.push_input(id, dot, Port::Index(0));
        }
        if i % 13 == 0 && i >= 17 {
            graph.add_control(ops[i - 17], id);
        }
        ops.push(id);
        previous = id;
    }
    module
}

/// The chain's targets: the last value and one from the middle.
const TARGETS: [&str; 2] = ["op1999:0", "op1777:0"];

#[test]
fn long_chain_spans_chunks_and_queues() {
    let plan = CompiledPlan::compile(verified(&long_chain()), &TARGETS, &["x"]).unwrap();
    assert_eq!(plan.queues().len(), N_QUEUES);
    let jit = JitPlan::compile(&plan).unwrap();
    let min_chunks: usize = plan
        .queues()
        .iter()
        .map(|queue| queue.steps.len().div_ceil(CHUNK_STEPS))
        .sum();
    assert!(
        min_chunks > N_QUEUES,
        "the test needs several chunks per queue"
    );
    assert_eq!(jit.n_functions(), min_chunks);
    assert!(
        jit.code_bytes() >= plan.steps().len(),
        "straight-line code per step"
    );
    let variables = VariableStore::new();
    let expected = [
        format!("x{}", ".".repeat(N_OPS / 50)),
        format!("x{}", ".".repeat(1777 / 50 + 1)),
    ];
    for backend in backends() {
        let exec = prepare(&plan, backend);
        for threads in [1, 2, 4] {
            let (result, log) = in_pool(threads, || {
                run_logged(
                    &exec,
                    RunContext::new(&variables),
                    vec![HostTensor::string_scalar("x")],
                )
            });
            let out = result.unwrap();
            let values: Vec<String> = out.iter().map(|tensor| strings(tensor).join("")).collect();
            assert_eq!(values, expected, "{backend}, {threads} threads");
            assert_runs_in_dependency_order(&plan, &log, &format!("{backend}, {threads}"));
        }
    }
}

/// Asserts that `log` holds every step once, each after all of its dependencies.
fn assert_runs_in_dependency_order(plan: &CompiledPlan, log: &[String], what: &str) {
    assert_eq!(log.len(), plan.steps().len(), "{what}");
    let position: BTreeMap<&str, usize> = log
        .iter()
        .enumerate()
        .map(|(index, name)| (name.as_str(), index))
        .collect();
    assert_eq!(position.len(), log.len(), "{what}: a step ran twice");
    for step in plan.steps() {
        for dep in &step.deps {
            let dep = &plan.step(*dep).name;
            assert!(
                position[dep.as_str()] < position[step.name.as_str()],
                "{what}: {} ran before {dep}",
                step.name
            );
        }
    }
}

#[test]
fn single_queue_runs_in_the_same_order_on_both_backends() {
    let module = fixture_module("graph/g1_single_cpu/flat_graph.pbtxt");
    let plan = CompiledPlan::compile(verified(&module), &["v/Assign"], &[]).unwrap();
    assert_eq!(plan.queues().len(), 1);
    let logs: Vec<Vec<String>> = backends()
        .into_iter()
        .map(|backend| {
            let variables = VariableStore::new();
            let exec = prepare(&plan, backend);
            let (result, log) = in_pool(1, || {
                run_logged(&exec, RunContext::new(&variables), Vec::new())
            });
            result.unwrap();
            log
        })
        .collect();
    assert!(logs.windows(2).all(|pair| pair[0] == pair[1]), "{logs:?}");
}

/// A function body that fails (its variable does not exist) reports the same chain, call op
/// first, on both backends, and the process goes on.
#[test]
fn error_inside_a_called_function_names_the_call_and_the_op() {
    let module = input_module("plans/function_call.ir");
    let plan = CompiledPlan::compile(verified(&module), &["call:0"], &["prefix"]).unwrap();
    let body_queues: usize = plan
        .steps()
        .iter()
        .map(|step| match &step.work {
            saveplan::exec::Work::Call { plan, .. } => plan.queues().len(),
            _ => 0,
        })
        .sum();
    assert!(body_queues > 0);
    let jit = JitPlan::compile(&plan).unwrap();
    assert_eq!(
        jit.n_functions(),
        plan.queues().len() + body_queues,
        "function bodies are lowered too"
    );
    let cpu = "/job:localhost/replica:0/task:0/device:CPU";
    for backend in backends() {
        let exec = prepare(&plan, backend);
        for threads in [1, 4] {
            let variables = VariableStore::new();
            let err = in_pool(threads, || {
                exec.run(
                    &RunContext::new(&variables),
                    vec![HostTensor::string_scalar("p")],
                )
            })
            .unwrap_err();
            assert_eq!(
                error_chain(&err, ErrorForm::OneLine),
                format!(
                    "op `call` on {cpu}:1: in function `save_fn`: op `read` on {cpu}:1: \
                     variable `v` does not exist or is not initialized"
                ),
                "{backend}"
            );
        }
    }
}

/// A panic in a host callback (here the observer) does not abort: it reaches the caller of
/// `run` as a panic, and the plan runs again afterwards.
#[test]
fn a_panicking_observer_panics_the_caller_not_the_process() {
    let module = input_module("diamond.ir");
    let plan =
        CompiledPlan::compile(verified(&module), &["both:0", "joined:0"], &["prefix"]).unwrap();
    let variables = VariableStore::new();
    for backend in backends() {
        let exec = prepare(&plan, backend);
        let ran = Mutex::new(Vec::new());
        let observer = |event: &StepEvent<'_>| {
            if event.step.name == "left" {
                panic!("observer refuses `left`");
            }
            ran.lock().unwrap().push(event.step.name.clone());
        };
        let cx = RunContext::new(&variables).with_observer(&observer);
        let payload = in_pool(1, || {
            catch_unwind(AssertUnwindSafe(|| {
                exec.run(&cx, vec![HostTensor::string_scalar("p")])
            }))
        })
        .expect_err("the observer panics");
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        assert_eq!(message, Some("observer refuses `left`"), "{backend}");
        assert!(
            !ran.lock().unwrap().iter().any(|name| name == "left_2"),
            "{backend}: nothing after `left` runs"
        );
        let out = exec
            .run(
                &RunContext::new(&variables),
                vec![HostTensor::string_scalar("p")],
            )
            .unwrap();
        assert_eq!(strings(&out[1]), ["p/+p/,/p-/p,p"], "{backend}");
    }
}

#[test]
fn backends_parse_and_print_their_names() {
    for backend in Backend::ALL {
        assert_eq!(backend.name().parse::<Backend>().unwrap(), backend);
        assert_eq!(backend.to_string(), backend.name());
    }
    assert_eq!(
        Backend::available(),
        Backend::ALL,
        "the `jit` feature is on"
    );
    let err = "llvm".parse::<Backend>().unwrap_err();
    assert_eq!(err.name, "llvm");
    assert_eq!(
        err.to_string(),
        "unknown backend `llvm` (expected `interp` or `jit`)"
    );
}

#[test]
fn an_executor_reports_its_backend_and_plan() {
    let module = input_module("diamond.ir");
    let plan = CompiledPlan::compile(verified(&module), &["side:0"], &["prefix"]).unwrap();
    for backend in backends() {
        let exec = prepare(&plan, backend);
        assert_eq!(exec.backend(), backend);
        assert_eq!(exec.jit_plan().is_some(), backend == Backend::Jit);
        assert_eq!(exec.plan().steps().len(), plan.steps().len());
    }
}

#[test]
fn executors_and_jit_plans_are_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<saveplan::exec::Executor>();
    assert_send_sync::<JitPlan>();
}

/// A plan with no steps (its only target is fed) runs and returns the feed on both backends.
#[test]
fn a_plan_without_steps_returns_its_feeds() {
    let module = input_module("diamond.ir");
    let plan = CompiledPlan::compile(verified(&module), &["prefix:0"], &["prefix"]).unwrap();
    assert!(plan.steps().is_empty());
    let variables = VariableStore::new();
    for backend in backends() {
        let exec = prepare(&plan, backend);
        let out = exec
            .run(
                &RunContext::new(&variables),
                vec![HostTensor::string_scalar("p")],
            )
            .unwrap();
        assert_eq!(strings(&out[0]), ["p"], "{backend}");
    }
}
