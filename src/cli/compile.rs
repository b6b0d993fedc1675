//! `saveplan compile`: trace a spec file, verify the plan and write its TensorFlow files.
//!
//! By default it writes what TensorFlow tooling needs, `meta_graph.pb` and `saver_def.pbtxt`;
//! `--emit` (like rustc's) names the forms to write instead: `pb`, `pbtxt` (the MetaGraphDef in
//! text format), `txt` (canonical IR text), `dot` (Graphviz), or `all`. `saver_def.pbtxt` is
//! always written. A DOT file of more ops than Graphviz lays out ([`MAX_DOT_OPS`]) is refused
//! before anything is written. `--partition` also writes the save and restore runs split by
//! task ([`saveplan::partition`]), one GraphDef per task under `partitions/<run>/`.
//!
//! An object spec (a JSON object with an `objects` key) compiles to the TF1 graph-mode graph
//! of `tf.train.Checkpoint(**children).write(P)` and `read(P).run_restore_ops()`, its
//! variables created as `tf.Variable(np.zeros(shape, dtype))`
//! ([`saveplan::checkpoint::Checkpoint::graph_mode`]): `meta_graph.pb` (with the `variables`
//! and `trainable_variables` collections `export_meta_graph` writes, and no SaverDef: no
//! `tf.train.Saver` is made), `object_graph.pb` (the serialized `TrackableObjectGraph` the
//! write feeds) and `entry_points.json`, the names a session runs ([`EntryPoints`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args as ClapArgs, ValueEnum};
use saveplan::checkpoint::{GraphModeWrite, ObjectSpec};
use saveplan::compile::{Compilation, Form};
use saveplan::export::{self, MessageKind, MetaGraph, ProtoMessage, VariableEntry};
use saveplan::partition::{PartitionOptions, SaverRun, Task, partition};
use std::io::Write as _;

use super::common::{compile_file, free_at_exit};
use super::output::one_line;

/// The most ops a `plan.dot` may draw: Graphviz's `dot` takes minutes to hours beyond this.
pub const MAX_DOT_OPS: usize = 10_000;

/// Compile a spec file into a MetaGraphDef and SaverDef (and, with `--emit`, text forms), or an
/// object spec into the graph-mode write and restore of its `tf.train.Checkpoint`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The spec file (JSON: `variables` and `options`, see `docs/spec-format.md`), or an
    /// object spec (JSON: `objects`), compiled to the TF1 graph-mode write and restore of its
    /// `tf.train.Checkpoint` (with `object_graph.pb` and `entry_points.json`).
    spec: PathBuf,
    /// The output directory (created if missing).
    #[arg(short, long)]
    output: PathBuf,
    /// The graph form: the flat graph `saver.save` builds, or `to_proto()`'s functions (plain
    /// specs only).
    #[arg(long, value_enum, default_value_t = FormArg::Flat)]
    form: FormArg,
    /// What to write besides `saver_def.pbtxt` (for an object spec: `object_graph.pb` and
    /// `entry_points.json`), comma-separated: `pb` (meta_graph.pb), `pbtxt`
    /// (meta_graph.pbtxt), `txt` (plan.txt, canonical IR), `dot` (plan.dot, Graphviz; at most
    /// 10,000 ops), or `all`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pb")]
    emit: Vec<Emit>,
    /// Also write the plan split by task, as TensorFlow's distributed runtime runs it: for the
    /// save run and the restore run, one GraphDef per task (job, replica, task) with a
    /// send/receive pair on every edge between tasks, as
    /// `partitions/{save,restore}/<job>-<replica>-<task>.pb` (`.pbtxt` and `.txt`, canonical
    /// IR, as `--emit` asks). Plain specs in the flat form only.
    #[arg(long)]
    partition: bool,
    /// With `--partition`: the task the session runs on (where the prefix is fed and ops
    /// with no task run), e.g. `/job:worker/replica:0/task:0`; by default the first task the
    /// plan names.
    #[arg(long, value_name = "TASK")]
    session_task: Option<String>,
}

/// An output form of `--emit`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Emit {
    /// `meta_graph.pb`.
    Pb,
    /// `meta_graph.pbtxt`.
    Pbtxt,
    /// `plan.txt`.
    Txt,
    /// `plan.dot`.
    Dot,
    /// Every form.
    All,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum FormArg {
    Flat,
    Function,
}

