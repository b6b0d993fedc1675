//! Many processes against one: the CLI's `save` and `restore` of a plan whose variables are
//! spread over N tasks, run under `mpirun -n N … --cluster mpi` (one process per task, meeting
//! through MPI) against the same command in one process (every task on a thread of its own,
//! meeting in memory), in the same run, on the same bytes. Also the rendezvous's round trip
//! and what an idle one costs (`examples/mpi_rendezvous --latency` and `--idle`, built here) and `mpirun -n N true`, the launcher's
//! own fixed cost, which every MPI row includes. Then a framework's steady state:
//! `examples/cluster_saves` (built here) makes one session per process and saves several
//! times; its best and median save and the making of its session, under `mpirun` against one process,
//! on the same spec (the files compared).
//!
//! ```text
//! cargo bench --features mpi --bench cluster -- [big] [many-small] [--ranks N]... \
//!     [--big-tensors N] [--repeat N] [--dir DIR] [--one-core-each] [--mpirun-env NAME=VALUE]...
//! ```
//!
//! Workloads, as BENCH.md names them: `big` (16 × float32[4096, 4096], 1 GiB; `--big-tensors`
//! takes fewer) and `many-small` (100,000 × float32[64]), variable `i` on task `i mod N`.
//! Ranks: 2 and 4 by default (`--oversubscribe`: more ranks than cores is allowed). Times are
//! the best of `--repeat` runs (default 4), one process and MPI in turns (which side goes
//! first alternates from turn to turn), each after `sync`
//! (no run pays for writing back what the run before it wrote) and then removing, untimed,
//! what its own side's last run wrote (so each side writes into the pages it just freed; a
//! first turn is not timed); the CLI rows' ratios are MPI over one process, then MPI less
//! the start-up below over one process: a lower bound of what the work costs under MPI (a
//! rank starts MPI on a thread of its own while it reads its spec, so part of the start-up
//! is hidden in a real run, and taking all of it off takes off too much). Load averages
//! are printed at the start and the end. With `--one-core-each` every process gets one core
//! of its own: the one process runs on core 0, rank `r` on core `r` (as hosts of one core
//! each would run them; ranks up to the number of cores). `--mpirun-env NAME=VALUE` sets an
//! environment variable of `mpirun` and every rank (`NAME=VALUE mpirun -x NAME=VALUE`), say
//! `HWLOC_COMPONENTS=-pci,-linuxio` (docs/cluster.md). Before the workloads, the cost of
//! starting a cluster at all: a save of one float32\[1\] per task under `mpirun` against one
//! process, which every MPI row pays. Needs `mpirun` (Open MPI; as root it also needs
//! `OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "support/inputs.rs"]
#[allow(dead_code, reason = "the bench uses `best_of` alone")]
mod inputs;
#[path = "support/machine.rs"]
#[allow(dead_code, reason = "the bench reads its children's CPU time alone")]
mod machine;

use inputs::best_of;
use serde_json::{Value, json};

/// Command-line options.
struct Options {
    workloads: Vec<String>,
    ranks: Vec<usize>,
    big_tensors: usize,
    repeat: usize,
    dir: PathBuf,
    /// One core per process: the single process on core 0, rank `r` on core `r` (as one
    /// host per task of the same size would run them).
    one_core_each: bool,
    /// Environment variables of `mpirun` and every rank (`NAME=VALUE mpirun -x NAME=VALUE`).
    mpirun_env: Vec<String>,
}

