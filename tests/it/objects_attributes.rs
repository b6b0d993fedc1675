//! Non-variable attributes (FORMATS.md 13.15) against TensorFlow's
//! `obj/o7_non_variable_attributes`: named tensors of a `_serialize_to_tensors` object, a
//! `MutableHashTable` whose one attribute is a prefix of two bundle keys, a `PythonState`
//! string and a tf.data iterator's DT_VARIANT state, written byte for byte as TensorFlow
//! writes them and read back with TensorFlow's assertion outcomes; and `obj/o8_mirrored`
//! (MirroredStrategy variables) read into plain variables.

use std::collections::BTreeMap;

use saveplan::bundle::{BundleReader, Values};
use saveplan::checkpoint::{Assertion, Checkpoint, Object, ValueStatus, build_object_graph};
use saveplan::exec::HostTensor;
use saveplan_ir::DType;
use serde_json::Value;

use crate::support::files::file_bytes_under;
use crate::support::objects::assert_status_checks;
use crate::support::{fixture, fixture_json};

const O7: &str = "obj/o7_non_variable_attributes";

fn o7_prefix() -> String {
    fixture(&format!("{O7}/ckpt"))
        .to_string_lossy()
        .into_owned()
}

fn expected(name: &str) -> Value {
    fixture_json(&format!("{O7}/expected.json"))[name].clone()
}

/// Every tensor of TensorFlow's bundle, by key, as host tensors.
fn fixture_values() -> BTreeMap<String, HostTensor> {
    let reader = BundleReader::open(o7_prefix()).unwrap();
    reader
        .entries()
        .iter()
        .filter(|entry| entry.key != "_CHECKPOINTABLE_OBJECT_GRAPH")
        .map(|entry| {
            let tensor = reader.read(&entry.key).unwrap();
            let shape: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
            let value = match tensor.values {
                Values::Bytes(bytes) => HostTensor::from_bytes(tensor.dtype, shape, bytes),
                Values::Strings(e) if tensor.dtype == DType::Variant => {
                    HostTensor::from_variants(shape, e)
                }
                Values::Strings(strings) => HostTensor::from_strings(shape, strings),
            };
            (entry.key.clone(), value.unwrap())
        })
        .collect()
}

/// `build()` of the case as objects: `Checkpoint(root=root)` with root's children custom,
/// table, pystate, it, gen and the `root` self edge; `custom` left out when `with_custom` is
/// false (`del r2.custom`).
fn o7_root(with_custom: bool) -> Object {
    // `_serialize_to_tensors` names are stored escaped once.
    let custom = Object::new()
        .attribute("first", "")
        .attribute("with.Sslash..dot", "");
    let table = Object::new().attribute("table", "");
    let pystate = Object::new().attribute("py_state", "");
    let iterator = Object::new().attribute("ITERATOR", "");
    let generator = Object::new().child("_state_var", &Object::variable("StateVar"));
    let mut root = Object::new();
    if with_custom {
        root = root.child("custom", &custom);
    }
    root.child("table", &table)
        .child("pystate", &pystate)
        .child("it", &iterator)
        .child("gen", &generator)
        .child_self("root")
}

/// A checkpoint of `o7_root(with_custom)` whose values are `fill` (by key) or zeros.
fn o7_checkpoint(with_custom: bool, fill: bool) -> Checkpoint {
    let graph = build_object_graph(&o7_root(with_custom)).unwrap();
    let values = fixture_values()
        .into_iter()
        .filter(|(key, _)| with_custom || !key.starts_with("custom/"))
        .map(|(key, value)| {
            if fill {
                return (key, value);
            }
            let shape = value.shape().to_vec();
            let n = value.num_elements();
            let zero = match value.dtype() {
                DType::String => HostTensor::from_strings(shape, vec![Vec::new(); n]),
                DType::Variant => HostTensor::from_variants(shape, vec![Vec::new(); n]),
                dtype => {
                    HostTensor::from_bytes(dtype, shape, vec![0; value.bytes().unwrap().len()])
                }
            };
            (key, zero.unwrap())
        })
        .collect();
    Checkpoint::new(graph, values).unwrap()
}

