//! What the subcommands share, so that none imports another: spec files traced into plans or
//! sessions, the `--mode`/`--backend` options, progress bars on a terminal, and the session
//! runs of `save`, `restore` and `run`. Printing and error lines are in [`super::output`],
//! value files and checkpoint paths in [`super::values`].

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context as _, bail};
use saveplan::compile::{Compilation, Form, compile};
use saveplan::exec::rendezvous::{Rendezvous, settle};
use saveplan::exec::{Backend, HostTensor, StepEvent};
use saveplan::session::{
    CacheEvent, CheckpointTensor, Mode, Session, SessionError, SessionOptions,
};
use saveplan::trace::LeftOut;
use saveplan::trace::spec::SpecFile;
use saveplan_ir::saver_ops::save_v2;

use super::output::{Reported, one_line, render_error, report_error};
use super::values::write_values;

/// Ends the life of `value` without running its destructor, for what a subcommand holds
/// until the process exits: a plan of 100,000 variables is millions of small allocations, and
/// freeing them one by one only delays the exit (the operating system takes the memory back
/// at once; compilers skip the same work, as clang's `-disable-free` does).
pub fn free_at_exit<T>(value: T) {
    std::mem::forget(value);
}

/// [`free_at_exit`] of a session, but for its cluster's rendezvous, let go of here: the last
/// holder's drop ends MPI, which must happen before the process exits.
pub fn free_session_at_exit(mut session: saveplan::session::Session) {
    drop(session.leave_cluster());
    free_at_exit(session);
}

/// The least heap worth populating ahead ([`prefault`]): below it a thread costs more
/// than the page faults it takes off the tracing thread.
const PREFAULT_MIN_BYTES: usize = 64 << 20;

/// Has the `bytes` of heap a job is about to write populated ahead of it on another core
/// ([`saveplan::process::prefault_heap`]), when there are enough to gain from it. The thread
/// is left to finish, or to end with the process.
pub fn prefault(bytes: usize) {
    if bytes >= PREFAULT_MIN_BYTES {
        drop(saveplan::process::prefault_heap(bytes));
    }
}

/// The text of the spec file at `path`, or of standard input for `-` (so that
/// `saveplan spec P | saveplan save - …` works); an error names the file.
pub fn read_spec_text(path: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("standard input: cannot read the spec")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))
}

/// Reads, parses and compiles a spec file; errors name the file and fit on one line.
pub fn compile_file(path: &Path, form: Form) -> anyhow::Result<Compilation> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| one_line(&err))
        .with_context(|| format!("{}: cannot read spec file", path.display()))?;
    let spec = SpecFile::parse(&text)
        .map_err(|err| one_line(&err))
        .with_context(|| path.display().to_string())?;
    prefault(saveplan::compile::heap_estimate(spec.variables.len()));
    compile(&spec, form)
        .map_err(|err| one_line(&err))
        .with_context(|| path.display().to_string())
}

/// Traces the spec `text` (of the file `path`) into a session. The text and the parsed spec
/// are freed as soon as they are read ([`parse_spec`], [`Session::from_spec`]).
pub fn spec_session(path: &Path, text: String, options: SessionOptions) -> anyhow::Result<Session> {
    let spec = parse_spec(path, text, &options)?;
    Session::from_spec(spec, options).with_context(|| format!("{}", path.display()))
}

/// Traces the spec `text` (of the file `path`) into a session with the values `values` gives
/// (of the file `values_path`), asked for once the keys are bound
/// ([`Session::from_spec_with_values_when_bound`]); an error names the file it is about.
/// The text and the parsed spec are freed as soon as they are read.
pub fn spec_session_with_values(
    path: &Path,
    text: String,
    options: SessionOptions,
    values_path: &Path,
    values: impl FnOnce(&BTreeMap<String, LeftOut>) -> Option<BTreeMap<String, HostTensor>> + Send,
) -> anyhow::Result<Session> {
    let spec = parse_spec(path, text, &options)?;
    Session::from_spec_with_values_when_bound(spec, options, values)
        .map_err(|err| session_error(err, path, values_path))
}