/// Runs `saveplan compile`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let form = match args.form {
        FormArg::Flat => Form::Flat,
        FormArg::Function => Form::Function,
    };
    let emit = |form: Emit| args.emit.contains(&form) || args.emit.contains(&Emit::All);
    if args.session_task.is_some() && !args.partition {
        anyhow::bail!("--session-task places a partitioned plan; add --partition");
    }
    if args.partition && matches!(args.form, FormArg::Function) {
        anyhow::bail!(
            "{}: --partition splits the flat form; leave out --form function",
            args.spec.display()
        );
    }
    if let Some(spec) = object_spec(&args.spec)? {
        if args.partition {
            anyhow::bail!(
                "{}: --partition splits the plan of a plain spec, not an object spec",
                args.spec.display()
            );
        }
        if matches!(args.form, FormArg::Function) {
            anyhow::bail!(
                "{}: an object spec compiles to the graph-mode graph only; leave out --form",
                args.spec.display()
            );
        }
        return compile_objects(&args, &spec, emit);
    }
    let phases = Phases::new();
    phases.enter("tracing and verifying the plan");
    let plan = compile_file(&args.spec, form)?;
    check_dot_size(&args.spec, &plan.meta_graph.module, emit(Emit::Dot))?;
    write_outputs(&args.output, &plan, &phases, emit)?;
    if args.partition {
        write_partitions(
            &args.output,
            &plan,
            args.session_task.as_deref(),
            &phases,
            emit,
        )?;
    }
    free_at_exit(plan);
    Ok(ExitCode::SUCCESS)
}

/// Refuses a `plan.dot` of more ops than Graphviz lays out, before anything is written.
fn check_dot_size(spec: &Path, module: &saveplan_ir::Module, dot: bool) -> anyhow::Result<()> {
    let n_ops = module.graph.len();
    if dot && n_ops > MAX_DOT_OPS {
        anyhow::bail!(
            "{}: plan.dot: the plan has {n_ops} ops, more than Graphviz lays out ({MAX_DOT_OPS}); \
             leave `dot` out of --emit",
            spec.display()
        );
    }
    Ok(())
}

/// The object spec `path` holds, if it is one (`.json` with `objects`); other files, and
/// files that cannot be read, are left to the plain spec's path and its errors.
fn object_spec(path: &Path) -> anyhow::Result<Option<ObjectSpec>> {
    if path.extension().is_none_or(|ext| ext != "json") {
        return Ok(None);
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    if !ObjectSpec::is_object_spec(&text) {
        return Ok(None);
    }
    let spec = ObjectSpec::parse(&text)
        .map_err(|err| one_line(&err))
        .with_context(|| path.display().to_string())?;
    Ok(Some(spec))
}

/// The names a TF1 session runs the compiled graph of an object spec by, written as
/// `entry_points.json`.
#[derive(Debug, serde::Serialize)]
struct EntryPoints<'a> {
    /// The op that initializes every variable (`global_variables_initializer()`).
    init: &'a str,
    /// The write: run `save_tensor` (it returns the prefix) feeding `prefix_tensor` with the
    /// prefix and `object_graph_tensor` with the bytes of `object_graph_file`.
    write: WriteEntry<'a>,
    /// The restore: run `restore_ops` feeding `prefix_tensor` with the prefix.
    read: ReadEntry<'a>,
    /// Per checkpoint key, the variable (its `VarHandleOp`) holding it.
    variables: &'a std::collections::BTreeMap<String, String>,
}

/// The write's tensors in [`EntryPoints`].
#[derive(Debug, serde::Serialize)]
struct WriteEntry<'a> {
    prefix_tensor: &'a str,
    object_graph_tensor: &'a str,
    object_graph_file: &'a str,
    save_tensor: &'a str,
}

/// The restore's tensor and ops in [`EntryPoints`].
#[derive(Debug, serde::Serialize)]
struct ReadEntry<'a> {
    prefix_tensor: &'a str,
    restore_ops: Vec<&'a str>,
}

