//! [`gather`]: named tensors of every task of a cluster brought to task 0, as a restore run
//! one task per process hands its values to the process that writes them out.
//!
//! Each task other than 0 sends its names first, as one string vector of `arity` strings per
//! name (`saveplan/gather/keys`), then which of its values travel alone (`…/layout`, an int32
//! per value: 1 alone, 0 batched), then the values: each of 64 KiB or more alone, under its
//! index (`saveplan/gather/N`, sent without a copy where the transport can), the others in
//! order in batches of about 4 MiB (`…/batchK`, a `uint8` vector: a byte saying whether it
//! is the last batch, then values in the [`wire`] form, each led by its length), so that
//! 100,000 small values are a handful of messages, not 100,000, each sent from where it lies
//! and decoded from where it arrived. Task 0 receives them task by task, in order, and checks
//! that every part fits the keys (names that are not UTF-8, batches that end before the keys
//! do or go on past them), never waiting for a batch the last one said does not come. Every
//! task then meets the others at a barrier, so a task that failed (and aborted the
//! rendezvous, as every failure here does) fails them all.

use saveplan_ir::DType;

use super::{Rendezvous, RendezvousError, RendezvousKey, wire};
use crate::exec::error_line;
use crate::exec::tensor::HostTensor;

/// Values of this many bytes or more travel alone (a transport may send them without a copy,
/// as MPI's does); smaller ones, and strings, travel in batches.
const ALONE: usize = 64 << 10;
/// A batch is handed out once its values take this many bytes and another value follows.
const BATCH: usize = 4 << 20;

/// Whether `value` travels alone.
fn alone(value: &HostTensor) -> bool {
    value.bytes().is_some_and(|bytes| bytes.len() >= ALONE)
}

/// Small values collected for one message: a `uint8` vector whose first byte is 1 on the
/// last batch and 0 on the others ([`LAST`], [`MORE`]), then the values in the [`wire`] form
/// (unnamed), each led by its length as a little-endian `u64`. The message is one buffer,
/// which a transport sends from where it lies (MPI's does), and task 0 decodes each value
/// from where it arrived: no value is copied or allocated on its own on the way but for its
/// decoded bytes.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Batches handed out so far.
    sent: usize,
}

/// A batch's first byte: it is the last.
const LAST: u8 = 1;
/// A batch's first byte: another follows.
const MORE: u8 = 0;

impl Batch {
    /// Adds `value`; returns the batch before it to send once that one is full (a batch is
    /// handed out when a value follows it, so that whether it is the last is known).
    fn push(&mut self, value: &HostTensor) -> Option<HostTensor> {
        let full = (self.bytes.len() >= BATCH).then(|| self.take(MORE));
        if self.bytes.is_empty() {
            // Room for the value that takes it past `BATCH` too (a fixed-width value batched
            // is under `ALONE` bytes), so that a full batch is not copied to grow.
            self.bytes.reserve(BATCH + ALONE + 4096);
            self.bytes.push(MORE);
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 8]);
        wire::encode("", value, &mut self.bytes);
        let len = (self.bytes.len() - at - 8) as u64;
        self.bytes[at..at + 8].copy_from_slice(&len.to_le_bytes());
        full
    }

    /// The last batch, unless no value is left for one.
    fn finish(&mut self) -> Option<HostTensor> {
        (!self.bytes.is_empty()).then(|| self.take(LAST))
    }

    fn take(&mut self, last: u8) -> HostTensor {
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes[0] = last;
        self.sent += 1;
        HostTensor::from_bytes(DType::UInt8, vec![bytes.len() as u64], bytes)
            .expect("a vector of its own length")
    }
}

/// A batch received ([`Batch`]), whether it is the last, and how far into it its values were
/// taken.
struct Batched {
    batch: HostTensor,
    last: bool,
    at: usize,
}

