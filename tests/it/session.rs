//! The [`Session`] library entry point: traced specs (`tests/inputs/trace/g1`–`g6`) saved,
//! read back with the bundle reader and restored; byte-identical checkpoints for the inputs of
//! TensorFlow's `ckpt/c3_two_tasks`, `c4_two_cpus_one_task` and `c6_max_shard_size`; TF's own
//! `g8_meta_graph` MetaGraphDef and `flat_graph.pbtxt` graphs; value checks; failure safety;
//! the order of `Session::new`'s errors.

use crate::support::exec::HookedIo;
use crate::support::session::{
    assert_same_files, fixture_values, generated_values, read_checkpoint, spec_session,
    spec_session_on,
};
use crate::support::stack_saver::StackSaver;
use crate::support::{ErrorForm, TRACE_CASES, error_chain, fixture, fixture_json, manifest_path};

use std::collections::BTreeMap;

use saveplan::exec::{Backend, HostTensor};
use saveplan::session::{Plans, Session, SessionError, SessionOptions, bind, infer_targets};
use saveplan::trace::spec::SpecFile;
use saveplan::trace::{ReadKind, VariableOps, trace_flat_as};

/// Saves generated values, reads them back with the bundle reader, then restores into a fresh
/// session (and into the same one after overwriting its variables) and compares; on every
/// backend.
#[test]
fn traced_specs_round_trip() {
    for (name, backend) in cases_and_backends(&TRACE_CASES) {
        let case = format!("{name} on {backend}");
        let spec = format!("trace/{name}.json");
        let session = spec_session_on(&spec, backend);
        let values = generated_values(&session, 1);
        session.assign(values.clone()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let prefix_text = prefix.to_str().unwrap();
        session
            .save(prefix_text)
            .unwrap_or_else(|err| panic!("{case}: {}", error_chain(&err, ErrorForm::OneLine)));
        assert_eq!(
            read_checkpoint(&prefix),
            values,
            "{case}: checkpoint contents"
        );

        let fresh = spec_session_on(&spec, backend);
        fresh
            .restore(prefix_text)
            .unwrap_or_else(|err| panic!("{case}: {}", error_chain(&err, ErrorForm::OneLine)));
        assert_eq!(fresh.values().unwrap(), values, "{case}: restored values");

        session.assign(generated_values(&session, 2)).unwrap();
        session.restore(prefix_text).unwrap();
        assert_eq!(session.values().unwrap(), values, "{case}: restored over");
    }
}

/// Every case paired with every backend this build has.
fn cases_and_backends<'a>(cases: &[&'a str]) -> Vec<(&'a str, Backend)> {
    cases
        .iter()
        .flat_map(|&case| {
            Backend::available()
                .into_iter()
                .map(move |backend| (case, backend))
        })
        .collect()
}

/// One session saves to many prefixes with different values.
#[test]
fn one_session_saves_many_prefixes() {
    let session = spec_session("trace/g2_two_cpus.json");
    let dir = tempfile::tempdir().unwrap();
    for salt in 0..4u8 {
        let values = generated_values(&session, salt);
        session.assign(values.clone()).unwrap();
        let prefix = dir.path().join(format!("ckpt-{salt}"));
        session.save(prefix.to_str().unwrap()).unwrap();
        assert_eq!(read_checkpoint(&prefix), values, "salt {salt}");
    }
}

/// A whole tensor goes into its variable without copying.
#[test]
fn assign_moves_whole_tensors() {
    let session = spec_session("trace/g1_single_cpu.json");
    let values = generated_values(&session, 3);
    let original = values["v"].clone();
    session.assign(values).unwrap();
    let stored = session
        .variables()
        .get(&session.saved_tensors()["v"].parts[0].variable)
        .unwrap();
    assert!(stored.shares_storage_with(&original));
}