/// Compiles an object spec: its fresh checkpoint's graph-mode write and read.
fn compile_objects(
    args: &Args,
    spec: &ObjectSpec,
    emit: impl Fn(Emit) -> bool,
) -> anyhow::Result<ExitCode> {
    let in_spec = || args.spec.display().to_string();
    let phases = Phases::new();
    phases.enter("tracing the graph-mode plan");
    let checkpoint = (spec.fresh_checkpoint())
        .map_err(|err| one_line(&err))
        .with_context(in_spec)?;
    let write = (checkpoint.graph_mode())
        .map_err(|err| one_line(&err))
        .with_context(in_spec)?;
    check_dot_size(&args.spec, write.module(), emit(Emit::Dot))?;
    let meta_graph = object_meta_graph(&write);
    let dir = &args.output;
    create_output_dir(dir)?;
    write_meta_graph(dir, &meta_graph, &phases, &emit)?;
    let object_graph = export::object_graph::encode(write.object_graph());
    write_file(&dir.join(OBJECT_GRAPH_FILE), |out| {
        out.write_all(&object_graph)
    })?;
    let entry_points = EntryPoints {
        init: write.init_op(),
        write: WriteEntry {
            prefix_tensor: write.prefix_tensor(),
            object_graph_tensor: write.object_graph_tensor(),
            object_graph_file: OBJECT_GRAPH_FILE,
            save_tensor: write.save_tensor(),
        },
        read: ReadEntry {
            prefix_tensor: write.restore_prefix_tensor(),
            restore_ops: write.restore_ops().values().map(String::as_str).collect(),
        },
        variables: write.variables(),
    };
    write_file(&dir.join("entry_points.json"), |out| {
        serde_json::to_writer_pretty(&mut *out, &entry_points)?;
        out.write_all(b"\n")
    })?;
    write_module_text(dir, &meta_graph.module, &phases, &emit)?;
    Ok(ExitCode::SUCCESS)
}

/// The file the serialized object graph is written to, beside `meta_graph.pb`.
const OBJECT_GRAPH_FILE: &str = "object_graph.pb";

/// The MetaGraphDef of a graph-mode write: its graph, op list and variables collections (in
/// the order the graph creates the variables), without a SaverDef.
fn object_meta_graph(write: &GraphModeWrite) -> MetaGraph {
    let graph = &write.module().graph;
    let mut handles: Vec<_> = (write.variables().values())
        .filter_map(|name| graph.find(name).map(|id| (id, name)))
        .collect();
    handles.sort();
    let variables: Vec<VariableEntry> = (handles.into_iter())
        .map(|(_, name)| VariableEntry {
            variable_name: format!("{name}:0"),
            initial_value_name: format!("{name}/Initializer/initial_value:0"),
            initializer_name: format!("{name}/Assign"),
            snapshot_name: format!("{name}/Read/ReadVariableOp:0"),
            save_slice: None,
        })
        .collect();
    export::assemble_meta_graph(write.module().clone(), None, &variables)
}

/// A spinner on stderr naming the current phase of a compile, when stderr is a terminal
/// (large plans take seconds to write).
struct Phases(Option<indicatif::ProgressBar>);

impl Phases {
    fn new() -> Phases {
        use std::io::IsTerminal as _;
        if !std::io::stderr().is_terminal() {
            return Phases(None);
        }
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        Phases(Some(spinner))
    }

    fn enter(&self, phase: impl Into<std::borrow::Cow<'static, str>>) {
        if let Some(spinner) = &self.0 {
            spinner.set_message(phase);
        }
    }

    fn finish(&self) {
        if let Some(spinner) = &self.0 {
            spinner.finish_and_clear();
        }
    }
}

impl Drop for Phases {
    /// Clears the spinner on every exit, errors included, so an error line stands alone.
    fn drop(&mut self) {
        self.finish();
    }
}

/// Writes `saver_def.pbtxt` and each form `emit` accepts into `dir`.
fn write_outputs(
    dir: &Path,
    plan: &Compilation,
    phases: &Phases,
    emit: impl Fn(Emit) -> bool,
) -> anyhow::Result<()> {
    create_output_dir(dir)?;
    write_meta_graph(dir, &plan.meta_graph, phases, &emit)?;
    let saver_def = plan
        .meta_graph
        .saver_def
        .as_ref()
        .map(export::saver_def)
        .unwrap_or_default();
    export::write_proto_file(
        &dir.join("saver_def.pbtxt"),
        &ProtoMessage::SaverDef(saver_def),
    )
    .map_err(|err| one_line(&err))?;
    write_module_text(dir, &plan.meta_graph.module, phases, &emit)
}

