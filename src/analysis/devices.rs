//! Device checks: every op is placed on one of the plan's tasks.
//!
//! The tasks are the `CPU:0` of every `SaveV2` and `ShardedFilename` device in the module
//! (FORMATS.md §8.1: a tensor's task is its device with `CPU:0`). An op's device is on a task
//! when no field both set in the op's device and in the task differs, so partial devices such
//! as `/device:CPU:*` are on every task.

use rustc_hash::FxHashMap;
use saveplan_ir::device::DeviceSpec;
use saveplan_ir::{Graph, Op};

use super::{Finding, PlanOps, Problem, Scope};

/// Reports ops outside the plan's tasks and devices that do not parse. Nothing is reported
/// for a module that saves nothing.
pub fn check_devices(graphs: &[(&Scope, &Graph, &PlanOps)]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let tasks = plan_tasks(graphs);
    for (scope, graph, _) in graphs {
        // Ops share a few device strings (a graph stores each once): each is judged once,
        // keyed by where its text lives.
        let mut verdicts: FxHashMap<*const u8, Verdict> = FxHashMap::default();
        let mut ids = graph.ops();
        ids.sort_by_key(|&id| graph.seq(id));
        for id in ids {
            let node = graph.op(id);
            if node.device.is_empty() {
                continue;
            }
            let verdict = verdicts.entry(node.device.as_ptr()).or_insert_with(|| {
                match DeviceSpec::parse(&node.device) {
                    Err(err) => Verdict::Bad(err.to_string()),
                    Ok(spec)
                        if tasks.is_empty() || tasks.iter().any(|task| on_task(&spec, task)) =>
                    {
                        Verdict::OnTask
                    }
                    Ok(_) => Verdict::Foreign,
                }
            });
            let problem = match verdict {
                Verdict::OnTask => continue,
                Verdict::Bad(reason) => Problem::BadDevice {
                    name: node.name.clone(),
                    reason: reason.clone(),
                },
                Verdict::Foreign => Problem::ForeignDevice {
                    name: node.name.clone(),
                    device: node.device.to_string(),
                },
            };
            findings.push(Finding {
                scope: (*scope).clone(),
                problem,
            });
        }
    }
    findings
}

/// What [`check_devices`] found of one device string.
enum Verdict {
    /// On one of the plan's tasks.
    OnTask,
    /// Does not parse, for this reason.
    Bad(String),
    /// Parses, but is on none of the plan's tasks.
    Foreign,
}

/// The plan's tasks: the `CPU:0` of the `SaveV2` and `ShardedFilename` devices, sorted.
pub fn plan_tasks(graphs: &[(&Scope, &Graph, &PlanOps)]) -> Vec<DeviceSpec> {
    let mut tasks = Vec::new();
    for (_, graph, _) in graphs {
        for id in graph.ops() {
            let node = graph.op(id);
            if matches!(node.op, Op::SaveV2 | Op::ShardedFilename)
                && let Ok(spec) = DeviceSpec::parse(&node.device)
            {
                tasks.push(spec.set_cpu0());
            }
        }
    }
    tasks.sort();
    tasks.dedup();
    tasks
}

/// Whether `device` can run on `task`: job, replica and task agree where both are set.
fn on_task(device: &DeviceSpec, task: &DeviceSpec) -> bool {
    fn agree<T: PartialEq>(a: Option<T>, b: Option<T>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
    agree(device.job.as_deref(), task.job.as_deref())
        && agree(device.replica, task.replica)
        && agree(device.task, task.task)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(device: &str) -> DeviceSpec {
        DeviceSpec::parse(device).unwrap()
    }

    #[test]
    fn partial_devices_are_on_every_task() {
        let task = spec("/job:worker/replica:0/task:1/device:CPU:0");
        assert!(on_task(&spec("/device:CPU:*"), &task));
        assert!(on_task(&spec("/job:worker/task:1/device:CPU:1"), &task));
        assert!(!on_task(&spec("/job:worker/task:0"), &task));
        assert!(!on_task(&spec("/job:ps/replica:0/task:1"), &task));
        // An io device without a replica is on the task with one (g4).
        assert!(on_task(
            &task,
            &spec("/job:worker/task:1/device:CPU:0").set_cpu0()
        ));
    }
}
