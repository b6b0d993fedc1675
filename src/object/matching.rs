//! Matching a checkpoint against our objects (FORMATS.md 13.10–13.13): which stored value each
//! of our values takes, the report of every value and the load status, before any value is
//! read. One matcher, two ways in, sharing their opening (our graph with `save_counter`, our
//! values by key, the report of a value the checkpoint lacks):
//!
//! - **By object** (the checkpoint has an object graph): the checkpoint's object graph is
//!   walked breadth-first against ours: node 0 is bound to our root; for each bound node, each
//!   child edge to a node not yet bound is looked up among our object's children **by local
//!   name** (an edge to an already bound node is skipped, so a node shared in the checkpoint
//!   restores only the object found first); slot variables are bound through their optimizer,
//!   variable and slot name. Each bound pair's attributes match by attribute name, and values
//!   are read from the `checkpoint_key` the checkpoint stores, never from a key recomputed
//!   from our graph. A legacy saveable's attribute (13.15) matches all its values: our value
//!   keys extending its key, read from the checkpoint's key plus the same suffixes.
//! - **By name** (a TF1 `Saver` checkpoint, 13.13): every attribute of every object of ours is
//!   looked up by its `full_name` (the variable's shared name): when that exact name is a key
//!   of the checkpoint the value is read from it with the checkpoint's dtype (a different dtype
//!   of ours fails at assignment, as TensorFlow's `AssignVariableOp` does); otherwise the
//!   object is recorded as not restored. All three assertions of the status are the same check
//!   (TensorFlow's `NameBasedSaverStatus`): no attribute of ours left unrestored,
//!   `save_counter` excepted. Checkpoint keys nobody asked for never fail an assertion; the
//!   report lists them as unused. One difference: TensorFlow restores each variable with its
//!   own `RestoreV2` and assignment, so a dtype mismatch leaves the variables before it
//!   restored; here, as by object, every dtype and shape is checked first ([`failure`]) and a
//!   failing restore changes nothing.
//!
//! Restore-on-create (13.12) matches each pending restore again and keeps, newest first, the
//! values of objects attached since ([`NewValues`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use saveplan_ir::DType;
use saveplan_ir::object_graph::{
    Attribute, GraphIndex, NodeId, ObjectGraph, ObjectNode, VARIABLE_VALUE,
};

use super::build::value_keys;
use super::counter::{Counter, SAVE_COUNTER_KEY, with_save_counter};
use super::error::ObjectError;
use super::repr::{names_and_paths, node_repr, python_list, python_shape, shape_of, tensor_type};
use super::status::{
    Checks, LoadStatus, Matched, Pair, ReportCounts, ReportValue, RestoreKind, RestoreReport,
    ValueStatus,
};
use super::values::{OurValue, StoredEntry, StoredIndex};

/// Our side of a match: the objects (without `save_counter`), the value of every attribute by
/// checkpoint key, and `save_counter`'s value once it exists.
#[derive(Clone, Copy, Debug)]
pub struct Ours<'a, V> {
    /// The object graph, without `save_counter`.
    pub graph: &'a ObjectGraph,
    /// The values, by checkpoint key (legacy saveables' by value key).
    pub values: &'a BTreeMap<String, V>,
    /// `save_counter`'s value, if it exists.
    pub save_counter: Option<i64>,
}

/// The checkpoint's object graph, as the matcher reads it.
#[derive(Clone, Copy, Debug)]
pub struct Theirs<'a> {
    /// The graph.
    pub graph: &'a ObjectGraph,
    /// A node as TensorFlow's messages quote it (`str(node)`: protobuf text format, which
    /// the object layer does not speak; `export::object_graph::node_text`).
    pub node_text: fn(&ObjectNode) -> String,
}

