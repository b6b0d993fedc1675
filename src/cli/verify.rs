//! `saveplan verify PREFIX`: reads every tensor of a checkpoint and checks every checksum;
//! exits 0 only if all are good and names each bad key otherwise (a missing data file once,
//! with the number of tensors stored there). It changes nothing: a save a crash interrupted at
//! the prefix is reported on the first line, and the checkpoint it left readable (the previous
//! one before the commit point, the new one after) is the one checked; leftovers of killed
//! saves are counted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use saveplan::bundle::journal::JournalState;
use saveplan::bundle::{self, BundleError, BundleReader};

use super::common::progress_bar;
use super::output::{one_line, outln};
use super::values::checkpoint_prefix;

/// Arguments of `saveplan verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint prefix (the path without `.index`), or a directory or `checkpoint` state
    /// file, meaning its latest checkpoint.
    prefix: PathBuf,
}

/// Runs `saveplan verify`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let prefix = checkpoint_prefix(&args.prefix)?;
    // Nothing is changed: an interrupted save is reported, and the checkpoint its journal
    // implies is the one checked.
    let leftovers = bundle::lock::unfinished(&prefix);
    let recover = format!("`saveplan recover {}`", prefix.display());
    match bundle::journal::read_view(&prefix).state {
        JournalState::Absent => {}
        JournalState::BeforeCommit => outln!(
            "interrupted: a save stopped before its commit point; checking the previous checkpoint ({recover} rolls the save back)"
        )?,
        JournalState::AfterCommit => outln!(
            "interrupted: a save stopped after its commit point; checking the new checkpoint ({recover} finishes its cleanup)"
        )?,
        JournalState::Bad(err) => outln!("note: {err}")?,
    }
    if !leftovers.is_empty() {
        outln!(
            "note: {} leftover files of killed saves ({recover} deletes them)",
            leftovers.len()
        )?;
    }
    let reader = BundleReader::open(prefix)?;
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
    // Tensors per missing data file: a lost shard is one problem, said once at the end.
    let mut missing: BTreeMap<PathBuf, (usize, String)> = BTreeMap::new();
    for entry in reader.entries() {
        let checked = reader
            .check_coverage(&entry.key)
            .and_then(|()| reader.verify_entry(&entry.key));
        if let Err(err) = checked {
            n_bad += 1;
            if let BundleError::MissingShard { path, source, .. } = &err {
                let (n_tensors, _) = missing
                    .entry(path.clone())
                    .or_insert_with(|| (0, source.to_string()));
                *n_tensors += 1;
                continue;
            }
            let line = format!("bad: {}: {}", entry.key, one_line(&err));
            match &progress {
                Some(bar) => bar.println(line),
                None => outln!("{line}")?,
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
    for (path, (n_tensors, reason)) in &missing {
        outln!(
            "bad: {}: data shard missing ({reason}), {n_tensors} tensors stored there",
            path.display()
        )?;
    }
    let n_tensors = reader.entries().len();
    if n_bad == 0 {
        outln!("ok: {n_tensors} tensors, {total} bytes, all checksums match")?;
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        outln!("{n_bad} of {n_tensors} tensors are bad")?;
        Ok(std::process::ExitCode::FAILURE)
    }
}
