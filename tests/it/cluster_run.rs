//! Partitions run by task through the in-process rendezvous write the same checkpoint as the
//! whole plan run in one piece, and restore the same values: for every partition case of
//! `tests/fixtures/part/` (plans TensorFlow partitioned across 2 to 4 tasks), the save run's
//! partitions ([`TaskPlans`], each task on a thread of its own as each runs on its own
//! worker) leave files byte-identical to the unpartitioned save's; the restore run's
//! partitions bring back every variable's value. A task that fails stops the others, and the
//! error names it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saveplan::checkpoint::{Assertion, ObjectSpec, RestoreKind};
use saveplan::exec::rendezvous::{
    ClusterRun, ClusterTask, LocalRendezvous, Rendezvous, RendezvousError, RendezvousKey,
};
use saveplan::exec::{
    Backend, BundleIo, CompiledPlan, HostTensor, RunContext, TaskPlans, VarKey, VariableStore,
};
use saveplan::partition::{PartitionOptions, SaverRun, partition};
use saveplan::session::{Mode, Run, Runner, Session, SessionError, SessionOptions};
use saveplan::trace::spec::SpecFile;
use saveplan_ir::slice::ShapeAndSlice;
use saveplan_ir::{DType, Module, SaverDef};

use crate::partition::{CASES, compiled};
use crate::support::exec::{fill_variables, verified};
use crate::support::files::file_bytes_under;

fn plan_of(case: &str) -> (Module, SaverDef) {
    let meta = compiled(case).meta_graph;
    (meta.module, meta.saver_def.expect("a saver"))
}

/// Runs `run` of `saver` whole, in one plan, with `prefix` fed.
fn run_whole(
    module: &Module,
    saver: &SaverDef,
    run: SaverRun,
    store: &VariableStore,
    prefix: &str,
) {
    let plan = CompiledPlan::compile(
        verified(module),
        &[run.target(saver)],
        &[&saver.filename_tensor_name],
    )
    .unwrap();
    let io = BundleIo::default();
    plan.run(
        &RunContext::new(store).with_io(&io),
        vec![HostTensor::string_scalar(prefix)],
    )
    .unwrap();
}

/// Runs `run` of `saver` as every compiled plan runs ([`TaskPlans`]): split by task, each
/// task on a thread of its own, meeting the others through a `LocalRendezvous`.
fn run_partitioned(
    module: &Module,
    saver: &SaverDef,
    run: SaverRun,
    store: &VariableStore,
    prefix: &str,
) {
    let plans = TaskPlans::compile(
        verified(module),
        &[run.target(saver)],
        &[&saver.filename_tensor_name],
        Backend::Interp,
    )
    .unwrap();
    assert!(
        plans.tasks().len() > 1 && plans.whole_plan().is_none(),
        "the case spans tasks"
    );
    let io = BundleIo::default();
    plans
        .run(
            &RunContext::new(store).with_io(&io),
            vec![HostTensor::string_scalar(prefix)],
        )
        .unwrap();
}

#[test]
fn partitioned_saves_write_the_whole_plans_bytes_and_restores_bring_values_back() {
    for case in CASES {
        let (module, saver) = plan_of(case);
        let store = VariableStore::new();
        let filled = fill_variables(&module, &store, 5);
        let (whole, parted) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let prefix = |dir: &Path| dir.join("ckpt").to_str().unwrap().to_owned();
        run_whole(
            &module,
            &saver,
            SaverRun::Save,
            &store,
            &prefix(whole.path()),
        );
        run_partitioned(
            &module,
            &saver,
            SaverRun::Save,
            &store,
            &prefix(parted.path()),
        );
        let (a, b) = (
            file_bytes_under(whole.path()),
            file_bytes_under(parted.path()),
        );
        assert!(!a.is_empty(), "{case}: the whole plan wrote nothing");
        assert_eq!(a, b, "{case}: partitioned save differs");

        // Restore into empty variables, partitioned, from the partitioned save.
        let restored = VariableStore::new();
        run_partitioned(
            &module,
            &saver,
            SaverRun::Restore,
            &restored,
            &prefix(parted.path()),
        );
        for (key, value) in &filled {
            assert_eq!(
                restored.get(key).as_ref(),
                Ok(value),
                "{case}: {key:?} restored"
            );
        }
    }
}

