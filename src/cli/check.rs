//! `saveplan check`: verify a plan before any IO and report every problem, one per line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use saveplan::analysis::{check_module, check_saver_names};
use saveplan::checkpoint::ObjectSpec;
use saveplan::compile::Form;
use saveplan::export::{self, Loaded};
use saveplan_ir::{DType, Library, Module, SaverDef};

use super::common::{compile_file, free_at_exit};
use super::output::{escape_controls, one_line, outln};

/// Check a plan: a spec file (`.json`, checked in its flat form), an object spec (its tree,
/// options, dtypes and shapes) or a GraphDef, MetaGraphDef or FunctionDef (`.pb` / `.pbtxt`).
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The file to check.
    file: PathBuf,
}

/// Runs `saveplan check`: prints `FILE: <scope>: <problem>` per finding and exits 1 if there
/// is any, or prints `FILE: ok` and exits 0.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(text) = object_spec_text(&args.file)? {
        return check_object_spec(&args.file, &text);
    }
    let (module, saver_def) = read_plan(&args.file)?;
    let mut findings = check_module(&module);
    if let Some(saver_def) = &saver_def {
        findings.extend(check_saver_names(&module, saver_def));
    }
    free_at_exit(module);
    let file = args.file.display();
    if findings.is_empty() {
        outln!("{file}: ok")?;
        return Ok(ExitCode::SUCCESS);
    }
    for finding in &findings {
        // A finding quotes names and devices of the file, which may hold control characters.
        outln!("{file}: {}", escape_controls(&finding.to_string()))?;
    }
    Ok(ExitCode::FAILURE)
}

/// The text of `path` when it is an object spec (`.json` with `objects`).
fn object_spec_text(path: &Path) -> anyhow::Result<Option<String>> {
    if path.extension().is_none_or(|ext| ext != "json") {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(ObjectSpec::is_object_spec(&text).then_some(text))
}

/// Checks an object spec as `save OBJSPEC` would take it, before any value is read: its tree
/// (paths, aliases, slots), options, dtypes and shapes. Prints every problem, one per line,
/// or `FILE: ok (N objects, M values)`.
fn check_object_spec(path: &Path, text: &str) -> anyhow::Result<ExitCode> {
    let file = path.display();
    let spec = ObjectSpec::parse(text).map_err(|err| one_line(&err))?;
    let mut problems = Vec::new();
    for (index, entry) in spec.objects.iter().enumerate() {
        if !entry.holds_value() {
            continue;
        }
        if DType::parse(&entry.dtype).is_none_or(|dtype| dtype.name().is_none()) {
            problems.push(format!("entry {index}: unknown dtype `{}`", entry.dtype));
        }
        match entry.dims(index) {
            Ok(shape) if shape.iter().any(|&dim| dim < 0) => {
                problems.push(format!("entry {index}: invalid shape {shape:?}"));
            }
            Ok(_) => {}
            Err(err) => problems.push(err.to_string()),
        }
    }
    if let Err(err) = spec.trace_options() {
        problems.push(one_line(&err).to_string());
    }
    let objects = match spec.object_graph() {
        Ok((graph, keys)) => Some((
            graph.nodes().len(),
            keys.iter().filter(|key| !key.is_empty()).count(),
        )),
        Err(err) => {
            problems.push(one_line(&err).to_string());
            None
        }
    };
    match objects {
        Some((nodes, values)) if problems.is_empty() => {
            outln!("{file}: ok ({nodes} objects, {values} values)")?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            for problem in &problems {
                outln!("{file}: {}", escape_controls(problem))?;
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The module a file holds, with its `SaverDef` if it has one; a lone function becomes the
/// library of an empty module.
fn read_plan(path: &Path) -> anyhow::Result<(Module, Option<SaverDef>)> {
    if path.extension().is_some_and(|ext| ext == "json") {
        let meta_graph = compile_file(path, Form::Flat)?.meta_graph;
        return Ok((meta_graph.module, meta_graph.saver_def));
    }
    let loaded = export::read_graph_file(path).map_err(|err| one_line(&err))?;
    Ok(match loaded {
        Loaded::Graph(module) => (module, None),
        Loaded::MetaGraph(meta_graph) => (meta_graph.module, meta_graph.saver_def),
        Loaded::Function(function) => {
            let library = Library {
                functions: vec![function],
                ..Library::default()
            };
            let module = Module {
                library,
                ..Module::default()
            };
            (module, None)
        }
        Loaded::Saver(_) => bail!(
            "{}: expected a spec, GraphDef, MetaGraphDef or FunctionDef, found a SaverDef",
            path.display()
        ),
    })
}
