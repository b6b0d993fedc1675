//! Op signatures as data: the registered TensorFlow 2.21 `OpDef`s of the ops saveplan uses, and
//! the mapping between flat input/output slots and `(arg name, index)` pairs.
//!
//! The table is written by hand from `tests/fixtures/tf-2.21/meta/op_defs.pbtxt` (plus
//! `IdentityN`), and a test checks it against that file. Dtypes are TensorFlow's lower-case
//! names without the `DT_` prefix (`"string"`, `"int32"`, `"resource"`, `"bool"`).
//!
//! An argument of an op stands for one tensor (`type` or `type_attr`), `N` tensors of one type
//! (`number_attr`), or one tensor per entry of a type list (`type_list_attr`). A GraphDef names
//! an output by its flat position (`RestoreV2:1`), a FunctionDef by argument and position within
//! it (`RestoreV2:tensors:1`); [`OpSignature::output_index`] and [`OpSignature::output_arg`]
//! convert between the two, given the values of the op's length attrs.

use std::ops::Range;

use crate::attr::{AttrValue, Attrs};
use crate::graph::{OpNode, Port};
use crate::op::Op;

/// The registered signature of one op type.
#[derive(Debug, PartialEq, Eq)]
pub struct OpSignature {
    /// The op type name, e.g. `SaveV2`.
    pub name: &'static str,
    /// The input arguments, in order.
    pub inputs: &'static [ArgSig],
    /// The output arguments, in order.
    pub outputs: &'static [ArgSig],
    /// The attributes, in registration order.
    pub attrs: &'static [AttrSig],
    /// Whether the op is stateful (`is_stateful` in the OpDef).
    pub is_stateful: bool,
    /// Whether the op may communicate across devices (`is_distributed_communication`).
    pub is_distributed_communication: bool,
}

/// One input or output argument of an op.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArgSig {
    /// The argument name, e.g. `tensors`.
    pub name: &'static str,
    /// How many tensors the argument stands for and of which dtype.
    pub ty: ArgType,
}

