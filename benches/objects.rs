//! Saving and restoring by object spec against the same variables by plain spec: the CLI's
//! `save` and `restore` of N float32[64] variables (10,000 and 100,000 by default), each a
//! root child of a `tf.train.Checkpoint` in the object spec and the same checkpoint key in
//! the plain spec, from one `.safetensors` values file. Each row prints both times and their
//! ratio; an object spec must stay within 2× of the plain spec at every size (linear: its
//! cost per variable does not grow with N).
//!
//! ```text
//! cargo bench --bench objects -- [--vars N]... [--repeat N] [--dir DIR]
//! ```
//!
//! Times are the best of `--repeat` runs (default 3) of the CLI this bench was built with,
//! with the load average at the start and the end.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "support/inputs.rs"]
mod inputs;
#[path = "support/machine.rs"]
mod machine;

use inputs::{best_of, safetensors_values};
use machine::Who;
use serde_json::{Value, json};

/// Command-line options.
struct Options {
    vars: Vec<usize>,
    repeat: usize,
    dir: PathBuf,
}

fn main() {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("objects bench: {message}");
            std::process::exit(2);
        }
    };
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_saveplan"));
    let dir = options
        .dir
        .join(format!("saveplan-objects-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the bench folder");
    let load_before = machine::load_average();
    let cpu_before = (
        machine::cpu_time(Who::Children),
        machine::cpu_time(Who::This),
    );
    println!(
        "object spec vs plain spec, CLI save and restore of float32[64] variables (best of {}); load average {load_before}",
        options.repeat
    );
    for &n in &options.vars {
        let write = |name: &str, bytes: Vec<u8>| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).expect("write a bench input");
            path
        };
        let values = write("values.safetensors", safetensors_values(n, key));
        let plain = write("plain.json", plain_spec(n).into_bytes());
        let objects = write("objects.json", object_spec(n).into_bytes());
        let plain_prefix = dir.join("plain_ckpt");
        let object_prefix = dir.join("object_ckpt");
        let out = dir.join("out.safetensors");
        let save = |spec: &Path, prefix: &Path| {
            best_of(options.repeat, || {
                let _ = std::fs::remove_dir_all(prefix);
                run(
                    &cli,
                    &[
                        "save".as_ref(),
                        spec.as_os_str(),
                        "--values".as_ref(),
                        values.as_os_str(),
                        "--prefix".as_ref(),
                        prefix.as_os_str(),
                    ],
                );
            })
        };
        let restore = |spec: &Path, prefix: &Path| {
            best_of(options.repeat, || {
                run(
                    &cli,
                    &[
                        "restore".as_ref(),
                        spec.as_os_str(),
                        "--prefix".as_ref(),
                        prefix.as_os_str(),
                        "--out".as_ref(),
                        out.as_os_str(),
                    ],
                );
            })
        };
        let (save_plain, save_objects) =
            (save(&plain, &plain_prefix), save(&objects, &object_prefix));
        let (restore_plain, restore_objects) = (
            restore(&plain, &plain_prefix),
            restore(&objects, &object_prefix),
        );
        let ratio =
            |objects: Duration, plain: Duration| objects.as_secs_f64() / plain.as_secs_f64();
        println!(
            "  {n} variables: save plain {:.3} s, object {:.3} s ({:.2}×); restore plain {:.3} s, object {:.3} s ({:.2}×)",
            save_plain.as_secs_f64(),
            save_objects.as_secs_f64(),
            ratio(save_objects, save_plain),
            restore_plain.as_secs_f64(),
            restore_objects.as_secs_f64(),
            ratio(restore_objects, restore_plain),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "CPU time: the CLI's runs {}, the bench's inputs {}",
        machine::cpu_time(Who::Children) - cpu_before.0,
        machine::cpu_time(Who::This) - cpu_before.1
    );
    println!(
        "load average (1, 5, 15 min): {load_before} at the start, {} at the end",
        machine::load_average()
    );
}

/// Runs the CLI, which must succeed.
fn run(cli: &Path, args: &[&std::ffi::OsStr]) {
    let status = Command::new(cli)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("run the cli");
    assert!(status.success(), "saveplan {args:?} failed");
}

/// The checkpoint key of variable `index`: a root child's `VARIABLE_VALUE`.
fn key(index: usize) -> String {
    format!("{}/.ATTRIBUTES/VARIABLE_VALUE", name(index))
}

fn name(index: usize) -> String {
    format!("layer_{index:06}")
}

/// A plain spec of `n` float32[64] variables under [`key`].
fn plain_spec(n: usize) -> String {
    let variables: Vec<Value> = (0..n)
        .map(|index| {
            json!({"checkpoint_key": key(index), "dtype": "float32", "shape": [64],
                   "device": "/job:localhost/replica:0/task:0/device:CPU:0"})
        })
        .collect();
    json!({ "variables": variables }).to_string()
}

/// An object spec of the same variables, each a child of the root.
fn object_spec(n: usize) -> String {
    let objects: Vec<Value> = (0..n)
        .map(|index| json!({"path": [name(index)], "dtype": "float32", "shape": [64]}))
        .collect();
    json!({ "objects": objects }).to_string()
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        vars: Vec::new(),
        repeat: 3,
        dir: std::env::temp_dir(),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--vars" => options
                .vars
                .push(value()?.parse().map_err(|_| "bad --vars")?),
            "--repeat" => options.repeat = value()?.parse().map_err(|_| "bad --repeat")?,
            "--dir" => options.dir = PathBuf::from(value()?),
            "--bench" => {}
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if options.vars.is_empty() {
        options.vars = vec![10_000, 100_000];
    }
    Ok(options)
}
