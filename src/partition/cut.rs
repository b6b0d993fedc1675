//! Pruning a graph to one run, and cutting it into per-task modules with a send/receive pair
//! on every edge between tasks.
//!
//! Three passes over the kept ops, in the source graph's creation order: place each op and
//! add it to its task's graph; add the client's receive of each fed tensor; wire every data
//! and control input, within a task as it was, across tasks through the pair cut for it (one
//! pair per tensor and receiving task, one per op and receiving task for control edges).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use saveplan_ir::signature::flat_output;
use saveplan_ir::{
    AttrValue, Attrs, DType, Graph, Module, Op, OpId, OpNode, Port, Shape, Tensor, TensorName,
    TensorValues,
};

use super::place::{Placer, in_host_memory, output_dtype};
use super::{CrossEdge, CrossKind, Feed, Partition, PartitionError, PartitionOptions, Partitions};

/// The `send_device_incarnation` of every send and receive. TensorFlow writes the sending
/// device's incarnation, a random number drawn when the worker starts; a plan has none.
const INCARNATION: i64 = 1;

/// See [`super::partition`].
pub(super) fn partition(
    module: &Module,
    options: &PartitionOptions,
) -> Result<Partitions, PartitionError> {
    let graph = &module.graph;
    let targets = targets(graph, options)?;
    let feeds = feeds(graph, options)?;
    let fed: FxHashMap<(OpId, u32), usize> = (feeds.iter().enumerate())
        .map(|(index, feed)| ((feed.op, feed.output), index))
        .collect();
    let (kept, used) = prune(graph, &targets, &fed)?;

    let mut placer = Placer::new(graph, options.client.as_ref())?;
    let kept_ops: Vec<OpId> = (graph.ops().into_iter())
        .filter(|id| kept[id.index()])
        .collect();
    let mut placed = Vec::with_capacity(kept_ops.len());
    for &id in &kept_ops {
        placed.push(placer.place(id)?);
    }
    let client = placer.client().clone();
    let client_task = used
        .iter()
        .any(|&used| used)
        .then(|| placer.task_index(&client));

    // The partitions in task order: `part_of[task index]`.
    let mut order: Vec<u32> = (0..placer.tasks.len() as u32).collect();
    order.sort_by(|&a, &b| placer.tasks[a as usize].cmp(&placer.tasks[b as usize]));
    let mut part_of = vec![0usize; order.len()];
    for (part, &task) in order.iter().enumerate() {
        part_of[task as usize] = part;
    }
    // With `only`, the other parts are counted and cut but not built.
    let built = |part: usize| options.only.is_none_or(|only| only == part);
    let mut sizes = vec![0usize; order.len()];
    for placed in &placed {
        sizes[part_of[placed.task as usize]] += 1;
    }
    let mut parts: Vec<Part> = (order.iter().zip(sizes).enumerate())
        .map(|(part, (&task, size))| {
            Part::new(
                placer.tasks[task as usize].clone(),
                if built(part) { size } else { 0 },
                built(part),
            )
        })
        .collect();

    // Pass 1: every kept op in its task's graph, under its own name.
    let mut placement: Vec<Option<Placement>> = vec![None; graph.id_bound()];
    for (&id, placed) in kept_ops.iter().zip(&placed) {
        let part = part_of[placed.task as usize];
        let mut at = Placement {
            part,
            op: None,
            device: placed.device.clone(),
        };
        if !parts[part].built {
            placement[id.index()] = Some(at);
            continue;
        }
        let node = graph.op(id);
        let target = &mut parts[part].graph;
        let new = target.add_op(
            node.name.clone(),
            node.op.clone(),
            &*placed.device,
            node.attrs.clone(),
        )?;
        let mut op = target.op_mut(new);
        *op.debug_info() = node.debug_info.clone();
        *op.experimental_type() = node.experimental_type.clone();
        at.op = Some(new);
        placement[id.index()] = Some(at);
    }
    for part in &mut parts {
        part.n_original = part.graph.len();
    }

    // Pass 2: the client's receive of each fed tensor its run uses, named (in every part,
    // built or not) clear of the client's ops and of the receives named before it.
    let mut feed_recvs: Vec<Option<FeedRecv>> = vec![None; feeds.len()];
    if let Some(client_task) = client_task {
        let part = part_of[client_task as usize];
        let device = placer.device(client_task, "CPU", 0);
        let mut names: Vec<String> = Vec::new();
        for (index, feed) in feeds.iter().enumerate().filter(|(index, _)| used[*index]) {
            let node = graph.op(feed.op);
            let dtype = output_dtype(node, feed.output).ok_or(PartitionError::UnknownDtype {
                op: node.name.clone(),
                output: feed.output,
            })?;
            let taken = |name: &str| {
                taken_in(graph, &placement, part, name) || names.iter().any(|taken| taken == name)
            };
            let base = format!("_recv_{}_{}", node.name, feed.output);
            let mut name = base.clone();
            let mut suffix = 0;
            while taken(&name) {
                suffix += 1;
                name = format!("{base}_{suffix}");
            }
            names.push(name.clone());
            let mut recv = None;
            if parts[part].built {
                let tensor = format!("{}:{}", node.name, feed.output);
                let mut attrs = Attrs::new();
                attrs.insert("client_terminated", AttrValue::B(true));
                attrs.insert("recv_device", AttrValue::s(&*device));
                attrs.insert("send_device", AttrValue::s(&*device));
                attrs.insert("send_device_incarnation", AttrValue::I(INCARNATION));
                attrs.insert("tensor_name", AttrValue::s(tensor.as_str()));
                attrs.insert("tensor_type", AttrValue::Type(dtype));
                let target = &mut parts[part].graph;
                recv = Some(target.add_op(
                    name.clone(),
                    Op::Other("_Recv".into()),
                    &*device,
                    attrs,
                )?);
                parts[part].feeds.push(Feed {
                    tensor,
                    recv_op: name.clone(),
                    dtype,
                });
            }
            feed_recvs[index] = Some(FeedRecv {
                part,
                recv,
                name,
                dtype,
                device: device.clone(),
            });
        }
    }

    // Pass 3: the edges. A pair between two parts not built is only counted (its number
    // names the pairs cut after it); an edge within a part not built is skipped.
    let mut cutter = Cutter {
        source: graph,
        placement: &placement,
        next_name: 0,
        next_edge: 0,
        data: FxHashMap::default(),
        control: FxHashMap::default(),
    };
    for (&dst, placed) in kept_ops.iter().zip(&placed) {
        let Some(Placement {
            part: dst_part,
            op: dst_new,
            ..
        }) = placement[dst.index()]
        else {
            continue;
        };
        let dst_end = End {
            part: dst_part,
            name: &graph.op(dst).name,
            device: &placed.device,
        };
        for (slot, input) in graph.inputs_iter(dst) {
            let output = output_of(graph, dst, slot, &input)?;
            let node = graph.op(input.src);
            let source = match fed.get(&(input.src, output)) {
                Some(&feed) => feed_recvs[feed].as_ref().map(|recv| SourceEnd {
                    part: recv.part,
                    op: recv.recv,
                    output: 0,
                    label: &recv.name,
                    node,
                    device: &recv.device,
                    dtype: Some(recv.dtype),
                    tensor: (input.src, output),
                }),
                None => placement[input.src.index()].as_ref().map(|at| SourceEnd {
                    part: at.part,
                    op: at.op,
                    output,
                    label: &node.name,
                    node,
                    device: &at.device,
                    dtype: None,
                    tensor: (input.src, output),
                }),
            };
            // Pruning kept every input that is not fed, and every fed one has its receive.
            let Some(src_end) = source else {
                continue;
            };
            if src_end.part == dst_part {
                if let (Some(src_new), Some(dst_new)) = (src_end.op, dst_new) {
                    (parts[dst_part].graph).connect(
                        src_new,
                        Port::Index(src_end.output),
                        dst_new,
                        slot,
                    )?;
                }
                continue;
            }
            let recv = cutter.data(&mut parts, src_end, &dst_end)?;
            if let (Some(recv), Some(dst_new)) = (recv, dst_new) {
                (parts[dst_part].graph).connect(recv, Port::Index(0), dst_new, slot)?;
            }
        }
        for src in graph.control_inputs(dst) {
            let Some(at) = &placement[src.index()] else {
                continue;
            };
            if at.part == dst_part {
                if let (Some(src_new), Some(dst_new)) = (at.op, dst_new) {
                    parts[dst_part].graph.add_control(src_new, dst_new);
                }
                continue;
            }
            let src_end = SourceEnd {
                part: at.part,
                op: at.op,
                output: 0,
                label: &graph.op(src).name,
                node: graph.op(src),
                device: &at.device,
                dtype: Some(DType::Float),
                tensor: (src, 0),
            };
            let after = cutter.control(&mut parts, src_end, &dst_end)?;
            if let (Some(after), Some(dst_new)) = (after, dst_new) {
                parts[dst_part].graph.add_control(after, dst_new);
            }
        }
    }

    let partitions = (parts.into_iter())
        .map(|part| Partition {
            task: part.task,
            module: Module {
                graph: part.graph,
                versions: module.versions.clone(),
                legacy_version: module.legacy_version,
                library: module.library.clone(),
                debug_info: None,
            },
            n_original: part.n_original,
            sends: part.sends,
            recvs: part.recvs,
            feeds: part.feeds,
        })
        .collect();
    let task_of = (placement.iter())
        .map(|at| at.as_ref().map(|at| at.part))
        .collect();
    Ok(Partitions {
        client,
        partitions,
        task_of,
    })
}

