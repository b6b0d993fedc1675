//! Plan compilation and scheduling: pruning, feeds, device queues, dependency order, results
//! that do not depend on the number of threads, variables, and errors that cancel the run.

use crate::support::exec::{
    backends, in_pool, input_module, prepare, run_logged, strings, verified,
};
use crate::support::{ErrorForm, error_chain};

use std::collections::BTreeMap;

use saveplan::exec::Kernel;
use saveplan::exec::plan::Work;
use saveplan::exec::{
    Backend, CompiledPlan, ExecError, Executor, HostTensor, KernelError, RunContext, VarKey,
    VarKeyRef, VariableError, VariableStore,
};
use saveplan_ir::{AttrValue, Attrs, DType, Module, Op, Port};

const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU";

#[test]
fn compile_prunes_and_builds_one_queue_per_device() {
    let module = input_module("diamond.ir");
    let plan =
        CompiledPlan::compile(verified(&module), &["both:0", "joined"], &["prefix"]).unwrap();
    let names: Vec<&str> = plan.steps().iter().map(|s| s.name.as_str()).collect();
    assert!(!names.contains(&"unused"), "{names:?}");
    assert!(!names.contains(&"prefix"), "fed placeholders do not run");
    let devices: Vec<&str> = plan.queues().iter().map(|q| q.device.as_str()).collect();
    assert_eq!(
        devices,
        [
            format!("{CPU}:2"),
            format!("{CPU}:0"),
            format!("{CPU}:1"),
            format!("{CPU}:3")
        ]
    );
    assert_eq!(plan.feeds().len(), 1);
    assert_eq!(plan.feeds()[0].dtype, Some(DType::String));
    assert_eq!(plan.fetches().len(), 1, "op targets fetch nothing");
    let text = plan.to_string();
    assert!(text.contains("Pack \"both\""), "{text}");
}

#[test]
fn results_do_not_depend_on_thread_count_or_backend() {
    let module = input_module("diamond.ir");
    let plan =
        CompiledPlan::compile(verified(&module), &["both:0", "joined:0"], &["prefix"]).unwrap();
    let variables = VariableStore::new();
    let interp = prepare(&plan, Backend::Interp);
    let reference = in_pool(1, || {
        interp
            .run(
                &RunContext::new(&variables),
                vec![HostTensor::string_scalar("p")],
            )
            .unwrap()
    });
    assert_eq!(strings(&reference[0]), ["p/+p/", "/p-/p", "p"]);
    assert_eq!(strings(&reference[1]), ["p/+p/,/p-/p,p"]);
    for backend in backends() {
        let exec = prepare(&plan, backend);
        for threads in [1, 2, 4] {
            for _ in 0..20 {
                let out = in_pool(threads, || {
                    exec.run(
                        &RunContext::new(&variables),
                        vec![HostTensor::string_scalar("p")],
                    )
                    .unwrap()
                });
                assert_eq!(out, reference, "{backend}, {threads} threads");
            }
        }
    }
}

#[test]
fn ops_run_after_their_data_and_control_inputs() {
    let module = input_module("diamond.ir");
    let plan =
        CompiledPlan::compile(verified(&module), &["both:0", "joined:0"], &["prefix"]).unwrap();
    let variables = VariableStore::new();
    for (backend, threads) in backends_and_threads(&[1, 4]) {
        let exec = prepare(&plan, backend);
        for _ in 0..20 {
            let (result, log) = in_pool(threads, || {
                run_logged(
                    &exec,
                    RunContext::new(&variables),
                    vec![HostTensor::string_scalar("p")],
                )
            });
            result.unwrap();
            assert_eq!(log.len(), plan.steps().len());
            let position: BTreeMap<&str, usize> = log
                .iter()
                .enumerate()
                .map(|(i, name)| (name.as_str(), i))
                .collect();
            for (before, after) in [
                ("start", "left"),
                ("start", "right"),
                ("left", "left_2"),
                ("side", "late"),
                ("late", "both"),
                ("right_2", "both"),
                ("left_2", "joined"),
            ] {
                assert!(
                    position[before] < position[after],
                    "{backend}: {before} after {after}: {log:?}"
                );
            }
        }
    }
}

