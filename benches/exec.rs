//! End-to-end save and restore through the executor ([`Session`], graph mode, plan traced from
//! a generated spec) on the BENCH.md workloads `big` and `many-small`, on one task and on eight
//! tasks, against the bare bundle code on the same data and against TensorFlow measured in the
//! same run.
//!
//! ```text
//! cargo bench --bench exec -- [big] [many-small] [--repeat N] [--min-time SECONDS]
//!                             [--dir DIR] [--no-tf] [--tf-vars N]
//! ```
//!
//! * **ours**: `Session::save` (the traced plan: `SaveV2` per task under the temporary
//!   prefix, then `MergeV2Checkpoints`) and `Session::restore`, each alone (the plan's run:
//!   rows `save` and `restore`) and with the call a user makes beside it (rows `assign + save`,
//!   the map given to `assign` built before the clock starts, and `restore + values`).
//! * **bare**: the same work without the executor: one `BundleIo::save` per task (in parallel
//!   on rayon, as the plan's device queues are) plus `BundleIo::merge`, and one
//!   `BundleIo::restore` per task, all on rayon's pool as the plan's steps are, naming the
//!   tensors by keys made one after another (as the plan's names constant holds them). Ours
//!   and bare run in turn, so that a slow stretch of the machine falls on both. The
//!   executor's overhead is the median over the rounds of ours ÷ bare in the same round,
//!   which one lucky run on either side does not move (the ratio of the two bests is printed
//!   beside it). The rows with the user's call are set against the bare code doing the same
//!   for the same user: saving from the same owned map (built before the clock starts) and
//!   dropping it, as `assign` does, and building the same map of the tensors it read, as
//!   `values` does.
//! * **TF**: `benches/tf_baseline.py` on the same keys, dtypes and shapes (one device; eight
//!   tasks need a cluster): `tf.raw_ops.SaveV2`/`RestoreV2` of every tensor, and
//!   `tf.train.Checkpoint.write`/`read` of one variable per tensor. Checkpoint is timed on the
//!   first `--tf-vars` tensors only (default 10,000) and compared per variable.
//!
//! * **peers** (`support/peers.rs`), on the same tensors in the same folder: the Rust
//!   `safetensors` crate (`serialize_to_file`; read = map + parse + copy each tensor out),
//!   `dd if=/dev/zero bs=16M` of the payload's byte count (no `conv=fsync`: our saves do not
//!   fsync by default) as the write limit, and a read loop with a reused 16 MiB buffer over a
//!   one-task checkpoint's files as the read limit.
//! * **CLI** (`big` only): `saveplan save SPEC --values X.safetensors --prefix P` and
//!   `saveplan restore SPEC --prefix P --out Y.safetensors` as a user runs them, one task,
//!   process start, spec parsing, trace and the safetensors file included.
//!
//! Times are the best of at least `--repeat` runs (default 3), and of as many more as fit in
//! `--min-time` seconds of runs (default 6, at most 50 runs; TensorFlow's rows take
//! `--repeat` runs): a many-small run takes 0.1 s, and its best of five moves by ±15 %
//! between bench runs on a shared machine. Files go to a fresh folder under `--dir`
//! (default `/dev/shm`). Setup (trace + compile + bind) is timed once and printed
//! (`benches/setup.rs` times it as a best of several). Like the CLI, the bench runs with
//! mimalloc as its allocator (unless the `mimalloc` feature is off), transparent huge pages
//! off and each setup's heap populated ahead; the bare code runs in the same process. The output
//! ends with the ratios ours/TF, ours/safetensors and ours/limit (throughput, higher is
//! better) and the load average at the start and the end of the run.

#![allow(clippy::print_stdout, clippy::print_stderr)]

/// The `saveplan` binary's allocator, so that the figures (ours and the bare code's alike) are
/// what the CLI pays; build with `--no-default-features --features jit` for the system
/// allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/machine.rs"]
mod machine;
#[path = "support/peers.rs"]
mod peers;
#[path = "support/tf.rs"]
mod tf_support;

