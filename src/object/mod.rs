//! The object layer of object-based checkpoints (`tf.train.Checkpoint`, FORMATS.md 13), as
//! plain data: the object graph a framework's objects make ([`Checkpointable`], [`Object`],
//! [`build_object_graph`]), `save_counter`'s place in it ([`with_save_counter`]), matching a
//! checkpoint's objects against ours, by object (13.10) or, without an object graph, by name
//! (13.13), into the values to read, the [`LoadStatus`] with TensorFlow's exact assertion
//! messages and the [`RestoreReport`] ([`match_stored`]), and restore-on-create's
//! bookkeeping ([`NewValues`], 13.12).
//!
//! It reads a checkpoint only as the plain data it is handed, its index ([`StoredIndex`]: each
//! key's dtype and shape) and object graph ([`Theirs`]), and our values only through
//! [`OurValue`] (dtype, shape, bytes): it opens no file, runs no plan and knows no tensor
//! type. [`crate::checkpoint`] (the driver: files, plans, the `Checkpoint` type) hands it the
//! index of the bundle it opened, implements [`OurValue`] for its tensors, and reads the
//! matched values once, from the reader it matched against.
//!
//! ```
//! use saveplan::object::{Object, build_object_graph};
//!
//! let kernel = Object::variable("kernel");
//! let dense = Object::new().child("kernel", &kernel).child("bias", &Object::variable("bias"));
//! let root = Object::new().child("model", &dense).child("shared", &kernel);
//! let graph = build_object_graph(&root)?;
//! // `shared` is the shorter path, so the kernel's key uses it.
//! assert_eq!(graph.node(saveplan_ir::object_graph::NodeId(2)).attributes[0].checkpoint_key,
//!            "shared/.ATTRIBUTES/VARIABLE_VALUE");
//! # Ok::<(), saveplan::object::ObjectError>(())
//! ```

// Public through the re-exports below; the crate imports from the defining modules.
pub(crate) mod build;
pub(crate) mod counter;
pub(crate) mod matching;
mod prune;
mod repr;
pub(crate) mod status;
pub(crate) mod stored;

pub use build::{
    Checkpointable, Child, Object, ObjectIdentity, PYTHON_STATE, SlotGroup, TensorAttribute,
    build_object_graph, value_keys,
};
pub use counter::{SAVE_COUNTER, SAVE_COUNTER_KEY, try_with_save_counter, with_save_counter};
pub use matching::{
    NewValues, Ours, Theirs, failure, full_name_keys, match_stored, name_candidates,
};
pub use prune::without_attributes_of;
pub use status::{
    Assertion, AssertionError, LoadStatus, Matched, Pair, ReportCounts, ReportValue, RestoreKind,
    RestoreReport, TensorType, ValueStatus,
};
pub use stored::{StoredEntry, StoredIndex};

use saveplan_ir::DType;

/// What the object layer reads of one of our values: dtype, shape and, for a value held as
/// little-endian bytes of a fixed-width dtype, those bytes (for Python's `repr` in messages).
pub trait OurValue {
    /// The dtype.
    fn dtype(&self) -> DType;
    /// The shape.
    fn dims(&self) -> &[u64];
    /// The elements' row-major little-endian bytes, when held so.
    fn bytes(&self) -> Option<&[u8]>;
}

/// Errors of the object layer: building an object graph, values that fit no attribute, and
/// matched values a restore cannot take (with TensorFlow's messages).
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The objects make a graph above one of [`ObjectGraph::new`](saveplan_ir::object_graph::ObjectGraph::new)'s caps.
    #[error(transparent)]
    ObjectGraph(#[from] saveplan_ir::object_graph::ObjectGraphError),
    /// An object has two children of one name.
    #[error("object `{path}` has two children named `{name}`")]
    DuplicateChild {
        /// The object's path (local names joined with `.`, from `(root)`).
        path: String,
        /// The name.
        name: String,
    },
    /// An object has two attributes of one name.
    #[error("object `{path}` has two attributes named `{name}`")]
    DuplicateAttribute {
        /// The object's path.
        path: String,
        /// The name.
        name: String,
    },
    /// A slot variable is also a child of some object, or is the slot of two variables.
    #[error("slot `{slot_name}` of `{variable}` is already in the graph as `{tracked_as}`")]
    SlotAlreadyTracked {
        /// The slot name.
        slot_name: String,
        /// The path of the variable it is a slot of.
        variable: String,
        /// Where the slot object already is.
        tracked_as: String,
    },
    /// A value is given for a key no attribute has.
    #[error("a value for `{key}`, which is no attribute of the object graph")]
    UnknownValue {
        /// The key given.
        key: String,
    },
    /// A matched value's key is not in the checkpoint.
    #[error("`{path}`: key {key} not found in checkpoint")]
    RestoreKeyMissing {
        /// The object's path (`(root).model.c`).
        path: String,
        /// The key the object graph names.
        key: String,
    },
    /// A matched value has another dtype in the checkpoint.
    #[error(
        "`{path}`: tensor_name = {key}; expected dtype {expected} does not equal original dtype {found}"
    )]
    RestoreDType {
        /// The object's path (`(root).model.c`).
        path: String,
        /// The checkpoint key.
        key: String,
        /// Our dtype.
        expected: DType,
        /// The checkpoint's.
        found: DType,
    },
    /// A value matched by variable name (name-based restore) has another dtype in the
    /// checkpoint: TensorFlow reads it with the checkpoint's dtype and the assignment fails.
    #[error(
        "`{path}`: Trying to assign variable with wrong dtype. Expected {expected} got {found}"
    )]
    AssignDType {
        /// The object's path (`(root).model.kernel`).
        path: String,
        /// Our dtype, as TensorFlow's C++ names it (`double`).
        expected: String,
        /// The checkpoint's (`float`).
        found: String,
    },
    /// A matched value has another shape in the checkpoint.
    #[error(
        "`{path}`: received incompatible tensor with shape {found} when attempting to restore variable with shape {expected}"
    )]
    RestoreShape {
        /// The object's path (`(root).model.c`).
        path: String,
        /// Our shape, as Python prints it (`(2,)`).
        expected: String,
        /// The checkpoint's.
        found: String,
    },
}

/// The path TensorFlow's messages use for an object: `(root)` and the local names joined with
/// `.` (`(root).model.kernel`).
pub fn display_path(names: &[&str]) -> String {
    std::iter::once("(root)")
        .chain(names.iter().copied())
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests;
