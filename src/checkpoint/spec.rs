//! Object specs: the JSON input of `saveplan save` for object-based checkpoints, a
//! `tf.train.Checkpoint(**children)` of `tf.Module` trees described by the paths of its
//! variables:
//!
//! ```json
//! {
//!   "objects": [
//!     {"path": ["model", "dense", "kernel"], "dtype": "float32", "shape": [3, 4]},
//!     {"path": ["model", "dense", "bias"], "dtype": "float32", "shape": [4], "name": "bias"},
//!     {"slot": {"variable": ["model", "dense", "kernel"], "optimizer": ["optimizer"],
//!               "name": "m"}, "dtype": "float32", "shape": [3, 4]}
//!   ],
//!   "options": null
//! }
//! ```
//!
//! Each entry with a `path` is a variable reached from the checkpoint through the named
//! children (unescaped local names): the checkpoint's own children (its keyword arguments)
//! sorted by name, every deeper level in the order of first appearance in the list (as
//! `tf.Module` attribute assignment orders them). Objects on the way are plain modules.
//! `name` is what `tf.Variable(name=…)` was given (default `Variable`), stored as the
//! attribute's `full_name`; `device` places the variable (default the local CPU).
//! An entry with `slot` instead is slot variable `name` of the variable at `variable`, held by
//! the optimizer at `optimizer` (a module path, created like the others); an optimizer's slot
//! names are sorted, as TensorFlow's v1 optimizers list them. `options` is the spec file's
//! `options` object (TensorFlow's `CheckpointOptions`).
//!
//! Non-variable attributes (FORMATS.md 13.15): an entry with `attribute` is a named tensor of
//! the object at `path` (`{"path": ["custom"], "attribute": "first", …}`; `py_state` for a
//! `PythonState`); a legacy saveable whose bundle keys extend its checkpoint key has one
//! entry per `suffix` (`{"path": ["table"], "attribute": "table", "suffix": "-keys", …}`).
//! The path `["save_counter"]` (int64 scalar) is the checkpoint's own counter, written as
//! `save()` writes it. `also` lists more paths to the same variable: a tree cannot say that
//! one object hangs under two parents, and Keras 3 needs it (a model's weights are also its
//! optimizer's `_trainable_variables`; TensorFlow binds them through the model before the
//! optimizer is built).
//!
//! Nodes without values and edges in any order (what `saveplan spec` writes, see
//! [`super::object_spec_of`]): `{"path": […], "object": true}` declares an object holding no
//! values (a module, list or dict; its children are declared by their own entries), and
//! `{"path": […], "same_as": […]}` makes `path` another path to the object declared at
//! `same_as`, that edge taking this entry's place among its parent's children. A top-level
//! `"root": true` is `tf.train.Checkpoint(root=module)`: the root's children are not sorted
//! and it has a `root` edge to itself after them.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use saveplan_ir::DType;
use saveplan_ir::object_graph::{GraphIndex, ObjectGraph, VARIABLE_VALUE};
use serde::{Deserialize, Serialize};

use super::{
    Checkpoint, CheckpointError, Object, SAVE_COUNTER, SAVE_COUNTER_KEY, build_object_graph,
    display_path,
};
use crate::exec::HostTensor;
use crate::trace::TraceOptions;
use crate::trace::spec::{OptionsSpec, SpecFile};

/// A parsed object spec.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectSpec {
    /// The variables, in order.
    pub objects: Vec<ObjectEntry>,
    /// `CheckpointOptions`; `null` or absent for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<OptionsSpec>,
    /// `tf.train.Checkpoint(root=module)`: the root is the module, its children keep their
    /// order of first appearance (not sorted) and it has a `root` edge to itself, after them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root: bool,
}

