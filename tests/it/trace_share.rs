//! One task's share of a save plan (`trace::trace_flat_save_share`): for every plan of the
//! partition fixtures, the trace inputs and a scale spec, and every task, the partition built
//! from the share is the one built from the whole plan (ops, names, edges sent and received,
//! feeds), so processes that trace shares meet as processes that trace it whole do. Plans
//! whose shape or names do not allow a share are traced whole; a session of a share ignores
//! the other tasks' values and saves what one process saves. A share of the restore plan
//! too (`trace::trace_flat_share`) sends and receives what the whole plan's partition does,
//! with the same ops, and its sessions restore what one process restores.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use saveplan::exec::HostTensor;
use saveplan::exec::rendezvous::{LocalRendezvous, Rendezvous};
use saveplan::partition::{PartitionOptions, Partitions, partition};
use saveplan::session::{Plans, Session, SessionOptions};
use saveplan::trace::spec::SpecFile;
use saveplan::trace::{
    FlatTrace, VariableOps, trace_flat_as, trace_flat_save_as, trace_flat_save_share,
    trace_flat_share,
};
use saveplan_ir::verify::verify_module;

use crate::partition::CASES;
use crate::support::root;

/// The save run of `trace`, built for `task` alone.
fn save_partitions(trace: &FlatTrace, task: usize) -> Partitions {
    partitions_of(trace, vec![trace.saver.save_target.clone()], task)
}

/// The restore run of `trace`, built for `task` alone.
fn restore_partitions(trace: &FlatTrace, task: usize) -> Partitions {
    partitions_of(trace, trace.saver.restore_targets.clone(), task)
}

/// The run of `trace` for `targets`, built for `task` alone.
fn partitions_of(trace: &FlatTrace, targets: Vec<String>, task: usize) -> Partitions {
    let options = PartitionOptions {
        targets,
        feeds: vec![trace.saver.filename_tensor_name.clone()],
        client: None,
        only: Some(task),
    };
    partition(verify_module(&trace.module).unwrap(), &options).unwrap()
}

/// How many tasks of `text` trace a share of the save plan, each checked to give the
/// partition the whole plan gives (ops, names, edges, feeds; panics if not).
fn shares_match(text: &str, what: &str) -> usize {
    shares_match_in(text, what, Traced::Save)
}

/// How many tasks of `text` trace a share of both plans, each checked to give a restore
/// partition with the whole plan's edges, feeds and ops (by kind and device; the ops that
/// restore are numbered from one counter, so their names differ), and to leave out tensors
/// that the whole trace binds to the same variables, placed on their task (panics if not).
fn restore_shares_match(text: &str, what: &str) -> usize {
    shares_match_in(text, what, Traced::SaveRestore)
}

/// Which plans a share holds.
#[derive(Clone, Copy, PartialEq)]
enum Traced {
    Save,
    SaveRestore,
}

