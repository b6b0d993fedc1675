//! The trait a framework implements to checkpoint its own types by object: [`Saveable`], one
//! trait that, like TensorFlow's `_trackable_children`, `_serialize_to_tensors` and
//! `_restore_from_tensors`, lists an object's children and tensors by name and takes the
//! restored tensors back.
//!
//! Nothing here writes or matches a checkpoint of its own: [`Checkpoint::of`] turns the
//! objects into the object tree ([`Object`], [`build_object_graph`]) and values by checkpoint
//! key that [`Checkpoint::new`] takes, so [`Checkpoint::write`] writes what
//! `tf.train.Checkpoint(**children).write(prefix)` writes for the same objects, and
//! [`Checkpoint::read`] matches by object as TensorFlow does; [`Checkpoint::assign_to`] then
//! hands every value back through [`Saveable::restore`]. [`save_object`] and
//! [`restore_object`] do both in one call.
//!
//! A [`HostTensor`] is a variable (`tf.Variable(value)`: one `VARIABLE_VALUE` attribute,
//! `full_name` `Variable`), a [`Variable`] one with a name, and a `Vec` of objects is a list
//! (children `0`, `1`, …, as TensorFlow's `ListWrapper`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use saveplan_ir::object_graph::{NodeId, ObjectGraph, VARIABLE_VALUE};

use super::{
    Checkpoint, CheckpointError, LoadStatus, Object, ObjectIdentity, build_object_graph,
    display_path,
};
use crate::exec::HostTensor;

/// An object of a framework that saves itself by object: its children and tensors, by name,
/// out ([`Saveable::save`]) and back in ([`Saveable::restore`]).
///
/// The root object's children are `tf.train.Checkpoint`'s keyword arguments, which it sorts by
/// name (so does [`Checkpoint::of`]); deeper objects keep the order `save` lists. `save` must
/// list the same names each time, and `restore` should ask for the names `save` lists (a name `save`
/// did not list is [`CheckpointError::NotSaved`]).
///
/// ```
/// use saveplan::checkpoint::{CheckpointError, RestoreNode, SaveNode, Saveable};
/// use saveplan::exec::HostTensor;
///
/// struct Dense {
///     kernel: HostTensor,
///     bias: HostTensor,
/// }
///
/// impl Saveable for Dense {
///     fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
///         node.child("kernel", &self.kernel);
///         node.child("bias", &self.bias);
///     }
///     fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
///         node.child("kernel", &mut self.kernel)?;
///         node.child("bias", &mut self.bias)
///     }
/// }
/// ```
pub trait Saveable {
    /// Lists, in order, this object's children ([`SaveNode::child`]) and the tensors it saves
    /// itself ([`SaveNode::tensor`], [`SaveNode::variable`]).
    fn save<'a>(&'a self, node: &mut SaveNode<'a>);

    /// Takes the values back: each child through [`RestoreNode::child`], each own tensor
    /// through [`RestoreNode::tensor`].
    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError>;

    /// What makes two references the same object (one node of the graph): by default its
    /// address and type, as [`super::Checkpointable::identity`].
    fn identity(&self) -> ObjectIdentity {
        ObjectIdentity::of(self)
    }
}

/// What a [`Saveable`] object lists when it is saved.
pub struct SaveNode<'a> {
    children: Vec<(Cow<'a, str>, &'a dyn Saveable)>,
    tensors: Vec<(String, String, HostTensor)>,
}

impl<'a> SaveNode<'a> {
    /// A child named `name` (its local name, unescaped).
    pub fn child(&mut self, name: impl Into<Cow<'a, str>>, object: &'a dyn Saveable) {
        self.children.push((name.into(), object));
    }

    /// A tensor this object saves itself (`_serialize_to_tensors`), as attribute `name` (as
    /// the object graph stores it: escaped once).
    pub fn tensor(&mut self, name: impl Into<String>, value: HostTensor) {
        self.tensors.push((name.into(), String::new(), value));
    }

    /// This object's value as a variable's (`VARIABLE_VALUE`), `full_name` being the
    /// variable's name (`tf.Variable(name=…)`, used by name-based restores).
    pub fn variable(&mut self, full_name: impl Into<String>, value: HostTensor) {
        self.tensors
            .push((VARIABLE_VALUE.to_owned(), full_name.into(), value));
    }
}

/// What a [`Saveable`] object is given back when values are assigned to it: the values of its
/// own attributes and its children's nodes, by name.
pub struct RestoreNode<'c> {
    graph: &'c ObjectGraph,
    values: &'c BTreeMap<String, HostTensor>,
    node: NodeId,
    path: Vec<String>,
}

impl<'c> RestoreNode<'c> {
    /// The root's node of `graph` with `values`.
    pub(super) fn root(
        graph: &'c ObjectGraph,
        values: &'c BTreeMap<String, HostTensor>,
    ) -> RestoreNode<'c> {
        RestoreNode {
            graph,
            values,
            node: NodeId::ROOT,
            path: Vec::new(),
        }
    }

    /// Gives the child named `name` its values (calls its [`Saveable::restore`]).
    pub fn child(&mut self, name: &str, object: &mut dyn Saveable) -> Result<(), CheckpointError> {
        let child = (self.graph.node(self.node).children.iter())
            .find(|child| child.local_name == name)
            .ok_or_else(|| self.not_saved(name))?;
        let mut path = self.path.clone();
        path.push(name.to_owned());
        object.restore(&mut RestoreNode {
            graph: self.graph,
            values: self.values,
            node: child.node_id,
            path,
        })
    }

    /// The value of this object's attribute `name` (`VARIABLE_VALUE` for a variable's).
    pub fn tensor(&mut self, name: &str) -> Result<HostTensor, CheckpointError> {
        (self.graph.node(self.node).attributes.iter())
            .find(|attribute| attribute.name == name)
            .and_then(|attribute| self.values.get(&attribute.checkpoint_key))
            .cloned()
            .ok_or_else(|| self.not_saved(name))
    }

    /// The object's path, `(root).model.kernel`.
    pub fn path(&self) -> String {
        display_path(&self.path.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn not_saved(&self, name: &str) -> CheckpointError {
        CheckpointError::NotSaved {
            path: self.path(),
            name: name.to_owned(),
        }
    }
}

/// `tf.Variable(value)`: a variable named `Variable`.
impl Saveable for HostTensor {
    fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
        node.variable("Variable", self.clone());
    }

    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
        *self = node.tensor(VARIABLE_VALUE)?;
        Ok(())
    }
}