/// The checkpoints written for the inputs of TF's checkpoint fixtures are byte-identical to
/// TF's: one task on two CPUs, two tasks (two `SaveV2` shards and a merge), max shard size;
/// on every backend.
#[test]
fn checkpoints_match_tf_fixture_bytes() {
    let cases = ["c4_two_cpus_one_task", "c3_two_tasks", "c6_max_shard_size"];
    for (case, backend) in cases_and_backends(&cases) {
        let session = spec_session_on(&format!("run/{case}.json"), backend);
        session.assign(fixture_values(case)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        session
            .save(dir.path().join("ckpt").to_str().unwrap())
            .unwrap_or_else(|err| panic!("{case}: {}", error_chain(&err, ErrorForm::OneLine)));
        assert_same_files(case, dir.path());
    }
}

/// A session restores TF's own checkpoints.
#[test]
fn restores_tf_fixture_checkpoints() {
    for case in ["c4_two_cpus_one_task", "c3_two_tasks", "c6_max_shard_size"] {
        let session = spec_session(&format!("run/{case}.json"));
        let prefix = fixture(&format!("ckpt/{case}/ckpt"));
        session.restore(prefix.to_str().unwrap()).unwrap();
        assert_eq!(session.values().unwrap(), fixture_values(case), "{case}");
    }
}

/// TF's MetaGraphDef: the SaverDef's save tensor saves `v` and its restore op restores it.
#[test]
fn g8_meta_graph_saves_and_restores() {
    let meta =
        match saveplan::export::read_graph_file(&fixture("graph/g8_meta_graph/meta_graph.pbtxt")) {
            Ok(saveplan::export::Loaded::MetaGraph(meta)) => meta,
            other => panic!("not a MetaGraphDef: {:?}", other.err()),
        };
    let session = Session::from_meta_graph(&meta, SessionOptions::default()).unwrap();
    assert_eq!(session.saved_tensors().keys().collect::<Vec<_>>(), ["v"]);
    assert_eq!(session.restored_tensors().keys().collect::<Vec<_>>(), ["v"]);
    let values = BTreeMap::from([(
        "v".to_owned(),
        HostTensor::from_f32s(vec![3], &[4.0, 5.0, 6.0]).unwrap(),
    )]);
    session.assign(values.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    session.save(prefix.to_str().unwrap()).unwrap();
    assert_eq!(read_checkpoint(&prefix), values);
    let fresh = Session::from_meta_graph(&meta, SessionOptions::default()).unwrap();
    fresh.restore(prefix.to_str().unwrap()).unwrap();
    assert_eq!(fresh.values().unwrap(), values);
}

/// TF's flat graphs (no SaverDef): the targets are inferred, keys bound through TF's own
/// reads, slices and assignments.
#[test]
fn tf_flat_graphs_round_trip() {
    for case in TRACE_CASES {
        let module = match saveplan::export::read_graph_file(&fixture(&format!(
            "graph/{case}/flat_graph.pbtxt"
        ))) {
            Ok(saveplan::export::Loaded::Graph(module)) => module,
            other => panic!("{case}: not a GraphDef: {:?}", other.err()),
        };
        let targets = infer_targets(&module).unwrap();
        let flat = fixture_json(&format!("graph/{case}/flat.json"));
        assert_eq!(
            targets.filename_tensor_name, flat["filename_tensor_name"],
            "{case}"
        );
        assert_eq!(targets.save_target, flat["save_op_name"], "{case}");
        let session = Session::new(&module, targets.clone(), SessionOptions::default()).unwrap();
        let values = generated_values(&session, 5);
        session.assign(values.clone()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        session.save(prefix.to_str().unwrap()).unwrap();
        assert_eq!(read_checkpoint(&prefix), values, "{case}");
        let fresh = Session::new(&module, targets, SessionOptions::default()).unwrap();
        fresh.restore(prefix.to_str().unwrap()).unwrap();
        assert_eq!(fresh.values().unwrap(), values, "{case}");
    }
}

/// Missing, unknown and mistyped values are refused before anything is stored.
#[test]
fn bad_values_are_refused() {
    let session = spec_session("trace/g5_sliced.json");
    let good = generated_values(&session, 1);
    let check = |values: BTreeMap<String, HostTensor>, expected: &str| {
        let err = session.assign(values).unwrap_err();
        assert_eq!(error_chain(&err, ErrorForm::OneLine), expected);
        assert!(session.variables().is_empty());
    };
    let mut missing = good.clone();
    missing.remove("w");
    check(missing, "no value for checkpoint key `w`");
    let mut unknown = good.clone();
    unknown.insert("x".to_owned(), HostTensor::int32_scalar(1));
    check(unknown, "value `x` is not a checkpoint key of the plan");
    // Before the first key and between two keys (the walk over both sorted maps meets these
    // while pairing, not after it).
    for key in ["a", "q"] {
        let mut unknown = generated_values(&session, 1);
        unknown.insert(key.to_owned(), HostTensor::int32_scalar(1));
        check(
            unknown,
            &format!("value `{key}` is not a checkpoint key of the plan"),
        );
    }
    let mut dtype = good.clone();
    dtype.insert(
        "part".to_owned(),
        HostTensor::from_i32s(vec![4, 3], &[0; 12]).unwrap(),
    );
    check(dtype, "value `part` is int32, the plan saves float32");
    let mut shape = good;
    shape.insert(
        "part".to_owned(),
        HostTensor::from_f32s(vec![2, 3], &[0.0; 6]).unwrap(),
    );
    check(
        shape,
        "value `part` has shape [2, 3], the plan saves shape [4, 3]",
    );
    let err = session.save("/nonexistent/ckpt").unwrap_err();
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        "no value for 2 checkpoint keys: `part`, `w`"
    );
}

/// After a good save, failed saves (one `SaveV2` failing, the merge failing, a missing value,
/// a temporary directory that cannot be created) leave the old checkpoint readable with its
/// old values.
#[test]
fn failed_save_keeps_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix_text = prefix.to_str().unwrap().to_owned();
    let good = spec_session("trace/g3_two_tasks.json");
    let old = generated_values(&good, 1);
    good.assign(old.clone()).unwrap();
    good.save(&prefix_text).unwrap();

    // A backend that fails the `SaveV2` of one shard, or the merge.
    let failing = |fail_save_of: Option<&'static str>, fail_merge: bool| {
        let io = HookedIo {
            before_save: move |prefix: &str| match fail_save_of {
                Some(suffix) if prefix.ends_with(suffix) => {
                    Err(std::io::Error::other("injected SaveV2 failure").into())
                }
                _ => Ok(()),
            },
            before_merge: move || match fail_merge {
                true => Err(std::io::Error::other("injected merge failure").into()),
                false => Ok(()),
            },
        };
        let session = spec_session("trace/g3_two_tasks.json").with_io(Box::new(io));
        session.assign(generated_values(&session, 2)).unwrap();
        session
    };
    let cases: Vec<(Session, &str)> = vec![
        (
            failing(Some("part-00001-of-00002"), false),
            "injected SaveV2 failure",
        ),
        (failing(None, true), "injected merge failure"),
    ];
    for (session, expected) in cases {
        let err = session.save(&prefix_text).unwrap_err();
        assert!(
            error_chain(&err, ErrorForm::OneLine).ends_with(expected),
            "{}",
            error_chain(&err, ErrorForm::OneLine)
        );
        assert_eq!(read_checkpoint(&prefix), old);
    }

    // Every missing value is counted in one error, the first few named.
    let unassigned = spec_session("trace/g3_two_tasks.json");
    let n_keys = unassigned.saved_tensors().len();
    match unassigned.save(&prefix_text) {
        Err(err @ SessionError::MissingValue { .. }) => {
            let SessionError::MissingValue { keys, count } = &err else {
                unreachable!()
            };
            assert_eq!(*count, n_keys);
            assert_eq!(keys.len(), n_keys.min(3));
            assert!(
                err.to_string()
                    .starts_with(&format!("no value for {n_keys} checkpoint keys: `")),
                "{err}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(read_checkpoint(&prefix), old);

    // A file where the temporary directory should go makes every SaveV2 fail. (The failed
    // saves above left their parts there, as TensorFlow does.)
    std::fs::remove_dir_all(format!("{prefix_text}_temp")).unwrap();
    std::fs::write(format!("{prefix_text}_temp"), b"in the way").unwrap();
    good.assign(generated_values(&good, 3)).unwrap();
    let err = good.save(&prefix_text).unwrap_err();
    assert!(
        error_chain(&err, ErrorForm::OneLine).contains("create directory"),
        "{}",
        error_chain(&err, ErrorForm::OneLine)
    );
    assert_eq!(read_checkpoint(&prefix), old);
}

/// The merge checks every destination name before it renames the first data file: with a
/// directory in the way of the second new data file, nothing of the new checkpoint appears
/// and the old one (of another shard count) still reads back.
#[test]
fn merge_checks_destinations_before_renaming() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix_text = prefix.to_str().unwrap().to_owned();
    let old_session = spec_session("trace/g1_single_cpu.json");
    let old = generated_values(&old_session, 1);
    old_session.assign(old.clone()).unwrap();
    old_session.save(&prefix_text).unwrap();

    std::fs::create_dir(format!("{prefix_text}.data-00001-of-00002")).unwrap();
    let session = spec_session("trace/g3_two_tasks.json");
    session.assign(generated_values(&session, 2)).unwrap();
    let err = session.save(&prefix_text).unwrap_err();
    assert!(
        error_chain(&err, ErrorForm::OneLine).contains("is a directory"),
        "{}",
        error_chain(&err, ErrorForm::OneLine)
    );
    assert!(!dir.path().join("ckpt.data-00000-of-00002").exists());
    assert_eq!(read_checkpoint(&prefix), old);
}

/// A `P.index` that is a folder fails the save before anything is written or moved, and
/// leaves nothing behind (no `.merging-old` backup, no staged index, no temporary shards); the
/// merge on its own refuses it the same way.
#[test]
fn index_folder_fails_the_save_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix_text = prefix.to_str().unwrap().to_owned();
    std::fs::create_dir(format!("{prefix_text}.index")).unwrap();
    let session = spec_session("trace/g1_single_cpu.json");
    session.assign(generated_values(&session, 1)).unwrap();
    let err = session.save(&prefix_text).unwrap_err();
    let line = error_chain(&err, ErrorForm::OneLine);
    assert!(line.contains("ckpt.index: replace index file"), "{line}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["ckpt.index"], "{line}");
    assert!(
        std::fs::read_dir(format!("{prefix_text}.index"))
            .unwrap()
            .next()
            .is_none()
    );

    let source = dir.path().join("source");
    let source_session = spec_session("trace/g1_single_cpu.json");
    source_session
        .assign(generated_values(&source_session, 1))
        .unwrap();
    source_session.save(source.to_str().unwrap()).unwrap();
    let err = saveplan::bundle::merge_bundles(&[&source], &prefix, Default::default()).unwrap_err();
    assert!(
        err.to_string().contains("ckpt.index: replace index file"),
        "{err}"
    );
    let leftovers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("ckpt") && name != "ckpt.index")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// An empty prefix and a prefix that is an existing folder are refused before the plan runs.
#[test]
fn empty_and_folder_prefixes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let session = spec_session("trace/g1_single_cpu.json");
    session.assign(generated_values(&session, 1)).unwrap();
    let err = session.save("").unwrap_err();
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        "cannot save at prefix ``: the checkpoint prefix is empty"
    );
    let folder = dir.path().to_str().unwrap();
    let err = session.save(folder).unwrap_err();
    assert!(
        error_chain(&err, ErrorForm::OneLine)
            .ends_with(": the checkpoint prefix is an existing directory"),
        "{}",
        error_chain(&err, ErrorForm::OneLine)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A checkpoint key must name one tensor: a plan that saves two variables under one key with
/// different dtypes, or with different full shapes, is refused when the session binds its keys,
/// naming the key and what disagrees.
#[test]
fn one_key_for_two_disagreeing_variables_is_refused() {
    use saveplan::trace::spec::SpecFile;
    use saveplan::trace::trace_flat;
    use saveplan_ir::AttrValue;
    use saveplan_ir::attr::TensorValues;

    let trace = |b_dtype: &str, b_shape: &str| {
        let text = format!(
            r#"{{"variables": [
                {{"checkpoint_key": "a", "dtype": "float32", "shape": [2]}},
                {{"checkpoint_key": "b", "dtype": "{b_dtype}", "shape": {b_shape}}}]}}"#
        );
        let spec = SpecFile::parse(&text).unwrap();
        let trace = trace_flat(&spec.trackables().unwrap(), &spec.options().unwrap()).unwrap();
        let mut module = trace.module;
        // Both `SaveV2` and `RestoreV2` name the second tensor `a` too.
        for names in ["SaveV2/tensor_names", "RestoreV2/tensor_names"] {
            let id = module
                .graph
                .find(names)
                .expect("the traced plan names its keys");
            let mut op = module.graph.op_mut(id);
            let Some(AttrValue::Tensor(tensor)) = op.attrs().get_mut("value") else {
                panic!("{names} holds a tensor");
            };
            let TensorValues::String(keys) = &mut tensor.values else {
                panic!("{names} holds strings");
            };
            assert_eq!(keys, &[b"a".to_vec(), b"b".to_vec()]);
            keys[1] = b"a".to_vec();
        }
        Session::new(&module, trace.saver, SessionOptions::default())
    };
    assert!(
        trace("float32", "[2]").is_ok(),
        "the same dtype and shape bind"
    );
    for (dtype, shape, expected) in [
        ("int64", "[2]", "saved as float32 and as int64"),
        ("float32", "[3]", "its parts disagree on the full shape"),
    ] {
        let err = trace(dtype, shape).err().expect("refused");
        assert!(
            matches!(&err, SessionError::InconsistentKey { key, .. } if key == "a"),
            "{err:?}"
        );
        assert!(err.to_string().contains(expected), "{err}");
    }
}

