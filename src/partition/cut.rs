//! Pruning a graph to one run, and cutting it into per-task modules with a send/receive pair
//! on every edge between tasks.
//!
//! Three passes over the kept ops, in the source graph's creation order: place each op and
//! add it to its task's graph; add the client's receive of each fed tensor; wire every data
//! and control input, within a task as it was, across tasks through the pair cut for it (one
//! pair per tensor and receiving task, one per op and receiving task for control edges).

use rustc_hash::FxHashMap;
use saveplan_ir::signature::flat_output;
use saveplan_ir::{
    AttrValue, Attrs, DType, Graph, Module, Op, OpId, Port, Shape, Tensor, TensorName, TensorValues,
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
    let mut sizes = vec![0usize; order.len()];
    for placed in &placed {
        sizes[part_of[placed.task as usize]] += 1;
    }
    let mut parts: Vec<Part> = (order.iter().zip(sizes))
        .map(|(&task, size)| Part::new(placer.tasks[task as usize].clone(), size))
        .collect();

    // Pass 1: every kept op in its task's graph, under its own name.
    let mut new_ids: Vec<Option<(usize, OpId)>> = vec![None; graph.id_bound()];
    for (&id, placed) in kept_ops.iter().zip(&placed) {
        let node = graph.op(id);
        let part = part_of[placed.task as usize];
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
        new_ids[id.index()] = Some((part, new));
    }
    for part in &mut parts {
        part.n_original = part.graph.len();
    }

    // Pass 2: the client's receive of each fed tensor its run uses.
    let mut feed_recvs: Vec<Option<(usize, OpId)>> = vec![None; feeds.len()];
    if let Some(client_task) = client_task {
        let part = part_of[client_task as usize];
        let device = placer.device(client_task, "CPU", 0);
        for (index, feed) in feeds.iter().enumerate().filter(|(index, _)| used[*index]) {
            let node = graph.op(feed.op);
            let dtype = output_dtype(node, feed.output).ok_or(PartitionError::UnknownDtype {
                op: node.name.clone(),
                output: feed.output,
            })?;
            let tensor = format!("{}:{}", node.name, feed.output);
            let mut attrs = Attrs::new();
            attrs.insert("client_terminated", AttrValue::B(true));
            attrs.insert("recv_device", AttrValue::s(&*device));
            attrs.insert("send_device", AttrValue::s(&*device));
            attrs.insert("send_device_incarnation", AttrValue::I(INCARNATION));
            attrs.insert("tensor_name", AttrValue::s(tensor.as_str()));
            attrs.insert("tensor_type", AttrValue::Type(dtype));
            let target = &mut parts[part].graph;
            let name = target.unused_name(&format!("_recv_{}_{}", node.name, feed.output));
            let recv = target.add_op(name.clone(), Op::Other("_Recv".into()), &*device, attrs)?;
            parts[part].feeds.push(Feed {
                tensor,
                recv_op: name,
                dtype,
            });
            feed_recvs[index] = Some((part, recv));
        }
    }

    // Pass 3: the edges.
    let mut cutter = Cutter::default();
    for &dst in &kept_ops {
        let Some((dst_part, dst_new)) = new_ids[dst.index()] else {
            continue;
        };
        for (slot, input) in graph.inputs_iter(dst) {
            let output = output_of(graph, dst, slot, &input)?;
            let source = match fed.get(&(input.src, output)) {
                Some(&feed) => feed_recvs[feed].map(|(part, recv)| (part, recv, 0)),
                None => new_ids[input.src.index()].map(|(part, new)| (part, new, output)),
            };
            // Pruning kept every input that is not fed, and every fed one has its receive.
            let Some((src_part, src_new, output)) = source else {
                continue;
            };
            if src_part == dst_part {
                parts[dst_part]
                    .graph
                    .connect(src_new, Port::Index(output), dst_new, slot)?;
            } else {
                let recv =
                    cutter.data(&mut parts, (src_part, src_new, output), (dst_part, dst_new))?;
                parts[dst_part]
                    .graph
                    .connect(recv, Port::Index(0), dst_new, slot)?;
            }
        }
        for src in graph.control_inputs(dst) {
            let Some((src_part, src_new)) = new_ids[src.index()] else {
                continue;
            };
            if src_part == dst_part {
                parts[dst_part].graph.add_control(src_new, dst_new);
            } else {
                let after = cutter.control(&mut parts, (src_part, src_new), (dst_part, dst_new))?;
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
    Ok(Partitions { client, partitions })
}

/// A partition being built.
struct Part {
    task: super::Task,
    graph: Graph,
    n_original: usize,
    sends: Vec<CrossEdge>,
    recvs: Vec<CrossEdge>,
    feeds: Vec<Feed>,
}

impl Part {
    /// An empty part for `task`, with room for `n_ops` ops of the source graph and their
    /// edges.
    fn new(task: super::Task, n_ops: usize) -> Part {
        Part {
            task,
            graph: Graph::with_capacity(n_ops, 2 * n_ops),
            n_original: 0,
            sends: Vec::new(),
            recvs: Vec::new(),
            feeds: Vec::new(),
        }
    }
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
#[derive(Default)]
struct Cutter {
    /// The `<n>` of the next added op's name (`<op>_S<n>`).
    next_name: u64,
    /// The `<n>` of the next edge's `tensor_name` (`edge_<n>_<op>`).
    next_edge: u64,
    /// The receive of each tensor already sent: (source part, op, output, destination part).
    data: FxHashMap<(usize, OpId, u32, usize), OpId>,
    /// The `Identity` after each control edge already cut: (source part, op, destination part).
    control: FxHashMap<(usize, OpId, usize), OpId>,
}

impl Cutter {
    /// A fresh name `<base><infix><n>` in `graph`.
    fn name(&mut self, graph: &Graph, base: &str, infix: &str) -> String {
        loop {
            let name = format!("{base}{infix}{}", self.next_name);
            self.next_name += 1;
            if graph.find(&name).is_none() {
                return name;
            }
        }
    }

    /// The receive, in the destination's part, of output `output` of `src`.
    fn data(
        &mut self,
        parts: &mut [Part],
        (src_part, src, output): (usize, OpId, u32),
        (dst_part, dst): (usize, OpId),
    ) -> Result<OpId, PartitionError> {
        if let Some(&recv) = self.data.get(&(src_part, src, output, dst_part)) {
            return Ok(recv);
        }
        let node = parts[src_part].graph.op(src);
        let dtype = output_dtype(node, output).ok_or_else(|| PartitionError::UnknownDtype {
            op: node.name.clone(),
            output,
        })?;
        let name = node.name.clone();
        let kind = CrossKind::Data {
            op: name.clone(),
            output,
        };
        let recv = self.pair(
            parts,
            (src_part, src, output),
            &name,
            dtype,
            kind,
            (dst_part, dst),
        )?;
        self.data.insert((src_part, src, output, dst_part), recv);
        Ok(recv)
    }

    /// The op, in the destination's part, that runs once `src` has run: the `Identity` of
    /// the received dummy constant.
    fn control(
        &mut self,
        parts: &mut [Part],
        (src_part, src): (usize, OpId),
        (dst_part, dst): (usize, OpId),
    ) -> Result<OpId, PartitionError> {
        if let Some(&after) = self.control.get(&(src_part, src, dst_part)) {
            return Ok(after);
        }
        let source = &mut parts[src_part].graph;
        let node = source.op(src);
        let name = node.name.clone();
        let device = node.device.clone();
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
        let dummy_name = self.name(source, &name, "/ctrl_S");
        let dummy = source.add_op(dummy_name, Op::Const, &*device, attrs)?;
        source.add_control(src, dummy);
        let kind = CrossKind::Control { op: name.clone() };
        let recv = self.pair(
            parts,
            (src_part, dummy, 0),
            &name,
            DType::Float,
            kind,
            (dst_part, dst),
        )?;
        let target = &mut parts[dst_part].graph;
        let device = target.op(recv).device.clone();
        let mut attrs = Attrs::new();
        attrs.insert("T", AttrValue::Type(DType::Float));
        let identity_name = self.name(target, &name, "_S");
        let identity = target.add_op(identity_name, Op::Identity, &*device, attrs)?;
        target.push_input(identity, recv, Port::Index(0));
        self.control.insert((src_part, src, dst_part), identity);
        Ok(identity)
    }

    /// Cuts one pair: a send of output `output` of `from` (named after the op `label`) in
    /// the source part, its receive in the destination part; returns the receive.
    fn pair(
        &mut self,
        parts: &mut [Part],
        (src_part, from, output): (usize, OpId, u32),
        label: &str,
        dtype: DType,
        kind: CrossKind,
        (dst_part, dst): (usize, OpId),
    ) -> Result<OpId, PartitionError> {
        let host_memory = in_host_memory(dtype);
        let (send_type, recv_type) = match host_memory {
            true => ("_HostSend", "_HostRecv"),
            false => ("_Send", "_Recv"),
        };
        let tensor_name = format!("edge_{}_{label}", self.next_edge);
        self.next_edge += 1;
        let send_device = parts[src_part].graph.op(from).device.clone();
        let dst_node = parts[dst_part].graph.op(dst);
        let recv_device = dst_node.device.clone();
        let dst_name = dst_node.name.clone();
        let mut common = Attrs::new();
        common.insert("_dst", AttrValue::s(dst_name.as_str()));
        common.insert("_src", AttrValue::s(label));
        common.insert("client_terminated", AttrValue::B(false));
        common.insert("recv_device", AttrValue::s(&*recv_device));
        common.insert("send_device", AttrValue::s(&*send_device));
        common.insert("send_device_incarnation", AttrValue::I(INCARNATION));
        common.insert("tensor_name", AttrValue::s(tensor_name.as_str()));

        let mut send_attrs = common.clone();
        send_attrs.insert("T", AttrValue::Type(dtype));
        let source = &mut parts[src_part].graph;
        let send_op = self.name(source, label, "_S");
        let send = source.add_op(
            send_op.clone(),
            Op::Other(send_type.into()),
            &*send_device,
            send_attrs,
        )?;
        source.push_input(send, from, Port::Index(output));

        let mut recv_attrs = common;
        recv_attrs.insert("tensor_type", AttrValue::Type(dtype));
        let target = &mut parts[dst_part].graph;
        let recv_op = self.name(target, label, "_S");
        let recv = target.add_op(
            recv_op.clone(),
            Op::Other(recv_type.into()),
            &*recv_device,
            recv_attrs,
        )?;

        let edge = CrossEdge {
            tensor_name,
            kind,
            src: parts[src_part].task.clone(),
            dst: parts[dst_part].task.clone(),
            send_device: send_device.to_string(),
            recv_device: recv_device.to_string(),
            send_op,
            recv_op,
            dtype,
            host_memory,
        };
        parts[dst_part].recvs.push(edge.clone());
        parts[src_part].sends.push(edge);
        Ok(recv)
    }
}
