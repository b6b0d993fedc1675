//! What a reader of a checkpoint in an object store reads while a save replaces it: the
//! journal `<prefix>.merging` a save puts before it overwrites anything names the backups of
//! the old checkpoint, which readers read until the journal is gone ([`super::remote`]).

use std::path::{Path, PathBuf};

use super::error::{BundleError, Result};
use super::index_path;

/// The first line of an object-store journal.
pub(crate) const MAGIC: &str = "saveplan object journal 1";

/// `<prefix>.merging`.
pub(crate) fn journal_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".merging")
}

/// The backup index of a checkpoint being replaced, and its data objects' (final, backup)
/// names.
pub(crate) type View = (PathBuf, Vec<(PathBuf, PathBuf)>);

/// What a reader of URL `prefix` reads, its journal's read having given `read`: `None` for the
/// final names, or the backup index and (final, backup) data names while a journal says a
/// commit is under way.
pub(crate) fn view_of(prefix: &Path, read: std::io::Result<Vec<u8>>) -> Result<Option<View>> {
    let journal = journal_path(prefix);
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(BundleError::io(&journal, "read", err)),
    };
    let steps = parse_journal(&journal, &bytes)?;
    let index = index_path(prefix);
    let mut backup_index = None;
    let mut data = Vec::new();
    for (from, backup) in steps {
        if from == index {
            backup_index = Some(backup);
        } else {
            data.push((from, backup));
        }
    }
    Ok(backup_index.map(|backup| (backup, data)))
}

pub(crate) fn parse_journal(journal: &Path, bytes: &[u8]) -> Result<Vec<(PathBuf, PathBuf)>> {
    let bad = |detail: &str| BundleError::BadJournal {
        path: journal.to_path_buf(),
        detail: detail.to_string(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad("unknown first line"));
    }
    lines
        .map(|line| {
            let (from, to) = line
                .split_once('\t')
                .ok_or_else(|| bad("a line without a tab"))?;
            Ok((PathBuf::from(from), PathBuf::from(to)))
        })
        .collect()
}

/// `path` with `suffix` appended to its last name.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push(suffix);
    PathBuf::from(text)
}