#[test]
fn writes_o7_byte_for_byte() {
    let checkpoint = o7_checkpoint(true, true);
    // The legacy table's one attribute owns two values; its key is their common prefix.
    let table = &checkpoint
        .graph()
        .node(saveplan_ir::object_graph::NodeId(2))
        .attributes[0];
    assert_eq!(table.checkpoint_key, "table/.ATTRIBUTES/table");
    let dir = tempfile::tempdir().unwrap();
    checkpoint
        .write(dir.path().join("ckpt").to_str().unwrap())
        .unwrap();
    let theirs: Vec<(String, Vec<u8>)> = ["ckpt.data-00000-of-00001", "ckpt.index"]
        .iter()
        .map(|name| {
            let bytes = std::fs::read(fixture(&format!("{O7}/{name}"))).unwrap();
            ((*name).to_owned(), bytes)
        })
        .collect();
    // Same data order as TensorFlow: `py_state` after every tensor attribute, the object
    // graph last; the variant entry with its per-element checksums.
    assert_eq!(file_bytes_under(dir.path()), theirs);
}

#[test]
fn read_without_custom_matches_tensorflow() {
    let expected = expected("read_into_fresh_objects_without_custom");
    let mut checkpoint = o7_checkpoint(false, false);
    let status = checkpoint.read(&o7_prefix()).unwrap();
    assert_status_checks(&status, &expected["status"], "o7 read");
    let values = fixture_values();
    for key in [
        "table/.ATTRIBUTES/table-keys",
        "table/.ATTRIBUTES/table-values",
        "pystate/.ATTRIBUTES/py_state",
        "it/.ATTRIBUTES/ITERATOR_STATE",
        "gen/_state_var/.ATTRIBUTES/VARIABLE_VALUE",
    ] {
        assert_eq!(checkpoint.values()[key], values[key], "{key}");
    }
    // TensorFlow's observations of the same values.
    let table_values = &checkpoint.values()["table/.ATTRIBUTES/table-values"];
    assert_eq!(
        table_values.bytes().unwrap(),
        expected["table_lookup_key_after"][0]
            .as_i64()
            .unwrap()
            .to_le_bytes()
    );
    let py_state = checkpoint.values()["pystate/.ATTRIBUTES/py_state"]
        .strings()
        .unwrap()[0]
        .clone();
    let received: Vec<u8> = expected["pystate_received"]
        .as_str()
        .unwrap()
        .chars()
        .map(|c| c as u8)
        .collect();
    assert_eq!(py_state, received);

    // The report: every checkpoint value once, the custom object's two unused.
    let matched = checkpoint
        .match_checkpoint(&o7_prefix(), saveplan::checkpoint::RestoreKind::Read)
        .unwrap();
    let report = matched.report();
    let unused: Vec<&str> = report
        .values
        .iter()
        .filter(|v| v.status == ValueStatus::Unused)
        .map(|v| v.checkpoint_key.as_deref().unwrap())
        .collect();
    assert_eq!(
        unused,
        [
            "custom/.ATTRIBUTES/first",
            "custom/.ATTRIBUTES/with..Sslash....dot"
        ]
    );
    assert_eq!(report.counts.matched, 5);
    assert_eq!(report.counts.missing + report.counts.mismatched, 0);
}

/// TensorFlow's restore looks the custom object's `with/slash.dot` up under a key escaped once
/// (its bug, 13.15) and restores nothing; we read the key the object graph stores, so the
/// same read succeeds and restores every value.
#[test]
fn read_with_custom_restores_what_tensorflow_cannot() {
    let expected = expected("read_into_fresh_objects_with_custom");
    assert_eq!(expected["ok"], false);
    assert!(
        expected["message"]
            .as_str()
            .unwrap()
            .contains("Key custom/.ATTRIBUTES/with.Sslash..dot not found")
    );
    let mut checkpoint = o7_checkpoint(true, false);
    let status = checkpoint.read(&o7_prefix()).unwrap();
    assert!(status.assert_consumed().is_ok());
    assert_eq!(checkpoint.values(), &fixture_values());
}

