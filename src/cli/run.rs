//! `saveplan run GRAPH (--save P --values FILE | --restore P --out FILE)`: executes the save or
//! restore plan of a TensorFlow graph file, ours or TensorFlow's.
//!
//! The plan's entry points come from the file's `SaverDef` (a MetaGraphDef's `saver_def`, or
//! `--saver-def FILE` next to a GraphDef): `filename_tensor_name` is fed with the prefix,
//! `save_tensor_name` fetched to save and `restore_op_name` run to restore. A GraphDef without
//! one is taken as a flat plan: the save target is its one `MergeV2Checkpoints` (or `SaveV2`),
//! the prefix the string placeholder it depends on, and the restore targets the
//! `AssignVariableOp`s its `RestoreV2` feeds.
//!
//! Values are keyed by checkpoint key and mapped to the graph's variables through the plan
//! itself: each key of a `SaveV2`'s `tensor_names` is bound to the variable its saved tensor
//! reads (through `Identity`, `Slice` and function arguments back to a `ReadVariableOp` of a
//! `VarHandleOp`, or to a TF1 `VariableV2`), and each `RestoreV2` output to the variables the
//! `AssignVariableOp`s (TF1: `Assign`s) it feeds write.

use std::path::PathBuf;

use anyhow::{Context, bail};
use saveplan::export::{Loaded, read_graph_file};
use saveplan::session::{Plans, Session, SessionOptions, infer_targets, meta_graph_targets};
use saveplan_ir::SaverNames;

use super::common::{BackendArg, free_at_exit, restore_to_file, save};
use super::values::read_values_during;

/// Arguments of `saveplan run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A MetaGraphDef with a saver_def (`.pb`, `.pbtxt`, or the `.meta` file
    /// `tf.compat.v1.train.Saver` writes), or a GraphDef (`.pb` or `.pbtxt`).
    graph: PathBuf,
    /// The SaverDef to use with a GraphDef (`.pb` or `.pbtxt`).
    #[arg(long, value_name = "FILE")]
    saver_def: Option<PathBuf>,
    /// Save to this checkpoint prefix (needs `--values`).
    #[arg(
        long,
        value_name = "P",
        conflicts_with = "restore",
        requires = "values"
    )]
    save: Option<String>,
    /// The values to save: a `.safetensors` file keyed by checkpoint key, or a checkpoint
    /// prefix (a directory or `checkpoint` state file: its latest checkpoint).
    #[arg(long, value_name = "FILE")]
    values: Option<PathBuf>,
    /// Restore from this checkpoint prefix (needs `--out`), or from the latest checkpoint of
    /// a directory or `checkpoint` state file.
    #[arg(long, value_name = "P", requires = "out")]
    restore: Option<String>,
    /// The `.safetensors` file the restored values are written to.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArg,
}

/// Runs `saveplan run`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let plans = match (&args.save, &args.restore) {
        (Some(_), None) => Plans::SaveOnly,
        (None, Some(_)) => Plans::RestoreOnly,
        _ => Plans::Both,
    };
    let options = SessionOptions {
        plans,
        ..args.backend.options()?
    };
    let values_path = match (&args.save, &args.values, &args.restore) {
        (Some(_), Some(values), None) => Some(values.as_path()),
        _ => None,
    };
    let build = || -> anyhow::Result<(Loaded, Session)> {
        let loaded = read_graph_file(&args.graph)?;
        let session = match &loaded {
            Loaded::MetaGraph(meta) => {
                let targets = match &args.saver_def {
                    Some(path) => saver_def_targets(path)?,
                    None => meta_graph_targets(meta)
                        .with_context(|| format!("{}", args.graph.display()))?,
                };
                Session::new(&meta.module, targets, options)
            }
            Loaded::Graph(module) => {
                let targets = match &args.saver_def {
                    Some(path) => saver_def_targets(path)?,
                    None => infer_targets(module)
                        .with_context(|| format!("{}", args.graph.display()))?,
                };
                Session::new(module, targets, options)
            }
            Loaded::Function(_) | Loaded::Saver(_) => {
                bail!("{}: not a GraphDef or MetaGraphDef", args.graph.display())
            }
        }
        .with_context(|| format!("{}", args.graph.display()))?;
        Ok((loaded, session))
    };
    let ((loaded, session), values) = match values_path {
        Some(path) => {
            let (built, values) = read_values_during(path, build)?;
            (built, Some((path, values)))
        }
        None => (build()?, None),
    };
    match (&args.save, values, &args.restore, &args.out) {
        (Some(prefix), Some((path, values)), None, _) => {
            session
                .assign(values)
                .with_context(|| format!("{}", path.display()))?;
            save(&session, prefix)?;
        }
        (None, _, Some(prefix), Some(out)) => restore_to_file(&session, prefix, out)?,
        _ => bail!("give either --save P --values FILE or --restore P --out FILE"),
    }
    free_at_exit((session, loaded));
    Ok(std::process::ExitCode::SUCCESS)
}

/// The targets of a SaverDef file.
fn saver_def_targets(path: &std::path::Path) -> anyhow::Result<SaverNames> {
    match read_graph_file(path)? {
        Loaded::Saver(saver) => Ok(saver.names()),
        _ => bail!("{}: not a SaverDef", path.display()),
    }
}