#[test]
fn first_error_names_op_and_device_and_cancels_dependents() {
    let module = input_module("fails_on_cpu1.ir");
    let plan = CompiledPlan::compile(verified(&module), &["done"], &[]).unwrap();
    let variables = VariableStore::new();
    for (backend, threads) in backends_and_threads(&[1, 4]) {
        let exec = prepare(&plan, backend);
        let (result, log) = in_pool(threads, || {
            run_logged(&exec, RunContext::new(&variables), Vec::new())
        });
        let err = result.unwrap_err();
        assert_eq!(
            error_chain(&err, ErrorForm::OneLine),
            format!(
                "op `read` on {CPU}:1: variable `missing` does not exist or is not initialized"
            )
        );
        assert!(matches!(
            &err,
            ExecError::Op { name, source, .. }
                if name == "read" && matches!(**source, KernelError::Variable(_))
        ));
        assert_eq!(log, ["v"], "{backend}: nothing after the failed op runs");
    }
}

#[test]
fn variable_ops_share_values_with_the_store() {
    let module = input_module("variables.ir");
    let plan = CompiledPlan::compile(
        verified(&module),
        &["before:0", "after:0", "read:0", "assign_anonymous"],
        &[],
    )
    .unwrap();
    for backend in backends() {
        variable_ops_share_values_on(&module, &prepare(&plan, backend));
    }
}

fn variable_ops_share_values_on(module: &saveplan_ir::Module, exec: &Executor) {
    let backend = exec.backend();
    let variables = VariableStore::new();
    let out = exec.run(&RunContext::new(&variables), Vec::new()).unwrap();
    assert_eq!(out[0].as_bool_scalar(), Some(false));
    assert_eq!(out[1].as_bool_scalar(), Some(true));
    let expected = HostTensor::from_i32s(vec![3], &[7, 8, 8]).unwrap();
    assert_eq!(out[2], expected);
    let key = VarKey::new("c", "v");
    let stored = variables.get(&key).unwrap();
    assert!(stored.shares_storage_with(&out[2]), "reads do not copy");
    let anonymous = variables.get(&VarKey::new("", "anonymous")).unwrap();
    assert!(
        anonymous.shares_storage_with(&stored),
        "assignments do not copy"
    );
    assert_eq!(
        variables.keys(),
        [VarKey::new("", "anonymous"), VarKey::new("c", "v")]
    );

    let wrong = CompiledPlan::compile(verified(module), &["wrong_dtype:0"], &[]).unwrap();
    let err = prepare(&wrong, backend)
        .run(&RunContext::new(&variables), Vec::new())
        .unwrap_err();
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        format!("op `wrong_dtype` on {CPU}:0: variable `c/v` holds int32, not float32"),
        "{backend}"
    );
}

#[test]
fn variable_store_puts_and_takes_without_copies() {
    let store = VariableStore::new();
    let key = VarKey::new("", "w");
    let value = HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap();
    assert_eq!(store.put(&key, value.clone()).unwrap(), None);
    assert!(store.get(&key).unwrap().shares_storage_with(&value));
    let other = HostTensor::from_i32s(vec![2], &[1, 2]).unwrap();
    assert!(matches!(
        store.put(&key, other),
        Err(VariableError::DTypeMismatch { .. })
    ));
    let replaced = HostTensor::from_f32s(vec![1], &[3.0]).unwrap();
    assert!(matches!(
        store.assign(&key, DType::Float, replaced.clone(), true),
        Err(VariableError::ShapeMismatch { .. })
    ));
    let previous = store.assign(&key, DType::Float, replaced, false).unwrap();
    assert!(previous.unwrap().shares_storage_with(&value));
    drop(value);
    let taken = store.take(&key).unwrap();
    assert_eq!(taken.into_bytes(), Some(3.0f32.to_le_bytes().to_vec()));
    assert!(!store.is_initialized(&key));
    assert!(store.is_empty());
}

