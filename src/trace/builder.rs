//! The one interface through which the tracer adds ops ([`Builder`]), its graph
//! implementations ([`GraphBuilder`], tracing into a [`Graph`] on the tracer's thread, and
//! [`BackgroundGraph`], which has another thread build it) and the small helpers every
//! emitting file shares ([`attrs`], [`out`]). The bottom layer of the tracer: it imports
//! nothing else from it but [`TraceError`].
//!
//! The tracer names every op, picks its device and attributes and hands it to a builder
//! together with its data inputs and control inputs; the builder returns a handle ([`OpId`])
//! that later ops use as an input. The graph builder only records the op. An eager builder
//! (`crate::session::EagerBuilder`) records it too and runs it at once, so the same tracing code
//! either builds a plan to run many times (graph mode) or runs it as it goes (eager mode).
//!
//! Ops are emitted in an order where every input and every control input already exists; an
//! eager builder can therefore run each op when it is added. The tracer adds a few control
//! edges after both ends exist ([`Builder::control`]); for an eager builder both ends have then
//! already run, in the right order.

use std::cell::{OnceCell, RefCell};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use saveplan_ir::{AttrValue, Attrs, Edit, Edits, Graph, GraphError, Op, OpId, Port};

use super::TraceError;

/// The attribute a `tf.Graph` sets on ops used in a `control_dependencies` block.
pub(crate) const MANUAL_CONTROL: &str = "_has_manual_control_dependencies";

/// Where the tracer puts the ops it emits.
pub trait Builder {
    /// Adds op `name` (already unique) with data `inputs` in slot order and `controls` that
    /// must run first; returns its handle. An eager builder also runs it; when that fails it
    /// keeps the failure and returns [`TraceError::Stopped`].
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError>;

    /// Adds a control edge between two ops already emitted: `dst` runs after `src`.
    fn control(&mut self, src: OpId, dst: OpId);

    /// Marks an emitted op with `_has_manual_control_dependencies = true`, as a `tf.Graph`
    /// marks every op passed to `control_dependencies`.
    fn mark_manual_control(&mut self, op: OpId);

    /// The ops emitted so far.
    fn graph(&self) -> &Graph;
}

/// A builder lent out: the tracer emits through it and the caller keeps the builder, with
/// whatever it recorded, even when tracing fails.
impl<B: Builder + ?Sized> Builder for &mut B {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        (**self).emit(name, op, device, attrs, inputs, controls)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        (**self).control(src, dst);
    }

    fn mark_manual_control(&mut self, op: OpId) {
        (**self).mark_manual_control(op);
    }

    fn graph(&self) -> &Graph {
        (**self).graph()
    }
}

/// The graph builder: a [`Graph`] itself, which records each op and runs nothing.
pub type GraphBuilder = Graph;

impl Builder for Graph {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        let id = self.add_op(name, op, device, attrs)?;
        self.push_inputs(id, inputs);
        for &src in controls {
            self.add_control(src, id);
        }
        Ok(id)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        self.add_control(src, dst);
    }

    fn mark_manual_control(&mut self, op: OpId) {
        self.op_mut(op)
            .attrs()
            .insert(MANUAL_CONTROL, AttrValue::B(true));
    }

    fn graph(&self) -> &Graph {
        self
    }
}

/// A graph builder that builds its graph on a thread of its own.
///
/// Adding an op to a large graph is mostly cache misses (its name into the name index, its
/// node and edges into tables of millions of entries): about a third of tracing a flat plan.
/// This builder records each op ([`Edits`], which knows the id the op will get) and hands the
/// records over in batches to a thread that adds them, in order, while the tracer goes on
/// naming the next ops. Applied batches come back to be reused.
///
/// [`Builder::graph`] waits for the thread and from then on adds ops on the caller's thread
/// (a registered saver may look at the graph). An op the graph refuses (a taken name) is
/// reported by [`BackgroundGraph::finish`], ahead of any error the tracer met later.
pub struct BackgroundGraph {
    /// The records not yet handed over, and the thread, until it is joined.
    pending: RefCell<Pending>,
    /// The graph, once the thread is joined (or when it could not be started).
    graph: OnceCell<Graph>,
}

/// What [`BackgroundGraph`] keeps while its thread builds the graph.
struct Pending {
    edits: Edits,
    /// The thread and its channels; `None` once joined.
    worker: Option<Worker>,
    /// The first op the graph refused.
    error: Option<GraphError>,
}

/// The building thread: batches go to it, applied batches come back.
struct Worker {
    batches: Sender<Vec<Edit>>,
    spares: Receiver<Vec<Edit>>,
    thread: JoinHandle<(Graph, Option<GraphError>)>,
}