/// A session's error, named after the file it is about: the values file `values_path` for
/// an error about the values ([`SessionError::is_about_values`]), else the plan file `path`.
pub fn session_error(err: SessionError, path: &Path, values_path: &Path) -> anyhow::Error {
    let file = if err.is_about_values() {
        values_path
    } else {
        path
    };
    anyhow::Error::from(err).context(file.display().to_string())
}

/// Parses the spec `text` of the file `path`, and has the heap its session's trace is about to
/// write populated ahead. The text is freed here, once read: the trace that follows takes
/// its memory back rather than fresh pages (on a host running several tasks' processes, a
/// page fault is the costliest thing a byte of the heap does).
fn parse_spec(path: &Path, text: String, options: &SessionOptions) -> anyhow::Result<SpecFile> {
    let spec = SpecFile::parse(&text).with_context(|| format!("{}", path.display()))?;
    drop(text);
    prefault(Session::trace_heap_estimate(
        Session::traced_variables(&spec, options),
        options,
    ));
    Ok(spec)
}

/// Runs the session's save plan, with a progress bar on a terminal; in eager mode each
/// function trace is reported on stderr with its reason.
pub fn save(session: &Session, prefix: &str) -> anyhow::Result<()> {
    report_traces(session, |session| {
        with_progress(session.saved_tensors(), "saving", |observer| {
            session.save_observed(prefix, observer)
        })
    })
}

/// Runs the session's restore plan on `prefix` (resolved already, by `checkpoint_prefix`) and
/// writes the restored values to `out`. The last step of a job: the copy of the values it
/// writes from is left to the process's exit ([`free_at_exit`]).
pub fn restore_to_file(session: &Session, prefix: &Path, out: &Path) -> anyhow::Result<()> {
    restore_to_file_as(session, prefix, out, &BTreeMap::new())
}

/// [`restore_to_file`], writing the value restored under a key of `names` under the name it
/// maps to.
pub fn restore_to_file_as(
    session: &Session,
    prefix: &Path,
    out: &Path,
    names: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let prefix = prefix.to_string_lossy();
    let prefix = prefix.as_ref();
    report_traces(session, |session| {
        with_progress(session.restored_tensors(), "restoring", |observer| {
            session.restore_observed(prefix, observer)
        })
    })?;
    // In a cluster, the processes write a local safetensors file together when they all
    // reach it; else task 0 gathers every task's values and writes the file alone.
    if names.is_empty() && super::values::in_place::write_in_place(session, out)? {
        return Ok(());
    }
    let written = match session.gather()? {
        false => Ok(()),
        true => (|| {
            let values = session
                .values()?
                .into_iter()
                .map(|(key, value)| (names.get(&key).cloned().unwrap_or(key), value))
                .collect();
            let written = write_values(out, &values);
            free_at_exit(values);
            written
        })(),
    };
    // Task 0 writes `--out`: its failure is every process's.
    match session.cluster() {
        Some(cluster) => settle(cluster, written, render_error),
        None => written,
    }
}

/// Runs `call` on `session`, then prints (`saveplan: save: traced: <reason>`) every function
/// trace it made, success or not.
fn report_traces<E: Into<anyhow::Error>>(
    session: &Session,
    call: impl FnOnce(&Session) -> Result<(), E>,
) -> anyhow::Result<()> {
    let before = session.trace_log().len();
    let result = call(session);
    for event in session.trace_log().iter().skip(before) {
        if matches!(event, CacheEvent::Traced { .. }) {
            eprintln!("saveplan: {event}");
        }
    }
    result.map_err(Into::into)
}

/// `--backend`: which executor runs the plan (`save`, `restore`, `run`).
#[derive(Debug, clap::Args)]
pub struct BackendArg {
    /// The executor: `interp` (the reference interpreter) or `jit` (cranelift).
    #[arg(long, default_value = "interp")]
    backend: String,
}

impl BackendArg {
    /// The session options for the chosen backend, in graph mode.
    pub fn options(&self) -> anyhow::Result<SessionOptions> {
        let backend: Backend = self.backend.parse()?;
        if !backend.is_available() {
            bail!("backend `{backend}` is not available in this build");
        }
        Ok(SessionOptions {
            backend,
            ..SessionOptions::default()
        })
    }
}

