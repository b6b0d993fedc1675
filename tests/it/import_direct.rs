//! The direct import of binary GraphDefs and MetaGraphDefs
//! ([`saveplan::export::import_binary_direct`], which `read_graph_file` takes first) builds
//! what decoding the message and importing it builds, takes the direct path for every graph
//! TensorFlow wrote here, and leaves what it does not handle (hostile or unusual nodes) to the
//! message path, whose errors are unchanged.

use prost::Message;
use saveplan::export::{self, Loaded, MessageKind, ProtoMessage};
use saveplan_proto::tensorflow as pb;

use crate::export_roundtrip::graph_fixtures;

/// The kind of a decoded graph message, `None` for a FunctionDef or SaverDef.
fn graph_kind(message: &ProtoMessage) -> Option<MessageKind> {
    matches!(
        message.kind(),
        MessageKind::GraphDef | MessageKind::MetaGraphDef
    )
    .then(|| message.kind())
}

/// Asserts that the direct import of `bytes` equals the message path's import, in IR text
/// and exported bytes; returns whether the direct path took it.
fn assert_same_import(what: &str, bytes: &[u8], kind: MessageKind) -> bool {
    let message = match kind {
        MessageKind::MetaGraphDef => {
            ProtoMessage::MetaGraphDef(Box::new(pb::MetaGraphDef::decode(bytes).unwrap()))
        }
        _ => ProtoMessage::GraphDef(pb::GraphDef::decode(bytes).unwrap()),
    };
    let expected = message.import().unwrap();
    let Some(direct) = export::import_binary_direct(bytes, kind) else {
        return false;
    };
    assert_eq!(direct.kind(), kind, "{what}");
    let text = |loaded: Loaded| loaded.into_module().unwrap().to_string();
    assert_eq!(
        direct.export().unwrap().encode_binary(),
        expected.export().unwrap().encode_binary(),
        "{what}"
    );
    assert_eq!(text(direct), text(expected), "{what}");
    true
}

#[test]
fn every_graph_fixture_imports_directly_to_the_same_module() {
    let mut n_direct = 0;
    for path in graph_fixtures() {
        let message = export::read_proto_file(&path).unwrap();
        let Some(kind) = graph_kind(&message) else {
            continue;
        };
        let what = path.display().to_string();
        assert!(
            assert_same_import(&what, &message.encode_binary(), kind),
            "{what}: left to the message path"
        );
        n_direct += 1;
    }
    // g1–g6 hold ten GraphDefs (g4 and g6 no `graph.pbtxt`), g7 one, g8 one MetaGraphDef
    // and g9 two GraphDefs: the loop must not pass vacuously.
    assert_eq!(n_direct, 14);
}

#[test]
fn a_meta_file_imports_directly_to_the_same_meta_graph() {
    let path = crate::support::manifest_path("tests/fixtures/saveplan/v1_saver_meta/model.meta");
    let bytes = std::fs::read(&path).unwrap();
    assert!(assert_same_import(
        "model.meta",
        &bytes,
        MessageKind::MetaGraphDef
    ));
    assert!(matches!(
        export::read_graph_file(&path).unwrap(),
        Loaded::MetaGraph(meta) if meta.saver_def.is_some()
    ));
}

/// A `NodeDef` of `op` named `name` with these inputs and no attributes.
fn node(name: &str, op: &str, inputs: &[&str]) -> pb::NodeDef {
    pb::NodeDef {
        name: name.to_owned(),
        op: op.to_owned(),
        input: inputs.iter().map(|input| (*input).to_owned()).collect(),
        ..pb::NodeDef::default()
    }
}

/// An encoded `GraphDef` of these nodes.
fn graph_bytes(nodes: Vec<pb::NodeDef>) -> Vec<u8> {
    pb::GraphDef {
        node: nodes,
        ..pb::GraphDef::default()
    }
    .encode_to_vec()
}

#[test]
fn an_attribute_given_twice_keeps_its_last_value_on_both_paths() {
    let mut first = node("c", "Const", &[]);
    let dtype = |t: pb::DataType| pb::AttrValue {
        value: Some(pb::attr_value::Value::Type(t as i32)),
    };
    first
        .attr
        .insert("dtype".to_owned(), dtype(pb::DataType::DtFloat));
    // `first` with a second `attr` map entry (field 5) for `dtype` appended.
    let mut entry = Vec::new();
    prost::encoding::string::encode(1, &"dtype".to_owned(), &mut entry);
    prost::encoding::message::encode(2, &dtype(pb::DataType::DtInt32), &mut entry);
    let mut node_bytes = first.encode_to_vec();
    prost::encoding::bytes::encode(5, &entry, &mut node_bytes);
    let mut bytes = Vec::new();
    prost::encoding::bytes::encode(1, &node_bytes, &mut bytes);
    assert!(assert_same_import(
        "dtype twice",
        &bytes,
        MessageKind::GraphDef
    ));
    let module = export::import_binary_direct(&bytes, MessageKind::GraphDef)
        .and_then(Loaded::into_module)
        .unwrap();
    assert!(module.to_string().contains("dtype=int32"), "{module}");
}

#[test]
fn what_the_direct_import_does_not_handle_keeps_its_message_path_errors() {
    let dir = tempfile::tempdir().unwrap();
    let debug_info = pb::NodeDef {
        experimental_debug_info: Some(pb::node_def::ExperimentalDebugInfo {
            original_node_names: vec!["x".to_owned()],
            original_func_names: Vec::new(),
        }),
        ..node("a", "NoOp", &[])
    };
    let cases = [
        ("control", vec![node("a\nb", "NoOp", &[])]),
        (
            "duplicate",
            vec![node("a", "NoOp", &[]), node("a", "NoOp", &[])],
        ),
        ("missing", vec![node("b", "Identity", &["gone"])]),
        (
            "late data",
            vec![node("a", "NoOp", &[]), node("b", "Identity", &["^a", "a"])],
        ),
        (
            "bad device",
            vec![pb::NodeDef {
                device: "/job:".to_owned(),
                ..node("a", "NoOp", &[])
            }],
        ),
        ("debug info", vec![debug_info]),
    ];
    for (what, nodes) in cases {
        let bytes = graph_bytes(nodes);
        assert!(
            export::import_binary_direct(&bytes, MessageKind::GraphDef).is_none(),
            "{what}: taken directly"
        );
        let path = dir.path().join("graph.pb");
        std::fs::write(&path, &bytes).unwrap();
        let by_message = export::read_proto_file(&path).unwrap().import();
        let by_file = export::read_graph_file(&path);
        match (by_message, by_file) {
            (Err(expected), Err(err)) => {
                assert!(
                    err.to_string()
                        .starts_with(&format!("{}: ", path.display()))
                );
                let source = std::error::Error::source(&err).unwrap().to_string();
                assert_eq!(source, expected.to_string(), "{what}");
            }
            (Ok(expected), Ok(loaded)) => {
                assert_eq!(what, "debug info");
                let text = |loaded: Loaded| loaded.into_module().unwrap().to_string();
                assert_eq!(text(loaded), text(expected));
            }
            (expected, got) => panic!("{what}: {expected:?} but {got:?}"),
        }
    }
}

#[test]
fn bytes_of_another_kind_are_not_taken_directly() {
    let saver = pb::SaverDef {
        filename_tensor_name: "save/Const:0".to_owned(),
        ..pb::SaverDef::default()
    };
    let bytes = saver.encode_to_vec();
    assert!(export::import_binary_direct(&bytes, MessageKind::SaverDef).is_none());
    assert!(export::import_binary_direct(&bytes, MessageKind::MetaGraphDef).is_none());
}