/// [`shares_match`] or [`restore_shares_match`].
fn shares_match_in(text: &str, what: &str, traced: Traced) -> usize {
    let spec = SpecFile::parse(text).unwrap();
    let trackables = spec.trackables().unwrap();
    let options = spec.options().unwrap();
    let (trace_whole, trace_share, partitions): (_, _, fn(&FlatTrace, usize) -> Partitions) =
        match traced {
            Traced::Save => (
                trace_flat_save_as as fn(_, _, _) -> _,
                trace_flat_save_share as fn(_, _, _) -> _,
                save_partitions,
            ),
            Traced::SaveRestore => (trace_flat_as, trace_flat_share, restore_partitions),
        };
    let whole = trace_whole(&trackables, &options, VariableOps::Handles).unwrap();
    let n_tasks = partitions(&whole, 0).partitions.len();
    let variables = &whole.keys.as_ref().unwrap().variables;
    let mut shared = 0;
    for task in 0..n_tasks {
        let Some(share) = trace_share(&trackables, &options, task).unwrap() else {
            continue;
        };
        shared += 1;
        let (all, alone) = (partitions(&whole, task), partitions(&share.trace, task));
        let what = format!("{what}, task {task}");
        assert_eq!(alone.partitions.len(), n_tasks, "{what}");
        let (expected, got) = (&all.partitions[task], &alone.partitions[task]);
        assert_eq!(got.task, expected.task, "{what}");
        assert_eq!(got.sends, expected.sends, "{what}");
        assert_eq!(got.recvs, expected.recvs, "{what}");
        assert_eq!(got.feeds, expected.feeds, "{what}");
        // What it leaves out: every other task's variables but the first of each.
        let kept = trackables.len() - share.left_out.len();
        assert!(
            kept >= n_tasks && !share.left_out.is_empty(),
            "{what}: {kept} kept"
        );
        if traced == Traced::Save {
            let text = |partitions: &Partitions| partitions.partitions[task].module.to_string();
            assert_eq!(text(&alone), text(&all), "{what}");
            continue;
        }
        let kinds = |partitions: &Partitions| {
            let graph = &partitions.partitions[task].module.graph;
            let mut kinds: Vec<String> = (graph.ops().into_iter())
                .map(|id| {
                    let op = graph.op(id);
                    format!("{} on {}", op.op, op.device)
                })
                .collect();
            kinds.sort();
            kinds
        };
        assert_eq!(kinds(&alone), kinds(&all), "{what}");
        // Every tensor left out, with the variable the whole trace makes for it, on the task
        // whose partition holds that variable.
        for (index, trackable) in trackables.iter().enumerate() {
            let key = &trackable.tensors[0].checkpoint_key;
            let Some(left_out) = share.left_out.get(key) else {
                continue;
            };
            assert_eq!(left_out.variable, variables[index], "{what}: {key}");
            let handle = whole.module.graph.find(&variables[index].shared_name);
            let placed = all.task_of[handle.unwrap().index()];
            assert_eq!(placed, Some(left_out.task), "{what}: {key}");
        }
    }
    shared
}

/// `n` float32 variables round robin over `tasks` tasks, named by `name(i)`.
fn round_robin(n: usize, tasks: usize, name: impl Fn(usize) -> String) -> String {
    let variables: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "checkpoint_key": name(i),
                "dtype": "float32",
                "shape": [2],
                "device": format!("/job:worker/replica:0/task:{}/device:CPU:0", i % tasks),
            })
        })
        .collect();
    serde_json::json!({ "variables": variables }).to_string()
}

#[test]
fn a_share_partitions_as_the_whole_plan() {
    let mut files: Vec<PathBuf> = CASES
        .iter()
        .map(|case| {
            root()
                .join("tests/fixtures/part")
                .join(case)
                .join("case.json")
        })
        .collect();
    for entry in std::fs::read_dir(root().join("tests/inputs/trace")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "json") {
            files.push(path);
        }
    }
    files.push(root().join("examples/two_tasks.json"));
    let mut shared = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let tasks = shares_match(&text, &name);
        if tasks > 0 {
            shared.push(name.clone());
        }
        // The plans of these have no op a variable's name could meet in the restore plan
        // either: they share the restore plan as they share the save plan.
        assert_eq!(restore_shares_match(&text, &name), tasks, "{name}");
    }
    // The plain plans on several tasks share; an I/O device, slices, a variable on no named
    // task do not.
    for expected in [
        "p1_two_tasks",
        "p4_four_tasks",
        "g3_two_tasks",
        "two_tasks.json",
    ] {
        assert!(
            shared.iter().any(|name| name.contains(expected)),
            "{expected} not shared: {shared:?}"
        );
    }
    for refused in [
        "p2_three",
        "p3_sliced",
        "p5_default",
        "p6_four",
        "g4_io",
        "g5_sliced",
    ] {
        assert!(
            !shared.iter().any(|name| name.contains(refused)),
            "{refused} shared: {shared:?}"
        );
    }
    let scale = round_robin(3000, 5, |i| format!("layer_{i:05}/kernel"));
    assert_eq!(shares_match(&scale, "3000 variables on 5 tasks"), 5);
    assert_eq!(restore_shares_match(&scale, "3000 variables on 5 tasks"), 5);
}

