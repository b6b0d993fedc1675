//! Every graph file TensorFlow 2.21 wrote (`tests/fixtures/tf-2.21/graph/*/*.pbtxt`) imports
//! into IR and exports back to an equal message, byte-equal in binary and in text format.

use crate::support::settings;

use std::path::{Path, PathBuf};

use saveplan::export::{self, Loaded, ProtoMessage};

/// One snapshot document per fixture: `## text` (canonical IR text) and `## verify`, or
/// `## saver_def` for a SaverDef.
fn render(path: &Path) -> String {
    let message = export::read_proto_file(path).unwrap();
    let loaded = message.import().unwrap();
    match loaded.into_module() {
        Some(module) => {
            let verify = match saveplan_ir::verify::verify_module(&module) {
                Ok(_) => "ok".to_owned(),
                Err(errors) => errors.to_string(),
            };
            format!("## text\n{module}\n## verify\n{verify}\n")
        }
        None => format!("## saver_def\n{}", message.to_text()),
    }
}

/// All `.pbtxt` fixtures under the graph fixture folder, sorted.
pub(crate) fn graph_fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
    let mut files = Vec::new();
    for case in std::fs::read_dir(&root).unwrap() {
        for file in std::fs::read_dir(case.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "pbtxt") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn fixtures_exist() {
    // g1-g6 hold 20 files, g7 three, g8 one and g9 four: the loops below must not pass
    // vacuously.
    assert_eq!(graph_fixtures().len(), 28, "{:?}", graph_fixtures());
}

#[test]
fn every_fixture_round_trips() {
    for path in graph_fixtures() {
        let text = std::fs::read_to_string(&path).unwrap();
        let original = export::read_proto_file(&path).unwrap();
        let loaded = original
            .import()
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let exported = loaded.export().unwrap();
        assert!(
            exported == original,
            "{}: export differs from the fixture",
            path.display()
        );
        assert_eq!(
            exported.encode_binary(),
            original.encode_binary(),
            "{}",
            path.display()
        );
        assert_eq!(exported.to_text(), text, "{}", path.display());
    }
}

#[test]
fn message_kinds_are_detected_in_text_and_binary() {
    for path in graph_fixtures() {
        let name = path.file_name().unwrap().to_str().unwrap();
        let expected = if name.contains("saver_def") {
            export::MessageKind::SaverDef
        } else if name.contains("meta_graph") {
            export::MessageKind::MetaGraphDef
        } else if name.starts_with("fn_") || name.contains("function_def") {
            export::MessageKind::FunctionDef
        } else {
            export::MessageKind::GraphDef
        };
        let message = export::read_proto_file(&path).unwrap();
        assert_eq!(message.kind(), expected, "{}", path.display());
        let binary = ProtoMessage::decode_binary(&message.encode_binary()).unwrap();
        assert_eq!(binary, message, "{}", path.display());
    }
}

#[test]
fn binary_written_by_tensorflow_reads_as_the_fixture() {
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs/graph/tf_binary");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
    let mut n_files = 0;
    for entry in std::fs::read_dir(&inputs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "pb") {
            continue;
        }
        n_files += 1;
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let (case, file) = stem.split_once('.').unwrap();
        let fixture = fixtures.join(case).join(format!("{file}.pbtxt"));
        let from_tf = export::read_proto_file(&path).unwrap();
        assert_eq!(
            from_tf,
            export::read_proto_file(&fixture).unwrap(),
            "{stem}"
        );
        let exported = from_tf.import().unwrap().export().unwrap();
        assert_eq!(exported, from_tf, "{stem}");
    }
    assert_eq!(n_files, 4);
}

#[test]
fn graph() {
    settings().bind(|| {
        insta::glob!("..", "fixtures/tf-2.21/graph/*/*.pbtxt", |path| {
            insta::assert_snapshot!(render(path));
        });
    });
}

#[test]
fn every_fixture_verifies_clean() {
    for path in graph_fixtures() {
        let loaded = export::read_graph_file(&path).unwrap();
        if let Some(module) = loaded.into_module()
            && let Err(errors) = saveplan_ir::verify::verify_module(&module)
        {
            panic!("{}: {errors}", path.display());
        }
    }
}

#[test]
fn canonical_text_parses_back_to_the_same_protobuf() {
    for path in graph_fixtures() {
        let original = export::read_proto_file(&path).unwrap();
        let loaded = original.import().unwrap();
        let Some(module) = loaded.clone().into_module() else {
            continue;
        };
        let text = module.to_string();
        let parsed = saveplan_ir::parse::parse_module(&text)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert_eq!(parsed.to_string(), text, "{}", path.display());
        let reparsed = match loaded {
            Loaded::Graph(_) => Loaded::Graph(parsed),
            Loaded::MetaGraph(meta_graph) => Loaded::MetaGraph(export::MetaGraph {
                module: parsed,
                ..meta_graph
            }),
            Loaded::Function(_) => Loaded::Function(parsed.library.functions[0].clone()),
            Loaded::Saver(_) => unreachable!("saver defs have no module"),
        };
        // The text lists ops in topological order, so only node order may change.
        assert_eq!(
            sorted_nodes(reparsed.export().unwrap()),
            sorted_nodes(original),
            "{}: text round trip changed the protobuf",
            path.display()
        );
    }
}

/// The message with the nodes of its graph and functions sorted by name.
fn sorted_nodes(message: ProtoMessage) -> ProtoMessage {
    fn sort_graph(graph_def: &mut saveplan_proto::tensorflow::GraphDef) {
        graph_def.node.sort_by(|a, b| a.name.cmp(&b.name));
        for function in graph_def
            .library
            .iter_mut()
            .flat_map(|lib| &mut lib.function)
        {
            function.node_def.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
    let mut message = message;
    match &mut message {
        ProtoMessage::GraphDef(graph_def) => sort_graph(graph_def),
        ProtoMessage::MetaGraphDef(meta_graph_def) => {
            sort_graph(meta_graph_def.graph_def.as_mut().unwrap());
        }
        ProtoMessage::FunctionDef(function) => {
            function.node_def.sort_by(|a, b| a.name.cmp(&b.name));
        }
        ProtoMessage::SaverDef(_) => {}
    }
    message
}

/// The binary TF1 `.meta` of `tests/fixtures/saveplan/v1_saver_meta` (`VariableV2`, `Assign`
/// with `_ref` outputs) imports and exports back to the same MetaGraphDef.
#[test]
fn ref_variable_meta_graph_round_trips() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/saveplan/v1_saver_meta/model.meta");
    let original = export::read_proto_file(&path).unwrap();
    let loaded = original.import().unwrap();
    let exported = loaded.export().unwrap();
    assert!(exported == original, "export differs from TF's .meta");
    assert_eq!(exported.encode_binary(), original.encode_binary());
}
