//! `saveplan recover PREFIX`: finishes or rolls back a save a crash interrupted at the prefix
//! and deletes what killed saves left behind, under the prefix's save lock.

use std::path::PathBuf;

use saveplan::bundle;

use super::output::{describe_recovery, outln};

/// Arguments of `saveplan recover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint prefix (the path without `.index`).
    prefix: PathBuf,
}

/// Runs `saveplan recover`: one line on what happened to an interrupted merge, then one per
/// deleted leftover.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let recovery = bundle::recover(&args.prefix)?;
    outln!("{}", describe_recovery(recovery.merge))?;
    for path in &recovery.removed {
        outln!("removed: {}", path.display())?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
