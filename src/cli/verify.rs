//! `saveplan verify PREFIX`: reads every tensor of a checkpoint and checks every checksum;
//! exits 0 only if all are good and names each bad key otherwise.

use std::path::PathBuf;

use saveplan::bundle::BundleReader;

use super::common::{checkpoint_prefix, progress_bar};

/// Arguments of `saveplan verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint prefix (the path without `.index`), or a directory or `checkpoint` state
    /// file, meaning its latest checkpoint.
    prefix: PathBuf,
}

/// Runs `saveplan verify`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let reader = BundleReader::open(checkpoint_prefix(&args.prefix)?)?;
    let total: u64 = reader
        .entries()
        .iter()
        .map(|entry| {
            entry.size
                + reader
                    .slice_entries(&entry.key)
                    .iter()
                    .map(|piece| piece.size)
                    .sum::<u64>()
        })
        .sum();
    let progress = progress_bar(total, "verifying");
    let mut n_bad = 0usize;
    for entry in reader.entries() {
        if let Err(err) = reader.verify_entry(&entry.key) {
            n_bad += 1;
            let line = format!("bad: {}: {err}", entry.key);
            match &progress {
                Some(bar) => bar.println(line),
                None => println!("{line}"),
            }
        }
        if let Some(bar) = &progress {
            bar.inc(
                entry.size
                    + reader
                        .slice_entries(&entry.key)
                        .iter()
                        .map(|piece| piece.size)
                        .sum::<u64>(),
            );
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let n_tensors = reader.entries().len();
    if n_bad == 0 {
        println!("ok: {n_tensors} tensors, {total} bytes, all checksums match");
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        println!("{n_bad} of {n_tensors} tensors are bad");
        Ok(std::process::ExitCode::FAILURE)
    }
}