/// One variable of an object spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectEntry {
    /// The local names from the checkpoint to the variable; empty for a slot variable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// A node that holds no values (a module, list or dict, possibly with no children):
    /// then `dtype`, `shape`, `name`, `attribute`, `suffix` and `slot` are absent, and the
    /// objects below it are declared by their own entries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub object: bool,
    /// The dtype by TensorFlow name (`float32`, `int64`, …); required but for `object`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dtype: String,
    /// The shape; required but for `object`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<i64>>,
    /// The device; the local CPU when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The variable's name (`full_name`); `Variable` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Set for a slot variable (then `path` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotSpec>,
    /// A named tensor of the object at `path` instead of a variable: the attribute name as
    /// the object graph stores it (`_serialize_to_tensors` names escaped once, `py_state`,
    /// a legacy saveable's name such as `table`). Several entries may name attributes of one
    /// object. Absent: the object is a variable (`VARIABLE_VALUE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute: Option<String>,
    /// For a legacy saveable whose bundle keys extend its checkpoint key (`-keys`,
    /// `-values` of a `MutableHashTable`'s `table`, `_STATE` of an iterator's `ITERATOR`):
    /// this value's suffix. One entry per suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// More paths to the same variable (an object reached several ways, as Keras 3 models
    /// and optimizers share their weights): one node, an edge from each parent. Its key
    /// uses the first-discovered path, as TensorFlow's does. On an `object` entry: more
    /// paths to that module.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Vec<String>>,
    /// This entry's `path` is another path to the object at this path, declared by another
    /// entry (an `also` given at its own place, so that the edge takes that place among its
    /// parent's children); the entry then has no other field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<Vec<String>>,
}

/// Which slot a slot variable is.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlotSpec {
    /// The path of the variable it is a slot of.
    pub variable: Vec<String>,
    /// The path of the optimizer holding it.
    pub optimizer: Vec<String>,
    /// The slot name (`m`, `v`).
    pub name: String,
}

/// What an object spec entry is wrong about.
#[derive(Debug, thiserror::Error)]
pub enum ObjectSpecError {
    /// The text is not an object spec.
    #[error("invalid object spec")]
    Json(#[source] serde_json::Error),
    /// An entry has neither a path nor a slot, or both.
    #[error("entry {index}: give either a non-empty `path` or a `slot`")]
    PathOrSlot {
        /// The entry's index.
        index: usize,
    },
    /// A dtype name is unknown.
    #[error("entry {index}: unknown dtype `{dtype}`")]
    UnknownDType {
        /// The entry's index.
        index: usize,
        /// The name given.
        dtype: String,
    },
    /// A shape has a negative dimension.
    #[error("entry {index}: invalid shape {shape:?}")]
    BadShape {
        /// The entry's index.
        index: usize,
        /// The shape given.
        shape: Vec<i64>,
    },
    /// A fresh variable would need more host memory than a constant may
    /// ([`saveplan_ir::MAX_TENSOR_ATTR_BYTES`]); refused before anything is allocated.
    #[error(
        "entry {index}: a {dtype} variable of shape {shape:?} would need {}, above the {}-byte limit for constants",
        match bytes { Some(bytes) => format!("{bytes} bytes"), None => "more than 2^64 bytes".to_owned() },
        saveplan_ir::MAX_TENSOR_ATTR_BYTES
    )]
    TooLarge {
        /// The entry's index.
        index: usize,
        /// The dtype.
        dtype: DType,
        /// The shape given.
        shape: Vec<i64>,
        /// The host bytes it would need; `None` when that overflows `u64`.
        bytes: Option<u64>,
    },
    /// Two entries name one object, or a path goes through a variable.
    #[error("entry {index}: `{path}` is already a {existing}")]
    PathTaken {
        /// The entry's index.
        index: usize,
        /// The path (`(root).a.b`).
        path: String,
        /// What is there: `variable` or `module`.
        existing: &'static str,
    },
    /// A slot names a variable no entry creates.
    #[error("entry {index}: slot of `{path}`, which is no variable of the spec")]
    NoSuchVariable {
        /// The entry's index.
        index: usize,
        /// The variable path.
        path: String,
    },
    /// A variable has two slots of one name from one optimizer.
    #[error("entry {index}: `{path}` already has slot `{name}`")]
    DuplicateSlot {
        /// The entry's index.
        index: usize,
        /// The variable path.
        path: String,
        /// The slot name.
        name: String,
    },
    /// The `options` object is invalid.
    #[error("invalid options")]
    Options(#[source] crate::trace::TraceError),
    /// A value does not have the spec's dtype and shape.
    #[error("`{key}`: the value is {found_dtype} {found_shape:?}, the spec says {dtype} {shape:?}")]
    ValueType {
        /// The checkpoint key.
        key: String,
        /// The spec's dtype.
        dtype: DType,
        /// The spec's shape.
        shape: Vec<i64>,
        /// The value's dtype.
        found_dtype: DType,
        /// The value's shape.
        found_shape: Vec<u64>,
    },
    /// Entries of the spec have no value (every declared attribute needs one).
    #[error("{count} of the spec's keys have no value: {first}")]
    MissingValues {
        /// How many.
        count: usize,
        /// The first few keys, comma-separated.
        first: String,
    },
    /// Values whose keys the spec does not declare (nothing undeclared is written).
    #[error("{count} values have keys the spec does not declare: {first}")]
    UnknownValues {
        /// How many.
        count: usize,
        /// The first few keys, comma-separated.
        first: String,
    },
    /// A `save_counter` entry that is not an int64 scalar variable.
    #[error("entry {index}: `save_counter` is the checkpoint's counter, an int64 scalar")]
    Counter {
        /// The entry's index.
        index: usize,
    },
    /// An entry holding a value has no `shape`.
    #[error("entry {index}: no `shape` (only an `object` entry has none)")]
    MissingShape {
        /// The entry's index.
        index: usize,
    },
    /// An `object` entry with a value's fields, or without a path.
    #[error(
        "entry {index}: an `object` or `same_as` entry has a `path` and no `dtype`, `shape`, `name`, `device`, `attribute`, `suffix` or `slot` (nor `also`, with `same_as`)"
    )]
    ObjectWithValues {
        /// The entry's index.
        index: usize,
    },
    /// A `same_as` path no entry declares.
    #[error("entry {index}: `same_as` names `{path}`, which no entry declares")]
    NoSuchObject {
        /// The entry's index.
        index: usize,
        /// The path named.
        path: String,
    },
    /// An `also` path inside the module it names.
    #[error("`{path}` is another path to a module it is inside of")]
    Cycle {
        /// The alias's path.
        path: String,
    },
    /// Building the object graph or the checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// One object of the spec's tree while it is being built.
