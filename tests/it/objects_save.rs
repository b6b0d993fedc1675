//! Writing object-based checkpoints ([`saveplan::checkpoint::Checkpoint`], FORMATS.md
//! 13.5–13.8) against TensorFlow's `obj/` fixtures: for the same tree and values, `write` and
//! `save` give the same `.index`, data file and `checkpoint` file bytes.

use std::collections::BTreeMap;
use std::path::Path;

use saveplan::bundle::BundleReader;
use saveplan::checkpoint::{
    Checkpoint, CheckpointError, NodeId, Object, ObjectError, ObjectGraph, ObjectSpec,
    SAVE_COUNTER, build_object_graph, read_object_graph,
};
use saveplan::exec::HostTensor;
use saveplan::trace::TraceOptions;

use crate::support::objects::{COUNTER_KEY, assert_same_bundle, fixture_values};
use crate::support::{fixture, saveplan};

/// A fixture's stored object graph without its `save_counter` node (the graph a
/// `Checkpoint` is made from).
fn without_save_counter(graph: ObjectGraph) -> ObjectGraph {
    let mut nodes = graph.into_nodes();
    let position = nodes[0]
        .children
        .iter()
        .position(|child| child.local_name == SAVE_COUNTER)
        .expect("the graph has a save counter");
    let id = nodes[0].children.remove(position).node_id;
    nodes.remove(id.index());
    let shift = |node: &mut NodeId| {
        if node.0 > id.0 {
            node.0 -= 1;
        }
    };
    for node in &mut nodes {
        node.children.iter_mut().for_each(|c| shift(&mut c.node_id));
        for slot in &mut node.slot_variables {
            shift(&mut slot.original_variable_node_id);
            shift(&mut slot.slot_variable_node_id);
        }
    }
    let mut graph = ObjectGraph::new(nodes).unwrap();
    graph.fill_has_values();
    graph
}

fn assert_same_state_file(ours: &Path, theirs: &Path) {
    assert_eq!(
        std::fs::read_to_string(ours.join("checkpoint")).unwrap(),
        std::fs::read_to_string(theirs.join("checkpoint")).unwrap()
    );
}

/// `o6/sync`: `Checkpoint(model=m)`, m.a f32[2], m.b int64: write, save twice, write after
/// saving (now with `save_counter`), built with the Rust tree API.
#[test]
fn o6_sync_write_save_write_after_save() {
    let fixtures = fixture("obj/o6_options_async/sync");
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let root = Object::new().child("model", &model);
    let graph = build_object_graph(&root).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();

    let mut ckpt = Checkpoint::new(graph, fixture_values(&fixtures.join("w"))).unwrap();
    assert_eq!(ckpt.write(&at("w")).unwrap(), at("w"));
    assert_same_bundle(Path::new(&at("w")), &fixtures.join("w"));

    assert_eq!(ckpt.save(&at("s")).unwrap(), at("s-1"));
    assert_eq!(ckpt.save_counter(), Some(1));
    assert_same_bundle(Path::new(&at("s-1")), &fixtures.join("s-1"));
    for (key, value) in fixture_values(&fixtures.join("s-2")) {
        ckpt.set_value(&key, value).unwrap();
    }
    assert_eq!(ckpt.save(&at("s")).unwrap(), at("s-2"));
    assert_same_bundle(Path::new(&at("s-2")), &fixtures.join("s-2"));
    assert_same_state_file(dir.path(), &fixtures);

    for (key, value) in fixture_values(&fixtures.join("w_after_save")) {
        ckpt.set_value(&key, value).unwrap();
    }
    ckpt.write(&at("w_after_save")).unwrap();
    assert_same_bundle(
        Path::new(&at("w_after_save")),
        &fixtures.join("w_after_save"),
    );
}

/// `o6/io_device`: `CheckpointOptions(experimental_io_device="CPU:1")` moves the save ops, not
/// the bytes: write, then two saves, give TensorFlow's files and state file.
#[test]
fn o6_io_device_gives_the_default_bytes() {
    let fixtures = fixture("obj/o6_options_async/io_device");
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let options = TraceOptions {
        io_device: Some("/job:localhost/replica:0/task:0/device:CPU:1".to_owned()),
        ..TraceOptions::default()
    };
    let mut ckpt = Checkpoint::new(graph, fixture_values(&fixtures.join("w")))
        .unwrap()
        .with_options(options);
    ckpt.write(&at("w")).unwrap();
    assert_same_bundle(Path::new(&at("w")), &fixtures.join("w"));
    for n in 1..=2 {
        for (key, value) in fixture_values(&fixtures.join(format!("s-{n}"))) {
            ckpt.set_value(&key, value).unwrap();
        }
        assert_eq!(ckpt.save(&at("s")).unwrap(), at(&format!("s-{n}")));
        assert_same_bundle(
            Path::new(&at(&format!("s-{n}"))),
            &fixtures.join(format!("s-{n}")),
        );
    }
    assert_same_state_file(dir.path(), &fixtures);
}

