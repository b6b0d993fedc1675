//! `saveplan compile OBJSPEC`: an object spec compiles to the TF1 graph-mode write and restore
//! of its fresh `tf.train.Checkpoint` (`meta_graph.pb`, `object_graph.pb`,
//! `entry_points.json`). The emitted graph is TensorFlow's (`o9`'s `graph_mode.graph.pbtxt`
//! node for node, the initial values being the spec's zeros), `saveplan check` passes on it,
//! and running it as `entry_points.json` says writes the checkpoint `saveplan save` writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use saveplan::checkpoint::ObjectSpec;
use saveplan::exec::{BundleIo, CompiledPlan, HostTensor, RunContext, VariableStore};
use saveplan::export::{Loaded, read_graph_file};
use saveplan_ir::Module;
use saveplan_ir::object_graph::ObjectGraph;

use crate::support::exec::{backends, fixture_module, prepare, verified};
use crate::support::objects::{assert_same_bundle, fixture_values};
use crate::support::{manifest_path, saveplan, settings};

/// `o9`'s graph-mode tree: `model.a` f32[2] on CPU:0, `model.b` int64 on CPU:1.
const O9_SPEC: &str = r#"{"objects": [
  {"path": ["model", "a"], "dtype": "float32", "shape": [2],
   "device": "/job:localhost/replica:0/task:0/device:CPU:0"},
  {"path": ["model", "b"], "dtype": "int64", "shape": [],
   "device": "/job:localhost/replica:0/task:0/device:CPU:1"}
]}"#;

/// The object specs under `tests/inputs/objects/` (the top level: `restore/` holds restore
/// cases of the same trees).
fn object_inputs() -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(manifest_path("tests/inputs/objects"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 2, "no object specs");
    inputs
}

/// Runs `saveplan ARGS`, asserts it succeeds and returns its stdout.
fn saveplan_ok(args: &[&str]) -> String {
    let out = saveplan(args);
    assert!(
        out.status.success(),
        "saveplan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `saveplan compile SPEC -o DIR --emit ARGS` and asserts it succeeds.
fn compile(spec: &Path, dir: &Path, emit: &str) {
    let (spec, dir) = (spec.to_str().unwrap(), dir.to_str().unwrap());
    saveplan_ok(&["compile", spec, "-o", dir, "--emit", emit]);
}

/// The module of `DIR/meta_graph.pb`, which must have no SaverDef.
fn emitted_module(dir: &Path) -> Module {
    match read_graph_file(&dir.join("meta_graph.pb")).unwrap() {
        Loaded::MetaGraph(meta_graph) => {
            assert!(
                meta_graph.saver_def.is_none(),
                "an object plan has no SaverDef"
            );
            for name in ["variables", "trainable_variables"] {
                assert!(meta_graph.collection_def.contains_key(name), "{name}");
            }
            meta_graph.module
        }
        _ => panic!("meta_graph.pb is a MetaGraphDef"),
    }
}

fn entry_points(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("entry_points.json")).unwrap()).unwrap()
}

#[test]
fn o9_spec_compiles_to_tensorflows_graph_mode_graph() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("o9.json");
    std::fs::write(&spec, O9_SPEC).unwrap();
    let out = dir.path().join("out");
    compile(&spec, &out, "pb");
    let ours = emitted_module(&out);
    // TensorFlow's graph, its initial values replaced by the spec's zeros: every other node,
    // attr and the order are compared as they are.
    let mut theirs = fixture_module("obj/o9_write_graphs/graph_mode.graph.pbtxt");
    let mut replaced = 0;
    for id in theirs.graph.ops() {
        let name = theirs.graph.op(id).name.clone();
        if !name.ends_with("/Initializer/initial_value") {
            continue;
        }
        let mine = ours.graph.find(&name).expect("an initial value of ours");
        let value = ours.graph.op(mine).attrs.get("value").unwrap().clone();
        theirs.graph.op_mut(id).attrs().insert("value", value);
        replaced += 1;
    }
    assert_eq!(replaced, 2);
    assert_eq!(ours.to_string(), theirs.to_string());
    let entry = entry_points(&out);
    assert_eq!(entry["init"], "init");
    assert_eq!(entry["write"]["prefix_tensor"], "Const_1:0");
    assert_eq!(entry["write"]["object_graph_tensor"], "Const:0");
    assert_eq!(entry["write"]["save_tensor"], "Identity_4:0");
    assert_eq!(entry["read"]["prefix_tensor"], "Const_4:0");
    assert_eq!(
        entry["read"]["restore_ops"],
        serde_json::json!(["AssignVariableOp", "AssignVariableOp_1"])
    );
}