/// `Session::new` verifies, compiles both plans and binds the keys at the same time; when
/// several of them fail, the error is still the first in that order (verifier, save plan,
/// restore plan, keys), whichever job ends first.
#[test]
fn session_errors_come_in_a_fixed_order() {
    use saveplan::trace::spec::SpecFile;
    use saveplan::trace::trace_flat;
    use saveplan_ir::{Attrs, Op};

    let text = r#"{"variables": [{"checkpoint_key": "a", "dtype": "float32", "shape": [2]}]}"#;
    let spec = SpecFile::parse(text).unwrap();
    let trace = trace_flat(&spec.trackables().unwrap(), &spec.options().unwrap()).unwrap();
    assert!(
        Session::new(
            &trace.module,
            trace.saver.clone(),
            SessionOptions::default()
        )
        .is_ok()
    );
    // An unknown restore target fails the restore plan and the key binding both.
    let mut unknown_restore = trace.saver.clone();
    unknown_restore
        .restore_targets
        .push("no_such_assign".to_owned());
    let mut unknown_both = unknown_restore.clone();
    unknown_both.save_target = "no_such_save".to_owned();
    // An `Identity` with no input and no `T` fails the verifier, and nothing else.
    let mut invalid = trace.module.clone();
    invalid
        .graph
        .add_op("broken", Op::Identity, "", Attrs::new())
        .unwrap();
    for (module, targets, expected) in [
        (&invalid, unknown_both.clone(), "verifier"),
        (&trace.module, unknown_both, "save"),
        (&trace.module, unknown_restore, "restore"),
    ] {
        for _ in 0..5 {
            let err = Session::new(module, targets.clone(), SessionOptions::default())
                .err()
                .expect("refused");
            let got = match &err {
                SessionError::Invalid(_) => "verifier",
                SessionError::Compile { what, .. } => what,
                other => panic!("{other:?}"),
            };
            assert_eq!(got, expected, "{err}");
        }
    }
}