/// Where a kept op of the source graph went: its part, its op there (`None` when the part
/// is not built), and the device it runs on.
#[derive(Clone)]
struct Placement {
    part: usize,
    op: Option<OpId>,
    device: Arc<str>,
}

/// Whether part `part` holds an op named `name`: a source op placed there. That is every
/// name a part can hold that a new one could meet (see [`Cutter::name`]), built or not.
fn taken_in(source: &Graph, placement: &[Option<Placement>], part: usize, name: &str) -> bool {
    (source.find(name))
        .and_then(|id| placement[id.index()].as_ref())
        .is_some_and(|at| at.part == part)
}

/// A partition being built, or only counted (`built` false: [`PartitionOptions::only`]
/// names another).
struct Part {
    task: super::Task,
    built: bool,
    graph: Graph,
    n_original: usize,
    sends: Vec<CrossEdge>,
    recvs: Vec<CrossEdge>,
    feeds: Vec<Feed>,
}

impl Part {
    /// An empty part for `task`, with room for `n_ops` ops of the source graph and their
    /// edges.
    fn new(task: super::Task, n_ops: usize, built: bool) -> Part {
        Part {
            task,
            built,
            graph: Graph::with_capacity(n_ops, 2 * n_ops),
            n_original: 0,
            sends: Vec::new(),
            recvs: Vec::new(),
            feeds: Vec::new(),
        }
    }
}