/// One task whose devices spell it two ways is two groups (two shards) to the tracer and
/// one task to the partitioner: a share keeps the first variable of each group.
#[test]
fn a_task_spelled_two_ways_keeps_both_shards() {
    let devices = [
        "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:worker/task:1",
        "/job:worker/replica:0/task:2/device:CPU:0",
        "/job:worker/replica:0/task:1/device:CPU:0",
    ];
    let variables: Vec<serde_json::Value> = (0..16)
        .map(|i| {
            serde_json::json!({
                "checkpoint_key": format!("v{i:02}"),
                "dtype": "float32",
                "shape": [2],
                "device": devices[i % 4],
            })
        })
        .collect();
    let text = serde_json::json!({ "variables": variables }).to_string();
    assert_eq!(shares_match(&text, "task 1 spelled two ways"), 3);
    assert_eq!(restore_shares_match(&text, "task 1 spelled two ways"), 3);
}

/// Names a variable left out could have taken from a kept op: the share is refused.
#[test]
fn names_that_could_move_refuse_the_share() {
    let with_names = |names: &[&str]| round_robin(names.len(), 2, |i| names[i].to_owned());
    // A saver op's name (any case, any suffix) held by a variable of either task.
    for names in [
        &["a", "b", "SaveV2", "c"][..],
        &["a", "b", "c", "savev2_3"],
        &["a", "StringJoin/x", "c", "d"],
        &["Num_Shards", "b", "c", "d"],
    ] {
        assert_eq!(
            shares_match(&with_names(names), &format!("{names:?}")),
            0,
            "{names:?}"
        );
    }
    // A `zeros` name, which every variable takes for its initializer even when only its
    // handle is traced; a titlecase letter (not upper case, yet lower-cased by the names).
    for names in [
        &["a", "b", "c", "d", "e", "zeros_2"][..],
        &["a", "b", "c", "zeros"],
        &["a", "b", "c", "d", "e", "Zeros_2/shape_as_tensor"],
        &["a", "\u{1C6}", "\u{1C5}", "b"],
    ] {
        assert_eq!(
            shares_match(&with_names(names), &format!("{names:?}")),
            0,
            "{names:?}"
        );
    }
    // The same name twice (case aside), or one variable's name the scope of another's; in
    // input order and sorted (checked in one pass then), a name between a scope and its
    // child included.
    for names in [
        &["a", "b", "A", "c"][..],
        &["a", "b", "a/x", "c"],
        &["A", "a", "b", "c"],
        &["a", "a-b", "a/x", "c"],
        &["a/b", "a/b.c", "a/b/d", "e"],
    ] {
        assert_eq!(
            shares_match(&with_names(names), &format!("{names:?}")),
            0,
            "{names:?}"
        );
    }
    // The restore plan's op names refuse a share of both plans, not of the save plan.
    for names in [
        &["a", "b", "c", "Identity_7"][..],
        &["assignvariableop", "b", "c", "d"],
        &["a", "RestoreV2_1/tensor_names", "c", "d"],
    ] {
        let what = format!("{names:?}");
        assert_eq!(restore_shares_match(&with_names(names), &what), 0, "{what}");
        assert_eq!(shares_match(&with_names(names), &what), 2, "{what}");
    }
    // Names merely alike are fine.
    let alike = with_names(&["a", "b", "a_1", "ab/c", "save", "x/SaveV2", "Identityx"]);
    assert_eq!(shares_match(&alike, "alike"), 2);
    assert_eq!(restore_shares_match(&alike, "alike"), 2);
}