fn main() {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("cluster bench: {message}");
            std::process::exit(2);
        }
    };
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_saveplan"));
    let dir = options
        .dir
        .join(format!("saveplan-cluster-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the bench folder");
    let cpu_before = machine::cpu_time(machine::Who::Children);
    println!(
        "MPI (one process per task) vs one process, CLI save and restore (best of {}{}{}); load average {}",
        options.repeat,
        match options.one_core_each {
            true => ", one core per process",
            false => ", every process on every core",
        },
        match options.mpirun_env.is_empty() {
            true => String::new(),
            false => format!(", mpirun and ranks with {}", options.mpirun_env.join(" ")),
        },
        machine::load_average()
    );
    latency(&options);
    let saves_example = build_example("cluster_saves");
    if saves_example.is_none() {
        println!("  one session saving several times: not measured (the example did not build)");
    }
    // Each cluster size's start-up: what MPI adds before any work.
    let mut start_ups = std::collections::BTreeMap::new();
    for &ranks in &options.ranks {
        let launcher = best_of(options.repeat, || run(mpirun(ranks, &options).arg("true")));
        println!("  mpirun -n {ranks} true: {:.3} s", launcher.as_secs_f64());
        let (one, many) = start_up(&cli, &dir, ranks, &options);
        println!(
            "  starting {ranks} tasks (a save of one float32[1] per task): one process {:.3} s, MPI {:.3} s (+{:.3} s)",
            one.as_secs_f64(),
            many.as_secs_f64(),
            many.as_secs_f64() - one.as_secs_f64(),
        );
        start_ups.insert(ranks, many.saturating_sub(one));
    }
    for workload in &options.workloads {
        let (shape, count): (&[u64], usize) = match workload.as_str() {
            "big" => (&[4096, 4096], options.big_tensors),
            _ => (&[64], 100_000),
        };
        for &ranks in &options.ranks {
            let spec = dir.join("spec.json");
            let values = dir.join("values.safetensors");
            std::fs::write(&spec, spec_text(count, shape, ranks)).expect("write the spec");
            write_values(&values, count, shape);
            // The CLI with `args`, alone or under `mpirun`.
            let cli_run = |mut args: Vec<std::ffi::OsString>, cluster: bool| {
                run(&mut cli_command(
                    &cli,
                    (ranks, &options),
                    cluster,
                    &mut args,
                ));
            };
            let save = |prefix: &Path, cluster: bool| {
                cli_run(save_args(&spec, &values, prefix), cluster);
            };
            // Each side's folder, emptied before its own save (outside the timing).
            let clear = |prefix: &Path| {
                let _ = std::fs::remove_dir_all(prefix.parent().expect("in a folder"));
            };
            // Each side restores into its own folder.
            let restored = |prefix: &Path| prefix.with_file_name("out.safetensors");
            let restore = |prefix: &Path, cluster: bool| {
                let args = vec![
                    "restore".into(),
                    spec.clone().into_os_string(),
                    "--prefix".into(),
                    prefix.as_os_str().to_owned(),
                    "--out".into(),
                    restored(prefix).into_os_string(),
                ];
                cli_run(args, cluster);
            };
            let unrestore = |prefix: &Path| {
                let _ = std::fs::remove_file(restored(prefix));
            };
            let (one_prefix, many_prefix) = (dir.join("one/ckpt"), dir.join("many/ckpt"));
            let (save_one, save_many) = best_in_turns(
                options.repeat,
                (|| clear(&one_prefix), || save(&one_prefix, false)),
                (|| clear(&many_prefix), || save(&many_prefix, true)),
            );
            same_files(&dir.join("one"), &dir.join("many"));
            let (restore_one, restore_many) = best_in_turns(
                options.repeat,
                (|| unrestore(&one_prefix), || restore(&one_prefix, false)),
                (|| unrestore(&many_prefix), || restore(&many_prefix, true)),
            );
            // MPI over one process, and the same less the start-up measured above: a lower
            // bound of the work's ratio (part of the start-up overlaps the work).
            let start_up = start_ups[&ranks];
            let ratio = |many: Duration, one: Duration| {
                let net = many.saturating_sub(start_up).as_secs_f64() / one.as_secs_f64();
                format!(
                    "{:.2}×; less the start-up, at least {net:.2}×",
                    many.as_secs_f64() / one.as_secs_f64()
                )
            };
            println!(
                "  {workload} ({count} × float32{shape:?}) on {ranks} tasks: save one process {:.3} s, MPI {:.3} s ({}); restore one process {:.3} s, MPI {:.3} s ({})",
                save_one.as_secs_f64(),
                save_many.as_secs_f64(),
                ratio(save_many, save_one),
                restore_one.as_secs_f64(),
                restore_many.as_secs_f64(),
                ratio(restore_many, restore_one),
            );
            let _ = std::fs::remove_dir_all(dir.join("one"));
            let _ = std::fs::remove_dir_all(dir.join("many"));
            if let Some(example) = &saves_example {
                let saves = if workload == "big" { 3 } else { 5 };
                let (one, many) = steady(example, &dir, (ranks, saves), &options);
                let ratio = |many: f64, one: f64| many / one;
                println!(
                    "  {workload} on {ranks} tasks, one session saving {saves} times (examples/cluster_saves): best save one process {:.3} s, MPI {:.3} s ({:.2}×), least median save of a run one process {:.3} s, MPI {:.3} s ({:.2}×); the session (trace, partition, compile, values in) one process {:.3} s, MPI {:.3} s ({:.2}×)",
                    one.best_save,
                    many.best_save,
                    ratio(many.best_save, one.best_save),
                    one.median_save,
                    many.median_save,
                    ratio(many.median_save, one.median_save),
                    one.session,
                    many.session,
                    ratio(many.session, one.session),
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "CPU time of every command run: {}",
        machine::cpu_time(machine::Who::Children) - cpu_before
    );
    println!(
        "load average (1, 5, 15 min) at the end: {}",
        machine::load_average()
    );
}

/// The runs of `one` and of `many` (each a side's untimed clearing of what its previous run
/// wrote, then its run), `repeat` turns of them, so that a slow spell of the machine (its
/// disk writing back, a neighbour on the host) falls on both alike rather than on all the
/// runs of one. The side that runs first alternates from turn to turn (one process first in
/// the first kept turn, MPI in the next, …): on this VM the side that runs second has been
/// slower or faster by as much as a tenth of a 1 s run, whichever side it was
/// (docs/benchmarks.md). Before each side's run the page cache is written back ([`settle`]),
/// so that no run pays for the writing back of the run before it; then that side clears its
/// own files, and its run starts at once: the pages freed are the ones its run writes into,
/// as warm for one side as for the other. (On this VM pages free for a few seconds have gone
/// back to the host and cost several times more to write into: `dd` of 512 MiB into a new
/// file took 2.2 s the first time and 0.24–0.34 s right after the last copy's removal,
/// docs/benchmarks.md. Clearing before the sync let the sync of the other side's writing age
/// them, by a time that differed turn by turn.) A first turn, one process first, is not
/// kept: in it, the side that runs first would write into whatever the bench freed before.
/// Each pair is (one process, MPI), whichever ran first; `after_turn` runs once both have
/// (untimed: say, comparing their files).
fn in_turns<T>(
    repeat: usize,
    mut one: (impl FnMut(), impl FnMut() -> T),
    mut many: (impl FnMut(), impl FnMut() -> T),
    mut after_turn: impl FnMut(),
) -> Vec<(T, T)> {
    fn side<T>(clear: &mut dyn FnMut(), run: &mut dyn FnMut() -> T) -> T {
        settle();
        clear();
        run()
    }
    let mut turn = |many_first: bool| {
        let pair = match many_first {
            false => {
                let first = side(&mut one.0, &mut one.1);
                (first, side(&mut many.0, &mut many.1))
            }
            true => {
                let first = side(&mut many.0, &mut many.1);
                (side(&mut one.0, &mut one.1), first)
            }
        };
        after_turn();
        pair
    };
    turn(false);
    (0..repeat.max(1))
        .map(|index| turn(index % 2 == 1))
        .collect()
}

/// The best times of the runs of `one` and of `many`, [`in_turns`].
fn best_in_turns(
    repeat: usize,
    (one_clear, mut one_run): (impl FnMut(), impl FnMut()),
    (many_clear, mut many_run): (impl FnMut(), impl FnMut()),
) -> (Duration, Duration) {
    let timed = |run: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        run();
        start.elapsed()
    };
    in_turns(
        repeat,
        (one_clear, || timed(&mut one_run)),
        (many_clear, || timed(&mut many_run)),
        || {},
    )
    .into_iter()
    .fold((Duration::MAX, Duration::MAX), |(a, b), (x, y)| {
        (a.min(x), b.min(y))
    })
}

/// Writes every dirty page back to the disk (`sync`), outside the timing. A `big` run leaves
/// up to 3 GiB of dirty pages behind; past the kernel's `dirty_ratio` the next run's writes
/// would wait on their writing back, so whichever side ran second would be slowed by the first.
fn settle() {
    run(&mut Command::new("sync"));
}

/// `mpirun` for `ranks` processes on this machine, with the environment `--mpirun-env` gives
/// (its own and every rank's). Open MPI's `ob1` messaging layer (shared memory between the
/// processes of one host) is asked for by name: left to choose, Open MPI first starts UCX,
/// which costs each process about 0.2 s here before settling on shared memory too
/// (docs/cluster.md says so to users).
fn mpirun(ranks: usize, options: &Options) -> Command {
    let mut command = Command::new("mpirun");
    command.args(["--oversubscribe", "--quiet", "--mca", "pml", "ob1"]);
    for variable in &options.mpirun_env {
        // In `mpirun`'s own environment too: its own start reads it (say its hardware
        // discovery, `HWLOC_COMPONENTS`), as a shell's `NAME=VALUE mpirun -x NAME` gives it.
        if let Some((name, value)) = variable.split_once('=') {
            command.env(name, value);
        }
        command.args(["-x", variable]);
    }
    command.args(["-n", &ranks.to_string()]);
    command
}

/// The CLI's arguments to save the spec `spec` with the values `values` at `prefix`.
fn save_args(spec: &Path, values: &Path, prefix: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "save".into(),
        spec.into(),
        "--values".into(),
        values.into(),
        "--prefix".into(),
        prefix.into(),
    ]
}

/// The best times of a save of one float32\[1\] per task by one process and by `ranks`
/// processes under `mpirun` (in turns): what a cluster run costs before any work.
fn start_up(cli: &Path, dir: &Path, ranks: usize, options: &Options) -> (Duration, Duration) {
    let (spec, values) = (dir.join("start-up.json"), dir.join("start-up.safetensors"));
    std::fs::write(&spec, spec_text(ranks, &[1], ranks)).expect("write the spec");
    write_values(&values, ranks, &[1]);
    let prefix = |cluster: bool| dir.join(if cluster { "start-many" } else { "start-one" });
    let clear = |cluster: bool| {
        let _ = std::fs::remove_dir_all(prefix(cluster));
    };
    let save = |cluster: bool| {
        let mut args = save_args(&spec, &values, &prefix(cluster).join("ckpt"));
        run(&mut cli_command(cli, (ranks, options), cluster, &mut args));
    };
    let times = best_in_turns(
        options.repeat,
        (|| clear(false), || save(false)),
        (|| clear(true), || save(true)),
    );
    same_files(&dir.join("start-one"), &dir.join("start-many"));
    for folder in ["start-one", "start-many"] {
        let _ = std::fs::remove_dir_all(dir.join(folder));
    }
    let _ = std::fs::remove_file(spec);
    let _ = std::fs::remove_file(values);
    times
}

/// The CLI (or `examples/cluster_saves`, which takes the same `--cluster mpi`) with `args`:
/// under `mpirun` with `--cluster mpi` when `cluster`, else alone.
/// With `one_core_each`, the one process runs on core 0 (`taskset`) and rank `r` on core `r`
/// (`mpirun --bind-to core`).
fn cli_command(
    cli: &Path,
    (ranks, options): (usize, &Options),
    cluster: bool,
    args: &mut Vec<std::ffi::OsString>,
) -> Command {
    if !cluster {
        let mut command = match options.one_core_each {
            true => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", "0"]).arg(cli);
                taskset
            }
            false => Command::new(cli),
        };
        command.args(args.iter());
        return command;
    }
    args.extend(["--cluster".into(), "mpi".into()]);
    let mut command = mpirun(ranks, options);
    if options.one_core_each {
        command.args(["--bind-to", "core", "--map-by", "core"]);
    }
    command.arg(cli).args(args.iter());
    command
}