/// A partition's sends and receives fail in one line, never hang, outside a cluster run or in
/// a cluster that lacks their tasks.
#[test]
fn sends_outside_a_cluster_or_to_unknown_tasks_are_errors() {
    let (module, saver) = plan_of("p1_two_tasks");
    let parts = partition(
        verified(&module),
        &PartitionOptions::for_saver(&saver, SaverRun::Save, None),
    )
    .unwrap();
    let part = &parts.partitions[0];
    let graph = &part.module.graph;
    let names: Vec<&str> = graph
        .ops()
        .into_iter()
        .map(|id| graph.op(id).name.as_str())
        .collect();
    let feeds: Vec<String> = part
        .feeds
        .iter()
        .map(|feed| format!("{}:0", feed.recv_op))
        .collect();
    let feeds: Vec<&str> = feeds.iter().map(String::as_str).collect();
    let plan = CompiledPlan::compile(verified(&part.module), &names, &feeds).unwrap();
    let store = VariableStore::new();
    fill_variables(&module, &store, 1);
    let io = BundleIo::default();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
    let values = || {
        feeds
            .iter()
            .map(|_| HostTensor::string_scalar(prefix.as_str()))
            .collect()
    };

    let error = plan
        .run(&RunContext::new(&store).with_io(&io), values())
        .unwrap_err();
    let text = crate::support::error_chain(&error, crate::support::ErrorForm::OneLine);
    assert!(
        text.contains("runs only in one task's partition of a cluster run"),
        "{text}"
    );

    let rendezvous = LocalRendezvous::new(1);
    let view = rendezvous.task(0).unwrap();
    let cluster = ClusterRun {
        rendezvous: &view,
        tasks: &[ClusterTask {
            job: "ps".into(),
            replica: 0,
            task: 0,
        }],
    };
    let error = plan
        .run(
            &RunContext::new(&store).with_io(&io).with_cluster(cluster),
            values(),
        )
        .unwrap_err();
    let text = crate::support::error_chain(&error, crate::support::ErrorForm::OneLine);
    assert!(text.contains("is on no task of the cluster"), "{text}");
    assert_eq!(rendezvous.pending(), 0, "nothing was sent");
}

/// A task that fails stops every other task of the run (none is left waiting for a value
/// that will never come), the error names the failing task and what it reported, and nothing
/// is published at the prefix: for each case, with the variable of each task in turn left
/// without a value.
#[test]
fn a_failing_task_stops_the_others_and_is_named() {
    for case in CASES {
        let (module, saver) = plan_of(case);
        let plans = TaskPlans::compile(
            verified(&module),
            &[&saver.save_tensor_name],
            &[&saver.filename_tensor_name],
            Backend::Interp,
        )
        .unwrap();
        let probe = VariableStore::new();
        let filled = fill_variables(&module, &probe, 3);
        for (missing, _) in &filled {
            let store = VariableStore::new();
            fill_variables(&module, &store, 3);
            store.take(missing).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
            let io = BundleIo::default();
            let error = plans
                .run(
                    &RunContext::new(&store).with_io(&io),
                    vec![HostTensor::string_scalar(prefix.as_str())],
                )
                .unwrap_err();
            let text = crate::support::error_chain(&error, crate::support::ErrorForm::OneLine);
            assert!(
                text.starts_with("task /job:") && text.contains(&missing.shared_name),
                "{case}, {missing:?}: {text}"
            );
            assert!(
                !dir.path().join("ckpt.index").exists(),
                "{case}: a failed save published a checkpoint"
            );
        }
    }
}