#[derive(Default)]
struct TreeNode {
    /// Children in first-appearance order: (local name, node index).
    children: Vec<(String, usize)>,
    by_name: BTreeMap<String, usize>,
    /// The entries this node holds the values of (a variable: one).
    variable: Vec<usize>,
    /// Whether one of them is a variable (the node's only value).
    is_variable: bool,
    /// The attribute names and suffixes of the others.
    values: HashSet<(String, Option<String>)>,
    /// Set when this node is another path to the variable or module of that entry.
    alias_of: Option<usize>,
    /// Declared by an `object` entry (a module, which may have children).
    declared: bool,
}

impl ObjectEntry {
    /// Whether the entry declares a value (not an `object` or `same_as` entry).
    pub fn holds_value(&self) -> bool {
        !self.object && self.same_as.is_none()
    }

    /// The shape of entry `index` (which holds a value); [`ObjectSpecError::MissingShape`]
    /// when absent.
    pub fn dims(&self, index: usize) -> Result<&[i64], ObjectSpecError> {
        self.shape
            .as_deref()
            .ok_or(ObjectSpecError::MissingShape { index })
    }
}

impl ObjectSpec {
    /// Parses an object spec's text.
    pub fn parse(text: &str) -> Result<ObjectSpec, ObjectSpecError> {
        serde_json::from_str(text).map_err(ObjectSpecError::Json)
    }

