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
use super::index_path;
use crate::storage::local as fsops;

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
    let text = match fsops::read(&journal) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::Clean),
        Err(err) => return Err(BundleError::io(&journal, "read", err)),
    };
    let steps = parse_journal(prefix, &journal, &text)?;
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

/// Parses the journal of `prefix` and confines it to the prefix's own files: every path that
/// recovery deletes, or moves a file away from, must be one of the prefix's names in the
/// prefix's directory (`<name>.index`, `<name>.data-NNNNN-of-NNNNN`, the staged
/// `<name>.index.merging<id>` and the backups `<final>.merging-old<id>`), and a data step's
/// `from` (where the new data file came from, and where a roll back moves it again) must lie
/// in that directory or in a folder directly inside it (a sharded save's `<name>_temp/`).
/// Every path is rebuilt from its last names under the prefix's own directory, so a journal
/// can name no other file to delete, move or create. Anything else refuses the whole journal,
/// before anything is touched. (A merge from sources outside the prefix's folder is therefore
/// recovered only by hand after a crash: the error says so.)
fn parse_journal(prefix: &Path, journal: &Path, text: &[u8]) -> Result<Vec<Step>> {
    let bad = |detail: String| BundleError::BadJournal {
        path: journal.to_path_buf(),
        detail,
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad("unknown first line".into()));
    }
    let Some(name) = prefix.file_name().and_then(|name| name.to_str()) else {
        return Err(bad("the prefix has no UTF-8 file name".into()));
    };
    let dir = match prefix.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let lines: Vec<&str> = lines.collect();
    let mut steps = Vec::with_capacity(lines.len());
    for (at, line) in lines.iter().enumerate() {
        let last = at + 1 == lines.len();
        let mut fields = line.split('\t');
        let (Some(from), Some(to), Some(backup), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("a step is not three tab-separated paths".into()));
        };
        // The folder the writer named, as it wrote it: `from` is placed relative to it.
        let written_dir = Path::new(to).parent().unwrap_or(Path::new(""));
        let own = |path: &str, ok: &dyn Fn(&str) -> bool| -> Result<PathBuf> {
            match Path::new(path).file_name().and_then(|file| file.to_str()) {
                Some(file) if ok(file) => Ok(dir.join(file)),
                _ => Err(bad(format!(
                    "names {}, not a file of the checkpoint {name}",
                    quote(path)
                ))),
            }
        };
        let to = own(to, &|file| {
            let Some(rest) = file.strip_prefix(name).and_then(|r| r.strip_prefix('.')) else {
                return false;
            };
            if last {
                rest == "index"
            } else {
                is_data_file_name(rest)
            }
        })?;
        let to_name = to
            .file_name()
            .and_then(|file| file.to_str())
            .unwrap_or_default();
        let backup = own(backup, &|file| {
            file.strip_prefix(to_name)
                .and_then(|rest| rest.strip_prefix(".merging-old"))
                .is_some_and(is_unique_id)
        })?;
        let from = if last {
            own(from, &|file| {
                file.strip_prefix(to_name)
                    .and_then(|rest| rest.strip_prefix(".merging"))
                    .is_some_and(is_unique_id)
            })?
        } else {
            beside(dir, from, written_dir).ok_or_else(|| {
                bad(format!(
                    "names {}, outside the folder of the checkpoint {name}",
                    quote(from)
                ))
            })?
        };
        steps.push(Step { from, to, backup });
    }
    if steps.is_empty() {
        return Err(bad("no steps".into()));
    }
    Ok(steps)
}

/// `from` rebuilt under `dir`, where the journal's writer had it in `written_dir` (the folder
/// of the step's `to`, as written) or in a folder directly inside it; `None` elsewhere.
fn beside(dir: &Path, from: &str, written_dir: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let from = Path::new(from);
    let file = match from.components().next_back()? {
        Component::Normal(file) => file,
        _ => return None,
    };
    let parent = from.parent()?;
    if parent == written_dir {
        return Some(dir.join(file));
    }
    match parent.components().next_back()? {
        Component::Normal(sub) if parent.parent() == Some(written_dir) => {
            Some(dir.join(sub).join(file))
        }
        _ => None,
    }
}