/// A variable with a name (`tf.Variable(value, name=…)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Variable {
    /// Its name (the attribute's `full_name`, without `:0`).
    pub name: String,
    /// Its value.
    pub value: HostTensor,
}

impl Saveable for Variable {
    fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
        node.variable(self.name.clone(), self.value.clone());
    }

    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
        self.value = node.tensor(VARIABLE_VALUE)?;
        Ok(())
    }
}

/// A list of objects (TensorFlow's `ListWrapper`): children `0`, `1`, ….
impl<T: Saveable> Saveable for Vec<T> {
    fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
        for (index, item) in self.iter().enumerate() {
            node.child(index.to_string(), item);
        }
    }

    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
        for (index, item) in self.iter_mut().enumerate() {
            node.child(&index.to_string(), item)?;
        }
        Ok(())
    }
}

/// `tf.train.Checkpoint(**children).write(prefix)` of `root`'s children: writes `prefix.index`
/// and its data file. Returns the prefix.
pub fn save_object(root: &dyn Saveable, prefix: &str) -> Result<String, CheckpointError> {
    Checkpoint::of(root)?.write(prefix)
}

/// `tf.train.Checkpoint(**children).read(prefix)` into `root`: matches the checkpoint by object,
/// checks every matched value's dtype and shape (on a mismatch nothing changes) and gives each
/// object its restored values (the others keep theirs). The status tells what matched
/// ([`LoadStatus::assert_consumed`]).
pub fn restore_object(
    root: &mut dyn Saveable,
    prefix: &str,
) -> Result<LoadStatus, CheckpointError> {
    let mut checkpoint = Checkpoint::of(root)?;
    let status = checkpoint.read(prefix)?;
    checkpoint.assign_to(root)?;
    Ok(status)
}

/// One object met while walking a [`Saveable`] tree: its tree form and a path to it.
struct Walked {
    object: Object,
    path: Vec<String>,
    tensors: Vec<(String, HostTensor)>,
}

/// The object graph of everything reachable from `root` and its values by checkpoint key.
pub(super) fn graph_and_values(
    root: &dyn Saveable,
) -> Result<(ObjectGraph, BTreeMap<String, HostTensor>), CheckpointError> {
    let mut walked = BTreeMap::new();
    let root_object = walk(root, Vec::new(), &mut walked)?;
    let graph = build_object_graph(&root_object)?;
    let mut values = BTreeMap::new();
    for walked in walked.into_values().flatten() {
        let node = (walked.path.iter()).try_fold(NodeId::ROOT, |node, name| {
            (graph.node(node).children.iter())
                .find(|child| &child.local_name == name)
                .map(|child| child.node_id)
        });
        let node = graph.node(node.expect("every walked path is in the graph"));
        for (name, value) in walked.tensors {
            let attribute = (node.attributes.iter())
                .find(|attribute| attribute.name == name)
                .expect("every tensor is an attribute");
            values.insert(attribute.checkpoint_key.clone(), value);
        }
    }
    Ok((graph, values))
}

/// The [`Object`] of `object` (reached at `path`), its children's first; `walked` holds each
/// object met (`None` while its children are walked: meeting one of those again is a cycle).
fn walk(
    object: &dyn Saveable,
    path: Vec<String>,
    walked: &mut BTreeMap<ObjectIdentity, Option<Walked>>,
) -> Result<Object, CheckpointError> {
    let identity = object.identity();
    walked.insert(identity, None);
    let mut node = SaveNode {
        children: Vec::new(),
        tensors: Vec::new(),
    };
    object.save(&mut node);
    if path.is_empty() {
        // `tf.train.Checkpoint(**children)` sets its keyword arguments in sorted order.
        node.children.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let mut tree = Object::new();
    for (name, child) in node.children {
        let child_identity = child.identity();
        if child_identity == identity {
            tree = tree.child_self(name);
            continue;
        }
        let child_object = match walked.get(&child_identity) {
            Some(Some(done)) => done.object.clone(),
            Some(None) => {
                return Err(CheckpointError::Cycle {
                    path: display_path(&path.iter().map(String::as_str).collect::<Vec<_>>()),
                    name: name.into_owned(),
                });
            }
            None => {
                let mut child_path = path.clone();
                child_path.push(name.to_string());
                walk(child, child_path, walked)?
            }
        };
        tree = tree.child(name, &child_object);
    }
    let mut tensors = Vec::new();
    for (name, full_name, value) in node.tensors {
        tree = tree.attribute(name.clone(), full_name);
        tensors.push((name, value));
    }
    walked.insert(
        identity,
        Some(Walked {
            object: tree.clone(),
            path,
            tensors,
        }),
    );
    Ok(tree)
}