    /// Whether a JSON text is an object spec (has a top-level `objects` key) rather than a
    /// plain spec file.
    pub fn is_object_spec(text: &str) -> bool {
        // A key reads `objects` only if the text holds `"objects"` or an escape: a plain spec
        // without either is told apart by two scans of its bytes, not a parse of its JSON.
        let bytes = text.as_bytes();
        if memchr::memmem::find(bytes, b"\"objects\"").is_none()
            && memchr::memchr(b'\\', bytes).is_none()
        {
            return false;
        }
        // The values are checked and skipped, never built: a plain spec of 100,000 variables
        // made a tree of a million JSON values here, 0.2 s before the spec was even parsed.
        serde_json::from_str::<HashMap<String, serde::de::IgnoredAny>>(text)
            .is_ok_and(|map| map.contains_key("objects"))
    }

    /// Whether entry `index` is the checkpoint's own `save_counter` (path `["save_counter"]`,
    /// an int64 scalar; anything else at that path is an error): written and restored as the
    /// counter, not as a child of the root.
    pub(super) fn is_counter(&self, index: usize) -> Result<bool, ObjectSpecError> {
        let entry = &self.objects[index];
        if entry.slot.is_some() || entry.path != [SAVE_COUNTER] {
            return Ok(false);
        }
        let scalar = entry.shape.as_ref().is_some_and(Vec::is_empty);
        if entry.dtype != "int64" || !scalar || entry.attribute.is_some() || entry.object {
            return Err(ObjectSpecError::Counter { index });
        }
        Ok(true)
    }

    /// The trace options of `options`.
    pub fn trace_options(&self) -> Result<TraceOptions, ObjectSpecError> {
        SpecFile {
            variables: Vec::new(),
            options: self.options.clone(),
        }
        .options()
        .map_err(ObjectSpecError::Options)
    }

