//! End to end: save and restore plans run on the bundle code, checked against TensorFlow's own
//! graphs (`graph/*/flat_graph.pbtxt`, `graph.pbtxt` with library functions) and TF-written
//! checkpoints (`ckpt/c4_two_cpus_one_task`). Every test runs on both backends (interpreter and
//! JIT), and the checkpoints they write are compared byte for byte.

use crate::support::exec::{
    assert_same_files, backends, fill_variables, fixture_module, in_pool, input_module, prepare,
    strings, verified,
};
use crate::support::files::files_under;
use crate::support::{ErrorForm, TRACE_CASES, error_chain, fixture, fixture_json, for_each_case};

use saveplan::bundle::BundleReader;
use saveplan::exec::{BundleIo, CompiledPlan, HostTensor, RunContext, VarKey, VariableStore};
use saveplan_ir::{Module, Op};
use tempfile::TempDir;

/// A fresh directory and the checkpoint prefix `ckpt` in it.
fn checkpoint_dir() -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
    (dir, prefix)
}

/// Asserts that every run (labelled) wrote the same files with the same bytes.
fn assert_runs_wrote_the_same(runs: &[(String, TempDir)]) {
    let dirs: Vec<(&str, &std::path::Path)> = runs
        .iter()
        .map(|(label, dir)| (label.as_str(), dir.path()))
        .collect();
    assert_same_files(&dirs);
}

/// Every g1–g6 flat graph round-trips ([`flat_graph_round_trip`]); a failure names the case.
#[test]
fn flat_graphs_round_trip() {
    for_each_case(TRACE_CASES, flat_graph_round_trip);
}

/// Saves with TF's flat save graph, overwrites the variables, restores with TF's restore ops,
/// and checks every variable came back; on 1 and 4 threads.
fn flat_graph_round_trip(case: &str) {
    let module = fixture_module(&format!("graph/{case}/flat_graph.pbtxt"));
    let flat = fixture_json(&format!("graph/{case}/flat.json"));
    let filename = flat["filename_tensor_name"].as_str().unwrap();
    let save_op = flat["save_op_name"].as_str().unwrap();
    // flat.json names one restore op per checkpoint key; a partitioned variable has one
    // `AssignVariableOp*` per part, so every restore assignment is a target.
    let restore_ops: Vec<&str> = module
        .graph
        .ops()
        .into_iter()
        .map(|id| module.graph.op(id))
        .filter(|node| node.op == Op::AssignVariableOp && node.name.starts_with("AssignVariableOp"))
        .map(|node| node.name.as_str())
        .collect();
    for op in flat["restore_ops"].as_object().unwrap().values() {
        assert!(restore_ops.contains(&op.as_str().unwrap()), "{case}: {op}");
    }
    let save = CompiledPlan::compile(verified(&module), &[save_op], &[filename]).unwrap();
    let restore = CompiledPlan::compile(verified(&module), &restore_ops, &[filename]).unwrap();
    save_then_restore(case, &module, &save, &restore, |_, files, _| {
        assert!(
            files.contains(&"ckpt.index".to_owned()),
            "{case}: {files:?}"
        );
        assert!(
            files.iter().all(|f| f.starts_with("ckpt.")),
            "{case}: {files:?}"
        );
    });
}

/// The `to_proto()` graphs of g2, g3 and g5 round-trip through their SaverDef
/// ([`saver_def_round_trip`]); a failure names the case.
#[test]
fn saver_defs_round_trip() {
    for_each_case(
        ["g2_two_cpus", "g3_two_tasks", "g5_sliced"],
        saver_def_round_trip,
    );
}

/// The save and restore plans of a `to_proto()` graph's SaverDef (`saver_filename:0` fed, the
/// two `StatefulPartitionedCall`s as targets).
fn saver_def_plans(module: &Module) -> (CompiledPlan, CompiledPlan) {
    let compile = |target: &str| {
        CompiledPlan::compile(verified(module), &[target], &["saver_filename:0"]).unwrap()
    };
    (
        compile("StatefulPartitionedCall:0"),
        compile("StatefulPartitionedCall_1"),
    )
}

/// Saves and restores through the SaverDef of a `to_proto()` graph: `StatefulPartitionedCall`
/// into the library's traced save and restore functions, as a session runs them.
fn saver_def_round_trip(case: &str) {
    let module = fixture_module(&format!("graph/{case}/graph.pbtxt"));
    let (save, restore) = saver_def_plans(&module);
    save_then_restore(case, &module, &save, &restore, |out, _, prefix| {
        assert_eq!(strings(&out[0]), [prefix.to_owned()], "{case}");
    });
}

