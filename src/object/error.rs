//! The object layer's errors: building an object graph, values that fit no attribute, and
//! matched values a restore cannot take, with TensorFlow's messages.

use saveplan_ir::DType;

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
