//! Building an [`ObjectGraph`] from a framework's objects, as `tf.train.Checkpoint` serializes
//! its dependency graph (FORMATS.md 13.3): node ids in breadth-first discovery order from the
//! root, then the slot-variable nodes; every edge written, shared objects stored once; keys and
//! `has_checkpoint_values` derived. A framework implements [`Checkpointable`] for its own
//! module types, or describes the tree with [`Object`]; both go through
//! [`build_object_graph`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;

use saveplan_ir::object_graph::{
    ATTRIBUTES, Attribute, ChildRef, NodeId, ObjectGraph, ObjectNode, SlotVariable, VARIABLE_VALUE,
};

use super::error::ObjectError;
use super::repr::display_path;

/// An object of a framework that can be checkpointed by object: its named children, in its
/// own order (TensorFlow: attribute first-assignment order, list index, dict insertion
/// order), the tensors it saves itself and, on an optimizer, its slot variables.
///
/// Objects are identified by [`Checkpointable::identity`], by default their address and type:
/// the same object reached through two edges becomes one node. A zero-sized type must
/// override it, since all its values may share one address.
pub trait Checkpointable {
    /// The named children, in order. An object may list itself (the `root` edge of
    /// `tf.train.Checkpoint(root=…)`).
    fn children(&self) -> Vec<Child<'_>>;

    /// The tensors this object saves itself, in order (a variable: one `VARIABLE_VALUE`).
    fn attributes(&self) -> Vec<TensorAttribute> {
        Vec::new()
    }

    /// On an optimizer: its slot variables, grouped by slot name in the optimizer's slot-name
    /// order (`get_slot_names()`; TensorFlow's v1 optimizers sort them). Slots of variables
    /// that are not in the graph are left out, as TensorFlow does.
    fn slot_variables(&self) -> Vec<SlotGroup<'_>> {
        Vec::new()
    }

    /// What makes two references the same object.
    fn identity(&self) -> ObjectIdentity {
        ObjectIdentity::of(self)
    }
}

/// The identity of an object: two references with equal identities are one node.
/// The default is the address together with the type, since a struct and its first field
/// share an address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectIdentity {
    address: usize,
    type_name: &'static str,
}

impl ObjectIdentity {
    /// The identity of the value `value` points to: its address and type.
    pub fn of<T: ?Sized>(value: &T) -> ObjectIdentity {
        ObjectIdentity {
            address: std::ptr::from_ref(value).cast::<()>() as usize,
            type_name: std::any::type_name::<T>(),
        }
    }
}

/// A named edge to a child.
pub struct Child<'a> {
    /// The child's local name, unescaped.
    pub name: Cow<'a, str>,
    /// The child.
    pub object: &'a dyn Checkpointable,
}

/// A tensor an object saves: an attribute of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorAttribute {
    /// The attribute name (`VARIABLE_VALUE`, or a `_serialize_to_tensors` name as TensorFlow
    /// stores it, already escaped once).
    pub name: String,
    /// The variable's shared name (name-based loading only); empty for other tensors.
    pub full_name: String,
}

/// The slots of one name: (variable, slot variable) pairs.
pub struct SlotGroup<'a> {
    /// The slot name (`m`, `v`).
    pub slot_name: Cow<'a, str>,
    /// Each variable with this slot, and its slot variable.
    pub slots: Vec<(&'a dyn Checkpointable, &'a dyn Checkpointable)>,
}

/// A plain object tree: the [`Checkpointable`] for frameworks without their own types.
/// Cloning an `Object` gives a handle to the same object (one node when attached twice);
/// the builder methods change an object only while it is not attached anywhere else.
#[derive(Clone, Debug, Default)]
pub struct Object(Arc<ObjectData>);

#[derive(Clone, Debug, Default)]
struct ObjectData {
    children: Vec<(String, Target)>,
    attributes: Vec<TensorAttribute>,
    slots: Vec<(String, Vec<(Object, Object)>)>,
}

#[derive(Clone, Debug)]
enum Target {
    Other(Object),
    Itself,
}

impl Object {
    /// An object without children or attributes (an empty `tf.Module`, list or dict).
    pub fn new() -> Object {
        Object::default()
    }

    /// A variable: one `VARIABLE_VALUE` attribute with the shared name `full_name`.
    pub fn variable(full_name: impl Into<String>) -> Object {
        Object::new().attribute(VARIABLE_VALUE, full_name)
    }

    /// Adds a child edge named `name` to `child` (a handle to it, so `child` stays the same
    /// object).
    pub fn child(mut self, name: impl Into<String>, child: &Object) -> Object {
        self.data()
            .children
            .push((name.into(), Target::Other(child.clone())));
        self
    }