/// Edits per batch handed to the building thread.
const EDITS_PER_BATCH: usize = 2048;

/// The fewest ops worth a thread: a smaller graph is built on the caller's thread, which is
/// faster than starting one (tens of microseconds) and handing batches over.
pub const BACKGROUND_MIN_OPS: usize = 8 * EDITS_PER_BATCH;

impl BackgroundGraph {
    /// A builder of a graph with room for `n_ops` ops and `n_edges` edges. Below
    /// [`BACKGROUND_MIN_OPS`] ops, or when no thread can be started, it builds the graph on
    /// the caller's thread.
    pub fn with_capacity(n_ops: usize, n_edges: usize) -> BackgroundGraph {
        if n_ops < BACKGROUND_MIN_OPS {
            return BackgroundGraph::inline(Graph::with_capacity(n_ops, n_edges));
        }
        // The thread's graph starts empty, as this one does: the ids follow from there.
        let edits = Edits::after(&Graph::new());
        let (batches, inbox) = channel::<Vec<Edit>>();
        let (give_back, spares) = channel();
        let spawned = std::thread::Builder::new()
            .name("saveplan-graph".to_owned())
            .spawn(move || {
                // Reserved (and first touched) on this thread, not the tracer's.
                let mut graph = Graph::with_capacity(n_ops, n_edges);
                let mut error = None;
                for mut batch in inbox {
                    if error.is_none() {
                        error = graph.apply(&mut batch).err();
                    }
                    // The tracer may be gone (it failed): then the batch is simply dropped.
                    let _ = give_back.send(batch);
                }
                (graph, error)
            });
        match spawned {
            Ok(thread) => BackgroundGraph {
                pending: RefCell::new(Pending {
                    edits,
                    worker: Some(Worker {
                        batches,
                        spares,
                        thread,
                    }),
                    error: None,
                }),
                graph: OnceCell::new(),
            },
            Err(_) => BackgroundGraph::inline(Graph::with_capacity(n_ops, n_edges)),
        }
    }

    /// A builder adding ops to `graph` on the caller's thread.
    fn inline(graph: Graph) -> BackgroundGraph {
        BackgroundGraph {
            pending: RefCell::new(Pending {
                edits: Edits::after(&graph),
                worker: None,
                error: None,
            }),
            graph: OnceCell::from(graph),
        }
    }

    /// Whether a thread builds the graph (until [`Builder::graph`] or
    /// [`BackgroundGraph::finish`] waits for it).
    pub fn in_background(&self) -> bool {
        self.graph.get().is_none()
    }

    /// The graph with every op added, or the first op it refused.
    pub fn finish(self) -> Result<Graph, TraceError> {
        self.join();
        let BackgroundGraph { pending, graph } = self;
        match pending.into_inner().error {
            Some(error) => Err(error.into()),
            None => Ok(graph.into_inner().unwrap_or_default()),
        }
    }