/// The heap the CLI populates ahead is reckoned for what the session traces: every variable,
/// or about one task's share for a session that traces its share.
#[test]
fn the_traced_variables_are_reckoned_for_the_share() {
    let spec = SpecFile::parse(&round_robin(1000, 4, |i| format!("v{i:04}"))).unwrap();
    for plans in [Plans::SaveOnly, Plans::RestoreOnly] {
        let share = SessionOptions {
            plans,
            task: Some(2),
            ..SessionOptions::default()
        };
        assert_eq!(
            Session::traced_variables(&spec, &share),
            250 + 4,
            "{plans:?}"
        );
    }
    for whole in [
        SessionOptions::default(),
        SessionOptions {
            task: Some(2),
            ..SessionOptions::default()
        },
        SessionOptions {
            plans: Plans::SaveOnly,
            ..SessionOptions::default()
        },
    ] {
        assert_eq!(Session::traced_variables(&spec, &whole), 1000);
    }
}

/// What the whole trace refuses, a share refuses with the same error, though the variable at
/// fault is one it leaves out: a key twice, an initial value of the wrong size, a bad shape.
#[test]
fn a_share_refuses_what_the_whole_plan_refuses() {
    let variable = |key: &str, task: usize, extra: serde_json::Value| {
        let mut variable = serde_json::json!({
            "checkpoint_key": key,
            "dtype": "float32",
            "shape": [2],
            "device": format!("/job:worker/replica:0/task:{task}/device:CPU:0"),
        });
        variable
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        variable
    };
    let none = serde_json::json!({});
    let at_fault = [
        variable("x", 1, serde_json::json!({"name": "x2"})),
        variable("c", 1, serde_json::json!({"init": [1, 2, 3]})),
        variable("c", 1, serde_json::json!({"shape": [-3]})),
        // `tf.zeros` as a `Fill` whose shape does not fit int32, after plain zeros of the
        // same dtype (made once per dtype, a fill never).
        variable("c", 1, serde_json::json!({"shape": [3_000_000_000u64]})),
    ];
    for fault in at_fault {
        let variables = [
            variable("x", 0, serde_json::json!({"name": "x1"})),
            variable("b", 1, none.clone()),
            fault.clone(),
        ];
        let text = serde_json::json!({ "variables": variables }).to_string();
        let spec = SpecFile::parse(&text).unwrap();
        let trackables = spec.trackables().unwrap();
        let options = spec.options().unwrap();
        let whole = trace_flat_save_as(&trackables, &options, VariableOps::Handles)
            .map(drop)
            .unwrap_err();
        let share = trace_flat_save_share(&trackables, &options, 0)
            .map(drop)
            .unwrap_err();
        assert_eq!(share.to_string(), whole.to_string(), "{fault}");
        let share = trace_flat_share(&trackables, &options, 0)
            .map(drop)
            .unwrap_err();
        assert_eq!(share.to_string(), whole.to_string(), "{fault}");
    }
    // Two bad initial values, the first in every share, the second left out of task 0's: the
    // first is the one reported, as the whole trace reports it.
    let variables = [
        variable("a", 0, serde_json::json!({"init": ["x", "y"]})),
        variable("b", 1, none.clone()),
        variable("c", 1, serde_json::json!({"init": ["p", "q"]})),
        variable("d", 0, none.clone()),
    ];
    let text = serde_json::json!({ "variables": variables }).to_string();
    let spec = SpecFile::parse(&text).unwrap();
    let (trackables, options) = (spec.trackables().unwrap(), spec.options().unwrap());
    let whole = trace_flat_as(&trackables, &options, VariableOps::Handles)
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(whole.contains("`a`"), "{whole}");
    for task in 0..2 {
        for share in [
            trace_flat_save_share(&trackables, &options, task).map(drop),
            trace_flat_share(&trackables, &options, task).map(drop),
        ] {
            assert_eq!(share.unwrap_err().to_string(), whole, "task {task}");
        }
    }
}