/// Matches the checkpoint `stored` (at `prefix`, for the report and a name-based status)
/// against `ours` for a restore of `kind`: by object when `theirs`, the checkpoint's object
/// graph, is given, else by name. Reads no value.
pub fn match_stored<V: OurValue>(
    ours: &Ours<'_, V>,
    theirs: Option<Theirs<'_>>,
    stored: &StoredIndex<'_>,
    prefix: &str,
    kind: RestoreKind,
) -> Result<Matched, ObjectError> {
    // `restore()` creates the counter (at 0) when it does not exist; `read()` does not.
    let counter = match (kind, ours.save_counter) {
        (_, Some(value)) => Some(value),
        (RestoreKind::Restore, None) => Some(0),
        (RestoreKind::Read, None) => None,
    };
    let graph = match counter {
        Some(_) => with_save_counter(ours.graph),
        None => ours.graph.clone(),
    };
    let (names, paths) = names_and_paths(&graph);
    let side = Side {
        graph: &graph,
        values: ours.values,
        counter: Counter::new(counter.unwrap_or(0)),
        owned: value_keys(&graph, ours.values)?,
        names,
        paths,
    };
    let (pairs, values, status) = match theirs {
        Some(theirs) => side.match_objects(theirs, stored),
        None => side.match_names(stored, prefix),
    };
    let mut counts = ReportCounts::default();
    values.iter().for_each(|value| counts.add(value.status));
    Ok(Matched {
        kind,
        pairs,
        report: RestoreReport {
            prefix: prefix.to_owned(),
            name_based: theirs.is_none(),
            counts,
            values,
        },
        status,
    })
}

/// Our side, as both ways of matching read it.
struct Side<'a, V> {
    /// Our graph, with `save_counter` when the restore has it.
    graph: &'a ObjectGraph,
    values: &'a BTreeMap<String, V>,
    /// `save_counter`'s value: the one attribute without an entry in `values`.
    counter: Counter,
    /// The value keys of each attribute ([`value_keys`]).
    owned: BTreeMap<&'a str, Vec<&'a str>>,
    /// TensorFlow's name of each node.
    names: Vec<String>,
    /// Each node's path.
    paths: Vec<Vec<String>>,
}

impl<'a, V: OurValue> Side<'a, V> {
    fn value_of(&self, key: &str) -> &dyn OurValue {
        match self.values.get(key) {
            Some(value) => value,
            None => &self.counter,
        }
    }

    fn program(&self, key: &str) -> (DType, Vec<i64>) {
        let value = self.value_of(key);
        (value.dtype(), shape_of(value))
    }