use peers::{Rounds, best_of, each_in_turn};
use tf_support::tf_python;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use saveplan::exec::{
    Backend, BundleIo, CheckpointIo, HostTensor, MergeFlags, RestoreRequest, SaveRequest,
};
use saveplan::session::{Session, SessionOptions};
use saveplan::trace::spec::SpecFile;
use saveplan_ir::DType;
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match Options::parse(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("exec bench: {message}");
            std::process::exit(2);
        }
    };
    let root = options
        .dir
        .join(format!("saveplan-exec-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("create the benchmark folder");
    // As the CLI runs: transparent huge pages off, each setup's heap populated ahead.
    saveplan::process::disable_transparent_huge_pages();
    let load_before = machine::load_average();
    println!("load average at the start: {load_before}");
    let mut rows = Vec::new();
    for name in &options.workloads {
        let workload = Workload::generate(name);
        println!(
            "workload {name}: {} tensors, {:.1} MB payload",
            workload.tensors.len(),
            workload.payload as f64 / 1e6
        );
        for n_tasks in [1, 8] {
            rows.extend(run_ours(&workload, n_tasks, &root, &options));
        }
        rows.extend(run_peers(&workload, &root, &options));
        if options.tf {
            rows.extend(run_tf(&workload, &root, &options));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    print_table(&rows);
    println!();
    println!(
        "load average (1, 5, 15 min): {load_before} at the start, {} at the end",
        machine::load_average()
    );
}

/// Command-line options.
struct Options {
    workloads: Vec<String>,
    repeat: usize,
    min_time: Duration,
    dir: PathBuf,
    tf: bool,
    tf_vars: usize,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            workloads: Vec::new(),
            repeat: 3,
            min_time: Duration::from_secs(6),
            dir: PathBuf::from("/dev/shm"),
            tf: true,
            tf_vars: 10_000,
        };
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let mut value =
                |flag: &str| iter.next().cloned().ok_or(format!("{flag} needs a value"));
            match arg.as_str() {
                "--repeat" => options.repeat = value(arg)?.parse().map_err(|_| "bad --repeat")?,
                "--min-time" => {
                    options.min_time = value(arg)?
                        .parse()
                        .ok()
                        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
                        .ok_or("bad --min-time")?
                }
                "--dir" => options.dir = PathBuf::from(value(arg)?),
                "--tf-vars" => {
                    options.tf_vars = value(arg)?.parse().map_err(|_| "bad --tf-vars")?
                }
                "--no-tf" => options.tf = false,
                "--bench" => {}
                "big" | "many-small" => options.workloads.push(arg.clone()),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if options.workloads.is_empty() {
            options.workloads = vec!["big".to_owned(), "many-small".to_owned()];
        }
        Ok(options)
    }

    /// How many times each of our and the peers' measurements runs.
    fn rounds(&self) -> Rounds {
        Rounds {
            min: self.repeat,
            min_time: self.min_time,
        }
    }
}

/// A workload: keys with float32 values.
struct Workload {
    name: String,
    tensors: Vec<(String, HostTensor)>,
    /// The keys again, made one after another: what the bare code names the tensors by. The
    /// plan's `SaveV2` and `RestoreV2` read theirs from one constant; keys spread among the
    /// tensors' bytes would cost the bare code a cache miss per lookup in the bundle's index
    /// (10 ms of 100,000 restores in `perf`).
    names: Vec<String>,
    payload: u64,
}

impl Workload {
    /// BENCH.md's `big` (16 × float32[4096, 4096]) or `many-small` (100,000 × float32[64]).
    fn generate(name: &str) -> Workload {
        let (count, shape): (usize, Vec<u64>) = match name {
            "big" => (16, vec![4096, 4096]),
            _ => (100_000, vec![64]),
        };
        let n_bytes = shape.iter().product::<u64>() as usize * 4;
        let tensors: Vec<(String, HostTensor)> = (0..count)
            .into_par_iter()
            .map(|index| {
                let mut state = (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let bytes = (0..n_bytes)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state >> 32) as u8 & 0x3f
                    })
                    .collect();
                let key = format!("layer_{index:06}/kernel");
                (
                    key,
                    HostTensor::from_bytes(DType::Float, shape.clone(), bytes).expect("sized"),
                )
            })
            .collect();
        Workload {
            name: name.to_owned(),
            payload: (count * n_bytes) as u64,
            names: tensors.iter().map(|(key, _)| key.clone()).collect(),
            tensors,
        }
    }

    /// The tensors, in order.
    fn values(&self) -> impl Iterator<Item = &HostTensor> + Clone + Sync {
        self.tensors.iter().map(|(_, tensor)| tensor)
    }

    /// The task of tensor `index` with `n_tasks` tasks (equal sizes: round robin is by bytes).
    /// The keys sort as their indexes do, so a map of the tensors by key is in this order.
    fn task_of(index: usize, n_tasks: usize) -> usize {
        index % n_tasks
    }

    /// A spec placing the tensors on `n_tasks` tasks.
    fn spec(&self, n_tasks: usize) -> SpecFile {
        SpecFile::parse(&self.spec_text(n_tasks)).expect("the generated spec parses")
    }

    /// The JSON text of [`Workload::spec`].
    fn spec_text(&self, n_tasks: usize) -> String {
        let variables: Vec<Value> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(index, (key, tensor))| {
                let device = if n_tasks == 1 {
                    "/job:localhost/replica:0/task:0/device:CPU:0".to_owned()
                } else {
                    let task = Workload::task_of(index, n_tasks);
                    format!("/job:worker/replica:0/task:{task}/device:CPU:0")
                };
                json!({"checkpoint_key": key, "dtype": "float32", "shape": tensor.shape(),
                       "device": device})
            })
            .collect();
        json!({"variables": variables}).to_string()
    }
}