impl Batched {
    /// `batch`, checked to be a `uint8` vector that says whether it is the last and holds a
    /// value.
    fn new(batch: HostTensor) -> Option<Batched> {
        let last = match batch.bytes()? {
            [LAST, _, ..] => true,
            [MORE, _, ..] => false,
            _ => return None,
        };
        let is_batch = batch.dtype() == DType::UInt8 && batch.shape().len() == 1;
        is_batch.then_some(Batched { batch, last, at: 1 })
    }

    /// The bytes not taken yet.
    fn rest(&self) -> &[u8] {
        &self.batch.bytes().unwrap_or_default()[self.at..]
    }

    /// The next value, decoded.
    fn next(&mut self) -> Result<HostTensor, String> {
        let rest = self.rest();
        let (len, rest) =
            (rest.split_first_chunk::<8>()).ok_or("batched value: its length is cut short")?;
        let len = usize::try_from(u64::from_le_bytes(*len))
            .ok()
            .filter(|&len| len <= rest.len())
            .ok_or("batched value: longer than its batch")?;
        let (_, value) =
            wire::decode(&rest[..len]).map_err(|err| format!("batched value: {err}"))?;
        self.at += 8 + len;
        Ok(value)
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
/// task 1's, and so on (each name as its `names.arity` strings, borrowed). Returns whether
/// this task took them (task 0). Any error, this task's own (`own`, `take`) or the
/// rendezvous's, aborts the rendezvous with its line, so that no task is left waiting; every
/// task meets at a barrier at the end.
pub fn gather<E>(
    rendezvous: &dyn Rendezvous,
    names: GatherNames,
    own: impl FnOnce() -> Result<Vec<(Vec<String>, HostTensor)>, E>,
    mut take: impl FnMut(&[&str], HostTensor) -> Result<(), E>,
) -> Result<bool, E>
where
    E: From<RendezvousError> + std::error::Error,
{
    let (task, n_tasks) = (rendezvous.task(), rendezvous.n_tasks());
    let key =
        |src: usize, what: String| RendezvousKey::new(src, 0, format!("saveplan/gather/{what}"));
    let gathered = (|| -> Result<(), E> {
        let (own_names, values): (Vec<Vec<String>>, Vec<HostTensor>) = own()?.into_iter().unzip();
        if task != 0 {
            rendezvous.send(
                &key(task, "keys".into()),
                HostTensor::string_vector(own_names.into_iter().flatten()),
            )?;
            let layout: Vec<i32> = values.iter().map(|value| i32::from(alone(value))).collect();
            let layout = HostTensor::from_i32s(vec![layout.len() as u64], &layout)
                .expect("a vector of its own length");
            rendezvous.send(&key(task, "layout".into()), layout)?;
            let mut batch = Batch::default();
            for (index, value) in values.into_iter().enumerate() {
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
        // Task 0's own, each name handed over borrowed as the others' are.
        let mut name: Vec<&str> = Vec::with_capacity(names.arity);
        for (own_name, value) in own_names.iter().zip(values) {
            name.clear();
            name.extend(own_name.iter().map(String::as_str));
            take(&name, value)?;
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
            // Every name checked before any value is taken or waited for.
            let parts: Vec<&str> = (strings.iter())
                .map(|part| std::str::from_utf8(part))
                .collect::<Result<_, _>>()
                .map_err(|_| bad("keys are not UTF-8"))?;
            let mut batched: Option<Batched> = None;
            let mut batches = 0;
            for (index, name) in parts.chunks_exact(names.arity).enumerate() {
                let value = match layout[index] {
                    true => rendezvous.recv(&key(src, index.to_string()))?,
                    false => {
                        let mut batch = match batched.take() {
                            Some(batch) if !batch.rest().is_empty() => batch,
                            Some(batch) if batch.last => {
                                return Err(bad("batches end before its keys").into());
                            }
                            _ => {
                                let batch =
                                    rendezvous.recv(&key(src, format!("batch{batches}")))?;
                                batches += 1;
                                Batched::new(batch)
                                    .ok_or_else(|| bad("batch is not a vector of values"))?
                            }
                        };
                        let value = batch.next().map_err(|what| bad(&what))?;
                        batched = Some(batch);
                        value
                    }
                };
                take(name, value)?;
            }
            if let Some(batch) = batched {
                if !batch.rest().is_empty() {
                    return Err(bad("batch holds values past its keys").into());
                }
                if !batch.last {
                    return Err(bad("batches go on past its keys").into());
                }
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
    use std::time::Duration;

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
                    gathered.push((name.iter().map(|part| part.to_string()).collect(), value));
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
        keys_error(HostTensor::string_vector(["a", "b"]), layout, batch)
    }

    /// [`gather_error`] with task 1 sending `keys` as its keys. Task 1 runs on its own thread
    /// and then waits at the gather's barrier, and a gather still waiting after 10 s is
    /// aborted, so that a gather that wrongly takes what it was sent, or waits for more, fails
    /// the test rather than hanging it.
    fn keys_error(keys: HostTensor, layout: &[i32], batch: Option<HostTensor>) -> String {
        let cluster = LocalRendezvous::new(2);
        let other = cluster.task(1).unwrap();
        let key = |what: &str| RendezvousKey::new(1, 0, format!("saveplan/gather/{what}"));
        let layout = HostTensor::from_i32s(vec![layout.len() as u64], layout).unwrap();
        let task1 = || {
            other.send(&key("keys"), keys)?;
            other.send(&key("layout"), layout)?;
            if let Some(batch) = batch {
                other.send(&key("batch0"), batch)?;
            }
            other.barrier()
        };
        std::thread::scope(|scope| {
            let heard = scope.spawn(task1);
            // A gather that waits for what never comes is aborted after a while, and its
            // error then fails the test.
            let deadline = other.deadline(Duration::from_secs(10), "the test's deadline passed");
            let gathered = gather::<RendezvousError>(
                &cluster.task(0).unwrap(),
                NAMES,
                || Ok(Vec::new()),
                |_, _| Ok(()),
            );
            // Task 1 waits at the barrier until task 0's abort, or the deadline's (its own).
            let heard = heard.join().expect("task 1 does not panic");
            drop(deadline);
            let error = (gathered.expect_err("task 0 took what it should refuse")).to_string();
            assert!(
                matches!(heard, Err(RendezvousError::Aborted { task: 0, .. })),
                "task 1 was not told by task 0: {heard:?}"
            );
            error
        })
    }

    /// [`gather_error`] of `batch` for the keys `a`, `b`, both batched.
    fn batch_error(batch: HostTensor) -> String {
        gather_error(&[0, 0], Some(batch))
    }

    /// The last batch of `values` as [`Batch`] makes it: each led by its length.
    fn batch_of(values: &[Vec<u8>]) -> HostTensor {
        batch_flagged(LAST, values)
    }

    /// A batch of `values` whose first byte is `flag`.
    fn batch_flagged(flag: u8, values: &[Vec<u8>]) -> HostTensor {
        let mut bytes = vec![flag];
        for value in values {
            bytes.extend_from_slice(&(value.len() as u64).to_le_bytes());
            bytes.extend_from_slice(value);
        }
        HostTensor::from_bytes(DType::UInt8, vec![bytes.len() as u64], bytes).unwrap()
    }

    #[test]
    fn batches_that_do_not_fit_the_keys_are_refused() {
        let encoded = |value: i32| {
            let mut bytes = Vec::new();
            wire::encode("", &HostTensor::int32_scalar(value), &mut bytes);
            bytes
        };
        let refused = |batch: HostTensor, why: &str| {
            let error = batch_error(batch);
            assert!(error.contains(why), "{error}");
        };
        refused(
            batch_of(&[encoded(1), encoded(2), encoded(3)]),
            "batch holds values past its keys",
        );
        refused(
            HostTensor::int32_scalar(1),
            "batch is not a vector of values",
        );
        // The earlier form, a string vector of values.
        refused(
            HostTensor::string_vector([encoded(1), encoded(2)]),
            "batch is not a vector of values",
        );
        refused(
            HostTensor::from_bytes(DType::UInt8, vec![0], Vec::new()).unwrap(),
            "batch is not a vector of values",
        );
        // A batch that does not say whether it is the last, or holds no value.
        refused(
            batch_flagged(2, &[encoded(1), encoded(2)]),
            "batch is not a vector of values",
        );
        for flag in [LAST, MORE] {
            refused(batch_flagged(flag, &[]), "batch is not a vector of values");
        }
        // A batch's bytes in another dtype, or not as a vector.
        let bytes = batch_of(&[encoded(1), encoded(2)])
            .bytes()
            .unwrap()
            .to_vec();
        let n = bytes.len() as u64;
        for (dtype, shape) in [
            (DType::Int8, vec![n]),
            (DType::UInt8, vec![1, n]),
            (DType::UInt8, vec![n, 1]),
        ] {
            let batch = HostTensor::from_bytes(dtype, shape, bytes.clone()).unwrap();
            refused(batch, "batch is not a vector of values");
        }
        refused(
            batch_of(&[b"\x01".to_vec(), encoded(2)]),
            "batched value: message ends early",
        );
        // A length past the batch's end, and a length cut short.
        let mut long = batch_of(&[encoded(1), encoded(2)])
            .bytes()
            .unwrap()
            .to_vec();
        let last = long.len() - encoded(2).len() - 8;
        assert_eq!(long[0], LAST);
        long[last..last + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        refused(
            HostTensor::from_bytes(DType::UInt8, vec![long.len() as u64], long).unwrap(),
            "batched value: longer than its batch",
        );
        let mut cut = batch_of(&[encoded(1)]).bytes().unwrap().to_vec();
        cut.extend_from_slice(&[1, 0, 0]);
        refused(
            HostTensor::from_bytes(DType::UInt8, vec![cut.len() as u64], cut).unwrap(),
            "batched value: its length is cut short",
        );
    }

    #[test]
    fn batches_that_end_before_the_keys_do_or_go_on_past_them_are_refused() {
        let mut one = Vec::new();
        wire::encode("", &HostTensor::int32_scalar(1), &mut one);
        // One value where two are due, in the last batch: no batch is waited for.
        let error = batch_error(batch_of(std::slice::from_ref(&one)));
        assert!(error.contains("batches end before its keys"), "{error}");
        // Both values, in a batch that says another follows.
        let error = batch_error(batch_flagged(MORE, &[one.clone(), one]));
        assert!(error.contains("batches go on past its keys"), "{error}");
    }

    /// A batch is handed out only when a value follows it, so the one that ends exactly full
    /// is the last and says so; every batch but the last says another follows.
    #[test]
    fn only_the_last_batch_says_it_is_the_last() {
        let value = HostTensor::from_bytes(DType::UInt8, vec![1 << 10], vec![3; 1 << 10]).unwrap();
        let mut encoded = Vec::new();
        wire::encode("", &value, &mut encoded);
        let per_batch = (BATCH - 1).div_ceil(8 + encoded.len());
        let mut batch = Batch::default();
        let mut sent: Vec<HostTensor> = (0..2 * per_batch)
            .filter_map(|_| batch.push(&value))
            .collect();
        sent.extend(batch.finish());
        let flags: Vec<u8> = sent.iter().map(|batch| batch.bytes().unwrap()[0]).collect();
        assert_eq!(flags, [MORE, LAST]);
        for sent in &sent {
            let mut batched = Batched::new(sent.clone()).unwrap();
            for _ in 0..per_batch {
                assert!(batched.next().unwrap() == value);
            }
            assert!(batched.rest().is_empty());
        }
        assert!(batch.finish().is_none(), "nothing left for a batch");
    }

    #[test]
    fn keys_that_are_not_utf8_are_refused() {
        // The last name: every name is checked before any value is waited for.
        let keys = HostTensor::string_vector([b"a".to_vec(), b"\xff".to_vec()]);
        let error = keys_error(keys, &[1, 1], None);
        assert!(error.contains("keys are not UTF-8"), "{error}");
    }
}