/// `--cluster`: run one task of the plan per process (`save`, `restore`, `run`).
#[derive(Debug, clap::Args)]
pub struct ClusterArg {
    /// Run one task of the plan in this process, as one of a cluster: `mpi` under
    /// `mpirun -n N` (N the plan's tasks; for an object spec, those of its devices and
    /// /job:localhost/replica:0/task:0; rank r runs task r in sorted (job, replica, task)
    /// order; every rank reads the same --values; --out is the one-process file, written by
    /// rank 0, each rank writing its large tensors into a local .safetensors --out they all
    /// reach; with every rank on this host and HWLOC_COMPONENTS unset, each sets it to
    /// -pci,-linuxio before MPI starts). Needs a build with the cargo feature `mpi`.
    #[arg(long, value_name = "KIND", value_enum)]
    cluster: Option<ClusterKind>,
}

/// The kinds of `--cluster`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ClusterKind {
    /// One process per task, started by `mpirun`.
    Mpi,
}

impl ClusterArg {
    /// Starts joining the cluster asked for: MPI starts on a thread of its own while this
    /// process reads its spec and values and compiles its task's plan ([`Cluster::get`] waits
    /// for it). `None` without `--cluster`.
    pub fn join(&self) -> anyhow::Result<Option<Cluster>> {
        match self.cluster {
            None => Ok(None),
            Some(ClusterKind::Mpi) => join_mpi().map(Some),
        }
    }
}

/// The thread starting MPI, which hands over the rendezvous.
type Starting = std::thread::JoinHandle<anyhow::Result<Arc<dyn Rendezvous>>>;

/// A cluster this process is joining ([`ClusterArg::join`]).
pub struct Cluster {
    /// The task this process runs, as the launcher's environment says before MPI starts
    /// (`OMPI_COMM_WORLD_RANK`, `PMIX_RANK`, `PMI_RANK`), to compile that task's plan alone.
    hint: Option<usize>,
    starting: Mutex<Option<Starting>>,
    joined: OnceLock<Result<Arc<dyn Rendezvous>, String>>,
}

impl Cluster {
    /// The task this process runs, when known before the cluster is joined: a session then
    /// compiles that task's partition alone ([`SessionOptions::task`]).
    pub fn task_hint(&self) -> Option<usize> {
        self.hint
    }

    /// The rendezvous, once the cluster is joined (waits for it), checked against the task
    /// the launcher named.
    pub fn get(&self) -> anyhow::Result<&Arc<dyn Rendezvous>> {
        let joined = self.joined.get_or_init(|| {
            let starting = lock_ignoring_poison(&self.starting).take();
            let started = match starting.map(std::thread::JoinHandle::join) {
                Some(Ok(started)) => started,
                Some(Err(_)) => Err(anyhow::anyhow!("--cluster: the thread starting it failed")),
                None => Err(anyhow::anyhow!("--cluster: not started")),
            };
            started
                .and_then(|rendezvous| match self.hint {
                    Some(hint) if hint != rendezvous.task() => bail!(
                        "--cluster: the launcher says this is rank {hint}, MPI says rank {}",
                        rendezvous.task()
                    ),
                    _ => Ok(rendezvous),
                })
                .map_err(|err| render_error(&err))
        });
        joined.as_ref().map_err(|line| anyhow::anyhow!("{line}"))
    }
}

/// `mutex`'s guard, whether or not a thread panicked holding it.
fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(feature = "mpi")]
fn join_mpi() -> anyhow::Result<Cluster> {
    use saveplan::exec::rendezvous::MpiRendezvous;
    // Every rank on this host, and hwloc left to us: MPI starts without reading every PCI
    // device (docs/cluster.md). `join` comes first in `save`, `restore` and `run`, before this
    // process starts a thread, which the setting checks.
    if let Some((name, value)) = MpiRendezvous::one_host_setting() {
        saveplan::process::set_env_if_single_threaded(name, value);
    }
    let hint = ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok()?.parse().ok());
    let starting = std::thread::Builder::new()
        .name("saveplan-mpi-start".into())
        .spawn(|| {
            let rendezvous = MpiRendezvous::start().context("--cluster mpi: cannot start MPI")?;
            Ok(Arc::new(rendezvous) as Arc<dyn Rendezvous>)
        })
        .context("--cluster mpi: cannot start a thread")?;
    Ok(Cluster {
        hint,
        starting: Mutex::new(Some(starting)),
        joined: OnceLock::new(),
    })
}