/// One measured row: the best time of its runs.
struct Row {
    workload: String,
    layout: String,
    op: &'static str,
    seconds: f64,
    bare: Option<Bare>,
    bytes: u64,
    tensors: usize,
}

/// The bare bundle code's side of one of our rows.
struct Bare {
    /// Its best time.
    seconds: f64,
    /// Ours ÷ bare − 1, the median over the rounds.
    overhead: f64,
}

/// Measures the session on every backend and the bare bundle code on `n_tasks` tasks.
fn run_ours(workload: &Workload, n_tasks: usize, root: &Path, options: &Options) -> Vec<Row> {
    let tasks = if n_tasks == 1 {
        "1 task".to_owned()
    } else {
        format!("{n_tasks} tasks")
    };
    let spec = workload.spec(n_tasks);
    let mut rows = Vec::new();
    for backend in Backend::available() {
        let layout = format!("{tasks}, {backend}");
        let cpu_before = machine::cpu_time(machine::Who::This);
        let start = Instant::now();
        let session_options = SessionOptions {
            backend,
            ..SessionOptions::default()
        };
        let heap = Session::trace_heap_estimate(spec.variables.len(), &session_options);
        drop(saveplan::process::prefault_heap(heap));
        let session = Session::from_spec(&spec, session_options).expect("the session builds");
        let setup = start.elapsed().as_secs_f64();
        let cpu = machine::cpu_time(machine::Who::This) - cpu_before;
        println!("  {layout}: trace + compile + bind {setup:.3} s ({cpu})");
        rows.extend(run_session(
            workload, &session, n_tasks, &layout, root, options,
        ));
    }
    rows
}

