//! Placement: the task and full device name of each op, as TensorFlow's placer chooses them
//! for a plan (the rules are in the module docs of [`super`]).
//!
//! Every distinct device string is parsed once; an op's placement is computed once and kept,
//! so an op that many others are colocated with is placed once, and a chain of colocations is
//! followed on an explicit stack, never by recursion (a cycle of colocations is broken where
//! it closes: that op falls back to the client's task).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use saveplan_ir::device::{DeviceIndex, DeviceSpec};
use saveplan_ir::signature::{ArgType, ElemType, attr_len, of_op};
use saveplan_ir::{AttrValue, DType, Graph, OpId, OpNode};

use super::{PartitionError, Task};

/// Where one op runs: the index of its task in [`Placer::tasks`] and its full device name.
#[derive(Clone, Debug)]
pub(super) struct Placed {
    /// Index into [`Placer::tasks`].
    pub task: u32,
    /// `/job:J/replica:R/task:T/device:TYPE:N`.
    pub device: Arc<str>,
}

/// What a device string asks for.
#[derive(Clone, Debug)]
enum Request {
    /// A task (job, replica or task named), and maybe a device type and index.
    Task {
        task: Task,
        device_type: Option<String>,
        index: Option<u32>,
    },
    /// No task: where the op goes is the placer's choice.
    Free {
        device_type: Option<String>,
        index: Option<u32>,
    },
}

/// The placement of a graph's ops, computed on demand and kept.
pub(super) struct Placer<'g> {
    graph: &'g Graph,
    client: Task,
    /// The tasks met so far, in the order met; [`Placed::task`] indexes them.
    pub tasks: Vec<Task>,
    task_index: FxHashMap<Task, u32>,
    requests: FxHashMap<&'g str, Request>,
    /// The placement of each device string that names a task: every op asking for it.
    by_device: FxHashMap<&'g str, Placed>,
    devices: FxHashMap<(u32, String, u32), Arc<str>>,
    /// Per op index: its placement once computed.
    placed: Vec<Option<Placed>>,
    /// Per op index: whether its placement is being computed (on the stack).
    open: Vec<bool>,
}