/// The client's receive of a fed tensor: its part, the op when the part is built, its name,
/// dtype and device.
#[derive(Clone)]
struct FeedRecv {
    part: usize,
    recv: Option<OpId>,
    name: String,
    dtype: DType,
    device: Arc<str>,
}

/// The source of an edge that crosses parts.
struct SourceEnd<'a> {
    part: usize,
    /// The op in its part (`None` when the part is not built) and the output read.
    op: Option<OpId>,
    output: u32,
    /// The name the pair is labelled with: the op's, or the fed tensor's receive's.
    label: &'a str,
    /// The source graph's op, whose output's dtype is sent unless `dtype` is given.
    node: &'a OpNode,
    /// The device the source runs on.
    device: &'a Arc<str>,
    dtype: Option<DType>,
    /// The tensor in the source graph (op, output): one pair per tensor and part.
    tensor: (OpId, u32),
}

/// The destination of an edge that crosses parts.
struct End<'a> {
    part: usize,
    name: &'a str,
    device: &'a Arc<str>,
}

/// A fed tensor, resolved.
struct FedTensor {
    op: OpId,
    output: u32,
}

/// The ops the targets name; every op when there are none.
fn targets(graph: &Graph, options: &PartitionOptions) -> Result<Vec<OpId>, PartitionError> {
    if options.targets.is_empty() {
        return Ok(graph.ops());
    }
    (options.targets.iter())
        .map(|name| {
            // A fetched tensor (`op:0`) runs its op.
            let op = TensorName::parse(name).map_or(name.as_str(), |tensor| tensor.op);
            graph
                .find(op)
                .ok_or_else(|| PartitionError::MissingTarget { name: name.clone() })
        })
        .collect()
}

/// The fed tensors, resolved in the order given.
fn feeds(graph: &Graph, options: &PartitionOptions) -> Result<Vec<FedTensor>, PartitionError> {
    (options.feeds.iter())
        .map(|tensor| {
            let missing = || PartitionError::MissingFeed {
                tensor: tensor.clone(),
            };
            let name = TensorName::parse(tensor).map_err(|_| missing())?;
            let op = graph.find(name.op).ok_or_else(missing)?;
            let output = flat_output(graph.op(op), &name.port()).map_err(|_| missing())?;
            Ok(FedTensor { op, output })
        })
        .collect()
}