    /// The object graph of the spec and each entry's checkpoint key, in entry order.
    pub fn object_graph(&self) -> Result<(ObjectGraph, Vec<String>), ObjectSpecError> {
        let mut tree = vec![TreeNode::default()];
        // Pass 1: every path, in list order (optimizers of slots included).
        for (index, entry) in self.objects.iter().enumerate() {
            if self.is_counter(index)? {
                continue;
            }
            if !entry.holds_value() {
                self.declare_object(&mut tree, index)?;
                continue;
            }
            match (&entry.slot, entry.path.is_empty()) {
                (None, false) => {
                    let node = walk(&mut tree, index, &entry.path)?;
                    // A variable takes the whole node; attributes take their name and suffix.
                    let tree_node = &mut tree[node];
                    let clash = match &entry.attribute {
                        None => !tree_node.variable.is_empty(),
                        Some(attribute) => {
                            tree_node.is_variable
                                || !tree_node
                                    .values
                                    .insert((attribute.clone(), entry.suffix.clone()))
                        }
                    };
                    if clash
                        || tree_node.alias_of.is_some()
                        || tree_node.declared
                        || !tree_node.children.is_empty()
                    {
                        return Err(taken(&tree, index, &entry.path, node));
                    }
                    tree_node.is_variable |= entry.attribute.is_none();
                    tree_node.variable.push(index);
                    for path in &entry.also {
                        let alias = walk(&mut tree, index, path)?;
                        let tree_node = &tree[alias];
                        if !is_fresh(tree_node) {
                            return Err(taken(&tree, index, path, alias));
                        }
                        tree[alias].alias_of = Some(index);
                    }
                }
                (Some(slot), true) => {
                    let node = walk(&mut tree, index, &slot.optimizer)?;
                    if !tree[node].variable.is_empty() {
                        return Err(taken(&tree, index, &slot.optimizer, node));
                    }
                }
                _ => return Err(ObjectSpecError::PathOrSlot { index }),
            }
        }
        // The checkpoint's keyword arguments are set in sorted order.
        if !self.root {
            tree[0].children.sort_by(|a, b| a.0.cmp(&b.0));
        }
        // Pass 2: the objects, leaves first, then modules from the deepest.
        let name = |index: usize| {
            self.objects[index]
                .name
                .clone()
                .unwrap_or_else(|| "Variable".to_owned())
        };
        let is_variable = |index: usize| self.objects[index].attribute.is_none();
        let mut objects: Vec<Option<Object>> = vec![None; tree.len()];
        let mut slot_objects: BTreeMap<usize, Object> = BTreeMap::new();
        // (optimizer node, slot name, variable node) → slot entry.
        let mut slots: BTreeMap<(usize, String, usize), usize> = BTreeMap::new();
        for (node, tree_node) in tree.iter().enumerate() {
            let mut object: Option<Object> = None;
            // The attribute names already on `object` (suffixes of one legacy saveable share one).
            let mut attributes: HashSet<&str> = HashSet::new();
            for &index in &tree_node.variable {
                let entry = &self.objects[index];
                object = Some(match &entry.attribute {
                    None => Object::variable(name(index)),
                    Some(attribute) => {
                        let object = object.take().unwrap_or_default();
                        let full_name = entry.name.clone().unwrap_or_default();
                        if attributes.insert(attribute.as_str()) {
                            object.attribute(attribute.clone(), full_name)
                        } else {
                            object
                        }
                    }
                });
            }
            objects[node] = object;
        }
        for (index, entry) in self.objects.iter().enumerate() {
            let Some(slot) = &entry.slot else { continue };
            let variable = find(&tree, &slot.variable)
                .filter(|&node| tree[node].variable.iter().any(|&i| is_variable(i)))
                .ok_or_else(|| ObjectSpecError::NoSuchVariable {
                    index,
                    path: path_text(&slot.variable),
                })?;
            let optimizer = find(&tree, &slot.optimizer).expect("pass 1 created it");
            match slots.entry((optimizer, slot.name.clone(), variable)) {
                Entry::Occupied(_) => {
                    return Err(ObjectSpecError::DuplicateSlot {
                        index,
                        path: path_text(&slot.variable),
                        name: slot.name.clone(),
                    });
                }
                Entry::Vacant(vacant) => {
                    vacant.insert(index);
                }
            }
            slot_objects.insert(index, Object::variable(name(index)));
        }
        // Pass 3: modules and aliases, each after what it refers to (its children; an
        // alias's object), depth first; an alias inside the module it names is a cycle.
        let mut expanded = vec![false; tree.len()];
        for start in (0..tree.len()).rev() {
            let mut stack = vec![start];
            while let Some(&node) = stack.last() {
                if objects[node].is_some() {
                    stack.pop();
                    continue;
                }
                let target = |index: usize| {
                    let entry = &self.objects[index];
                    let path = entry.same_as.as_ref().unwrap_or(&entry.path);
                    find(&tree, path).ok_or_else(|| ObjectSpecError::NoSuchObject {
                        index,
                        path: path_text(path),
                    })
                };
                let pending: Vec<usize> = match tree[node].alias_of {
                    Some(index) => vec![target(index)?],
                    None => tree[node]
                        .children
                        .iter()
                        .map(|(_, child)| *child)
                        .collect(),
                }
                .into_iter()
                .filter(|&dep| objects[dep].is_none())
                .collect();
                if !pending.is_empty() {
                    if std::mem::replace(&mut expanded[node], true) {
                        return Err(ObjectSpecError::Cycle {
                            path: path_text(&tree_path(&tree, node)),
                        });
                    }
                    stack.extend(pending);
                    continue;
                }
                stack.pop();
                if let Some(index) = tree[node].alias_of {
                    objects[node] = objects[target(index)?].clone();
                    continue;
                }
                let mut object = Object::new();
                for (child_name, child) in &tree[node].children {
                    let child = objects[*child].as_ref().expect("children are built first");
                    object = object.child(child_name.clone(), child);
                }
                if node == 0 && self.root {
                    object = object.child_self("root");
                }
                // This node's slots: the keys from (node, "", 0) up to the next node's.
                let own = (node, String::new(), 0)..(node + 1, String::new(), 0);
                for ((_, slot_name, variable), index) in slots.range(own) {
                    let variable = objects[*variable].as_ref().expect("variables are built");
                    object = object.slot(slot_name, variable, &slot_objects[index]);
                }
                objects[node] = Some(object);
            }
        }
        let root = objects[0].take().expect("the root is built");
        let graph = build_object_graph(&root).map_err(CheckpointError::from)?;
        let keys = self.keys(&graph)?;
        Ok((graph, keys))
    }

