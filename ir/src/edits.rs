//! [`Edits`]: additions to a [`Graph`] recorded in order and applied later, possibly on another
//! thread, with the id of every op they add known when it is recorded.
//!
//! A graph hands out op ids in order as long as no op was ever removed from it, so a recorder
//! that knows where the graph stands can tell each new op's id at once. That lets one thread
//! decide what to add (the tracer: names, attributes, inputs) while another does the adding
//! (the name index, the nodes, the edges), batch by batch, in the same order.
//! [`Graph::apply`] checks every id it hands out against the recorded one, so edits recorded
//! for another graph, or out of order, are refused rather than misapplied.

use std::sync::Arc;

use hashbrown::HashSet;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::attr::AttrName;
use crate::graph::{Graph, GraphError, OpId, Port};
use crate::{AttrValue, Attrs, Op};

/// The recorder: hands out the ids the ops will have and keeps the edits of the current batch.
#[derive(Debug)]
pub struct Edits {
    /// The id the next recorded op gets.
    next: usize,
    /// The edits since the last [`Edits::take`].
    batch: Vec<Edit>,
    /// Every device named so far, each stored once (the graph interns them again).
    devices: HashSet<Arc<str>, FxBuildHasher>,
}

/// One recorded addition.
#[derive(Debug)]
pub struct Edit(EditKind);

#[derive(Debug)]
enum EditKind {
    /// [`Graph::add_op`], then its data inputs in slot order and its control inputs.
    AddOp {
        id: OpId,
        name: String,
        op: Op,
        device: Arc<str>,
        attrs: Attrs,
        inputs: SmallVec<[(OpId, Port); 2]>,
        controls: SmallVec<[OpId; 2]>,
    },
    /// [`Graph::add_control`].
    Control { src: OpId, dst: OpId },
    /// Sets an attribute of an op already added.
    SetAttr {
        op: OpId,
        name: AttrName,
        value: AttrValue,
    },
}

impl Edits {
    /// A recorder for ops that follow those of `graph`. The recorded ids are right only when
    /// no op was ever removed from `graph` (then its ids are `0..len`); [`Graph::apply`]
    /// refuses them otherwise.
    pub fn after(graph: &Graph) -> Edits {
        Edits {
            next: graph.id_bound(),
            batch: Vec::new(),
            devices: HashSet::default(),
        }
    }

    /// Records an op named `name` with data `inputs` in slot order and `controls` that run
    /// first; returns the id it will have.
    pub fn add_op(
        &mut self,
        name: String,
        op: Op,
        device: &str,
        attrs: Attrs,
        inputs: impl IntoIterator<Item = (OpId, Port)>,
        controls: &[OpId],
    ) -> OpId {
        let id = OpId::from_index(self.next);
        self.next += 1;
        let device = match self.devices.get(device) {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared: Arc<str> = Arc::from(device);
                self.devices.insert(Arc::clone(&shared));
                shared
            }
        };
        self.batch.push(Edit(EditKind::AddOp {
            id,
            name,
            op,
            device,
            attrs,
            inputs: inputs.into_iter().collect(),
            controls: controls.iter().copied().collect(),
        }));
        id
    }

    /// Records a control edge: `dst` runs after `src`.
    pub fn add_control(&mut self, src: OpId, dst: OpId) {
        self.batch.push(Edit(EditKind::Control { src, dst }));
    }

    /// Records setting attribute `name` of `op` to `value`.
    pub fn set_attr(&mut self, op: OpId, name: impl Into<AttrName>, value: AttrValue) {
        self.batch.push(Edit(EditKind::SetAttr {
            op,
            name: name.into(),
            value,
        }));
    }

    /// The number of edits recorded since the last [`Edits::take`].
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether nothing was recorded since the last [`Edits::take`].
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// The edits recorded so far, in order; recording goes on into `spare` (an applied batch
    /// given back, so that its memory is reused).
    pub fn take(&mut self, mut spare: Vec<Edit>) -> Vec<Edit> {
        spare.clear();
        std::mem::replace(&mut self.batch, spare)
    }
}