    /// Adds a child edge named `name` to this object itself.
    pub fn child_self(mut self, name: impl Into<String>) -> Object {
        self.data().children.push((name.into(), Target::Itself));
        self
    }

    /// Adds an attribute (a tensor this object saves): `full_name` is a variable's shared
    /// name, empty for other tensors. Non-variable attributes (FORMATS.md 13.15) are named as
    /// the graph stores them (`_serialize_to_tensors` names escaped once, `py_state` for a
    /// `PythonState`, which is written after every other tensor). A legacy saveable (a
    /// `MutableHashTable`'s `table`) is one attribute whose values the [`Checkpoint`](crate::checkpoint::Checkpoint)
    /// holds under keys extending its checkpoint key (`…/table-keys`, `…/table-values`).
    pub fn attribute(mut self, name: impl Into<String>, full_name: impl Into<String>) -> Object {
        self.data().attributes.push(TensorAttribute {
            name: name.into(),
            full_name: full_name.into(),
        });
        self
    }

    /// On an optimizer: `slot` is slot `slot_name` of `variable`. Slot names keep the order of
    /// their first use.
    pub fn slot(mut self, slot_name: &str, variable: &Object, slot: &Object) -> Object {
        let slots = &mut self.data().slots;
        let pair = (variable.clone(), slot.clone());
        match slots.iter_mut().find(|(name, _)| name == slot_name) {
            Some((_, group)) => group.push(pair),
            None => slots.push((slot_name.to_owned(), vec![pair])),
        }
        self
    }

    fn data(&mut self) -> &mut ObjectData {
        Arc::make_mut(&mut self.0)
    }
}

impl Checkpointable for Object {
    fn children(&self) -> Vec<Child<'_>> {
        self.0
            .children
            .iter()
            .map(|(name, target)| Child {
                name: Cow::Borrowed(name),
                object: match target {
                    Target::Other(object) => object,
                    Target::Itself => self,
                },
            })
            .collect()
    }

    fn attributes(&self) -> Vec<TensorAttribute> {
        self.0.attributes.clone()
    }

    fn slot_variables(&self) -> Vec<SlotGroup<'_>> {
        self.0
            .slots
            .iter()
            .map(|(name, pairs)| SlotGroup {
                slot_name: Cow::Borrowed(name),
                slots: pairs
                    .iter()
                    .map(|(variable, slot)| {
                        (variable as &dyn Checkpointable, slot as &dyn Checkpointable)
                    })
                    .collect(),
            })
            .collect()
    }

    fn identity(&self) -> ObjectIdentity {
        ObjectIdentity::of(&*self.0)
    }
}

/// The object graph of everything reachable from `root` (node 0), as TensorFlow serializes it.
/// Linear in the graph: a node's path is kept as its parent and its local name, and is made
/// whole only for an error message; [`ObjectGraph::new`]'s caps bound the result.
pub fn build_object_graph(root: &dyn Checkpointable) -> Result<ObjectGraph, ObjectError> {
    let mut objects: Vec<&dyn Checkpointable> = vec![root];
    let mut parents = Parents(vec![None]);
    let mut ids = BTreeMap::from([(root.identity(), NodeId::ROOT)]);
    let mut nodes: Vec<ObjectNode> = Vec::new();
    let mut queue = VecDeque::from([NodeId::ROOT]);
    while let Some(id) = queue.pop_front() {
        let object = objects[id.index()];
        let mut node = object_node(object, || parents.text(id))?;
        let children = object.children();
        if let Some(name) = first_duplicate(children.iter().map(|child| &*child.name)) {
            return Err(ObjectError::DuplicateChild {
                path: parents.text(id),
                name: name.to_owned(),
            });
        }
        for child in children {
            let child_id = *ids.entry(child.object.identity()).or_insert_with(|| {
                let child_id = NodeId(objects.len() as u32);
                objects.push(child.object);
                parents.0.push(Some((id, child.name.to_string())));
                queue.push_back(child_id);
                child_id
            });
            node.children.push(ChildRef {
                node_id: child_id,
                local_name: child.name.into_owned(),
            });
        }
        nodes.push(node);
    }
    add_slot_variables(&mut nodes, &objects, &parents, &mut ids)?;
    let mut graph = ObjectGraph::new(nodes)?;
    graph.fill_checkpoint_keys();
    graph.fill_has_values();
    Ok(graph)
}

/// Each breadth-first node's parent and local name (`None` for the root): a path is made from
/// them only for a message.
struct Parents(Vec<Option<(NodeId, String)>>);

impl Parents {
    /// The path of `id` as messages print it (`(root).model.kernel`).
    fn text(&self, id: NodeId) -> String {
        let mut names: Vec<&str> = Vec::new();
        let mut at = id;
        while let Some(Some((parent, name))) = self.0.get(at.index()) {
            names.push(name);
            at = *parent;
        }
        names.reverse();
        display_path(&names)
    }
}

