//! A [`Checkpoint`] written or restored as one process per task of a cluster, as eager
//! TensorFlow runs `write` and `restore` as the cluster's `/job:localhost/task:0` client.
//!
//! The tasks are those of the devices the values are placed on (resolved against
//! [`DEFAULT_DEVICE`](crate::exec::DEFAULT_DEVICE), as eager TensorFlow places them), the
//! default task itself (the serialized object graph is on it, and so are unplaced values,
//! `save_counter` among them) and the io device's, when it names one
//! ([`Checkpoint::tasks`]): the tasks of the write's plan, sorted by `(job, replica, task)`.
//! Process `r` of the cluster ([`Rendezvous::task`]) is task `r`.
//!
//! * [`Checkpoint::write_in`] runs the write's plan ([`Checkpoint::write`]'s, traced once,
//!   compiled for this task alone) through the plan runner in the cluster: each task's
//!   `SaveV2` writes its own shard straight to the files (the default task's holds the object
//!   graph), the task of the plan's `MergeV2Checkpoints` merges them, and task 0 holds the
//!   prefix's save lock meanwhile. The files are [`Checkpoint::write`]'s, byte for byte.
//! * [`Checkpoint::apply_in`] reads, of a match every process made, only the values on this
//!   process's task, and gathers every task's at task 0 ([`gather`]).
//!
//! A failure on one process aborts the rendezvous with its line, so no process is left
//! waiting: each then fails, the failing one with its own error, the others naming it.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::path::Path;

use super::Checkpoint;
use super::write::{
    OBJECT_GRAPH_DEVICE, counter_tensor, create_parent, eager_device, eager_devices, write_error,
};
use crate::checkpoint::restore::RestoreMatch;
use crate::checkpoint::writer::write_failure;
use crate::checkpoint::{CheckpointError, OBJECT_GRAPH_KEY};
use crate::exec::rendezvous::{ClusterTask, GatherNames, Rendezvous, gather};
use crate::exec::{check_cluster_size, error_line};
use crate::object::counter::with_save_counter;
use crate::object::status::LoadStatus;
use crate::session::{Call, RunError};

impl Checkpoint {
    /// The tasks a write of this checkpoint runs on, sorted by `(job, replica, task)`: those
    /// of its values' devices as eager TensorFlow places them, the default task (of
    /// [`DEFAULT_DEVICE`](crate::exec::DEFAULT_DEVICE), where the object graph is, and
    /// unplaced values) and the io device's when it names one ([`Checkpoint::with_options`]).
    /// A write or restore in a cluster ([`Checkpoint::write_in`], [`Checkpoint::apply_in`])
    /// has one process per task.
    pub fn tasks(&self) -> Result<Vec<ClusterTask>, CheckpointError> {
        Ok(self.placement()?.tasks)
    }

    /// `tf.train.Checkpoint.write(prefix)` as process `cluster.task()` of a cluster of one
    /// process per task ([`Checkpoint::tasks`]): every process calls it with the same objects
    /// and values (each saves only its task's; the others are let go of here), and together
    /// they write [`Checkpoint::write`]'s files, byte for byte. The parent directory is
    /// created; task 0 holds the prefix's save lock while any task writes, and the files are
    /// written before it returns (asynchronous checkpoints too). Returns the prefix. A
    /// cluster of the wrong size is [`CheckpointError::ClusterSize`] on every process, before
    /// anything is written.
    pub fn write_in(
        &self,
        prefix: &str,
        cluster: &dyn Rendezvous,
    ) -> Result<String, CheckpointError> {
        self.sync()?;
        let written = (|| {
            self.check_cluster(cluster)?;
            create_parent(Path::new(prefix))?;
            let task = cluster.task();
            let prepared = self.prepare(prefix, false, Some(task))?;
            let used = (prepared.runner.task_plans(Call::Save))
                .and_then(|plans| plans.task_variables(task));
            if let Some(used) = used {
                prepared.variables.keep_only(used);
            }
            (prepared.runner)
                .run(Call::Save, prepared.run(prefix, Some(cluster)))
                .map_err(|source| match source {
                    // Another task failed: its line says what.
                    RunError::Cluster(err) => CheckpointError::Rendezvous(err),
                    other => write_error(prefix, write_failure(other)),
                })
        })();
        if let Err(err) = &written {
            cluster.abort(&error_line(err));
        }
        written.map(|_| prefix.to_owned())
    }

