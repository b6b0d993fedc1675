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

/// Inputs are found by name wherever their ops are, on both paths: before or after the
/// reading op, near it or far, at a steady stride that then breaks, the same op again, and
/// names that sit where an earlier stride would guess. The import looks where a plan's inputs
/// usually are before it asks the name index; exporting again must give every node's inputs
/// back exactly.
#[test]
fn inputs_resolve_to_their_named_ops_wherever_they_are() {
    // A fixed pseudo-random sequence (an LCG), so the case is the same on every run.
    let mut state: u64 = 0x5eed;
    let mut next = |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize % bound
    };
    let n = 400;
    // Names out of index order, so a name says nothing about where its op is.
    let names: Vec<String> = (0..n).map(|i| format!("op_{}", (i * 7919) % n)).collect();
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut inputs: Vec<String> = Vec::new();
        let form = |j: usize, output: usize| match output {
            0 => names[j].clone(),
            output => format!("{}:{output}", names[j]),
        };
        match i % 5 {
            // A long run at a steady stride, broken halfway, then the same op again.
            0 if i >= 200 => {
                let start = next(40);
                for k in 0..12 {
                    let j = if k < 6 {
                        start + 5 * k
                    } else {
                        start + 7 * k + 1
                    };
                    inputs.push(form(j % n, k % 3));
                }
                inputs.push(form(start, 0));
            }
            // The ops just before, as a variable's ops read their handle.
            1 | 2 if i >= 3 => {
                inputs.push(form(i - 1, 0));
                inputs.push(form(i - 3, 1));
            }
            // Anywhere, later ops included.
            _ => {
                for _ in 0..next(4) {
                    inputs.push(form(next(n), next(2)));
                }
            }
        }
        // Control inputs after the data inputs, near and far.
        for _ in 0..next(3) {
            let j = if next(2) == 0 {
                i.saturating_sub(1 + next(6))
            } else {
                next(n)
            };
            inputs.push(format!("^{}", names[j]));
        }
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        nodes.push(node(name, "SomeOp", &inputs));
    }
    let bytes = graph_bytes(nodes.clone());
    let direct = export::import_binary_direct(&bytes, MessageKind::GraphDef)
        .expect("the direct path takes plain nodes");
    let message = ProtoMessage::GraphDef(pb::GraphDef::decode(bytes.as_slice()).unwrap())
        .import()
        .unwrap();
    for (what, loaded) in [("direct", direct), ("message", message)] {
        let ProtoMessage::GraphDef(exported) = loaded.export().unwrap() else {
            panic!("{what}: not a GraphDef");
        };
        assert_eq!(exported.node.len(), n, "{what}");
        for (ours, given) in exported.node.iter().zip(&nodes) {
            assert_eq!(ours.name, given.name, "{what}");
            assert_eq!(ours.input, given.input, "{what}: inputs of {}", given.name);
        }
    }
}

/// A MetaGraphDef with a field its schema does not define is left to the message path, which
/// tells a binary message's kind from its fields and recognizes none here: the direct import,
/// made while the bytes are scanned, would take it (an unknown field outside a node goes
/// unseen there) and must be dropped, so that the file fails as the message path fails.
#[test]
fn a_meta_graph_with_an_unknown_field_takes_the_message_path() {
    let path = crate::support::fixture("graph/g8_meta_graph/meta_graph.pbtxt");
    let ProtoMessage::MetaGraphDef(meta) = export::read_proto_file(&path).unwrap() else {
        panic!("g8 holds a MetaGraphDef");
    };
    let mut bytes = meta.encode_to_vec();
    // Field 99, a varint: not a MetaGraphDef field.
    bytes.extend_from_slice(&[0x98, 0x06, 0x01]);
    assert!(
        export::import_binary_direct(&bytes, MessageKind::MetaGraphDef).is_some(),
        "the direct import would take it"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("unknown.pb");
    std::fs::write(&file, &bytes).unwrap();
    let by_message = export::read_proto_file(&file).unwrap_err();
    let by_file = export::read_graph_file(&file).unwrap_err();
    assert!(
        by_message.to_string().contains("unknown.pb"),
        "{by_message}"
    );
    assert_eq!(by_file.to_string(), by_message.to_string());
}