/// The first name `names` holds twice.
fn first_duplicate<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = std::collections::HashSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

/// After the breadth-first nodes: for each optimizer in id order, for each slot name in its
/// order, for each variable in id order, the slot variable gets the next id (13.3).
fn add_slot_variables(
    nodes: &mut Vec<ObjectNode>,
    objects: &[&dyn Checkpointable],
    parents: &Parents,
    ids: &mut BTreeMap<ObjectIdentity, NodeId>,
) -> Result<(), ObjectError> {
    for (optimizer, object) in objects.iter().enumerate() {
        for group in object.slot_variables() {
            let mut slots: Vec<(NodeId, &dyn Checkpointable)> = group
                .slots
                .iter()
                .filter_map(|(variable, slot)| Some((*ids.get(&variable.identity())?, *slot)))
                .collect();
            slots.sort_by_key(|(variable, _)| *variable);
            for (variable, slot) in slots {
                if let Some(tracked) = ids.get(&slot.identity()) {
                    return Err(ObjectError::SlotAlreadyTracked {
                        slot_name: group.slot_name.into_owned(),
                        variable: parents.text(variable),
                        tracked_as: if tracked.index() < parents.0.len() {
                            parents.text(*tracked)
                        } else {
                            tracked.to_string()
                        },
                    });
                }
                let slot_id = NodeId(nodes.len() as u32);
                ids.insert(slot.identity(), slot_id);
                let slot_path = || format!("{}.<slot {}>", parents.text(variable), group.slot_name);
                nodes.push(object_node(slot, slot_path)?);
                nodes[optimizer].slot_variables.push(SlotVariable {
                    original_variable_node_id: variable,
                    slot_name: group.slot_name.to_string(),
                    slot_variable_node_id: slot_id,
                });
            }
        }
    }
    Ok(())
}

/// A node with `object`'s attributes (keys filled in later); `path` names it in an error.
fn object_node(
    object: &dyn Checkpointable,
    path: impl FnOnce() -> String,
) -> Result<ObjectNode, ObjectError> {
    let attributes: Vec<Attribute> = object
        .attributes()
        .into_iter()
        .map(|attribute| Attribute {
            name: attribute.name,
            full_name: attribute.full_name,
            checkpoint_key: String::new(),
        })
        .collect();
    if let Some(name) = first_duplicate(attributes.iter().map(|attribute| &*attribute.name)) {
        return Err(ObjectError::DuplicateAttribute {
            path: path(),
            name: name.to_owned(),
        });
    }
    Ok(ObjectNode {
        attributes,
        ..ObjectNode::default()
    })
}

/// The attribute name of a `tf.train.experimental.PythonState` (a string of its `serialize()`).
pub const PYTHON_STATE: &str = "py_state";

/// The value keys of each attribute, by its checkpoint key, in key order: the checkpoint key
/// itself, or, for a legacy saveable whose checkpoint key is only a prefix of its bundle keys
/// (FORMATS.md 13.4: `table/.ATTRIBUTES/table` → `…/table-keys`, `…/table-values`), the value
/// keys extending it. A value key extending several attribute keys belongs to the longest.
/// A variable's value (`VARIABLE_VALUE`) and an attribute given its own key own no other key,
/// so a key that only extends one of those (a typo such as `…VARIABLE_VALUE_x`) is, like a
/// value key of no attribute, [`ObjectError::UnknownValue`].
pub fn value_keys<'a, V>(
    graph: &'a ObjectGraph,
    values: &'a BTreeMap<String, V>,
) -> Result<BTreeMap<&'a str, Vec<&'a str>>, ObjectError> {
    let mut owned: BTreeMap<&str, Vec<&str>> = (graph.nodes().iter())
        .flat_map(|node| &node.attributes)
        .map(|attribute| (attribute.checkpoint_key.as_str(), Vec::new()))
        .collect();
    let variable_suffix = format!("/{ATTRIBUTES}/{VARIABLE_VALUE}");
    for key in values.keys() {
        // Most value keys are an attribute's own: one lookup.
        if let Some(keys) = owned.get_mut(key.as_str()) {
            keys.push(key);
            continue;
        }
        let owner = (owned.range(..key.as_str()).rev())
            .map(|(attribute, _)| *attribute)
            .find(|attribute| key.starts_with(attribute))
            .filter(|attribute| {
                !attribute.ends_with(&variable_suffix) && !values.contains_key(*attribute)
            });
        match owner.and_then(|owner| owned.get_mut(owner)) {
            Some(keys) => keys.push(key),
            None => return Err(ObjectError::UnknownValue { key: key.clone() }),
        }
    }
    Ok(owned)
}