/// MirroredStrategy (FORMATS.md 13.17, `obj/o8_mirrored`): the checkpoint holds one value per
/// distributed variable (the primary mirror; a SUM SyncOnRead variable's sum), so reading it
/// into plain variables gives what TensorFlow reports.
#[test]
fn o8_mirrored_reads_into_plain_variables() {
    let case = "obj/o8_mirrored";
    let expected = fixture_json(&format!("{case}/expected.json"))["read_into_plain"].clone();
    let model = Object::new()
        .child("w", &Object::variable("Variable"))
        .child("s", &Object::variable("Variable"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let values = BTreeMap::from([
        (
            "model/w/.ATTRIBUTES/VARIABLE_VALUE".to_owned(),
            HostTensor::from_f32s(vec![2], &[0.0, 0.0]).unwrap(),
        ),
        (
            "model/s/.ATTRIBUTES/VARIABLE_VALUE".to_owned(),
            HostTensor::from_f32s(vec![], &[0.0]).unwrap(),
        ),
    ]);
    let mut checkpoint = Checkpoint::new(graph, values).unwrap();
    let prefix = fixture(&format!("{case}/ckpt"));
    let status = checkpoint.read(prefix.to_str().unwrap()).unwrap();
    for (assertion, field) in [
        (Assertion::NontrivialMatch, "assert_nontrivial_match"),
        (
            Assertion::ExistingObjectsMatched,
            "assert_existing_objects_matched",
        ),
        (Assertion::Consumed, "assert_consumed"),
    ] {
        assert_eq!(expected["status"][field]["ok"], true);
        assert!(status.check(assertion).is_ok(), "{field}");
    }
    let floats = |key: &str| -> Vec<f64> {
        checkpoint.values()[key]
            .bytes()
            .unwrap()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect()
    };
    let want_w: Vec<f64> = expected["w"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(floats("model/w/.ATTRIBUTES/VARIABLE_VALUE"), want_w);
    assert_eq!(
        floats("model/s/.ATTRIBUTES/VARIABLE_VALUE"),
        [expected["s"].as_f64().unwrap()]
    );
}

/// Object spec extensions: `attribute`/`suffix` entries, `also` paths (one variable under two
/// parents, as Keras 3 shares weights between a model and its optimizer) and the
/// `save_counter` entry (the checkpoint's counter).
#[test]
fn object_spec_attributes_aliases_and_counter() {
    use saveplan::checkpoint::{ObjectSpec, ObjectSpecError};
    let spec = ObjectSpec::parse(
        &serde_json::json!({"objects": [
            {"path": ["optimizer", "_trainable_variables", "0"], "dtype": "float32",
             "shape": [2], "name": "seq/dense/kernel",
             "also": [["model", "_functional", "_operations", "1", "kernel"]]},
            {"path": ["table"], "attribute": "table", "suffix": "-keys", "dtype": "string",
             "shape": [1]},
            {"path": ["table"], "attribute": "table", "suffix": "-values", "dtype": "int64",
             "shape": [1]},
            {"path": ["save_counter"], "dtype": "int64", "shape": []},
        ]})
        .to_string(),
    )
    .unwrap();
    let (graph, keys) = spec.object_graph().unwrap();
    assert_eq!(
        keys,
        [
            // The shorter path names the shared variable, as in TensorFlow's Keras graphs.
            "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE",
            "table/.ATTRIBUTES/table-keys",
            "table/.ATTRIBUTES/table-values",
            "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
        ]
    );
    let variable_nodes: Vec<usize> = (0..graph.nodes().len())
        .filter(|&i| {
            graph.nodes()[i]
                .attributes
                .first()
                .is_some_and(|a| a.name == "VARIABLE_VALUE")
        })
        .collect();
    assert_eq!(variable_nodes.len(), 1, "one node for the shared variable");
    let parents = graph
        .nodes()
        .iter()
        .filter(|node| {
            node.children
                .iter()
                .any(|c| c.node_id.index() == variable_nodes[0])
        })
        .count();
    assert_eq!(parents, 2);
    // The counter is no child of the root, but the checkpoint's counter.
    assert!(
        graph.nodes()[0]
            .children
            .iter()
            .all(|c| c.local_name != "save_counter")
    );
    let values = BTreeMap::from([
        (
            keys[0].clone(),
            HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap(),
        ),
        (keys[1].clone(), HostTensor::string_vector(["k"])),
        (
            keys[2].clone(),
            HostTensor::from_bytes(DType::Int64, vec![1], 7i64.to_le_bytes().to_vec()).unwrap(),
        ),
        (
            keys[3].clone(),
            HostTensor::from_bytes(DType::Int64, vec![], 4i64.to_le_bytes().to_vec()).unwrap(),
        ),
    ]);
    let checkpoint = spec.checkpoint(values).unwrap();
    assert_eq!(checkpoint.save_counter(), Some(4));
    assert_eq!(checkpoint.values().len(), 3);

    let bad = |objects: Value| {
        ObjectSpec::parse(&serde_json::json!({ "objects": objects }).to_string())
            .unwrap()
            .object_graph()
            .unwrap_err()
    };
    let err = bad(serde_json::json!([{"path": ["save_counter"], "dtype": "float32", "shape": []}]));
    assert!(
        matches!(err, ObjectSpecError::Counter { index: 0 }),
        "{err}"
    );
    let twice = serde_json::json!({"path": ["t"], "attribute": "a", "dtype": "int64", "shape": []});
    let err = bad(serde_json::json!([twice, twice]));
    assert!(
        matches!(err, ObjectSpecError::PathTaken { index: 1, .. }),
        "{err}"
    );
    let err = bad(serde_json::json!([
        {"path": ["v"], "dtype": "int64", "shape": []},
        {"path": ["w"], "dtype": "int64", "shape": [], "also": [["v"]]},
    ]));
    assert!(
        matches!(err, ObjectSpecError::PathTaken { index: 1, .. }),
        "{err}"
    );
}

/// Only a legacy saveable's attribute owns keys extending its own: a key that merely extends a
/// variable's key, or an attribute's key also given exactly, is a value of no attribute.
#[test]
fn only_legacy_attributes_own_extended_keys() {
    let graph = build_object_graph(&o7_root(false)).unwrap();
    let base: BTreeMap<String, HostTensor> = fixture_values()
        .into_iter()
        .filter(|(key, _)| !key.starts_with("custom/"))
        .collect();
    assert!(Checkpoint::new(graph.clone(), base.clone()).is_ok());
    let scalar = HostTensor::from_bytes(DType::Int64, vec![], vec![0; 8]).unwrap();
    for extra in [
        "gen/_state_var/.ATTRIBUTES/VARIABLE_VALUE_x",
        "pystate/.ATTRIBUTES/py_state-extra",
    ] {
        let mut values = base.clone();
        values.insert(extra.to_owned(), scalar.clone());
        let error = Checkpoint::new(graph.clone(), values).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("a value for `{extra}`, which is no attribute of the object graph"),
        );
    }
}

/// A legacy saveable the program lacks is reported once per bundle key its attribute's key
/// prefixes (`table` → `table-keys`, `table-values`), next to the plain unused values.
#[test]
fn an_unused_legacy_attribute_reports_each_of_its_keys() {
    let root = Object::new().child(
        "gen",
        &Object::new().child("_state_var", &Object::variable("StateVar")),
    );
    let key = "gen/_state_var/.ATTRIBUTES/VARIABLE_VALUE";
    let values: BTreeMap<String, HostTensor> = fixture_values()
        .into_iter()
        .filter(|(k, _)| k == key)
        .collect();
    let checkpoint = Checkpoint::new(build_object_graph(&root).unwrap(), values).unwrap();
    let matched = checkpoint
        .match_checkpoint(&o7_prefix(), saveplan::checkpoint::RestoreKind::Read)
        .unwrap();
    let mut unused: Vec<(&str, &str)> = (matched.report().values.iter())
        .filter(|v| v.status == ValueStatus::Unused)
        .map(|v| (v.attribute.as_str(), v.checkpoint_key.as_deref().unwrap()))
        .collect();
    unused.sort_unstable();
    assert_eq!(
        unused,
        [
            ("ITERATOR", "it/.ATTRIBUTES/ITERATOR_STATE"),
            ("first", "custom/.ATTRIBUTES/first"),
            ("py_state", "pystate/.ATTRIBUTES/py_state"),
            ("table", "table/.ATTRIBUTES/table-keys"),
            ("table", "table/.ATTRIBUTES/table-values"),
            ("with.Sslash..dot", "custom/.ATTRIBUTES/with..Sslash....dot"),
        ]
    );
    assert_eq!(matched.report().counts.matched, 1);
}

/// Every attribute an object spec declares gets a value and nothing undeclared is written:
/// a legacy saveable's `-values` missing, an undeclared `-valuesX` beside it, or an attribute
/// `""` fed from another attribute's key is an error naming the keys (all of them counted, the
/// first few named), so `save OBJSPEC` never writes what the spec cannot restore.
#[test]
fn object_spec_values_must_match_the_declared_attributes() {
    use saveplan::checkpoint::{ObjectSpec, ObjectSpecError};
    let spec = ObjectSpec::parse(
        &serde_json::json!({"objects": [
            {"path": ["table"], "attribute": "table", "suffix": "-keys", "dtype": "string",
             "shape": [1]},
            {"path": ["table"], "attribute": "table", "suffix": "-values", "dtype": "int64",
             "shape": [1]},
            {"path": ["net", "names"], "attribute": "", "dtype": "string", "shape": [1]},
        ]})
        .to_string(),
    )
    .unwrap();
    let (_, keys) = spec.object_graph().unwrap();
    let int = HostTensor::from_bytes(DType::Int64, vec![1], 7i64.to_le_bytes().to_vec()).unwrap();
    let all = BTreeMap::from([
        (keys[0].clone(), HostTensor::string_vector(["k"])),
        (keys[1].clone(), int.clone()),
        (keys[2].clone(), HostTensor::string_vector(["n"])),
    ]);
    assert_eq!(spec.checkpoint(all.clone()).unwrap().values().len(), 3);

    let mut no_values = all.clone();
    no_values.remove(&keys[1]);
    let err = spec.checkpoint(no_values).unwrap_err();
    assert!(
        matches!(&err, ObjectSpecError::MissingValues { count: 1, first } if first == &keys[1]),
        "{err}"
    );

    let mut extra = all.clone();
    extra.insert(format!("{}X", keys[1]), int.clone());
    let err = spec.checkpoint(extra).unwrap_err();
    assert!(
        matches!(&err, ObjectSpecError::UnknownValues { count: 1, first } if first.ends_with("-valuesX")),
        "{err}"
    );

    // The attribute `""` fed from the node's VARIABLE_VALUE key instead of its own.
    let mut renamed = all.clone();
    let names = renamed.remove(&keys[2]).unwrap();
    renamed.insert("net/names/.ATTRIBUTES/VARIABLE_VALUE".to_owned(), names);
    let err = spec.checkpoint(renamed).unwrap_err();
    assert!(
        matches!(err, ObjectSpecError::MissingValues { count: 1, .. }),
        "{err}"
    );

    // Many missing: counted, the first few named, on one line.
    let err = spec.checkpoint(BTreeMap::new()).unwrap_err().to_string();
    assert!(
        err.starts_with("3 of the spec's keys have no value: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}