/// The shape of an argument: how many tensors and which dtype.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// One tensor of a fixed dtype (`type: DT_STRING` → `"string"`).
    Fixed(&'static str),
    /// One tensor whose dtype is the value of the named `type` attr (`type_attr`).
    Attr(&'static str),
    /// As many tensors as the named `int` attr says (`number_attr`), all of dtype `elem`.
    Repeated {
        /// The `int` attr giving the number of tensors.
        number_attr: &'static str,
        /// The dtype of every tensor.
        elem: ElemType,
    },
    /// One tensor per entry of the named `list(type)` attr (`type_list_attr`).
    List(&'static str),
    /// One reference tensor (`is_ref`) whose base dtype is the value of the named `type` attr:
    /// a TF1 `VariableV2`'s output, `Assign`'s variable input.
    RefAttr(&'static str),
}

/// The dtype of each tensor of a [`ArgType::Repeated`] argument.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ElemType {
    /// A fixed dtype name, e.g. `"string"`.
    Fixed(&'static str),
    /// The value of the named `type` attr.
    Attr(&'static str),
}

/// One attribute of an op.
#[derive(Debug, PartialEq, Eq)]
pub struct AttrSig {
    /// The attr name, e.g. `dtypes`.
    pub name: &'static str,
    /// The attr type as TensorFlow spells it: `"type"`, `"list(type)"`, `"int"`, `"string"`,
    /// `"bool"`, `"shape"`, `"tensor"`, `"func"` or `"list(string)"`.
    pub ty: &'static str,
    /// The default value, if the attr may be omitted.
    pub default: Option<AttrDefault>,
    /// The minimum (list length or int value), if the OpDef sets `has_minimum`.
    pub minimum: Option<i64>,
    /// The allowed dtypes of a `type` attr; empty means any.
    pub allowed: &'static [&'static str],
}

/// The default value of an attr, for the kinds of defaults the table uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttrDefault {
    /// A `bool` default.
    Bool(bool),
    /// An `int` default.
    Int(i64),
    /// A `string` default.
    String(&'static str),
    /// An empty list (`list {}`).
    EmptyList,
    /// A shape of unknown rank (`shape { unknown_rank: true }`).
    UnknownRankShape,
    /// A `type` default, by TensorFlow's dtype name (`int32`).
    Type(&'static str),
}

/// Errors from mapping between flat slots and argument positions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The resolver did not know the value of an attr that sizes an argument.
    #[error("op `{op}`: attr `{attr}` that sizes argument `{arg}` is missing")]
    MissingAttr {
        /// The op type.
        op: &'static str,
        /// The argument the attr sizes.
        arg: &'static str,
        /// The missing attr.
        attr: &'static str,
    },
    /// No output (or input) argument has the given name.
    #[error("op `{op}` has no {direction} argument `{arg}`")]
    NoSuchArg {
        /// The op type.
        op: &'static str,
        /// `input` or `output`.
        direction: &'static str,
        /// The name that was looked up.
        arg: String,
    },
    /// A position past the end of one argument, such as `tensors:3` of a 3-tensor `RestoreV2`.
    #[error(
        "op `{op}`: index {index} of {direction} argument `{arg}` is out of range (length {len})"
    )]
    ArgIndexOutOfRange {
        /// The op type.
        op: &'static str,
        /// `input` or `output`.
        direction: &'static str,
        /// The argument name.
        arg: &'static str,
        /// The position that was asked for.
        index: usize,
        /// The number of tensors of the argument.
        len: usize,
    },
    /// A flat slot past the last input or output.
    #[error("op `{op}`: flat {direction} slot {index} is out of range (the op has {len})")]
    SlotOutOfRange {
        /// The op type.
        op: &'static str,
        /// `input` or `output`.
        direction: &'static str,
        /// The slot that was asked for.
        index: usize,
        /// The number of flat slots.
        len: usize,
    },
}

/// The value TensorFlow sizes an argument with: an `int` attr's value, or a `list(type)`
/// attr's length; `None` when the attr is missing or of another kind (a list holding anything
/// but types is ill-kinded, which the verifier reports). This is the `attr_len` every
/// [`OpSignature`] method takes, for an op's own attributes.
pub fn attr_len(attrs: &Attrs, name: &str) -> Option<usize> {
    match attrs.get(name)? {
        AttrValue::I(n) => usize::try_from(*n).ok(),
        AttrValue::List(list) if list.len() == list.types.len() => Some(list.types.len()),
        _ => None,
    }
}

/// Why a [`Port`] does not name an output of an op.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// A named port on an op whose signature the table does not know.
    #[error("op type `{op_type}` has no known signature")]
    UnknownSignature {
        /// The op type.
        op_type: String,
    },
    /// A named port on a function argument, which has one unnamed output.
    #[error("arguments have one output")]
    Argument,
    /// The signature has no such output position.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// A flat index past `u32` (the op's attributes declare that many outputs).
    #[error("flat output {flat} is out of range")]
    TooLarge {
        /// The flat index.
        flat: usize,
    },
}

/// The flat output index `port` names on `node`: a [`Port::Index`] as is, a [`Port::Named`]
/// resolved through the op's signature and attributes.
pub fn flat_output(node: &OpNode, port: &Port) -> Result<u32, PortError> {
    match port {
        Port::Index(index) => Ok(*index),
        Port::Named { .. } if node.op == Op::Arg => Err(PortError::Argument),
        Port::Named { arg, index } => {
            let sig = of_op(&node.op).ok_or_else(|| PortError::UnknownSignature {
                op_type: node.op.type_name().to_owned(),
            })?;
            let flat =
                sig.output_index(arg, *index as usize, &|name| attr_len(&node.attrs, name))?;
            u32::try_from(flat).map_err(|_| PortError::TooLarge { flat })
        }
    }
}