/// A session that only restores takes no value, a share's as the whole plan's: a value for
/// a key the share leaves out is refused all the same.
#[test]
fn a_restoring_share_refuses_values_as_the_whole_plan_does() {
    let spec = SpecFile::parse(&round_robin(8, 2, |i| format!("v{i}"))).unwrap();
    let value = HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap();
    let values = BTreeMap::from([("v3".to_owned(), value)]);
    let error = |task| {
        let options = SessionOptions {
            plans: Plans::RestoreOnly,
            task,
            ..SessionOptions::default()
        };
        let session = Session::from_spec(&spec, options).unwrap();
        let assigned = session.assign(values.clone()).unwrap_err().to_string();
        let given = Session::from_spec_with_values(&spec, options, values.clone());
        (assigned, given.map(drop).unwrap_err().to_string())
    };
    let whole = error(None);
    assert!(whole.0.contains("v3"), "{whole:?}");
    // `v3` is task 1's, left out of task 0's share.
    assert_eq!(error(Some(0)), whole);
    assert_eq!(error(Some(1)), whole);
}

/// A spec of 40 float32[2] variables round robin over 3 tasks, and a value for each, no two
/// alike.
fn forty_on_three() -> (SpecFile, BTreeMap<String, HostTensor>) {
    let spec = SpecFile::parse(&round_robin(40, 3, |i| format!("v{i:02}"))).unwrap();
    let values = (spec.variables.iter().enumerate())
        .map(|(i, variable)| {
            let value = HostTensor::from_f32s(vec![2], &[i as f32, 0.5 - i as f32]).unwrap();
            (variable.checkpoint_key.clone(), value)
        })
        .collect();
    (spec, values)
}

/// Sessions of shares, one per task on threads meeting in memory, save the bytes one process
/// saves, whether given every value or, asked once the keys are bound, only those of the
/// tensors the session does not say it leaves out (every other task's but one per task);
/// a value for a key of no task is still refused.
#[test]
fn sessions_of_shares_save_what_one_process_saves() {
    let (spec, values) = forty_on_three();
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one/ckpt").to_str().unwrap().to_owned();
    let many = dir.path().join("many/ckpt").to_str().unwrap().to_owned();
    let whole = Session::from_spec(&spec, SessionOptions::default()).unwrap();
    whole.assign(values.clone()).unwrap();
    whole.save(&one).unwrap();

    let options = |task| SessionOptions {
        plans: Plans::SaveOnly,
        task: Some(task),
        ..SessionOptions::default()
    };
    let rendezvous = LocalRendezvous::new(3);
    std::thread::scope(|scope| {
        for task in 0..3 {
            let view: Arc<dyn Rendezvous> = Arc::new(rendezvous.task(task).unwrap());
            let (spec, values, many) = (&spec, &values, &many);
            scope.spawn(move || {
                let mut handed = None;
                let session = match task {
                    1 => Session::from_spec_with_values_when_bound(spec, options(task), |out| {
                        handed = Some(out.keys().cloned().collect::<Vec<_>>());
                        let kept = values.iter().filter(|(key, _)| !out.contains_key(*key));
                        Some(
                            kept.map(|(key, value)| (key.clone(), value.clone()))
                                .collect(),
                        )
                    }),
                    _ => Session::from_spec_with_values(spec, options(task), values.clone()),
                }
                .unwrap()
                .with_cluster(view);
                // Its own 13 or 14 variables and one of each other task.
                let saved = session.saved_tensors().len();
                assert!((15..=16).contains(&saved), "task {task}: {saved} saved");
                if let Some(handed) = handed {
                    assert_eq!(handed.len() + saved, 40, "task {task}: {handed:?}");
                    assert!(!handed.contains(&"v01".to_owned()), "v01 is task 1's own");
                    assert!(
                        !handed.contains(&"v00".to_owned()),
                        "task 0's first is kept"
                    );
                    assert!(
                        handed.contains(&"v03".to_owned()),
                        "task 0's second is left out"
                    );
                }
                session.save(many).unwrap();
            });
        }
    });
    for file in [
        "ckpt.index",
        "ckpt.data-00000-of-00003",
        "ckpt.data-00002-of-00003",
    ] {
        let read = |dir: &str| std::fs::read(dir_of(dir).join(file)).unwrap();
        assert!(read(&one) == read(&many), "{file} differs");
    }

    let mut unknown = values.clone();
    unknown.insert(
        "nobody".to_owned(),
        HostTensor::from_f32s(vec![2], &[0.0, 0.0]).unwrap(),
    );
    let session = Session::from_spec(&spec, options(1)).unwrap();
    let error = session.assign(unknown).unwrap_err().to_string();
    assert!(error.contains("nobody"), "{error}");
    session.assign(values).unwrap();
}

