//! Setup cost of a graph-mode [`Session`] (trace + verify + plan compile + bind) for N
//! float32[64] variables (default 100,000, BENCH.md's `many-small`) on 1 and 8 tasks and on
//! every backend, and, with `--cli BIN`, the CLI's `compile` of the spec on 1 and 8 tasks
//! (default outputs) and its `check`, `graph show` and `run --save` of the MetaGraphDef that
//! `BIN compile` made of the 1-task spec.
//!
//! ```text
//! cargo bench --bench setup -- [--vars N] [--repeat N] [--cli BIN] [--dir DIR] [--thp] [--no-prefault]
//! ```
//!
//! Times are the best of `--repeat` runs (default 1), each printed with the CPU time of all
//! its runs split into user and system seconds, and the load average at the start and the
//! end. The allocator is the CLI's (mimalloc) unless the `mimalloc` feature is off, and like
//! the CLI the bench turns transparent huge pages off for itself
//! ([`saveplan::process::disable_transparent_huge_pages`]) unless given `--thp`, and has the
//! heap each setup's trace will write populated ahead on another core, as `saveplan save` and
//! `restore` do ([`saveplan::process::prefault_heap`]), unless given `--no-prefault`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

/// The `saveplan` binary's allocator, so that the figures are what the CLI pays; build with
/// `--no-default-features --features jit` for the system allocator (a library user picks
/// their own).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The global allocator these figures were measured with.
const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[path = "support/inputs.rs"]
mod inputs;
#[path = "support/machine.rs"]
mod machine;

use inputs::{best_of, safetensors_values};
use machine::Who;
use saveplan::exec::Backend;
use saveplan::session::{Session, SessionOptions};
use saveplan::trace::spec::SpecFile;
use serde_json::{Value, json};

/// Command-line options.
struct Options {
    vars: usize,
    repeat: usize,
    cli: Option<PathBuf>,
    dir: PathBuf,
    /// Keep transparent huge pages (the system's default) instead of turning them off as the
    /// CLI does.
    thp: bool,
    /// Let the trace fault its heap in page by page, instead of populating it ahead as the
    /// CLI does.
    no_prefault: bool,
}

fn main() {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("setup bench: {message}");
            std::process::exit(2);
        }
    };
    if !options.thp {
        saveplan::process::disable_transparent_huge_pages();
    }
    let pages = if saveplan::process::transparent_huge_pages_disabled() {
        "transparent huge pages off, as in the CLI"
    } else {
        "the system's transparent huge page setting"
    };
    let heap = if options.no_prefault {
        "heap faulted in as touched"
    } else {
        "heap populated ahead, as in the CLI"
    };
    let load_before = machine::load_average();
    println!(
        "setup of {} float32[64] variables ({ALLOCATOR} allocator, {pages}, {heap}); load average {load_before}",
        options.vars
    );
    for n_tasks in [1, 8] {
        let text = spec_text(options.vars, n_tasks);
        let spec = SpecFile::parse(&text).expect("the generated spec parses");
        for backend in Backend::available() {
            // Dropped after timing, as a program keeps its session.
            let mut sessions = Vec::new();
            let cpu_before = machine::cpu_time(Who::This);
            let setup = best_of(options.repeat, || {
                let session_options = SessionOptions {
                    backend,
                    ..SessionOptions::default()
                };
                if !options.no_prefault {
                    let bytes =
                        Session::trace_heap_estimate(spec.variables.len(), &session_options);
                    drop(saveplan::process::prefault_heap(bytes));
                }
                let session = Session::from_spec(&spec, session_options).expect("session builds");
                sessions.push(session);
            });
            let cpu = machine::cpu_time(Who::This) - cpu_before;
            drop(sessions);
            println!(
                "  {n_tasks} task(s), {backend}: trace + compile + bind {:.3} s (all runs: {cpu})",
                setup.as_secs_f64()
            );
        }
    }
    if let Some(cli) = &options.cli {
        run_cli(cli, &options);
    }
    println!(
        "load average (1, 5, 15 min): {load_before} at the start, {} at the end",
        machine::load_average()
    );
}

