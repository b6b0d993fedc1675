//! The `checkpoint` state file (`CheckpointState` in protobuf text format, FORMATS.md 9.4 and
//! 13.8) as plain data: parsing it, and printing it as TensorFlow's Python does.

use saveplan_proto::tensorflow as pb;
use saveplan_proto::{TextError, from_text, to_text};

/// The contents of a `checkpoint` state file. Paths are as written: relative to the file's
/// directory, or absolute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointState {
    /// The latest checkpoint prefix; empty when the file names none.
    pub model_checkpoint_path: String,
    /// Every checkpoint the file tracks, oldest first.
    pub all_model_checkpoint_paths: Vec<String>,
    /// When each of `all_model_checkpoint_paths` was written (seconds since the epoch).
    pub all_model_checkpoint_timestamps: Vec<f64>,
    /// The CheckpointManager's last preserved timestamp (0 when absent).
    pub last_preserved_timestamp: f64,
}

/// Text that is not a `CheckpointState` in protobuf text format.
#[derive(Debug, thiserror::Error)]
#[error("not a CheckpointState in protobuf text format")]
pub struct CheckpointStateError(#[source] TextError);

/// Parses the text of a `checkpoint` state file.
pub fn parse_checkpoint_state(text: &str) -> Result<CheckpointState, CheckpointStateError> {
    let state: pb::CheckpointState = from_text(text).map_err(CheckpointStateError)?;
    Ok(CheckpointState {
        model_checkpoint_path: state.model_checkpoint_path,
        all_model_checkpoint_paths: state.all_model_checkpoint_paths,
        all_model_checkpoint_timestamps: state.all_model_checkpoint_timestamps,
        last_preserved_timestamp: state.last_preserved_timestamp,
    })
}

/// Prints `state` in protobuf text format, one `field: value` line per field, as TensorFlow's
/// Python writes the file.
pub fn checkpoint_state_text(state: &CheckpointState) -> String {
    to_text(&pb::CheckpointState {
        model_checkpoint_path: state.model_checkpoint_path.clone(),
        all_model_checkpoint_paths: state.all_model_checkpoint_paths.clone(),
        all_model_checkpoint_timestamps: state.all_model_checkpoint_timestamps.clone(),
        last_preserved_timestamp: state.last_preserved_timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_state_round_trips() {
        let text = "model_checkpoint_path: \"ckpt-3\"\nall_model_checkpoint_paths: \"ckpt-2\"\n\
                    all_model_checkpoint_paths: \"ckpt-3\"\n";
        let state = parse_checkpoint_state(text).unwrap();
        assert_eq!(state.model_checkpoint_path, "ckpt-3");
        assert_eq!(state.all_model_checkpoint_paths, ["ckpt-2", "ckpt-3"]);
        assert_eq!(checkpoint_state_text(&state), text);
        assert!(parse_checkpoint_state("model_checkpoint_path: 3 3").is_err());
    }
}