/// A spec handed over to a session (`Session::from_spec(spec)`, whose entries are moved into
/// its trackables) fails as a lent one does, with the same first error: the entries' before
/// the options', and the first bad entry in input order.
#[test]
fn a_spec_handed_over_fails_as_a_lent_one() {
    let entry = |key: &str, dtype: &str| {
        format!(r#"{{"checkpoint_key": "{key}", "dtype": "{dtype}", "shape": [2]}}"#)
    };
    let bad_options = r#""options": {"experimental_sharding_callback": "NoSuchPolicy"}"#;
    for text in [
        format!(
            r#"{{"variables": [{}, {}], {bad_options}}}"#,
            entry("a", "float32"),
            entry("b", "float33")
        ),
        format!(
            r#"{{"variables": [{}, {}]}}"#,
            entry("a", "x"),
            entry("b", "float33")
        ),
        format!(
            r#"{{"variables": [{}], {bad_options}}}"#,
            entry("a", "float32")
        ),
    ] {
        let spec = SpecFile::parse(&text).unwrap();
        let lent = Session::from_spec(&spec, SessionOptions::default())
            .err()
            .expect("refused");
        let given = Session::from_spec(spec, SessionOptions::default())
            .err()
            .expect("refused");
        assert_eq!(given.to_string(), lent.to_string(), "{text}");
        assert_eq!(format!("{given:?}"), format!("{lent:?}"), "{text}");
    }
}

/// A session made with one plan ([`Plans`]) writes and reads what a full one does, has no
/// keys or plan of the other side, and refuses to run the plan it left out with a typed
/// error; on every backend.
#[test]
fn one_plan_sessions_do_their_half_and_refuse_the_other() {
    let cases = ["c4_two_cpus_one_task", "c3_two_tasks", "c6_max_shard_size"];
    for (case, backend) in cases_and_backends(&cases) {
        let spec = crate::support::session::spec(&format!("run/{case}.json"));
        let session_with = |plans| {
            let options = SessionOptions {
                backend,
                plans,
                ..SessionOptions::default()
            };
            Session::from_spec(&spec, options).unwrap()
        };
        let full = spec_session_on(&format!("run/{case}.json"), backend);
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let prefix_text = prefix.to_str().unwrap();

        let saver = session_with(Plans::SaveOnly);
        assert_eq!(saver.saved_tensors(), full.saved_tensors(), "{case}");
        assert!(saver.restored_tensors().is_empty(), "{case}");
        assert!(saver.save_plan().is_some() && saver.restore_plan().is_none());
        saver.assign(fixture_values(case)).unwrap();
        saver.save(prefix_text).unwrap();
        assert_same_files(case, dir.path());
        let refused = saver.restore(prefix_text).unwrap_err();
        assert!(
            matches!(refused, SessionError::PlanLeftOut { what: "restore" }),
            "{case}: {refused}"
        );

        let restorer = session_with(Plans::RestoreOnly);
        assert_eq!(
            restorer.restored_tensors(),
            full.restored_tensors(),
            "{case}"
        );
        assert!(restorer.saved_tensors().is_empty(), "{case}");
        assert!(restorer.restore_plan().is_some() && restorer.save_plan().is_none());
        restorer.restore(prefix_text).unwrap();
        assert_eq!(restorer.values().unwrap(), fixture_values(case), "{case}");
        // A refused save touches nothing at the prefix: not even what a killed save left,
        // which a save's lock would clean up.
        let leftover = dir
            .path()
            .join("ckpt_temp")
            .join("part-00000-of-00001.index");
        std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
        std::fs::write(&leftover, b"a killed save's part").unwrap();
        let refused = restorer.save(prefix_text).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the session was made without its save plan (SessionOptions::plans)",
            "{case}"
        );
        assert!(
            leftover.exists(),
            "{case}: the refused save cleaned the prefix"
        );
    }
}