/// Times the CLI's `compile` of the 1- and 8-task specs, and its commands on the MetaGraphDef
/// compiled from the 1-task spec.
fn run_cli(cli: &PathBuf, options: &Options) {
    let dir = options
        .dir
        .join(format!("saveplan-setup-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the bench folder");
    let spec = dir.join("spec.json");
    std::fs::write(&spec, spec_text(options.vars, 1)).expect("write the spec");
    let out = dir.join("plan");
    let status = Command::new(cli)
        .arg("compile")
        .arg(&spec)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .expect("run compile");
    assert!(status.success(), "compile failed");
    let meta = out.join("meta_graph.pb");
    let prefix = dir.join("ckpt");
    let values = dir.join("values.safetensors");
    std::fs::write(
        &values,
        safetensors_values(options.vars, |index| format!("layer_{index:06}/kernel")),
    )
    .expect("write the values");
    let spec8 = dir.join("spec8.json");
    std::fs::write(&spec8, spec_text(options.vars, 8)).expect("write the 8-task spec");
    let out8 = dir.join("plan8");
    let compile = |spec: &PathBuf, out: &PathBuf| -> Vec<String> {
        vec![
            "compile".into(),
            spec.display().to_string(),
            "-o".into(),
            out.display().to_string(),
        ]
    };
    let commands: [(&str, Vec<String>); 5] = [
        ("compile, 1 task", compile(&spec, &out)),
        ("compile, 8 tasks", compile(&spec8, &out8)),
        ("check", vec!["check".into(), meta.display().to_string()]),
        (
            "graph show",
            vec!["graph".into(), "show".into(), meta.display().to_string()],
        ),
        (
            "run --save",
            vec![
                "run".into(),
                meta.display().to_string(),
                "--values".into(),
                values.display().to_string(),
                "--save".into(),
                prefix.display().to_string(),
            ],
        ),
    ];
    for (what, args) in commands {
        let cpu_before = machine::cpu_time(Who::Children);
        let time = best_of(options.repeat, || {
            let status = Command::new(cli)
                .args(&args)
                .stdout(Stdio::null())
                .status()
                .expect("run the cli");
            assert!(status.success(), "{what} failed");
        });
        let cpu = machine::cpu_time(Who::Children) - cpu_before;
        println!(
            "  cli {what}: {:.3} s (all runs: {cpu})",
            time.as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spec of `n` float32[64] variables round-robin over `n_tasks` tasks.
fn spec_text(n: usize, n_tasks: usize) -> String {
    let variables: Vec<Value> = (0..n)
        .map(|index| {
            let device = if n_tasks == 1 {
                "/job:localhost/replica:0/task:0/device:CPU:0".to_owned()
            } else {
                format!(
                    "/job:worker/replica:0/task:{}/device:CPU:0",
                    index % n_tasks
                )
            };
            json!({"checkpoint_key": format!("layer_{index:06}/kernel"), "dtype": "float32",
                   "shape": [64], "device": device})
        })
        .collect();
    json!({ "variables": variables }).to_string()
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        vars: 100_000,
        repeat: 1,
        cli: None,
        dir: PathBuf::from("/dev/shm"),
        thp: false,
        no_prefault: false,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--vars" => options.vars = value()?.parse().map_err(|_| "bad --vars")?,
            "--repeat" => options.repeat = value()?.parse().map_err(|_| "bad --repeat")?,
            "--cli" => options.cli = Some(PathBuf::from(value()?)),
            "--dir" => options.dir = PathBuf::from(value()?),
            "--thp" => options.thp = true,
            "--no-prefault" => options.no_prefault = true,
            "--bench" => {}
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}