#[cfg(not(feature = "mpi"))]
fn join_mpi() -> anyhow::Result<Cluster> {
    bail!("--cluster mpi: this saveplan was built without MPI (cargo feature `mpi`)")
}

/// Runs `job`, this process's share of the work of `cluster` (when there is one): any error
/// of it is reported here and aborts the cluster's rendezvous with the error's line, so that
/// the other processes stop at once (each saying which task failed and why) instead of
/// waiting for this one. The rendezvous is let go of last: MPI ends when every process got
/// there.
pub fn in_cluster<T>(
    cluster: Option<Cluster>,
    job: impl FnOnce(Option<&Cluster>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let result = job(cluster.as_ref());
    match (result, &cluster) {
        // Said here, before the others hear of it: once they exit, `mpirun` may end this
        // process before it gets to say anything.
        (Err(err), Some(cluster)) => {
            report_error(&err);
            if let Ok(rendezvous) = cluster.get() {
                rendezvous.abort(&render_error(&err));
            }
            Err(Reported.into())
        }
        (result, _) => result,
    }
}

/// `--mode` and `--backend`: how `save` and `restore` run a spec.
#[derive(Debug, clap::Args)]
pub struct ModeArgs {
    /// How the save or restore plan runs: `graph` compiles it once and runs it with the prefix
    /// fed; `eager` runs ops as they are traced (one task) or traces a function and runs it
    /// (several tasks, one `saveplan: <call>: traced: <reason>` line on stderr per trace).
    #[arg(long, default_value = "graph", value_parser = ["graph", "eager"])]
    mode: String,
    #[command(flatten)]
    backend: BackendArg,
}

impl ModeArgs {
    /// The session options for the chosen mode and backend.
    pub fn options(&self) -> anyhow::Result<SessionOptions> {
        Ok(SessionOptions {
            mode: self.mode.parse::<Mode>()?,
            ..self.backend.options()?
        })
    }
}

/// The observer a session run takes, called after every step.
pub type Observer<'a> = Option<&'a (dyn Fn(&StepEvent<'_>) + Sync)>;

/// Runs `run` (a session's save or restore, given an observer) with a progress bar over the
/// parts of `tensors` when stderr is a terminal, and without one otherwise.
pub fn with_progress<E>(
    tensors: &BTreeMap<String, CheckpointTensor>,
    what: &'static str,
    run: impl FnOnce(Observer<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let n_tensors = tensors
        .values()
        .map(|tensor| tensor.parts.len() as u64)
        .sum();
    match tensor_progress(n_tensors, what) {
        Some((bar, observer)) => {
            let result = run(Some(&observer));
            bar.finish_and_clear();
            result
        }
        None => run(None),
    }
}

/// A progress bar over `n_tensors` tensors, advanced by the `SaveV2`/`RestoreV2` steps of a
/// run; `None` unless stderr is a terminal.
fn tensor_progress(
    n_tensors: u64,
    what: &'static str,
) -> Option<(indicatif::ProgressBar, impl Fn(&StepEvent<'_>) + Sync)> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(n_tensors);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} tensors")
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(what);
    let handle = bar.clone();
    let observer = move |event: &StepEvent<'_>| match event.step.op.type_name() {
        "SaveV2" => {
            let tensors = event
                .step
                .inputs
                .len()
                .saturating_sub(save_v2::FIRST_TENSOR as usize);
            handle.inc(tensors as u64);
        }
        "RestoreV2" => handle.inc(event.outputs.len() as u64),
        _ => {}
    };
    Some((bar, observer))
}

/// A byte-progress bar on stderr, only when stderr is a terminal.
pub fn progress_bar(total_bytes: u64, what: &'static str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total_bytes);
    let style = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec})",
    )
    .map(|style| style.progress_chars("=> "))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what);
    Some(bar)
}
