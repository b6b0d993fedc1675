//! [`TaskPlans`]: a plan compiled once per task of its cluster, run as TensorFlow's workers
//! run it. This is how every compiled plan runs, in one process or in many.
//!
//! A plan whose ops name at most one task (`/job:J/replica:R/task:T`; most plans name none)
//! is its own one partition: it compiles and runs whole, exactly as [`CompiledPlan::compile`]
//! and [`Executor::run`] do. A plan that spans several tasks is split by
//! [`crate::partition`] (one graph per task, a send/receive pair on every edge that crosses
//! tasks), and each partition is compiled on its own. Then either
//!
//! * [`TaskPlans::run`] runs every task in this process, each on a thread of its own, meeting
//!   through a [`LocalRendezvous`] (the single-process executor), or
//! * [`TaskPlans::run_task`] runs one task, the rendezvous's own, meeting the others through
//!   whatever rendezvous the caller gives (`MpiRendezvous` under `mpirun`: task `r` on rank
//!   `r`).
//!
//! Both run the same partitions through the same scheduler, whose receives never block a pool
//! thread ([`super::scheduler`]), so the files a plan writes are the same either way and the
//! same as the whole plan's (`tests/it/cluster_run.rs`). The first failing task aborts the
//! rendezvous; the others stop, and the error returned is the failing task's own, with the
//! task named.

use rustc_hash::FxHashSet;

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{AttrValue, Graph, Module, Op, TensorName, Verified, verify_module};

use super::backend::Backend;
use super::error::ExecError;
use super::executor::Executor;
use super::plan::CompiledPlan;
use super::rendezvous::{ClusterRun, ClusterTask, LocalRendezvous, Rendezvous};
use super::step::RunContext;
use super::tensor::HostTensor;
use super::variables::VarKey;
use crate::partition::{Partition, PartitionOptions, partition};
use rayon::prelude::*;

/// A plan compiled per task: see the [module docs](self).
#[derive(Debug)]
pub struct TaskPlans {
    /// The tasks that run something, sorted by `(job, replica, task)`: task `i` runs
    /// `plans[i]`. One task (possibly `/job:localhost/replica:0/task:0`) for a whole plan.
    tasks: Vec<ClusterTask>,
    plans: Vec<TaskPlan>,
    /// Per fetch of the whole plan (its tensor targets, in order): the task whose plan
    /// fetches it (a task fetches its own in the same order, so nothing more is needed).
    fetches: Vec<usize>,
}

/// What one task runs.
#[derive(Debug)]
struct TaskPlan {
    /// `None` for a task another process runs ([`TaskPlans::compile_for`]).
    executor: Option<Executor>,
    /// The variables its partition's `VarHandleOp`s name (a partitioned plan's task only).
    variables: Option<Vec<VarKey>>,
    /// Per feed of the task's plan: the whole plan's feed it takes (only the client's task,
    /// where the feeds arrive, has any).
    feeds: Vec<usize>,
}

impl TaskPlans {
    /// Compiles `module` for `targets` with `feeds` (as [`CompiledPlan::compile`] takes them)
    /// for `backend`: whole if it names at most one task, else one plan per task of its
    /// partitions (on the pool's threads at once). A JIT's native code is made at each
    /// plan's first run ([`Executor::lazy`]).
    pub fn compile(
        module: Verified<'_>,
        targets: &[&str],
        feeds: &[&str],
        backend: Backend,
    ) -> Result<TaskPlans, ExecError> {
        TaskPlans::compile_for(module, targets, feeds, backend, None)
    }