/// Writes the save run's and the restore run's partitions into `dir/partitions/<run>/`, one
/// file per task and form `emit` accepts (`pb`, `pbtxt`, `txt`), the session on
/// `session_task` (a task name) if given.
fn write_partitions(
    dir: &Path,
    plan: &Compilation,
    session_task: Option<&str>,
    phases: &Phases,
    emit: impl Fn(Emit) -> bool,
) -> anyhow::Result<()> {
    let module = &plan.meta_graph.module;
    let Some(saver) = &plan.meta_graph.saver_def else {
        anyhow::bail!("the compiled plan has no SaverDef to partition");
    };
    let client: Option<Task> = (session_task.map(str::parse))
        .transpose()
        .map_err(|err| one_line(&err))
        .context("--session-task")?;
    let verified = saveplan_ir::verify_module(module).map_err(|err| one_line(&err))?;
    for run in SaverRun::ALL {
        phases.enter(format!("partitioning the {} run", run.name()));
        let options = PartitionOptions::for_saver(saver, run, client.clone());
        let parts = partition(verified, &options)
            .map_err(|err| one_line(&err))
            .with_context(|| format!("cannot partition the {} run", run.name()))?;
        let run_dir = dir.join("partitions").join(run.name());
        std::fs::create_dir_all(&run_dir)
            .map_err(|err| one_line(&err))
            .with_context(|| format!("{}: cannot create directory", run_dir.display()))?;
        for part in &parts.partitions {
            let stem = part.task.file_stem();
            if emit(Emit::Pb) || emit(Emit::Pbtxt) {
                let bytes = export::encode_graph_def(&part.module)
                    .map_err(|err| one_line(&err))
                    .with_context(|| format!("cannot export the partition of {}", part.task))?;
                for (form, ext) in [(Emit::Pb, "pb"), (Emit::Pbtxt, "pbtxt")] {
                    if emit(form) {
                        let path = run_dir.join(format!("{stem}.{ext}"));
                        export::write_encoded_file(&path, MessageKind::GraphDef, &bytes)
                            .map_err(|err| one_line(&err))?;
                    }
                }
            }
            if emit(Emit::Txt) {
                let path = run_dir.join(format!("{stem}.txt"));
                write_file(&path, |out| write!(out, "{}", part.module))?;
            }
        }
    }
    Ok(())
}

/// Creates the output directory `dir` (a local path) if it is missing.
fn create_output_dir(dir: &Path) -> anyhow::Result<()> {
    saveplan::bundle::check_local(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|err| one_line(&err))
        .with_context(|| format!("{}: cannot create output directory", dir.display()))
}

/// Writes `meta_graph.pb` and `meta_graph.pbtxt` into `dir`, as `emit` asks.
fn write_meta_graph(
    dir: &Path,
    meta_graph: &MetaGraph,
    phases: &Phases,
    emit: impl Fn(Emit) -> bool,
) -> anyhow::Result<()> {
    if emit(Emit::Pb) || emit(Emit::Pbtxt) {
        // The MetaGraphDef is encoded node by node, in pieces written one after the other (or
        // printed from their encoding): building its protobuf messages would take gigabytes
        // for a large plan, and joining the pieces another copy of it.
        phases.enter("encoding the MetaGraphDef");
        let meta = export::encode_meta_graph_def_pieces(meta_graph)
            .map_err(|err| one_line(&err))
            .context("cannot export the plan")?;
        for (form, name) in [
            (Emit::Pb, "meta_graph.pb"),
            (Emit::Pbtxt, "meta_graph.pbtxt"),
        ] {
            if emit(form) {
                phases.enter(format!("writing {name}"));
                export::write_encoded_pieces(&dir.join(name), MessageKind::MetaGraphDef, &meta)
                    .map_err(|err| one_line(&err))?;
            }
        }
    }
    Ok(())
}

/// Writes `plan.txt` and `plan.dot` of `module` into `dir`, as `emit` asks.
fn write_module_text(
    dir: &Path,
    module: &saveplan_ir::Module,
    phases: &Phases,
    emit: impl Fn(Emit) -> bool,
) -> anyhow::Result<()> {
    if emit(Emit::Txt) {
        phases.enter("writing plan.txt");
        write_file(&dir.join("plan.txt"), |out| write!(out, "{module}"))?;
    }
    if emit(Emit::Dot) {
        phases.enter("writing plan.dot");
        write_file(&dir.join("plan.dot"), |out| {
            out.write_all(saveplan_ir::dot::to_dot(module).as_bytes())
        })?;
    }
    Ok(())
}

/// Writes a file through a buffer.
fn write_file(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let result = std::fs::File::create(path).and_then(|file| {
        let mut out = std::io::BufWriter::new(file);
        write(&mut out)?;
        out.flush()
    });
    result
        .map_err(|err| one_line(&err))
        .with_context(|| format!("{}: cannot write file", path.display()))
}
