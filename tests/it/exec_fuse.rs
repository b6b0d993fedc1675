//! The fusion pass (`saveplan::exec::fuse`): fused save and restore plans write the same
//! bytes, restore the same values, report the same ops to an observer and fail with the same
//! errors as the unfused plans, on both backends; and the steps a fused plan schedules do not
//! grow with the number of variables.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::exec::{
    HookedIo, assert_same_files, backends, fill_variables, fixture_module, prepare, verified,
};
use crate::support::{ErrorForm, error_chain, fixture};

use saveplan::exec::{
    BundleIo, CompiledPlan, Executor, HostTensor, RunContext, StepEvent, VarKey, VariableStore,
    Work,
};
use saveplan::trace::spec::SpecFile;
use saveplan::trace::{FlatTrace, trace_flat};

/// A traced flat plan of `n` float32[4] variables spread over `n_tasks` tasks.
fn trace(n: usize, n_tasks: usize) -> FlatTrace {
    let variables: Vec<String> = (0..n)
        .map(|index| {
            format!(
                r#"{{"checkpoint_key":"v{index:04}","dtype":"float32","shape":[4],"device":"/job:worker/replica:0/task:{}/device:CPU:0"}}"#,
                index % n_tasks
            )
        })
        .collect();
    let spec = SpecFile::parse(&format!(r#"{{"variables":[{}]}}"#, variables.join(",")))
        .expect("the spec parses");
    trace_flat(&spec.trackables().unwrap(), &spec.options().unwrap()).expect("the spec traces")
}

/// The save and restore plans of `trace`, fused or not.
fn plans(trace: &FlatTrace, fused: bool) -> (CompiledPlan, CompiledPlan) {
    let module = verified(&trace.module);
    let feeds = [trace.saver.filename_tensor_name.as_str()];
    let restore: Vec<&str> = trace
        .saver
        .restore_targets
        .iter()
        .map(String::as_str)
        .collect();
    let compile = if fused {
        CompiledPlan::compile
    } else {
        CompiledPlan::compile_unfused
    };
    (
        compile(module, &[&trace.saver.save_target], &feeds).unwrap(),
        compile(module, &restore, &feeds).unwrap(),
    )
}

/// The steps a run schedules (folded steps are in no queue).
fn scheduled(plan: &CompiledPlan) -> usize {
    plan.queues().iter().map(|queue| queue.steps.len()).sum()
}

/// The variable chains folded into the plan's fused steps.
fn folded_chains(plan: &CompiledPlan) -> usize {
    plan.steps()
        .iter()
        .map(|step| match &step.work {
            Work::Fused(fused) => fused.n_chains(),
            _ => 0,
        })
        .sum()
}

/// Runs `plan` with `prefix` fed on `store`, returning the result rendered on one line and the
/// sorted names of the ops the observer saw.
fn run(plan: &Executor, store: &VariableStore, prefix: &str) -> (Result<(), String>, Vec<String>) {
    let io = BundleIo::default();
    let log = Mutex::new(Vec::new());
    let observer = |event: &StepEvent<'_>| log.lock().unwrap().push(event.step.name.clone());
    let cx = RunContext::new(store).with_io(&io);
    let plain = plan
        .run(&cx, vec![HostTensor::string_scalar(prefix)])
        .map(drop)
        .map_err(|err| error_chain(&err, ErrorForm::OneLine));
    let observed = plan
        .run(
            &cx.with_observer(&observer),
            vec![HostTensor::string_scalar(prefix)],
        )
        .map(drop)
        .map_err(|err| error_chain(&err, ErrorForm::OneLine));
    assert_eq!(plain, observed, "with and without an observer");
    let mut names = log.into_inner().unwrap();
    names.sort();
    (plain, names)
}

/// The values of every variable of `store`.
fn contents(store: &VariableStore) -> Vec<(VarKey, HostTensor)> {
    store
        .keys()
        .into_iter()
        .map(|key| {
            let value = store.get(&key).unwrap();
            (key, value)
        })
        .collect()
}

/// A save runs O(1) steps and a restore O(1) steps however many variables there are: every
/// per-variable op is folded (the unfused plans, by contrast, grow by three steps per variable).
#[test]
fn scheduled_steps_do_not_grow_with_the_variables() {
    for n_tasks in [1, 3] {
        let counts = |n: usize| {
            let trace = trace(n, n_tasks);
            let (save, restore) = plans(&trace, true);
            let (save_unfused, restore_unfused) = plans(&trace, false);
            assert_eq!(folded_chains(&save), n, "{n_tasks} tasks: save chains");
            assert_eq!(
                folded_chains(&restore),
                n,
                "{n_tasks} tasks: restore chains"
            );
            (
                [scheduled(&save), scheduled(&restore)],
                [scheduled(&save_unfused), scheduled(&restore_unfused)],
            )
        };
        let (fused_half, unfused_half) = counts(24);
        let (fused_full, unfused_full) = counts(48);
        assert_eq!(fused_half, fused_full, "{n_tasks} tasks: fused steps");
        assert_eq!(
            [
                unfused_full[0] - unfused_half[0],
                unfused_full[1] - unfused_half[1]
            ],
            [2 * 24, 3 * 24],
            "{n_tasks} tasks: unfused steps per variable (VarHandleOp, read / identity, assign)"
        );
    }
}

/// Fused and unfused plans write byte-identical checkpoints, restore the same values and
/// report the same ops to an observer, on every backend, on one task and on three.
#[test]
fn fused_and_unfused_plans_do_the_same() {
    for n_tasks in [1, 3] {
        let trace = trace(12, n_tasks);
        let unfused = plans(&trace, false);
        let fused = plans(&trace, true);
        for backend in backends() {
            let label = format!("{n_tasks} tasks, {backend}");
            let store = VariableStore::new();
            let filled = fill_variables(&trace.module, &store, 7);
            assert_eq!(filled.len(), 12, "{label}");
            let mut dirs = Vec::new();
            let mut logs = Vec::new();
            let mut restored = Vec::new();
            for (save, restore) in [&unfused, &fused] {
                let dir = tempfile::tempdir().unwrap();
                let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
                let (result, saved) = run(&prepare(save, backend), &store, &prefix);
                result.unwrap_or_else(|err| panic!("{label}: save: {err}"));
                let into = VariableStore::new();
                let (result, assigned) = run(&prepare(restore, backend), &into, &prefix);
                result.unwrap_or_else(|err| panic!("{label}: restore: {err}"));
                restored.push(contents(&into));
                logs.push((saved, assigned));
                dirs.push(dir);
            }
            assert_same_files(&[("unfused", dirs[0].path()), ("fused", dirs[1].path())]);
            assert_eq!(restored[0], restored[1], "{label}: restored values");
            assert_eq!(restored[1], contents(&store), "{label}: restored = saved");
            assert_eq!(logs[0], logs[1], "{label}: observed ops");
            // Every VarHandleOp, read and assign is reported: 12 variables, 3 ops each side.
            assert!(logs[1].0.len() >= 24 && logs[1].1.len() >= 36, "{label}");
        }
    }
}

/// A restore into a variable of another dtype fails naming the same `AssignVariableOp`, and a
/// save of a missing variable the same `ReadVariableOp`, fused or not, with or without an
/// observer (which makes the fused step run op by op). On one task the same assignments are
/// made before the failure; on two, the other device's progress when the run is cancelled
/// depends on timing (a fused step that started finishes), so only the errors are compared.
#[test]
fn fused_and_unfused_plans_fail_alike() {
    for n_tasks in [1, 2] {
        let trace = trace(6, n_tasks);
        let unfused = plans(&trace, false);
        let fused = plans(&trace, true);
        for backend in backends() {
            let label = format!("{n_tasks} tasks, {backend}");
            let store = VariableStore::new();
            let filled = fill_variables(&trace.module, &store, 3);
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
            let (result, _) = run(&prepare(&fused.0, backend), &store, &prefix);
            result.unwrap();
            // The fourth variable holds int32: its assignment fails.
            let (wrong_key, _) = &filled[3];
            let mut errors = Vec::new();
            for (save, restore) in [&unfused, &fused] {
                let into = VariableStore::new();
                let int32 = HostTensor::from_i32s(vec![4], &[1, 2, 3, 4]).unwrap();
                into.put(wrong_key, int32).unwrap();
                let (restore_error, _) = run(&prepare(restore, backend), &into, &prefix);
                let missing = VariableStore::new();
                for (key, value) in filled.iter().filter(|(key, _)| key != wrong_key) {
                    missing.put(key, value.clone()).unwrap();
                }
                let save_dir = tempfile::tempdir().unwrap();
                let save_prefix = save_dir.path().join("ckpt").to_string_lossy().into_owned();
                let (save_error, _) = run(&prepare(save, backend), &missing, &save_prefix);
                let assigned = if n_tasks == 1 { into.len() } else { 0 };
                errors.push((
                    restore_error.unwrap_err(),
                    save_error.unwrap_err(),
                    assigned,
                ));
            }
            assert_eq!(errors[0], errors[1], "{label}");
            let (restore_error, save_error, assigned) = &errors[1];
            if n_tasks == 1 {
                assert_eq!(
                    *assigned, 4,
                    "{label}: three assigned before the failure, plus it"
                );
            }
            assert!(
                restore_error.contains("AssignVariableOp") && restore_error.contains("int32"),
                "{label}: {restore_error}"
            );
            assert!(
                save_error.contains("ReadVariableOp") && save_error.contains("does not exist"),
                "{label}: {save_error}"
            );
        }
    }
}

/// A fused step resolves its variables to slots once per store: one compiled plan run against
/// two stores in turn saves each store's own values and restores into each store (no slot of
/// the other store is used), and a variable taken after a run is missing at the next run,
/// named after its `ReadVariableOp`, as on a first run.
#[test]
fn fused_steps_resolve_their_variables_per_store() {
    for n_tasks in [1, 3] {
        let trace = trace(9, n_tasks);
        let (save, restore) = plans(&trace, true);
        for backend in backends() {
            let label = format!("{n_tasks} tasks, {backend}");
            let (save, restore) = (prepare(&save, backend), prepare(&restore, backend));
            let stores = [VariableStore::new(), VariableStore::new()];
            fill_variables(&trace.module, &stores[0], 1);
            fill_variables(&trace.module, &stores[1], 2);
            assert_ne!(contents(&stores[0]), contents(&stores[1]), "{label}");
            let dir = tempfile::tempdir().unwrap();
            let prefix = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
            let io = BundleIo::default();
            let go = |plan: &Executor, store: &VariableStore, prefix: &str| {
                let cx = RunContext::new(store).with_io(&io);
                plan.run(&cx, vec![HostTensor::string_scalar(prefix)])
                    .map(drop)
                    .map_err(|err| error_chain(&err, ErrorForm::OneLine))
            };
            // Saves alternate between the stores; the first store's checkpoints are equal.
            for (round, index) in [0, 1, 0].into_iter().enumerate() {
                go(&save, &stores[index], &prefix(&format!("s{round}")))
                    .unwrap_or_else(|err| panic!("{label}: save {round}: {err}"));
            }
            let files = |name: &str| -> Vec<(String, Vec<u8>)> {
                let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                    .filter_map(|file| {
                        let suffix = file.strip_prefix(name)?.strip_prefix('.')?.to_owned();
                        Some((suffix, std::fs::read(dir.path().join(&file)).unwrap()))
                    })
                    .collect();
                files.sort();
                files
            };
            assert!(!files("s0").is_empty(), "{label}");
            assert_eq!(files("s0"), files("s2"), "{label}: store 0 saved twice");
            assert_ne!(files("s0"), files("s1"), "{label}: the stores differ");
            for round in [0, 2] {
                let into = VariableStore::new();
                go(&restore, &into, &prefix(&format!("s{round}"))).unwrap();
                assert_eq!(contents(&into), contents(&stores[0]), "{label}: s{round}");
            }
            // Restores alternate too, into two stores each holding the other's checkpoint.
            let targets = [VariableStore::new(), VariableStore::new()];
            for (source, target) in [(0, 0), (1, 1), (2, 0), (1, 1)] {
                go(&restore, &targets[target], &prefix(&format!("s{source}"))).unwrap();
            }
            assert_eq!(contents(&targets[0]), contents(&stores[0]), "{label}");
            assert_eq!(contents(&targets[1]), contents(&stores[1]), "{label}");
            // Taken after cached runs: missing at the next run, by name.
            let (taken, _) = &fill_variables(&trace.module, &VariableStore::new(), 0)[4];
            stores[1].take(taken).unwrap();
            let err = go(&save, &stores[1], &prefix("s3")).unwrap_err();
            assert!(
                err.contains(&format!("variable `{taken}` does not exist"))
                    && err.contains("ReadVariableOp"),
                "{label}: {err}"
            );
        }
    }
}

/// A fused save borrows the variables under the store's read lock until its `SaveV2` has
/// written them: an assignment from another thread during the write waits for the write, and
/// the checkpoint holds the values from before it, as a save that copied them would.
#[test]
fn an_assignment_during_a_fused_save_waits_for_its_write() {
    let trace = trace(4, 1);
    let (save, restore) = plans(&trace, true);
    for backend in backends() {
        let store = Arc::new(VariableStore::new());
        let before = fill_variables(&trace.module, &store, 1);
        let (key, old) = before[2].clone();
        let new = fill_variables(&trace.module, &VariableStore::new(), 2)[2]
            .1
            .clone();
        assert_ne!(old, new, "{backend}");
        // The save starts another thread assigning `new`, and records whether that finished
        // 50 ms into the save.
        let assigner = Mutex::new(None);
        let finished_during_save = AtomicBool::new(true);
        let io = HookedIo {
            before_save: |_: &str| {
                let finished = Arc::new(AtomicBool::new(false));
                let (store, key, new, flag) = (
                    Arc::clone(&store),
                    key.clone(),
                    new.clone(),
                    Arc::clone(&finished),
                );
                *assigner.lock().unwrap() = Some(std::thread::spawn(move || {
                    store.put(&key, new).unwrap();
                    flag.store(true, Ordering::SeqCst);
                }));
                std::thread::sleep(Duration::from_millis(50));
                finished_during_save.store(finished.load(Ordering::SeqCst), Ordering::SeqCst);
                Ok(())
            },
            before_merge: || Ok(()),
        };
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
        let cx = RunContext::new(&store).with_io(&io);
        prepare(&save, backend)
            .run(&cx, vec![HostTensor::string_scalar(prefix.as_str())])
            .unwrap();
        assert!(
            !finished_during_save.load(Ordering::SeqCst),
            "{backend}: the assignment did not wait for the write"
        );
        let assigner = assigner.lock().unwrap().take();
        assigner.unwrap().join().unwrap();
        assert_eq!(
            store.get(&key).unwrap(),
            new,
            "{backend}: assigned after the save"
        );
        let restored = VariableStore::new();
        let cx = RunContext::new(&restored).with_io(&io);
        prepare(&restore, backend)
            .run(&cx, vec![HostTensor::string_scalar(prefix.as_str())])
            .unwrap();
        let mut expected = before;
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            contents(&restored),
            expected,
            "{backend}: the values before"
        );
    }
}

/// The edges of a fused plan are the unfused plan's, moved onto the steps their ops were
/// folded into: for every edge `a → b` of the unfused plan whose ends land in different steps
/// there is that edge in the fused plan, and no other. Every step's `deps` and `users` are
/// sorted, without duplicates or the step itself, and mirror each other; a folded step has
/// none. Checked on traced plans of 1 to 3 tasks and on TF1 `Saver` graphs (reference
/// variables, a handle chain that is not folded).
#[test]
fn fused_edges_are_the_unfused_edges_between_fused_steps() {
    let mut cases: Vec<(String, CompiledPlan, CompiledPlan)> = Vec::new();
    for n_tasks in [1, 2, 3] {
        let trace = trace(10, n_tasks);
        let (save, restore) = plans(&trace, false);
        let (fused_save, fused_restore) = plans(&trace, true);
        cases.push((format!("{n_tasks} tasks, save"), save, fused_save));
        cases.push((format!("{n_tasks} tasks, restore"), restore, fused_restore));
        // Both in one plan: each variable handle then has two users, so no handle is
        // folded and every chain depends on a step outside it.
        let mut targets = vec![trace.saver.save_target.as_str()];
        targets.extend(trace.saver.restore_targets.iter().map(String::as_str));
        let feeds = [trace.saver.filename_tensor_name.as_str()];
        let module = verified(&trace.module);
        cases.push((
            format!("{n_tasks} tasks, save and restore"),
            CompiledPlan::compile_unfused(module, &targets, &feeds).unwrap(),
            CompiledPlan::compile(module, &targets, &feeds).unwrap(),
        ));
    }
    for variant in ["sharded", "unsharded"] {
        let module = fixture_module(&format!("graph/g9_v1_saver/{variant}.graph.pbtxt"));
        let saver = match saveplan::export::read_graph_file(&fixture(&format!(
            "graph/g9_v1_saver/{variant}.saver_def.pbtxt"
        ))) {
            Ok(saveplan::export::Loaded::Saver(saver)) => saver,
            other => panic!("not a SaverDef: {:?}", other.err()),
        };
        let feeds = [saver.filename_tensor_name.as_str()];
        for target in [&saver.save_tensor_name, &saver.restore_op_name] {
            let compile = |fused: bool| {
                let compile = match fused {
                    true => CompiledPlan::compile,
                    false => CompiledPlan::compile_unfused,
                };
                compile(verified(&module), &[target], &feeds).unwrap()
            };
            cases.push((
                format!("g9 {variant}, {target}"),
                compile(false),
                compile(true),
            ));
        }
    }
    let mut folded_somewhere = 0;
    for (label, unfused, fused) in &cases {
        assert_eq!(unfused.steps().len(), fused.steps().len(), "{label}");
        // The step each unfused step runs in.
        let mut home: Vec<u32> = (0..fused.steps().len() as u32).collect();
        for (index, step) in fused.steps().iter().enumerate() {
            if let Work::Fused(group) = &step.work {
                for member in group.members() {
                    home[member.0 as usize] = index as u32;
                    folded_somewhere += 1;
                }
            }
        }
        let mut expected: BTreeSet<(u32, u32)> = BTreeSet::new();
        for (index, step) in unfused.steps().iter().enumerate() {
            for dep in &step.deps {
                let (from, to) = (home[dep.0 as usize], home[index]);
                if from != to {
                    expected.insert((from, to));
                }
            }
        }
        let mut deps_edges = BTreeSet::new();
        let mut users_edges = BTreeSet::new();
        for (index, step) in fused.steps().iter().enumerate() {
            let index = index as u32;
            for (what, edges) in [("deps", &step.deps), ("users", &step.users)] {
                let ids: Vec<u32> = edges.iter().map(|id| id.0).collect();
                assert!(
                    ids.windows(2).all(|pair| pair[0] < pair[1]) && !ids.contains(&index),
                    "{label}: step {index}'s {what} {ids:?} are not sorted, unique, without itself"
                );
                if home[index as usize] != index {
                    assert!(
                        ids.is_empty(),
                        "{label}: folded step {index} keeps {what} {ids:?}"
                    );
                }
            }
            deps_edges.extend(step.deps.iter().map(|dep| (dep.0, index)));
            users_edges.extend(step.users.iter().map(|user| (index, user.0)));
        }
        assert_eq!(deps_edges, expected, "{label}: deps");
        assert_eq!(users_edges, expected, "{label}: users");
    }
    assert!(
        folded_somewhere > 60,
        "the cases fold steps: {folded_somewhere}"
    );
}

/// The unfused and the fused plan of `module` for `targets`, with `prefix` fed.
fn module_plans(module: &saveplan_ir::Module, targets: &[&str]) -> (CompiledPlan, CompiledPlan) {
    let verified = verified(module);
    (
        CompiledPlan::compile_unfused(verified, targets, &["prefix"]).unwrap(),
        CompiledPlan::compile(verified, targets, &["prefix"]).unwrap(),
    )
}

/// A fused save whose `SaveV2` also takes tensors no chain folds (a constant and a TF1
/// reference, which is read) between the variables it lends writes the bytes of the unfused
/// save, on every backend.
#[test]
fn a_fused_save_mixes_lent_variables_with_its_other_inputs() {
    let module = saveplan_ir::parse_module(
        r#"graph {
  prefix = Placeholder[dtype=string, shape=[]]
  a = VarHandleOp[dtype=float32, shape=[2], shared_name="a"]
  a/Read = ReadVariableOp(a)[dtype=float32]
  c = Const[dtype=int32, value=tensor<int32>[2]{int [7, 8]}]
  r = VariableV2[dtype=int32, shape=[2], shared_name="r"]
  d = VarHandleOp[dtype=int64, shape=[], shared_name="d"]
  d/Read = ReadVariableOp(d)[dtype=int64]
  names = Const[dtype=string, value=tensor<string>[4]{strings ["a", "b", "c", "d"]}]
  specs = Const[dtype=string, value=tensor<string>[4]{strings ["", "", "", ""]}]
  save = SaveV2(prefix, names, specs, a/Read, c, r, d/Read)[dtypes=list(type)[float32, int32, int32, int64]]
}
"#,
    )
    .unwrap();
    let (unfused, fused) = module_plans(&module, &["save"]);
    assert_eq!(folded_chains(&fused), 2, "the two variable reads fold");
    let store = VariableStore::new();
    store
        .put(
            &VarKey::new("", "a"),
            HostTensor::from_f32s(vec![2], &[1.5, 2.5]).unwrap(),
        )
        .unwrap();
    store
        .put(
            &VarKey::new("", "r"),
            HostTensor::from_i32s(vec![2], &[3, 4]).unwrap(),
        )
        .unwrap();
    store
        .put(&VarKey::new("", "d"), HostTensor::int64_scalar(9))
        .unwrap();
    for backend in backends() {
        let mut dirs = Vec::new();
        for plan in [&unfused, &fused] {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
            let (result, _) = run(&prepare(plan, backend), &store, &prefix);
            result.unwrap_or_else(|err| panic!("{backend}: {err}"));
            dirs.push(dir);
        }
        assert_same_files(&[("unfused", dirs[0].path()), ("fused", dirs[1].path())]);
        let prefix = dirs[1].path().join("ckpt").to_string_lossy().into_owned();
        let request = saveplan::exec::RestoreRequest {
            name: "c",
            shape_and_slice: "",
            dtype: saveplan_ir::DType::Int32,
        };
        let read = saveplan::exec::CheckpointIo::restore(&BundleIo::default(), &prefix, &[request]);
        assert_eq!(
            read.unwrap(),
            [HostTensor::from_i32s(vec![2], &[3, 4]).unwrap()],
            "{backend}: the reference's variable is saved"
        );
    }
}

