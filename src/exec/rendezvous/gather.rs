//! [`gather`]: named tensors of every task of a cluster brought to task 0, as a restore run
//! one task per process hands its values to the process that writes them out.
//!
//! Each task other than 0 sends its names first, as one string vector of `arity` strings per
//! name (`saveplan/gather/keys`), then which of its values travel alone (`…/layout`, an int32
//! per value: 1 alone, 0 batched), then the values: each of 64 KiB or more alone, under its
//! index (`saveplan/gather/N`, sent without a copy where the transport can), the others in
//! order in batches of about 4 MiB (`…/batchK`, a string vector of values in the [`wire`]
//! form), so that 100,000 small values are a handful of messages, not 100,000. Task 0
//! receives them task by task, in order, and checks that every part fits the keys. Every task then meets the others at a barrier, so
//! a task that failed (and aborted the rendezvous, as every failure here does) fails them all.

use saveplan_ir::DType;

use super::{Rendezvous, RendezvousError, RendezvousKey, wire};
use crate::exec::error_line;
use crate::exec::tensor::HostTensor;

/// Values of this many bytes or more travel alone (a transport may send them without a copy,
/// as MPI's does); smaller ones, and strings, travel in batches.
const ALONE: usize = 64 << 10;
/// A batch is sent once its values take this many bytes.
const BATCH: usize = 4 << 20;

/// Whether `value` travels alone.
fn alone(value: &HostTensor) -> bool {
    value.bytes().is_some_and(|bytes| bytes.len() >= ALONE)
}

/// Small values collected for one message: a string vector whose elements are the values in
/// the [`wire`] form (unnamed).
#[derive(Default)]
struct Batch {
    values: Vec<Vec<u8>>,
    bytes: usize,
    /// Batches handed out so far.
    sent: usize,
}

impl Batch {
    /// Adds `value`; returns the batch to send once it is full.
    fn push(&mut self, value: &HostTensor) -> Option<HostTensor> {
        let mut encoded = Vec::new();
        wire::encode("", value, &mut encoded);
        self.bytes += encoded.len();
        self.values.push(encoded);
        (self.bytes >= BATCH).then(|| self.take())
    }