/// Runs `command`, which must succeed.
fn run(command: &mut Command) {
    let status = command
        .stdout(Stdio::null())
        .status()
        .expect("run the command (is mpirun installed?)");
    assert!(status.success(), "{command:?} failed");
}

/// Both folders hold the same files, byte for byte.
fn same_files(one: &Path, many: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(one)
        .expect("the single-process save")
        .map(|entry| entry.expect("a file").file_name())
        .collect();
    names.sort();
    for name in names {
        let (a, b) = (
            std::fs::read(one.join(&name)).expect("read"),
            std::fs::read(many.join(&name)).expect("the MPI save wrote the same files"),
        );
        assert!(a == b, "{name:?}: the MPI save differs from one process's");
    }
}

/// A spec of `count` float32 variables of `shape`, variable `i` on task `i mod ranks`.
fn spec_text(count: usize, shape: &[u64], ranks: usize) -> String {
    let variables: Vec<Value> = (0..count)
        .map(|index| {
            json!({"checkpoint_key": key(index), "dtype": "float32", "shape": shape,
                   "device": format!("/job:worker/replica:0/task:{}/device:CPU:0", index % ranks)})
        })
        .collect();
    json!({ "variables": variables }).to_string()
}

fn key(index: usize) -> String {
    format!("layer_{index:06}/kernel")
}

