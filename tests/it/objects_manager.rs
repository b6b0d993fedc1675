//! [`saveplan::checkpoint::CheckpointManager`] against TensorFlow's `obj/o3_checkpoint_manager`
//! fixture (FORMATS.md 13.8, 13.9): each scenario replayed with TensorFlow's fake clock gives,
//! after every step, the same returned path, managed list, latest checkpoint, directory
//! listing (names and sizes) and `checkpoint` text, and the bundles left are TensorFlow's
//! bytes. Every scenario runs with synchronous and asynchronous writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use saveplan::checkpoint::{
    Checkpoint, CheckpointManager, ManagerOptions, Object, build_object_graph,
};
use saveplan::exec::HostTensor;
use serde_json::Value;

use crate::support::objects::{COUNTER_KEY, assert_same_bundle};
use crate::support::{fixture, fixture_json};

const V: &str = "v/.ATTRIBUTES/VARIABLE_VALUE";
const STEP: &str = "step/.ATTRIBUTES/VARIABLE_VALUE";

/// TensorFlow's `FakeClock`: a time the test sets.
#[derive(Clone, Default)]
struct FakeClock(Arc<AtomicU64>);

impl FakeClock {
    fn set(&self, t: f64) {
        self.0.store(t.to_bits(), Ordering::SeqCst);
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::SeqCst))
    }

    fn options(&self, max_to_keep: Option<usize>) -> ManagerOptions {
        let clock = self.clone();
        ManagerOptions::new(max_to_keep).with_clock(move || clock.get())
    }
}

fn expected() -> Value {
    fixture_json("obj/o3_checkpoint_manager/expected.json")
}

fn fixtures(case: &str) -> PathBuf {
    fixture("obj/o3_checkpoint_manager").join(case)
}

fn f32_value(x: f32) -> HostTensor {
    HostTensor::from_f32s(vec![1], &[x]).unwrap()
}

fn i64_scalar(x: i64) -> HostTensor {
    HostTensor::from_bytes(
        saveplan_ir::DType::Int64,
        Vec::new(),
        x.to_le_bytes().to_vec(),
    )
    .unwrap()
}

/// `tf.train.Checkpoint(v=v)`, v f32[1] = 0, written synchronously or not.
fn v_checkpoint(asynchronous: bool) -> Checkpoint {
    let graph =
        build_object_graph(&Object::new().child("v", &Object::variable("Variable"))).unwrap();
    Checkpoint::new(graph, BTreeMap::from([(V.to_owned(), f32_value(0.0))]))
        .unwrap()
        .with_async(asynchronous)
}

/// The manager after its write finished.
fn synced(manager: &CheckpointManager) -> &CheckpointManager {
    manager.sync().unwrap();
    manager
}

/// Names relative to `dir`.
fn names(dir: &Path, paths: impl IntoIterator<Item = PathBuf>) -> Vec<String> {
    paths
        .into_iter()
        .map(|path| path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned())
        .collect()
}

/// Asserts that `dir` holds the files (names and sizes) and the `checkpoint` text `expected`
/// records (`{"files": {...}, "checkpoint_file": "..."}`).
fn assert_directory(dir: &Path, expected: &Value, context: &str) {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        files.insert(name, Value::from(entry.metadata().unwrap().len()));
    }
    let files: serde_json::Map<String, Value> = files.into_iter().collect();
    assert_eq!(Value::Object(files), expected["files"], "{context}: files");
    assert_eq!(
        std::fs::read_to_string(dir.join("checkpoint")).unwrap(),
        expected["checkpoint_file"].as_str().unwrap(),
        "{context}: checkpoint file"
    );
}

/// One recorded save of TensorFlow's manager: the path it returned, the managed checkpoints
/// after it, and the directory (files and `checkpoint` text).
fn assert_step(
    dir: &Path,
    returned: &Path,
    manager: &CheckpointManager,
    step: &Value,
    context: &str,
) {
    assert_eq!(
        names(dir, [returned.to_path_buf()]),
        [step["returned"].as_str().unwrap()],
        "{context}"
    );
    assert_eq!(
        Value::from(names(dir, manager.checkpoints())),
        step["manager_checkpoints"],
        "{context}"
    );
    assert_directory(dir, step, context);
}

fn replay_a_max_to_keep(asynchronous: bool) {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::default();
    clock.set(1_700_000_000.0);
    let options = clock.options(Some(2)).with_checkpoint_name("model");
    let mut manager =
        CheckpointManager::new(v_checkpoint(asynchronous), dir.path(), options).unwrap();
    for (i, step) in expected["a_max_to_keep"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        clock.set(step["clock"].as_f64().unwrap());
        manager
            .checkpoint_mut()
            .set_value(V, f32_value(i as f32 + 1.0))
            .unwrap();
        let returned = manager.save(None, true).unwrap().unwrap();
        let manager = synced(&manager);
        assert_step(
            dir.path(),
            &returned,
            manager,
            step,
            &format!("a_max_to_keep step {i}"),
        );
        assert_eq!(
            names(dir.path(), manager.latest_checkpoint()),
            [step["latest_checkpoint"].as_str().unwrap()]
        );
    }
    for kept in ["model-3", "model-4"] {
        assert_same_bundle(
            &dir.path().join(kept),
            &fixtures("a_max_to_keep").join(kept),
        );
    }
}

