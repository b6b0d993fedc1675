//! `saveplan restore SPEC --prefix P --out FILE.safetensors`: traces a spec, runs its restore
//! plan on the checkpoint at the prefix and writes the restored values by checkpoint key
//! (partitioned variables assembled into their full tensors).

use std::path::PathBuf;

use super::common::{ModeArgs, load_spec_session, restore_to_file};

/// Arguments of `saveplan restore`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spec file (JSON: variables and options).
    spec: PathBuf,
    /// The checkpoint prefix to read (the path without `.index`), or a directory or
    /// `checkpoint` state file, meaning its latest checkpoint.
    #[arg(long, value_name = "P")]
    prefix: String,
    /// The `.safetensors` file to write.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    #[command(flatten)]
    run: ModeArgs,
}

/// Runs `saveplan restore`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let session = load_spec_session(&args.spec, args.run.options()?)?;
    restore_to_file(&session, &args.prefix, &args.out)?;
    Ok(std::process::ExitCode::SUCCESS)
}