#[test]
fn compiled_object_specs_check_and_snapshot() {
    for spec in object_inputs() {
        let dir = tempfile::tempdir().unwrap();
        compile(&spec, dir.path(), "all");
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "entry_points.json",
                "meta_graph.pb",
                "meta_graph.pbtxt",
                "object_graph.pb",
                "plan.dot",
                "plan.txt"
            ]
        );
        let meta = dir.path().join("meta_graph.pb");
        assert_eq!(
            saveplan_ok(&["check", meta.to_str().unwrap()]),
            format!("{}: ok\n", meta.display())
        );
        // The emitted graph is the library's graph-mode graph of the spec's fresh checkpoint.
        let text = std::fs::read_to_string(&spec).unwrap();
        let write = (ObjectSpec::parse(&text).unwrap().fresh_checkpoint())
            .unwrap()
            .graph_mode()
            .unwrap();
        assert_eq!(
            emitted_module(dir.path()).to_string(),
            write.module().to_string()
        );
        let plan = std::fs::read_to_string(dir.path().join("plan.txt")).unwrap();
        assert_eq!(plan, write.module().to_string());
        let entry = std::fs::read_to_string(dir.path().join("entry_points.json")).unwrap();
        let stem = spec.file_stem().unwrap().to_str().unwrap();
        settings().bind(|| {
            insta::assert_snapshot!(
                format!("compile_objects_{stem}"),
                format!("{entry}\n{plan}")
            );
        });
    }
}

/// Runs the emitted plan as `entry_points.json` says, as a TF1 session would: `init`, then
/// the save tensor with the prefix and `object_graph.pb` fed; then, on fresh variables, the
/// restore ops with the prefix fed. Returns the restored variables' values by handle name.
fn run_emitted(dir: &Path, prefix: &Path) -> BTreeMap<String, HostTensor> {
    let module = emitted_module(dir);
    let entry = entry_points(dir);
    let text = |value: &serde_json::Value| value.as_str().unwrap().to_owned();
    let object_graph = std::fs::read(dir.join(text(&entry["write"]["object_graph_file"]))).unwrap();
    let restore_ops: Vec<String> = (entry["read"]["restore_ops"].as_array().unwrap().iter())
        .map(text)
        .collect();
    let restore_ops: Vec<&str> = restore_ops.iter().map(String::as_str).collect();
    let verified = verified(&module);
    let mut restored = BTreeMap::new();
    for backend in backends() {
        let compile = |targets: &[&str], feeds: &[&str]| {
            prepare(
                &CompiledPlan::compile(verified, targets, feeds).unwrap(),
                backend,
            )
        };
        let init = compile(&[&text(&entry["init"])], &[]);
        let write = compile(
            &[&text(&entry["write"]["save_tensor"])],
            &[
                &text(&entry["write"]["object_graph_tensor"]),
                &text(&entry["write"]["prefix_tensor"]),
            ],
        );
        let read = compile(&restore_ops, &[&text(&entry["read"]["prefix_tensor"])]);
        let io = BundleIo::default();
        let store = VariableStore::new();
        init.run(&RunContext::new(&store), Vec::new()).unwrap();
        let prefix_text = prefix.to_str().unwrap();
        let returned = write
            .run(
                &RunContext::new(&store).with_io(&io),
                vec![
                    HostTensor::string_scalar(object_graph.clone()),
                    HostTensor::string_scalar(prefix_text),
                ],
            )
            .unwrap();
        assert_eq!(returned[0].as_string_scalar(), Some(prefix_text.as_bytes()));
        let fresh = VariableStore::new();
        let cx = RunContext::new(&fresh).with_io(&io);
        read.run(&cx, vec![HostTensor::string_scalar(prefix_text)])
            .unwrap();
        restored = (entry["variables"].as_object().unwrap().values())
            .map(|name| {
                let name = text(name);
                let value = fresh
                    .get(&saveplan::exec::VarKey::new("", name.as_str()))
                    .unwrap();
                (name, value)
            })
            .collect();
    }
    restored
}