    /// [`Checkpoint::apply`] as process `cluster.task()` of a cluster of one process per task
    /// ([`Checkpoint::tasks`]), every process applying the same match: reads only the values
    /// on this process's task (unplaced values, `save_counter` among them, are on the default
    /// task), checking every one's dtype and shape first (so every process fails alike), and
    /// gathers them at task 0, which assigns every value restored; the others assign their
    /// own. Returns the match's status, the same on every process.
    pub fn apply_in(
        &mut self,
        matched: RestoreMatch,
        cluster: &dyn Rendezvous,
    ) -> Result<LoadStatus, CheckpointError> {
        let applied = (|| {
            let placement = self.placement()?;
            check_size(&placement.tasks, cluster)?;
            let own = matched.read_where(|key| placement.task_of(key) == cluster.task())?;
            let mut gathered = BTreeMap::new();
            let names = GatherNames {
                arity: 1,
                what: "checkpoint keys",
            };
            let sent = || {
                Ok(own
                    .iter()
                    .map(|(key, value)| (vec![key.clone()], value.clone()))
                    .collect())
            };
            let take = |name: &[&str], value| {
                gathered.insert(name.first().copied().unwrap_or_default().to_owned(), value);
                Ok::<_, CheckpointError>(())
            };
            let restored = match gather(cluster, names, sent, take)? {
                true => gathered,
                false => own,
            };
            self.assign_match(matched, restored)
        })();
        if let Err(err) = &applied {
            cluster.abort(&error_line(err));
        }
        applied
    }

    /// Whether `cluster` has one process per task of this checkpoint
    /// ([`CheckpointError::ClusterSize`] otherwise, on every process alike).
    pub fn check_cluster(&self, cluster: &dyn Rendezvous) -> Result<(), CheckpointError> {
        check_size(&self.tasks()?, cluster)
    }

    /// The tasks of [`Checkpoint::tasks`], and the task of each value a write saves
    /// (`save_counter`'s as a write places it once it exists).
    fn placement(&self) -> Result<Placement, CheckpointError> {
        let graph = with_save_counter(&self.graph);
        let counter = counter_tensor(0);
        let saved = self.saved_values(&graph, &counter);
        let devices = eager_devices(&saved)?;
        let object_graph = eager_device(OBJECT_GRAPH_KEY, OBJECT_GRAPH_DEVICE)?;
        // Each distinct device parsed once: most values share a few.
        let mut task_of_device: BTreeMap<&str, ClusterTask> = BTreeMap::new();
        let placed = (devices.iter().map(String::as_str))
            .chain([object_graph.as_str()])
            .chain(self.options.io_device.as_deref());
        for device in placed {
            if let Entry::Vacant(slot) = task_of_device.entry(device)
                && let Some(task) = ClusterTask::of_device(device)
            {
                slot.insert(task);
            }
        }
        let mut tasks: Vec<ClusterTask> = task_of_device.values().cloned().collect();
        tasks.sort_unstable();
        tasks.dedup();
        let index_of = |device: &str| {
            let task = task_of_device.get(device)?;
            tasks.binary_search(task).ok()
        };
        let default = index_of(&object_graph).unwrap_or(0);
        let by_key = (saved.iter().zip(&devices))
            .map(|(saved, device)| (saved.key.to_owned(), index_of(device).unwrap_or(default)))
            .collect();
        Ok(Placement {
            tasks,
            by_key,
            default,
        })
    }
}

/// Where a checkpoint's values are ([`Checkpoint::tasks`]).
struct Placement {
    /// The tasks, sorted by `(job, replica, task)`.
    tasks: Vec<ClusterTask>,
    /// The task (an index into `tasks`) of each value a write saves, by key.
    by_key: BTreeMap<String, usize>,
    /// The default task's index, where the object graph is.
    default: usize,
}

impl Placement {
    /// The task of the value under `key`; the default task's for a key no write saves.
    fn task_of(&self, key: &str) -> usize {
        self.by_key.get(key).copied().unwrap_or(self.default)
    }
}

/// [`check_cluster_size`] of `tasks`, as this layer's error.
fn check_size(tasks: &[ClusterTask], cluster: &dyn Rendezvous) -> Result<(), CheckpointError> {
    check_cluster_size(tasks, cluster).map_err(|err| CheckpointError::ClusterSize(Box::new(err)))
}