/// The flat output input `slot` of `dst` reads.
fn output_of(
    graph: &Graph,
    dst: OpId,
    slot: u32,
    input: &saveplan_ir::Input,
) -> Result<u32, PartitionError> {
    flat_output(graph.op(input.src), &input.output).map_err(|_| PartitionError::BadPort {
        op: graph.op(dst).name.clone(),
        input: slot,
    })
}

/// The ops `targets` need (per op index), and which feeds they read: a walk up data and
/// control inputs that stops at fed tensors.
fn prune(
    graph: &Graph,
    targets: &[OpId],
    fed: &FxHashMap<(OpId, u32), usize>,
) -> Result<(Vec<bool>, Vec<bool>), PartitionError> {
    let mut kept = vec![false; graph.id_bound()];
    let mut used = vec![false; fed.len()];
    let mut stack: Vec<OpId> = targets.to_vec();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut kept[id.index()], true) {
            continue;
        }
        for (slot, input) in graph.inputs_iter(id) {
            let output = output_of(graph, id, slot, &input)?;
            match fed.get(&(input.src, output)) {
                Some(&feed) => used[feed] = true,
                None => stack.push(input.src),
            }
        }
        stack.extend(graph.control_inputs(id));
    }
    Ok((kept, used))
}

/// The pairs cut so far, and the counters that name them.
struct Cutter<'g> {
    /// The source graph, and where each of its kept ops went.
    source: &'g Graph,
    placement: &'g [Option<Placement>],
    /// The `<n>` of the next added op's name (`<op>_S<n>`).
    next_name: u64,
    /// The `<n>` of the next edge's `tensor_name` (`edge_<n>_<op>`).
    next_edge: u64,
    /// The receive of each tensor already sent: (source op, output, destination part).
    data: FxHashMap<(OpId, u32, usize), Option<OpId>>,
    /// The `Identity` after each control edge already cut: (source op, destination part).
    control: FxHashMap<(OpId, usize), Option<OpId>>,
}

