//! Replacing a checkpoint's files so that a crash at any point leaves the old checkpoint or
//! the new one, and recovering after such a crash.
//!
//! A commit moves new data files and then a staged index onto their final names. Before the
//! first rename it writes a journal, `<prefix>.merging` (through a temporary name, so it is
//! whole or absent), listing every step: `from`, `to`, and the backup name the file at `to` is
//! moved aside to. The rename of the staged index onto `<prefix>.index` is the commit point:
//!
//! - while the staged index still exists, the commit has not happened and [`recover_journal`]
//!   rolls back (each moved file back to `from`, each backup back to `to`, in reverse order);
//! - once it is gone, the new checkpoint is complete and recovery rolls forward (deletes the
//!   backups).
//!
//! Each recovery step checks what is on disk before it moves anything, so a crash during
//! recovery is recovered by running it again. The journal is deleted last. Final `.index` and
//! `.data-*` names only ever hold whole files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{BundleError, Result};
use super::{fsops, index_path};

/// The first line of every journal.
const MAGIC: &str = "saveplan merge journal 1";

/// What [`recover_journal`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovered {
    /// No interrupted merge: nothing to do.
    Clean,
    /// A merge was interrupted before its commit point; the previous checkpoint is back.
    RolledBack,
    /// A merge was interrupted after its commit point; its backups are deleted, the new
    /// checkpoint stays.
    Completed,
}

/// The journal of an interrupted merge into `prefix`: `<prefix>.merging`.
pub fn journal_path(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".merging");
    PathBuf::from(name)
}

/// `path` + `marker` + `<pid>-<n>`: a name no other process, and no other call in this
/// process, uses.
pub(crate) fn unique_name(path: &Path, marker: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = path.as_os_str().to_owned();
    name.push(format!("{marker}{}-{count}", std::process::id()));
    PathBuf::from(name)
}

/// One rename of a commit; what was at `to` is first moved to `backup`.
#[derive(Debug)]
struct Step {
    from: PathBuf,
    to: PathBuf,
    backup: PathBuf,
}

/// Moves the data files `moves` (from, to) and then `staged` onto `<dest>.index`, as one step
/// a crash cannot split (see the module docs). An interrupted earlier commit at `dest` is
/// recovered first. On failure everything done is rolled back; if even that fails, the
/// journal stays for the next recovery.
pub(crate) fn commit(
    dest: &Path,
    moves: &[(PathBuf, PathBuf)],
    staged: &Path,
    fsync: bool,
) -> Result<()> {
    recover_journal(dest)?;
    let index = index_path(dest);
    let steps: Vec<Step> = moves
        .iter()
        .map(|(from, to)| (from.as_path(), to.as_path()))
        .chain([(staged, index.as_path())])
        .map(|(from, to)| Step {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            backup: unique_name(to, ".merging-old"),
        })
        .collect();
    let journal = journal_path(dest);
    write_journal(&journal, &steps, fsync)?;
    if let Err(err) = steps.iter().try_for_each(replace) {
        // Best effort: if the roll back fails too, the journal stays and the next open
        // finishes it.
        let _ = roll_back(&journal, &steps);
        return Err(err);
    }
    if fsync {
        sync_parent(&index)?;
    }
    // Committed: a backup that cannot be deleted now is deleted by the next recovery (the
    // journal is deleted only after every backup).
    let _ = roll_forward(&journal, &steps);
    Ok(())
}

/// Finishes or rolls back an interrupted commit at `prefix`, if its journal exists. Callers
/// must hold the prefix's lock (or know that no other writer is active).
pub fn recover_journal(prefix: &Path) -> Result<Recovered> {
    let journal = journal_path(prefix);
    let text = match std::fs::read(&journal) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::Clean),
        Err(err) => return Err(BundleError::io(&journal, "read", err)),
    };
    let steps = parse_journal(&journal, &text)?;
    let staged = &steps
        .last()
        .expect("parse_journal returns at least one step")
        .from;
    if staged.exists() {
        roll_back(&journal, &steps)?;
        Ok(Recovered::RolledBack)
    } else {
        roll_forward(&journal, &steps)?;
        Ok(Recovered::Completed)
    }
}