    /// [`TaskPlans::compile`], compiling only task `only`'s partition when given (this
    /// process is that task of a cluster: [`TaskPlans::run_task`] is all it will run, and the
    /// other tasks' partitions are not compiled; [`TaskPlans::run`] then fails).
    pub fn compile_for(
        module: Verified<'_>,
        targets: &[&str],
        feeds: &[&str],
        backend: Backend,
        only: Option<usize>,
    ) -> Result<TaskPlans, ExecError> {
        if let Some(task) = one_task(module.module()) {
            return TaskPlans::whole(module, targets, feeds, backend, task);
        }
        let options = PartitionOptions {
            targets: targets.iter().map(|&target| target.to_owned()).collect(),
            feeds: feeds.iter().map(|&feed| feed.to_owned()).collect(),
            client: None,
            only,
        };
        let parts =
            partition(module, &options).map_err(|err| ExecError::Partition(Box::new(err)))?;
        if parts.partitions.len() <= 1 {
            let task = parts
                .partitions
                .first()
                .map_or(parts.client, |part| part.task.clone());
            return TaskPlans::whole(module, targets, feeds, backend, cluster_task(&task));
        }
        let graph = &module.module().graph;
        let mut local_targets: Vec<Vec<&str>> = vec![Vec::new(); parts.partitions.len()];
        let mut fetches = Vec::new();
        for &target in targets {
            let name = TensorName::parse(target).map_err(|_| ExecError::BadTensorName {
                name: target.to_owned(),
            })?;
            let task = (graph.find(name.op))
                .and_then(|id| parts.task_of[id.index()])
                .ok_or_else(|| ExecError::UnknownOp {
                    name: name.op.to_owned(),
                })?;
            local_targets[task].push(target);
            if name.output.is_some() {
                fetches.push(task);
            }
        }
        let variables = variables_by_task(graph, &parts.task_of, parts.partitions.len());
        // A task's plan fetches its own tensor targets first, in the whole plan's order, so
        // fetch `k` of a task is its `k`-th tensor target whatever op targets follow.
        for targets in &mut local_targets {
            targets.sort_by_key(|target| {
                TensorName::parse(target).map_or(true, |name| name.output.is_none())
            });
        }
        let compile_part =
            |index: usize, part: &Partition, targets: &Vec<&str>, variables: Vec<VarKey>| {
                let variables = Some(variables);
                if only.is_some_and(|only| only != index) {
                    return Ok(TaskPlan {
                        executor: None,
                        variables,
                        feeds: Vec::new(),
                    });
                }
                let mut wanted: Vec<&str> = targets.clone();
                // Every send runs: another task waits for it.
                wanted.extend(part.sends.iter().map(|edge| edge.send_op.as_str()));
                let recv_feeds: Vec<String> = (part.feeds.iter())
                    .map(|feed| format!("{}:0", feed.recv_op))
                    .collect();
                let recv_feeds: Vec<&str> = recv_feeds.iter().map(String::as_str).collect();
                let feeds = (part.feeds.iter())
                    .map(|feed| {
                        (feeds.iter())
                            .position(|&given| same_tensor(given, &feed.tensor))
                            .ok_or_else(|| ExecError::UnknownOp {
                                name: feed.tensor.clone(),
                            })
                    })
                    .collect::<Result<Vec<usize>, ExecError>>()?;
                let in_task = |err| ExecError::Task {
                    task: part.task.to_string(),
                    source: Box::new(err),
                };
                let verified = verify_module(&part.module)
                    .map_err(|err| in_task(ExecError::InvalidPartition(err)))?;
                let plan =
                    CompiledPlan::compile(verified, &wanted, &recv_feeds).map_err(in_task)?;
                Ok(TaskPlan {
                    executor: Some(Executor::lazy(plan, backend)?),
                    variables,
                    feeds,
                })
            };
        // Each partition on a pool thread; errors in task order, whichever ends first.
        let plans = (parts.partitions.par_iter().zip(&local_targets))
            .zip(variables)
            .enumerate()
            .map(|(index, ((part, targets), variables))| {
                compile_part(index, part, targets, variables)
            })
            .collect::<Vec<Result<TaskPlan, ExecError>>>()
            .into_iter()
            .collect::<Result<Vec<TaskPlan>, ExecError>>()?;
        let tasks = (parts.partitions.iter())
            .map(|part| cluster_task(&part.task))
            .collect();
        // The plans keep nothing of the partitions; freeing N ops' graphs is left to a pool
        // thread, as a session leaves its trace's.
        drop(local_targets);
        rayon::spawn(move || drop(parts));
        Ok(TaskPlans {
            tasks,
            plans,
            fetches,
        })
    }

    /// The plan compiled whole, run by `task`.
    fn whole(
        module: Verified<'_>,
        targets: &[&str],
        feeds: &[&str],
        backend: Backend,
        task: ClusterTask,
    ) -> Result<TaskPlans, ExecError> {
        let plan = CompiledPlan::compile(module, targets, feeds)?;
        let fetches = vec![0; plan.fetches().len()];
        Ok(TaskPlans {
            tasks: vec![task],
            plans: vec![TaskPlan {
                executor: Some(Executor::lazy(plan, backend)?),
                variables: None,
                feeds: (0..feeds.len()).collect(),
            }],
            fetches,
        })
    }

