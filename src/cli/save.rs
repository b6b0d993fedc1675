//! `saveplan save SPEC --values FILE --prefix P`: traces a spec, puts the values into its
//! variables and runs the save plan, writing a TensorFlow checkpoint at the prefix.
//!
//! Values are keyed by checkpoint key. A partitioned variable (several spec entries with one
//! key and slice specs) takes the full tensor under its key; the plan saves its slices.

use std::path::PathBuf;

use anyhow::Context;

use super::common::{ModeArgs, load_spec_session, save};
use super::values::read_values;

/// Arguments of `saveplan save`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec file (JSON: variables and options).
    spec: PathBuf,
    /// The values: a `.safetensors` file keyed by checkpoint key, or a checkpoint prefix
    /// (a directory or `checkpoint` state file: its latest checkpoint).
    #[arg(long, value_name = "FILE")]
    values: PathBuf,
    /// The checkpoint prefix to write (the path without `.index`).
    #[arg(long, value_name = "P")]
    prefix: String,
    #[command(flatten)]
    run: ModeArgs,
}

/// Runs `saveplan save`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let session = load_spec_session(&args.spec, args.run.options()?)?;
    let values = read_values(&args.values)?;
    session
        .assign(values)
        .with_context(|| format!("{}", args.values.display()))?;
    save(&session, &args.prefix)?;
    Ok(std::process::ExitCode::SUCCESS)
}