/// The keys the tracer records as it traces a session's flat plan (`FlatTrace::keys`, with
/// `VariableOps::Handles`) are what walking the traced graph binds: the same bindings, in the
/// same order. A session from a spec takes the recorded ones and skips the walk. Checked on
/// every spec input and on a generated spec holding everything at once: three tasks,
/// partitioned variables read at save time, handle names that collide, a parallel-device
/// variable and a sharding policy that cuts pieces. The other forms record nothing.
#[test]
fn traced_keys_are_what_the_walk_binds() {
    let mut specs: Vec<(String, String)> = TRACE_CASES
        .iter()
        .map(|name| format!("tests/inputs/trace/{name}.json"))
        .chain(
            ["parallel_device", "unique_temp_id"]
                .map(|name| format!("tests/inputs/trace/extra/{name}.json")),
        )
        .map(|path| {
            let text = std::fs::read_to_string(manifest_path(&path)).unwrap();
            (path, text)
        })
        .collect();
    specs.push(("generated".to_owned(), mixed_spec()));
    let mut cut = 0;
    for (case, text) in &specs {
        let spec = SpecFile::parse(text).unwrap();
        let trackables = spec.trackables().unwrap();
        let options = spec.options().unwrap();
        let created = trace_flat_as(&trackables, &options, VariableOps::Create).unwrap();
        assert!(
            created.keys.is_none(),
            "{case}: a created plan records keys"
        );
        let trace = trace_flat_as(&trackables, &options, VariableOps::Handles).unwrap();
        let keys = trace
            .keys
            .as_ref()
            .unwrap_or_else(|| panic!("{case}: no keys"));
        let restore_targets: Vec<&str> = trace
            .saver
            .restore_targets
            .iter()
            .map(String::as_str)
            .collect();
        let walked_save = bind::bind_save(&trace.module, &[&trace.saver.save_target]).unwrap();
        let walked_restore = bind::bind_restore(&trace.module, &restore_targets).unwrap();
        let traced_save = bind::traced_bindings(&keys.saves, &keys.variables).unwrap();
        let traced_restore = bind::traced_bindings(&keys.restores, &keys.variables).unwrap();
        assert!(
            !walked_save.is_empty() && !walked_restore.is_empty(),
            "{case}"
        );
        assert_eq!(traced_save, walked_save, "{case}: saved keys");
        assert_eq!(traced_restore, walked_restore, "{case}: restored keys");
        cut += traced_save.iter().filter(|b| b.sliced_by_plan).count();
        // A session from the spec has the walked session's keys.
        let options = SessionOptions::default();
        let walked = Session::new(&trace.module, trace.saver.clone(), options).unwrap();
        let traced = Session::from_spec(&spec, SessionOptions::default()).unwrap();
        assert_eq!(traced.saved_tensors(), walked.saved_tensors(), "{case}");
        assert_eq!(
            traced.restored_tensors(),
            walked.restored_tensors(),
            "{case}"
        );
    }
    assert!(cut > 2, "the inputs cut pieces out of variables: {cut}");
}