/// Measures one session against the bare bundle code.
fn run_session(
    workload: &Workload,
    session: &Session,
    n_tasks: usize,
    layout: &str,
    root: &Path,
    options: &Options,
) -> Vec<Row> {
    let values: BTreeMap<String, HostTensor> = workload.tensors.iter().cloned().collect();
    let dir = root.join(format!("{}-{n_tasks}", workload.name));
    let prefix = dir.join("ckpt").to_string_lossy().into_owned();
    let reset = || {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the run folder");
    };
    // The caller's map is built before the clock starts; `assign` of it is timed, as is the
    // bare code saving from the same map and dropping it.
    let given = Cell::new(None);
    // Ours and the bare code in turn, each best of `repeat` runs of its own; the bare code on
    // a pool thread, as the plan's steps run (which allocator arena serves a thread changes
    // these times by more than the overhead measured). `assign` and `values` are timed
    // apart from the plans' runs too.
    let saves = each_in_turn(
        options.rounds(),
        &mut [
            (
                &mut || {
                    reset();
                    given.set(Some(values.clone()));
                },
                &mut || {
                    let given = given.take().expect("set by the reset");
                    session.assign(given).expect("values fit");
                    session.save(&prefix).expect("save");
                },
            ),
            (&mut || reset(), &mut || {
                session.save(&prefix).expect("save")
            }),
            (&mut || reset(), &mut || {
                let tensors = workload.names.iter().zip(workload.values());
                rayon::scope(|_| bare_save(tensors, n_tasks, &prefix));
            }),
            (
                &mut || {
                    reset();
                    given.set(Some(values.clone()));
                },
                &mut || {
                    let given = given.take().expect("set by the reset");
                    rayon::scope(|_| bare_save(given.iter(), n_tasks, &prefix));
                    drop(given);
                },
            ),
        ],
    );
    reset();
    session.save(&prefix).expect("save");
    let restores = each_in_turn(
        options.rounds(),
        &mut [
            (&mut || {}, &mut || {
                session.restore(&prefix).expect("restore");
                let restored = session.values().expect("values");
                assert_eq!(restored.len(), values.len());
            }),
            (&mut || {}, &mut || {
                session.restore(&prefix).expect("restore")
            }),
            (&mut || {}, &mut || {
                rayon::scope(|_| bare_restore(workload, &prefix));
            }),
            (&mut || {}, &mut || {
                let read = rayon::scope(|_| bare_restore(workload, &prefix));
                let keys = workload.names.iter().cloned();
                let restored: BTreeMap<String, HostTensor> = keys.zip(read).collect();
                assert_eq!(restored.len(), values.len());
            }),
        ],
    );
    let restored = session.values().expect("values");
    assert!(restored == values, "restored values differ");
    println!(
        "  {layout}: {} rounds of saves, {} of restores",
        saves[0].len(),
        restores[0].len()
    );
    let row = |op, ours: &[Duration], bare: &[Duration]| Row {
        workload: workload.name.clone(),
        layout: layout.to_owned(),
        op,
        seconds: best(ours),
        bare: Some(Bare {
            seconds: best(bare),
            overhead: median_ratio(ours, bare) - 1.0,
        }),
        bytes: workload.payload,
        tensors: workload.tensors.len(),
    };
    vec![
        row("save", &saves[1], &saves[2]),
        row("assign + save", &saves[0], &saves[3]),
        row("restore", &restores[1], &restores[2]),
        row("restore + values", &restores[0], &restores[3]),
    ]
}

/// The best of `times`, in seconds.
fn best(times: &[Duration]) -> f64 {
    times.iter().min().expect("at least one run").as_secs_f64()
}

/// The median over the rounds of `ours[i] ÷ bare[i]`.
fn median_ratio(ours: &[Duration], bare: &[Duration]) -> f64 {
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(bare)
        .map(|(ours, bare)| ours.as_secs_f64() / bare.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    }
}

/// The plan's file work without the executor: one bundle per task under the temporary prefix
/// (tasks in parallel), then the merge, of `tensors` in the workload's order.
fn bare_save<'t>(
    tensors: impl Iterator<Item = (&'t String, &'t HostTensor)> + Clone + Sync,
    n_tasks: usize,
    prefix: &str,
) {
    let temp = saveplan::bundle::temp_prefix(prefix);
    let parts: Vec<String> = (0..n_tasks)
        .map(|task| saveplan::bundle::sharded_filename(&temp, task as u32, n_tasks as u32))
        .collect();
    parts.par_iter().enumerate().for_each(|(task, part)| {
        let requests: Vec<SaveRequest<'_>> = tensors
            .clone()
            .enumerate()
            .filter(|(index, _)| Workload::task_of(*index, n_tasks) == task)
            .map(|(_, (key, tensor))| SaveRequest {
                name: key,
                shape_and_slice: "",
                tensor,
            })
            .collect();
        BundleIo::default()
            .save(part, &requests)
            .expect("bare save");
    });
    let sources: Vec<&str> = parts.iter().map(String::as_str).collect();
    BundleIo::default()
        .merge(&sources, prefix, MergeFlags::default())
        .expect("bare merge");
}