/// A `.safetensors` file of `count` float32 tensors of `shape` (each element its index in
/// the file, so that no two tensors are equal), written in pieces.
fn write_values(path: &Path, count: usize, shape: &[u64]) {
    use std::io::Write;
    let n_bytes = shape.iter().product::<u64>() as usize * 4;
    let header: serde_json::Map<String, Value> = (0..count)
        .map(|index| {
            let offsets = [index * n_bytes, (index + 1) * n_bytes];
            let entry = json!({"dtype": "F32", "shape": shape, "data_offsets": offsets});
            (key(index), entry)
        })
        .collect();
    let mut header = Value::Object(header).to_string().into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("the values file"));
    file.write_all(&(header.len() as u64).to_le_bytes())
        .and_then(|()| file.write_all(&header))
        .expect("write the header");
    let mut element = 0u32;
    let mut chunk = Vec::with_capacity(n_bytes);
    for _ in 0..count {
        chunk.clear();
        for _ in 0..n_bytes / 4 {
            chunk.extend_from_slice(&(element as f32).to_le_bytes());
            element = element.wrapping_add(1);
        }
        file.write_all(&chunk).expect("write the values");
    }
    file.flush().expect("write the values");
}

/// Builds the example `name` (the bench profile, so the library is shared): its path.
fn build_example(name: &str) -> Option<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args([
            "build",
            "--profile",
            "bench",
            "--quiet",
            "--features",
            "mpi",
        ])
        .args(["--example", name])
        .status()
        .is_ok_and(|status| status.success());
    let exe = std::env::current_exe().ok()?;
    built.then(|| {
        exe.parent()?
            .parent()
            .map(|dir| dir.join("examples").join(name))
    })?
}