    /// The last batch, unless it is empty.
    fn finish(&mut self) -> Option<HostTensor> {
        (!self.values.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> HostTensor {
        let values = std::mem::take(&mut self.values);
        self.bytes = 0;
        self.sent += 1;
        HostTensor::from_strings(vec![values.len() as u64], values).expect("a vector")
    }
}

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
            let layout: Vec<i32> = (named.iter())
                .map(|(_, value)| i32::from(alone(value)))
                .collect();
            let layout = HostTensor::from_i32s(vec![layout.len() as u64], &layout)
                .expect("a vector of its own length");
            rendezvous.send(&key(task, "layout".into()), layout)?;
            let mut batch = Batch::default();
            for (index, (_, value)) in named.into_iter().enumerate() {
                if alone(&value) {
                    rendezvous.send(&key(task, index.to_string()), value)?;
                    continue;
                }
                if let Some(full) = batch.push(&value) {
                    rendezvous.send(&key(task, format!("batch{}", batch.sent - 1)), full)?;
                }
            }
            if let Some(last) = batch.finish() {
                rendezvous.send(&key(task, format!("batch{}", batch.sent - 1)), last)?;
            }
            return Ok(());
        }
        for (name, value) in named {
            take(name, value)?;
        }
        for src in 1..n_tasks {
            let bad = |what: &str| RendezvousError::BadMessage {
                src,
                what: format!("a gather's {what}"),
            };
            let strings = rendezvous.recv(&key(src, "keys".into()))?;
            // Never a silent drop: what is not whole names is an error.
            let strings = (strings.strings())
                .filter(|strings| names.arity > 0 && strings.len() % names.arity == 0)
                .ok_or_else(|| bad(&format!("keys are not {}", names.what)))?;
            let n_values = strings.len() / names.arity;
            let layout = rendezvous.recv(&key(src, "layout".into()))?;
            let layout: Vec<bool> = (layout.bytes())
                .filter(|bytes| layout.dtype() == DType::Int32 && bytes.len() == 4 * n_values)
                .and_then(|bytes| {
                    (bytes.chunks_exact(4))
                        .map(|number| match i32::from_le_bytes(number.try_into().ok()?) {
                            0 => Some(false),
                            1 => Some(true),
                            _ => None,
                        })
                        .collect()
                })
                .ok_or_else(|| bad("layout is not a 0 or 1 per value"))?;
            let mut batched = Vec::new().into_iter();
            let mut batches = 0;
            for (index, name) in strings.chunks_exact(names.arity).enumerate() {
                let name = (name.iter())
                    .map(|part| String::from_utf8_lossy(part).into_owned())
                    .collect();
                let value = match layout[index] {
                    true => rendezvous.recv(&key(src, index.to_string()))?,
                    false => {
                        if batched.len() == 0 {
                            let batch = rendezvous.recv(&key(src, format!("batch{batches}")))?;
                            batches += 1;
                            batched = (batch.into_strings())
                                .filter(|values| !values.is_empty())
                                .ok_or_else(|| bad("batch is not a vector of values"))?
                                .into_iter();
                        }
                        let element = batched.next().expect("a batch left");
                        wire::decode(&element)
                            .map_err(|err| bad(&format!("batched value: {err}")))?
                            .1
                    }
                };
                take(name, value)?;
            }
            if batched.len() > 0 {
                return Err(bad("batch holds values past its keys").into());
            }
        }
        Ok(())
    })();
    super::settle(rendezvous, gathered, error_line)?;
    Ok(task == 0)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::exec::rendezvous::LocalRendezvous;

    const NAMES: GatherNames = GatherNames {
        arity: 1,
        what: "single names",
    };

    /// Task `task`'s values: small ones (enough for several batches), values of 64 KiB and
    /// more between them, strings, and an empty one; each distinct.
    fn values_of(task: usize) -> Vec<(Vec<String>, HostTensor)> {
        (0..700)
            .map(|index| {
                let fill = (task * 7 + index) as u8;
                let value = match index % 100 {
                    7 => HostTensor::string_vector([format!("s{task}/{index}"), String::new()]),
                    13 => HostTensor::from_bytes(DType::UInt8, vec![0], Vec::new()).unwrap(),
                    50 | 51 => {
                        HostTensor::from_bytes(DType::UInt8, vec![ALONE as u64], vec![fill; ALONE])
                            .unwrap()
                    }
                    _ => HostTensor::from_bytes(DType::UInt8, vec![16 << 10], vec![fill; 16 << 10])
                        .unwrap(),
                };
                (vec![format!("t{task}/v{index}")], value)
            })
            .collect()
    }

    #[test]
    fn every_tasks_values_reach_task_0_in_order_in_batches_and_alone() {
        let cluster = LocalRendezvous::new(3);
        let sent = [1, 2].map(|_| AtomicUsize::new(0));
        let gathered = std::thread::scope(|scope| {
            for (task, sent) in (1..3).zip(&sent) {
                let rendezvous = Counting {
                    inner: cluster.task(task).unwrap(),
                    sent,
                };
                scope.spawn(move || {
                    gather::<RendezvousError>(
                        &rendezvous,
                        NAMES,
                        || Ok(values_of(task)),
                        |_, _| unreachable!("only task 0 takes"),
                    )
                    .unwrap()
                });
            }
            let mut gathered = Vec::new();
            let rendezvous = cluster.task(0).unwrap();
            let took = gather::<RendezvousError>(
                &rendezvous,
                NAMES,
                || Ok(values_of(0)),
                |name, value| {
                    gathered.push((name, value));
                    Ok(())
                },
            )
            .unwrap();
            assert!(took);
            gathered
        });
        let expected: Vec<_> = (0..3).flat_map(values_of).collect();
        assert_eq!(gathered.len(), expected.len());
        assert!(gathered == expected, "values changed, lost or reordered");
        // 700 values a task: the keys, the layout, the 14 alone and a few batches of the
        // 686 others (about 11 MiB), not a message per value.
        for sent in &sent {
            let sent = sent.load(Ordering::Relaxed);
            assert!((2 + 14 + 2..=2 + 14 + 4).contains(&sent), "{sent} messages");
        }
    }

    /// A task's rendezvous that counts what it sends.
    struct Counting<'a> {
        inner: crate::exec::rendezvous::LocalTask,
        sent: &'a AtomicUsize,
    }

    impl Rendezvous for Counting<'_> {
        fn task(&self) -> usize {
            self.inner.task()
        }
        fn n_tasks(&self) -> usize {
            self.inner.n_tasks()
        }
        fn send(&self, key: &RendezvousKey, value: HostTensor) -> Result<(), RendezvousError> {
            self.sent.fetch_add(1, Ordering::Relaxed);
            self.inner.send(key, value)
        }
        fn recv(&self, key: &RendezvousKey) -> Result<HostTensor, RendezvousError> {
            self.inner.recv(key)
        }
        fn barrier(&self) -> Result<(), RendezvousError> {
            self.inner.barrier()
        }
        fn abort(&self, reason: &str) {
            self.inner.abort(reason)
        }
    }

    #[test]
    fn a_layout_that_does_not_fit_the_keys_is_refused() {
        let error = gather_error(&[0, 2], None);
        assert!(
            error.contains("layout is not a 0 or 1 per value"),
            "{error}"
        );
    }

    /// Task 0's error when task 1 sends the keys `a`, `b` with `layout` and, when given,
    /// `batch` as its first batch; task 1 must have been told.
    fn gather_error(layout: &[i32], batch: Option<HostTensor>) -> String {
        let cluster = LocalRendezvous::new(2);
        let other = cluster.task(1).unwrap();
        let key = |what: &str| RendezvousKey::new(1, 0, format!("saveplan/gather/{what}"));
        other
            .send(&key("keys"), HostTensor::string_vector(["a", "b"]))
            .unwrap();
        let layout = HostTensor::from_i32s(vec![layout.len() as u64], layout).unwrap();
        other.send(&key("layout"), layout).unwrap();
        if let Some(batch) = batch {
            other.send(&key("batch0"), batch).unwrap();
        }
        let error = gather::<RendezvousError>(
            &cluster.task(0).unwrap(),
            NAMES,
            || Ok(Vec::new()),
            |_, _| Ok(()),
        )
        .unwrap_err();
        assert!(other.barrier().is_err(), "task 1 was not told");
        error.to_string()
    }

    /// [`gather_error`] of `batch` for the keys `a`, `b`, both batched.
    fn batch_error(batch: HostTensor) -> String {
        gather_error(&[0, 0], Some(batch))
    }

    #[test]
    fn batches_that_do_not_fit_the_keys_are_refused() {
        let encoded = |value: i32| {
            let mut bytes = Vec::new();
            wire::encode("", &HostTensor::int32_scalar(value), &mut bytes);
            bytes
        };
        let three = HostTensor::string_vector([encoded(1), encoded(2), encoded(3)]);
        let error = batch_error(three);
        assert!(
            error.contains("batch holds values past its keys"),
            "{error}"
        );
        let not_strings = HostTensor::int32_scalar(1);
        let error = batch_error(not_strings);
        assert!(error.contains("batch is not a vector of values"), "{error}");
        let garbage = HostTensor::string_vector([b"\x01".to_vec(), encoded(2)]);
        let error = batch_error(garbage);
        assert!(error.contains("batched value"), "{error}");
    }
}
