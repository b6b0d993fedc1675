//! `saveplan save SPEC --values FILE --prefix P`: traces a spec, puts the values into its
//! variables and runs the save plan, writing a TensorFlow checkpoint at the prefix.
//!
//! Values are keyed by checkpoint key. A partitioned variable (several spec entries with one
//! key and slice specs) takes the full tensor under its key; the plan saves its slices.
//!
//! An object spec (a JSON object with an `objects` key, see
//! [`saveplan::checkpoint::ObjectSpec`]) writes what `tf.train.Checkpoint(**children).write(P)`
//! writes for the tree it describes: the variables and the object graph, eagerly (the mode
//! and backend options do not apply). With `--cluster`, each process writes its task's
//! shard, the object graph with the default task's (`/job:localhost/replica:0/task:0`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use saveplan::checkpoint::{OBJECT_GRAPH_KEY, ObjectSpec};
use saveplan::session::{Plans, Session, SessionOptions};

use super::common::{
    Cluster, ClusterArg, ModeArgs, free_at_exit, free_session_at_exit, in_cluster, prefault, save,
    spec_session_with_values,
};
use super::values::{Making, with_values_read_beside};

/// Arguments of `saveplan save`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec file (JSON: variables and options), or an object spec (JSON: `objects`, the
    /// variables of a `tf.train.Checkpoint` tree by path, and options); `-` reads it from
    /// standard input (`saveplan spec P | saveplan save - --values P --prefix Q`).
    spec: PathBuf,
    /// The values: a `.safetensors` file keyed by checkpoint key, or a checkpoint prefix
    /// (a directory or `checkpoint` state file: its latest checkpoint).
    #[arg(long, value_name = "FILE")]
    values: PathBuf,
    /// The checkpoint prefix to write (the path without `.index`).
    #[arg(long, value_name = "P")]
    prefix: String,
    #[command(flatten)]
    run: ModeArgs,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Runs `saveplan save`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    in_cluster(args.cluster.join()?, |cluster| {
        let text = super::common::read_spec_text(&args.spec)?;
        if ObjectSpec::is_object_spec(&text) {
            save_objects(&args.spec, &text, &args.values, &args.prefix, cluster)?;
            return Ok(std::process::ExitCode::SUCCESS);
        }
        save_spec(&args, text, cluster)
    })
}

/// `saveplan save` of a plain spec: this process's task of it, with `cluster`.
fn save_spec(
    args: &Args,
    text: String,
    cluster: Option<&Cluster>,
) -> anyhow::Result<std::process::ExitCode> {
    let options = SessionOptions {
        plans: Plans::SaveOnly,
        task: cluster.and_then(Cluster::task_hint),
        ..args.run.options()?
    };
    // The values file is read while the spec traces, and its values are put into the
    // variables while the save plan compiles; the session's errors come first.
    // A read error is kept aside: the session is then made without values, and its own
    // errors come first.
    // A rank that saves its task's share makes only its own tensors of the file, once the
    // session says which it leaves out.
    let making = match cluster {
        Some(_) => Making::WhenAsked,
        None => Making::Now,
    };
    let mut unread = None;
    let session = with_values_read_beside(&args.values, making, |reading| {
        spec_session_with_values(&args.spec, text, options, &args.values, |left_out| {
            (reading.wait_leaving_out(left_out))
                .map_err(|err| unread = Some(err))
                .ok()
        })
    })?;
    if let Some(err) = unread {
        return Err(err);
    }
    let session = match cluster {
        None => session,
        Some(cluster) => session.with_cluster(Arc::clone(cluster.get()?)),
    };
    save(&session, &args.prefix)?;
    free_session_at_exit(session);
    Ok(std::process::ExitCode::SUCCESS)
}

/// `tf.train.Checkpoint(**children).write(prefix)` for an object spec. A values checkpoint's
/// own object graph is not a value, nor is its `save_counter` unless the spec lists it. As for
/// a plain spec, the values file is read while the spec parses and its object graph is built,
/// the heap the save's trace writes is populated ahead, and nothing is freed at exit. Errors
/// come in the order they would without the overlap: the spec's parse, the read, then the
/// object graph and the values ([`ObjectSpec::checkpoint`]). With `cluster`, this process
/// writes its task's share ([`saveplan::checkpoint::Checkpoint::write_in`]).
fn save_objects(
    spec_path: &Path,
    text: &str,
    values: &Path,
    prefix: &str,
    cluster: Option<&Cluster>,
) -> anyhow::Result<()> {
    let in_spec = || format!("{}", spec_path.display());
    let checkpoint =
        with_values_read_beside(values, Making::Now, |reading| -> anyhow::Result<_> {
            let spec = ObjectSpec::parse(text).with_context(in_spec)?;
            let options = SessionOptions::default();
            prefault(Session::trace_heap_estimate(spec.objects.len(), &options));
            let graph = spec.object_graph();
            let mut values = reading.wait()?;
            values.remove(OBJECT_GRAPH_KEY);
            let (graph, keys) = graph.with_context(in_spec)?;
            spec.checkpoint_of(graph, keys, values)
                .with_context(in_spec)
        })?;
    match cluster {
        None => checkpoint.write(prefix)?,
        Some(cluster) => checkpoint.write_in(prefix, cluster.get()?.as_ref())?,
    };
    free_at_exit(checkpoint);
    Ok(())
}
