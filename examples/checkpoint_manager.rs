//! Drives a [`CheckpointManager`] over `tf.train.Checkpoint(v=v)` (v a float32 vector of one
//! element) with a clock the caller sets, so scripts (the interop suite) can run the same
//! sequence of saves through TensorFlow's `tf.train.CheckpointManager` and compare.
//!
//! ```text
//! checkpoint_manager DIR MAX_TO_KEEP [--keep-hours H] [--async] [--restore T] SAVE...
//! ```
//!
//! `MAX_TO_KEEP` is a number or `none`. Each `SAVE` is `T:V`: at time `T` (seconds since the
//! epoch) v becomes `[V]` and the manager saves. The manager is created at the first time
//! given (`--restore T` or the first save's); `--restore T` first calls
//! `restore_or_initialize()` at time T. Prints each path the manager returns, one a line
//! (`restored PATH` or `initialized` for `--restore`), and writes asynchronously with
//! `--async` (waiting for the last write before it exits).

#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool: prints the paths written and its errors"
)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use saveplan::checkpoint::{
    Checkpoint, CheckpointManager, ManagerOptions, Object, build_object_graph,
};
use saveplan::exec::HostTensor;

const V: &str = "v/.ATTRIBUTES/VARIABLE_VALUE";
const USAGE: &str =
    "usage: checkpoint_manager DIR MAX_TO_KEEP [--keep-hours H] [--async] [--restore T] T:V...";

/// What the command line asks for.
struct Args {
    dir: String,
    max_to_keep: Option<usize>,
    keep_hours: Option<f64>,
    asynchronous: bool,
    restore_at: Option<f64>,
    saves: Vec<(f64, f32)>,
}

fn parse(args: &[String]) -> Result<Args> {
    let [dir, max_to_keep, rest @ ..] = args else {
        bail!(USAGE);
    };
    let max_to_keep = match max_to_keep.as_str() {
        "none" => None,
        n => Some(
            n.parse()
                .with_context(|| format!("bad MAX_TO_KEEP `{n}`"))?,
        ),
    };
    let mut parsed = Args {
        dir: dir.clone(),
        max_to_keep,
        keep_hours: None,
        asynchronous: false,
        restore_at: None,
        saves: Vec::new(),
    };
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        let mut number = |flag: &str| -> Result<f64> {
            let value = rest
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            value
                .parse()
                .with_context(|| format!("bad {flag} value `{value}`"))
        };
        match arg.as_str() {
            "--keep-hours" => parsed.keep_hours = Some(number("--keep-hours")?),
            "--restore" => parsed.restore_at = Some(number("--restore")?),
            "--async" => parsed.asynchronous = true,
            save => {
                let (t, v) = save
                    .split_once(':')
                    .with_context(|| format!("bad save `{save}`: not T:V"))?;
                let t = t.parse().with_context(|| format!("bad time in `{save}`"))?;
                let v = v
                    .parse()
                    .with_context(|| format!("bad value in `{save}`"))?;
                parsed.saves.push((t, v));
            }
        }
    }
    Ok(parsed)
}

fn value(v: f32) -> Result<HostTensor> {
    Ok(HostTensor::from_f32s(vec![1], &[v])?)
}

fn run(args: &Args) -> Result<()> {
    let graph = build_object_graph(&Object::new().child("v", &Object::variable("Variable")))?;
    let checkpoint = Checkpoint::new(graph, BTreeMap::from([(V.to_owned(), value(0.0)?)]))?
        .with_async(args.asynchronous);
    let now = Arc::new(AtomicU64::new(0));
    let set = |t: f64| now.store(t.to_bits(), Ordering::SeqCst);
    let start = args
        .restore_at
        .or(args.saves.first().map(|&(t, _)| t))
        .unwrap_or(0.0);
    set(start);
    let clock = Arc::clone(&now);
    let mut options = ManagerOptions::new(args.max_to_keep)
        .with_clock(move || f64::from_bits(clock.load(Ordering::SeqCst)));
    options.keep_checkpoint_every_n_hours = args.keep_hours;
    let mut manager = CheckpointManager::new(checkpoint, &args.dir, options)?;
    if args.restore_at.is_some() {
        match manager.restore_or_initialize(|_| Ok(()))? {
            Some(path) => println!("restored {}", path.display()),
            None => println!("initialized"),
        }
    }
    for &(t, v) in &args.saves {
        // The timestamp is taken when the write ends: wait for the previous one first.
        manager.sync()?;
        set(t);
        manager.checkpoint_mut().set_value(V, value(v)?)?;
        if let Some(path) = manager.save(None, true)? {
            println!("{}", path.display());
        }
    }
    manager.sync()?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|args| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("checkpoint_manager: {err:#}");
            ExitCode::FAILURE
        }
    }
}