/// A task that receives from many edges (TensorFlow's `save/restore_all` on one task, with a
/// control input from each of 3,000 assigns on another task) needs no thread per receive:
/// the in-process rendezvous calls back as each value arrives. The run restores every value,
/// and the process never holds more than a few dozen threads.
#[test]
fn thousands_of_receives_need_no_thread_each() {
    let variables: Vec<serde_json::Value> = (0..3000)
        .map(|index| {
            serde_json::json!({"checkpoint_key": format!("v{index:04}"), "dtype": "float32",
                "shape": [2], "device": format!("/job:worker/replica:0/task:{}/device:CPU:0", index % 2)})
        })
        .collect();
    let text = serde_json::json!({ "variables": variables }).to_string();
    let spec = saveplan::trace::spec::SpecFile::parse(&text).unwrap();
    let meta = saveplan::compile::compile(&spec, saveplan::compile::Form::Flat)
        .unwrap()
        .meta_graph;
    let (module, saver) = (meta.module, meta.saver_def.unwrap());
    let store = VariableStore::new();
    let filled = fill_variables(&module, &store, 9);
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
    run_whole(&module, &saver, SaverRun::Save, &store, &prefix);

    let plans = TaskPlans::compile(
        verified(&module),
        &[&saver.restore_op_name],
        &[&saver.filename_tensor_name],
        Backend::Interp,
    )
    .unwrap();
    let receives: usize = (0..plans.tasks().len())
        .map(|task| {
            let plan = plans.task_plan(task).unwrap();
            (0..plan.steps().len())
                .filter(|&step| plan.is_receive(saveplan::exec::StepId(step as u32)))
                .count()
        })
        .sum();
    assert!(receives >= 1500, "{receives} receives");
    let threads = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|line| line.starts_with("Threads:"))
            .unwrap();
        line[8..].trim().parse::<usize>().unwrap()
    };
    let most = std::sync::atomic::AtomicUsize::new(0);
    let observe = |_: &saveplan::exec::StepEvent<'_>| {
        most.fetch_max(threads(), std::sync::atomic::Ordering::Relaxed);
    };
    let restored = VariableStore::new();
    let io = BundleIo::default();
    plans
        .run(
            &RunContext::new(&restored)
                .with_io(&io)
                .with_observer(&observe),
            vec![HostTensor::string_scalar(prefix.as_str())],
        )
        .unwrap();
    for (key, value) in &filled {
        assert_eq!(restored.get(key).as_ref(), Ok(value), "{key:?} restored");
    }
    let most = most.into_inner();
    assert!(most < 100, "{most} threads for {receives} receives");
}

/// A full float32 value per checkpoint key of `spec` (a sliced key's full shape is its slice
/// spec's).
fn values_of(spec: &SpecFile) -> BTreeMap<String, HostTensor> {
    (spec.variables.iter())
        .map(|variable| {
            let shape: Vec<u64> = match variable.slice_spec.as_str() {
                "" => variable.shape.iter().map(|&dim| dim as u64).collect(),
                sliced => (ShapeAndSlice::parse(sliced).unwrap().full_shape.iter())
                    .map(|&dim| dim as u64)
                    .collect(),
            };
            let n = shape.iter().product::<u64>() as usize;
            let elements: Vec<f32> = (0..n).map(|index| index as f32 * 0.5 + 1.0).collect();
            let value = HostTensor::from_f32s(shape, &elements).unwrap();
            (variable.checkpoint_key.clone(), value)
        })
        .collect()
}

/// Sessions that are each one process of a cluster (threads meeting through a
/// `LocalRendezvous`, as MPI ranks meet through `MpiRendezvous`), for p3 (one variable sliced
/// across its 3 tasks): each compiles its own task alone and keeps only its own variables, the
/// save leaves the files one session running every task leaves, and a restore gathered at
/// task 0 gives every value back there.
#[test]
fn sessions_as_processes_save_one_sessions_bytes_and_gather_a_restore() {
    let text =
        std::fs::read_to_string("tests/fixtures/part/p3_sliced_across_tasks/case.json").unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let values = values_of(&spec);
    let session_of = |task: Option<usize>| {
        let options = SessionOptions {
            task,
            ..SessionOptions::default()
        };
        Session::from_spec(&spec, options).unwrap()
    };
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let prefix = |dir: &Path| dir.join("ckpt").to_str().unwrap().to_owned();
    let whole = session_of(None);
    whole.assign(values.clone()).unwrap();
    whole.save(&prefix(one.path())).unwrap();
    let n_variables = whole.variables().len();

    let rendezvous = LocalRendezvous::new(3);
    let gathered = std::thread::scope(|scope| {
        let running: Vec<_> = (0..3)
            .map(|task| {
                let view: Arc<dyn Rendezvous> = Arc::new(rendezvous.task(task).unwrap());
                let (values, many, session_of) = (values.clone(), many.path(), &session_of);
                scope.spawn(move || {
                    let saver = session_of(Some(task));
                    saver.assign(values).unwrap();
                    let saver = saver.with_cluster(Arc::clone(&view));
                    let kept = saver.variables().len();
                    assert!(kept > 0 && kept < n_variables, "task {task} kept {kept}");
                    saver.save(&prefix(many)).unwrap();
                    let restorer = session_of(Some(task)).with_cluster(view);
                    restorer.restore(&prefix(many)).unwrap();
                    let holds = restorer.gather().unwrap();
                    assert_eq!(holds, task == 0, "task {task}");
                    holds.then(|| restorer.values().unwrap())
                })
            })
            .collect();
        (running.into_iter())
            .filter_map(|thread| thread.join().unwrap())
            .next()
            .expect("task 0 holds the values")
    });
    assert_eq!(file_bytes_under(one.path()), file_bytes_under(many.path()));
    assert_eq!(gathered, values);
    assert_eq!(rendezvous.pending(), 0, "every value sent was received");
}

