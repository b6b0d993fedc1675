//! `saveplan compile` on the tracer's spec inputs (`tests/inputs/trace/g*.json`) in both
//! forms: the five output files exist, `meta_graph.pb` and `meta_graph.pbtxt` hold the same
//! MetaGraphDef whose graph is the traced plan plus the saver entry points, `plan.txt` and
//! `plan.dot` are the module's canonical text and DOT, the g1 function form's stripped op list
//! and variable collections equal TensorFlow's own `export_meta_graph` of that plan
//! (`g8_meta_graph`), and every compiled plan checks clean. One snapshot per spec holds the
//! `saver_def.pbtxt` of both forms and the stripped op names; inputs in
//! `tests/inputs/compile/err/` (and a missing file) fail with one snapshotted error line.

use crate::support::{manifest_path, relative, saveplan, settings};

use std::path::{Path, PathBuf};

use saveplan::analysis::check_module;
use saveplan::compile::{Compilation, Form, compile};
use saveplan::export::{self, Loaded, ProtoMessage};
use saveplan::trace::spec::SpecFile;
use saveplan::trace::trace_flat;
use saveplan_proto::tensorflow as tf;

fn spec_inputs() -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(manifest_path("tests/inputs/trace"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    inputs.sort();
    assert_eq!(inputs.len(), 6, "g1–g6");
    inputs
}

fn read_spec(path: &Path) -> SpecFile {
    SpecFile::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn compiled(path: &Path, form: Form) -> Compilation {
    compile(&read_spec(path), form).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `saveplan compile` into a fresh directory and returns it.
fn compile_cli(spec: &Path, form: &str) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let output = saveplan(&[
        "compile",
        &relative(spec),
        "-o",
        out.path().to_str().unwrap(),
        "--form",
        form,
        "--emit",
        "all",
    ]);
    assert!(
        output.status.success(),
        "{}: {}",
        spec.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.stdout.is_empty() && output.stderr.is_empty());
    out
}

/// The files in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Without `--emit`, `compile` writes what TensorFlow tooling needs and nothing else; `--emit`
/// picks the forms (`saver_def.pbtxt` always), and an unknown form is a one-line error.
#[test]
fn compile_writes_only_what_is_asked() {
    let spec = "tests/inputs/trace/g3_two_tasks.json";
    for (emit, expected) in [
        (None, &["meta_graph.pb", "saver_def.pbtxt"][..]),
        (
            Some("txt,dot"),
            &["plan.dot", "plan.txt", "saver_def.pbtxt"][..],
        ),
        (
            Some("pbtxt,pb"),
            &["meta_graph.pb", "meta_graph.pbtxt", "saver_def.pbtxt"][..],
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec!["compile", spec, "-o", out.path().to_str().unwrap()];
        args.extend(emit.iter().flat_map(|emit| ["--emit", emit]));
        let output = saveplan(&args);
        assert!(output.status.success(), "{emit:?}: {output:?}");
        assert_eq!(file_names(out.path()), expected, "{emit:?}");
    }
    let out = tempfile::tempdir().unwrap();
    let output = saveplan(&[
        "compile",
        spec,
        "-o",
        out.path().to_str().unwrap(),
        "--emit",
        "svg",
    ]);
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid value 'svg'"));
}

/// A DOT of more ops than Graphviz lays out is refused before anything is written; the same
/// plan compiles without `dot`.
#[test]
fn compile_refuses_a_dot_graphviz_cannot_lay_out() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("wide.json");
    let variables: Vec<serde_json::Value> = (0..1500)
        .map(|i| serde_json::json!({"checkpoint_key": format!("v{i}"), "dtype": "float32", "shape": [2]}))
        .collect();
    std::fs::write(
        &spec,
        serde_json::json!({ "variables": variables }).to_string(),
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let output = saveplan(&["compile", spec, "-o", out, "--emit", "pb,dot"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("more than Graphviz lays out (10000)"),
        "{stderr}"
    );
    assert!(!Path::new(out).exists(), "wrote files before refusing");
    let output = saveplan(&["compile", spec, "-o", out, "--emit", "pb,txt"]);
    assert!(output.status.success(), "{output:?}");
}

fn read_meta_graph_def(path: &Path) -> tf::MetaGraphDef {
    match export::read_proto_file(path).unwrap() {
        ProtoMessage::MetaGraphDef(meta) => *meta,
        other => panic!("{}: {:?}", path.display(), other.kind()),
    }
}

/// Every output file is written and agrees with the library's compile of the same spec.
#[test]
fn compile_writes_every_file() {
    for spec in spec_inputs() {
        for (form, form_name) in [(Form::Flat, "flat"), (Form::Function, "function")] {
            if form == Form::Function && read_spec(&spec).options.is_some() {
                continue; // `to_proto()` takes no options.
            }
            let case = format!("{} --form {form_name}", spec.display());
            let out = compile_cli(&spec, form_name);
            let plan = compiled(&spec, form);
            let ours = export::meta_graph_def(&plan.meta_graph).unwrap();
            let binary = read_meta_graph_def(&out.path().join("meta_graph.pb"));
            let text = read_meta_graph_def(&out.path().join("meta_graph.pbtxt"));
            assert_eq!(binary, ours, "{case}: meta_graph.pb");
            assert_eq!(text, ours, "{case}: meta_graph.pbtxt");
            // The files are streamed from the encoding; they are the bytes the whole
            // message gives.
            use prost::Message as _;
            let pb = std::fs::read(out.path().join("meta_graph.pb")).unwrap();
            assert!(pb == ours.encode_to_vec(), "{case}: meta_graph.pb bytes");
            let pbtxt = std::fs::read_to_string(out.path().join("meta_graph.pbtxt")).unwrap();
            assert_eq!(
                pbtxt,
                saveplan_proto::to_text(&ours),
                "{case}: meta_graph.pbtxt text"
            );
            let Loaded::MetaGraph(reread) =
                export::read_graph_file(&out.path().join("meta_graph.pbtxt")).unwrap()
            else {
                panic!("{case}: meta_graph.pbtxt is not a MetaGraphDef");
            };
            assert_eq!(
                export::graph_def(&reread.module).unwrap(),
                export::graph_def(&plan.meta_graph.module).unwrap(),
                "{case}: re-read graph"
            );
            let saver = export::read_proto_file(&out.path().join("saver_def.pbtxt")).unwrap();
            assert_eq!(
                saver,
                ProtoMessage::SaverDef(ours.saver_def.clone().unwrap()),
                "{case}"
            );
            let plan_txt = std::fs::read_to_string(out.path().join("plan.txt")).unwrap();
            assert_eq!(
                plan_txt,
                plan.meta_graph.module.to_string(),
                "{case}: plan.txt"
            );
            let plan_dot = std::fs::read_to_string(out.path().join("plan.dot")).unwrap();
            let dot = saveplan_ir::dot::to_dot(&plan.meta_graph.module);
            assert_eq!(plan_dot, dot, "{case}: plan.dot");
            assert_eq!(check_module(&plan.meta_graph.module), Vec::new(), "{case}");
        }
    }
}

/// The flat form is the traced graph, node for node, plus `save/Identity` and
/// `save/restore_all` at the end; the SaverDef names them and the placeholder.
#[test]
fn flat_form_is_the_traced_graph_plus_saver_ops() {
    for spec in spec_inputs() {
        let parsed = read_spec(&spec);
        let trace = trace_flat(&parsed.trackables().unwrap(), &parsed.options().unwrap()).unwrap();
        let traced = export::graph_def(&trace.module).unwrap();
        let plan = compiled(&spec, Form::Flat);
        let ours = export::graph_def(&plan.meta_graph.module).unwrap();
        let n = traced.node.len();
        assert_eq!(ours.node[..n], traced.node[..], "{}", spec.display());
        let extra: Vec<(&str, &str, Vec<&str>)> = ours.node[n..]
            .iter()
            .map(|node| {
                let inputs = node.input.iter().map(String::as_str).collect();
                (node.name.as_str(), node.op.as_str(), inputs)
            })
            .collect();
        assert_eq!(extra.len(), 2, "{}", spec.display());
        assert_eq!(
            extra[0],
            (
                "save/Identity",
                "Identity",
                vec!["saver_filename", "^MergeV2Checkpoints"]
            )
        );
        assert_eq!(extra[1].0, "save/restore_all");
        let restore_ops: Vec<String> = ours
            .node
            .iter()
            .filter(|node| node.op == "AssignVariableOp" && !node.name.ends_with("/Assign"))
            .map(|node| format!("^{}", node.name))
            .collect();
        assert_eq!(extra[1].2, restore_ops, "{}: restore_all", spec.display());
        let saver_def = plan.meta_graph.saver_def.as_ref().unwrap();
        assert_eq!(
            saver_def.filename_tensor_name,
            trace.saver.filename_tensor_name
        );
        assert_eq!(saver_def.save_tensor_name, "save/Identity:0");
        assert_eq!(saver_def.restore_op_name, "save/restore_all");
    }
}

/// For g1's plan in the function form, the stripped op list, the variable collections and the
/// graph's nodes equal what TensorFlow's `export_meta_graph` wrote (`g8_meta_graph`), apart from
/// the process-dependent function names and `config_proto` and the version strings.
#[test]
fn function_form_meta_graph_matches_tensorflow() {
    let path = manifest_path("tests/fixtures/tf-2.21/graph/g8_meta_graph/meta_graph.pbtxt");
    let theirs = read_meta_graph_def(&path);
    let plan = compiled(
        &manifest_path("tests/inputs/trace/g1_single_cpu.json"),
        Form::Function,
    );
    let ours = export::meta_graph_def(&plan.meta_graph).unwrap();
    let (our_info, their_info) = (
        ours.meta_info_def.as_ref().unwrap(),
        theirs.meta_info_def.as_ref().unwrap(),
    );
    assert_eq!(our_info.stripped_op_list, their_info.stripped_op_list);
    assert_eq!(our_info.tensorflow_version, their_info.tensorflow_version);
    assert!(our_info.tensorflow_git_version.starts_with("saveplan "));
    assert_eq!(ours.collection_def, theirs.collection_def);
    assert_eq!(
        ours.saver_def.as_ref().unwrap().restore_op_name,
        theirs.saver_def.as_ref().unwrap().restore_op_name
    );
    let names = |meta: &tf::MetaGraphDef| -> Vec<(String, String)> {
        let graph = meta.graph_def.as_ref().unwrap();
        graph
            .node
            .iter()
            .map(|n| (n.name.clone(), n.op.clone()))
            .collect()
    };
    assert_eq!(names(&ours), names(&theirs));
}

fn render_saver_defs(spec: &Path) -> String {
    let mut text = String::new();
    for (form, name) in [(Form::Flat, "flat"), (Form::Function, "function")] {
        if form == Form::Function && read_spec(spec).options.is_some() {
            continue;
        }
        let out = compile_cli(spec, name);
        let saver_def = std::fs::read_to_string(out.path().join("saver_def.pbtxt")).unwrap();
        text.push_str(&format!("## {name}: saver_def.pbtxt\n{saver_def}\n"));
        let plan = compiled(spec, form);
        let info = plan.meta_graph.meta_info_def.as_ref().unwrap();
        let ops: Vec<&str> = info
            .stripped_op_list
            .as_ref()
            .unwrap()
            .op
            .iter()
            .map(|op| op.name.as_str())
            .collect();
        text.push_str(&format!(
            "## {name}: stripped_op_list\n{}\n\n",
            ops.join("\n")
        ));
    }
    text
}

#[test]
fn compile_snapshots() {
    settings().bind(|| {
        insta::glob!("..", "inputs/trace/*.json", |path| {
            insta::assert_snapshot!(render_saver_defs(path));
        });
    });
}

/// Asserts that `saveplan compile` fails with exit code 1 and exactly one `error: <file>: …`
/// line, and returns that line.
fn error_line(spec: &str) -> String {
    let out = tempfile::tempdir().unwrap();
    let output = saveplan(&["compile", spec, "-o", out.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{spec}");
    assert!(output.stdout.is_empty(), "{spec}: printed to stdout");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let mut lines = stderr.lines();
    let line = lines.next().expect("an error line").to_owned();
    assert_eq!(lines.next(), None, "more than one line: {stderr}");
    assert!(line.starts_with(&format!("error: {spec}: ")), "{line}");
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "{spec}: wrote files"
    );
    line
}

#[test]
fn compile_errors() {
    settings().bind(|| {
        insta::glob!("..", "inputs/compile/err/*.json", |path| {
            insta::assert_snapshot!(error_line(&relative(path)));
        });
    });
}

#[test]
fn compile_missing_spec_file() {
    let line = error_line("tests/inputs/compile/err/does_not_exist.json");
    assert_eq!(
        line,
        "error: tests/inputs/compile/err/does_not_exist.json: cannot read spec file: No such file or directory (os error 2)"
    );
}

/// An output file that cannot be written (here a directory stands at its path) fails the
/// compile with one line naming that file; the files before it are written whole.
#[test]
fn compile_reports_an_output_it_cannot_write() {
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir(out.path().join("meta_graph.pbtxt")).unwrap();
    let spec = "tests/inputs/trace/g1_single_cpu.json";
    let output = saveplan(&[
        "compile",
        spec,
        "-o",
        out.path().to_str().unwrap(),
        "--emit",
        "pb,pbtxt",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let expected = format!(
        "error: {}: cannot write file: ",
        out.path().join("meta_graph.pbtxt").display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let plan = compiled(&manifest_path(spec), Form::Flat);
    use prost::Message as _;
    let whole = export::meta_graph_def(&plan.meta_graph).unwrap();
    let pb = std::fs::read(out.path().join("meta_graph.pb")).unwrap();
    assert!(pb == whole.encode_to_vec(), "meta_graph.pb is complete");
}

/// `write_encoded_file` picks the encoding by extension and refuses any other.
#[test]
fn encoded_files_need_a_known_extension() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("meta_graph.txt");
    let err = export::write_encoded_file(&path, export::MessageKind::SaverDef, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: unknown extension (expected .pb or .pbtxt)",
            path.display()
        )
    );
    assert!(!path.exists());
    let saver = tf::SaverDef {
        filename_tensor_name: "saver_filename:0".to_owned(),
        ..tf::SaverDef::default()
    };
    use prost::Message as _;
    let text = out.path().join("saver_def.pbtxt");
    export::write_encoded_file(&text, export::MessageKind::SaverDef, &saver.encode_to_vec())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        saveplan_proto::to_text(&saver)
    );
}

/// A MetaGraphDef written from its encoded pieces is the same file, binary or text, as one
/// written from the whole encoding, and the pieces join to `meta_graph_def`'s encoding.
#[test]
fn encoded_pieces_write_the_same_files_as_the_whole_message() {
    use prost::Message as _;
    let out = tempfile::tempdir().unwrap();
    let kind = export::MessageKind::MetaGraphDef;
    for spec in spec_inputs() {
        let plan = compiled(&spec, Form::Flat);
        let pieces = export::encode_meta_graph_def_pieces(&plan.meta_graph).unwrap();
        assert!(pieces.len() >= 3, "{}", spec.display());
        let whole = export::meta_graph_def(&plan.meta_graph)
            .unwrap()
            .encode_to_vec();
        assert!(pieces.concat() == whole, "{}", spec.display());
        for name in ["meta_graph.pb", "meta_graph.pbtxt"] {
            let (from_pieces, from_whole) =
                (out.path().join("a").join(name), out.path().join(name));
            std::fs::create_dir_all(out.path().join("a")).unwrap();
            export::write_encoded_pieces(&from_pieces, kind, &pieces).unwrap();
            export::write_encoded_file(&from_whole, kind, &whole).unwrap();
            assert!(
                std::fs::read(&from_pieces).unwrap() == std::fs::read(&from_whole).unwrap(),
                "{}: {name}",
                spec.display()
            );
        }
    }
}