/// The attributes' `full_name`s of an object graph, in node order.
fn full_names(graph: &ObjectGraph) -> Vec<String> {
    (graph.nodes().iter())
        .flat_map(|node| &node.attributes)
        .map(|attribute| attribute.full_name.clone())
        .collect()
}

#[test]
fn emitted_plans_write_what_save_writes() {
    let mut same_as_save = 0;
    for spec in object_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        compile(&spec, &out, "pb");
        let ours = dir.path().join("ours");
        let restored = run_emitted(&out, &ours);
        let text = std::fs::read_to_string(&spec).unwrap();
        let spec_file = ObjectSpec::parse(&text).unwrap();
        let checkpoint = spec_file.fresh_checkpoint().unwrap();
        let write = checkpoint.graph_mode().unwrap();
        // The library's graph-mode write of the same checkpoint writes the same bytes.
        let session = write.session(Default::default()).unwrap();
        session.run_init().unwrap();
        let library = dir.path().join("library");
        session.write(library.to_str().unwrap()).unwrap();
        assert_same_bundle(&ours, &library);
        // The restore ops put the spec's zeros back into every variable.
        let zeros = session.values().unwrap();
        assert_eq!(restored.len(), zeros.len());
        for (key, value) in &zeros {
            assert_eq!(&restored[&write.variables()[key]], value, "{key}");
        }
        // `saveplan save OBJSPEC` with the zeros as values writes the same values; the same
        // bytes unless graph mode made two variables' names unique (`Variable`,
        // `Variable_1`), as TensorFlow's graph mode does in the object graph it stores.
        let values = dir.path().join("zeros");
        checkpoint.write(values.to_str().unwrap()).unwrap();
        let saved = dir.path().join("saved");
        saveplan_ok(&[
            "save",
            spec.to_str().unwrap(),
            "--values",
            values.to_str().unwrap(),
            "--prefix",
            saved.to_str().unwrap(),
        ]);
        assert_eq!(fixture_values(&ours), fixture_values(&saved));
        let (declared, _) = spec_file.object_graph().unwrap();
        if full_names(&declared) == full_names(write.object_graph()) {
            assert_same_bundle(&ours, &saved);
            same_as_save += 1;
        } else {
            assert_eq!(full_names(write.object_graph()), ["Variable", "Variable_1"]);
        }
    }
    assert!(
        same_as_save >= 1,
        "no spec compared byte for byte with `save`"
    );
}

#[test]
fn object_specs_compile_only_to_the_flat_form() {
    let spec = manifest_path("tests/inputs/objects/o6_sync.json");
    let dir = tempfile::tempdir().unwrap();
    let out = saveplan(&[
        "compile",
        spec.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
        "--form",
        "function",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("an object spec compiles to the graph-mode graph only"),
        "{stderr}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// Initial values are stored in full, as TensorFlow stores `np.zeros`: a variable whose zeros
/// would pass protobuf's 2 GiB limit is refused in one line before anything is written.
#[test]
fn object_specs_too_large_to_initialize_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("huge.json");
    std::fs::write(
        &spec,
        r#"{"objects": [{"path": ["v"], "dtype": "float32", "shape": [1000000000]}]}"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = saveplan(&[
        "compile",
        spec.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}: entry 0: a float32 variable of shape [1000000000] would need \
             4000000000 bytes, above the 2147483648-byte limit for constants",
            spec.display()
        )
    );
    assert!(!out_dir.exists());
}
