//! [`Graph`]: ops and the data and control edges between them, wrapped around petgraph.

use std::collections::{BTreeSet, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use petgraph::Direction;
use petgraph::stable_graph::{EdgeIndex, NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};

use crate::{Attrs, Op};

/// An op in a [`Graph`]. Valid for the graph that created it, across removals of other ops.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct OpId(NodeIndex<u32>);

impl OpId {
    /// A small number identifying the op in its graph, below [`Graph::id_bound`]: an index
    /// for tables kept beside a graph (a removed op's number can be reused).
    pub fn index(self) -> usize {
        self.0.index()
    }

    /// The id at `index` (only [`crate::edits::Edits`] makes ids ahead of their ops).
    pub(crate) fn from_index(index: usize) -> OpId {
        OpId(NodeIndex::new(index))
    }
}

/// One op: its unique name, kind, requested device and attributes.
#[derive(Clone, PartialEq, Debug)]
pub struct OpNode {
    /// The TensorFlow node name; unique within its graph. It is the op's identity in
    /// GraphDef, text form and error messages.
    pub name: String,
    /// The op kind.
    pub op: Op,
    /// The requested device exactly as written (`/job:worker/task:1/device:CPU:0`, `""`).
    /// Parse it with [`crate::device::DeviceSpec`] for its meaning. Shared: a graph stores
    /// each distinct device string once, however many ops name it.
    pub device: Arc<str>,
    /// The attributes, the single source of truth for the op's parameters.
    pub attrs: Attrs,
    /// `NodeDef.experimental_debug_info`, kept for round trips (boxed: only imported ops
    /// have it, and every op pays for the field).
    pub debug_info: Option<Box<NodeDebugInfo>>,
    /// `NodeDef.experimental_type` as encoded protobuf bytes, kept for round trips.
    pub experimental_type: Option<Box<[u8]>>,
    /// Creation order; orders ops deterministically whatever petgraph does with indices.
    seq: u32,
}

/// `NodeDef.ExperimentalDebugInfo`.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct NodeDebugInfo {
    /// Names of the nodes this one was made from.
    pub original_node_names: Vec<String>,
    /// Names of the functions those nodes were in.
    pub original_func_names: Vec<String>,
}

/// Which output of a source op an edge carries.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Port {
    /// The flat output index (`node:1` in a GraphDef; `node` means index 0).
    Index(u32),
    /// An output argument and an index into it (`node:tensors:1` in a FunctionDef body), kept
    /// only for ops whose signature the IR does not know; known ops are normalized to
    /// [`Port::Index`].
    Named {
        /// The output argument name.
        arg: String,
        /// The index within that argument.
        index: u32,
    },
}

/// An edge of the graph, from producer to consumer.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Edge {
    /// Output `output` of the source is data input `input` of the destination.
    Data {
        /// The source's output.
        output: Port,
        /// The destination's input slot (0-based, dense).
        input: u32,
    },
    /// The destination runs after the source. `order` keeps the control inputs in the order
    /// they were written.
    Control {
        /// Position among the destination's control inputs.
        order: u32,
    },
}

/// A data input as its consumer sees it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Input {
    /// The producing op.
    pub src: OpId,
    /// Which of its outputs.
    pub output: Port,
}

/// Errors from mutating a [`Graph`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// An op with this name already exists.
    #[error("an op named `{name}` already exists")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// The input slot is already connected.
    #[error("input {input} of `{name}` is already connected")]
    InputTaken {
        /// The consumer's name.
        name: String,
        /// The slot.
        input: u32,
    },
    /// Recorded edits ([`crate::edits::Edits`]) expect another id for an op than the graph
    /// gives it: they were recorded for another graph, or are applied out of order.
    #[error("the recorded op `{name}` does not follow the graph's last op")]
    StaleEdit {
        /// The op's name.
        name: String,
    },
}