#[test]
fn a_max_to_keep() {
    replay_a_max_to_keep(false);
}

#[test]
fn a_max_to_keep_async() {
    replay_a_max_to_keep(true);
}

fn replay_b_keep_every_n_hours(asynchronous: bool) {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::default();
    let t0 = 1_700_000_000.0;
    clock.set(t0);
    let options = clock.options(Some(2)).with_keep_every_n_hours(1.0);
    let mut manager =
        CheckpointManager::new(v_checkpoint(asynchronous), dir.path(), options).unwrap();
    for (i, step) in expected["b_keep_every_n_hours"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        clock.set(t0 + step["clock_offset_s"].as_f64().unwrap());
        manager
            .checkpoint_mut()
            .set_value(V, f32_value(i as f32 + 1.0))
            .unwrap();
        let returned = manager.save(None, true).unwrap().unwrap();
        let manager = synced(&manager);
        let context = format!("b_keep_every_n_hours step {i}");
        assert_step(dir.path(), &returned, manager, step, &context);
    }
    for kept in ["ckpt-5", "ckpt-7", "ckpt-8"] {
        assert_same_bundle(
            &dir.path().join(kept),
            &fixtures("b_keep_every_n_hours").join(kept),
        );
    }
}

#[test]
fn b_keep_every_n_hours() {
    replay_b_keep_every_n_hours(false);
}

#[test]
fn b_keep_every_n_hours_async() {
    replay_b_keep_every_n_hours(true);
}

fn replay_c_interval(asynchronous: bool) {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::default();
    clock.set(1_700_000_000.0);
    let variable = Object::variable("Variable");
    let graph = build_object_graph(
        &Object::new()
            .child("step", &variable)
            .child("v", &Object::variable("Variable")),
    )
    .unwrap();
    let values = BTreeMap::from([
        (STEP.to_owned(), i64_scalar(0)),
        (V.to_owned(), f32_value(0.0)),
    ]);
    let checkpoint = Checkpoint::new(graph, values)
        .unwrap()
        .with_async(asynchronous);
    let options = clock.options(None).with_interval(STEP, 2);
    let mut manager = CheckpointManager::new(checkpoint, dir.path(), options).unwrap();
    for call in expected["c_interval"]["calls"].as_array().unwrap() {
        clock.set(clock.get() + 1.0);
        let step = call["step"].as_i64().unwrap();
        let checkpoint = manager.checkpoint_mut();
        checkpoint.set_value(STEP, i64_scalar(step)).unwrap();
        checkpoint.set_value(V, f32_value(step as f32)).unwrap();
        let kwargs = &call["kwargs"];
        let returned = manager
            .save(
                kwargs["checkpoint_number"].as_i64(),
                kwargs["check_interval"].as_bool().unwrap_or(true),
            )
            .unwrap();
        synced(&manager);
        let returned = returned.map(|path| names(dir.path(), [path]).remove(0));
        assert_eq!(
            Value::from(returned),
            call["returned"],
            "c_interval call {call}"
        );
        assert_eq!(
            manager.checkpoint().save_counter(),
            call["save_counter"].as_i64(),
            "c_interval call {call}"
        );
    }
    assert_directory(dir.path(), &expected["c_interval"]["final"], "c_interval");
    for kept in ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4", "ckpt-600"] {
        assert_same_bundle(&dir.path().join(kept), &fixtures("c_interval").join(kept));
    }
}

#[test]
fn c_interval() {
    replay_c_interval(false);
}

#[test]
fn c_interval_async() {
    replay_c_interval(true);
}

