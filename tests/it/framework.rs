//! A framework's own types checkpointed through [`saveplan::checkpoint::Saveable`]: written
//! byte for byte as the object-based write path writes the same tree (an [`ObjectSpec`] of
//! the same paths, whose checkpoints the `objects_*` suites hold against TensorFlow's),
//! restored by object into a fresh instance, and read back by key, object path or full name
//! with the checkpoint's dtypes and shapes.

use std::path::Path;

use saveplan::checkpoint::{ObjectSpec, resolve_name};
use saveplan::prelude::*;

/// The model of `examples/framework/`, a crate of its own: layers 4 → 3 → 1 and a step.
#[path = "../../examples/framework/src/model.rs"]
mod model;

use model::{Dense, Model};

/// The example's model filled from `fill`, at `step`.
fn model(fill: f32, step: i64) -> Model {
    let mut model = Model::new(fill).unwrap();
    model.step.value = HostTensor::scalar(step);
    model
}

/// The object spec of the same tree: the checkpoint `tf.train.Checkpoint(layers=[…],
/// step=tf.Variable(…, name="step"))` writes.
const SPEC: &str = r#"{"objects": [
    {"path": ["layers", "0", "kernel"], "dtype": "float32", "shape": [4, 3]},
    {"path": ["layers", "0", "bias"], "dtype": "float32", "shape": [3]},
    {"path": ["layers", "1", "kernel"], "dtype": "float32", "shape": [3, 1]},
    {"path": ["layers", "1", "bias"], "dtype": "float32", "shape": [1]},
    {"path": ["step"], "dtype": "int64", "shape": [], "name": "step"}
]}"#;

fn prefix(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

fn files(prefix: &str) -> Vec<(String, Vec<u8>)> {
    [".index", ".data-00000-of-00001"]
        .into_iter()
        .map(|suffix| {
            let bytes = std::fs::read(format!("{prefix}{suffix}")).unwrap();
            (suffix.to_owned(), bytes)
        })
        .collect()
}

#[test]
fn a_framework_struct_writes_what_the_object_spec_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ours = model(1.0, 42);
    let written = save_object(&ours, &prefix(dir.path(), "framework")).unwrap();

    let spec = ObjectSpec::parse(SPEC).unwrap();
    let values = read_all(&written).unwrap();
    let reference = prefix(dir.path(), "spec");
    spec.checkpoint(values).unwrap().write(&reference).unwrap();
    assert_eq!(files(&written), files(&reference));
    // The keys are the object paths TensorFlow gives them.
    assert_eq!(
        read_all(&written).unwrap().keys().collect::<Vec<_>>(),
        [
            "layers/0/bias/.ATTRIBUTES/VARIABLE_VALUE",
            "layers/0/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            "layers/1/bias/.ATTRIBUTES/VARIABLE_VALUE",
            "layers/1/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            "step/.ATTRIBUTES/VARIABLE_VALUE",
        ]
    );
}

#[test]
fn a_fresh_instance_restores_every_value_by_object() {
    let dir = tempfile::tempdir().unwrap();
    let saved = model(1.0, 42);
    let written = save_object(&saved, &prefix(dir.path(), "ckpt")).unwrap();
    let mut fresh = model(0.0, 0);
    assert_ne!(fresh, saved);
    let status = restore_object(&mut fresh, &written).unwrap();
    status.assert_consumed().unwrap();
    assert_eq!(fresh, saved);
    assert_eq!(
        fresh.layers[1].kernel.to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0]
    );
}

#[test]
fn a_mismatched_shape_restores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let written = save_object(&model(1.0, 42), &prefix(dir.path(), "ckpt")).unwrap();
    let mut other = model(0.0, 0);
    other.layers[0] = Dense::new(4, 2, 0.0).unwrap();
    let before = other.clone();
    let err = restore_object(&mut other, &written).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`(root).layers.0.kernel`: received incompatible tensor with shape (4, 3) when attempting to restore variable with shape (4, 2)"
    );
    assert_eq!(other, before);
}