    /// The value keys of the attribute whose key is `key`: itself, or a legacy saveable's
    /// several.
    fn keys_of<'k>(&self, key: &'k str) -> Vec<&'k str>
    where
        'a: 'k,
    {
        let keys = self.owned.get(key).filter(|keys| !keys.is_empty());
        keys.map_or_else(|| vec![key], Clone::clone)
    }

    /// The report values of our `attribute` at `path` that the checkpoint lacks: one per
    /// value key.
    fn missing(&self, path: &[String], attribute: &Attribute) -> Vec<ReportValue> {
        self.keys_of(&attribute.checkpoint_key)
            .into_iter()
            .map(|value_key| ReportValue {
                path: path.to_vec(),
                attribute: attribute.name.clone(),
                status: ValueStatus::Missing,
                checkpoint_key: None,
                program: Some(tensor_type(self.program(value_key))),
                checkpoint: None,
            })
            .collect()
    }

    /// `repr()` of our node `node`.
    fn repr(&self, node: NodeId) -> String {
        node_repr(self.graph.node(node), &self.names[node.index()], &|key| {
            self.value_of(key)
        })
    }

    /// By object: the pairs, the report's values (sorted) and the status.
    fn match_objects(
        &self,
        theirs: Theirs<'_>,
        stored: &StoredIndex<'_>,
    ) -> (Vec<Pair>, Vec<ReportValue>, LoadStatus) {
        let Theirs {
            graph: theirs,
            node_text,
        } = theirs;
        let ours = self.graph;
        let bound = bind(theirs, ours);
        let mut ours_bound = vec![false; ours.nodes().len()];
        for our in bound.iter().flatten() {
            ours_bound[our.index()] = true;
        }
        let (their_names, their_paths) = names_and_paths(theirs);

        let mut pairs = Vec::new();
        let mut values = Vec::new();
        let mut unused_attributes: Vec<(usize, Vec<String>)> = Vec::new();
        let mut warnings = Vec::new();
        for (index, node) in theirs.nodes().iter().enumerate() {
            let Some(our_id) = bound[index] else {
                for attribute in &node.attributes {
                    values.extend(unused_values(
                        stored,
                        &their_paths[index],
                        &attribute.name,
                        &attribute.checkpoint_key,
                    ));
                }
                if !node.attributes.is_empty() {
                    warnings.push(format!(
                        "Value in checkpoint could not be found in the restored object: {}",
                        their_names[index]
                    ));
                }
                continue;
            };
            let our = ours.node(our_id);
            let mut unused = Vec::new();
            for attribute in &node.attributes {
                let Some(our_attribute) = our.attributes.iter().find(|a| a.name == attribute.name)
                else {
                    unused.push(attribute.name.clone());
                    values.extend(unused_values(
                        stored,
                        &their_paths[index],
                        &attribute.name,
                        &attribute.checkpoint_key,
                    ));
                    continue;
                };
                // A legacy saveable's values are its key plus suffixes, in both.
                let our_key = our_attribute.checkpoint_key.as_str();
                for value_key in self.keys_of(our_key) {
                    let suffix = &value_key[our_key.len()..];
                    let their_key = format!("{}{suffix}", attribute.checkpoint_key);
                    let found = stored
                        .entry(&their_key)
                        .map(|entry| (entry.dtype, entry.shape.to_vec()));
                    let program = self.program(value_key);
                    let status = match &found {
                        Some(found) if *found == program => ValueStatus::Matched,
                        _ => ValueStatus::Mismatched,
                    };
                    values.push(ReportValue {
                        path: self.paths[our_id.index()].clone(),
                        attribute: attribute.name.clone(),
                        status,
                        checkpoint_key: Some(their_key.clone()),
                        program: Some(tensor_type(program.clone())),
                        checkpoint: found.clone().map(tensor_type),
                    });
                    pairs.push(Pair {
                        checkpoint_key: their_key,
                        our_key: value_key.to_owned(),
                        name: self.names[our_id.index()].clone(),
                        program,
                        stored: found,
                        by_name: false,
                    });
                }
            }
            if !unused.is_empty() {
                unused_attributes.push((index, unused));
            }
            let mut missing: Vec<&str> = Vec::new();
            for attribute in &our.attributes {
                if node.attributes.iter().any(|t| t.name == attribute.name) {
                    continue;
                }
                missing.push(&attribute.name);
                values.extend(self.missing(&self.paths[our_id.index()], attribute));
            }
            if !missing.is_empty() {
                warnings.push(format!(
                    "An attribute in the restored object could not be found in the checkpoint. Object: {}, attribute: {}",
                    their_names[index],
                    python_list(&missing)
                ));
            }
        }
        let mut unbound_reprs = Vec::new();
        for (index, node) in ours.nodes().iter().enumerate() {
            if ours_bound[index] || node.attributes.is_empty() {
                continue;
            }
            unbound_reprs.push(self.repr(NodeId(index as u32)));
            for attribute in &node.attributes {
                values.extend(self.missing(&self.paths[index], attribute));
            }
        }
        unbound_reprs.sort();
        sort_report(&mut values);

        let existing = (!unbound_reprs.is_empty()).then(|| {
            let shown = unbound_reprs.len().min(10);
            format!(
                "Found {} Python objects that were not bound to checkpointed values, likely due to changes in the Python program. Showing {shown} of {} unmatched objects: [{}]",
                unbound_reprs.len(),
                unbound_reprs.len(),
                unbound_reprs[..shown].join(", ")
            )
        });
        let unresolved = theirs.nodes().iter().enumerate().find_map(|(index, node)| {
            (!node.attributes.is_empty() && bound[index].is_none()).then(|| {
                format!(
                    "Unresolved object in checkpoint {}: {}",
                    their_names[index],
                    node_text(node)
                )
            })
        });
        let unused_message = (!unused_attributes.is_empty()).then(|| {
            let lines: Vec<String> = unused_attributes
                .iter()
                .map(|(index, names)| {
                    let our = bound[*index].expect("unused attributes are of bound nodes");
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!(
                        "{} ({}): {}",
                        their_names[*index],
                        self.repr(our),
                        python_list(&names)
                    )
                })
                .collect();
            format!(
                "Unused attributes in these objects (the attributes exist in the checkpoint but were not restored):\n{}",
                lines.join("\n")
            )
        });
        let n_bound = bound.iter().filter(|b| b.is_some()).count();
        let nontrivial = (n_bound <= 1).then(|| {
            if unbound_reprs.is_empty() {
                "Nothing to load.\n\nNo dependencies have been added to <tf.train.Checkpoint> yet."
                    .to_owned()
            } else {
                format!(
                    "Nothing except the root object matched a checkpointed value. Typically this means that the checkpoint does not match the Python program. The following objects have no matching checkpointed value: [{}]",
                    unbound_reprs.join(", ")
                )
            }
        });
        if !warnings.is_empty() {
            warnings.insert(0, "Detecting that an object or model or tf.train.Checkpoint is being deleted with unrestored values. See the following logs for the specific values in question. To silence these warnings, use `status.expect_partial()`. See https://www.tensorflow.org/api_docs/python/tf/train/Checkpoint#restorefor details about the status object returned by the restore function.".to_owned());
        }
        let checks = Checks {
            consumed: existing.clone().or(unresolved).or(unused_message),
            existing,
            nontrivial,
        };
        let status = LoadStatus {
            checks: Some(checks),
            warnings,
            partial: false,
            name_based: None,
        };
        (pairs, values, status)
    }

    /// By name: the pairs, the report's values (sorted) and the status.
    fn match_names(
        &self,
        stored: &StoredIndex<'_>,
        prefix: &str,
    ) -> (Vec<Pair>, Vec<ReportValue>, LoadStatus) {
        let mut pairs = Vec::new();
        let mut values = Vec::new();
        let mut taken: BTreeSet<&str> = BTreeSet::new();
        let mut not_restored = Vec::new();
        for (index, node) in self.graph.nodes().iter().enumerate() {
            let mut missing: Vec<&str> = Vec::new();
            for attribute in &node.attributes {
                let entry = Some(attribute.full_name.as_str())
                    .filter(|name| !name.is_empty())
                    .and_then(|name| stored.entry(name));
                let Some(entry) = entry else {
                    // A legacy saveable has several values; each is missing.
                    values.extend(self.missing(&self.paths[index], attribute));
                    if attribute.checkpoint_key != SAVE_COUNTER_KEY {
                        missing.push(&attribute.full_name);
                    }
                    continue;
                };
                let program = self.program(&attribute.checkpoint_key);
                let found = (entry.dtype, entry.shape.to_vec());
                values.push(ReportValue {
                    path: self.paths[index].clone(),
                    attribute: attribute.name.clone(),
                    status: if found == program {
                        ValueStatus::Matched
                    } else {
                        ValueStatus::Mismatched
                    },
                    checkpoint_key: Some(entry.key.to_owned()),
                    program: Some(tensor_type(program.clone())),
                    checkpoint: Some(tensor_type(found.clone())),
                });
                taken.insert(&attribute.full_name);
                pairs.push(Pair {
                    checkpoint_key: entry.key.to_owned(),
                    our_key: attribute.checkpoint_key.clone(),
                    name: self.names[index].clone(),
                    program,
                    stored: Some(found),
                    by_name: true,
                });
            }
            if !missing.is_empty() {
                not_restored.push(format!(
                    "\n    {}: {}",
                    self.repr(NodeId(index as u32)),
                    python_list(&missing)
                ));
            }
        }
        for entry in stored.entries_from("") {
            if taken.contains(entry.key) {
                continue;
            }
            values.push(ReportValue {
                path: entry.key.split('/').map(str::to_owned).collect(),
                attribute: VARIABLE_VALUE.to_owned(),
                status: ValueStatus::Unused,
                checkpoint_key: Some(entry.key.to_owned()),
                program: None,
                checkpoint: Some(tensor_type((entry.dtype, entry.shape.to_vec()))),
            });
        }
        sort_report(&mut values);
        let message = (!not_restored.is_empty()).then(|| {
            format!(
                "Some objects had attributes which were not restored: {}",
                not_restored.concat()
            )
        });
        let status = LoadStatus {
            checks: Some(Checks {
                consumed: message.clone(),
                existing: message.clone(),
                nontrivial: message,
            }),
            warnings: Vec::new(),
            partial: false,
            name_based: Some(prefix.to_owned()),
        };
        (pairs, values, status)
    }
}