/// Renames `step.from` to `step.to`, first moving an existing `to` to the backup name.
fn replace(step: &Step) -> Result<()> {
    if step.to.exists() {
        fsops::rename(&step.to, &step.backup)
            .map_err(|err| BundleError::io(&step.to, "move aside", err))?;
    }
    fsops::rename(&step.from, &step.to).map_err(|err| BundleError::io(&step.from, "rename", err))
}

/// Undoes the steps in reverse order, deletes the staged index, then the journal.
fn roll_back(journal: &Path, steps: &[Step]) -> Result<()> {
    for step in steps.iter().rev() {
        if !step.from.exists() && step.to.exists() {
            fsops::rename(&step.to, &step.from)
                .map_err(|err| BundleError::io(&step.to, "roll back", err))?;
        }
        if step.backup.exists() {
            fsops::rename(&step.backup, &step.to)
                .map_err(|err| BundleError::io(&step.backup, "restore", err))?;
        }
    }
    let staged = &steps.last().expect("a commit has an index step").from;
    remove_if_present(staged)?;
    remove_if_present(journal)
}

/// Deletes the backups of a committed merge, then the journal.
fn roll_forward(journal: &Path, steps: &[Step]) -> Result<()> {
    for step in steps {
        remove_if_present(&step.backup)?;
    }
    remove_if_present(journal)
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fsops::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(BundleError::io(path, "delete", err))
        }
        _ => Ok(()),
    }
}

/// Writes the journal whole: a temporary file renamed into place (and synced if `fsync`).
fn write_journal(journal: &Path, steps: &[Step], fsync: bool) -> Result<()> {
    let mut text = format!("{MAGIC}\n");
    for step in steps {
        let mut fields = Vec::with_capacity(3);
        for path in [&step.from, &step.to, &step.backup] {
            match path.to_str() {
                Some(field) if !field.contains(['\t', '\n']) => fields.push(field),
                _ => {
                    let err = std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "a checkpoint path must be UTF-8 without tabs or newlines",
                    );
                    return Err(BundleError::io(path, "write merge journal", err));
                }
            }
        }
        let _ = writeln!(text, "{}", fields.join("\t"));
    }
    let temp = unique_name(journal, ".tempstate");
    if let Err(err) = fsops::write_file(&temp, text.as_bytes(), fsync) {
        let _ = fsops::remove_file(&temp);
        return Err(BundleError::io(&temp, "write", err));
    }
    if let Err(err) = fsops::rename(&temp, journal) {
        let _ = fsops::remove_file(&temp);
        return Err(BundleError::io(journal, "rename", err));
    }
    if fsync {
        sync_parent(journal)?;
    }
    Ok(())
}

fn parse_journal(journal: &Path, text: &[u8]) -> Result<Vec<Step>> {
    let bad = |detail: &str| BundleError::BadJournal {
        path: journal.to_path_buf(),
        detail: detail.to_string(),
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8"))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad("unknown first line"));
    }
    let steps = lines
        .map(|line| {
            let mut fields = line.split('\t').map(PathBuf::from);
            match (fields.next(), fields.next(), fields.next(), fields.next()) {
                (Some(from), Some(to), Some(backup), None) => Ok(Step { from, to, backup }),
                _ => Err(bad("a step is not three tab-separated paths")),
            }
        })
        .collect::<Result<Vec<Step>>>()?;
    if steps.is_empty() {
        return Err(bad("no steps"));
    }
    Ok(steps)
}

/// Syncs the directory holding `path`.
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fsops::sync_dir(dir).map_err(|err| BundleError::io(dir, "fsync directory", err))
}