/// `o1/write`: the whole module tree (shared variables, escaped names, every dtype) with
/// `Checkpoint(root=r).write`.
#[test]
fn o1_write() {
    let theirs = fixture("obj/o1_module_tree/write/ckpt");
    let graph = read_object_graph(&BundleReader::open(&theirs).unwrap()).unwrap();
    let ckpt = Checkpoint::new(graph, fixture_values(&theirs)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A missing parent directory is created, as eager TensorFlow does.
    let ours = dir.path().join("sub/ckpt");
    ckpt.write(ours.to_str().unwrap()).unwrap();
    assert_same_bundle(&ours, &theirs);
}

/// `o1/save`: `Checkpoint(root=r, extra=v).save` twice (`save_counter` after `root`) and the
/// `checkpoint` file.
#[test]
fn o1_save_twice() {
    let fixtures = fixture("obj/o1_module_tree/save");
    let stored = read_object_graph(&BundleReader::open(fixtures.join("ckpt-1")).unwrap()).unwrap();
    let mut ckpt = Checkpoint::new(
        without_save_counter(stored.clone()),
        fixture_values(&fixtures.join("ckpt-1")),
    )
    .unwrap();
    ckpt.set_save_counter(Some(0));
    assert_eq!(ckpt.object_graph(), stored);
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    ckpt.save(prefix.to_str().unwrap()).unwrap();
    assert_same_bundle(&dir.path().join("ckpt-1"), &fixtures.join("ckpt-1"));
    for (key, value) in fixture_values(&fixtures.join("ckpt-2")) {
        ckpt.set_value(&key, value).unwrap();
    }
    ckpt.save(prefix.to_str().unwrap()).unwrap();
    assert_same_bundle(&dir.path().join("ckpt-2"), &fixtures.join("ckpt-2"));
    assert_same_state_file(dir.path(), &fixtures);
}

/// `o2/v1_adam`: slot variables (nodes after the breadth-first ones) and `save_counter`.
#[test]
fn o2_v1_adam_save() {
    let fixtures = fixture("obj/o2_optimizer/v1_adam");
    let stored = read_object_graph(&BundleReader::open(fixtures.join("ckpt-1")).unwrap()).unwrap();
    let mut ckpt = Checkpoint::new(
        without_save_counter(stored.clone()),
        fixture_values(&fixtures.join("ckpt-1")),
    )
    .unwrap();
    assert_eq!(ckpt.save_counter(), None);
    let dir = tempfile::tempdir().unwrap();
    ckpt.save(dir.path().join("ckpt").to_str().unwrap())
        .unwrap();
    assert_eq!(ckpt.object_graph(), stored);
    assert_same_bundle(&dir.path().join("ckpt-1"), &fixtures.join("ckpt-1"));
    assert_same_state_file(dir.path(), &fixtures);
}

/// Values must match the graph's attributes one to one; a root child named `save_counter`
/// is refused.
#[test]
fn checkpoint_values_match_attributes() {
    let root = Object::new().child("v", &Object::variable("Variable"));
    let graph = build_object_graph(&root).unwrap();
    let missing = Checkpoint::new(graph.clone(), BTreeMap::new()).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "no value for `v/.ATTRIBUTES/VARIABLE_VALUE`"
    );
    let one = HostTensor::from_f32s(vec![], &[1.0]).unwrap();
    let values = BTreeMap::from([
        ("v/.ATTRIBUTES/VARIABLE_VALUE".to_owned(), one.clone()),
        ("w".to_owned(), one.clone()),
    ]);
    let unknown = Checkpoint::new(graph, values).unwrap_err();
    assert!(
        matches!(unknown, CheckpointError::Object(ObjectError::UnknownValue { key }) if key == "w")
    );
    let taken = Object::new().child(SAVE_COUNTER, &Object::variable(SAVE_COUNTER));
    let values = BTreeMap::from([(COUNTER_KEY.to_owned(), one)]);
    let err = Checkpoint::new(build_object_graph(&taken).unwrap(), values).unwrap_err();
    assert!(matches!(err, CheckpointError::SaveCounterTaken));
}

/// An object spec's tree, values and slots give `o2/v1_adam`'s checkpoint byte for byte once
/// `save_counter` exists (entries listed out of order: the root's children are sorted, slot
/// names sorted).
#[test]
fn object_spec_rebuilds_o2_v1_adam() {
    let fixtures = fixture("obj/o2_optimizer/v1_adam");
    let text = std::fs::read_to_string(crate::support::root().join(SPEC_O2)).unwrap();
    assert!(ObjectSpec::is_object_spec(&text));
    let spec = ObjectSpec::parse(&text).unwrap();
    let mut ckpt = spec
        .checkpoint(fixture_values(&fixtures.join("ckpt-1")))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    ckpt.save(dir.path().join("ckpt").to_str().unwrap())
        .unwrap();
    assert_same_bundle(&dir.path().join("ckpt-1"), &fixtures.join("ckpt-1"));
}

