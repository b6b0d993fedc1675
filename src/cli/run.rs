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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use saveplan::export::{Loaded, read_graph_file};
use saveplan::session::{Plans, Session, SessionOptions, infer_targets, meta_graph_targets};
use saveplan_ir::{Module, SaverNames};

use super::common::{
    BackendArg, Cluster, ClusterArg, free_at_exit, free_session_at_exit, in_cluster,
    restore_to_file, save, session_error,
};
use super::values::{checkpoint_prefix, prepare_out, read_values_beside, values_or_earlier_error};

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
    /// Where the restored values are written: a `.safetensors` file, or any other name as a
    /// checkpoint prefix (string tensors kept). Missing folders are created.
    #[arg(long, value_name = "FILE|PREFIX")]
    out: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArg,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Runs `saveplan run`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    in_cluster(args.cluster.join()?, |cluster| run_graph(&args, cluster))
}

/// `saveplan run`: this process's task of it, with `cluster`.
fn run_graph(args: &Args, cluster: Option<&Cluster>) -> anyhow::Result<std::process::ExitCode> {
    let joined = |session: Session| -> anyhow::Result<Session> {
        Ok(match cluster {
            Some(cluster) => session.with_cluster(Arc::clone(cluster.get()?)),
            None => session,
        })
    };
    let leave = |session: Session, loaded: Loaded| {
        free_session_at_exit(session);
        free_at_exit(loaded);
    };
    // The job is known before the graph is read: a bad combination costs no loading, and the
    // session compiles only the plan the job runs.
    let job = match (&args.save, &args.values, &args.restore, &args.out) {
        (Some(prefix), Some(values), None, _) => Job::Save { prefix, values },
        (None, _, Some(prefix), Some(out)) => Job::Restore { prefix, out },
        _ => bail!("give either --save P --values FILE or --restore P --out FILE"),
    };
    let options = SessionOptions {
        task: cluster.and_then(Cluster::task_hint),
        plans: match job {
            Job::Save { .. } => Plans::SaveOnly,
            Job::Restore { .. } => Plans::RestoreOnly,
        },
        ..args.backend.options()?
    };
    // The graph and its targets; the session is made of them once the values (if any) are in.
    let load = || -> anyhow::Result<(Loaded, SaverNames)> {
        let loaded = read_graph_file(&args.graph)?;
        let module = graph_of(&loaded, &args.graph)?;
        let targets = match (&loaded, &args.saver_def) {
            (_, Some(path)) => saver_def_targets(path)?,
            (Loaded::MetaGraph(meta), None) => {
                meta_graph_targets(meta).with_context(|| format!("{}", args.graph.display()))?
            }
            (_, None) => {
                infer_targets(module).with_context(|| format!("{}", args.graph.display()))?
            }
        };
        Ok((loaded, targets))
    };
    match job {
        Job::Save { prefix, values } => {
            // The values file is read while the graph loads, and put into the variables while
            // the save plan compiles.
            let (loaded, read) = read_values_beside(values, load);
            let (loaded, targets) = loaded?;
            let module = graph_of(&loaded, &args.graph)?;
            let read = values_or_earlier_error(read, || {
                Session::new(module, targets.clone(), options)
                    .with_context(|| format!("{}", args.graph.display()))
            })?;
            let session = Session::new_with_values(module, targets, options, read)
                .map_err(|err| session_error(err, &args.graph, values))?;
            let session = joined(session)?;
            save(&session, prefix)?;
            leave(session, loaded);
        }
        Job::Restore { prefix, out } => {
            prepare_out(out)?;
            let (loaded, targets) = load()?;
            let session = Session::new(graph_of(&loaded, &args.graph)?, targets, options)
                .with_context(|| format!("{}", args.graph.display()))?;
            let session = joined(session)?;
            restore_to_file(&session, &checkpoint_prefix(Path::new(prefix))?, out)?;
            leave(session, loaded);
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The graph of a loaded GraphDef or MetaGraphDef read from `path`; other messages are
/// refused.
fn graph_of<'a>(loaded: &'a Loaded, path: &Path) -> anyhow::Result<&'a Module> {
    match loaded {
        Loaded::MetaGraph(meta) => Ok(&meta.module),
        Loaded::Graph(module) => Ok(module),
        Loaded::Function(_) | Loaded::Saver(_) => {
            bail!("{}: not a GraphDef or MetaGraphDef", path.display())
        }
    }
}

/// What `saveplan run` was asked to do.
enum Job<'a> {
    /// Save the values of file `values` to `prefix`.
    Save { prefix: &'a str, values: &'a Path },
    /// Restore `prefix` and write the values to `out`.
    Restore { prefix: &'a str, out: &'a Path },
}

/// The targets of a SaverDef file.
fn saver_def_targets(path: &std::path::Path) -> anyhow::Result<SaverNames> {
    match read_graph_file(path)? {
        Loaded::Saver(saver) => Ok(saver.names()),
        _ => bail!("{}: not a SaverDef", path.display()),
    }
}