/// [`signature`] of an op, memoized per op kind: verifying and compiling a plan ask for
/// the signature of every op and of every input's producer, and the table lookup compares
/// names.
pub fn of_op(op: &Op) -> Option<&'static OpSignature> {
    use std::sync::OnceLock;
    static BY_ORDINAL: OnceLock<Vec<Option<&'static OpSignature>>> = OnceLock::new();
    let Some(ordinal) = op.ordinal() else {
        return signature(op.type_name());
    };
    BY_ORDINAL.get_or_init(|| Op::ALL.iter().map(|op| signature(op.type_name())).collect())[ordinal]
}

/// Returns the signature of `op_type`, or `None` if the table does not know it.
pub fn signature(op_type: &str) -> Option<&'static OpSignature> {
    SIGNATURES.iter().find(|sig| sig.name == op_type)
}

impl OpSignature {
    /// Returns the attr called `name`.
    pub fn attr(&self, name: &str) -> Option<&'static AttrSig> {
        self.attrs.iter().find(|attr| attr.name == name)
    }

    /// Returns the input argument called `name`.
    pub fn input(&self, name: &str) -> Option<&'static ArgSig> {
        self.inputs.iter().find(|arg| arg.name == name)
    }

    /// Returns the output argument called `name`.
    pub fn output(&self, name: &str) -> Option<&'static ArgSig> {
        self.outputs.iter().find(|arg| arg.name == name)
    }

    /// Returns the number of tensors `arg` stands for.
    ///
    /// `attr_len` gives, for an attr name, the value of an `int` attr or the length of a
    /// `list(type)` attr; it is only asked about attrs that size arguments.
    pub fn arg_len(
        &self,
        arg: &'static ArgSig,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<usize, SignatureError> {
        let sizing_attr = match arg.ty {
            ArgType::Fixed(_) | ArgType::Attr(_) | ArgType::RefAttr(_) => return Ok(1),
            ArgType::Repeated { number_attr, .. } => number_attr,
            ArgType::List(type_list_attr) => type_list_attr,
        };
        attr_len(sizing_attr).ok_or(SignatureError::MissingAttr {
            op: self.name,
            arg: arg.name,
            attr: sizing_attr,
        })
    }

    /// Returns the number of data inputs (flat input slots).
    pub fn num_inputs(
        &self,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<usize, SignatureError> {
        self.total_len(self.inputs, attr_len)
    }

    /// Returns the number of outputs (flat output slots).
    pub fn num_outputs(
        &self,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<usize, SignatureError> {
        self.total_len(self.outputs, attr_len)
    }

    /// Returns the flat input slots of the input argument called `arg_name`.
    pub fn input_range(
        &self,
        arg_name: &str,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Range<usize>, SignatureError> {
        Ok(self.arg_range(Direction::Input, arg_name, attr_len)?.1)
    }

    /// Returns the flat output slots of the output argument called `arg_name`.
    pub fn output_range(
        &self,
        arg_name: &str,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<Range<usize>, SignatureError> {
        Ok(self.arg_range(Direction::Output, arg_name, attr_len)?.1)
    }

    /// Returns the flat output slot of `arg_name:index`, e.g. `tensors:1` of `RestoreV2` is 1
    /// and `filename:0` of `ShardedFilename` is 0.
    pub fn output_index(
        &self,
        arg_name: &str,
        index: usize,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<usize, SignatureError> {
        let (arg, range) = self.arg_range(Direction::Output, arg_name, attr_len)?;
        if index >= range.len() {
            return Err(SignatureError::ArgIndexOutOfRange {
                op: self.name,
                direction: Direction::Output.name(),
                arg: arg.name,
                index,
                len: range.len(),
            });
        }
        Ok(range.start + index)
    }

    /// Returns the output argument and the position within it of flat output slot `flat`.
    pub fn output_arg(
        &self,
        flat: usize,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(&'static str, usize), SignatureError> {
        self.arg_at(Direction::Output, flat, attr_len)
    }

    /// Returns the input argument and the position within it of flat input slot `flat`.
    pub fn input_arg(
        &self,
        flat: usize,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(&'static str, usize), SignatureError> {
        self.arg_at(Direction::Input, flat, attr_len)
    }

    /// Sums the lengths of `args`.
    fn total_len(
        &self,
        args: &'static [ArgSig],
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<usize, SignatureError> {
        args.iter()
            .try_fold(0, |total, arg| Ok(total + self.arg_len(arg, attr_len)?))
    }

    /// Returns the argument called `arg_name` in `direction` and its flat slots.
    fn arg_range(
        &self,
        direction: Direction,
        arg_name: &str,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(&'static ArgSig, Range<usize>), SignatureError> {
        let mut start = 0;
        for arg in direction.args(self) {
            let len = self.arg_len(arg, attr_len)?;
            if arg.name == arg_name {
                return Ok((arg, start..start + len));
            }
            start += len;
        }
        Err(SignatureError::NoSuchArg {
            op: self.name,
            direction: direction.name(),
            arg: arg_name.to_owned(),
        })
    }

    /// Returns the argument holding flat slot `flat` in `direction` and the position within it.
    fn arg_at(
        &self,
        direction: Direction,
        flat: usize,
        attr_len: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<(&'static str, usize), SignatureError> {
        let mut start = 0;
        for arg in direction.args(self) {
            let len = self.arg_len(arg, attr_len)?;
            if flat < start + len {
                return Ok((arg.name, flat - start));
            }
            start += len;
        }
        Err(SignatureError::SlotOutOfRange {
            op: self.name,
            direction: direction.name(),
            index: flat,
            len: start,
        })
    }
}

/// Inputs or outputs.
#[derive(Copy, Clone)]
enum Direction {
    Input,
    Output,
}

impl Direction {
    /// Returns the arguments of `sig` in this direction.
    fn args(self, sig: &OpSignature) -> &'static [ArgSig] {
        match self {
            Direction::Input => sig.inputs,
            Direction::Output => sig.outputs,
        }
    }

    /// Returns `input` or `output`, for error messages.
    fn name(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
        }
    }
}

/// Shorthand for a single-tensor argument of a fixed dtype.
const fn fixed(name: &'static str, dtype: &'static str) -> ArgSig {
    ArgSig {
        name,
        ty: ArgType::Fixed(dtype),
    }
}

/// Shorthand for a single-tensor argument typed by a `type` attr.
const fn typed(name: &'static str, type_attr: &'static str) -> ArgSig {
    ArgSig {
        name,
        ty: ArgType::Attr(type_attr),
    }
}

/// Shorthand for a reference argument (`is_ref`) typed by a `type` attr.
const fn ref_typed(name: &'static str, type_attr: &'static str) -> ArgSig {
    ArgSig {
        name,
        ty: ArgType::RefAttr(type_attr),
    }
}

/// Shorthand for a `type_list_attr` argument.
const fn list(name: &'static str, type_list_attr: &'static str) -> ArgSig {
    ArgSig {
        name,
        ty: ArgType::List(type_list_attr),
    }
}

/// Shorthand for an attr without default, minimum or allowed values.
const fn attr(name: &'static str, ty: &'static str) -> AttrSig {
    AttrSig {
        name,
        ty,
        default: None,
        minimum: None,
        allowed: &[],
    }
}

/// Shorthand for an attr with a default value.
const fn attr_default(name: &'static str, ty: &'static str, default: AttrDefault) -> AttrSig {
    AttrSig {
        name,
        ty,
        default: Some(default),
        minimum: None,
        allowed: &[],
    }
}

/// Shorthand for an attr with a minimum.
const fn attr_min(name: &'static str, ty: &'static str, minimum: i64) -> AttrSig {
    AttrSig {
        name,
        ty,
        default: None,
        minimum: Some(minimum),
        allowed: &[],
    }
}

/// Shorthand for an op signature that is neither stateful nor communicating.
const fn op(
    name: &'static str,
    inputs: &'static [ArgSig],
    outputs: &'static [ArgSig],
    attrs: &'static [AttrSig],
) -> OpSignature {
    OpSignature {
        name,
        inputs,
        outputs,
        attrs,
        is_stateful: false,
        is_distributed_communication: false,
    }
}

/// Shorthand for a stateful op signature.
const fn stateful(
    name: &'static str,
    inputs: &'static [ArgSig],
    outputs: &'static [ArgSig],
    attrs: &'static [AttrSig],
) -> OpSignature {
    OpSignature {
        is_stateful: true,
        ..op(name, inputs, outputs, attrs)
    }
}

/// The attrs shared by `PartitionedCall` and `StatefulPartitionedCall`.
const CALL_ATTRS: &[AttrSig] = &[
    attr_min("Tin", "list(type)", 0),
    attr_min("Tout", "list(type)", 0),
    attr("f", "func"),
    attr_default("config", "string", AttrDefault::String("")),
    attr_default("config_proto", "string", AttrDefault::String("")),
    attr_default("executor_type", "string", AttrDefault::String("")),
];

/// The `prefix`, `tensor_names`, `shape_and_slices` inputs of `SaveV2` and `RestoreV2`.
const BUNDLE_INPUTS: [ArgSig; 3] = [
    fixed("prefix", "string"),
    fixed("tensor_names", "string"),
    fixed("shape_and_slices", "string"),
];

/// Every op signature the table knows, in the order of `op_defs.pbtxt`, then `IdentityN`,
/// `VariableV2` and `Assign`, then the send/receive pairs of partitioned graphs.
pub static SIGNATURES: &[OpSignature] = &[
    stateful(
        "SaveV2",
        &[
            BUNDLE_INPUTS[0],
            BUNDLE_INPUTS[1],
            BUNDLE_INPUTS[2],
            list("tensors", "dtypes"),
        ],
        &[],
        &[attr_min("dtypes", "list(type)", 1)],
    ),
    stateful(
        "RestoreV2",
        &BUNDLE_INPUTS,
        &[list("tensors", "dtypes")],
        &[attr_min("dtypes", "list(type)", 1)],
    ),
    stateful(
        "MergeV2Checkpoints",
        &[
            fixed("checkpoint_prefixes", "string"),
            fixed("destination_prefix", "string"),
        ],
        &[],
        &[
            attr_default("delete_old_dirs", "bool", AttrDefault::Bool(true)),
            attr_default("allow_missing_files", "bool", AttrDefault::Bool(false)),
        ],
    ),
    op(
        "ShardedFilename",
        &[
            fixed("basename", "string"),
            fixed("shard", "int32"),
            fixed("num_shards", "int32"),
        ],
        &[fixed("filename", "string")],
        &[],
    ),
    op(
        "ShardedFilespec",
        &[fixed("basename", "string"), fixed("num_shards", "int32")],
        &[fixed("filename", "string")],
        &[],
    ),
    op(
        "StringJoin",
        &[ArgSig {
            name: "inputs",
            ty: ArgType::Repeated {
                number_attr: "N",
                elem: ElemType::Fixed("string"),
            },
        }],
        &[fixed("output", "string")],
        &[
            attr_min("N", "int", 0),
            attr_default("separator", "string", AttrDefault::String("")),
        ],
    ),
    op(
        "RegexFullMatch",
        &[fixed("input", "string"), fixed("pattern", "string")],
        &[fixed("output", "bool")],
        &[],
    ),
    op(
        "StaticRegexFullMatch",
        &[fixed("input", "string")],
        &[fixed("output", "bool")],
        &[attr("pattern", "string")],
    ),
    op(
        "Select",
        &[fixed("condition", "bool"), typed("t", "T"), typed("e", "T")],
        &[typed("output", "T")],
        &[attr("T", "type")],
    ),
    op(
        "SelectV2",
        &[fixed("condition", "bool"), typed("t", "T"), typed("e", "T")],
        &[typed("output", "T")],
        &[attr("T", "type")],
    ),
    op(
        "Identity",
        &[typed("input", "T")],
        &[typed("output", "T")],
        &[attr("T", "type")],
    ),
    op(
        "Const",
        &[],
        &[typed("output", "dtype")],
        &[attr("value", "tensor"), attr("dtype", "type")],
    ),
    op(
        "Placeholder",
        &[],
        &[typed("output", "dtype")],
        &[
            attr("dtype", "type"),
            attr_default("shape", "shape", AttrDefault::UnknownRankShape),
        ],
    ),
    op("NoOp", &[], &[], &[]),
    op(
        "Pack",
        &[ArgSig {
            name: "values",
            ty: ArgType::Repeated {
                number_attr: "N",
                elem: ElemType::Attr("T"),
            },
        }],
        &[typed("output", "T")],
        &[
            attr_min("N", "int", 1),
            attr("T", "type"),
            attr_default("axis", "int", AttrDefault::Int(0)),
        ],
    ),
    stateful(
        "ReadVariableOp",
        &[fixed("resource", "resource")],
        &[typed("value", "dtype")],
        &[attr("dtype", "type")],
    ),
    stateful(
        "AssignVariableOp",
        &[fixed("resource", "resource"), typed("value", "dtype")],
        &[],
        &[
            attr("dtype", "type"),
            attr_default("validate_shape", "bool", AttrDefault::Bool(false)),
        ],
    ),
    stateful(
        "VarHandleOp",
        &[],
        &[fixed("resource", "resource")],
        &[
            attr_default("container", "string", AttrDefault::String("")),
            attr_default("shared_name", "string", AttrDefault::String("")),
            attr_default("debug_name", "string", AttrDefault::String("")),
            attr("dtype", "type"),
            attr("shape", "shape"),
            attr_default("allowed_devices", "list(string)", AttrDefault::EmptyList),
        ],
    ),
    stateful(
        "VarIsInitializedOp",
        &[fixed("resource", "resource")],
        &[fixed("is_initialized", "bool")],
        &[],
    ),
    OpSignature {
        is_distributed_communication: true,
        ..stateful(
            "StatefulPartitionedCall",
            &[list("args", "Tin")],
            &[list("output", "Tout")],
            CALL_ATTRS,
        )
    },
    op(
        "PartitionedCall",
        &[list("args", "Tin")],
        &[list("output", "Tout")],
        CALL_ATTRS,
    ),
    op(
        "Slice",
        &[
            typed("input", "T"),
            typed("begin", "Index"),
            typed("size", "Index"),
        ],
        &[typed("output", "T")],
        &[
            attr("T", "type"),
            AttrSig {
                allowed: &["int32", "int64"],
                ..attr("Index", "type")
            },
        ],
    ),
    op(
        "Fill",
        &[typed("dims", "index_type"), typed("value", "T")],
        &[typed("output", "T")],
        &[
            attr("T", "type"),
            AttrSig {
                default: Some(AttrDefault::Type("int32")),
                allowed: &["int32", "int64"],
                ..attr("index_type", "type")
            },
        ],
    ),
    stateful(
        "DisableCopyOnRead",
        &[fixed("resource", "resource")],
        &[],
        &[],
    ),
    op(
        "PlaceholderWithDefault",
        &[typed("input", "dtype")],
        &[typed("output", "dtype")],
        &[attr("dtype", "type"), attr("shape", "shape")],
    ),
    op(
        "IdentityN",
        &[list("input", "T")],
        &[list("output", "T")],
        &[attr_min("T", "list(type)", 1)],
    ),
    stateful(
        "VariableV2",
        &[],
        &[ref_typed("ref", "dtype")],
        &[
            attr("shape", "shape"),
            attr("dtype", "type"),
            attr_default("container", "string", AttrDefault::String("")),
            attr_default("shared_name", "string", AttrDefault::String("")),
        ],
    ),
    op(
        "Assign",
        &[ref_typed("ref", "T"), typed("value", "T")],
        &[ref_typed("output_ref", "T")],
        &[
            attr("T", "type"),
            attr_default("validate_shape", "bool", AttrDefault::Bool(true)),
            attr_default("use_locking", "bool", AttrDefault::Bool(true)),
        ],
    ),
    stateful("_Send", &[typed("tensor", "T")], &[], &SEND_ATTRS),
    stateful("_HostSend", &[typed("tensor", "T")], &[], &SEND_ATTRS),
    OpSignature {
        is_distributed_communication: true,
        ..stateful("_Recv", &[], &[typed("tensor", "tensor_type")], &RECV_ATTRS)
    },
    OpSignature {
        is_distributed_communication: true,
        ..stateful(
            "_HostRecv",
            &[],
            &[typed("tensor", "tensor_type")],
            &RECV_ATTRS,
        )
    },
];

/// The attrs of `_Send` and `_HostSend` (the ends a partitioned graph adds on each edge that
/// crosses tasks): the value's type, then the rendezvous key's parts.
const SEND_ATTRS: [AttrSig; 6] = [
    attr("T", "type"),
    attr("tensor_name", "string"),
    attr("send_device", "string"),
    attr("send_device_incarnation", "int"),
    attr("recv_device", "string"),
    attr_default("client_terminated", "bool", AttrDefault::Bool(false)),
];

/// The attrs of `_Recv` and `_HostRecv`: as `SEND_ATTRS`, the type named `tensor_type`.
const RECV_ATTRS: [AttrSig; 6] = [
    attr("tensor_type", "type"),
    attr("tensor_name", "string"),
    attr("send_device", "string"),
    attr("send_device_incarnation", "int"),
    attr("recv_device", "string"),
    attr_default("client_terminated", "bool", AttrDefault::Bool(false)),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Looks up a signature the table must have.
    fn sig(name: &str) -> &'static OpSignature {
        signature(name).unwrap_or_else(|| panic!("no signature for {name}"))
    }

    #[test]
    fn lookup() {
        assert_eq!(sig("SaveV2").inputs.len(), 4);
        assert!(sig("SaveV2").is_stateful);
        assert!(!sig("Identity").is_stateful);
        assert!(sig("StatefulPartitionedCall").is_distributed_communication);
        assert!(signature("Conv2D").is_none());
        assert_eq!(
            sig("Pack").attr("axis").and_then(|attr| attr.default),
            Some(AttrDefault::Int(0))
        );
        assert_eq!(
            sig("Slice").attr("Index").map(|attr| attr.allowed),
            Some(&["int32", "int64"][..])
        );
    }

    #[test]
    fn names_are_unique() {
        for (pos, sig) in SIGNATURES.iter().enumerate() {
            assert!(
                SIGNATURES[..pos].iter().all(|other| other.name != sig.name),
                "{} listed twice",
                sig.name
            );
        }
    }

    #[test]
    fn restore_v2_outputs() {
        let dtypes_len = |attr: &str| (attr == "dtypes").then_some(3);
        let restore = sig("RestoreV2");
        assert_eq!(restore.num_inputs(&dtypes_len), Ok(3));
        assert_eq!(restore.num_outputs(&dtypes_len), Ok(3));
        assert_eq!(restore.output_index("tensors", 0, &dtypes_len), Ok(0));
        assert_eq!(restore.output_index("tensors", 2, &dtypes_len), Ok(2));
        assert_eq!(restore.output_arg(1, &dtypes_len), Ok(("tensors", 1)));
        assert_eq!(restore.output_range("tensors", &dtypes_len), Ok(0..3));
        assert_eq!(
            restore
                .output_index("tensors", 3, &dtypes_len)
                .map_err(|err| err.to_string()),
            Err(
                "op `RestoreV2`: index 3 of output argument `tensors` is out of range (length 3)"
                    .to_owned()
            )
        );
        assert_eq!(
            restore
                .output_arg(3, &dtypes_len)
                .map_err(|err| err.to_string()),
            Err("op `RestoreV2`: flat output slot 3 is out of range (the op has 3)".to_owned())
        );
        assert_eq!(
            restore
                .output_index("tensor", 0, &dtypes_len)
                .map_err(|err| err.to_string()),
            Err("op `RestoreV2` has no output argument `tensor`".to_owned())
        );
        assert_eq!(
            restore
                .num_outputs(&|_| None)
                .map_err(|err| err.to_string()),
            Err(
                "op `RestoreV2`: attr `dtypes` that sizes argument `tensors` is missing".to_owned()
            )
        );
    }

    #[test]
    fn attr_len_sizes_by_int_or_type_list() {
        let mut attrs = Attrs::default();
        attrs.insert("N", AttrValue::I(3));
        attrs.insert("negative", AttrValue::I(-1));
        let types = crate::attr::AttrList {
            types: vec![crate::DType::Float, crate::DType::String],
            ..Default::default()
        };
        attrs.insert("dtypes", AttrValue::List(Box::new(types)));
        let ints = crate::attr::AttrList {
            i: vec![1, 2],
            ..Default::default()
        };
        attrs.insert("ints", AttrValue::List(Box::new(ints)));
        attrs.insert("T", AttrValue::Type(crate::DType::Float));
        assert_eq!(attr_len(&attrs, "N"), Some(3));
        assert_eq!(attr_len(&attrs, "dtypes"), Some(2));
        // Not a size: a negative int, a list of other than types, another kind, no attr.
        assert_eq!(attr_len(&attrs, "negative"), None);
        assert_eq!(attr_len(&attrs, "ints"), None);
        assert_eq!(attr_len(&attrs, "T"), None);
        assert_eq!(attr_len(&attrs, "missing"), None);
    }

    #[test]
    fn save_v2_inputs() {
        let dtypes_len = |attr: &str| (attr == "dtypes").then_some(2);
        let save = sig("SaveV2");
        assert_eq!(save.num_inputs(&dtypes_len), Ok(5));
        assert_eq!(save.num_outputs(&dtypes_len), Ok(0));
        assert_eq!(save.input_range("tensors", &dtypes_len), Ok(3..5));
        assert_eq!(save.input_range("prefix", &dtypes_len), Ok(0..1));
        assert_eq!(save.input_arg(4, &dtypes_len), Ok(("tensors", 1)));
        assert_eq!(save.input_arg(2, &dtypes_len), Ok(("shape_and_slices", 0)));
        assert!(save.input_arg(5, &dtypes_len).is_err());
    }

    #[test]
    fn fixed_outputs_need_no_attrs() {
        let no_attrs = |_: &str| None;
        let sharded = sig("ShardedFilename");
        assert_eq!(sharded.num_inputs(&no_attrs), Ok(3));
        assert_eq!(sharded.output_index("filename", 0, &no_attrs), Ok(0));
        assert_eq!(sharded.output_arg(0, &no_attrs), Ok(("filename", 0)));
        assert_eq!(sig("NoOp").num_outputs(&no_attrs), Ok(0));
        assert_eq!(sig("Select").input_arg(2, &no_attrs), Ok(("e", 0)));
    }

    #[test]
    fn repeated_inputs() {
        let n_is_4 = |attr: &str| (attr == "N").then_some(4);
        assert_eq!(sig("StringJoin").num_inputs(&n_is_4), Ok(4));
        assert_eq!(sig("Pack").input_arg(3, &n_is_4), Ok(("values", 3)));
        assert_eq!(sig("Pack").num_outputs(&n_is_4), Ok(1));
    }

    #[test]
    fn output_index_round_trips() {
        let lens = |attr: &str| match attr {
            "Tin" => Some(2),
            "Tout" => Some(5),
            "T" => Some(3),
            _ => None,
        };
        for name in ["StatefulPartitionedCall", "IdentityN"] {
            let call = sig(name);
            let n_outputs = call.num_outputs(&lens).expect("sized outputs");
            for flat in 0..n_outputs {
                let (arg, index) = call.output_arg(flat, &lens).expect("in range");
                assert_eq!(call.output_index(arg, index, &lens), Ok(flat));
            }
        }
    }
}