/// On every backend and thread count: fills the variables, saves (`check_save` gets the save's
/// outputs, the files written and the prefix), overwrites the variables, restores, and checks the saved
/// values are back; every run must write the same bytes.
fn save_then_restore(
    case: &str,
    module: &Module,
    save: &CompiledPlan,
    restore: &CompiledPlan,
    check_save: impl Fn(&[HostTensor], &[String], &str),
) {
    let mut runs = Vec::new();
    for (backend, threads) in backends_and_threads() {
        let (save, restore) = (prepare(save, backend), prepare(restore, backend));
        let (dir, prefix) = checkpoint_dir();
        let store = VariableStore::new();
        let saved = fill_variables(module, &store, 1);
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let out = in_pool(threads, || {
            save.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap_or_else(|err| panic!("{case}: {}", error_chain(&err, ErrorForm::OneLine)));
        check_save(&out, &files_under(dir.path()), &prefix);
        fill_variables(module, &store, 2);
        in_pool(threads, || {
            restore.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap_or_else(|err| panic!("{case}: {}", error_chain(&err, ErrorForm::OneLine)));
        for (key, value) in saved {
            assert_eq!(store.get(&key).unwrap(), value, "{case}: {backend}: {key}");
        }
        runs.push((format!("{backend}, {threads} threads"), dir));
    }
    assert_runs_wrote_the_same(&runs);
}

/// g1's own initializer, save op and restore op: the checkpoint holds `v = [1, 2, 3]`.
#[test]
fn g1_flat_graph_saves_its_initial_value() {
    let module = fixture_module("graph/g1_single_cpu/flat_graph.pbtxt");
    let init = CompiledPlan::compile(verified(&module), &["v/Assign"], &[]).unwrap();
    let save = CompiledPlan::compile(
        verified(&module),
        &["MergeV2Checkpoints"],
        &["saver_filename:0"],
    );
    let save = save.unwrap();
    let mut runs = Vec::new();
    for backend in backends() {
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        prepare(&init, backend).run(&cx, Vec::new()).unwrap();
        let (dir, prefix) = checkpoint_dir();
        prepare(&save, backend)
            .run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
            .unwrap();
        assert_eq!(
            files_under(dir.path()),
            ["ckpt.data-00000-of-00001", "ckpt.index"]
        );
        check_g1_initial_value(&prefix);
        runs.push((backend.to_string(), dir));
    }
    assert_runs_wrote_the_same(&runs);
}

/// Checks that the checkpoint at `prefix` holds g1's initial value of `v`.
fn check_g1_initial_value(prefix: &str) {
    let reader = BundleReader::open(prefix).unwrap();
    let case = fixture_json("graph/g1_single_cpu/case.json");
    let variable = &case["variables"][0];
    let key = variable["checkpoint_key"].as_str().unwrap();
    let init: Vec<f32> = variable["init"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let tensor = reader.read(key).unwrap();
    assert_eq!(tensor.shape, [3]);
    let expected = HostTensor::from_f32s(vec![3], &init).unwrap();
    assert_eq!(
        saveplan::bundle::Values::Bytes(expected.into_bytes().unwrap()),
        tensor.values
    );
}

/// g1's `to_proto()` graph: save and restore through `StatefulPartitionedCall` into the
/// library functions, as a session runs the SaverDef.
#[test]
fn g1_saver_def_functions_save_and_restore() {
    let module = fixture_module("graph/g1_single_cpu/graph.pbtxt");
    let init = CompiledPlan::compile(verified(&module), &["v/Assign"], &[]).unwrap();
    let (save, restore) = saver_def_plans(&module);
    let mut runs = Vec::new();
    for backend in backends() {
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        prepare(&init, backend).run(&cx, Vec::new()).unwrap();
        let saved = store.get(&VarKey::new("", "v")).unwrap();
        let (dir, prefix) = checkpoint_dir();
        let save = prepare(&save, backend);
        for threads in [1, 4] {
            let out = in_pool(threads, || {
                save.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
            })
            .unwrap();
            assert_eq!(strings(&out[0]), std::slice::from_ref(&prefix), "{backend}");
            assert_eq!(
                files_under(dir.path()),
                ["ckpt.data-00000-of-00001", "ckpt.index"]
            );
        }
        store
            .put(
                &VarKey::new("", "v"),
                HostTensor::from_f32s(vec![3], &[0.0; 3]).unwrap(),
            )
            .unwrap();
        prepare(&restore, backend)
            .run(&cx, vec![HostTensor::string_scalar(prefix)])
            .unwrap();
        assert_eq!(
            store.get(&VarKey::new("", "v")).unwrap(),
            saved,
            "{backend}"
        );
        runs.push((backend.to_string(), dir));
    }
    assert_runs_wrote_the_same(&runs);
}

/// A save plan shaped like TF's for two CPUs of one task writes the same bytes as TF did.
#[test]
fn two_cpus_one_task_matches_tf_checkpoint_bytes() {
    let module = input_module("two_cpus_one_task.ir");
    let save = CompiledPlan::compile(
        verified(&module),
        &["MergeV2Checkpoints"],
        &["saver_filename"],
    )
    .unwrap();
    let restore =
        CompiledPlan::compile(verified(&module), &["restore_all"], &["saver_filename"]).unwrap();
    let a = HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap();
    let b = HostTensor::from_i32s(vec![2], &[3, 4]).unwrap();
    let mut runs = Vec::new();
    for (backend, threads) in backends_and_threads() {
        let (save, restore) = (prepare(&save, backend), prepare(&restore, backend));
        let store = VariableStore::new();
        store.put(&VarKey::new("", "a"), a.clone()).unwrap();
        store.put(&VarKey::new("", "b"), b.clone()).unwrap();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let (dir, prefix) = checkpoint_dir();
        in_pool(threads, || {
            save.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap();
        let expected_dir = fixture("ckpt/c4_two_cpus_one_task");
        for file in ["ckpt.index", "ckpt.data-00000-of-00001"] {
            let ours = std::fs::read(dir.path().join(file)).unwrap();
            let theirs = std::fs::read(expected_dir.join(file)).unwrap();
            assert_eq!(ours, theirs, "{backend}, {threads} threads: {file}");
        }
        assert_eq!(
            files_under(dir.path()),
            ["ckpt.data-00000-of-00001", "ckpt.index"]
        );
        store.take(&VarKey::new("", "a"));
        store
            .put(
                &VarKey::new("", "b"),
                HostTensor::from_i32s(vec![2], &[0, 0]).unwrap(),
            )
            .unwrap();
        in_pool(threads, || {
            restore.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap();
        assert_eq!(store.get(&VarKey::new("", "a")).unwrap(), a, "{backend}");
        assert_eq!(store.get(&VarKey::new("", "b")).unwrap(), b, "{backend}");
        runs.push((format!("{backend}, {threads} threads"), dir));
    }
    assert_runs_wrote_the_same(&runs);
}

/// A failing save (a variable was never assigned) reports the read op and its device and
/// leaves no merged checkpoint.
#[test]
fn failed_save_reports_the_op_and_writes_nothing() {
    let module = input_module("two_cpus_one_task.ir");
    let save = CompiledPlan::compile(
        verified(&module),
        &["MergeV2Checkpoints"],
        &["saver_filename"],
    )
    .unwrap();
    for (backend, threads) in backends_and_threads() {
        let store = VariableStore::new();
        store
            .put(
                &VarKey::new("", "a"),
                HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap(),
            )
            .unwrap();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let (dir, prefix) = checkpoint_dir();
        let save = prepare(&save, backend);
        let err = in_pool(threads, || {
            save.run(&cx, vec![HostTensor::string_scalar(prefix)])
        })
        .unwrap_err();
        assert_eq!(
            error_chain(&err, ErrorForm::OneLine),
            "op `b/Read/ReadVariableOp` on /job:localhost/replica:0/task:0/device:CPU:1: \
             variable `b` does not exist or is not initialized",
            "{backend}, {threads} threads"
        );
        assert!(files_under(dir.path()).is_empty(), "{backend}");
    }
}

/// A scalar resource tensor naming variable `name`.
fn handle(name: &str, dtype: saveplan_ir::DType) -> HostTensor {
    HostTensor::resource(saveplan::exec::ResourceHandle {
        container: String::new(),
        shared_name: name.to_owned(),
        device: saveplan::exec::DEFAULT_DEVICE.to_owned(),
        dtype,
        shape: saveplan_ir::Shape::unknown(),
    })
}

/// The eager trace of `_traced_save` (variables fed as resource handles) writes both variables,
/// and the traced restore function, compiled on its own, reads them back.
#[test]
fn g7_eager_traced_save_and_restore() {
    let module = fixture_module("graph/g7_eager_traced/traced_save.graph.pbtxt");
    let save = CompiledPlan::compile(
        verified(&module),
        &["MergeV2Checkpoints"],
        &[
            "file_prefix",
            "Read/DisableCopyOnRead/resource",
            "Read_1/DisableCopyOnRead/resource",
        ],
    )
    .unwrap();
    let restore_fn = match saveplan::export::read_graph_file(&fixture(
        "graph/g7_eager_traced/traced_restore.function_def.pbtxt",
    )) {
        Ok(saveplan::export::Loaded::Function(function)) => function,
        other => panic!("not a FunctionDef: {:?}", other.err()),
    };
    let name = restore_fn.signature.name.clone();
    let mut library_module = Module::default();
    library_module.library.functions.push(restore_fn);
    let restore = CompiledPlan::compile_function(verified(&library_module), &name).unwrap();
    assert_eq!(restore.feeds().len(), 3);
    let mut runs = Vec::new();
    for backend in backends() {
        let (save, restore) = (prepare(&save, backend), prepare(&restore, backend));
        runs.push((backend.to_string(), g7_round_trip(&save, &restore)));
    }
    assert_runs_wrote_the_same(&runs);
}

/// Saves v and u with g7's eager save graph, then restores them with its restore function.
fn g7_round_trip(save: &saveplan::exec::Executor, restore: &saveplan::exec::Executor) -> TempDir {
    use saveplan_ir::DType;
    let store = VariableStore::new();
    let v = HostTensor::from_f32s(vec![3], &[1.5, 2.5, 3.5]).unwrap();
    let u = HostTensor::from_bytes(DType::Int64, vec![], 7i64.to_le_bytes().to_vec()).unwrap();
    store.put(&VarKey::new("", "v"), v.clone()).unwrap();
    store.put(&VarKey::new("", "u"), u.clone()).unwrap();
    let io = BundleIo::default();
    let cx = RunContext::new(&store).with_io(&io);
    let (dir, prefix) = checkpoint_dir();
    let feeds = vec![
        HostTensor::string_scalar(prefix.clone()),
        handle("v", DType::Float),
        handle("u", DType::Int64),
    ];
    save.run(&cx, feeds).unwrap();
    let reader = BundleReader::open(&prefix).unwrap();
    let keys: Vec<&str> = reader.entries().iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    store
        .put(
            &VarKey::new("", "v"),
            HostTensor::from_f32s(vec![3], &[0.0; 3]).unwrap(),
        )
        .unwrap();
    store.take(&VarKey::new("", "u"));
    let out = in_pool(4, || {
        restore.run(
            &cx,
            vec![
                HostTensor::string_scalar(prefix.clone()),
                handle("v", DType::Float),
                handle("u", DType::Int64),
            ],
        )
    })
    .unwrap();
    assert_eq!(strings(&out[0]), [prefix]);
    assert_eq!(store.get(&VarKey::new("", "v")).unwrap(), v);
    assert_eq!(store.get(&VarKey::new("", "u")).unwrap(), u);
    dir
}

/// The TF1 `Saver` graphs: filename fed through a `PlaceholderWithDefault`, sharded per device
/// (two data files after the merge) or unsharded (a plain `SaveV2` on the prefix).
#[test]
fn g9_v1_saver_round_trips() {
    for (variant, n_shards) in [("sharded", 2), ("unsharded", 1)] {
        let module = fixture_module(&format!("graph/g9_v1_saver/{variant}.graph.pbtxt"));
        let saver = match saveplan::export::read_graph_file(&fixture(&format!(
            "graph/g9_v1_saver/{variant}.saver_def.pbtxt"
        ))) {
            Ok(saveplan::export::Loaded::Saver(saver)) => saver,
            other => panic!("not a SaverDef: {:?}", other.err()),
        };
        let filename = saver.filename_tensor_name.as_str();
        let save =
            CompiledPlan::compile(verified(&module), &[&saver.save_tensor_name], &[filename])
                .unwrap();
        let restore =
            CompiledPlan::compile(verified(&module), &[&saver.restore_op_name], &[filename])
                .unwrap();
        let mut runs = Vec::new();
        for backend in backends() {
            let (save, restore) = (prepare(&save, backend), prepare(&restore, backend));
            let dir = g9_round_trip(&module, &save, &restore, variant, n_shards);
            runs.push((format!("{variant} on {backend}"), dir));
        }
        assert_runs_wrote_the_same(&runs);
    }
}

/// Saves with a TF1 saver graph into a fresh directory, then restores and checks the values.
fn g9_round_trip(
    module: &Module,
    save: &saveplan::exec::Executor,
    restore: &saveplan::exec::Executor,
    variant: &str,
    n_shards: u32,
) -> TempDir {
    {
        let store = VariableStore::new();
        let saved = fill_variables(module, &store, 3);
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let (dir, prefix) = checkpoint_dir();
        in_pool(4, || {
            save.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap_or_else(|err| panic!("{variant}: {}", error_chain(&err, ErrorForm::OneLine)));
        assert_eq!(BundleReader::open(&prefix).unwrap().num_shards(), n_shards);
        fill_variables(module, &store, 4);
        in_pool(4, || {
            restore.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
        })
        .unwrap_or_else(|err| panic!("{variant}: {}", error_chain(&err, ErrorForm::OneLine)));
        for (key, value) in saved {
            assert_eq!(store.get(&key).unwrap(), value, "{variant}: {key}");
        }
        dir
    }
}

/// The MetaGraphDef's SaverDef drives save and restore of its graph.
#[test]
fn g8_meta_graph_saver_def_round_trips() {
    let meta =
        match saveplan::export::read_graph_file(&fixture("graph/g8_meta_graph/meta_graph.pbtxt")) {
            Ok(saveplan::export::Loaded::MetaGraph(meta)) => meta,
            other => panic!("not a MetaGraphDef: {:?}", other.err()),
        };
    let saver = meta.saver_def.expect("a saver_def");
    let module = &meta.module;
    let filename = saver.filename_tensor_name.as_str();
    let save =
        CompiledPlan::compile(verified(module), &[&saver.save_tensor_name], &[filename]).unwrap();
    let restore =
        CompiledPlan::compile(verified(module), &[&saver.restore_op_name], &[filename]).unwrap();
    let mut runs = Vec::new();
    for backend in backends() {
        let (save, restore) = (prepare(&save, backend), prepare(&restore, backend));
        let store = VariableStore::new();
        let saved = fill_variables(module, &store, 5);
        assert!(!saved.is_empty());
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let (dir, prefix) = checkpoint_dir();
        save.run(&cx, vec![HostTensor::string_scalar(prefix.clone())])
            .unwrap_or_else(|err| panic!("{backend}: {}", error_chain(&err, ErrorForm::OneLine)));
        fill_variables(module, &store, 6);
        restore
            .run(&cx, vec![HostTensor::string_scalar(prefix)])
            .unwrap_or_else(|err| panic!("{backend}: {}", error_chain(&err, ErrorForm::OneLine)));
        for (key, value) in saved {
            assert_eq!(store.get(&key).unwrap(), value, "{backend}: {key}");
        }
        runs.push((backend.to_string(), dir));
    }
    assert_runs_wrote_the_same(&runs);
}

/// Restoring from a prefix with no checkpoint names the RestoreV2 op, its device and the
/// missing index file.
#[test]
fn restore_from_missing_checkpoint_names_the_op() {
    let module = input_module("two_cpus_one_task.ir");
    let restore =
        CompiledPlan::compile(verified(&module), &["restore_all"], &["saver_filename"]).unwrap();
    for backend in backends() {
        restore_from_missing_checkpoint_on(&prepare(&restore, backend));
    }
}

fn restore_from_missing_checkpoint_on(restore: &saveplan::exec::Executor) {
    let store = VariableStore::new();
    let io = BundleIo::default();
    let cx = RunContext::new(&store).with_io(&io);
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("nothing");
    let err = restore
        .run(
            &cx,
            vec![HostTensor::string_scalar(
                prefix.to_string_lossy().as_bytes(),
            )],
        )
        .unwrap_err();
    let index = format!("{}.index", prefix.display());
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        format!(
            "op `RestoreV2` on /job:localhost/replica:0/task:0/device:CPU:0: \
             checkpoint i/o failed: {index}: index file not found"
        )
    );
    assert!(store.is_empty(), "no variable was assigned");
}

/// Every backend, on one and four threads.
fn backends_and_threads() -> Vec<(saveplan::exec::Backend, usize)> {
    backends()
        .into_iter()
        .flat_map(|backend| [1, 4].map(|threads| (backend, threads)))
        .collect()
}