/// An object that has more than the checkpoint keeps its own values, and the status says so.
#[test]
fn objects_missing_from_the_checkpoint_keep_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut one_layer = model(1.0, 7);
    one_layer.layers.truncate(1);
    let written = save_object(&one_layer, &prefix(dir.path(), "ckpt")).unwrap();
    let mut two_layers = model(0.0, 0);
    let status = restore_object(&mut two_layers, &written).unwrap();
    assert!(status.assert_existing_objects_matched().is_err());
    assert_eq!(two_layers.layers[0], one_layer.layers[0]);
    assert_eq!(two_layers.layers[1], model(0.0, 0).layers[1]);
    assert_eq!(two_layers.step, one_layer.step);
}

/// A training loop: the manager's checkpoint takes the struct's values before each save
/// ([`Checkpoint::update`]) and keeps the newest one.
#[test]
fn a_checkpoint_keeps_training_through_the_manager() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = model(1.0, 0);
    let mut manager = CheckpointManager::new(
        Checkpoint::of(&state).unwrap(),
        dir.path(),
        ManagerOptions::new(Some(1)),
    )
    .unwrap();
    for step in 1..=2i64 {
        state.step.value = HostTensor::scalar(step);
        manager.checkpoint_mut().update(&state).unwrap();
        manager.save(None, false).unwrap();
    }
    let latest = manager.latest_checkpoint().unwrap();
    assert_eq!(manager.checkpoints(), std::slice::from_ref(&latest));
    assert!(latest.to_string_lossy().ends_with("ckpt-2"));
    let mut fresh = model(0.0, 0);
    let mut restoring = Checkpoint::of(&fresh).unwrap();
    let status = restoring.restore(latest.to_str()).unwrap();
    status.assert_consumed().unwrap();
    restoring.assign_to(&mut fresh).unwrap();
    assert_eq!(fresh, state);
    assert_eq!(restoring.save_counter(), Some(2));
}

#[test]
fn values_read_by_key_object_path_or_full_name() {
    let dir = tempfile::tempdir().unwrap();
    let written = save_object(&model(1.0, 42), &prefix(dir.path(), "ckpt")).unwrap();
    let by_key = read_value(&written, "layers/0/kernel/.ATTRIBUTES/VARIABLE_VALUE").unwrap();
    let by_path = read_value(&written, "layers/0/kernel").unwrap();
    let by_attribute = read_value(&written, "layers/0/kernel/VARIABLE_VALUE").unwrap();
    assert_eq!(by_key, by_path);
    assert_eq!(by_key, by_attribute);
    assert_eq!(by_key.dtype(), DType::Float);
    assert_eq!(by_key.shape(), [4, 3]);
    assert_eq!(
        read_value(&written, "step")
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        [42]
    );
    // Every unnamed variable is `Variable`: the full name alone does not tell them apart.
    let err = read_value(&written, "Variable").unwrap_err();
    assert!(
        matches!(&err, CheckpointError::AmbiguousName { candidates, .. } if candidates.len() == 4)
    );
    assert_eq!(
        err.to_string(),
        "`Variable` names 4 values: layers/0/bias/.ATTRIBUTES/VARIABLE_VALUE, \
         layers/0/kernel/.ATTRIBUTES/VARIABLE_VALUE, layers/1/bias/.ATTRIBUTES/VARIABLE_VALUE, \
         layers/1/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    );
    let missing = read_value(&written, "layers/2/kernel").unwrap_err();
    assert!(
        matches!(missing, CheckpointError::NoSuchValue { .. }),
        "{missing}"
    );
    // The object graph is no value.
    let reader = saveplan::bundle::BundleReader::open(&written).unwrap();
    assert!(resolve_name(&reader, "_CHECKPOINTABLE_OBJECT_GRAPH").is_err());
    assert!(matches!(
        read_value(&prefix(dir.path(), "absent"), "step"),
        Err(CheckpointError::NotFound { .. })
    ));
}

/// A `restore` asking for what `save` did not list, and a child that is its own ancestor,
/// are errors naming the object.
#[test]
fn inconsistent_objects_are_errors() {
    struct Asks(HostTensor);
    impl Saveable for Asks {
        fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
            node.tensor("value", self.0.clone());
        }
        fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
            self.0 = node.tensor("other")?;
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut asks = vec![Asks(HostTensor::scalar(1.5f32))];
    let written = save_object(&asks, &prefix(dir.path(), "ckpt")).unwrap();
    assert_eq!(
        restore_object(&mut asks, &written).unwrap_err().to_string(),
        "object `(root).0` saved no child or attribute named `other`"
    );

    struct Link<'a>(std::cell::OnceCell<&'a Link<'a>>);
    impl Saveable for Link<'_> {
        fn save<'b>(&'b self, node: &mut SaveNode<'b>) {
            node.child("me", self);
            if let Some(next) = self.0.get() {
                node.child("next", *next);
            }
        }
        fn restore(&mut self, _: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
            Ok(())
        }
    }
    // An object listing itself is one node with an edge to itself, as `root=` makes it.
    let alone = Link(std::cell::OnceCell::new());
    let graph = Checkpoint::of(&alone).unwrap().graph().clone();
    assert_eq!(graph.nodes().len(), 1);
    assert_eq!(graph.nodes()[0].children[0].node_id.0, 0);
    let (a, b) = (Link(Default::default()), Link(Default::default()));
    assert!(a.0.set(&b).is_ok() && b.0.set(&a).is_ok());
    let err = Checkpoint::of(&a).map(drop).unwrap_err();
    assert_eq!(
        err.to_string(),
        "object `(root).next` lists `next`, one of the objects it is reached through, as a child"
    );
}