/// `restored_owners` names, the same in every process, the first task holding every variable
/// of each restored tensor (none for one sliced across tasks); `gather_where` brings task 0
/// only the variables asked for. As `restore --out` splits a restore: each task takes the
/// values it holds whole, task 0 gathers the rest, and the two together are every value.
#[test]
fn restored_owners_and_a_partial_gather_split_a_restore_between_tasks() {
    let device = |task: usize| format!("/job:worker/replica:0/task:{task}/device:CPU:0");
    let variable = |key: &str, shape: &str, task: usize, slice: &str| {
        format!(
            r#"{{"checkpoint_key": "{key}", "dtype": "float32", "shape": {shape}, "device": "{}", "slice_spec": "{slice}"{}}}"#,
            device(task),
            match slice {
                "" => String::new(),
                _ => format!(r#", "name": "{key}_{task}""#),
            }
        )
    };
    let text = format!(
        r#"{{"variables": [{}, {}, {}, {}, {}]}}"#,
        variable("a", "[3]", 0, ""),
        variable("b", "[2, 2]", 1, ""),
        variable("c", "[5]", 2, ""),
        variable("s", "[2, 2]", 1, "4 2 0,2:-"),
        variable("s", "[2, 2]", 2, "4 2 2,2:-"),
    );
    let spec = SpecFile::parse(&text).unwrap();
    let values = values_of(&spec);
    let expected_owners = vec![Some(0), Some(1), Some(2), None];
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
    let whole = Session::from_spec(&spec, SessionOptions::default()).unwrap();
    assert_eq!(whole.restored_owners(), None, "no cluster, no owners");
    whole.assign(values.clone()).unwrap();
    whole.save(&prefix).unwrap();

    let rendezvous = LocalRendezvous::new(3);
    let parts: Vec<BTreeMap<String, HostTensor>> = std::thread::scope(|scope| {
        let running: Vec<_> = (0..3)
            .map(|task| {
                let view: Arc<dyn Rendezvous> = Arc::new(rendezvous.task(task).unwrap());
                let (spec, prefix, expected_owners) = (&spec, &prefix, &expected_owners);
                scope.spawn(move || {
                    let options = SessionOptions {
                        task: Some(task),
                        ..SessionOptions::default()
                    };
                    let session = Session::from_spec(spec, options)
                        .unwrap()
                        .with_cluster(view);
                    session.restore(prefix).unwrap();
                    let owners = session.restored_owners().expect("a split restore");
                    assert_eq!(&owners, expected_owners, "task {task}");
                    let mut mine = session
                        .values_where(|index| owners[index] == Some(task))
                        .unwrap();
                    let owned: BTreeMap<_, _> = (session.restored_tensors().values())
                        .zip(&owners)
                        .filter(|(_, owner)| owner.is_some())
                        .flat_map(|(tensor, _)| tensor.parts.iter().map(|part| &part.variable))
                        .map(|variable| (variable.clone(), ()))
                        .collect();
                    let holds = session
                        .gather_where(|variable| !owned.contains_key(variable))
                        .unwrap();
                    assert_eq!(holds, task == 0, "task {task}");
                    if holds {
                        // The tensor no one task holds, gathered; another task's own is not.
                        mine.extend(
                            session
                                .values_where(|index| owners[index].is_none())
                                .unwrap(),
                        );
                        assert!(session.values_where(|index| index == 1).is_err());
                    }
                    mine
                })
            })
            .collect();
        running
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect()
    });
    let keys = |part: &BTreeMap<String, HostTensor>| part.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&parts[0]), ["a", "s"]);
    assert_eq!(keys(&parts[1]), ["b"]);
    assert_eq!(keys(&parts[2]), ["c"]);
    let together: BTreeMap<String, HostTensor> = parts.into_iter().flatten().collect();
    assert_eq!(together, values);
    assert_eq!(rendezvous.pending(), 0, "every value sent was received");
}