impl Graph {
    /// Applies `edits` in order, leaving `edits` empty. Stops at the first that fails: a
    /// taken name, or an op whose id is not the one recorded (edits made for another graph).
    pub fn apply(&mut self, edits: &mut Vec<Edit>) -> Result<(), GraphError> {
        for Edit(edit) in edits.drain(..) {
            match edit {
                EditKind::AddOp {
                    id,
                    name,
                    op,
                    device,
                    attrs,
                    inputs,
                    controls,
                } => {
                    // A graph without removed ops adds the next op at its id bound.
                    if self.len() != id.index() || self.id_bound() != id.index() {
                        return Err(GraphError::StaleEdit { name });
                    }
                    let added = self.add_op(name, op, &*device, attrs)?;
                    debug_assert_eq!(added, id, "a graph adds ops at its id bound");
                    self.push_inputs(added, inputs);
                    for src in controls {
                        self.add_control(src, added);
                    }
                }
                EditKind::Control { src, dst } => self.add_control(src, dst),
                EditKind::SetAttr { op, name, value } => {
                    self.op_mut(op).attrs().insert(name, value);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// Builds the same three ops directly and through edits.
    #[test]
    fn applied_edits_build_what_direct_calls_build() {
        let mut direct = Graph::new();
        let a = direct
            .add_op("a", Op::NoOp, "/cpu:0", Attrs::new())
            .unwrap();
        let b = direct
            .add_op("b", Op::Identity, "/cpu:0", Attrs::new())
            .unwrap();
        direct.push_inputs(b, [(a, Port::Index(0))]);
        direct.add_control(a, b);
        direct
            .op_mut(b)
            .attrs()
            .insert("T", AttrValue::Type(DType::Float));

        let mut staged = Graph::new();
        let mut edits = Edits::after(&staged);
        let ea = edits.add_op("a".into(), Op::NoOp, "/cpu:0", Attrs::new(), [], &[]);
        let eb = edits.add_op(
            "b".into(),
            Op::Identity,
            "/cpu:0",
            Attrs::new(),
            [(ea, Port::Index(0))],
            &[ea],
        );
        edits.set_attr(eb, "T", AttrValue::Type(DType::Float));
        assert_eq!((ea, eb), (a, b));
        assert_eq!(edits.len(), 3);
        let mut batch = edits.take(Vec::new());
        assert!(edits.is_empty());
        staged.apply(&mut batch).unwrap();
        assert!(batch.is_empty());
        let text = |graph: Graph| {
            crate::Module {
                graph,
                ..crate::Module::default()
            }
            .to_string()
        };
        assert_eq!(text(staged), text(direct));
    }

    /// Applies `names` (recorded as `NoOp`s by `edits`) to `graph`: the error and the number
    /// of ops the graph then has.
    fn apply_noops(
        graph: &mut Graph,
        mut edits: Edits,
        names: &[&str],
    ) -> (Result<(), GraphError>, usize) {
        for name in names {
            edits.add_op((*name).into(), Op::NoOp, "", Attrs::new(), [], &[]);
        }
        let mut batch = edits.take(Vec::new());
        (graph.apply(&mut batch), graph.len())
    }

    #[test]
    fn edits_for_another_graph_state_are_refused() {
        let stale = || Err(GraphError::StaleEdit { name: "x".into() });
        let mut graph = Graph::new();
        let edits = Edits::after(&graph);
        graph.add_op("first", Op::NoOp, "", Attrs::new()).unwrap();
        assert_eq!(apply_noops(&mut graph, edits, &["x"]), (stale(), 1));

        // A removed op leaves a vacancy the graph would fill before its id bound.
        let mut holed = Graph::new();
        let first = holed.add_op("first", Op::NoOp, "", Attrs::new()).unwrap();
        holed.add_op("second", Op::NoOp, "", Attrs::new()).unwrap();
        holed.remove_op(first);
        let edits = Edits::after(&holed);
        assert_eq!(apply_noops(&mut holed, edits, &["x"]), (stale(), 1));
    }

    #[test]
    fn a_taken_name_stops_the_batch() {
        let mut graph = Graph::new();
        let edits = Edits::after(&graph);
        let duplicate = Err(GraphError::DuplicateName { name: "x".into() });
        assert_eq!(
            apply_noops(&mut graph, edits, &["x", "x", "y"]),
            (duplicate, 1)
        );
    }
}