/// The report's order: by path, then attribute.
fn sort_report(values: &mut [ReportValue]) {
    values.sort_by(|a, b| (&a.path, &a.attribute).cmp(&(&b.path, &b.attribute)));
}

/// The report values of a checkpoint attribute nobody takes: its key, or, for a legacy
/// saveable whose key is only a prefix (FORMATS.md 13.4), each stored key extending it.
fn unused_values(
    stored: &StoredIndex<'_>,
    path: &[String],
    attribute: &str,
    key: &str,
) -> Vec<ReportValue> {
    let entries: Vec<StoredEntry<'_>> = match stored.entry(key) {
        Some(entry) => vec![entry],
        None => (stored.entries_from(key).iter())
            .take_while(|entry| entry.key.starts_with(key))
            .copied()
            .filter(|entry| !entry.key[key.len()..].contains('/'))
            .collect(),
    };
    let value = |key: &str, checkpoint| ReportValue {
        path: path.to_vec(),
        attribute: attribute.to_owned(),
        status: ValueStatus::Unused,
        checkpoint_key: Some(key.to_owned()),
        program: None,
        checkpoint,
    };
    if entries.is_empty() {
        return vec![value(key, None)];
    }
    entries
        .into_iter()
        .map(|entry| {
            value(
                entry.key,
                Some(tensor_type((entry.dtype, entry.shape.to_vec()))),
            )
        })
        .collect()
}

