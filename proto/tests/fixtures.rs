//! Round-trip tests against the text-format files TensorFlow 2.21 wrote under
//! `tests/fixtures/tf-2.21/`: each parses as its message type, re-prints byte-identical, and
//! encodes deterministically.

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use prost::Message;
use saveplan_proto::tensorflow::{
    CheckpointState, FunctionDef, GraphDef, MetaGraphDef, OpList, SaverDef, TrackableObjectGraph,
};
use saveplan_proto::{from_text, from_text_dyn, to_text, to_text_dyn};

/// Root of the TensorFlow 2.21 reference fixtures.
fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tf-2.21")
}

/// Every text-format fixture file, sorted by path.
fn text_fixtures() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, found);
            } else {
                let name = file_name(&path);
                if name.ends_with(".pbtxt") || name == "checkpoint" {
                    found.push(path);
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(&fixture_root(), &mut found);
    found
}

fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|name| name.to_str())
        .expect("fixture names are UTF-8")
}

/// The message type a fixture file holds, by its name.
fn message_type(path: &Path) -> &'static str {
    let name = file_name(path);
    let parent = path
        .parent()
        .and_then(|dir| dir.file_name())
        .and_then(|dir| dir.to_str())
        .unwrap_or_default();
    match name {
        "checkpoint" => "tensorflow.CheckpointState",
        "object_graph.pbtxt" => "tensorflow.TrackableObjectGraph",
        "op_defs.pbtxt" if parent == "meta" => "tensorflow.OpList",
        "meta_graph.pbtxt" => "tensorflow.MetaGraphDef",
        "graph.pbtxt" | "flat_graph.pbtxt" => "tensorflow.GraphDef",
        "fn_save.pbtxt" => "tensorflow.FunctionDef",
        "saver_def.pbtxt" => "tensorflow.SaverDef",
        _ if name.ends_with(".object_graph.pbtxt") => "tensorflow.TrackableObjectGraph",
        _ if name.ends_with(".graph.pbtxt") => "tensorflow.GraphDef",
        _ if name.ends_with(".function_def.pbtxt") => "tensorflow.FunctionDef",
        _ if name.ends_with(".saver_def.pbtxt") => "tensorflow.SaverDef",
        _ => panic!("no message type known for fixture {}", path.display()),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// Parses, re-prints and re-encodes one fixture through the typed API.
fn check_typed<M: Message + prost::Name + Default + PartialEq + Debug>(path: &Path) {
    let text = read(path);
    let msg: M = from_text(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    assert_eq!(
        to_text(&msg),
        text,
        "{} does not re-print identically",
        path.display()
    );
    let bytes = msg.encode_to_vec();
    assert_eq!(
        bytes,
        msg.encode_to_vec(),
        "{}: encoding is not deterministic",
        path.display()
    );
    let decoded = M::decode(bytes.as_slice()).expect("our own encoding decodes");
    assert_eq!(decoded, msg, "{}: decode(encode(x)) != x", path.display());
}

#[test]
fn every_text_fixture_round_trips_byte_identical() {
    let paths = text_fixtures();
    assert!(
        paths.len() >= 33,
        "expected the 33 text fixtures, found {}",
        paths.len()
    );
    for path in &paths {
        match message_type(path) {
            "tensorflow.CheckpointState" => check_typed::<CheckpointState>(path),
            "tensorflow.TrackableObjectGraph" => check_typed::<TrackableObjectGraph>(path),
            "tensorflow.OpList" => check_typed::<OpList>(path),
            "tensorflow.MetaGraphDef" => check_typed::<MetaGraphDef>(path),
            "tensorflow.GraphDef" => check_typed::<GraphDef>(path),
            "tensorflow.FunctionDef" => check_typed::<FunctionDef>(path),
            "tensorflow.SaverDef" => check_typed::<SaverDef>(path),
            other => panic!("unhandled message type {other}"),
        }
    }
}

#[test]
fn dynamic_api_agrees_with_typed_api() {
    for path in text_fixtures() {
        let text = read(&path);
        let full_name = message_type(&path);
        let bytes = from_text_dyn(full_name, &text)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let printed = to_text_dyn(full_name, &bytes)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert_eq!(
            printed,
            text,
            "{} does not re-print identically",
            path.display()
        );
    }
}

#[test]
fn checkpoint_state_fields_are_read() {
    let path = fixture_root().join("ckpt/c11_checkpoint_manager/checkpoint");
    let state: CheckpointState = from_text(&read(&path)).expect("fixture parses");
    assert_eq!(state.model_checkpoint_path, "ckpt-3");
    assert_eq!(state.all_model_checkpoint_paths, ["ckpt-2", "ckpt-3"]);
    assert_eq!(
        state.all_model_checkpoint_timestamps,
        [1795219507.4775453, 1795219507.4957654]
    );
    assert_eq!(state.last_preserved_timestamp, 1795219506.4350224);
}