/// A plan holding a tensor that is not a variable (a saved constant) or a registered saver's
/// ops records no keys: a session walks its graph.
#[test]
fn plans_with_constants_or_registered_savers_record_no_keys() {
    let text = mixed_spec();
    let spec = SpecFile::parse(&text).unwrap();
    let mut trackables = spec.trackables().unwrap();
    let options = spec.options().unwrap();
    assert!(
        trace_flat_as(&trackables, &options, VariableOps::Handles)
            .unwrap()
            .keys
            .is_some()
    );
    let mut registered = spec.options().unwrap();
    registered.registered_savers.push(Box::new(StackSaver));
    assert!(
        trace_flat_as(&trackables, &registered, VariableOps::Handles)
            .unwrap()
            .keys
            .is_none()
    );
    trackables[0].tensors[0].variable.read = ReadKind::Constant;
    assert!(
        trace_flat_as(&trackables, &options, VariableOps::Handles)
            .unwrap()
            .keys
            .is_none()
    );
}

/// A traced entry naming a variable its record does not list is refused with the key and op,
/// not read out of bounds.
#[test]
fn a_traced_entry_without_its_variable_is_refused() {
    let spec = SpecFile::parse(&mixed_spec()).unwrap();
    let trackables = spec.trackables().unwrap();
    let options = spec.options().unwrap();
    let trace = trace_flat_as(&trackables, &options, VariableOps::Handles).unwrap();
    let mut keys = trace.keys.unwrap();
    let n_variables = keys.variables.len() as u32;
    keys.restores[0].entries[1].variable = n_variables;
    let err = bind::traced_bindings(&keys.restores, &keys.variables).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "checkpoint key `{}` (op `RestoreV2`): the trace lists no variable {n_variables}",
            keys.restores[0].entries[1].checkpoint_key
        )
    );
    assert!(bind::traced_bindings(&keys.saves, &keys.variables).is_ok());
}

