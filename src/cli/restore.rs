//! `saveplan restore SPEC --prefix P --out FILE.safetensors`: traces a spec, runs its restore
//! plan on the checkpoint at the prefix and writes the restored values by checkpoint key
//! (partitioned variables assembled into their full tensors).
//!
//! With an object spec (a JSON object with an `objects` key, see
//! [`saveplan::checkpoint::ObjectSpec`]) it restores by object, as
//! `tf.train.Checkpoint(**children).restore(P)` does on a fresh checkpoint (`--read`:
//! `Checkpoint.read(P)`, no `save_counter`): it prints the restore report (every value once:
//! matched, mismatched, unused, missing; `--json` for JSON), writes the restored values keyed by
//! our objects' checkpoint keys (string and variant attributes are restored but left out of
//! the file, with a note on stderr) and, with `--expect`, fails (exit 1, TensorFlow's message
//! on one line) when that load-status assertion fails. A checkpoint without an object graph
//! (TF1 `Saver`) is restored by name: each entry's `name` is looked up as a bundle key
//! (FORMATS.md 13.13).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use saveplan::bundle::BundleReader;
use saveplan::checkpoint::{
    Assertion, Checkpoint, ObjectSpec, RestoreKind, SAVE_COUNTER_KEY, full_name_keys,
    is_object_based,
};
use saveplan::exec::rendezvous::settle;
use saveplan::exec::{BundleIo, OpenedBundleIo};
use saveplan::session::{Plans, Session, SessionOptions};
use saveplan::trace::spec::SpecFile;

use super::common::{
    Cluster, ClusterArg, ModeArgs, free_session_at_exit, in_cluster, restore_to_file,
    restore_to_file_as, spec_session,
};
use super::output::{one_line, out, render_error};
use super::values::{checkpoint_prefix, is_safetensors_name, prepare_out, write_values};

/// Arguments of `saveplan restore`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec file (JSON: variables and options), or an object spec (JSON: `objects`, the
    /// variables of a `tf.train.Checkpoint` tree by path): then restore by object, or by
    /// variable `name` when the checkpoint has no object graph (a TF1 `Saver` checkpoint). A
    /// plain spec on an object-based checkpoint finds each key missing from it as an
    /// attribute's `full_name` (as a TF1 `Saver` does) and keeps the spec's keys in the output.
    /// `-` reads the spec from standard input.
    spec: PathBuf,
    /// The checkpoint prefix to read (the path without `.index`), or a directory or
    /// `checkpoint` state file, meaning its latest checkpoint.
    #[arg(long, value_name = "P")]
    prefix: String,
    /// Where to write the restored values: a `.safetensors` file, or any other name as a
    /// checkpoint prefix (string tensors kept). Missing folders are created.
    #[arg(long, value_name = "FILE|PREFIX")]
    out: PathBuf,
    /// Object spec only: `Checkpoint.read(P)` instead of `restore(P)` (no `save_counter`).
    #[arg(long)]
    read: bool,
    /// Object spec only: print the restore report as JSON.
    #[arg(long)]
    json: bool,
    /// Object spec only: fail (exit 1) when this load-status assertion fails:
    /// `consumed` (assert_consumed), `existing` (assert_existing_objects_matched),
    /// `nontrivial` (assert_nontrivial_match).
    #[arg(long, value_name = "WHAT")]
    expect: Option<Expect>,
    #[command(flatten)]
    run: ModeArgs,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// `--expect`: which assertion.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Expect {
    /// `assert_consumed()`.
    Consumed,
    /// `assert_existing_objects_matched()`.
    Existing,
    /// `assert_nontrivial_match()`.
    Nontrivial,
}

/// Runs `saveplan restore`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    in_cluster(args.cluster.join()?, |cluster| restore(&args, cluster))
}