/// The root's children are `tf.train.Checkpoint`'s keyword arguments, which it sorts; deeper
/// objects keep the order they list.
#[test]
fn the_roots_children_are_sorted_as_keyword_arguments() {
    struct Pair(HostTensor, Vec<HostTensor>);
    impl Saveable for Pair {
        fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
            node.child("zeta", &self.1);
            node.child("alpha", &self.0);
        }
        fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
            node.child("zeta", &mut self.1)?;
            node.child("alpha", &mut self.0)
        }
    }
    let items: Vec<HostTensor> = (0..11).map(HostTensor::scalar).collect();
    let pair = Pair(HostTensor::scalar(1.5f32), items);
    let checkpoint = Checkpoint::of(&pair).unwrap();
    let names = |node: usize| -> Vec<String> {
        let children = &checkpoint.graph().nodes()[node].children;
        children
            .iter()
            .map(|child| child.local_name.clone())
            .collect()
    };
    assert_eq!(names(0), ["alpha", "zeta"]);
    let list = checkpoint.graph().nodes()[0].children[1].node_id.index();
    assert_eq!(names(list)[9..], ["9", "10"]);
}

/// A restored value is a view into the data file: after a one-byte tensor, a float32 tensor
/// starts at an odd offset, so it cannot be borrowed as `&[f32]` there, and `to_vec` copies it.
/// (Elsewhere than on Unix restores copy, into aligned buffers.)
#[cfg(unix)]
#[test]
fn a_misaligned_view_is_refused_and_copied_instead() {
    let dir = tempfile::tempdir().unwrap();
    let values = vec![
        HostTensor::scalar(7u8),
        HostTensor::from_slice(vec![3], &[1.5f32, -2.0, 4.0]).unwrap(),
    ];
    let written = save_object(&values, &prefix(dir.path(), "ckpt")).unwrap();
    let floats = read_value(&written, "1").unwrap();
    assert!(floats.is_mapped());
    let err = floats.as_slice::<f32>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot view the elements of a float32 tensor in place: its bytes are not aligned for the element type"
    );
    assert_eq!(floats.to_vec::<f32>().unwrap(), [1.5, -2.0, 4.0]);
    let byte = read_value(&written, "0").unwrap();
    assert_eq!(byte.as_slice::<u8>().unwrap(), [7]);
}