fn dir_of(prefix: &str) -> PathBuf {
    PathBuf::from(prefix).parent().unwrap().to_owned()
}

/// Sessions of shares of the restore plan, one per task on threads meeting in memory, know
/// every tensor the whole restore reads, bound to the same variables and held by the same
/// tasks, and, once gathered, restore at task 0 what one process restores.
#[test]
fn sessions_of_shares_restore_what_one_process_restores() {
    let (spec, values) = forty_on_three();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_str().unwrap().to_owned();
    let one = Session::from_spec(&spec, SessionOptions::default()).unwrap();
    one.assign(values.clone()).unwrap();
    one.save(&prefix).unwrap();

    let options = |task, plans| SessionOptions {
        plans,
        task: Some(task),
        ..SessionOptions::default()
    };
    let run = |plans: Plans| {
        let rendezvous = LocalRendezvous::new(3);
        std::thread::scope(|scope| {
            let tasks: Vec<_> = (0..3)
                .map(|task| {
                    let view: Arc<dyn Rendezvous> = Arc::new(rendezvous.task(task).unwrap());
                    let (spec, prefix) = (&spec, &prefix);
                    scope.spawn(move || {
                        let session = Session::from_spec(spec, options(task, plans))
                            .unwrap()
                            .with_cluster(view);
                        session.restore(prefix).unwrap();
                        let known = (
                            session.restored_tensors().clone(),
                            session.restored_owners(),
                        );
                        let plan = session.restore_plan().unwrap().task_plan(task).unwrap();
                        let mut steps: Vec<String> =
                            plan.steps().iter().map(|step| step.name.clone()).collect();
                        steps.sort();
                        let held = session.gather().unwrap();
                        (known, steps, held.then(|| session.values().unwrap()))
                    })
                })
                .collect();
            let mut results: Vec<_> = tasks.into_iter().map(|task| task.join().unwrap()).collect();
            let restored = results[0].2.take();
            let (known, steps) = results
                .into_iter()
                .map(|(known, steps, _)| (known, steps))
                .unzip::<_, _, Vec<_>, Vec<_>>();
            (known, steps, restored)
        })
    };
    // Every task's share knows what the whole plan of a process of the same cluster knows,
    // and compiles a plan of as many steps for its task; but for task 0's, the names of its
    // restoring ops are not the whole plan's (a share was traced: the ops restoring task 0's
    // variables and the other tasks' first come first).
    let (shares, share_steps, restored) = run(Plans::RestoreOnly);
    let (wholes, whole_steps, whole_restored) = run(Plans::Both);
    assert_eq!(shares, wholes);
    assert_eq!(shares[0].0.len(), 40);
    for task in 0..3 {
        assert_eq!(
            share_steps[task].len(),
            whole_steps[task].len(),
            "task {task}"
        );
        assert_eq!(
            share_steps[task] == whole_steps[task],
            task == 0,
            "task {task}"
        );
    }
    assert_eq!(restored.unwrap(), values);
    assert_eq!(whole_restored.unwrap(), values);
}