    /// Declares the module of `object` entry `index` and its other paths (pass 1).
    fn declare_object(
        &self,
        tree: &mut Vec<TreeNode>,
        index: usize,
    ) -> Result<(), ObjectSpecError> {
        let entry = &self.objects[index];
        if entry.same_as.is_some() && (entry.object || !entry.also.is_empty()) {
            return Err(ObjectSpecError::ObjectWithValues { index });
        }
        let holds_values = !entry.dtype.is_empty()
            || entry.shape.is_some()
            || entry.name.is_some()
            || entry.attribute.is_some()
            || entry.suffix.is_some()
            || entry.slot.is_some()
            || entry.device.is_some();
        if holds_values || entry.path.is_empty() {
            return Err(ObjectSpecError::ObjectWithValues { index });
        }
        let node = walk(tree, index, &entry.path)?;
        if entry.same_as.is_some() {
            if !is_fresh(&tree[node]) {
                return Err(taken(tree, index, &entry.path, node));
            }
            tree[node].alias_of = Some(index);
            return Ok(());
        }
        let tree_node = &tree[node];
        if !tree_node.variable.is_empty() || tree_node.alias_of.is_some() || tree_node.declared {
            return Err(taken(tree, index, &entry.path, node));
        }
        tree[node].declared = true;
        for path in &entry.also {
            let alias = walk(tree, index, path)?;
            if !is_fresh(&tree[alias]) {
                return Err(taken(tree, index, path, alias));
            }
            tree[alias].alias_of = Some(index);
        }
        Ok(())
    }

    /// Each entry's checkpoint key in `graph` (`""` for an `object` entry): each path followed
    /// through an index of the graph's edges and slots, so the cost is the entries' paths, not
    /// their product with a node's children.
    fn keys(&self, graph: &ObjectGraph) -> Result<Vec<String>, ObjectSpecError> {
        let lookup = GraphIndex::new(graph);
        let node_at = |path: &[String]| lookup.node_at(path);
        let mut keys = Vec::with_capacity(self.objects.len());
        for (index, entry) in self.objects.iter().enumerate() {
            if self.is_counter(index)? {
                keys.push(SAVE_COUNTER_KEY.to_owned());
                continue;
            }
            if !entry.holds_value() {
                keys.push(String::new());
                continue;
            }
            let node = match &entry.slot {
                None => node_at(&entry.path),
                Some(slot) => node_at(&slot.optimizer).and_then(|optimizer| {
                    let variable = node_at(&slot.variable)?;
                    lookup.slot(optimizer, variable, &slot.name)
                }),
            };
            let name = entry.attribute.as_deref().unwrap_or(VARIABLE_VALUE);
            let key = node
                .and_then(|node| lookup.attribute(node, name))
                .map(|attribute| {
                    let suffix = entry.suffix.as_deref().unwrap_or_default();
                    format!("{}{suffix}", attribute.checkpoint_key)
                })
                .ok_or(ObjectSpecError::PathOrSlot { index })?;
            keys.push(key);
        }
        Ok(keys)
    }

