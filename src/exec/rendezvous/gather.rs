//! [`gather`]: named tensors of every task of a cluster brought to task 0, as a restore run
//! one task per process hands its values to the process that writes them out.
//!
//! Each task other than 0 sends its names first, as one string vector of `arity` strings per
//! name (`saveplan/gather/keys`), then each tensor under its index (`saveplan/gather/N`); task
//! 0 receives them task by task, in order. Every task then meets the others at a barrier, so
//! a task that failed (and aborted the rendezvous, as every failure here does) fails them all.

use super::{Rendezvous, RendezvousError, RendezvousKey};
use crate::exec::error_line;
use crate::exec::tensor::HostTensor;

/// How a gather's names are made: `arity` strings each, described as `what` in an error
/// (`"(container, name) pairs"`).
#[derive(Clone, Copy, Debug)]
pub struct GatherNames {
    /// How many strings make one name.
    pub arity: usize,
    /// What the names are, for the error about names that are not of that form.
    pub what: &'static str,
}

/// Brings every task's named tensors to task 0: `own` gives this task's (each name
/// `names.arity` strings), and on task 0 `take` is handed every task's, its own first, then
/// task 1's, and so on. Returns whether this task took them (task 0). Any error, this task's
/// own (`own`, `take`) or the rendezvous's, aborts the rendezvous with its line, so that no
/// task is left waiting; every task meets at a barrier at the end.
pub fn gather<E>(
    rendezvous: &dyn Rendezvous,
    names: GatherNames,
    own: impl FnOnce() -> Result<Vec<(Vec<String>, HostTensor)>, E>,
    mut take: impl FnMut(Vec<String>, HostTensor) -> Result<(), E>,
) -> Result<bool, E>
where
    E: From<RendezvousError> + std::error::Error,
{
    let (task, n_tasks) = (rendezvous.task(), rendezvous.n_tasks());
    let key =
        |src: usize, what: String| RendezvousKey::new(src, 0, format!("saveplan/gather/{what}"));
    let gathered = (|| -> Result<(), E> {
        let named = own()?;
        if task != 0 {
            let strings = named.iter().flat_map(|(name, _)| name.iter().cloned());
            rendezvous.send(
                &key(task, "keys".into()),
                HostTensor::string_vector(strings),
            )?;
            for (index, (_, value)) in named.into_iter().enumerate() {
                rendezvous.send(&key(task, index.to_string()), value)?;
            }
            return Ok(());
        }
        for (name, value) in named {
            take(name, value)?;
        }
        for src in 1..n_tasks {
            let strings = rendezvous.recv(&key(src, "keys".into()))?;
            // Never a silent drop: what is not whole names is an error.
            let strings = (strings.strings())
                .filter(|strings| names.arity > 0 && strings.len() % names.arity == 0)
                .ok_or_else(|| RendezvousError::BadMessage {
                    src,
                    what: format!("a gather's keys are not {}", names.what),
                })?;
            for (index, name) in strings.chunks_exact(names.arity).enumerate() {
                let name = (name.iter())
                    .map(|part| String::from_utf8_lossy(part).into_owned())
                    .collect();
                let value = rendezvous.recv(&key(src, index.to_string()))?;
                take(name, value)?;
            }
        }
        Ok(())
    })();
    if let Err(err) = &gathered {
        rendezvous.abort(&error_line(err));
    }
    gathered?;
    rendezvous.barrier()?;
    Ok(task == 0)
}