/// Saves int32[1] tensors holding 1, 2, … under `names` at `prefix` with the bundle code, and
/// returns them.
fn save_counting(prefix: &str, names: &[&str]) -> Vec<HostTensor> {
    let values: Vec<HostTensor> = (1..=names.len() as i32)
        .map(|value| HostTensor::from_i32s(vec![1], &[value]).unwrap())
        .collect();
    let requests: Vec<saveplan::exec::SaveRequest<'_>> = names
        .iter()
        .zip(&values)
        .map(|(name, tensor)| saveplan::exec::SaveRequest {
            name,
            shape_and_slice: "",
            tensor,
        })
        .collect();
    saveplan::exec::CheckpointIo::save(&BundleIo::default(), prefix, &requests).unwrap();
    values
}

/// A fused restore whose `RestoreV2` outputs are folded and kept in turn (a kept one is
/// fetched) assigns the folded ones and hands out the kept ones in order, as the unfused plan
/// does, on every backend.
#[test]
fn a_fused_restore_keeps_the_outputs_it_does_not_fold_in_order() {
    let module = saveplan_ir::parse_module(
        r#"graph {
  prefix = Placeholder[dtype=string, shape=[]]
  a = VarHandleOp[dtype=int32, shape=[1], shared_name="a"]
  c = VarHandleOp[dtype=int32, shape=[1], shared_name="c"]
  names = Const[dtype=string, value=tensor<string>[4]{strings ["a", "b", "c", "d"]}]
  specs = Const[dtype=string, value=tensor<string>[4]{strings ["", "", "", ""]}]
  restore = RestoreV2(prefix, names, specs)[dtypes=list(type)[int32, int32, int32, int32]]
  a/Identity = Identity(restore)[T=int32]
  a/Assign = AssignVariableOp(a, a/Identity)[dtype=int32]
  c/Identity = Identity(restore:2)[T=int32]
  c/Assign = AssignVariableOp(c, c/Identity)[dtype=int32]
  done = NoOp(^a/Assign, ^c/Assign)
}
"#,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
    let values = save_counting(&prefix, &["a", "b", "c", "d"]);
    let (unfused, fused) = module_plans(&module, &["restore:3", "restore:1", "done"]);
    assert_eq!(folded_chains(&fused), 2, "outputs 0 and 2 fold");
    for backend in backends() {
        for plan in [&unfused, &fused] {
            let store = VariableStore::new();
            let io = BundleIo::default();
            let cx = RunContext::new(&store).with_io(&io);
            let fetched = prepare(plan, backend)
                .run(&cx, vec![HostTensor::string_scalar(prefix.as_str())])
                .unwrap();
            assert_eq!(
                fetched[..2],
                [values[3].clone(), values[1].clone()],
                "{backend}: the kept outputs"
            );
            assert_eq!(store.get(&VarKey::new("", "a")).unwrap(), values[0]);
            assert_eq!(store.get(&VarKey::new("", "c")).unwrap(), values[2]);
        }
    }
}