    /// A [`Checkpoint`] of the spec with `values` (by checkpoint key), each checked against
    /// its entry's dtype and shape, variables on their devices, written with the spec's
    /// options.
    pub fn checkpoint(
        &self,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Checkpoint, ObjectSpecError> {
        let (graph, keys) = self.object_graph()?;
        self.checkpoint_of(graph, keys, values)
    }

    /// [`ObjectSpec::checkpoint`] of the spec's object graph and keys, as
    /// [`ObjectSpec::object_graph`] returned them: built before the values are at hand (the CLI
    /// builds them while it reads the values file).
    pub fn checkpoint_of(
        &self,
        graph: ObjectGraph,
        keys: Vec<String>,
        values: BTreeMap<String, HostTensor>,
    ) -> Result<Checkpoint, ObjectSpecError> {
        for (index, (entry, key)) in self.objects.iter().zip(&keys).enumerate() {
            if !entry.holds_value() {
                continue;
            }
            let entry_shape = entry.dims(index)?;
            let dtype =
                DType::parse(&entry.dtype).ok_or_else(|| ObjectSpecError::UnknownDType {
                    index,
                    dtype: entry.dtype.clone(),
                })?;
            if entry_shape.iter().any(|&dim| dim < 0) {
                return Err(ObjectSpecError::BadShape {
                    index,
                    shape: entry_shape.to_vec(),
                });
            }
            if let Some(value) = values.get(key) {
                let same_shape = value.shape().len() == entry_shape.len()
                    && (value.shape().iter().zip(entry_shape))
                        .all(|(&dim, &entry)| dim as i64 == entry);
                if value.dtype() != dtype || !same_shape {
                    return Err(ObjectSpecError::ValueType {
                        key: key.clone(),
                        dtype,
                        shape: entry_shape.to_vec(),
                        found_dtype: value.dtype(),
                        found_shape: value.shape().to_vec(),
                    });
                }
            }
        }
        let mut values = values;
        // A values checkpoint made by `save()` holds a counter: it is written only when the
        // spec lists `["save_counter"]`, as `write()` of a tree without one writes none.
        let counter = values
            .remove(SAVE_COUNTER_KEY)
            .filter(|_| keys.iter().any(|key| key == SAVE_COUNTER_KEY));
        check_declared(&keys, &values)?;
        let mut checkpoint = Checkpoint::new(graph, values)?.with_options(self.trace_options()?);
        if let Some(counter) = counter {
            checkpoint.set_save_counter(counter.as_i64_scalar());
        }
        for (entry, key) in self.objects.iter().zip(keys) {
            if let Some(device) = &entry.device {
                checkpoint = checkpoint.with_device(key, device.clone());
            }
        }
        Ok(checkpoint)
    }
}

impl ObjectSpec {
    /// A fresh `tf.train.Checkpoint(**children)` of the spec: every variable zero (empty
    /// strings for `string`), as `tf.Variable(np.zeros(shape, dtype))` creates it; the
    /// starting point of a restore by object.
    pub fn fresh_checkpoint(&self) -> Result<Checkpoint, ObjectSpecError> {
        let (_, keys) = self.object_graph()?;
        let mut values = BTreeMap::new();
        for (index, (entry, key)) in self.objects.iter().zip(keys).enumerate() {
            if !entry.holds_value() {
                continue;
            }
            let entry_shape = entry.dims(index)?;
            let dtype =
                DType::parse(&entry.dtype).ok_or_else(|| ObjectSpecError::UnknownDType {
                    index,
                    dtype: entry.dtype.clone(),
                })?;
            let bad_shape = || ObjectSpecError::BadShape {
                index,
                shape: entry_shape.to_vec(),
            };
            let shape = entry_shape
                .iter()
                .map(|&dim| u64::try_from(dim).map_err(|_| bad_shape()))
                .collect::<Result<Vec<u64>, _>>()?;
            // Bounded as a constant is, before anything is allocated: zeros of a declared
            // shape cost their full size whatever the checkpoint holds.
            let bytes = saveplan_ir::Tensor {
                dtype: if dtype == DType::Variant {
                    DType::String
                } else {
                    dtype
                },
                shape: Some(saveplan_ir::Shape::from_dims(entry_shape)),
                version_number: 0,
                values: saveplan_ir::TensorValues::Empty,
            }
            .filled_bytes();
            if bytes.is_none_or(|bytes| bytes > saveplan_ir::MAX_TENSOR_ATTR_BYTES) {
                return Err(ObjectSpecError::TooLarge {
                    index,
                    dtype,
                    shape: entry_shape.to_vec(),
                    bytes,
                });
            }
            let count = crate::exec::tensor::element_count(&shape).map_err(|_| bad_shape())?;
            let value = match dtype.element_size() {
                _ if dtype == DType::String => {
                    HostTensor::from_strings(shape, vec![Vec::new(); count])
                }
                _ if dtype == DType::Variant => {
                    HostTensor::from_variants(shape, vec![Vec::new(); count])
                }
                Some(size) => HostTensor::from_bytes(dtype, shape, vec![0; count * size]),
                None => {
                    return Err(ObjectSpecError::UnknownDType {
                        index,
                        dtype: entry.dtype.clone(),
                    });
                }
            }
            .map_err(|_| bad_shape())?;
            values.insert(key, value);
        }
        self.checkpoint(values)
    }
}

/// Every key the spec declares (the counter aside) has a value, and every value a declared
/// key: a missing attribute or an undeclared one would make a checkpoint the spec cannot
/// restore.
fn check_declared(
    keys: &[String],
    values: &BTreeMap<String, HostTensor>,
) -> Result<(), ObjectSpecError> {
    /// How many keys an error names.
    const NAMED: usize = 3;
    let first = |keys: &[&str]| {
        let mut text = keys[..keys.len().min(NAMED)].join(", ");
        if keys.len() > NAMED {
            text.push_str(", …");
        }
        text
    };
    let mut declared: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|key| *key != SAVE_COUNTER_KEY && !key.is_empty())
        .collect();
    declared.sort_unstable();
    declared.dedup();
    // Both in key order: one merge finds the declared keys without a value and the values
    // under no declared key.
    let (mut missing, mut unknown) = (Vec::new(), Vec::new());
    let mut given = values.keys().map(String::as_str).peekable();
    for &key in &declared {
        while let Some(value_key) = given.next_if(|value_key| *value_key < key) {
            unknown.push(value_key);
        }
        if given.next_if_eq(&key).is_none() {
            missing.push(key);
        }
    }
    unknown.extend(given);
    if !missing.is_empty() {
        return Err(ObjectSpecError::MissingValues {
            count: missing.len(),
            first: first(&missing),
        });
    }
    if !unknown.is_empty() {
        return Err(ObjectSpecError::UnknownValues {
            count: unknown.len(),
            first: first(&unknown),
        });
    }
    Ok(())
}