/// `saveplan restore`: this process's task of it, with `cluster`.
fn restore(args: &Args, cluster: Option<&Cluster>) -> anyhow::Result<std::process::ExitCode> {
    let text = super::common::read_spec_text(&args.spec)?;
    // Where the values go is checked (and its folders made) before anything is read.
    prepare_out(&args.out)?;
    let one_process = |what: &str| match cluster {
        Some(_) => anyhow::bail!("--cluster: {what} restores in one process"),
        None => Ok(()),
    };
    if ObjectSpec::is_object_spec(&text) {
        return restore_objects(args, &text, cluster);
    }
    if args.read || args.json || args.expect.is_some() {
        anyhow::bail!("--read, --json and --expect need an object spec");
    }
    // The prefix is resolved and the checkpoint opened once: the restore plan reads from this
    // reader. A checkpoint that does not open is left to the restore plan, which reports it.
    let prefix = checkpoint_prefix(Path::new(&args.prefix))?;
    let reader = BundleReader::open(&prefix).ok().map(Arc::new);
    if let Some(reader) = &reader
        && is_object_based(reader)
    {
        one_process("a plain spec on an object-based checkpoint")?;
        return restore_names_from_objects(args, &text, reader);
    }
    let options = SessionOptions {
        plans: Plans::RestoreOnly,
        task: cluster.and_then(Cluster::task_hint),
        ..args.run.options()?
    };
    let session = with_reader(spec_session(&args.spec, text, options)?, &prefix, reader);
    let session = match cluster {
        None => session,
        Some(cluster) => session.with_cluster(Arc::clone(cluster.get()?)),
    };
    restore_to_file(&session, &prefix, &args.out)?;
    free_session_at_exit(session);
    Ok(std::process::ExitCode::SUCCESS)
}

/// `session` restoring `prefix` from `reader`, when it opened.
fn with_reader(session: Session, prefix: &Path, reader: Option<Arc<BundleReader>>) -> Session {
    match reader {
        Some(reader) => session.with_io(Box::new(OpenedBundleIo::new(
            BundleIo::default(),
            prefix.to_string_lossy(),
            reader,
        ))),
        None => session,
    }
}