/// A fused restore and save whose names are fed, not constant, use the names of each run (the
/// fused step keeps the names it checked only while they are the same tensor), and names that
/// are not UTF-8 fail as in the unfused plan.
#[test]
fn fused_steps_use_the_names_of_each_run() {
    let module = saveplan_ir::parse_module(
        r#"graph {
  prefix = Placeholder[dtype=string, shape=[]]
  names = Placeholder[dtype=string, shape=[1]]
  a = VarHandleOp[dtype=int32, shape=[1], shared_name="a"]
  specs = Const[dtype=string, value=tensor<string>[1]{strings [""]}]
  restore = RestoreV2(prefix, names, specs)[dtypes=list(type)[int32]]
  a/Assign = AssignVariableOp(a, restore)[dtype=int32]
  a/Read = ReadVariableOp(a)[dtype=int32]
  save = SaveV2(prefix, names, specs, a/Read)[dtypes=list(type)[int32]]
}
"#,
    )
    .unwrap();
    let verified = verified(&module);
    let feeds = ["prefix", "names"];
    let compile = |targets: &[&str]| {
        (
            CompiledPlan::compile_unfused(verified, targets, &feeds).unwrap(),
            CompiledPlan::compile(verified, targets, &feeds).unwrap(),
        )
    };
    let (unfused_restore, fused_restore) = compile(&["a/Assign"]);
    let (unfused_save, fused_save) = compile(&["save"]);
    assert_eq!(folded_chains(&fused_restore), 1);
    assert_eq!(folded_chains(&fused_save), 1);
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
    let values = save_counting(&prefix, &["x", "y"]);
    let feed = |names: Vec<u8>| {
        vec![
            HostTensor::string_scalar(prefix.as_str()),
            HostTensor::string_vector([names]),
        ]
    };
    for backend in backends() {
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let restore = prepare(&fused_restore, backend);
        for (name, value) in [("x", &values[0]), ("y", &values[1]), ("x", &values[0])] {
            restore.run(&cx, feed(name.into())).unwrap();
            assert_eq!(
                &store.get(&VarKey::new("", "a")).unwrap(),
                value,
                "{backend}: {name}"
            );
        }
        // Saved under the name fed to each run.
        let save = prepare(&fused_save, backend);
        let saved = dir.path().join("saved").to_string_lossy().into_owned();
        for name in ["p", "q"] {
            let feeds = vec![
                HostTensor::string_scalar(saved.as_str()),
                HostTensor::string_vector([name]),
            ];
            save.run(&cx, feeds).unwrap();
            let keys: Vec<String> = saveplan::bundle::BundleReader::open(&saved)
                .unwrap()
                .entries()
                .iter()
                .map(|entry| entry.key.clone())
                .filter(|key| !key.is_empty())
                .collect();
            assert_eq!(keys, [name], "{backend}");
        }
        // Names that are not UTF-8 fail as they do unfused.
        for (unfused, fused) in [(&unfused_restore, &restore), (&unfused_save, &save)] {
            let errors: Vec<String> = [&prepare(unfused, backend), fused]
                .map(|plan| {
                    let err = plan.run(&cx, feed(vec![0xff])).unwrap_err();
                    error_chain(&err, ErrorForm::OneLine)
                })
                .to_vec();
            assert_eq!(errors[0], errors[1], "{backend}");
            assert!(errors[0].contains("UTF-8"), "{backend}: {}", errors[0]);
        }
    }
}