/// Reads every tensor of the checkpoint with the bundle code, in the workload's order.
fn bare_restore(workload: &Workload, prefix: &str) -> Vec<HostTensor> {
    let requests: Vec<RestoreRequest<'_>> = workload
        .names
        .iter()
        .map(|name| RestoreRequest {
            name,
            shape_and_slice: "",
            dtype: DType::Float,
        })
        .collect();
    let out = BundleIo::default()
        .restore(prefix, &requests)
        .expect("bare restore");
    assert_eq!(out.len(), requests.len());
    out
}

/// Measures the peers on the workload's tensors: safetensors, the `dd` and read limits and,
/// for `big`, the CLI end to end.
fn run_peers(workload: &Workload, root: &Path, options: &Options) -> Vec<Row> {
    let dir = root.join(format!("{}-peers", workload.name));
    let reset = || {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the peers folder");
    };
    let row = |op: &'static str, layout: &str, seconds: Duration| Row {
        workload: workload.name.clone(),
        layout: layout.to_owned(),
        op,
        seconds: seconds.as_secs_f64(),
        bare: None,
        bytes: workload.payload,
        tensors: workload.tensors.len(),
    };
    let mut rows = Vec::new();
    let file = dir.join("values.safetensors");
    let write = best_of(options.rounds(), reset, || {
        peers::safetensors_write(&workload.tensors, &file)
    });
    rows.push(row("safetensors write", "1 file", write));
    let read = best_of(
        options.rounds(),
        || {},
        || {
            let tensors = peers::safetensors_read(&file);
            assert_eq!(tensors.len(), workload.tensors.len());
        },
    );
    rows.push(row("safetensors read", "1 file", read));
    let dd_file = dir.join("dd.bin");
    let dd = best_of(
        options.rounds(),
        || {
            let _ = std::fs::remove_file(&dd_file);
        },
        || peers::dd_write(&dd_file, workload.payload),
    );
    rows.push(row("dd write (limit)", "bs=16M, no fsync", dd));
    let _ = std::fs::remove_file(&dd_file);
    let prefix = dir.join("ckpt");
    let prefix_text = prefix.to_string_lossy().into_owned();
    bare_save(
        workload.names.iter().zip(workload.values()),
        1,
        &prefix_text,
    );
    let read_limit = best_of(
        options.rounds(),
        || {},
        || assert!(peers::read_files(&prefix) >= workload.payload),
    );
    rows.push(row("read files (limit)", "16 MiB buffer", read_limit));
    if workload.name == "big" {
        let spec = dir.join("spec.json");
        std::fs::write(&spec, workload.spec_text(1)).expect("write the spec");
        let spec = spec.to_string_lossy().into_owned();
        let values = file.to_string_lossy().into_owned();
        let cli_prefix = dir.join("cli").join("ckpt").to_string_lossy().into_owned();
        let out = dir
            .join("restored.safetensors")
            .to_string_lossy()
            .into_owned();
        let cli_dir = dir.join("cli");
        let cpu_before = machine::cpu_time(machine::Who::Children);
        let save = best_of(
            options.rounds(),
            || {
                let _ = std::fs::remove_dir_all(&cli_dir);
            },
            || peers::cli(&["save", &spec, "--values", &values, "--prefix", &cli_prefix]),
        );
        rows.push(row("CLI save", "1 task, interp, end to end", save));
        let restore = best_of(
            options.rounds(),
            || {
                let _ = std::fs::remove_file(&out);
            },
            || peers::cli(&["restore", &spec, "--prefix", &cli_prefix, "--out", &out]),
        );
        rows.push(row("CLI restore", "1 task, interp, end to end", restore));
        let cpu = machine::cpu_time(machine::Who::Children) - cpu_before;
        println!("  CLI save and restore, all runs: {cpu}");
    }
    rows
}