/// A spec with three tasks, partitioned variables read at save time (one restored as a
/// trackable of two slices), handle names that collide (`w`, `w_1`), a parallel-device
/// variable and a shard size that cuts the large variables into pieces.
fn mixed_spec() -> String {
    let task = |i: usize| format!("/job:worker/replica:0/task:{}/device:CPU:0", i % 3);
    let mut variables = Vec::new();
    for i in 0..24 {
        variables.push(serde_json::json!({
            "checkpoint_key": format!("layer_{i}/kernel"), "dtype": if i % 2 == 0 { "float32" } else { "int64" },
            "shape": [i % 5 + 1, 8], "device": task(i), "name": if i % 4 == 0 { "w" } else { "v" },
        }));
    }
    for part in 0..2 {
        variables.push(serde_json::json!({
            "checkpoint_key": "part", "dtype": "float32", "shape": [2, 30],
            "slice_spec": format!("4 30 {},2:0,30", 2 * part), "device": task(part),
            "name": format!("part_{part}"), "trackable": "part",
        }));
    }
    variables.push(serde_json::json!({
        "checkpoint_key": "par/.ATTRIBUTES/VARIABLE_VALUE", "dtype": "float32", "shape": [3],
        "name": "par", "parallel_devices": [task(0), task(1)],
    }));
    serde_json::json!({
        "variables": variables,
        "options": {"experimental_sharding_callback": "MaxShardSizePolicy", "max_shard_size": 100},
    })
    .to_string()
}