/// A key's slot stays the same through take and put, an empty slot reads as a missing
/// variable (named), slot and key access see the same variable, and a slot of another store is
/// refused rather than naming some other variable.
#[test]
fn variable_slots_are_stable_and_belong_to_their_store() {
    let store = VariableStore::new();
    let w = VarKey::new("", "w");
    let slot = store.slot(&w);
    assert!(store.owns(slot));
    assert!(store.is_empty(), "a slot alone creates no variable");
    assert!(!store.is_initialized(&w));
    assert_eq!(
        store.reader().get_at(slot).unwrap_err(),
        VariableError::NotFound { key: w.clone() }
    );
    let one = HostTensor::from_f32s(vec![1], &[1.0]).unwrap();
    // A refused first assignment (value of another dtype than declared) creates nothing.
    let z = VarKey::new("", "z");
    assert!(matches!(
        store.assign(&z, DType::Int32, one.clone(), false),
        Err(VariableError::DTypeMismatch { .. })
    ));
    assert!(store.is_empty() && !store.is_initialized(&z) && store.keys().is_empty());
    assert_eq!(store.writer().put_at(slot, one.clone()).unwrap(), None);
    assert!(store.get(&w).unwrap().shares_storage_with(&one));
    assert_eq!(store.keys(), vec![w.clone()]);
    // A second key and a wrong-dtype read through the slot.
    let v = VarKey::new("c", "v");
    let v_slot = store.slot(&v);
    assert_ne!(v_slot, slot);
    assert_eq!(
        store.reader().read_as_at(slot, DType::Int32).unwrap_err(),
        VariableError::DTypeMismatch {
            key: w.clone(),
            held: DType::Float,
            requested: DType::Int32
        }
    );
    // Taken: the slot stays and is empty; put by key fills the same slot.
    assert!(store.take(&w).unwrap().shares_storage_with(&one));
    assert_eq!(store.slot(&w), slot);
    assert!(!store.reader().is_initialized_at(slot).unwrap());
    assert!(store.keys().is_empty() && store.is_empty());
    let two = HostTensor::from_f32s(vec![1], &[2.0]).unwrap();
    store.put(&w, two.clone()).unwrap();
    assert!(
        store
            .reader()
            .get_at(slot)
            .unwrap()
            .shares_storage_with(&two)
    );
    assert_eq!(store.len(), 1);
    // Resolving a list gives each key's own slot, whether all are known (read lock only) or
    // one is new (made, still without a variable).
    let keys = [VarKeyRef::from(&w), VarKeyRef::from(&v)];
    assert_eq!(store.slots(keys).as_ref(), [slot, v_slot]);
    let fresh = VarKey::new("", "fresh");
    let with_new = [
        VarKeyRef::from(&v),
        VarKeyRef::from(&fresh),
        VarKeyRef::from(&w),
    ];
    let resolved = store.slots(with_new);
    assert_eq!(resolved.as_ref(), [v_slot, store.slot(&fresh), slot]);
    assert!(!store.is_initialized(&fresh) && store.len() == 1);
    // Another store's slot is refused, even where this store has a slot at that position.
    let other = VariableStore::new();
    let foreign = other.slot(&w);
    assert!(!store.owns(foreign));
    assert_eq!(
        store.reader().get_at(foreign).unwrap_err(),
        VariableError::ForeignSlot
    );
    assert_eq!(
        store.writer().put_at(foreign, two).unwrap_err(),
        VariableError::ForeignSlot
    );
}

#[test]
fn compile_errors_name_what_is_wrong() {
    let module = input_module("diamond.ir");
    let cases: [(&[&str], &[&str], &str); 5] = [
        (&["both:0"], &[], "placeholder `prefix` must be fed"),
        (&["nope:0"], &["prefix"], "no op named `nope` in the graph"),
        (
            &["both:1"],
            &["prefix"],
            "op `both` has 1 outputs, so it has no output 1",
        ),
        (
            &["both:x"],
            &["prefix"],
            "`both:x` is not a tensor name (`op:N`)",
        ),
        (
            &["both"],
            &["prefix", "prefix:0"],
            "tensor `prefix:0` is fed twice",
        ),
    ];
    for (targets, feeds, message) in cases {
        let err = CompiledPlan::compile(verified(&module), targets, feeds).unwrap_err();
        assert_eq!(error_chain(&err, ErrorForm::OneLine), message);
    }
}

/// A fed string `x` and `n` ops `m0`, `m1`, … matching it against patterns `p0`, `p1`, …
/// (`bad` ops get a pattern that does not compile), each a target, one per device of three.
fn many_matches(n: usize, bad: &[usize]) -> (Module, Vec<String>) {
    let mut module = Module::default();
    let graph = &mut module.graph;
    let mut attrs = Attrs::new();
    attrs.insert("dtype".to_owned(), AttrValue::Type(DType::String));
    let x = graph.add_op("x", Op::Placeholder, "", attrs).unwrap();
    let mut targets = Vec::with_capacity(n);
    for i in 0..n {
        let pattern = match bad.contains(&i) {
            true => "(".to_owned(),
            false => format!("p{i}"),
        };
        let mut attrs = Attrs::new();
        attrs.insert("pattern".to_owned(), AttrValue::S(pattern.into_bytes()));
        let device = format!("/device:CPU:{}", i % 3);
        let id = graph
            .add_op(format!("m{i}"), Op::StaticRegexFullMatch, device, attrs)
            .unwrap();
        graph.push_input(id, x, Port::Index(0));
        targets.push(format!("m{i}:0"));
    }
    (module, targets)
}