impl<'g> Placer<'g> {
    /// A placer for `graph` whose client is `client`, or the first task any op names.
    pub fn new(graph: &'g Graph, client: Option<&Task>) -> Result<Placer<'g>, PartitionError> {
        let mut placer = Placer {
            graph,
            client: Task::new("localhost", 0, 0),
            tasks: Vec::new(),
            task_index: FxHashMap::default(),
            requests: FxHashMap::default(),
            by_device: FxHashMap::default(),
            devices: FxHashMap::default(),
            placed: vec![None; graph.id_bound()],
            open: vec![false; graph.id_bound()],
        };
        placer.client = match client {
            Some(client) => client.clone(),
            None => placer.first_named_task()?,
        };
        Ok(placer)
    }

    /// The client's task.
    pub fn client(&self) -> &Task {
        &self.client
    }

    /// The index of `task` in [`Placer::tasks`], added if new.
    pub fn task_index(&mut self, task: &Task) -> u32 {
        if let Some(&index) = self.task_index.get(task) {
            return index;
        }
        let index = self.tasks.len() as u32;
        self.tasks.push(task.clone());
        self.task_index.insert(task.clone(), index);
        index
    }

    /// The full name of device `device_type:index` of task number `task`, shared.
    pub fn device(&mut self, task: u32, device_type: &str, index: u32) -> Arc<str> {
        let key = (task, device_type.to_owned(), index);
        if let Some(device) = self.devices.get(&key) {
            return device.clone();
        }
        let device: Arc<str> = self.tasks[task as usize].device(device_type, index).into();
        self.devices.insert(key, device.clone());
        device
    }

    /// The first task, in [`Task`] order, that an op's device names with its job (a missing
    /// replica or task is 0); `/job:localhost/replica:0/task:0` if none does.
    fn first_named_task(&mut self) -> Result<Task, PartitionError> {
        let graph = self.graph;
        let mut first: Option<Task> = None;
        for id in graph.ops() {
            let node = graph.op(id);
            if let Request::Task { task, .. } = self.request(node)?
                && first.as_ref().is_none_or(|first| task < first)
            {
                first = Some(task.clone());
            }
        }
        Ok(first.unwrap_or_else(|| Task::new("localhost", 0, 0)))
    }

    /// What `node`'s device asks for, parsed once per distinct string.
    fn request(&mut self, node: &'g OpNode) -> Result<&Request, PartitionError> {
        let device: &'g str = &node.device;
        if !self.requests.contains_key(device) {
            let spec = DeviceSpec::parse(device).map_err(|source| PartitionError::Device {
                op: node.name.clone(),
                source,
            })?;
            let index = spec.device_index.map(|index| match index {
                DeviceIndex::Index(index) => index,
                DeviceIndex::Any => 0,
            });
            let request = if spec.job.is_some() || spec.replica.is_some() || spec.task.is_some() {
                Request::Task {
                    task: Task {
                        job: spec.job.unwrap_or_else(|| self.client.job.clone()),
                        replica: spec.replica.unwrap_or(0),
                        task: spec.task.unwrap_or(0),
                    },
                    device_type: spec.device_type,
                    index,
                }
            } else {
                Request::Free {
                    device_type: spec.device_type,
                    index,
                }
            };
            self.requests.insert(device, request);
        }
        Ok(&self.requests[device])
    }

    /// The placement of `id`, computed (with the ops it is colocated with) if not yet known.
    pub fn place(&mut self, id: OpId) -> Result<Placed, PartitionError> {
        if let Some(placed) = &self.placed[id.index()] {
            return Ok(placed.clone());
        }
        // Most ops name their task: one lookup, no walk.
        if let Some(placed) = self.by_device.get(&*self.graph.op(id).device) {
            self.placed[id.index()] = Some(placed.clone());
            return Ok(placed.clone());
        }
        let mut stack = vec![id];
        while let Some(&top) = stack.last() {
            if self.placed[top.index()].is_some() {
                stack.pop();
                continue;
            }
            let node = self.graph.op(top);
            if let Some(placed) = self.by_device.get(&*node.device) {
                self.placed[top.index()] = Some(placed.clone());
                stack.pop();
                continue;
            }
            let request = self.request(node)?.clone();
            let placed = match request {
                Request::Task {
                    task,
                    device_type,
                    index,
                } => {
                    let task = self.task_index(&task);
                    let device_type = device_type.as_deref().unwrap_or("CPU");
                    let device = self.device(task, device_type, index.unwrap_or(0));
                    let placed = Placed { task, device };
                    self.by_device.insert(&node.device, placed.clone());
                    placed
                }
                Request::Free { device_type, index } => {
                    let with = self.colocated_with(top);
                    match with {
                        Some(with)
                            if self.placed[with.index()].is_none() && !self.open[with.index()] =>
                        {
                            self.open[top.index()] = true;
                            stack.push(with);
                            continue;
                        }
                        _ => {}
                    }
                    let beside = with.and_then(|with| self.placed[with.index()].clone());
                    match (beside, device_type) {
                        (Some(beside), None) => beside,
                        (beside, device_type) => {
                            let task = match beside {
                                Some(beside) => beside.task,
                                None => {
                                    let client = self.client.clone();
                                    self.task_index(&client)
                                }
                            };
                            let device_type = device_type.as_deref().unwrap_or("CPU");
                            let device = self.device(task, device_type, index.unwrap_or(0));
                            Placed { task, device }
                        }
                    }
                }
            };
            self.open[top.index()] = false;
            self.placed[top.index()] = Some(placed);
            stack.pop();
        }
        Ok(self.placed[id.index()].clone().expect("placed above"))
    }

    /// The op an op with no task of its own is placed with: the first op of its `_class`
    /// colocation group (`loc:@name`) that is in the graph, else the producer of its first
    /// `resource` input.
    fn colocated_with(&self, id: OpId) -> Option<OpId> {
        let graph = self.graph;
        let node = graph.op(id);
        if let Some(AttrValue::List(list)) = node.attrs.get("_class") {
            let group = list
                .s
                .iter()
                .filter_map(|entry| entry.strip_prefix(b"loc:@"))
                .filter_map(|name| std::str::from_utf8(name).ok())
                .filter_map(|name| graph.find(name))
                .find(|&with| with != id);
            if group.is_some() {
                return group;
            }
        }
        graph.inputs_iter(id).find_map(|(_, input)| {
            let flat = saveplan_ir::signature::flat_output(graph.op(input.src), &input.output);
            let dtype = output_dtype(graph.op(input.src), flat.ok()?);
            (dtype == Some(DType::Resource) && input.src != id).then_some(input.src)
        })
    }
}

/// The dtype of output `output` of `node`, from its signature and attributes (an op type the
/// table does not know: its `T`, `dtype` or `tensor_type` attr).
pub(super) fn output_dtype(node: &OpNode, output: u32) -> Option<DType> {
    let attr_type = |name: &str| match node.attrs.get(name) {
        Some(AttrValue::Type(dtype)) => Some(*dtype),
        _ => None,
    };
    let Some(sig) = of_op(&node.op) else {
        return (attr_type("T").or_else(|| attr_type("dtype")))
            .or_else(|| attr_type("tensor_type"));
    };
    let (arg_name, index) = sig
        .output_arg(output as usize, &|name| attr_len(&node.attrs, name))
        .ok()?;
    let arg = sig.output(arg_name)?;
    match arg.ty {
        ArgType::Fixed(name) => DType::parse(name),
        ArgType::Attr(attr) => attr_type(attr),
        ArgType::RefAttr(attr) => attr_type(attr).map(DType::to_ref),
        ArgType::Repeated { elem, .. } => match elem {
            ElemType::Fixed(name) => DType::parse(name),
            ElemType::Attr(attr) => attr_type(attr),
        },
        ArgType::List(attr) => match node.attrs.get(attr) {
            Some(AttrValue::List(list)) => list.types.get(index).copied(),
            _ => None,
        },
    }
}

/// Whether TensorFlow keeps a tensor of `dtype` in host memory whatever the device, so that
/// it crosses tasks through `_HostSend`/`_HostRecv`.
pub(super) fn in_host_memory(dtype: DType) -> bool {
    matches!(dtype.base(), DType::String | DType::Int32 | DType::Resource)
}
