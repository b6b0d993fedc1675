//! A [`Runner`](super::Runner)'s captured saves: the plan runs against [`RecordingIo`], which
//! keeps what each `SaveV2` and `MergeV2Checkpoints` would write instead of writing it, and
//! [`CapturedWrite::commit`] writes it later under the prefix's save lock, at once or on the
//! thread of a [`Background`] (`CheckpointOptions(enable_async=True)`, FORMATS.md 13.14).
//!
//! The tensors a capture keeps are the variables' own reference-counted storage, so capturing
//! copies no element: assigning a variable afterwards replaces its tensor and never changes
//! one a capture holds. What is copied are the checkpoint keys and slice specs (strings). The
//! merge commits the prefix atomically (the bundle's journal), and a failed write leaves no
//! file at the prefix (the lock's clean-up deletes its temporary files).

use std::sync::Mutex;
use std::thread::JoinHandle;

use super::error::RunError;
use crate::bundle::MergeFlags;
use crate::exec::sync::{lock, unpoisoned};
use crate::exec::{CheckpointIo, HostTensor, IoError, RestoreRequest, SaveRequest};

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

/// A [`CheckpointIo`] that records the saves and merges of a save plan instead of running
/// them; restores read through the backend it was made over.
pub(super) struct RecordingIo<'a> {
    reads: &'a dyn CheckpointIo,
    steps: Mutex<Vec<Step>>,
}

impl<'a> RecordingIo<'a> {
    /// A recorder whose restores read through `reads`.
    pub fn new(reads: &'a dyn CheckpointIo) -> RecordingIo<'a> {
        RecordingIo {
            reads,
            steps: Mutex::new(Vec::new()),
        }
    }

    /// The recorded write of the checkpoint at `prefix`.
    pub fn into_write(self, prefix: &str) -> CapturedWrite {
        CapturedWrite {
            prefix: prefix.to_owned(),
            steps: unpoisoned(self.steps.into_inner()),
        }
    }

    fn push(&self, step: Step) {
        lock(&self.steps).push(step);
    }
}

impl CheckpointIo for RecordingIo<'_> {
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
        // A save plan reads no checkpoint; should one ever, it reads what is there.
        self.reads.restore(prefix, tensors)
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

/// The files of one save, captured ([`Runner::capture`](super::Runner::capture)) and not yet
/// written.
#[derive(Debug)]
pub struct CapturedWrite {
    prefix: String,
    steps: Vec<Step>,
}

impl CapturedWrite {
    /// The prefix the save writes.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Writes the files through `io` in the order the plan asked for them, holding the
    /// prefix's save lock ([`CheckpointIo::begin_save`]).
    pub fn commit(self, io: &dyn CheckpointIo) -> Result<(), RunError> {
        let _guard = io
            .begin_save(&self.prefix)
            .map_err(|err| RunError::Prefix(Box::new(err)))?;
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
                    io.save(&part, &requests)
                }
                Step::Merge {
                    sources,
                    destination,
                    flags,
                } => {
                    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
                    io.merge(&sources, &destination, flags)
                }
            }
            .map_err(|err| RunError::Files(Box::new(err)))?;
        }
        Ok(())
    }
}

/// Why a [`Background`] write could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The writer thread could not be started.
    #[error("writing checkpoint {prefix} failed: cannot start the writer thread")]
    Spawn {
        /// The prefix.
        prefix: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread panicked.
    #[error("writing checkpoint {prefix} failed: the writer thread panicked")]
    Panicked {
        /// The prefix.
        prefix: String,
    },
}

/// The one write in flight of an asynchronous writer, if any: a thread committing a
/// [`CapturedWrite`] and running what follows it (the caller's `write`, whose error type `E`
/// is the caller's). Dropping it waits for the write to finish, so a writer dropped right
/// after starting one still writes its files (an error is then lost: [`Background::wait`]
/// returns it).
#[derive(Debug)]
pub struct Background<E> {
    in_flight: Mutex<Option<InFlight<E>>>,
}

#[derive(Debug)]
struct InFlight<E> {
    prefix: String,
    handle: JoinHandle<Result<(), E>>,
}

impl<E> Default for Background<E> {
    fn default() -> Background<E> {
        Background {
            in_flight: Mutex::new(None),
        }
    }
}

impl<E: From<WriterError> + Send + 'static> Background<E> {
    /// Waits for the write in flight; its error, if it failed.
    pub fn wait(&self) -> Result<(), E> {
        let taken = lock(&self.in_flight).take();
        match taken {
            None => Ok(()),
            Some(InFlight { prefix, handle }) => handle
                .join()
                .unwrap_or_else(|_| Err(WriterError::Panicked { prefix }.into())),
        }
    }

    /// Waits for the write in flight, then starts `write` (of `prefix`) on a new thread.
    pub fn start(
        &self,
        prefix: &str,
        write: impl FnOnce() -> Result<(), E> + Send + 'static,
    ) -> Result<(), E> {
        self.wait()?;
        let handle = std::thread::Builder::new()
            .name("saveplan-checkpoint-writer".to_owned())
            .spawn(write)
            .map_err(|source| WriterError::Spawn {
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

impl<E> Drop for Background<E> {
    fn drop(&mut self) {
        // The error of a write nobody waited for has no one to go to; the files are written.
        if let Some(in_flight) = lock(&self.in_flight).take() {
            let _ = in_flight.handle.join();
        }
    }
}