/// A directed graph of ops. Names are unique; all mutation goes through its methods.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    inner: StableDiGraph<OpNode, Edge, u32>,
    /// The ops by name. The table holds only ids and compares names in the nodes, so every
    /// name is stored once.
    by_name: HashTable<OpId>,
    next_seq: u32,
    /// Per node index, the `order` of the next control input, so that appending a control
    /// input is O(1) (ops such as a function's final `NoOp` collect one per stateful op).
    /// Orders only grow, so removed control edges leave gaps but never duplicates.
    next_control: Vec<u32>,
    /// Every device string ops of this graph have named, each stored once. Never iterated.
    devices: HashSet<Arc<str>, FxBuildHasher>,
    /// Per node index, the edge of each data input slot ([`vacant`] where none is
    /// connected), without trailing vacancies: finding, counting and checking one input is
    /// O(1), so an op with N inputs (a `SaveV2` of N tensors) costs O(N) to build and read.
    /// Most ops have a few inputs: those are kept inline, with no allocation of their own.
    data_inputs: Vec<InputSlots>,
    /// Whether an op was ever removed. Until one is, every index below the bound holds an op
    /// and index order is creation order (petgraph hands a removed op's index to the next op
    /// added), so [`Graph::ops`] lists the indices without reading or sorting any op.
    removed_any: bool,
    /// Debug builds only: how many edges walks over an op's edges have visited
    /// ([`Graph::edges_visited`]).
    #[cfg(debug_assertions)]
    visited: Arc<std::sync::atomic::AtomicU64>,
}

/// Where the next of a run of names met in order probably is, for [`Graph::find_near`]: the
/// last one's index plus the step between the last two, then the last one again. A plan makes
/// the ops of such runs at a steady stride (a `SaveV2`'s tensors, a restore's assigns).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stride {
    /// The index of the last op found, and its distance from the one before.
    last: Option<(usize, isize)>,
}

impl Stride {
    /// The indices to look at first for the next name.
    pub fn guesses(&self) -> impl Iterator<Item = usize> + use<> {
        self.last
            .into_iter()
            .flat_map(|(last, step)| last.checked_add_signed(step).into_iter().chain([last]))
    }

    /// Takes `found` as the last op of the run.
    pub fn record(&mut self, found: OpId) {
        let index = found.index();
        let step = self
            .last
            .map_or(0, |(last, _)| index as isize - last as isize);
        self.last = Some((index, step));
    }
}

/// The data input edges of one op (see `Graph::data_inputs`).
type InputSlots = SmallVec<[EdgeIndex<u32>; 4]>;

