//! Command-line definitions: one module per subcommand, each with its clap `Args` and a `run`.

use clap::{Parser, Subcommand};

mod check;
mod common;
mod compile;
mod convert;
mod diff;
mod graph;
mod inspect;
mod output;
mod recover;
mod restore;
mod run;
mod save;
mod spec;
mod values;
mod verify;

/// saveplan: compile, export and execute TensorFlow checkpoint save/restore plans.
#[derive(Debug, Parser)]
#[command(name = "saveplan", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    // Subcommands are added here, one line each, as their modules land.
    /// Show, draw and convert TensorFlow graph files.
    Graph(graph::GraphArgs),
    /// List a checkpoint's tensors, print one tensor's values, or show its object graph.
    Inspect(inspect::Args),
    /// Read every tensor of a checkpoint and check every checksum.
    Verify(verify::Args),
    /// Finish or roll back a save a crash interrupted, and delete killed saves' leftovers.
    Recover(recover::Args),
    /// Convert between a .safetensors file and a TF checkpoint prefix.
    Convert(convert::Args),
    /// Compare two checkpoints or .safetensors files key by key (exit 0 equal, 1 different, 2 error).
    Diff(diff::Args),
    /// Compile a spec file into a MetaGraphDef and SaverDef (--emit: their text, IR text, DOT), or
    /// an object spec into its graph-mode write and restore (MetaGraphDef and entry points).
    Compile(compile::Args),
    /// Check a plan (spec, GraphDef, MetaGraphDef or FunctionDef) and report every problem.
    Check(check::Args),
    /// Trace a spec and save values (a .safetensors file) as a TF checkpoint; with an object spec,
    /// write them as `tf.train.Checkpoint(**children).write` does.
    Save(save::Args),
    /// Trace a spec, restore a TF checkpoint and write the values as .safetensors; with an
    /// object spec restore by object (report, --expect).
    Restore(restore::Args),
    /// Print the spec of a checkpoint (an object spec by object), which `save` writes again byte for byte.
    Spec(spec::Args),
    /// Run the save or restore plan of a MetaGraphDef / GraphDef (ours or TensorFlow's).
    Run(run::Args),
}

pub use output::{Reported, is_broken_pipe, report_error};

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Graph(args) => graph::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Check(args) => check::run(args),
        Command::Save(args) => save::run(args),
        Command::Restore(args) => restore::run(args),
        Command::Spec(args) => spec::run(args),
        Command::Run(args) => run::run(args),
    }
}
