//! `saveplan recover PREFIX`: finishes or rolls back a save a crash interrupted at the prefix
//! and deletes what killed saves left behind, under the prefix's save lock.

use std::path::PathBuf;

use saveplan::bundle::{self, Recovered};

use super::output::outln;

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
    outln!("{}", describe(recovery.merge))?;
    for path in &recovery.removed {
        outln!("removed: {}", path.display())?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// One line on what recovery did, shared with `verify`.
pub fn describe(merge: Recovered) -> &'static str {
    match merge {
        Recovered::Clean => "clean: no interrupted save",
        Recovered::RolledBack => {
            "rolled back: a save was interrupted before its commit; the previous checkpoint is in place"
        }
        Recovered::Completed => {
            "completed: a save was interrupted after its commit; its checkpoint is in place"
        }
    }
}