/// The mark of a data input slot with no edge in [`Graph::data_inputs`].
fn vacant() -> EdgeIndex<u32> {
    EdgeIndex::end()
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// An empty graph with room for `n_ops` ops and `n_edges` edges.
    pub fn with_capacity(n_ops: usize, n_edges: usize) -> Graph {
        Graph {
            inner: StableDiGraph::with_capacity(n_ops, n_edges),
            by_name: HashTable::with_capacity(n_ops),
            next_seq: 0,
            next_control: Vec::with_capacity(n_ops),
            devices: HashSet::default(),
            data_inputs: Vec::with_capacity(n_ops),
            removed_any: false,
            #[cfg(debug_assertions)]
            visited: Arc::default(),
        }
    }

    /// Makes room for `n_ops` more ops and `n_edges` more edges.
    pub fn reserve(&mut self, n_ops: usize, n_edges: usize) {
        self.inner.reserve_nodes(n_ops);
        self.inner.reserve_edges(n_edges);
        let inner = &self.inner;
        self.by_name
            .reserve(n_ops, |&other| name_hash(&inner[other.0].name));
    }

    /// Adds an op; fails if the name is taken.
    pub fn add_op(
        &mut self,
        name: impl Into<String>,
        op: Op,
        device: impl AsRef<str>,
        attrs: Attrs,
    ) -> Result<OpId, GraphError> {
        let name = name.into();
        let hash = name_hash(&name);
        if self
            .by_name
            .find(hash, |&id| self.inner[id.0].name == name)
            .is_some()
        {
            return Err(GraphError::DuplicateName { name });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let node = OpNode {
            name,
            op,
            device: self.intern_device(device.as_ref()),
            attrs,
            debug_info: None,
            experimental_type: None,
            seq,
        };
        let id = OpId(self.inner.add_node(node));
        let inner = &self.inner;
        self.by_name
            .insert_unique(hash, id, |&other| name_hash(&inner[other.0].name));
        Ok(id)
    }

    /// The shared copy of `device` (see [`OpNode::device`]).
    pub fn intern_device(&mut self, device: &str) -> Arc<str> {
        if let Some(shared) = self.devices.get(device) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(device);
        self.devices.insert(Arc::clone(&shared));
        shared
    }

    /// The op with this id. Panics if `id` was removed (a bug in the caller).
    pub fn op(&self, id: OpId) -> &OpNode {
        &self.inner[id.0]
    }

    /// Mutable access to an op. Rename with [`Graph::rename`], not through this.
    pub fn op_mut(&mut self, id: OpId) -> OpMut<'_> {
        OpMut {
            node: &mut self.inner[id.0],
        }
    }

    /// The op with this name.
    pub fn find(&self, name: &str) -> Option<OpId> {
        self.by_name
            .find(name_hash(name), |&id| self.inner[id.0].name == name)
            .copied()
    }

    /// `base` if no op has that name, else the first free of `base_1`, `base_2`, … (how TF
    /// names an op whose name is taken).
    pub fn unused_name(&self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut suffix = 0;
        while self.find(&name).is_some() {
            suffix += 1;
            name = format!("{base}_{suffix}");
        }
        name
    }

    /// [`Graph::find`], looking first at the indices `guesses` ([`OpId::index`]), in turn,
    /// where the caller expects the op (names met in order, [`Stride`]): a read of one op
    /// instead of the name index's cache misses when a guess is right. A guess counts only
    /// when the op there has the very name, so the answer is always the index's.
    pub fn find_near(&self, name: &str, guesses: impl IntoIterator<Item = usize>) -> Option<OpId> {
        guesses
            .into_iter()
            .find_map(|index| self.op_at(index).filter(|id| self.inner[id.0].name == name))
            .or_else(|| self.find(name))
    }

    /// The op at `index` ([`OpId::index`]), if one is there.
    pub fn op_at(&self, index: usize) -> Option<OpId> {
        (index < self.inner.node_bound())
            .then(|| OpId::from_index(index))
            .filter(|id| self.inner.contains_node(id.0))
    }

    /// Whether `id` names an op of this graph.
    pub fn contains(&self, id: OpId) -> bool {
        self.inner.contains_node(id.0)
    }

    /// The number of ops.
    pub fn len(&self) -> usize {
        self.inner.node_count()
    }

    /// One more than the largest [`OpId::index`] in use: the size of a table indexed by op.
    pub fn id_bound(&self) -> usize {
        self.inner.node_bound()
    }

    /// Whether the graph has no ops.
    pub fn is_empty(&self) -> bool {
        self.inner.node_count() == 0
    }

    /// All ops in creation order.
    pub fn ops(&self) -> Vec<OpId> {
        if !self.removed_any {
            return (0..self.inner.node_bound())
                .map(|index| OpId(NodeIndex::new(index)))
                .collect();
        }
        let mut ids: Vec<OpId> = self.inner.node_indices().map(OpId).collect();
        ids.sort_by_key(|id| self.inner[id.0].seq);
        ids
    }

    /// The creation sequence number of an op (stable across removals of other ops).
    pub fn seq(&self, id: OpId) -> u32 {
        self.inner[id.0].seq
    }

    /// Connects output `output` of `src` to input slot `input` of `dst`.
    pub fn connect(
        &mut self,
        src: OpId,
        output: Port,
        dst: OpId,
        input: u32,
    ) -> Result<(), GraphError> {
        if self.input_edge(dst, input).is_some() {
            let name = self.op(dst).name.clone();
            return Err(GraphError::InputTaken { name, input });
        }
        let edge = self
            .inner
            .add_edge(src.0, dst.0, Edge::Data { output, input });
        self.set_input_edge(dst, input, edge);
        Ok(())
    }

    /// The edge connected to data input `slot` of `id`, if any.
    fn input_edge(&self, id: OpId, slot: u32) -> Option<EdgeIndex<u32>> {
        let edge = *self.data_inputs.get(id.0.index())?.get(slot as usize)?;
        (edge != vacant()).then_some(edge)
    }

    /// Records `edge` (or [`vacant`]) as data input `slot` of `id`, keeping no trailing
    /// vacancy.
    fn set_input_edge(&mut self, id: OpId, slot: u32, edge: EdgeIndex<u32>) {
        let index = id.0.index();
        if self.data_inputs.len() <= index {
            self.data_inputs.resize_with(index + 1, InputSlots::new);
        }
        let slots = &mut self.data_inputs[index];
        let slot = slot as usize;
        if slots.len() <= slot {
            if edge == vacant() {
                return;
            }
            slots.resize(slot + 1, vacant());
        }
        slots[slot] = edge;
        while slots.last() == Some(&vacant()) {
            slots.pop();
        }
    }

    /// Appends a data input to `dst` (the next free slot) and returns its slot.
    pub fn push_input(&mut self, dst: OpId, src: OpId, output: Port) -> u32 {
        let input = self.num_inputs(dst);
        let edge = self
            .inner
            .add_edge(src.0, dst.0, Edge::Data { output, input });
        self.set_input_edge(dst, input, edge);
        input
    }

    /// Appends data inputs to `dst` in order, from its next free slot on, and returns the
    /// first slot used. Linear in the number of inputs, as repeated [`Graph::push_input`]
    /// calls are.
    pub fn push_inputs(
        &mut self,
        dst: OpId,
        inputs: impl IntoIterator<Item = (OpId, Port)>,
    ) -> u32 {
        let first = self.num_inputs(dst);
        for (input, (src, output)) in (first..).zip(inputs) {
            let edge = self
                .inner
                .add_edge(src.0, dst.0, Edge::Data { output, input });
            self.set_input_edge(dst, input, edge);
        }
        first
    }

    /// Appends a control input: `dst` runs after `src`.
    pub fn add_control(&mut self, src: OpId, dst: OpId) {
        let slot = dst.0.index();
        if self.next_control.len() <= slot {
            self.next_control.resize(slot + 1, 0);
        }
        let order = self.next_control[slot];
        self.next_control[slot] += 1;
        self.inner.add_edge(src.0, dst.0, Edge::Control { order });
    }

    /// The number of data inputs of an op (one past its highest connected slot). O(1).
    pub fn num_inputs(&self, id: OpId) -> u32 {
        self.data_inputs
            .get(id.0.index())
            .map_or(0, |slots| slots.len() as u32)
    }

    /// The data inputs of an op, by slot. Slots are dense in a verified graph. Linear in the
    /// op's data inputs.
    pub fn inputs(&self, id: OpId) -> Vec<(u32, Input)> {
        self.inputs_iter(id).collect()
    }

    /// [`Graph::inputs`] without collecting them: walks the op's data inputs by slot, for
    /// callers that visit every op and should not allocate per op.
    pub fn inputs_iter(&self, id: OpId) -> impl Iterator<Item = (u32, Input)> + '_ {
        let slots = self
            .data_inputs
            .get(id.0.index())
            .map_or(&[][..], InputSlots::as_slice);
        (0u32..)
            .zip(slots)
            .filter(|(_, edge)| **edge != vacant())
            .filter_map(|(slot, &edge)| Some((slot, self.input_of_edge(edge)?)))
    }

    /// The data input of an op at `slot`, if it is connected. O(1), so reading one input of
    /// an op with many is cheap.
    pub fn input_at(&self, id: OpId, slot: u32) -> Option<Input> {
        self.input_of_edge(self.input_edge(id, slot)?)
    }

    /// The data input a data edge carries.
    fn input_of_edge(&self, edge: EdgeIndex<u32>) -> Option<Input> {
        let (src, _) = self.inner.edge_endpoints(edge)?;
        match self.inner.edge_weight(edge)? {
            Edge::Data { output, .. } => Some(Input {
                src: OpId(src),
                output: output.clone(),
            }),
            Edge::Control { .. } => None,
        }
    }

    /// The ops `roots` depend on through data and control inputs, roots included.
    pub fn ancestors(&self, roots: impl IntoIterator<Item = OpId>) -> BTreeSet<OpId> {
        let mut seen = vec![false; self.inner.node_bound()];
        let mut found = Vec::new();
        let mut work: Vec<OpId> = roots.into_iter().collect();
        while let Some(id) = work.pop() {
            if !std::mem::replace(&mut seen[id.0.index()], true) {
                found.push(id);
                work.extend(self.inputs_raw(id).map(|(src, _)| src));
            }
        }
        // Sorted first, so the set is built in bulk.
        found.sort_unstable();
        found.into_iter().collect()
    }

    /// The control inputs of an op, in the order they were added.
    pub fn control_inputs(&self, id: OpId) -> Vec<OpId> {
        // An op never given a control input has none: most ops, whose edges need no walk.
        if self
            .next_control
            .get(id.0.index())
            .is_none_or(|&next| next == 0)
        {
            return Vec::new();
        }
        let mut controls: Vec<(u32, OpId)> = self
            .inputs_raw(id)
            .filter_map(|(src, edge)| match edge {
                Edge::Control { order } => Some((*order, src)),
                Edge::Data { .. } => None,
            })
            .collect();
        controls.sort_by_key(|(order, _)| *order);
        controls.into_iter().map(|(_, src)| src).collect()
    }

    /// Every op that uses `id` (data or control), with the edge, in creation order of the users.
    pub fn users(&self, id: OpId) -> Vec<(OpId, Edge)> {
        let mut users: Vec<(OpId, Edge)> = self
            .edges_of(id.0, Direction::Outgoing)
            .map(|edge| (OpId(edge.target()), edge.weight().clone()))
            .collect();
        users.sort_by_key(|(user, edge)| (self.inner[user.0].seq, edge_sort_key(edge)));
        users
    }

    /// Every edge of the graph as (source, destination, edge), in a deterministic order:
    /// by destination creation order, then data inputs by slot, then control inputs by order.
    pub fn edges(&self) -> Vec<(OpId, OpId, Edge)> {
        let mut edges: Vec<(OpId, OpId, Edge)> = (&self.inner)
            .edge_references()
            .map(|edge| {
                (
                    OpId(edge.source()),
                    OpId(edge.target()),
                    edge.weight().clone(),
                )
            })
            .collect();
        edges.sort_by_key(|(_, dst, edge)| (self.inner[dst.0].seq, edge_sort_key(edge)));
        edges
    }

    /// Redirects every data use of `old`'s output `old_output` to `new`'s output `new_output`.
    /// Returns how many uses changed.
    pub fn replace_uses(
        &mut self,
        old: OpId,
        old_output: &Port,
        new: OpId,
        new_output: Port,
    ) -> usize {
        let uses: Vec<(EdgeIndex<u32>, NodeIndex<u32>, u32)> = self
            .edges_of(old.0, Direction::Outgoing)
            .filter_map(|edge| match edge.weight() {
                Edge::Data { output, input } if output == old_output => {
                    Some((edge.id(), edge.target(), *input))
                }
                _ => None,
            })
            .collect();
        for &(edge, dst, input) in &uses {
            self.inner.remove_edge(edge);
            let edge = self.inner.add_edge(
                new.0,
                dst,
                Edge::Data {
                    output: new_output.clone(),
                    input,
                },
            );
            self.set_input_edge(OpId(dst), input, edge);
        }
        uses.len()
    }

    /// Removes an op and all its edges, returning it. Users of its outputs lose those inputs.
    pub fn remove_op(&mut self, id: OpId) -> Option<OpNode> {
        // The users of its outputs lose those input slots.
        let lost: Vec<(NodeIndex<u32>, u32)> = self
            .edges_of(id.0, Direction::Outgoing)
            .filter_map(|edge| match edge.weight() {
                Edge::Data { input, .. } => Some((edge.target(), *input)),
                Edge::Control { .. } => None,
            })
            .collect();
        let node = self.inner.remove_node(id.0)?;
        self.removed_any = true;
        for (dst, input) in lost {
            self.set_input_edge(OpId(dst), input, vacant());
        }
        if let Some(slots) = self.data_inputs.get_mut(id.0.index()) {
            *slots = InputSlots::new();
        }
        if let Ok(entry) = self
            .by_name
            .find_entry(name_hash(&node.name), |&other| other == id)
        {
            entry.remove();
        }
        // petgraph reuses the index for the next op added: start its control orders afresh.
        if let Some(next) = self.next_control.get_mut(id.0.index()) {
            *next = 0;
        }
        Some(node)
    }

    /// Renames an op; fails if the new name is taken by another op.
    pub fn rename(&mut self, id: OpId, name: impl Into<String>) -> Result<(), GraphError> {
        let name = name.into();
        match self.find(&name) {
            Some(other) if other == id => return Ok(()),
            Some(_) => return Err(GraphError::DuplicateName { name }),
            None => {}
        }
        let old_hash = name_hash(&self.inner[id.0].name);
        if let Ok(entry) = self.by_name.find_entry(old_hash, |&other| other == id) {
            entry.remove();
        }
        let hash = name_hash(&name);
        self.inner[id.0].name = name;
        let inner = &self.inner;
        self.by_name
            .insert_unique(hash, id, |&other| name_hash(&inner[other.0].name));
        Ok(())
    }

    /// A topological order of all ops (data and control edges), ties broken by creation order.
    /// Fails with the ops left on a cycle, in creation order.
    pub fn topo_order(&self) -> Result<Vec<OpId>, Vec<OpId>> {
        self.topo_order_of(self.inner.node_indices().map(OpId), |_| false)
    }

    /// A topological order of the ops `ops` over the edges among them, ties broken by creation
    /// order; edges from ops outside `ops`, and from ops `cut` says, order nothing (a plan
    /// compiler cuts the ops whose outputs are fed). Fails with the ops of `ops` left on or
    /// behind a cycle, in creation order.
    pub fn topo_order_of(
        &self,
        ops: impl IntoIterator<Item = OpId>,
        cut: impl Fn(OpId) -> bool,
    ) -> Result<Vec<OpId>, Vec<OpId>> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;

        // Per node index: whether it is ordered, and its unprocessed incoming edges.
        let mut member = vec![false; self.inner.node_bound()];
        for id in ops {
            member[id.0.index()] = true;
        }
        // Collected in index order, which is creation order unless removed ops' slots were
        // reused: the sort then finds one run and is done, reading each op once, in memory
        // order (sorting the ops as given would read two ops at random places per
        // comparison).
        let mut ids: Vec<OpId> = member
            .iter()
            .enumerate()
            .filter(|&(_, &is)| is)
            .map(|(index, _)| OpId(NodeIndex::new(index)))
            .collect();
        let counts = |node: NodeIndex<u32>| member[node.index()] && !cut(OpId(node));
        // Until an op is removed, index order is creation order: the check below then reads
        // no op, only edges.
        let created = |node: NodeIndex<u32>| match self.removed_any {
            false => node.index() as u32,
            true => self.inner[node].seq,
        };
        // Ops are usually created after their inputs (a tracer emits them so, an importer
        // sorts them so). Then creation order is the answer: the first op in creation order
        // not yet placed always has all its inputs placed, so it is the one the ready queue
        // below would pick. One pass over the edges checks it, with no queue.
        if self.removed_any {
            ids.sort_unstable_by_key(|id| self.inner[id.0].seq);
        }
        let in_creation_order = ids.iter().all(|&id| {
            let seq = created(id.0);
            self.edges_of(id.0, Direction::Incoming)
                .all(|edge| !counts(edge.source()) || created(edge.source()) < seq)
        });
        if in_creation_order {
            return Ok(ids);
        }
        let mut pending = vec![0usize; self.inner.node_bound()];
        let mut ready = BinaryHeap::new();
        for &id in &ids {
            let n_in = self
                .edges_of(id.0, Direction::Incoming)
                .filter(|edge| counts(edge.source()))
                .count();
            pending[id.0.index()] = n_in;
            if n_in == 0 {
                ready.push(Reverse((self.inner[id.0].seq, id.0)));
            }
        }
        let mut order = Vec::with_capacity(ids.len());
        while let Some(Reverse((_, node))) = ready.pop() {
            order.push(OpId(node));
            if !counts(node) {
                continue;
            }
            for edge in self.edges_of(node, Direction::Outgoing) {
                let target = edge.target();
                if !member[target.index()] {
                    continue;
                }
                let count = &mut pending[target.index()];
                *count -= 1;
                if *count == 0 {
                    ready.push(Reverse((self.inner[target].seq, target)));
                }
            }
        }
        if order.len() == ids.len() {
            Ok(order)
        } else {
            let mut stuck: Vec<OpId> = ids
                .into_iter()
                .filter(|id| pending[id.0.index()] > 0)
                .collect();
            stuck.sort_by_key(|id| self.inner[id.0].seq);
            Err(stuck)
        }
    }

    /// Whether the data and control edges form a cycle. Linear, without the ordering work of
    /// [`Graph::topo_order`].
    pub fn has_cycle(&self) -> bool {
        let mut pending = vec![0u32; self.inner.node_bound()];
        let mut ready = Vec::new();
        for node in self.inner.node_indices() {
            let n_in = self.edges_of(node, Direction::Incoming).count() as u32;
            pending[node.index()] = n_in;
            if n_in == 0 {
                ready.push(node);
            }
        }
        let mut n_done = 0;
        while let Some(node) = ready.pop() {
            n_done += 1;
            for edge in self.edges_of(node, Direction::Outgoing) {
                let count = &mut pending[edge.target().index()];
                *count -= 1;
                if *count == 0 {
                    ready.push(edge.target());
                }
            }
        }
        n_done != self.len()
    }

    /// The edges into or out of `node`. Every walk over edges goes through here, so debug
    /// builds count the edges visited.
    fn edges_of(
        &self,
        node: NodeIndex<u32>,
        direction: Direction,
    ) -> impl Iterator<Item = petgraph::stable_graph::EdgeReference<'_, Edge, u32>> + '_ {
        self.inner
            .edges_directed(node, direction)
            .inspect(move |_| self.note_visit())
    }

    /// Counts one visited edge (debug builds).
    #[inline]
    fn note_visit(&self) {
        #[cfg(debug_assertions)]
        self.visited
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Debug builds only: the number of edges that walks over ops' edges (inputs, users,
    /// ancestors, orders, cycle checks) have visited since this graph was made, shared with
    /// its clones. A measure of work for tests: building, verifying, printing or compiling an
    /// op with N inputs must visit O(N) edges, not O(N²).
    #[cfg(debug_assertions)]
    pub fn edges_visited(&self) -> u64 {
        self.visited.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn inputs_raw(&self, id: OpId) -> impl Iterator<Item = (OpId, &Edge)> + '_ {
        self.edges_of(id.0, Direction::Incoming)
            .map(|edge| (OpId(edge.source()), edge.weight()))
    }
}