/// An object spec is a JSON object with a top-level `objects` key, however its name is spelt
/// (JSON escapes included) and whatever its value; a plain spec, another JSON value or text
/// that is not JSON is not one.
#[test]
fn an_object_spec_is_told_by_its_top_level_objects_key() {
    let plain = r#"{"variables": [{"checkpoint_key": "objects", "dtype": "float32", "shape": [],
        "init": {"objects": 1}}], "options": null}"#;
    let cases = [
        (r#"{"objects": [], "variables": []}"#, true),
        (r#"{"options": {}, "objects": null}"#, true),
        (r#"{"\u006fbjects": []}"#, true),
        (
            r#"{"\u006f\u0062\u006a\u0065\u0063\u0074\u0073": []}"#,
            true,
        ),
        (r#"{"ob\u006aects": [], "variables": []}"#, true),
        (
            r#"{"variables": [], "description": "a \"quoted\" word"}"#,
            false,
        ),
        (r#"{"variables": [], "objectsx": []}"#, false),
        (plain, false),
        (r#"[{"objects": []}]"#, false),
        (r#""objects""#, false),
        (r#"{"objects": [}"#, false),
        ("", false),
    ];
    for (text, is_object) in cases {
        assert_eq!(ObjectSpec::is_object_spec(text), is_object, "{text}");
    }
}

const SPEC_O2: &str = "tests/inputs/objects/o2_v1_adam.json";
const SPEC_O6: &str = "tests/inputs/objects/o6_sync.json";

/// `saveplan save OBJSPEC` writes `Checkpoint(model=m).write(P)`'s bytes (`o6/sync/w`), values
/// from a checkpoint (whose object graph is not a value).
#[test]
fn cli_save_object_spec_o6() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("w");
    let values = fixture("obj/o6_options_async/sync/w");
    let out = saveplan(&[
        "save",
        SPEC_O6,
        "--values",
        values.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same_bundle(&prefix, &values);
    assert!(!dir.path().join("checkpoint").exists());
}

/// Object spec errors are one line naming the spec.
#[test]
fn cli_save_object_spec_errors() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("w");
    // o1's values do not fit o6's tree.
    let values = fixture("obj/o1_module_tree/write/ckpt");
    let out = saveplan(&[
        "save",
        SPEC_O6,
        "--values",
        values.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(SPEC_O6), "{stderr}");
    let spec = ObjectSpec::parse(
        r#"{"objects": [{"path": ["m", "v"], "dtype": "float32", "shape": []},
                        {"path": ["m", "v", "w"], "dtype": "float32", "shape": []}]}"#,
    )
    .unwrap();
    assert_eq!(
        spec.object_graph().unwrap_err().to_string(),
        "entry 1: `(root).m.v` is already a variable"
    );
}

/// `o9`: m.a on CPU:0, m.b on CPU:1 (one task). Eager `write` gives one shard (`eager/`);
/// `write` traced in a `tf.function` puts the object graph on the bare `/device:CPU:0`, a task
/// of its own, and gives two shards (`fn/`), byte for byte.
#[test]
fn o9_eager_and_traced_write() {
    let fixtures = fixture("obj/o9_write_graphs");
    let model = Object::new()
        .child("a", &Object::variable("Variable"))
        .child("b", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let ckpt = Checkpoint::new(graph, fixture_values(&fixtures.join("eager/ckpt")))
        .unwrap()
        .with_device("model/a/.ATTRIBUTES/VARIABLE_VALUE", "/device:CPU:0")
        .with_device("model/b/.ATTRIBUTES/VARIABLE_VALUE", "/device:CPU:1");
    let dir = tempfile::tempdir().unwrap();
    let eager = dir.path().join("eager/ckpt");
    ckpt.write(eager.to_str().unwrap()).unwrap();
    assert_same_bundle(&eager, &fixtures.join("eager/ckpt"));
    std::fs::create_dir(dir.path().join("fn")).unwrap();
    let traced = dir.path().join("fn/ckpt");
    ckpt.write_traced(traced.to_str().unwrap()).unwrap();
    assert_same_bundle(&traced, &fixtures.join("fn/ckpt"));
}

/// A values checkpoint made by `save()` holds `save_counter`; an object spec without a
/// `["save_counter"]` entry writes what `write()` writes, without it.
#[test]
fn cli_save_object_spec_leaves_out_a_values_counter() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let values = fixture("obj/o2_optimizer/v1_adam/ckpt-1");
    let out = saveplan(&[
        "save",
        "tests/inputs/objects/o2_v1_adam.json",
        "--values",
        values.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reader = BundleReader::open(&prefix).unwrap();
    assert!(reader.entry(COUNTER_KEY).is_none());
    // `fixture_values` leaves out the counter and the object graph.
    assert_eq!(fixture_values(&prefix), fixture_values(&values));
    let graph = read_object_graph(&reader).unwrap();
    let stored = read_object_graph(&BundleReader::open(&values).unwrap()).unwrap();
    assert_eq!(graph, without_save_counter(stored));
}