/// The node at `path`, creating modules on the way; a variable on the way is an error.
fn walk(tree: &mut Vec<TreeNode>, index: usize, path: &[String]) -> Result<usize, ObjectSpecError> {
    let mut node = 0;
    for (depth, name) in path.iter().enumerate() {
        if !tree[node].variable.is_empty() || tree[node].alias_of.is_some() {
            return Err(taken(tree, index, &path[..depth], node));
        }
        node = match tree[node].by_name.get(name) {
            Some(&child) => child,
            None => {
                let child = tree.len();
                tree.push(TreeNode::default());
                tree[node].by_name.insert(name.clone(), child);
                tree[node].children.push((name.clone(), child));
                child
            }
        };
    }
    Ok(node)
}

/// Whether nothing was declared at a node yet (no values, alias, children or `object` entry).
fn is_fresh(node: &TreeNode) -> bool {
    node.variable.is_empty()
        && node.alias_of.is_none()
        && !node.declared
        && node.children.is_empty()
}

/// The path of a node of the tree, for a message.
fn tree_path(tree: &[TreeNode], node: usize) -> Vec<String> {
    // Each node's parent, found from the children lists (only for an error).
    let mut path = Vec::new();
    let mut at = node;
    while let Some((parent, name)) = (tree.iter().enumerate()).find_map(|(parent, n)| {
        n.children
            .iter()
            .find(|(_, c)| *c == at)
            .map(|(name, _)| (parent, name))
    }) {
        path.push(name.clone());
        at = parent;
    }
    path.reverse();
    path
}

fn find(tree: &[TreeNode], path: &[String]) -> Option<usize> {
    path.iter()
        .try_fold(0, |node, name| tree[node].by_name.get(name).copied())
}

fn taken(tree: &[TreeNode], index: usize, path: &[String], node: usize) -> ObjectSpecError {
    ObjectSpecError::PathTaken {
        index,
        path: path_text(path),
        existing: if !tree[node].variable.is_empty() || tree[node].alias_of.is_some() {
            "variable"
        } else {
            "module"
        },
    }
}

fn path_text(path: &[String]) -> String {
    display_path(&path.iter().map(String::as_str).collect::<Vec<_>>())
}
