//! Partitioning cost: a plan of `--tasks` tasks × `--vars-per-task` float32[4] variables (default
//! 1,000 × 100, issue 33's figure) traced and compiled once, then its save run and its restore
//! run split by task ([`saveplan::partition::partition`]), each timed as the best of
//! `--repeat` runs (default 3), with the load average at the start and the end.
//!
//! ```text
//! cargo bench --bench partition -- [--tasks N] [--vars-per-task N] [--repeat N]
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/inputs.rs"]
#[allow(dead_code)]
mod inputs;
#[path = "support/machine.rs"]
#[allow(dead_code)]
mod machine;

use std::time::Instant;

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
    for run in SaverRun::ALL {
        let options = PartitionOptions::for_saver(saver, run, None);
        let mut sizes = (0, 0);
        let best = inputs::best_of(repeat, || {
            let parts = partition(verified, &options).unwrap();
            sizes = (parts.partitions.len(), parts.cross_edges().count());
            drop(parts);
        });
        println!(
            "partition {} run: {:.3} s (best of {repeat}; {} partitions, {} edges between tasks)",
            run.name(),
            best.as_secs_f64(),
            sizes.0,
            sizes.1
        );
    }
    println!("load average at end: {}", machine::load_average());
}