impl Cutter<'_> {
    /// A fresh name `<base><infix><n>` in part `part`: clear of the source graph's ops placed
    /// there. That is every name the part can hold: the added ops' names end in `S<n>`
    /// (`n` unique) and the feeds' receives' in `_<output>`, so they never meet. A part not
    /// built gets the name it would have had.
    fn name(&mut self, part: usize, base: &str, infix: &str) -> String {
        loop {
            let name = format!("{base}{infix}{}", self.next_name);
            self.next_name += 1;
            if !taken_in(self.source, self.placement, part, &name) {
                return name;
            }
        }
    }

    /// The receive, in the destination's part, of the tensor `src` names (`None` when that
    /// part is not built).
    fn data(
        &mut self,
        parts: &mut [Part],
        src: SourceEnd<'_>,
        dst: &End<'_>,
    ) -> Result<Option<OpId>, PartitionError> {
        let key = (src.tensor.0, src.tensor.1, dst.part);
        if let Some(&recv) = self.data.get(&key) {
            return Ok(recv);
        }
        let dtype = match src.dtype {
            Some(dtype) => dtype,
            None => output_dtype(src.node, src.tensor.1).ok_or_else(|| {
                PartitionError::UnknownDtype {
                    op: src.label.to_owned(),
                    output: src.tensor.1,
                }
            })?,
        };
        let kind = CrossKind::Data {
            op: src.label.to_owned(),
            output: src.output,
        };
        let from = (src.part, src.op, src.output, src.device);
        let recv = self.pair(parts, from, src.label, dtype, kind, dst)?;
        self.data.insert(key, recv);
        Ok(recv)
    }

    /// The op, in the destination's part, that runs once `src` has run: the `Identity` of
    /// the received dummy constant (`None` when that part is not built).
    fn control(
        &mut self,
        parts: &mut [Part],
        src: SourceEnd<'_>,
        dst: &End<'_>,
    ) -> Result<Option<OpId>, PartitionError> {
        let key = (src.tensor.0, dst.part);
        if let Some(&after) = self.control.get(&key) {
            return Ok(after);
        }
        let name = src.label;
        let dummy_name = self.name(src.part, name, "/ctrl_S");
        let mut dummy = None;
        let device = src.device;
        if let Some(op) = src.op {
            let mut attrs = Attrs::new();
            attrs.insert("dtype", AttrValue::Type(DType::Float));
            attrs.insert(
                "value",
                AttrValue::Tensor(Box::new(Tensor {
                    dtype: DType::Float,
                    shape: Some(Shape::from_dims(&[0])),
                    version_number: 0,
                    values: TensorValues::Empty,
                })),
            );
            let source = &mut parts[src.part].graph;
            let new = source.add_op(dummy_name, Op::Const, &**device, attrs)?;
            source.add_control(op, new);
            dummy = Some(new);
        }
        let kind = CrossKind::Control {
            op: name.to_owned(),
        };
        let from = (src.part, dummy, 0, device);
        let recv = self.pair(parts, from, name, DType::Float, kind, dst)?;
        let identity_name = self.name(dst.part, name, "_S");
        let mut identity = None;
        if let Some(recv) = recv {
            let target = &mut parts[dst.part].graph;
            let device = target.op(recv).device.clone();
            let mut attrs = Attrs::new();
            attrs.insert("T", AttrValue::Type(DType::Float));
            let new = target.add_op(identity_name, Op::Identity, &*device, attrs)?;
            target.push_input(new, recv, Port::Index(0));
            identity = Some(new);
        }
        self.control.insert(key, identity);
        Ok(identity)
    }

    /// Cuts one pair: a send of output `output` of `from` (named after the op `label`) in
    /// the source part, its receive in the destination part; returns the receive. Either
    /// op is added only if its part is built; the pair is counted either way.
    fn pair(
        &mut self,
        parts: &mut [Part],
        (src_part, from, output, send_device): (usize, Option<OpId>, u32, &Arc<str>),
        label: &str,
        dtype: DType,
        kind: CrossKind,
        dst: &End<'_>,
    ) -> Result<Option<OpId>, PartitionError> {
        let host_memory = in_host_memory(dtype);
        let (send_type, recv_type) = match host_memory {
            true => ("_HostSend", "_HostRecv"),
            false => ("_Send", "_Recv"),
        };
        let tensor_name = format!("edge_{}_{label}", self.next_edge);
        self.next_edge += 1;
        let send_op = self.name(src_part, label, "_S");
        let recv_op = self.name(dst.part, label, "_S");
        let (src_built, dst_built) = (parts[src_part].built, parts[dst.part].built);
        if !src_built && !dst_built {
            return Ok(None);
        }
        let recv_device = dst.device;
        let mut common = Attrs::new();
        common.insert("_dst", AttrValue::s(dst.name));
        common.insert("_src", AttrValue::s(label));
        common.insert("client_terminated", AttrValue::B(false));
        common.insert("recv_device", AttrValue::s(&**recv_device));
        common.insert("send_device", AttrValue::s(&**send_device));
        common.insert("send_device_incarnation", AttrValue::I(INCARNATION));
        common.insert("tensor_name", AttrValue::s(tensor_name.as_str()));

        if let Some(from) = from.filter(|_| src_built) {
            let mut send_attrs = common.clone();
            send_attrs.insert("T", AttrValue::Type(dtype));
            let source = &mut parts[src_part].graph;
            let send = source.add_op(
                send_op.clone(),
                Op::Other(send_type.into()),
                &**send_device,
                send_attrs,
            )?;
            source.push_input(send, from, Port::Index(output));
        }
        let mut recv = None;
        if dst_built {
            let mut recv_attrs = common;
            recv_attrs.insert("tensor_type", AttrValue::Type(dtype));
            let target = &mut parts[dst.part].graph;
            recv = Some(target.add_op(
                recv_op.clone(),
                Op::Other(recv_type.into()),
                &**recv_device,
                recv_attrs,
            )?);
        }

        let edge = CrossEdge {
            tensor_name,
            kind,
            src: parts[src_part].task.clone(),
            dst: parts[dst.part].task.clone(),
            send_device: send_device.to_string(),
            recv_device: recv_device.to_string(),
            send_op,
            recv_op,
            dtype,
            host_memory,
        };
        if dst_built {
            parts[dst.part].recvs.push(edge.clone());
        }
        if src_built {
            parts[src_part].sends.push(edge);
        }
        Ok(recv)
    }
}