/// What `examples/cluster_saves` reports, in seconds: the session's making, the best save and
/// the median save. On this VM a run's saves of 1 GiB on 4 tasks have taken 0.29–0.34 s at
/// best and 0.44–0.83 s as a median, on both sides (docs/benchmarks.md): the best is what the code
/// costs, the median shows how a run's saves vary.
struct Steady {
    session: f64,
    best_save: f64,
    median_save: f64,
}

/// `examples/cluster_saves` on the bench's spec, alone and under `mpirun` (`ranks`
/// processes), `saves` saves each, the best of `options.repeat` runs each, [`in_turns`]
/// (each side empties its own folder right before its run); each turn's files are compared.
fn steady(
    example: &Path,
    dir: &Path,
    (ranks, saves): (usize, usize),
    options: &Options,
) -> (Steady, Steady) {
    let spec = dir.join("spec.json");
    let (one_dir, many_dir) = (dir.join("one"), dir.join("many"));
    let clear = |out: &Path| {
        let _ = std::fs::remove_dir_all(out);
        std::fs::create_dir_all(out).expect("the saves' folder");
    };
    let measure = |cluster: bool| {
        let out = if cluster { &many_dir } else { &one_dir };
        let mut args: Vec<std::ffi::OsString> = vec![
            spec.clone().into_os_string(),
            out.clone().into_os_string(),
            "--saves".into(),
            saves.to_string().into(),
        ];
        let mut command = cli_command(example, (ranks, options), cluster, &mut args);
        let output = command.output().expect("run examples/cluster_saves");
        assert!(output.status.success(), "{command:?} failed");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let number = |after: &str| -> f64 {
            let at = text.find(after).expect("the example's report") + after.len();
            let rest = &text[at..];
            rest[..rest.find(' ').expect("a number")]
                .parse()
                .expect("a number")
        };
        Steady {
            session: number("session "),
            best_save: number("best "),
            median_save: number("median "),
        }
    };
    // Each turn's files compared once both sides have saved, outside either side's run.
    let turns = in_turns(
        options.repeat,
        (|| clear(&one_dir), || measure(false)),
        (|| clear(&many_dir), || measure(true)),
        || same_files(&one_dir, &many_dir),
    );
    let _ = std::fs::remove_dir_all(&one_dir);
    let _ = std::fs::remove_dir_all(&many_dir);
    let best = |side: &dyn Fn(&(Steady, Steady)) -> &Steady| {
        let least = |of: fn(&Steady) -> f64| {
            (turns.iter().map(|turn| of(side(turn)))).fold(f64::INFINITY, f64::min)
        };
        Steady {
            session: least(|steady| steady.session),
            best_save: least(|steady| steady.best_save),
            median_save: least(|steady| steady.median_save),
        }
    };
    (best(&|turn| &turn.0), best(&|turn| &turn.1))
}