    /// The tasks that run something, sorted by `(job, replica, task)` (task `i` of
    /// [`TaskPlans::run_task`] is `tasks()[i]`).
    pub fn tasks(&self) -> &[ClusterTask] {
        &self.tasks
    }

    /// The compiled plan, when it runs whole on one task; `None` for a partitioned plan
    /// ([`TaskPlans::task_plan`] gives each task's).
    pub fn whole_plan(&self) -> Option<&CompiledPlan> {
        match &*self.plans {
            [one] => one.executor.as_ref().map(Executor::plan),
            _ => None,
        }
    }

    /// The variables task `index`'s partition uses (its `VarHandleOp`s'), sorted; `None` for
    /// a plan that runs whole (it uses every variable), and for a task it does not have.
    pub fn task_variables(&self, index: usize) -> Option<&[VarKey]> {
        self.plans.get(index)?.variables.as_deref()
    }

    /// The compiled plan of task `index`; `None` for a task this process does not run
    /// ([`TaskPlans::compile_for`]).
    pub fn task_plan(&self, index: usize) -> Option<&CompiledPlan> {
        Some(self.plans.get(index)?.executor.as_ref()?.plan())
    }

    /// The executor of task `index`, or [`ExecError::NotCompiled`].
    fn executor(&self, index: usize) -> Result<&Executor, ExecError> {
        (self
            .plans
            .get(index)
            .and_then(|plan| plan.executor.as_ref()))
        .ok_or_else(|| ExecError::NotCompiled {
            task: self.tasks[index.min(self.tasks.len() - 1)].to_string(),
        })
    }