/// What cannot run as one process of a cluster fails in one line before anything is written,
/// and tells the other processes: a cluster of the wrong size (every process finds it), a
/// session compiled for another task, eager mode, a captured write.
#[test]
fn what_cannot_run_in_a_cluster_is_refused_before_writing() {
    let text =
        std::fs::read_to_string("tests/fixtures/part/p3_sliced_across_tasks/case.json").unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
    let refused = |options: SessionOptions, rendezvous: &Arc<LocalRendezvous>, task: usize| {
        let session = Session::from_spec(&spec, options).unwrap();
        session.assign(values_of(&spec)).unwrap();
        let view = Arc::new(rendezvous.task(task).unwrap());
        let error = session.with_cluster(view).save(&prefix).unwrap_err();
        crate::support::error_chain(&error, crate::support::ErrorForm::OneLine)
    };
    let text = refused(SessionOptions::default(), &LocalRendezvous::new(2), 0);
    assert!(
        text.contains("the cluster has 2 process(es) but the plan has 3 task(s)"),
        "{text}"
    );
    let three = LocalRendezvous::new(3);
    let for_task_1 = SessionOptions {
        task: Some(1),
        ..SessionOptions::default()
    };
    let text = refused(for_task_1, &three, 2);
    assert!(text.contains("is not compiled in this process"), "{text}");
    let told = three.aborted().expect("the other processes are told");
    assert_eq!(told.0, 2, "{told:?}");
    let eager = SessionOptions {
        mode: Mode::Eager,
        ..SessionOptions::default()
    };
    let text = refused(eager, &LocalRendezvous::new(3), 0);
    assert!(text.contains("eager mode runs in one process"), "{text}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "something was written"
    );

    let (module, saver) = plan_of("p3_sliced_across_tasks");
    let plans = TaskPlans::compile(
        verified(&module),
        &[SaverRun::Save.target(&saver)],
        &[&saver.filename_tensor_name],
        Backend::Interp,
    )
    .unwrap();
    let runner = Runner::compiled(Some(plans), None, Backend::Interp);
    let view = three.task(0).unwrap();
    let store = VariableStore::new();
    let error = runner
        .capture(Run {
            prefix: &prefix,
            variables: &store,
            io: &BundleIo::default(),
            observer: None,
            cluster: Some(&view),
        })
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("a captured write runs in one process"),
        "{error}"
    );
}

/// Task 0 of a gather refuses keys that are not (container, name) pairs in one line, rather
/// than dropping that task's values, and the other task hears of it.
#[test]
fn a_gather_refuses_malformed_keys() {
    let b = HostTensor::int64_scalar(7);
    let error = gather_against(&["", "b", "odd"], &[b]);
    let text = crate::support::error_chain(&error, crate::support::ErrorForm::OneLine);
    assert!(text.contains("not (container, name) pairs"), "{text}");
}

/// Task 0 of a gather refuses a value its variable cannot hold (an int64 where `c` is a
/// float32[4]) with the variable's name, and the other task hears of it.
#[test]
fn a_gather_refuses_a_value_of_another_dtype() {
    let error = gather_against(&["", "c"], &[HostTensor::int64_scalar(7)]);
    assert!(
        matches!(&error, SessionError::Variable { key, .. } if key == "c"),
        "{error:?}"
    );
}

