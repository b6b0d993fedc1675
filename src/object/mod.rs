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
mod error;
pub(crate) mod matching;
mod prune;
mod repr;
pub(crate) mod status;
pub(crate) mod values;

pub use build::{
    Checkpointable, Child, Object, ObjectIdentity, PYTHON_STATE, SlotGroup, TensorAttribute,
    build_object_graph, value_keys,
};
pub use counter::{
    SAVE_COUNTER, SAVE_COUNTER_KEY, check_save_counter_fits, try_with_save_counter,
    with_save_counter,
};
pub use error::ObjectError;
pub use matching::{
    NewValues, Ours, Theirs, failure, full_name_keys, match_stored, name_candidates,
};
pub use prune::without_attributes_of;
pub use repr::display_path;
pub use status::{
    Assertion, AssertionError, LoadStatus, Matched, Pair, ReportCounts, ReportValue, RestoreKind,
    RestoreReport, TensorType, ValueStatus,
};
pub use values::{OurValue, StoredEntry, StoredIndex};

#[cfg(test)]
mod tests;