    /// Hands the remaining records over, waits for the thread and keeps its graph.
    fn join(&self) -> &Graph {
        self.graph.get_or_init(|| {
            let mut pending = self.pending.borrow_mut();
            // A builder without a thread never gets here: it starts with its graph set.
            let Some(worker) = pending.worker.take() else {
                return Graph::new();
            };
            let last = pending.edits.take(Vec::new());
            // The thread only stops when the sender is dropped, so it is still receiving.
            let _ = worker.batches.send(last);
            drop(worker.batches);
            match worker.thread.join() {
                Ok((graph, error)) => {
                    pending.error = pending.error.take().or(error);
                    graph
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

impl Pending {
    /// Hands the batch over when it is full.
    fn flush_full(&mut self) {
        if self.edits.len() < EDITS_PER_BATCH {
            return;
        }
        let Some(worker) = &self.worker else {
            return;
        };
        let spare = worker.spares.try_recv().unwrap_or_default();
        let batch = self.edits.take(spare);
        // The thread runs until the sender is dropped, so the send only fails if it panicked;
        // joining it then reports the panic.
        let _ = worker.batches.send(batch);
    }
}

impl Builder for BackgroundGraph {
    fn emit(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: &mut dyn Iterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> Result<OpId, TraceError> {
        let pending = self.pending.get_mut();
        if let Some(graph) = self.graph.get_mut() {
            if let Some(error) = &pending.error {
                return Err(error.clone().into());
            }
            return graph.emit(name, op, device, attrs, inputs, controls);
        }
        let id = pending
            .edits
            .add_op(name, op, device, attrs, inputs, controls);
        pending.flush_full();
        Ok(id)
    }

    fn control(&mut self, src: OpId, dst: OpId) {
        let pending = self.pending.get_mut();
        match self.graph.get_mut() {
            Some(graph) => graph.add_control(src, dst),
            None => {
                pending.edits.add_control(src, dst);
                pending.flush_full();
            }
        }
    }

    fn mark_manual_control(&mut self, op: OpId) {
        let pending = self.pending.get_mut();
        match self.graph.get_mut() {
            Some(graph) => Builder::mark_manual_control(graph, op),
            None => {
                pending
                    .edits
                    .set_attr(op, MANUAL_CONTROL, AttrValue::B(true));
                pending.flush_full();
            }
        }
    }

    fn graph(&self) -> &Graph {
        self.join()
    }
}

/// An attribute map from `(name, value)` pairs.
pub(super) fn attrs<const N: usize>(pairs: [(&'static str, AttrValue); N]) -> Attrs {
    Attrs::from(pairs)
}

/// Output 0 of `op`, as a data input.
pub(super) fn out(op: OpId) -> (OpId, Port) {
    (op, Port::Index(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Emits `n` chained `Identity` ops with a control edge and a mark every tenth op.
    fn emit_chain(builder: &mut dyn Builder, range: std::ops::Range<usize>, first: OpId) -> OpId {
        let mut last = first;
        for i in range {
            let id = builder
                .emit(
                    format!("op_{i}"),
                    Op::Identity,
                    if i % 2 == 0 { "/cpu:0" } else { "/cpu:1" },
                    attrs([("T", AttrValue::Type(saveplan_ir::DType::Float))]),
                    &mut [out(last)].into_iter(),
                    &[],
                )
                .unwrap();
            if i % 10 == 0 {
                builder.mark_manual_control(last);
                builder.control(last, id);
            }
            last = id;
        }
        last
    }

    fn text(graph: Graph) -> String {
        saveplan_ir::Module {
            graph,
            ..saveplan_ir::Module::default()
        }
        .to_string()
    }

    /// A thread builds the graph; half-way the caller looks at it, and the rest is added on
    /// the caller's thread. The result is what a plain graph builder builds.
    #[test]
    fn background_graph_builds_the_graph_builders_graph() {
        let n = BACKGROUND_MIN_OPS + 3 * EDITS_PER_BATCH / 2;
        let mut direct = Graph::new();
        let mut background = BackgroundGraph::with_capacity(n, n);
        assert!(background.in_background());
        let mut ends = Vec::new();
        for builder in [&mut direct as &mut dyn Builder, &mut background] {
            let root = builder
                .emit(
                    "root".into(),
                    Op::NoOp,
                    "",
                    Attrs::new(),
                    &mut None.into_iter(),
                    &[],
                )
                .unwrap();
            let mid = emit_chain(builder, 0..n / 2, root);
            assert_eq!(builder.graph().len(), n / 2 + 1);
            ends.push(emit_chain(builder, n / 2..n, mid));
        }
        assert_eq!(ends[0], ends[1]);
        assert!(!background.in_background());
        assert_eq!(text(background.finish().unwrap()), text(direct));
    }

    /// A name the graph refuses is reported by `finish`, and stops later emits once the
    /// graph was looked at.
    #[test]
    fn a_refused_op_is_reported() {
        let n = BACKGROUND_MIN_OPS;
        let mut background = BackgroundGraph::with_capacity(n, n);
        let root = background
            .emit(
                "root".into(),
                Op::NoOp,
                "",
                Attrs::new(),
                &mut None.into_iter(),
                &[],
            )
            .unwrap();
        emit_chain(&mut background, 0..n, root);
        // Recorded without complaint: the thread finds the name taken.
        let again = background.emit(
            "op_7".into(),
            Op::NoOp,
            "",
            Attrs::new(),
            &mut None.into_iter(),
            &[],
        );
        assert!(again.is_ok());
        assert_eq!(background.graph().len(), n + 1);
        let after = background.emit(
            "fresh".into(),
            Op::NoOp,
            "",
            Attrs::new(),
            &mut None.into_iter(),
            &[],
        );
        let duplicate = |err: &TraceError| matches!(err, TraceError::Graph(GraphError::DuplicateName { name }) if name == "op_7");
        assert!(after.as_ref().is_err_and(duplicate), "{after:?}");
        let finished = background.finish();
        assert!(
            finished.as_ref().is_err_and(duplicate),
            "{:?}",
            finished.err()
        );
    }

    #[test]
    fn small_graphs_are_built_inline() {
        let background = BackgroundGraph::with_capacity(BACKGROUND_MIN_OPS - 1, 0);
        assert!(!background.in_background());
    }
}