/// The first problem that makes restoring `pairs` fail, as TensorFlow orders them: a dtype
/// mismatch or missing key (the batched `RestoreV2` fails), then a shape mismatch (at
/// assignment).
pub fn failure(pairs: &[Pair]) -> Option<ObjectError> {
    let dtype = pairs.iter().find_map(|pair| {
        let ours = pair.program.0;
        match &pair.stored {
            None => Some(ObjectError::RestoreKeyMissing {
                path: pair.name.clone(),
                key: pair.checkpoint_key.clone(),
            }),
            Some((dtype, _)) if *dtype != ours && pair.by_name => Some(ObjectError::AssignDType {
                path: pair.name.clone(),
                expected: cc_dtype_name(ours),
                found: cc_dtype_name(*dtype),
            }),
            Some((dtype, _)) if *dtype != ours => Some(ObjectError::RestoreDType {
                path: pair.name.clone(),
                key: pair.checkpoint_key.clone(),
                expected: ours,
                found: *dtype,
            }),
            _ => None,
        }
    });
    dtype.or_else(|| {
        pairs.iter().find_map(|pair| {
            let (_, shape) = pair.stored.as_ref()?;
            (shape != &pair.program.1).then(|| ObjectError::RestoreShape {
                path: pair.name.clone(),
                expected: python_shape(&pair.program.1),
                found: python_shape(shape),
            })
        })
    })
}

/// A dtype as TensorFlow's C++ messages name it (`DataTypeString`: `float`, `double`).
fn cc_dtype_name(dtype: DType) -> String {
    dtype.proto_name().map_or_else(
        || dtype.to_string(),
        |name| name.trim_start_matches("DT_").to_ascii_lowercase(),
    )
}

/// Restore-on-create's bookkeeping (FORMATS.md 13.12): which of the values attached since a
/// restore each pending restore gives, offered the newest restore first; each value is taken
/// from the first restore that has it.
#[derive(Clone, Debug, Default)]
pub struct NewValues {
    /// The keys of the values attached.
    new_keys: BTreeSet<String>,
    /// The keys taken so far.
    done: BTreeSet<String>,
}

impl NewValues {
    /// Bookkeeping for the values attached under `new_keys`.
    pub fn new(new_keys: impl IntoIterator<Item = String>) -> NewValues {
        NewValues {
            new_keys: new_keys.into_iter().collect(),
            done: BTreeSet::new(),
        }
    }

    /// Of the pairs a pending restore matched (newer restores offered first), those of new
    /// values no newer restore gave; the first that cannot be restored is an error.
    pub fn take(&mut self, pairs: Vec<Pair>) -> Result<Vec<Pair>, ObjectError> {
        let pairs: Vec<Pair> = pairs
            .into_iter()
            .filter(|pair| {
                self.new_keys.contains(&pair.our_key) && !self.done.contains(&pair.our_key)
            })
            .collect();
        if let Some(error) = failure(&pairs) {
            return Err(error);
        }
        self.done
            .extend(pairs.iter().map(|pair| pair.our_key.clone()));
        Ok(pairs)
    }

    /// The keys taken, sorted.
    pub fn into_keys(self) -> Vec<String> {
        self.done.into_iter().collect()
    }
}

/// The reverse direction (FORMATS.md 13.13): how a TF1 `Saver` restores an object-based
/// checkpoint. Each attribute's `full_name` (a variable's shared name) → its `checkpoint_key`,
/// from the checkpoint's object graph `theirs`; attributes without a `full_name` are left out,
/// and when several attributes share one `full_name` the last in node order wins, as in
/// TensorFlow's mapping.
pub fn full_name_keys(theirs: &ObjectGraph) -> BTreeMap<String, String> {
    theirs
        .nodes()
        .iter()
        .flat_map(|node| &node.attributes)
        .filter(|attribute| !attribute.full_name.is_empty())
        .map(|attribute| {
            (
                attribute.full_name.clone(),
                attribute.checkpoint_key.clone(),
            )
        })
        .collect()
}