/// Builds `examples/mpi_rendezvous` and prints its round trips on 2 ranks, then what each of
/// the 2 ranks' processes spends a second with its rendezvous idle.
fn latency(options: &Options) {
    let example = build_example("mpi_rendezvous");
    for (mode, what) in [("--latency", "round trip"), ("--idle", "idle cost")] {
        let output = example
            .as_ref()
            .and_then(|example| (mpirun(2, options).arg(example).arg(mode)).output().ok());
        match output {
            Some(output) if output.status.success() => {
                for line in String::from_utf8_lossy(&output.stdout).lines() {
                    println!("  rendezvous (MPI, 2 ranks), {line}");
                }
            }
            _ => println!("  rendezvous {what}: not measured (the example did not build or run)"),
        }
    }
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        workloads: Vec::new(),
        ranks: Vec::new(),
        big_tensors: 16,
        repeat: 4,
        dir: std::env::temp_dir(),
        one_core_each: false,
        mpirun_env: Vec::new(),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "big" | "many-small" => options.workloads.push(arg.clone()),
            "--ranks" => options
                .ranks
                .push(value()?.parse().map_err(|_| "bad --ranks")?),
            "--big-tensors" => {
                options.big_tensors = value()?.parse().map_err(|_| "bad --big-tensors")?
            }
            "--repeat" => options.repeat = value()?.parse().map_err(|_| "bad --repeat")?,
            "--dir" => options.dir = PathBuf::from(value()?),
            "--one-core-each" => options.one_core_each = true,
            "--mpirun-env" => match value()? {
                variable if variable.contains('=') => options.mpirun_env.push(variable),
                other => return Err(format!("--mpirun-env {other}: expected NAME=VALUE")),
            },
            "--bench" => {}
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if options.workloads.is_empty() {
        options.workloads = vec!["big".into(), "many-small".into()];
    }
    if options.ranks.is_empty() {
        options.ranks = vec![2, 4];
    }
    Ok(options)
}
