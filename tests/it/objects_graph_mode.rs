//! `tf.train.Checkpoint.write`/`read().run_restore_ops()` in TF1 graph mode
//! ([`Checkpoint::graph_mode`], FORMATS.md 13.6) against `obj/o9_write_graphs`: the traced
//! graph equals TensorFlow's `graph_mode.graph.pbtxt` node for node (canonical text of both
//! through the importer), and running it on either backend writes `graph/ckpt` byte for byte
//! and restores the values.

use std::path::Path;

use saveplan::checkpoint::{Checkpoint, CheckpointError, Object, build_object_graph};
use saveplan::exec::HostTensor;
use saveplan::export::{Loaded, read_graph_file};

use crate::support::exec::{backends, fixture_module};
use crate::support::objects::{assert_same_bundle, fixture_values};
use crate::support::{ErrorForm, error_chain, fixture, manifest_path, settings};

const A: &str = "model/a/.ATTRIBUTES/VARIABLE_VALUE";
const B: &str = "model/b/.ATTRIBUTES/VARIABLE_VALUE";
const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";

/// The `o9` checkpoint: `model.a` f32[2] on CPU:0, `model.b` int64 on CPU:1, both asking for
/// the name `Variable`, placed on fully qualified devices as the graph-mode case places them.
fn o9_checkpoint() -> Checkpoint {
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let values = fixture_values(&fixture("obj/o9_write_graphs/graph/ckpt"));
    Checkpoint::new(graph, values)
        .unwrap()
        .with_device(A, CPU0)
        .with_device(B, CPU1)
}

#[test]
fn o9_graph_mode_graph_is_tensorflows() {
    let write = o9_checkpoint().graph_mode().unwrap();
    let theirs = fixture_module("obj/o9_write_graphs/graph_mode.graph.pbtxt");
    assert_eq!(write.module().to_string(), theirs.to_string());
    assert_eq!(write.init_op(), "init");
    assert_eq!(write.object_graph_tensor(), "Const:0");
    assert_eq!(write.prefix_tensor(), "Const_1:0");
    assert_eq!(write.save_tensor(), "Identity_4:0");
    assert_eq!(write.restore_prefix_tensor(), "Const_4:0");
    let restore_ops: Vec<(&str, &str)> = (write.restore_ops().iter())
        .map(|(key, op)| (key.as_str(), op.as_str()))
        .collect();
    assert_eq!(
        restore_ops,
        [(A, "AssignVariableOp"), (B, "AssignVariableOp_1")]
    );
    // Graph-mode name uniquification reaches the object graph: `b` is `Variable_1`.
    let names: Vec<&str> = (write.object_graph().nodes().iter())
        .flat_map(|node| &node.attributes)
        .map(|attribute| attribute.full_name.as_str())
        .collect();
    assert_eq!(names, ["Variable", "Variable_1"]);
    settings().bind(|| {
        insta::assert_snapshot!("objects_graph_mode_o9", write.module().to_string());
    });
}

#[test]
fn o9_graph_mode_write_and_read_on_every_backend() {
    let fixtures = fixture("obj/o9_write_graphs");
    let write = o9_checkpoint().graph_mode().unwrap();
    let expected = fixture_values(&fixtures.join("graph/ckpt"));
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let prefix_text = prefix.to_str().unwrap();
        let session = write.session(backend).unwrap();
        session.run_init().unwrap();
        assert_eq!(
            session.values().unwrap(),
            expected,
            "{backend:?}: after init"
        );
        assert_eq!(session.write(prefix_text).unwrap(), prefix_text);
        assert_same_bundle(&prefix, &fixtures.join("graph/ckpt"));
        // A fresh session restores what the first one wrote (and TensorFlow's files alike).
        for source in [prefix.as_path(), &fixtures.join("graph/ckpt")] {
            let fresh = write.session(backend).unwrap();
            fresh.run_restore_ops(source.to_str().unwrap()).unwrap();
            assert_eq!(
                fresh.values().unwrap(),
                expected,
                "{backend:?}: {}",
                source.display()
            );
        }
    }
}

#[test]
fn graph_mode_write_before_init_fails_and_writes_nothing() {
    let write = o9_checkpoint().graph_mode().unwrap();
    let session = write.session(Default::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let err = session.write(prefix.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, CheckpointError::Write { .. }), "{err:?}");
    assert!(!Path::new(&format!("{}.index", prefix.display())).exists());
    let chain = error_chain(&err, ErrorForm::OneLine);
    assert!(chain.contains("running `write`"), "{chain}");
}

#[test]
fn graph_mode_rejects_values_it_cannot_write_as_initial_values() {
    let graph = build_object_graph(&Object::new().child("v", &Object::variable("v"))).unwrap();
    let half = HostTensor::from_bytes(saveplan_ir::DType::Half, vec![], vec![0, 0]).unwrap();
    let values = [("v/.ATTRIBUTES/VARIABLE_VALUE".to_owned(), half)].into();
    let err = Checkpoint::new(graph, values)
        .unwrap()
        .graph_mode()
        .unwrap_err();
    let chain = error_chain(&err, ErrorForm::OneLine);
    assert_eq!(
        chain,
        "TF1 graph-mode checkpoint: tracing failed: `v/.ATTRIBUTES/VARIABLE_VALUE`: float16 values cannot be written as initial values"
    );
}

/// Unplaced variables (no device) share the object graph's task: one shard. TensorFlow's
/// graph and files for the same case (`tests/fixtures/saveplan/graph_mode_unplaced`, from
/// `generators/gen_graph_mode_unplaced.py`) are matched node for node and byte for byte.
#[test]
fn graph_mode_unplaced_variables_are_tensorflows() {
    let theirs = manifest_path("tests/fixtures/saveplan/graph_mode_unplaced");
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let values = fixture_values(&fixture("obj/o9_write_graphs/graph/ckpt"));
    let write = Checkpoint::new(graph, values.clone())
        .unwrap()
        .graph_mode()
        .unwrap();
    let their_graph = match read_graph_file(&theirs.join("graph.pbtxt")).unwrap() {
        Loaded::Graph(module) => module,
        _ => panic!("graph.pbtxt is a GraphDef"),
    };
    assert_eq!(write.module().to_string(), their_graph.to_string());
    for backend in backends() {
        let session = write.session(backend).unwrap();
        session.run_init().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        session.write(prefix.to_str().unwrap()).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["ckpt.data-00000-of-00001", "ckpt.index"]);
        assert_same_bundle(&prefix, &theirs.join("ckpt"));
        let fresh = write.session(backend).unwrap();
        fresh.run_restore_ops(prefix.to_str().unwrap()).unwrap();
        assert_eq!(fresh.values().unwrap(), values);
    }
}
