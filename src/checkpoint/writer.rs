//! How a write's files are made: captured when the write is called, written at once or on a
//! background thread (`CheckpointOptions(enable_async=True)`, FORMATS.md 13.14).
//!
//! A write runs the eager save plan against [`RecordingIo`], which keeps what each `SaveV2`
//! and `MergeV2Checkpoints` would write instead of writing it. The tensors it keeps are the
//! variables' own reference-counted storage, so capturing copies no element: a later
//! [`super::Checkpoint::set_value`] replaces the tensor in the checkpoint and never changes
//! one a capture holds. What is copied are the checkpoint keys and slice specs (strings), and
//! the serialized object graph the plan makes. [`CapturedWrite::commit`] then writes the files
//! through [`BundleIo`] under the prefix's save lock: the merge commits the prefix atomically
//! (the bundle's journal), and a failed write leaves no file at the prefix (the lock's
//! clean-up deletes its temporary files).
//!
//! [`Pending`] is the one write in flight of an asynchronous checkpoint: a thread writing a
//! captured write and then running what follows it (the `checkpoint` state file, the
//! manager's bookkeeping). Waiting returns its error; dropping it waits for it.

use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::bundle::MergeFlags;
use crate::exec::sync::{lock, unpoisoned};
use crate::exec::{BundleIo, CheckpointIo, HostTensor, IoError, RestoreRequest, SaveRequest};

use super::{CheckpointError, WriteFailure};

/// What runs after a write's files are written, on the thread that wrote them.
pub(super) type AfterWrite = Box<dyn FnOnce() -> Result<(), CheckpointError> + Send>;

/// One file operation of a save plan, as the plan asked for it.
#[derive(Debug)]
enum Step {
    /// `SaveV2`: a bundle at `prefix` holding `tensors` (key, shape-and-slice, value).
    Save {
        prefix: String,
        tensors: Vec<(String, String, HostTensor)>,
    },
    /// `MergeV2Checkpoints`.
    Merge {
        sources: Vec<String>,
        destination: String,
        flags: MergeFlags,
    },
}

/// A [`CheckpointIo`] that records the saves and merges of a save plan instead of running them.
#[derive(Debug, Default)]
pub(super) struct RecordingIo {
    steps: Mutex<Vec<Step>>,
}

impl RecordingIo {
    /// The recorded write of the checkpoint at `prefix`, to be written through `io`.
    pub fn into_write(self, prefix: &str, io: BundleIo) -> CapturedWrite {
        CapturedWrite {
            prefix: prefix.to_owned(),
            steps: unpoisoned(self.steps.into_inner()),
            io,
        }
    }

    fn push(&self, step: Step) {
        lock(&self.steps).push(step);
    }
}

impl CheckpointIo for RecordingIo {
    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        let tensors = tensors
            .iter()
            .map(|request| {
                (
                    request.name.to_owned(),
                    request.shape_and_slice.to_owned(),
                    request.tensor.clone(),
                )
            })
            .collect();
        self.push(Step::Save {
            prefix: prefix.to_owned(),
            tensors,
        });
        Ok(())
    }

    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError> {
        // A save plan reads no checkpoint; should one ever, it reads what is on disk.
        BundleIo::default().restore(prefix, tensors)
    }

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        self.push(Step::Merge {
            sources: sources.iter().map(|source| (*source).to_owned()).collect(),
            destination: destination.to_owned(),
            flags,
        });
        Ok(())
    }
}

/// The files of one write, captured ([`RecordingIo`]) and not yet written.
#[derive(Debug)]
pub(super) struct CapturedWrite {
    prefix: String,
    steps: Vec<Step>,
    io: BundleIo,
}

impl CapturedWrite {
    /// Writes the files in the order the plan asked for them, holding the prefix's save lock.
    pub fn commit(self) -> Result<(), CheckpointError> {
        let prefix = self.prefix;
        let failed = |failure| CheckpointError::Write {
            prefix: prefix.clone(),
            source: Box::new(failure),
        };
        let _guard = self
            .io
            .begin_save(&prefix)
            .map_err(|source| failed(WriteFailure::Prefix(source)))?;
        for step in self.steps {
            match step {
                Step::Save {
                    prefix: part,
                    tensors,
                } => {
                    let requests: Vec<SaveRequest<'_>> = tensors
                        .iter()
                        .map(|(name, shape_and_slice, tensor)| SaveRequest {
                            name,
                            shape_and_slice,
                            tensor,
                        })
                        .collect();
                    self.io.save(&part, &requests)
                }
                Step::Merge {
                    sources,
                    destination,
                    flags,
                } => {
                    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
                    self.io.merge(&sources, &destination, flags)
                }
            }
            .map_err(|source| failed(WriteFailure::Files(source)))?;
        }
        Ok(())
    }
}

/// The write in flight of an asynchronous checkpoint, if any. Dropping it waits for the write
/// to finish, so a checkpoint dropped right after `save` still writes its files (an error is
/// then lost: call [`super::Checkpoint::sync`] to see it).
#[derive(Debug, Default)]
pub(super) struct Pending {
    in_flight: Mutex<Option<InFlight>>,
}

#[derive(Debug)]
struct InFlight {
    prefix: String,
    handle: JoinHandle<Result<(), CheckpointError>>,
}

impl Pending {
    /// Waits for the write in flight; its error, if it failed.
    pub fn wait(&self) -> Result<(), CheckpointError> {
        let taken = lock(&self.in_flight).take();
        match taken {
            None => Ok(()),
            Some(InFlight { prefix, handle }) => handle
                .join()
                .unwrap_or(Err(CheckpointError::WriterPanicked { prefix })),
        }
    }

    /// Waits for the write in flight, then starts `write` (for `prefix`) on a new thread.
    pub fn start(
        &self,
        prefix: &str,
        write: impl FnOnce() -> Result<(), CheckpointError> + Send + 'static,
    ) -> Result<(), CheckpointError> {
        self.wait()?;
        let handle = std::thread::Builder::new()
            .name("saveplan-checkpoint-writer".to_owned())
            .spawn(write)
            .map_err(|source| CheckpointError::SpawnWriter {
                prefix: prefix.to_owned(),
                source,
            })?;
        *lock(&self.in_flight) = Some(InFlight {
            prefix: prefix.to_owned(),
            handle,
        });
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // The error of a write nobody waited for has no one to go to; the files are written.
        let _ = self.wait();
    }
}