fn replay_d_recover(asynchronous: bool) {
    let expected = &expected()["d_recover"];
    let dir = tempfile::tempdir().unwrap();
    let clock = FakeClock::default();
    clock.set(1_700_000_000.0);
    let mut m1 = CheckpointManager::new(
        v_checkpoint(asynchronous),
        dir.path(),
        clock.options(Some(3)),
    )
    .unwrap();
    for i in 0..3 {
        clock.set(clock.get() + 10.0);
        m1.checkpoint_mut()
            .set_value(V, f32_value(i as f32 + 1.0))
            .unwrap();
        m1.save(None, true).unwrap();
        m1.sync().unwrap();
    }
    let checkpoint = m1.into_checkpoint();
    let unmanaged = dir.path().join("unmanaged");
    checkpoint.write(unmanaged.to_str().unwrap()).unwrap();
    checkpoint.sync().unwrap();
    assert_directory(dir.path(), &expected["after_m1"], "d_recover after m1");

    clock.set(clock.get() + 10.0);
    let mut m2 = CheckpointManager::new(checkpoint, dir.path(), clock.options(Some(1))).unwrap();
    assert_eq!(
        Value::from(names(dir.path(), m2.checkpoints())),
        expected["m2_recovered"]["manager_checkpoints"]
    );
    assert_eq!(
        names(dir.path(), m2.latest_checkpoint()),
        [expected["m2_recovered"]["latest_checkpoint"]
            .as_str()
            .unwrap()]
    );
    clock.set(clock.get() + 10.0);
    m2.checkpoint_mut().set_value(V, f32_value(4.0)).unwrap();
    let returned = m2.save(None, true).unwrap().unwrap();
    m2.sync().unwrap();
    assert_eq!(
        names(dir.path(), [returned]),
        [expected["m2_save_returned"].as_str().unwrap()]
    );
    assert_directory(dir.path(), &expected["after_m2_save"], "d_recover after m2");
    for kept in ["ckpt-4", "unmanaged"] {
        assert_same_bundle(&dir.path().join(kept), &fixtures("d_recover").join(kept));
    }

    // restore_or_initialize into a fresh checkpoint restores ckpt-4 and does not initialize.
    let mut m3 = CheckpointManager::new(
        v_checkpoint(asynchronous),
        dir.path(),
        clock.options(Some(1)),
    )
    .unwrap();
    let restored = m3
        .restore_or_initialize(|_| panic!("a latest checkpoint exists"))
        .unwrap();
    assert_eq!(
        names(dir.path(), restored),
        [expected["restore_or_initialize_returned"].as_str().unwrap()]
    );
    let value = m3.checkpoint().values()[V].bytes().unwrap().to_vec();
    let want = expected["restored_value"][0].as_f64().unwrap() as f32;
    assert_eq!(value, want.to_le_bytes());
    assert_eq!(
        m3.checkpoint().save_counter(),
        expected["restored_save_counter"].as_i64()
    );
}

#[test]
fn d_recover() {
    replay_d_recover(false);
}

#[test]
fn d_recover_async() {
    replay_d_recover(true);
}

#[test]
fn restore_or_initialize_without_a_checkpoint_initializes() {
    let dir = tempfile::tempdir().unwrap();
    let mut manager = CheckpointManager::new(
        v_checkpoint(false),
        dir.path(),
        ManagerOptions::new(Some(1)),
    )
    .unwrap();
    let restored = manager
        .restore_or_initialize(|checkpoint| checkpoint.set_value(V, f32_value(9.0)))
        .unwrap();
    assert_eq!(restored, None);
    assert_eq!(manager.checkpoint().values()[V], f32_value(9.0));
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn checkpoint_save_files_are_not_managed() {
    // `Checkpoint::save`'s state file has no timestamps: a manager takes its latest checkpoint
    // but manages (and deletes) none of them.
    let dir = tempfile::tempdir().unwrap();
    let mut checkpoint = v_checkpoint(false);
    let prefix = dir.path().join("ckpt");
    checkpoint.save(prefix.to_str().unwrap()).unwrap();
    checkpoint.save(prefix.to_str().unwrap()).unwrap();
    let mut manager =
        CheckpointManager::new(checkpoint, dir.path(), ManagerOptions::new(Some(1))).unwrap();
    assert!(manager.checkpoints().is_empty());
    assert_eq!(manager.latest_checkpoint(), Some(dir.path().join("ckpt-2")));
    manager.save(None, true).unwrap();
    manager.save(None, true).unwrap();
    assert_eq!(manager.checkpoints(), [dir.path().join("ckpt-4")]);
    assert!(dir.path().join("ckpt-1.index").exists());
    assert!(dir.path().join("ckpt-2.index").exists());
    assert!(!dir.path().join("ckpt-3.index").exists());
    assert!(!dir.path().join("ckpt-3.data-00000-of-00001").exists());
}

#[test]
fn errors_are_tensorflow_s() {
    let errors = &expected()["errors"];
    let dir = tempfile::tempdir().unwrap();
    let err = CheckpointManager::new(
        v_checkpoint(false),
        dir.path(),
        ManagerOptions::new(Some(0)),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), errors["max_to_keep_0"]["message"]);
    let mut options = ManagerOptions::new(Some(1));
    options.checkpoint_interval = Some(2);
    let err = CheckpointManager::new(v_checkpoint(false), dir.path(), options).unwrap_err();
    assert_eq!(
        err.to_string(),
        errors["interval_without_step_counter"]["message"]
    );
    // A step counter must be an integer scalar of the checkpoint.
    for key in [V, COUNTER_KEY] {
        let options = ManagerOptions::new(Some(1)).with_interval(key, 2);
        let err = CheckpointManager::new(v_checkpoint(false), dir.path(), options).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("step counter `{key}` is no int32 or int64 scalar value of the checkpoint")
        );
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}