/// The keys of the values `name` names in `graph` as an object path (unescaped local names
/// joined with `/`, along any of an object's paths: an object shared by two parents is found
/// by both; a variable's value, or with an attribute name last, that attribute's) or a full
/// name, sorted.
pub fn name_candidates(graph: &ObjectGraph, name: &str) -> Vec<String> {
    let index = GraphIndex::new(graph);
    let parts: Vec<&str> = name.split('/').collect();
    let mut keys = Vec::new();
    // The object at the path: its variable's value.
    if let Some(attribute) =
        (index.node_at(&parts)).and_then(|node| index.attribute(node, VARIABLE_VALUE))
    {
        keys.push(attribute.checkpoint_key.clone());
    }
    // The object at all but the last name: its attribute of that name.
    if let Some((last, rest)) = parts.split_last()
        && let Some(attribute) = index
            .node_at(rest)
            .and_then(|node| index.attribute(node, last))
    {
        keys.push(attribute.checkpoint_key.clone());
    }
    for node in graph.nodes() {
        for attribute in &node.attributes {
            if attribute.full_name == name {
                keys.push(attribute.checkpoint_key.clone());
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Binds checkpoint nodes to our nodes (13.10): breadth-first by local name, then slot
/// variables through bound optimizers and variables, until nothing more binds. Our children
/// and slots are looked up in an index, and each round of slots considers only the slot
/// references of nodes bound since the last, in their order in the graph: linear in the
/// graphs.
fn bind(theirs: &ObjectGraph, ours: &ObjectGraph) -> Vec<Option<NodeId>> {
    let lookup = GraphIndex::new(ours);
    // Their slot references by the nodes they depend on: (optimizer, index in its list).
    let mut depending: Vec<Vec<(usize, usize)>> = vec![Vec::new(); theirs.nodes().len()];
    for (optimizer, node) in theirs.nodes().iter().enumerate() {
        for (index, slot) in node.slot_variables.iter().enumerate() {
            depending[optimizer].push((optimizer, index));
            depending[slot.original_variable_node_id.index()].push((optimizer, index));
        }
    }
    let mut binding = Binding {
        bound: vec![None; theirs.nodes().len()],
        taken: vec![false; ours.nodes().len()],
        queue: VecDeque::new(),
        fresh: Vec::new(),
    };
    binding.bind(NodeId::ROOT, Some(NodeId::ROOT));
    loop {
        while let Some(their) = binding.queue.pop_front() {
            let our = binding.bound[their.index()].expect("queued nodes are bound");
            for edge in &theirs.node(their).children {
                binding.bind(edge.node_id, lookup.child(our, &edge.local_name));
            }
        }
        let mut pending: Vec<(usize, usize)> = (binding.fresh.drain(..))
            .flat_map(|node| depending[node.index()].iter().copied())
            .collect();
        pending.sort_unstable();
        pending.dedup();
        for (their_optimizer, index) in pending {
            let slot = &theirs.nodes()[their_optimizer].slot_variables[index];
            let (Some(our_optimizer), Some(our_variable)) = (
                binding.bound[their_optimizer],
                binding.bound[slot.original_variable_node_id.index()],
            ) else {
                continue;
            };
            let our_slot = lookup.slot(our_optimizer, our_variable, &slot.slot_name);
            binding.bind(slot.slot_variable_node_id, our_slot);
        }
        if binding.queue.is_empty() {
            return binding.bound;
        }
    }
}

/// The state of [`bind`]: each checkpoint node's node of ours, ours taken, the nodes whose
/// children are still to bind, and the nodes bound since the last round of slots.
struct Binding {
    bound: Vec<Option<NodeId>>,
    taken: Vec<bool>,
    queue: VecDeque<NodeId>,
    fresh: Vec<NodeId>,
}

impl Binding {
    /// Binds `their` to `our`, unless there is no `our` or either is bound already.
    fn bind(&mut self, their: NodeId, our: Option<NodeId>) {
        let Some(our) = our else { return };
        if self.bound[their.index()].is_some() || self.taken[our.index()] {
            return;
        }
        self.bound[their.index()] = Some(our);
        self.taken[our.index()] = true;
        self.queue.push_back(their);
        self.fresh.push(their);
    }
}