    /// Runs every task's plan in this process with `feeds` (the whole plan's, in compile
    /// order), each task on a thread of its own meeting the others through a
    /// [`LocalRendezvous`], and returns the whole plan's fetches in target order. A plan that
    /// runs whole runs on the calling thread, as [`Executor::run`].
    pub fn run(
        &self,
        cx: &RunContext<'_>,
        feeds: Vec<HostTensor>,
    ) -> Result<Vec<HostTensor>, ExecError> {
        if let [_] = &*self.plans {
            return self.executor(0)?.run(cx, feeds);
        }
        let executors = (0..self.plans.len())
            .map(|index| self.executor(index))
            .collect::<Result<Vec<&Executor>, ExecError>>()?;
        let rendezvous = LocalRendezvous::new(self.plans.len());
        let results: Vec<Result<Vec<HostTensor>, ExecError>> = std::thread::scope(|threads| {
            let running: Vec<_> = (self.plans.iter().zip(executors).enumerate())
                .map(|(index, (plan, executor))| {
                    let view = rendezvous.task(index);
                    let feeds = plan.feeds.iter().map(|&at| feeds[at].clone()).collect();
                    threads.spawn(move || {
                        let view = view.map_err(|err| ExecError::Rendezvous(Box::new(err)))?;
                        let cluster = ClusterRun {
                            rendezvous: &view,
                            tasks: &self.tasks,
                        };
                        executor.run(&cx.with_cluster(cluster), feeds)
                    })
                })
                .collect();
            (running.into_iter())
                .map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        // The task that failed first aborted the others: its error is the one to report (the
        // others' say only that it failed).
        let first = rendezvous.aborted().map(|(task, _)| task);
        let mut failed: Vec<(usize, ExecError)> = Vec::new();
        let mut outputs = Vec::with_capacity(results.len());
        for (index, result) in results.into_iter().enumerate() {
            match result {
                Ok(fetched) => outputs.push(fetched.into_iter()),
                Err(err) => failed.push((index, err)),
            }
        }
        if !failed.is_empty() {
            let at = (failed.iter().position(|&(index, _)| Some(index) == first)).unwrap_or(0);
            let (index, err) = failed.swap_remove(at);
            return Err(self.task_error(index, err));
        }
        Ok((self.fetches.iter())
            .map(|&task| outputs[task].next().expect("a task fetches its targets"))
            .collect())
    }

    /// Runs task `rendezvous.task()`'s plan, meeting the other tasks (in other processes)
    /// through `rendezvous`, with `feeds` (the whole plan's, in compile order; only the
    /// client's task takes any). Returns the whole plan's fetches in target order, `None`
    /// where another task fetches it. The rendezvous must have one task per task of the plan.
    pub fn run_task(
        &self,
        rendezvous: &dyn Rendezvous,
        cx: &RunContext<'_>,
        feeds: &[HostTensor],
    ) -> Result<Vec<Option<HostTensor>>, ExecError> {
        self.check_cluster(rendezvous)?;
        let index = rendezvous.task();
        let plan = &self.plans[index];
        let executor = self.executor(index)?;
        let cluster = ClusterRun {
            rendezvous,
            tasks: &self.tasks,
        };
        let fed = plan.feeds.iter().map(|&at| feeds[at].clone()).collect();
        let mut fetched = (executor.run(&cx.with_cluster(cluster), fed))
            .map_err(|err| self.task_error(index, err))?
            .into_iter();
        Ok((self.fetches.iter())
            .map(|&task| if task == index { fetched.next() } else { None })
            .collect())
    }

    /// Whether this process can run its task of `rendezvous`, as [`TaskPlans::run_task`]
    /// needs: one task per task of the plan ([`ExecError::ClusterSize`]; every process of the
    /// cluster finds the same), and its task's plan compiled here ([`ExecError::NotCompiled`]).
    pub fn check_cluster(&self, rendezvous: &dyn Rendezvous) -> Result<(), ExecError> {
        check_cluster_size(&self.tasks, rendezvous)?;
        self.executor(rendezvous.task()).map(|_| ())
    }

    /// `err` of task `index`, naming the task when the plan spans several.
    fn task_error(&self, index: usize, err: ExecError) -> ExecError {
        if self.plans.len() == 1 {
            return err;
        }
        ExecError::Task {
            task: self.tasks[index].to_string(),
            source: Box::new(err),
        }
    }
}

/// Per partition (`task_of`: the partition of each op of `graph`), the variables its
/// `VarHandleOp`s name (an empty `shared_name` is the op's name), sorted, once each.
fn variables_by_task(graph: &Graph, task_of: &[Option<usize>], n_tasks: usize) -> Vec<Vec<VarKey>> {
    let text = |node: &saveplan_ir::OpNode, attr: &str| match node.attrs.get(attr) {
        Some(AttrValue::S(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    };
    let mut keys: Vec<Vec<VarKey>> = vec![Vec::new(); n_tasks];
    for id in graph.ops() {
        let node = graph.op(id);
        let Some(task) = task_of[id.index()].filter(|_| node.op == Op::VarHandleOp) else {
            continue;
        };
        let shared_name = match text(node, "shared_name") {
            name if name.is_empty() => node.name.clone(),
            name => name,
        };
        keys[task].push(VarKey::new(text(node, "container"), shared_name));
    }
    for keys in &mut keys {
        keys.sort_unstable();
        keys.dedup();
    }
    keys
}

/// Whether `rendezvous` has one process per task of `tasks` (the tasks a plan runs on,
/// sorted), as a cluster run of it needs: [`ExecError::ClusterSize`] otherwise, which every
/// process of the cluster finds the same.
pub fn check_cluster_size(
    tasks: &[ClusterTask],
    rendezvous: &dyn Rendezvous,
) -> Result<(), ExecError> {
    if rendezvous.n_tasks() == tasks.len() {
        return Ok(());
    }
    Err(ExecError::ClusterSize {
        processes: rendezvous.n_tasks(),
        tasks: tasks.len(),
        names: (tasks.iter().map(ClusterTask::to_string))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

fn cluster_task(task: &crate::partition::Task) -> ClusterTask {
    ClusterTask {
        job: task.job.clone(),
        replica: task.replica,
        task: task.task,
    }
}

/// Whether `given` (a feed as the caller named it) and `tensor` (`op:N`) are one tensor.
fn same_tensor(given: &str, tensor: &str) -> bool {
    given == tensor || tensor.strip_suffix(":0") == Some(given)
}

/// The one task every op of `module` is on, when its ops name at most one: the task they
/// name, or `/job:localhost/replica:0/task:0` when none names a job. `None` when they name
/// several (or a device does not parse: the partitioner reports it). Each distinct device
/// string is parsed once, so a plan of N ops costs N hash lookups.
fn one_task(module: &Module) -> Option<ClusterTask> {
    let graph = &module.graph;
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let mut found: Option<ClusterTask> = None;
    for id in graph.ops() {
        let device: &str = &graph.op(id).device;
        if !seen.insert(device) {
            continue;
        }
        let spec = DeviceSpec::parse(device).ok()?;
        let Some(task) = ClusterTask::of_spec(&spec) else {
            continue;
        };
        match &found {
            Some(known) if *known != task => return None,
            Some(_) => {}
            None => found = Some(task),
        }
    }
    Some(found.unwrap_or(ClusterTask {
        job: "localhost".to_owned(),
        replica: 0,
        task: 0,
    }))
}
