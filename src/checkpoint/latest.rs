//! Which checkpoint a path means: a prefix as given, or, for a directory or a `checkpoint`
//! state file, the latest checkpoint it names (`tf.train.latest_checkpoint`, FORMATS.md 9.4,
//! 13.8).

use std::path::{Path, PathBuf};

use crate::bundle::index_path;
use crate::export::parse_checkpoint_state;

use super::{CheckpointError, parent_dir};

/// The name of the state file `tf.train.Checkpoint.save` and `CheckpointManager` write.
pub const STATE_FILE: &str = "checkpoint";

/// The latest checkpoint of a directory: the `model_checkpoint_path` of its `checkpoint` file,
/// resolved against the directory when relative. Unlike TensorFlow, which returns `None`, a
/// missing file, an empty path or a named checkpoint without `.index` is an error naming the
/// file.
pub fn latest_checkpoint(dir: &Path) -> Result<PathBuf, CheckpointError> {
    let state = dir.join(STATE_FILE);
    let found = match crate::storage::is_url(dir) {
        true => crate::storage::exists(&state).unwrap_or(false),
        false => state.is_file(),
    };
    if !found {
        return Err(CheckpointError::NoStateFile {
            dir: dir.to_owned(),
        });
    }
    latest_in_state_file(&state)
}

/// The checkpoint prefix `path` stands for: the latest checkpoint when `path` is a directory
/// or a file named `checkpoint` (a state file); the prefix of a checkpoint file named instead
/// of its prefix (`ckpt-3.index`, `ckpt-3.data-00000-of-00001`); else `path` itself.
pub fn resolve_prefix(path: &Path) -> Result<PathBuf, CheckpointError> {
    if crate::storage::is_url(path) {
        // An object store: a prefix with an index, else a "directory" holding a state file,
        // else a state file itself.
        let exists = |path: &Path| crate::storage::exists(path).unwrap_or(false);
        let state = path.join(STATE_FILE);
        return if exists(&index_path(path)) {
            Ok(path.to_owned())
        } else if exists(&state) {
            latest_in_state_file(&state)
        } else if path.file_name().is_some_and(|name| name == STATE_FILE) && exists(path) {
            latest_in_state_file(path)
        } else {
            Ok(path.to_owned())
        };
    }
    if path.is_dir() {
        latest_checkpoint(path)
    } else if path.file_name().is_some_and(|name| name == STATE_FILE)
        && path.is_file()
        && !index_path(path).exists()
    {
        latest_in_state_file(path)
    } else if let Some(prefix) = prefix_of_file(path) {
        Ok(prefix)
    } else {
        Ok(path.to_owned())
    }
}

/// The prefix of the checkpoint whose `.index` or `.data-NNNNN-of-NNNNN` file `path` is, when
/// `path` is no prefix itself and that checkpoint exists.
fn prefix_of_file(path: &Path) -> Option<PathBuf> {
    if index_path(path).exists() || !path.is_file() {
        return None;
    }
    let name = path.file_name()?.to_str()?;
    let stem = match name.strip_suffix(".index") {
        Some(stem) => stem,
        None => {
            let (stem, shard) = name.rsplit_once(".data-")?;
            let (a, b) = shard.split_once("-of-")?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !(digits(a) && digits(b)) {
                return None;
            }
            stem
        }
    };
    let prefix = path.with_file_name(stem);
    index_path(&prefix).exists().then_some(prefix)
}

fn latest_in_state_file(state: &Path) -> Result<PathBuf, CheckpointError> {
    let text =
        crate::storage::read_to_string(state).map_err(|source| CheckpointError::ReadStateFile {
            path: state.to_owned(),
            source,
        })?;
    let parsed = parse_checkpoint_state(&text).map_err(|source| CheckpointError::BadStateFile {
        path: state.to_owned(),
        source,
    })?;
    if parsed.model_checkpoint_path.is_empty() {
        return Err(CheckpointError::NoLatestCheckpoint {
            path: state.to_owned(),
        });
    }
    let named = Path::new(&parsed.model_checkpoint_path);
    let prefix = if named.is_absolute() {
        named.to_owned()
    } else {
        parent_dir(state).join(named)
    };
    if !crate::storage::exists(&index_path(&prefix)).unwrap_or(false) {
        return Err(CheckpointError::MissingLatestCheckpoint {
            path: state.to_owned(),
            prefix,
        });
    }
    Ok(prefix)
}