/// The hash of an op name in [`Graph`]'s name table.
fn name_hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

fn edge_sort_key(edge: &Edge) -> (u8, u32) {
    match edge {
        Edge::Data { input, .. } => (0, *input),
        Edge::Control { order } => (1, *order),
    }
}

/// Mutable access to an op's fields other than its name (names change via [`Graph::rename`]).
pub struct OpMut<'g> {
    node: &'g mut OpNode,
}

impl OpMut<'_> {
    /// The op kind.
    pub fn op(&mut self) -> &mut Op {
        &mut self.node.op
    }

    /// The requested device. Intern a new one with [`Graph::intern_device`] to share it.
    pub fn device(&mut self) -> &mut Arc<str> {
        &mut self.node.device
    }

    /// The attributes.
    pub fn attrs(&mut self) -> &mut Attrs {
        &mut self.node.attrs
    }

    /// `NodeDef.experimental_debug_info`.
    pub fn debug_info(&mut self) -> &mut Option<Box<NodeDebugInfo>> {
        &mut self.node.debug_info
    }

    /// `NodeDef.experimental_type` bytes.
    pub fn experimental_type(&mut self) -> &mut Option<Box<[u8]>> {
        &mut self.node.experimental_type
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(graph: &mut Graph, name: &str) -> OpId {
        graph.add_op(name, Op::NoOp, "", Attrs::new()).unwrap()
    }

    /// Ops `a`, `b` and `c`, made in that order.
    fn abc(graph: &mut Graph) -> (OpId, OpId, OpId) {
        (op(graph, "a"), op(graph, "b"), op(graph, "c"))
    }

    #[test]
    fn inputs_keep_slot_and_control_order() {
        let mut graph = Graph::new();
        let (a, b, c, d) = (
            op(&mut graph, "a"),
            op(&mut graph, "b"),
            op(&mut graph, "c"),
            op(&mut graph, "d"),
        );
        graph.connect(b, Port::Index(1), d, 1).unwrap();
        graph.connect(a, Port::Index(0), d, 0).unwrap();
        graph.add_control(c, d);
        graph.add_control(a, d);
        let inputs = graph.inputs(d);
        assert_eq!(
            inputs
                .iter()
                .map(|(slot, input)| (*slot, input.src))
                .collect::<Vec<_>>(),
            [(0, a), (1, b)]
        );
        assert_eq!(graph.control_inputs(d), [c, a]);
        assert_eq!(graph.num_inputs(d), 2);
        assert!(matches!(
            graph.connect(c, Port::Index(0), d, 1),
            Err(GraphError::InputTaken { .. })
        ));
    }

    #[test]
    fn names_are_unique_and_renames_update_lookup() {
        let mut graph = Graph::new();
        let a = op(&mut graph, "a");
        assert!(matches!(
            graph.add_op("a", Op::NoOp, "", Attrs::new()),
            Err(GraphError::DuplicateName { .. })
        ));
        graph.rename(a, "z").unwrap();
        assert_eq!(graph.find("z"), Some(a));
        assert_eq!(graph.find("a"), None);
    }

    #[test]
    fn topo_order_breaks_ties_by_creation_and_reports_cycles() {
        let mut graph = Graph::new();
        let (a, b, c) = abc(&mut graph);
        graph.add_control(c, a);
        assert_eq!(graph.topo_order().unwrap(), [b, c, a]);
        graph.add_control(a, c);
        assert_eq!(graph.topo_order().unwrap_err(), [a, c]);
    }

    #[test]
    fn topo_order_of_ops_made_in_order_is_creation_order() {
        let mut graph = Graph::new();
        let (a, b, c, d) = (
            op(&mut graph, "a"),
            op(&mut graph, "b"),
            op(&mut graph, "c"),
            op(&mut graph, "d"),
        );
        graph.push_input(c, a, Port::Index(0));
        graph.add_control(b, d);
        assert_eq!(graph.topo_order().unwrap(), [a, b, c, d]);
        // A subset, given out of order, comes back in creation order.
        assert_eq!(
            graph.topo_order_of([d, a, c], |_| false).unwrap(),
            [a, c, d]
        );
        // An edge against creation order leaves the fast path; ties still follow creation.
        graph.add_control(d, a);
        assert_eq!(graph.topo_order().unwrap(), [b, d, a, c]);
        // Edges from a cut op order nothing.
        assert_eq!(
            graph.topo_order_of([a, c, d], |id| id == d).unwrap(),
            [a, c, d]
        );
    }

    #[test]
    fn topo_order_of_follows_creation_not_slots() {
        // `d` takes the slot `b` left: index order is a, d, c, creation order a, c, d.
        let mut graph = Graph::new();
        let (a, b, c) = abc(&mut graph);
        graph.remove_op(b).unwrap();
        let d = op(&mut graph, "d");
        assert_eq!(d.index(), b.index(), "the slot is reused");
        assert_eq!(
            graph.topo_order_of([d, c, a, d], |_| false).unwrap(),
            [a, c, d]
        );
        graph.push_input(c, d, Port::Index(0));
        assert_eq!(
            graph.topo_order_of([c, d, a], |_| false).unwrap(),
            [a, d, c]
        );
    }

    #[test]
    fn a_stride_guesses_the_next_of_a_run_then_the_last_again() {
        let mut stride = Stride::default();
        assert_eq!(stride.guesses().count(), 0, "nothing to guess from yet");
        stride.record(OpId::from_index(4));
        assert_eq!(stride.guesses().collect::<Vec<_>>(), [4, 4]);
        stride.record(OpId::from_index(9));
        assert_eq!(stride.guesses().collect::<Vec<_>>(), [14, 9]);
        stride.record(OpId::from_index(7));
        assert_eq!(stride.guesses().collect::<Vec<_>>(), [5, 7]);
        stride.record(OpId::from_index(0));
        assert_eq!(
            stride.guesses().collect::<Vec<_>>(),
            [0],
            "no index below 0"
        );
    }

    #[test]
    fn removal_keeps_other_ids_and_order() {
        let mut graph = Graph::new();
        let (a, b, c) = abc(&mut graph);
        assert_eq!(graph.ops(), [a, b, c]);
        graph.push_input(c, a, Port::Index(0));
        graph.remove_op(a).unwrap();
        assert_eq!(
            graph.op_at(a.index()),
            None,
            "a removed op's index holds nothing"
        );
        assert_eq!(graph.op_at(b.index()), Some(b));
        assert_eq!(graph.op_at(graph.id_bound()), None);
        assert_eq!(graph.find_near("c", [c.index()]), Some(c), "a right guess");
        assert_eq!(graph.find_near("c", [b.index()]), Some(c), "a wrong guess");
        assert_eq!(
            graph.find_near("c", [b.index(), c.index()]),
            Some(c),
            "a later guess"
        );
        assert_eq!(graph.find_near("a", [a.index()]), None, "a removed op");
        assert_eq!(
            graph.find_near("c", [usize::MAX]),
            Some(c),
            "past the bound"
        );
        let d = op(&mut graph, "d");
        assert_eq!(graph.ops(), [b, c, d]);
        assert!(graph.inputs(c).is_empty());
        let n = graph.replace_uses(b, &Port::Index(0), d, Port::Index(0));
        assert_eq!(n, 0);
    }
}