/// Runs `benches/tf_baseline.py` on the workload's manifest (one device).
fn run_tf(workload: &Workload, root: &Path, options: &Options) -> Vec<Row> {
    let python = match tf_python() {
        Ok(python) => python,
        Err(why) => {
            println!("  TF baseline skipped: {why}");
            return Vec::new();
        }
    };
    let manifest = root.join(format!("{}.json", workload.name));
    let tensors: Vec<Value> = workload
        .tensors
        .iter()
        .map(|(key, tensor)| json!([key, "float32", tensor.shape()]))
        .collect();
    std::fs::write(
        &manifest,
        json!({"name": workload.name, "tensors": tensors}).to_string(),
    )
    .expect("write the manifest");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/tf_baseline.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(&manifest)
        .arg(root.join("tf"))
        .args(["--ops", "saveV2,restoreV2,ckpt_write,ckpt_read"])
        .args(["--repeat", &options.repeat.to_string()])
        .args(["--limit-vars", &options.tf_vars.to_string()])
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            println!(
                "  TF baseline failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            return Vec::new();
        }
        Err(err) => {
            println!("  TF baseline failed to start: {err}");
            return Vec::new();
        }
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|result| {
            let op = match result["op"].as_str()? {
                "saveV2" => "TF SaveV2",
                "restoreV2" => "TF RestoreV2",
                "ckpt_write" => "TF Checkpoint.write",
                "ckpt_read" => "TF Checkpoint.read",
                _ => return None,
            };
            Some(Row {
                workload: workload.name.clone(),
                layout: "1 device".to_owned(),
                op,
                seconds: result["seconds"].as_f64()?,
                bare: None,
                bytes: result["bytes"].as_u64()?,
                tensors: result["tensors"].as_u64()? as usize,
            })
        })
        .collect()
}

/// Prints every row, then the ratios against TensorFlow per workload.
fn print_table(rows: &[Row]) {
    println!();
    println!(
        "| workload | layout | op | time | GB/s | µs/tensor | bare bundle | executor overhead \
         | best ÷ best |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let (bare, overhead, of_bests) = match &row.bare {
            Some(bare) => (
                format!("{:.3} s", bare.seconds),
                format!("{:+.1} %", bare.overhead * 100.0),
                format!("{:+.1} %", (row.seconds / bare.seconds - 1.0) * 100.0),
            ),
            None => Default::default(),
        };
        println!(
            "| {} | {} | {} | {:.3} s | {:.2} | {:.2} | {bare} | {overhead} | {of_bests} |",
            row.workload,
            row.layout,
            row.op,
            row.seconds,
            row.bytes as f64 / row.seconds / 1e9,
            row.seconds * 1e6 / row.tensors as f64,
        );
    }
    println!();
    println!("Ratios: ours ÷ peer in throughput (per byte; > 1 means ours is faster).");
    println!();
    println!("| workload | ours | peer | ours / peer |");
    println!("|---|---|---|---|");
    let per_byte = |row: &Row| row.seconds / row.bytes as f64;
    let is_ours = |row: &&Row| row.bare.is_some() || row.op.starts_with("CLI");
    for ours in rows.iter().filter(is_ours) {
        let peers: &[&str] = match ours.op {
            "save" | "assign + save" | "CLI save" => &[
                "TF SaveV2",
                "TF Checkpoint.write",
                "safetensors write",
                "dd write (limit)",
            ],
            _ => &[
                "TF RestoreV2",
                "TF Checkpoint.read",
                "safetensors read",
                "read files (limit)",
            ],
        };
        for &peer_op in peers {
            let Some(peer) = rows
                .iter()
                .find(|row| row.workload == ours.workload && row.op == peer_op)
            else {
                continue;
            };
            println!(
                "| {} | {} {} | {peer_op} | {:.2}× |",
                ours.workload,
                ours.layout,
                ours.op,
                per_byte(peer) / per_byte(ours)
            );
        }
    }
}
