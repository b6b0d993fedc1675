//! Partitioning cost: a plan of `--tasks` tasks × `--vars-per-task` float32[4] variables (default
//! 1,000 × 100, issue 33's figure) traced and compiled once, then its save run and its restore
//! run split by task ([`saveplan::partition::partition`]): the restore run as the `SaverDef`
//! runs it (`save/restore_all`, a `NoOp` on the session's task after every assign: one control
//! edge per assign on another task) and as TensorFlow's fixtures fetch it (the assigns). Each
//! is timed as the best of `--repeat` runs (default 3), without dropping its result, with the
//! load average at the start and the end.
//!
//! ```text
//! cargo bench --bench partition -- [--tasks N] [--vars-per-task N] [--repeat N]
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/machine.rs"]
#[allow(dead_code)]
mod machine;

use std::time::Instant;

use machine::Who;

use saveplan::compile::{Form, compile};
use saveplan::partition::{PartitionOptions, SaverRun, partition};
use saveplan::trace::spec::SpecFile;
use saveplan_ir::verify::verify_module;
use serde_json::json;

fn main() {
    let mut tasks = 1000;
    let mut per_task = 100;
    let mut repeat = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> usize {
            let parsed = args.next().and_then(|value| value.parse().ok());
            parsed.unwrap_or_else(|| {
                eprintln!("partition bench: {name} takes a number");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--tasks" => tasks = value("--tasks"),
            "--vars-per-task" => per_task = value("--vars-per-task"),
            "--repeat" => repeat = value("--repeat").max(1),
            "--bench" => {}
            other => {
                eprintln!("partition bench: unknown argument {other}");
                std::process::exit(2)
            }
        }
    }
    println!("load average at start: {}", machine::load_average());
    let variables: Vec<_> = (0..tasks * per_task)
        .map(|i| {
            json!({
                "checkpoint_key": format!("layer_{i}/kernel"),
                "dtype": "float32",
                "shape": [4],
                "device": format!("/job:worker/replica:0/task:{}/device:CPU:0", i % tasks),
            })
        })
        .collect();
    let spec = SpecFile::parse(&json!({ "variables": variables }).to_string()).unwrap();
    let started = Instant::now();
    let plan = compile(&spec, Form::Flat).unwrap();
    let module = &plan.meta_graph.module;
    let saver = plan.meta_graph.saver_def.as_ref().unwrap();
    let verified = verify_module(module).unwrap();
    println!(
        "{tasks} tasks x {per_task} variables: {} ops, compiled and verified in {:.2} s",
        module.graph.len(),
        started.elapsed().as_secs_f64()
    );
    let graph = &module.graph;
    let restore_all = graph.find(&saver.restore_op_name).unwrap();
    let assigns: Vec<String> = (graph.control_inputs(restore_all).into_iter())
        .map(|id| graph.op(id).name.clone())
        .collect();
    let runs = [
        (
            "save run",
            PartitionOptions::for_saver(saver, SaverRun::Save, None),
        ),
        (
            "restore run (save/restore_all)",
            PartitionOptions::for_saver(saver, SaverRun::Restore, None),
        ),
        (
            "restore run (its assigns, as TF's fixtures fetch)",
            PartitionOptions {
                targets: assigns,
                ..PartitionOptions::for_saver(saver, SaverRun::Restore, None)
            },
        ),
    ];
    for (name, options) in runs {
        // Timed without dropping the result (a thousand modules).
        // The CPU time of the best run too: the partitioner runs on one thread, so on a
        // loaded machine its CPU time is what the run costs.
        let mut best = (std::time::Duration::MAX, machine::CpuTime::default());
        let mut sizes = (0, 0);
        for _ in 0..repeat {
            let (started, cpu) = (Instant::now(), machine::cpu_time(Who::This));
            let parts = partition(verified, &options).unwrap();
            let (elapsed, cpu) = (started.elapsed(), machine::cpu_time(Who::This) - cpu);
            if elapsed < best.0 {
                best = (elapsed, cpu);
            }
            sizes = (parts.partitions.len(), parts.cross_edges().count());
            drop(parts);
        }
        println!(
            "partition, {name}: {:.3} s ({}; best of {repeat}; {} partitions, {} edges between tasks)",
            best.0.as_secs_f64(),
            best.1,
            sizes.0,
            sizes.1
        );
    }
    println!("load average at end: {}", machine::load_average());
}