/// Task 0 of `p1_two_tasks` (its `c` a float32[4] holding a value) gathers while task 1, on its
/// own thread, sends `keys` and `values` as a gather's sender does (the values in one batch)
/// and then waits at the gather's closing barrier; after 10 s task 1 aborts the rendezvous
/// itself. Returns task 0's error, once task 1 was told of it by task 0's abort: a gather that
/// wrongly takes what it was sent, waits for more, or fails without telling task 1 fails the
/// test rather than hanging it.
fn gather_against(keys: &[&str], values: &[HostTensor]) -> SessionError {
    let text = std::fs::read_to_string("tests/fixtures/part/p1_two_tasks/case.json").unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let rendezvous = LocalRendezvous::new(2);
    let other = rendezvous.task(1).unwrap();
    let session = Session::from_spec(&spec, SessionOptions::default())
        .unwrap()
        .with_cluster(Arc::new(rendezvous.task(0).unwrap()));
    let c = HostTensor::from_f32s(vec![4], &[1., 2., 3., 4.]).unwrap();
    session.variables().put(&VarKey::new("", "c"), c).unwrap();
    let key = |what: &str| RendezvousKey::new(1, 0, format!("saveplan/gather/{what}"));
    let layout = HostTensor::from_i32s(vec![values.len() as u64], &vec![0; values.len()]).unwrap();
    let mut batch = vec![1]; // the last batch
    for value in values {
        let at = batch.len();
        batch.extend_from_slice(&[0; 8]);
        saveplan::exec::rendezvous::wire::encode("", value, &mut batch);
        let len = (batch.len() - at - 8) as u64;
        batch[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }
    let batch = HostTensor::from_bytes(DType::UInt8, vec![batch.len() as u64], batch).unwrap();
    let task1 = || {
        other.send(
            &key("keys"),
            HostTensor::string_vector(keys.iter().copied()),
        )?;
        other.send(&key("layout"), layout)?;
        other.send(&key("batch0"), batch)?;
        other.barrier()
    };
    std::thread::scope(|scope| {
        let heard = scope.spawn(task1);
        // A gather that waits for what never comes is aborted after a while, and its error
        // then fails the test.
        let deadline = other.deadline(Duration::from_secs(10), "the test's deadline passed");
        let gathered = session.gather();
        // Task 1 waits at the barrier until task 0's abort, or the deadline's (its own).
        let heard = heard.join().expect("task 1 does not panic");
        drop(deadline);
        let error = match gathered {
            Ok(_) => panic!("task 0 gathered what it should refuse; task 1 heard {heard:?}"),
            Err(error) => error,
        };
        assert!(
            matches!(heard, Err(RendezvousError::Aborted { task: 0, .. })),
            "task 1 was not told by task 0: {heard:?}"
        );
        error
    })
}

/// A send leaves as soon as its value exists: in every task's plan of every partition case,
/// no `SaveV2`, `RestoreV2` or `MergeV2Checkpoints` the send does not wait for is queued
/// between the last step of its queue it waits for and the send. (Queued after task 0's own
/// `SaveV2`, the prefix task 0 sends the others held their shards back until task 0's was
/// written: the tasks wrote one after the other.)
#[test]
fn sends_are_not_queued_behind_file_work() {
    let mut checked = 0;
    for case in CASES {
        let (module, saver) = plan_of(case);
        for run in SaverRun::ALL {
            let plans = TaskPlans::compile(
                verified(&module),
                &[run.target(&saver)],
                &[&saver.filename_tensor_name],
                Backend::Interp,
            )
            .unwrap();
            for task in 0..plans.tasks().len() {
                let plan = plans.task_plan(task).expect("compiled here");
                for queue in plan.queues() {
                    for (position, &send) in queue.steps.iter().enumerate() {
                        let op = plan.step(send).op.type_name();
                        if !matches!(op, "_Send" | "_HostSend") {
                            continue;
                        }
                        // What the send waits for, however indirectly.
                        let mut waits_for = std::collections::BTreeSet::new();
                        let mut work = plan.step(send).deps.to_vec();
                        while let Some(dep) = work.pop() {
                            if waits_for.insert(dep) {
                                work.extend(plan.step(dep).deps.iter().copied());
                            }
                        }
                        // From the last step of this queue it waits for on.
                        let start = (queue.steps[..position].iter())
                            .rposition(|step| waits_for.contains(step))
                            .unwrap_or(0);
                        for &before in &queue.steps[start..position] {
                            let step = plan.step(before);
                            let file_work = matches!(
                                step.op.type_name(),
                                "SaveV2" | "RestoreV2" | "MergeV2Checkpoints"
                            );
                            assert!(
                                !file_work || waits_for.contains(&before),
                                "{case} {run:?}, task {task}: send {} is queued behind {}",
                                plan.step(send).name,
                                step.name
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} sends checked");
}

/// An object spec with variables on three tasks of `/job:localhost` (its object graph and
/// counter on task 0), the one tests/mpi/run.sh saves and restores under `mpirun`, with a
/// distinct value for each of its keys.
fn object_spec_and_values() -> (ObjectSpec, BTreeMap<String, HostTensor>) {
    object_spec_and_values_of(&std::fs::read_to_string("tests/mpi/objects3.json").unwrap())
}

/// The object spec `text` (variables only, float32 or int64) with a distinct value for each of
/// its keys.
fn object_spec_and_values_of(text: &str) -> (ObjectSpec, BTreeMap<String, HostTensor>) {
    let spec = ObjectSpec::parse(text).unwrap();
    let (_, keys) = spec.object_graph().unwrap();
    let values = (spec.objects.iter().zip(keys).enumerate())
        .map(|(number, (entry, key))| {
            let shape: Vec<u64> = (entry.shape.as_ref().unwrap().iter())
                .map(|&dim| dim as u64)
                .collect();
            let n = shape.iter().product::<u64>() as usize;
            let value = match entry.dtype.as_str() {
                "int64" => {
                    let elements: Vec<i64> =
                        (0..n).map(|at| (number * 10 + at + 1) as i64).collect();
                    HostTensor::from_slice(shape, &elements).unwrap()
                }
                _ => {
                    let elements: Vec<f32> =
                        (0..n).map(|at| number as f32 + at as f32 * 0.25).collect();
                    HostTensor::from_f32s(shape, &elements).unwrap()
                }
            };
            (key, value)
        })
        .collect();
    (spec, values)
}

/// Writes `spec`'s checkpoint of `values` as one process per task of it (threads meeting
/// through a `LocalRendezvous`) at `prefix`.
fn write_as_processes(spec: &ObjectSpec, values: &BTreeMap<String, HostTensor>, prefix: &str) {
    let n_tasks = spec
        .checkpoint(values.clone())
        .unwrap()
        .tasks()
        .unwrap()
        .len();
    let rendezvous = LocalRendezvous::new(n_tasks);
    std::thread::scope(|scope| {
        for task in 0..n_tasks {
            let view = rendezvous.task(task).unwrap();
            let values = values.clone();
            scope.spawn(move || {
                let writer = spec.checkpoint(values).unwrap();
                writer.write_in(prefix, &view).unwrap();
            });
        }
    });
}

/// An io device on a task of its own (`experimental_io_device`) is one more task of an object
/// spec's cluster, as it is of the write's plan: the write as one process per task (three
/// here: the variables' two and the io device's) leaves the single-process write's files.
#[test]
fn an_io_device_on_another_task_is_a_task_of_an_object_specs_cluster() {
    let text = std::fs::read_to_string("tests/mpi/objects2.json").unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["options"] = serde_json::json!({
        "experimental_io_device": "/job:localhost/replica:0/task:2/device:CPU:0"
    });
    let (spec, values) = object_spec_and_values_of(&json.to_string());
    let whole = spec.checkpoint(values.clone()).unwrap();
    let tasks: Vec<String> = (whole.tasks().unwrap().iter())
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        tasks,
        [0, 1, 2].map(|task| format!("/job:localhost/replica:0/task:{task}"))
    );
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let prefix = |dir: &Path| dir.join("ckpt").to_str().unwrap().to_owned();
    whole.write(&prefix(one.path())).unwrap();
    write_as_processes(&spec, &values, &prefix(many.path()));
    assert_eq!(file_bytes_under(one.path()), file_bytes_under(many.path()));
}

/// An object spec's write run as one process per task (threads meeting through a
/// `LocalRendezvous`, as MPI ranks meet) leaves the files the single-process write leaves,
/// byte for byte; its restore run the same way reads on each task only that task's values
/// and gathers every one at task 0, with the counter.
#[test]
fn object_spec_as_processes_writes_one_process_bytes_and_gathers_a_restore() {
    let (spec, values) = object_spec_and_values();
    let (one, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let prefix = |dir: &Path| dir.join("sub/ckpt").to_str().unwrap().to_owned();
    let whole = spec.checkpoint(values.clone()).unwrap();
    let tasks = whole.tasks().unwrap();
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    whole.write(&prefix(one.path())).unwrap();

    let rendezvous = LocalRendezvous::new(3);
    let restored = std::thread::scope(|scope| {
        let running: Vec<_> = (0..3)
            .map(|task| {
                let view = rendezvous.task(task).unwrap();
                let (spec, values, many) = (&spec, values.clone(), many.path());
                scope.spawn(move || {
                    let writer = spec.checkpoint(values).unwrap();
                    writer.write_in(&prefix(many), &view).unwrap();
                    let mut reader = spec.fresh_checkpoint().unwrap();
                    let matched = reader
                        .match_checkpoint(&prefix(many), RestoreKind::Restore)
                        .unwrap();
                    let status = reader.apply_in(matched, &view).unwrap();
                    status.check(Assertion::Consumed).unwrap();
                    (task, reader.values().clone(), reader.save_counter())
                })
            })
            .collect();
        (running.into_iter())
            .map(|thread| thread.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(file_bytes_under(one.path()), file_bytes_under(many.path()));
    assert_eq!(rendezvous.pending(), 0, "every value sent was received");
    let counter_key = saveplan::checkpoint::SAVE_COUNTER_KEY;
    let counter = values[counter_key].as_i64_scalar();
    let fresh = spec.fresh_checkpoint().unwrap();
    for (task, restored, restored_counter) in restored {
        // The counter is on task 0.
        let expected = if task == 0 {
            counter
        } else {
            fresh.save_counter()
        };
        assert_eq!(restored_counter, expected, "task {task}'s counter");
        for (key, value) in &restored {
            // Task 0 holds every value; each other task, its own alone (the rest untouched).
            let own = task == 0
                || key.contains("kernel") == (task == 1) && key.contains("bias") == (task == 2);
            let expected = if own {
                &values[key]
            } else {
                &fresh.values()[key]
            };
            assert_eq!(value, expected, "task {task}: {key}");
        }
    }
}

/// An object spec's write or restore in a cluster of the wrong size fails on every process
/// in one line, and writes nothing (not even the prefix's folder).
#[test]
fn object_spec_in_a_cluster_of_the_wrong_size_is_refused() {
    let (spec, values) = object_spec_and_values();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("sub/ckpt").to_str().unwrap().to_owned();
    spec.checkpoint(values.clone())
        .unwrap()
        .write(&prefix)
        .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let unwritten = empty.path().join("sub/ckpt").to_str().unwrap().to_owned();
    let rendezvous = LocalRendezvous::new(2);
    let errors: Vec<String> = std::thread::scope(|scope| {
        let running: Vec<_> = (0..2)
            .map(|task| {
                let view = rendezvous.task(task).unwrap();
                let (spec, values, prefix, unwritten) =
                    (&spec, values.clone(), &prefix, &unwritten);
                scope.spawn(move || {
                    let write = spec.checkpoint(values).unwrap().write_in(unwritten, &view);
                    let mut reader = spec.fresh_checkpoint().unwrap();
                    let matched = reader
                        .match_checkpoint(prefix, RestoreKind::Restore)
                        .unwrap();
                    let restore = reader.apply_in(matched, &view);
                    [
                        write.unwrap_err().to_string(),
                        restore.unwrap_err().to_string(),
                    ]
                })
            })
            .collect();
        (running.into_iter())
            .flat_map(|thread| thread.join().unwrap())
            .collect()
    });
    for text in &errors {
        assert!(
            text.starts_with("the cluster has 2 process(es) but the plan has 3 task(s)")
                && !text.contains('\n'),
            "{text}"
        );
    }
    assert!(
        std::fs::read_dir(empty.path()).unwrap().next().is_none(),
        "something was written"
    );
}
