//! Asynchronous object-based writes ([`saveplan::checkpoint::Checkpoint::with_async`],
//! FORMATS.md 13.14): TensorFlow's `obj/o6_options_async/async` bytes, values captured at call
//! time, writes in call order, reads waiting for the write in flight, failures surfacing at
//! `sync()` or the next save with nothing written at the prefix, and drop finishing the write.

use std::path::Path;

use saveplan::checkpoint::{Checkpoint, Object, build_object_graph};
use saveplan::exec::HostTensor;

use crate::support::files::files_under;
use crate::support::objects::{assert_same_bundle, fixture_values};
use crate::support::{ErrorForm, error_chain, fixture};

const A: &str = "model/a/.ATTRIBUTES/VARIABLE_VALUE";

/// `Checkpoint(model=m)`, m.a f32[2] = [1, 2], m.b int64 = 3 (o6's tree and first values).
fn o6_checkpoint() -> Checkpoint {
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let values = fixture_values(&fixture("obj/o6_options_async/async/w"));
    Checkpoint::new(graph, values).unwrap().with_async(true)
}

fn a_value(x: [f32; 2]) -> HostTensor {
    HostTensor::from_f32s(vec![2], &x).unwrap()
}

fn prefix(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

/// `o6/async`: write `w`, save `s` twice (a = [5, 6] for the second), a = [7, 8] right after
/// the second save, `sync()`: the files are TensorFlow's, the async `write` with
/// `save_counter` = 0 and `s-2` with a = [5, 6].
#[test]
fn o6_async_bytes_and_capture_at_call_time() {
    let fixtures = fixture("obj/o6_options_async/async");
    let dir = tempfile::tempdir().unwrap();
    let mut ckpt = o6_checkpoint();
    assert!(ckpt.is_async());
    assert_eq!(ckpt.save_counter(), Some(0));
    let at = |name: &str| prefix(dir.path(), name);
    assert_eq!(ckpt.write(&at("w")).unwrap(), at("w"));
    assert_eq!(ckpt.save(&at("s")).unwrap(), at("s-1"));
    ckpt.set_value(A, a_value([5.0, 6.0])).unwrap();
    assert_eq!(ckpt.save(&at("s")).unwrap(), at("s-2"));
    ckpt.set_value(A, a_value([7.0, 8.0])).unwrap();
    ckpt.sync().unwrap();
    for name in ["w", "s-1", "s-2"] {
        assert_same_bundle(&dir.path().join(name), &fixtures.join(name));
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("checkpoint")).unwrap(),
        std::fs::read_to_string(fixtures.join("checkpoint")).unwrap()
    );
    // Nothing else: no lock, journal or temporary file is left.
    assert_eq!(
        files_under(dir.path()),
        [
            "checkpoint",
            "s-1.data-00000-of-00001",
            "s-1.index",
            "s-2.data-00000-of-00001",
            "s-2.index",
            "w.data-00000-of-00001",
            "w.index"
        ]
    );
}

/// Two saves in a row without `sync()` are written in call order: the state file names the
/// second, and a `read` of it right away waits for it and reads its values.
#[test]
fn saves_are_ordered_and_reads_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut ckpt = o6_checkpoint();
    let base = prefix(dir.path(), "s");
    ckpt.save(&base).unwrap();
    ckpt.set_value(A, a_value([5.0, 6.0])).unwrap();
    let second = ckpt.save(&base).unwrap();
    ckpt.set_value(A, a_value([0.0, 0.0])).unwrap();
    let status = ckpt.read(&second).unwrap();
    status.assert_consumed().unwrap();
    assert_eq!(ckpt.values()[A], a_value([5.0, 6.0]));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("checkpoint")).unwrap(),
        "model_checkpoint_path: \"s-2\"\nall_model_checkpoint_paths: \"s-2\"\n"
    );
    assert!(dir.path().join("s-1.index").exists());
}

/// A checkpoint dropped with a write in flight finishes it.
#[test]
fn drop_finishes_the_write_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let mut ckpt = o6_checkpoint();
    let written = ckpt.save(&prefix(dir.path(), "s")).unwrap();
    drop(ckpt);
    assert_same_bundle(
        Path::new(&written),
        &fixture("obj/o6_options_async/async/s-1"),
    );
    assert!(dir.path().join("checkpoint").exists());
}

/// A directory where the data file goes makes the background write fail: `write` returns, the
/// error comes at `sync()` (once), and nothing of the checkpoint is at its prefix.
#[test]
fn a_failed_write_surfaces_at_sync_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = o6_checkpoint();
    std::fs::create_dir(dir.path().join("w.data-00000-of-00001")).unwrap();
    let at = prefix(dir.path(), "w");
    assert_eq!(ckpt.write(&at).unwrap(), at);
    let err = ckpt.sync().unwrap_err();
    assert_eq!(
        error_chain(&err, ErrorForm::OneLine),
        format!(
            "writing checkpoint {at} failed: {at}.data-00000-of-00001: replace data file: is a directory"
        )
    );
    ckpt.sync().unwrap();
    assert!(
        files_under(dir.path()).is_empty(),
        "{:?}",
        files_under(dir.path())
    );
    // The checkpoint still writes elsewhere.
    ckpt.write(&prefix(dir.path(), "ok")).unwrap();
    ckpt.sync().unwrap();
    assert!(dir.path().join("ok.index").exists());
}

/// Without `sync()`, the failure comes at the next save, which then does not save (the counter
/// does not move); the save after it works.
#[test]
fn a_failed_write_surfaces_at_the_next_save() {
    let dir = tempfile::tempdir().unwrap();
    let mut ckpt = o6_checkpoint();
    std::fs::create_dir(dir.path().join("s-1.data-00000-of-00001")).unwrap();
    let base = prefix(dir.path(), "s");
    assert_eq!(ckpt.save(&base).unwrap(), format!("{base}-1"));
    let err = ckpt.save(&base).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("writing checkpoint {base}-1 failed")),
        "{err}"
    );
    assert_eq!(ckpt.save_counter(), Some(1));
    assert!(!dir.path().join("s-1.index").exists());
    assert!(!dir.path().join("checkpoint").exists());
    assert_eq!(ckpt.save(&base).unwrap(), format!("{base}-2"));
    ckpt.sync().unwrap();
    assert!(dir.path().join("s-2.index").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("checkpoint")).unwrap(),
        "model_checkpoint_path: \"s-2\"\nall_model_checkpoint_paths: \"s-2\"\n"
    );
}
