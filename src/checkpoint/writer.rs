//! How a write's files are made: the write's plan runs through the session layer's one plan
//! runner ([`Runner`](crate::session::Runner)), captured when the write is called and written
//! at once or on a background thread (`CheckpointOptions(enable_async=True)`, FORMATS.md
//! 13.14).
//!
//! [`Runner::capture`](crate::session::Runner::capture) keeps what the plan's `SaveV2` and
//! `MergeV2Checkpoints` would write (the values shared, not copied: a later
//! [`super::Checkpoint::set_value`] replaces the tensor in the checkpoint and never changes one
//! a capture holds), and [`Write::commit`] writes it through [`BundleIo`] under the prefix's
//! save lock. [`Pending`] is the one write in flight of an asynchronous checkpoint: the
//! runner's [`Background`] thread committing a captured write and then running what follows
//! it (the `checkpoint` state file, the manager's bookkeeping), with this layer's errors.

use crate::exec::BundleIo;
use crate::session::{Background, CapturedWrite, RunError, WriterError};

use super::{CheckpointError, WriteFailure};

/// What runs after a write's files are written (or the write failed), on the thread that
/// wrote them, handed the write's result; its own is the write's.
pub(super) type AfterWrite =
    Box<dyn FnOnce(Result<(), CheckpointError>) -> Result<(), CheckpointError> + Send>;

/// The write in flight of an asynchronous checkpoint, if any ([`Background`]).
pub(super) type Pending = Background<CheckpointError>;

/// A captured write and the backend that writes its files.
#[derive(Debug)]
pub(super) struct Write {
    /// The files, captured.
    pub captured: CapturedWrite,
    /// Where they go.
    pub io: BundleIo,
}

impl Write {
    /// Writes the files in the order the plan asked for them, holding the prefix's save lock.
    pub fn commit(self) -> Result<(), CheckpointError> {
        let prefix = self.captured.prefix().to_owned();
        (self.captured.commit(&self.io)).map_err(|source| CheckpointError::Write {
            prefix,
            source: Box::new(write_failure(source)),
        })
    }
}

/// A runner's error as the [`WriteFailure`] of a write.
pub(super) fn write_failure(err: RunError) -> WriteFailure {
    match err {
        RunError::Prefix(source) => WriteFailure::Prefix(*source),
        RunError::Files(source) => WriteFailure::Files(*source),
        RunError::Trace(source) => WriteFailure::Trace(*source),
        RunError::Eager(source) => WriteFailure::Eager(*source),
        other => WriteFailure::Run(other),
    }
}

impl From<WriterError> for CheckpointError {
    fn from(err: WriterError) -> CheckpointError {
        match err {
            WriterError::Spawn { prefix, source } => {
                CheckpointError::SpawnWriter { prefix, source }
            }
            WriterError::Panicked { prefix } => CheckpointError::WriterPanicked { prefix },
        }
    }
}
