//! `saveplan compile`: trace a spec file, verify the plan and write its TensorFlow files.
//!
//! By default it writes what TensorFlow tooling needs, `meta_graph.pb` and `saver_def.pbtxt`;
//! `--emit` (like rustc's) names the forms to write instead: `pb`, `pbtxt` (the MetaGraphDef in
//! text format), `txt` (canonical IR text), `dot` (Graphviz), or `all`. `saver_def.pbtxt` is
//! always written. A DOT file of more ops than Graphviz lays out ([`MAX_DOT_OPS`]) is refused
//! before anything is written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args as ClapArgs, ValueEnum};
use saveplan::compile::{Compilation, Form};
use saveplan::export::{self, MessageKind, ProtoMessage};
use std::io::Write as _;

use super::common::{compile_file, free_at_exit};
use super::output::one_line;

/// The most ops a `plan.dot` may draw: Graphviz's `dot` takes minutes to hours beyond this.
pub const MAX_DOT_OPS: usize = 10_000;

/// Compile a spec file into a MetaGraphDef and SaverDef (and, with `--emit`, text forms).
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The spec file (JSON: `variables` and `options`, see `docs/spec-format.md`).
    spec: PathBuf,
    /// The output directory (created if missing).
    #[arg(short, long)]
    output: PathBuf,
    /// The graph form: the flat graph `saver.save` builds, or `to_proto()`'s functions.
    #[arg(long, value_enum, default_value_t = FormArg::Flat)]
    form: FormArg,
    /// What to write besides `saver_def.pbtxt`, comma-separated: `pb` (meta_graph.pb), `pbtxt`
    /// (meta_graph.pbtxt), `txt` (plan.txt, canonical IR), `dot` (plan.dot, Graphviz; at most
    /// 10,000 ops), or `all`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pb")]
    emit: Vec<Emit>,
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
    let phases = Phases::new();
    phases.enter("tracing and verifying the plan");
    let plan = compile_file(&args.spec, form)?;
    let n_ops = plan.meta_graph.module.graph.len();
    if emit(Emit::Dot) && n_ops > MAX_DOT_OPS {
        anyhow::bail!(
            "{}: plan.dot: the plan has {n_ops} ops, more than Graphviz lays out ({MAX_DOT_OPS}); \
             leave `dot` out of --emit",
            args.spec.display()
        );
    }
    write_outputs(&args.output, &plan, &phases, emit)?;
    free_at_exit(plan);
    Ok(ExitCode::SUCCESS)
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
    saveplan::bundle::check_local(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|err| one_line(&err))
        .with_context(|| format!("{}: cannot create output directory", dir.display()))?;
    if emit(Emit::Pb) || emit(Emit::Pbtxt) {
        // The MetaGraphDef is encoded node by node, in pieces written one after the other (or
        // printed from their encoding): building its protobuf messages would take gigabytes
        // for a large plan, and joining the pieces another copy of it.
        phases.enter("encoding the MetaGraphDef");
        let meta = export::encode_meta_graph_def_pieces(&plan.meta_graph)
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
    let module = &plan.meta_graph.module;
    if emit(Emit::Txt) {
        phases.enter("writing plan.txt");
        write_text(&dir.join("plan.txt"), |out| write!(out, "{module}"))?;
    }
    if emit(Emit::Dot) {
        phases.enter("writing plan.dot");
        write_text(&dir.join("plan.dot"), |out| {
            out.write_all(saveplan_ir::dot::to_dot(module).as_bytes())
        })?;
    }
    Ok(())
}

/// Writes a text file through a buffer.
fn write_text(
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