/// At most this many bytes of a path are quoted in an error.
const QUOTE_MAX: usize = 200;

/// `path` in quotes, cut to [`QUOTE_MAX`] bytes (a journal is not ours: its paths can be long).
fn quote(path: &str) -> String {
    if path.len() <= QUOTE_MAX {
        return format!("{path:?}");
    }
    let mut end = QUOTE_MAX;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &path[..end], path.len())
}

/// `data-NNNNN-of-NNNNN`.
pub(crate) fn is_data_file_name(rest: &str) -> bool {
    rest.strip_prefix("data-")
        .and_then(|shards| shards.split_once("-of-"))
        .is_some_and(|(a, b)| is_number(a) && is_number(b))
}

/// `<pid>-<n>` or `<pid>`, as [`unique_name`] makes them.
pub(crate) fn is_unique_id(id: &str) -> bool {
    match id.split_once('-') {
        Some((pid, n)) => is_number(pid) && is_number(n),
        None => is_number(id),
    }
}

pub(crate) fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Which files hold the checkpoint at a prefix as its journal implies it, for a reader that
/// changes nothing ([`read_view`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadView {
    /// The index to read, when not `<prefix>.index` (the backup of the previous checkpoint's
    /// index while a commit is unfinished).
    pub index: Option<PathBuf>,
    /// Data files to read from another name: (final name, where the file is now).
    pub data: Vec<(PathBuf, PathBuf)>,
    /// Backups that did not exist when the view was made: if one appears, a commit moved on
    /// and the view is stale.
    pub absent_backups: Vec<PathBuf>,
    /// What the journal says.
    pub state: JournalState,
}

/// What a prefix's journal says, read without changing anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum JournalState {
    /// No journal: no commit was interrupted.
    #[default]
    Absent,
    /// A commit stopped (or is under way) before its commit point: the previous checkpoint
    /// is the one to read.
    BeforeCommit,
    /// A commit stopped after its commit point: the new checkpoint is whole; only its
    /// cleanup is left.
    AfterCommit,
    /// The journal cannot be read or followed (the error, on one line).
    Bad(String),
}

/// What a reader of `prefix` should read, without changing anything: where a commit was
/// interrupted (or is under way) before its commit point, the previous checkpoint, part of it
/// under backup names; otherwise the final names. A journal that cannot be read or followed
/// implies nothing (the final names are read, and `save`/`recover` report it).
pub fn read_view(prefix: &Path) -> ReadView {
    let bad = |err: BundleError| ReadView {
        state: JournalState::Bad(err.to_string()),
        ..ReadView::default()
    };
    let journal = journal_path(prefix);
    let text = match fsops::read(&journal) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return ReadView::default(),
        Err(err) => return bad(BundleError::io(&journal, "read", err)),
    };
    let steps = match parse_journal(prefix, &journal, &text) {
        Ok(steps) => steps,
        Err(err) => return bad(err),
    };
    let staged = &steps
        .last()
        .expect("parse_journal returns at least one step")
        .from;
    if !staged.exists() {
        // Past the commit point: the new checkpoint is whole under its final names.
        return ReadView {
            state: JournalState::AfterCommit,
            ..ReadView::default()
        };
    }
    let mut view = ReadView {
        state: JournalState::BeforeCommit,
        ..ReadView::default()
    };
    let index = index_path(prefix);
    for step in &steps {
        if step.backup.exists() {
            if step.to == index {
                view.index = Some(step.backup.clone());
            } else {
                view.data.push((step.to.clone(), step.backup.clone()));
            }
        } else {
            view.absent_backups.push(step.backup.clone());
        }
    }
    view
}

/// Syncs the directory holding `path`.
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fsops::sync_dir(dir).map_err(|err| BundleError::io(dir, "fsync directory", err))
}