#[test]
fn every_op_of_a_large_plan_gets_its_own_name_and_kernel() {
    // Kernels and names are made a chunk of ops ahead, on other threads: each must still
    // land on its own op's step, in every chunk.
    const N: usize = 10_000;
    let (module, targets) = many_matches(N, &[]);
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let plan = CompiledPlan::compile(verified(&module), &targets, &["x"]).unwrap();
    assert_eq!(plan.steps().len(), N);
    for (i, step) in plan.steps().iter().enumerate() {
        assert_eq!(step.name, format!("m{i}"));
        match &step.work {
            Work::Kernel(Kernel::StaticRegexFullMatch { pattern, .. }) => {
                assert_eq!(&**pattern, format!("p{i}"), "step {i}");
            }
            other => panic!("step {i}: {other:?}"),
        }
        assert_eq!(
            plan.queues()[step.queue.0 as usize].device,
            format!("{CPU}:{}", i % 3)
        );
    }
}

#[test]
fn the_first_bad_op_of_a_large_plan_is_the_one_reported() {
    const N: usize = 10_000;
    for (bad, first) in [
        (&[9_000, 5_000, 300][..], 300),
        (&[9_000, 5_000], 5_000),
        (&[9_999], 9_999),
    ] {
        let (module, targets) = many_matches(N, bad);
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        let err = CompiledPlan::compile(verified(&module), &targets, &["x"]).unwrap_err();
        let message = error_chain(&err, ErrorForm::OneLine);
        assert!(
            message.contains(&format!("`m{first}`")),
            "{bad:?}: {message}"
        );
    }
}

#[test]
fn feeds_are_checked_at_run_time() {
    let module = input_module("diamond.ir");
    let plan = CompiledPlan::compile(verified(&module), &["side:0"], &["prefix"]).unwrap();
    let variables = VariableStore::new();
    let cx = RunContext::new(&variables);
    for backend in backends() {
        let exec = prepare(&plan, backend);
        let err = exec.run(&cx, Vec::new()).unwrap_err();
        assert_eq!(err.to_string(), "the plan takes 1 feeds, got 0");
        let err = exec
            .run(&cx, vec![HostTensor::int32_scalar(1)])
            .unwrap_err();
        assert_eq!(err.to_string(), "feed `prefix` must be string, got int32");
    }
}

#[test]
fn feeding_an_intermediate_tensor_skips_its_producer() {
    let module = input_module("diamond.ir");
    let plan = CompiledPlan::compile(verified(&module), &["left_2:0"], &["left:0"]).unwrap();
    let names: Vec<&str> = plan.steps().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["left_2"]);
    let variables = VariableStore::new();
    for backend in backends() {
        let out = prepare(&plan, backend)
            .run(
                &RunContext::new(&variables),
                vec![HostTensor::string_scalar("q")],
            )
            .unwrap();
        assert_eq!(strings(&out[0]), ["q+q"], "{backend}");
    }
}

/// Every backend with every thread count of `threads`.
fn backends_and_threads(threads: &[usize]) -> Vec<(Backend, usize)> {
    backends()
        .into_iter()
        .flat_map(|backend| threads.iter().map(move |&n| (backend, n)))
        .collect()
}

#[test]
fn jit_backend_is_there_exactly_when_its_feature_is() {
    let module = input_module("diamond.ir");
    let plan = CompiledPlan::compile(verified(&module), &["side:0"], &["prefix"]).unwrap();
    let result = Executor::new(plan, Backend::Jit);
    assert_eq!(Backend::Jit.is_available(), cfg!(feature = "jit"));
    if cfg!(feature = "jit") {
        assert_eq!(result.unwrap().backend(), Backend::Jit);
    } else {
        assert_eq!(
            result.unwrap_err().to_string(),
            "backend `jit` is not built in (enable the cargo feature `jit`)"
        );
    }
}