/// A plain spec on an object-based checkpoint, as a TF1 `Saver` restores one (FORMATS.md
/// 13.13): each variable whose key is not in the checkpoint but is an attribute's `full_name`
/// is read from that attribute's `checkpoint_key`; the values keep the spec's keys.
fn restore_names_from_objects(
    args: &Args,
    text: &str,
    reader: &Arc<BundleReader>,
) -> anyhow::Result<std::process::ExitCode> {
    let spec_error = || format!("{}", args.spec.display());
    let mut spec = SpecFile::parse(text).with_context(spec_error)?;
    let keys = full_name_keys(reader).map_err(|err| one_line(&err))?;
    let mut renamed: BTreeMap<String, String> = BTreeMap::new();
    for variable in &mut spec.variables {
        if reader.entry(&variable.checkpoint_key).is_some() {
            continue;
        }
        if let Some(key) = keys.get(&variable.checkpoint_key) {
            let name = std::mem::replace(&mut variable.checkpoint_key, key.clone());
            variable.name.get_or_insert_with(|| name.clone());
            renamed.insert(key.clone(), name);
        }
    }
    if !renamed.is_empty() {
        eprintln!(
            "saveplan: restore: restoring an object-based checkpoint by variable name: {} of {} variables found through the object graph's full_name",
            renamed.len(),
            spec.variables.len()
        );
    }
    let options = SessionOptions {
        plans: Plans::RestoreOnly,
        ..args.run.options()?
    };
    let prefix = reader.prefix().to_path_buf();
    let session = Session::from_spec(&spec, options).with_context(spec_error)?;
    let session = with_reader(session, &prefix, Some(Arc::clone(reader)));
    restore_to_file_as(&session, &prefix, &args.out, &renamed)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Restore by object: report, values, assertion. With `cluster`, every process matches the
/// checkpoint and reads its task's values, task 0 gathers them, prints the report and writes
/// `--out`; then every process checks `--expect` (the same status everywhere, so all fail
/// alike), once `--out` is written.
fn restore_objects(
    args: &Args,
    text: &str,
    cluster: Option<&Cluster>,
) -> anyhow::Result<std::process::ExitCode> {
    let spec_error = || format!("{}", args.spec.display());
    let spec = ObjectSpec::parse(text).with_context(spec_error)?;
    let mut checkpoint = spec.fresh_checkpoint().with_context(spec_error)?;
    let rendezvous = cluster.map(Cluster::get).transpose()?.map(Arc::as_ref);
    if let Some(rendezvous) = rendezvous {
        // A cluster of the wrong size is refused on every process before anything is read.
        checkpoint.check_cluster(rendezvous)?;
    }
    let lead = rendezvous.is_none_or(|rendezvous| rendezvous.task() == 0);
    let prefix = checkpoint_prefix(Path::new(&args.prefix))?;
    let prefix = prefix.to_string_lossy();
    let kind = if args.read {
        RestoreKind::Read
    } else {
        RestoreKind::Restore
    };
    let matched = checkpoint.match_checkpoint(&prefix, kind)?;
    let report = matched.report().clone();
    // A set: the values are filtered by it below, one lookup per value.
    let keys: std::collections::BTreeSet<String> = matched.restored_keys().into_iter().collect();
    if lead {
        if args.json {
            out!("{}\n", serde_json::to_string_pretty(&report)?)?;
        } else {
            out!("{report}")?;
        }
    }
    let status = match rendezvous {
        None => checkpoint.apply(matched)?,
        Some(rendezvous) => checkpoint.apply_in(matched, rendezvous)?,
    };
    let written = match lead {
        true => write_restored(args, &checkpoint, &keys),
        false => Ok(()),
    };
    match rendezvous {
        // Task 0 wrote `--out` (or failed, and every process with it) before any process
        // fails an assertion (a process that exits 1 has `mpirun` end the others).
        Some(rendezvous) => settle(rendezvous, written, render_error)?,
        None => written?,
    }
    if let Some(expect) = args.expect {
        let assertion = match expect {
            Expect::Consumed => Assertion::Consumed,
            Expect::Existing => Assertion::ExistingObjectsMatched,
            Expect::Nontrivial => Assertion::NontrivialMatch,
        };
        if let Err(err) = status.check(assertion) {
            let message: Vec<&str> = err
                .message
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect();
            let mut message = message.join(" ");
            if !args.read && message.contains("'save_counter:0'") {
                // TensorFlow's restore() creates the counter too, and fails the same way.
                message.push_str(
                    " (restore creates save_counter, which this checkpoint does not hold, as TensorFlow's does; --read restores as Checkpoint.read, without it)",
                );
            }
            anyhow::bail!("{} failed: {message}", assertion.method());
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Writes the values of `checkpoint` restored under `keys` to `--out`, `save_counter`'s among
/// them when restored; string and variant tensors are left out of a safetensors file, with a
/// note.
fn write_restored(
    args: &Args,
    checkpoint: &Checkpoint,
    keys: &std::collections::BTreeSet<String>,
) -> anyhow::Result<()> {
    let mut restored = checkpoint.values().clone();
    restored.retain(|key, _| keys.contains(key));
    if let Some(counter) = checkpoint.save_counter()
        && keys.contains(SAVE_COUNTER_KEY)
    {
        restored.insert(
            SAVE_COUNTER_KEY.to_owned(),
            saveplan::exec::HostTensor::int64_scalar(counter),
        );
    }
    // Named string and variant tensors (non-variable attributes) have no safetensors type; a
    // checkpoint prefix as `--out` keeps them.
    if is_safetensors_name(&args.out) {
        restored.retain(|key, value| {
            let fixed = !saveplan::bundle::dtype::is_element_list(value.dtype());
            if !fixed {
                eprintln!(
                    "saveplan: restore: restored {} tensor `{key}` is not written (safetensors cannot hold it; give --out a checkpoint prefix to keep it)",
                    value.dtype()
                );
            }
            fixed
        });
    }
    write_values(&args.out, &restored)
}