/// A session made with its values ([`Session::new_with_values`],
/// [`Session::from_spec_with_values`], and [`Session::from_spec_with_values_when_bound`],
/// which asks for them once, after the keys are bound) holds what one made and then assigned
/// holds, and saves the same bytes; in graph and eager mode, on every case. Its errors come in
/// the order of the two calls: a plan's first, then the values'; values not given (`None`)
/// leave the session without them, and a spec that does not trace never asks for them.
#[test]
fn sessions_made_with_their_values_equal_made_then_assigned() {
    use saveplan::session::Mode;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for case in TRACE_CASES {
        let spec = crate::support::session::spec(&format!("trace/{case}.json"));
        for mode in [Mode::Graph, Mode::Eager] {
            let options = SessionOptions {
                mode,
                ..SessionOptions::default()
            };
            let assigned = Session::from_spec(&spec, options).unwrap();
            let values = generated_values(&assigned, 3);
            assigned.assign(values.clone()).unwrap();
            let given = Session::from_spec_with_values(&spec, options, values.clone()).unwrap();
            assert_eq!(
                given.values().ok(),
                assigned.values().ok(),
                "{case}, {mode:?}"
            );
            let asked = AtomicUsize::new(0);
            let later = Session::from_spec_with_values_when_bound(&spec, options, |left_out| {
                // A session of the whole plan ignores no value.
                assert!(left_out.is_empty(), "{case}, {mode:?}");
                asked.fetch_add(1, Ordering::Relaxed);
                Some(values.clone())
            })
            .unwrap();
            assert_eq!(asked.load(Ordering::Relaxed), 1, "{case}, {mode:?}");
            assert_eq!(
                later.values().ok(),
                assigned.values().ok(),
                "{case}, {mode:?}"
            );
            let none = Session::from_spec_with_values_when_bound(&spec, options, |_| None).unwrap();
            let none_dir = tempfile::tempdir().unwrap();
            let err = none
                .save(none_dir.path().join("ckpt").to_str().unwrap())
                .unwrap_err();
            assert!(
                matches!(err, SessionError::MissingValue { .. }),
                "{case}, {mode:?}: {err}"
            );
            let mut short = values.clone();
            let (key, _) = short.pop_first().unwrap();
            let err = Session::from_spec_with_values_when_bound(&spec, options, |_| Some(short))
                .err()
                .expect("a value is missing");
            assert!(err.is_about_values(), "{case}, {mode:?}: {err}");
            assert_eq!(
                error_chain(&err, ErrorForm::OneLine),
                format!("no value for checkpoint key `{key}`")
            );
            let dir = tempfile::tempdir().unwrap();
            let (ours, theirs) = (dir.path().join("given"), dir.path().join("assigned"));
            given.save(ours.to_str().unwrap()).unwrap();
            assigned.save(theirs.to_str().unwrap()).unwrap();
            later
                .save(dir.path().join("later").to_str().unwrap())
                .unwrap();
            assert_eq!(read_checkpoint(&ours), values, "{case}, {mode:?}");
            // The same files (by what follows the prefix), with the same bytes.
            let files = |stem: &str| {
                let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|entry| entry.unwrap().path())
                    .filter_map(|path| {
                        let name = path.file_name()?.to_str()?;
                        let suffix = name.strip_prefix(stem)?.to_owned();
                        Some((suffix, std::fs::read(&path).unwrap()))
                    })
                    .collect();
                files.sort();
                files
            };
            let (ours, theirs) = (files("given."), files("assigned."));
            assert!(!ours.is_empty(), "{case}, {mode:?}: no files");
            assert!(ours == theirs, "{case}, {mode:?}: the checkpoints differ");
            assert!(
                files("later.") == theirs,
                "{case}, {mode:?}: the checkpoints differ"
            );
        }
    }
    // A spec that does not trace: its error, and no values asked for.
    let mut bad = crate::support::session::spec("trace/g1_single_cpu.json");
    bad.variables[0].dtype = "no_such_dtype".to_owned();
    let asked = AtomicUsize::new(0);
    let err = Session::from_spec_with_values_when_bound(&bad, SessionOptions::default(), |_| {
        asked.fetch_add(1, Ordering::Relaxed);
        None
    })
    .err()
    .expect("the spec does not trace");
    assert!(!err.is_about_values(), "{err}");
    assert_eq!(
        asked.load(Ordering::Relaxed),
        0,
        "asked for the values of no session"
    );
    // A graph's session, with values missing one key, then with a plan that does not compile.
    let spec = crate::support::session::spec("trace/g1_single_cpu.json");
    let trace = trace_flat_as(
        &spec.trackables().unwrap(),
        &spec.options().unwrap(),
        VariableOps::Create,
    )
    .unwrap();
    let full = Session::new(
        &trace.module,
        trace.saver.clone(),
        SessionOptions::default(),
    )
    .unwrap();
    let mut values = generated_values(&full, 1);
    let missing = values.keys().next().unwrap().clone();
    values.remove(&missing);
    let err = Session::new_with_values(
        &trace.module,
        trace.saver.clone(),
        SessionOptions::default(),
        values.clone(),
    )
    .err()
    .expect("a value is missing");
    assert!(err.is_about_values());
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        format!("no value for checkpoint key `{missing}`")
    );
    let mut unknown = trace.saver.clone();
    unknown.save_target = "no_such_save".to_owned();
    let err = Session::new_with_values(&trace.module, unknown, SessionOptions::default(), values)
        .err()
        .expect("the save plan does not compile");
    assert!(!err.is_about_values());
    assert!(
        matches!(err, SessionError::Compile { what: "save", .. }),
        "{err}"
    );
}
