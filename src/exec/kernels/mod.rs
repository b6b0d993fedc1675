//! Kernels: what each op does to host tensors.
//!
//! A [`Kernel`] is resolved once, when a plan is compiled: its attributes are parsed and checked
//! (regexes compiled, constants converted, called functions compiled into sub-plans) so running
//! it only looks at its inputs. Kernels are plain data, so a JIT can call
//! [`Kernel::run`] for the same steps in the same schedule as the interpreter.
//!
//! Every kernel validates its inputs and returns a [`KernelError`] instead of panicking; the
//! scheduler adds the op's name and device.

mod array;
mod checkpoint;
pub(crate) mod state;
mod strings;
pub(crate) mod transfer;

use std::sync::OnceLock;

use saveplan_ir::{AttrValue, DType, OpNode, Shape};

use super::error::{ExecError, KernelError};
use super::io::{CheckpointIo, MergeFlags};
use super::rendezvous::ClusterRun;
use super::tensor::HostTensor;
use super::variables::VariableStore;

pub(crate) use checkpoint::NamesCache;
pub use strings::{sharded_filename, sharded_filespec};

/// A resolved kernel: the op's behaviour with its attributes already parsed.
///
/// Kept to 32 bytes (a compile-time assertion below): a plan of N variables has a step per op,
/// and the larger variants, made once per plan or per variable, are boxed so the many small
/// ones do not pay for them.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// `Const`: returns its value (shared, never copied).
    Const(Box<HostTensor>),
    /// `Identity`, `IdentityN` and an unfed `PlaceholderWithDefault`: returns its inputs.
    Identity,
    /// `NoOp`: nothing.
    NoOp,
    /// `StringJoin`: joins its string inputs element-wise (scalars broadcast).
    StringJoin {
        /// The `separator` attr.
        separator: Vec<u8>,
    },
    /// `StaticRegexFullMatch`: whether each string matches `pattern` as a whole.
    StaticRegexFullMatch {
        /// The `pattern` attr as written.
        pattern: Box<str>,
        /// The anchored compiled form of `pattern`.
        regex: Box<regex::bytes::Regex>,
    },
    /// `RegexFullMatch`: as above, the pattern being a scalar string input.
    RegexFullMatch,
    /// `Select` (`v2: false`) and `SelectV2` (`v2: true`).
    Select {
        /// Whether this is `SelectV2` (broadcasting; only the cases plans need).
        v2: bool,
    },
    /// `Pack`: stacks its inputs along `axis`.
    Pack {
        /// The `axis` attr.
        axis: i64,
    },
    /// `Slice`: a block of its input (what `MaxShardSizePolicy` plans cut tensors with).
    Slice,
    /// `Fill`: a tensor of the given shape holding one scalar value everywhere.
    Fill,
    /// `ShardedFilename`: `basename-SSSSS-of-NNNNN`.
    ShardedFilename,
    /// `ShardedFilespec`: `basename-?????-of-NNNNN`.
    ShardedFilespec,
    /// `SaveV2`: writes its tensors through the run's checkpoint backend.
    SaveV2 {
        /// The `dtypes` attr.
        dtypes: Vec<DType>,
    },
    /// `RestoreV2`: reads tensors through the run's checkpoint backend.
    RestoreV2 {
        /// The `dtypes` attr.
        dtypes: Vec<DType>,
    },
    /// `MergeV2Checkpoints`: merges bundles through the run's checkpoint backend.
    MergeV2Checkpoints(MergeFlags),
    /// `VarHandleOp`: returns a handle to a variable.
    VarHandleOp(Box<VariableAttrs>),
    /// `ReadVariableOp`: the variable's value.
    ReadVariableOp {
        /// The `dtype` attr.
        dtype: DType,
    },
    /// `AssignVariableOp`: stores its value input in the variable.
    AssignVariableOp {
        /// The `dtype` attr.
        dtype: DType,
        /// The `validate_shape` attr.
        validate_shape: bool,
    },
    /// `VarIsInitializedOp`: whether the variable holds a value.
    VarIsInitializedOp,
    /// `VariableV2`: a TF1 reference to a variable (a scalar resource handle whose dtype is the
    /// `_ref` dtype); creates nothing. A non-ref input reading it gets the variable's value.
    VariableV2(Box<VariableAttrs>),
    /// `Assign`: stores its value input in the variable of its `ref` input, returns the ref.
    Assign {
        /// The `T` attr.
        dtype: DType,
        /// The `validate_shape` attr.
        validate_shape: bool,
    },
    /// `DisableCopyOnRead`: nothing (host variables are never copied on read).
    DisableCopyOnRead,
    /// `_Send`/`_HostSend`: hands its input to the run's rendezvous.
    Send(Box<Transfer>),
    /// `_Recv`/`_HostRecv`: waits for its value from the run's rendezvous.
    Recv(Box<Transfer>),
}

/// What a send or receive of a partitioned graph moves: its rendezvous key's parts, as the
/// pair's attrs hold them.
#[derive(Clone, Debug)]
pub struct Transfer {
    /// The `tensor_name` attr, the same at both ends.
    pub tensor_name: String,
    /// The `send_device` attr.
    pub send_device: String,
    /// The `recv_device` attr.
    pub recv_device: String,
    /// The value's dtype (`T` of a send, `tensor_type` of a receive).
    pub dtype: DType,
}

// Every step of a plan holds a kernel: a variant that grows is a cost per step of every large
// plan, so the size is kept here on purpose.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Kernel>() == 32);

/// The attributes that name a variable and its type, as `VarHandleOp` and `VariableV2` hold
/// them.
#[derive(Clone, Debug)]
pub struct VariableAttrs {
    /// The `container` attr.
    pub container: String,
    /// The `shared_name` attr, or the op name when it is empty.
    pub shared_name: String,
    /// The `dtype` attr.
    pub dtype: DType,
    /// The `shape` attr.
    pub shape: Shape,
    /// The handle tensor the kernel made on its first run, handed out again (shared) by later
    /// runs on the same device instead of allocating a new handle per run.
    handle: OnceLock<HostTensor>,
}

/// What a kernel may use besides its inputs.
pub struct KernelCx<'a> {
    /// The variables `VarHandleOp` and friends use.
    pub variables: &'a VariableStore,
    /// Where `SaveV2`, `RestoreV2` and `MergeV2Checkpoints` go; those ops fail without one.
    pub io: Option<&'a dyn CheckpointIo>,
    /// Where `_Send` and `_Recv` meet the other tasks; those ops fail without one.
    pub cluster: Option<ClusterRun<'a>>,
    /// The op's name.
    pub name: &'a str,
    /// The device the op runs on.
    pub device: &'a str,
}

impl Kernel {
    /// Resolves the kernel of `node` from its attributes. Ops whose kernel needs more than the
    /// node (`Placeholder`, calls) are resolved by the plan compiler; this reports them, and any
    /// op without a kernel, as [`ExecError::UnsupportedOp`].
    pub fn resolve(node: &OpNode) -> Result<Kernel, ExecError> {
        use saveplan_ir::Op;
        let attrs = Attrs { node };
        Ok(match &node.op {
            Op::Const => {
                let value = match node.attrs.get("value") {
                    Some(AttrValue::Tensor(tensor)) => tensor,
                    _ => return Err(attrs.bad("value", "must be a tensor")),
                };
                let tensor = HostTensor::from_const(value)
                    .map_err(|err| attrs.bad("value", &err.to_string()))?;
                Kernel::Const(Box::new(tensor))
            }
            Op::Identity | Op::IdentityN | Op::PlaceholderWithDefault => Kernel::Identity,
            Op::NoOp => Kernel::NoOp,
            Op::StringJoin => Kernel::StringJoin {
                separator: attrs.bytes_or("separator", b"")?,
            },
            Op::StaticRegexFullMatch => {
                let pattern = attrs.string("pattern")?;
                let regex = strings::full_match_regex(&pattern)
                    .map_err(|err| attrs.bad("pattern", &err.to_string()))?;
                Kernel::StaticRegexFullMatch {
                    pattern: pattern.into_boxed_str(),
                    regex: Box::new(regex),
                }
            }
            Op::RegexFullMatch => Kernel::RegexFullMatch,
            Op::Select => Kernel::Select { v2: false },
            Op::SelectV2 => Kernel::Select { v2: true },
            Op::Pack => Kernel::Pack {
                axis: attrs.int_or("axis", 0)?,
            },
            Op::Slice => Kernel::Slice,
            Op::Fill => Kernel::Fill,
            Op::ShardedFilename => Kernel::ShardedFilename,
            Op::ShardedFilespec => Kernel::ShardedFilespec,
            Op::SaveV2 => Kernel::SaveV2 {
                dtypes: attrs.types("dtypes")?,
            },
            Op::RestoreV2 => Kernel::RestoreV2 {
                dtypes: attrs.types("dtypes")?,
            },
            Op::MergeV2Checkpoints => Kernel::MergeV2Checkpoints(MergeFlags {
                delete_old_dirs: attrs.bool_or("delete_old_dirs", true)?,
                allow_missing_files: attrs.bool_or("allow_missing_files", false)?,
            }),
            Op::VarHandleOp => Kernel::VarHandleOp(Box::new(attrs.variable()?)),
            Op::ReadVariableOp => Kernel::ReadVariableOp {
                dtype: attrs.dtype("dtype")?,
            },
            Op::AssignVariableOp => Kernel::AssignVariableOp {
                dtype: attrs.dtype("dtype")?,
                validate_shape: attrs.bool_or("validate_shape", false)?,
            },
            Op::VarIsInitializedOp => Kernel::VarIsInitializedOp,
            Op::VariableV2 => Kernel::VariableV2(Box::new(attrs.variable()?)),
            Op::Assign => Kernel::Assign {
                dtype: attrs.dtype("T")?,
                validate_shape: attrs.bool_or("validate_shape", true)?,
            },
            Op::DisableCopyOnRead => Kernel::DisableCopyOnRead,
            Op::Other(op_type) if matches!(&**op_type, "_Send" | "_HostSend") => {
                Kernel::Send(Box::new(attrs.transfer("T")?))
            }
            Op::Other(op_type) if matches!(&**op_type, "_Recv" | "_HostRecv") => {
                if attrs.bool_or("client_terminated", false)? {
                    // The client's value arrives as a feed of this op's output.
                    return Err(ExecError::UnsupportedOp {
                        name: node.name.clone(),
                        op_type: format!("{op_type} (client-terminated; feed its output)"),
                    });
                }
                Kernel::Recv(Box::new(attrs.transfer("tensor_type")?))
            }
            Op::Placeholder
            | Op::Arg
            | Op::StatefulPartitionedCall
            | Op::PartitionedCall
            | Op::Other(_) => {
                return Err(ExecError::UnsupportedOp {
                    name: node.name.clone(),
                    op_type: node.op.type_name().to_owned(),
                });
            }
        })
    }

    /// Runs the kernel on `inputs` (in signature order) and returns its outputs.
    pub fn run(
        &self,
        cx: &KernelCx<'_>,
        inputs: &[HostTensor],
    ) -> Result<Vec<HostTensor>, KernelError> {
        // A TF1 reference feeding a value input is read: only `Assign`'s `ref` input keeps it.
        let keep = usize::from(matches!(self, Kernel::Assign { .. }));
        let values = state::deref_refs(cx, inputs, keep)?;
        let inputs = values.as_deref().unwrap_or(inputs);
        match self {
            Kernel::Const(value) => Ok(vec![HostTensor::clone(value)]),
            Kernel::Identity => Ok(inputs.to_vec()),
            Kernel::NoOp => Ok(Vec::new()),
            Kernel::StringJoin { separator } => strings::string_join(separator, inputs),
            Kernel::StaticRegexFullMatch { regex, .. } => {
                strings::regex_full_match(regex, input(inputs, 0)?)
            }
            Kernel::RegexFullMatch => strings::dynamic_regex_full_match(inputs),
            Kernel::Select { v2 } => array::select(*v2, inputs),
            Kernel::Pack { axis } => array::pack(*axis, inputs),
            Kernel::Slice => array::slice(inputs),
            Kernel::Fill => array::fill(inputs),
            Kernel::ShardedFilename => strings::sharded_filename_kernel(inputs),
            Kernel::ShardedFilespec => strings::sharded_filespec_kernel(inputs),
            Kernel::SaveV2 { dtypes } => checkpoint::save_v2(cx, dtypes, inputs),
            Kernel::RestoreV2 { dtypes } => checkpoint::restore_v2(cx, dtypes, inputs, None),
            Kernel::MergeV2Checkpoints(flags) => checkpoint::merge_v2(cx, *flags, inputs),
            Kernel::VarHandleOp(var) => Ok(vec![state::var_handle(cx, var, var.dtype)]),
            Kernel::ReadVariableOp { dtype } => state::read_variable(cx, *dtype, inputs),
            Kernel::AssignVariableOp {
                dtype,
                validate_shape,
            } => state::assign_variable(cx, *dtype, *validate_shape, inputs),
            Kernel::VarIsInitializedOp => state::var_is_initialized(cx, inputs),
            Kernel::VariableV2(var) => Ok(vec![state::var_handle(cx, var, var.dtype.to_ref())]),
            Kernel::Assign {
                dtype,
                validate_shape,
            } => state::assign_ref(cx, *dtype, *validate_shape, inputs),
            Kernel::DisableCopyOnRead => {
                state::handle(inputs, 0)?;
                Ok(Vec::new())
            }
            Kernel::Send(transfer) => transfer::send(cx, transfer, input(inputs, 0)?),
            Kernel::Recv(transfer) => transfer::recv(cx, transfer),
        }
    }
}

impl Kernel {
    /// Runs a kernel of at most one output on `inputs` as [`Kernel::run`] does, without the
    /// output vector: what a fused step ([`super::fuse`]) runs for an `Identity`,
    /// `ReadVariableOp` or `AssignVariableOp` folded into it.
    pub(crate) fn run_folded(
        &self,
        cx: &KernelCx<'_>,
        inputs: &[HostTensor],
    ) -> Result<Option<HostTensor>, KernelError> {
        if inputs.iter().any(state::is_ref) {
            return Ok(self.run(cx, inputs)?.pop());
        }
        match self {
            Kernel::Identity if inputs.len() == 1 => Ok(Some(inputs[0].clone())),
            Kernel::VarHandleOp(var) => Ok(Some(state::var_handle(cx, var, var.dtype))),
            Kernel::ReadVariableOp { dtype } => {
                let key = state::handle(inputs, 0)?;
                Ok(Some(cx.variables.read_as(key, *dtype)?))
            }
            Kernel::AssignVariableOp {
                dtype,
                validate_shape,
            } => {
                state::assign_variable(cx, *dtype, *validate_shape, inputs)?;
                Ok(None)
            }
            _ => Ok(self.run(cx, inputs)?.pop()),
        }
    }
}

/// Runs the `SaveV2` kernel of `dtypes` as [`Kernel::run`] does, on the prefix, names and
/// specs `head` and the tensors to save `tensors` (in position order) rather than on one list
/// of inputs: what a fused save runs with the variables it borrowed. Its names and specs
/// come from `names` when it holds them checked.
pub(crate) fn run_save_of(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    head: &[HostTensor],
    tensors: Vec<&HostTensor>,
    names: &NamesCache,
) -> Result<Vec<HostTensor>, KernelError> {
    let values = state::deref_refs(cx, head, 0)?;
    let head = values.as_deref().unwrap_or(head);
    // A TF1 reference given as a tensor is read, as `Kernel::run` reads it.
    let mut read = Vec::new();
    for (position, tensor) in tensors.iter().enumerate() {
        if let Some(value) = state::deref_ref(cx, tensor)? {
            read.push((position, value));
        }
    }
    let mut tensors = tensors;
    for (position, value) in &read {
        tensors[*position] = value;
    }
    checkpoint::save_v2_of(cx, dtypes, head, tensors, Some(names))
}

/// Runs the `RestoreV2` kernel of `dtypes` on `inputs` as [`Kernel::run`] does, its names and
/// specs from `names` when it holds them checked: what a fused restore runs.
pub(crate) fn run_restore_of(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
    names: &NamesCache,
) -> Result<Vec<HostTensor>, KernelError> {
    let values = state::deref_refs(cx, inputs, 0)?;
    let inputs = values.as_deref().unwrap_or(inputs);
    checkpoint::restore_v2(cx, dtypes, inputs, Some(names))
}

/// Typed attribute access for [`Kernel::resolve`], with errors naming the op and attr.
struct Attrs<'a> {
    node: &'a OpNode,
}

impl Attrs<'_> {
    /// The variable a `VarHandleOp` or `VariableV2` names; an empty `shared_name` means the
    /// op's name, as in graph-mode TensorFlow.
    fn variable(&self) -> Result<VariableAttrs, ExecError> {
        let shared_name = self.string_or("shared_name", "")?;
        Ok(VariableAttrs {
            container: self.string_or("container", "")?,
            shared_name: if shared_name.is_empty() {
                self.node.name.clone()
            } else {
                shared_name
            },
            dtype: self.dtype("dtype")?,
            shape: match self.node.attrs.get("shape") {
                Some(AttrValue::Shape(shape)) => shape.clone(),
                _ => return Err(self.bad("shape", "must be a shape")),
            },
            handle: OnceLock::new(),
        })
    }

    /// The key parts of a `_Send` or `_Recv`, its value's dtype in attr `dtype_attr`.
    fn transfer(&self, dtype_attr: &str) -> Result<Transfer, ExecError> {
        Ok(Transfer {
            tensor_name: self.string("tensor_name")?,
            send_device: self.string("send_device")?,
            recv_device: self.string("recv_device")?,
            dtype: self.dtype(dtype_attr)?,
        })
    }

    fn bad(&self, attr: &str, reason: &str) -> ExecError {
        ExecError::BadAttr {
            name: self.node.name.clone(),
            attr: attr.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn bytes_or(&self, attr: &str, default: &[u8]) -> Result<Vec<u8>, ExecError> {
        match self.node.attrs.get(attr) {
            None => Ok(default.to_vec()),
            Some(AttrValue::S(bytes)) => Ok(bytes.clone()),
            Some(_) => Err(self.bad(attr, "must be a string")),
        }
    }

    fn string_or(&self, attr: &str, default: &str) -> Result<String, ExecError> {
        let bytes = self.bytes_or(attr, default.as_bytes())?;
        String::from_utf8(bytes).map_err(|_| self.bad(attr, "must be UTF-8"))
    }

    fn string(&self, attr: &str) -> Result<String, ExecError> {
        if !self.node.attrs.contains_key(attr) {
            return Err(self.bad(attr, "is missing"));
        }
        self.string_or(attr, "")
    }

    fn int_or(&self, attr: &str, default: i64) -> Result<i64, ExecError> {
        match self.node.attrs.get(attr) {
            None => Ok(default),
            Some(AttrValue::I(value)) => Ok(*value),
            Some(_) => Err(self.bad(attr, "must be an int")),
        }
    }

    fn bool_or(&self, attr: &str, default: bool) -> Result<bool, ExecError> {
        match self.node.attrs.get(attr) {
            None => Ok(default),
            Some(AttrValue::B(value)) => Ok(*value),
            Some(_) => Err(self.bad(attr, "must be a bool")),
        }
    }

    fn dtype(&self, attr: &str) -> Result<DType, ExecError> {
        match self.node.attrs.get(attr) {
            Some(AttrValue::Type(dtype)) => Ok(*dtype),
            _ => Err(self.bad(attr, "must be a type")),
        }
    }

    fn types(&self, attr: &str) -> Result<Vec<DType>, ExecError> {
        match self.node.attrs.get(attr) {
            Some(AttrValue::List(list)) if list.len() == list.types.len() => Ok(list.types.clone()),
            _ => Err(self.bad(attr, "must be a list of types")),
        }
    }
}

/// Input `index`, or an error if the op got fewer inputs.
fn input(inputs: &[HostTensor], index: usize) -> Result<&HostTensor, KernelError> {
    inputs
        .get(index)
        .ok_or_else(|| KernelError::invalid(format!("missing input {index}")))
}

/// Input `index`, which must have `dtype`.
fn typed_input(
    inputs: &[HostTensor],
    index: usize,
    dtype: DType,
) -> Result<&HostTensor, KernelError> {
    of_dtype(input(inputs, index)?, index, dtype)
}

/// `tensor`, given as input `index`, which must hold `dtype`.
fn of_dtype(tensor: &HostTensor, index: usize, dtype: DType) -> Result<&HostTensor, KernelError> {
    if tensor.dtype() != dtype {
        return Err(KernelError::InputDType {
            input: index,
            expected: dtype,
            got: tensor.dtype(),
        });
    }
    Ok(tensor)
}

/// The error for an input that must be a scalar.
fn not_scalar(index: usize, tensor: &HostTensor) -> KernelError {
    KernelError::InputShape {
        input: index,
        expected: "a scalar".to_owned(),
        got: tensor.shape().to_vec(),
    }
}

/// Input `index` as a string scalar.
fn string_scalar(inputs: &[HostTensor], index: usize) -> Result<&[u8], KernelError> {
    let tensor = typed_input(inputs, index, DType::String)?;
    tensor
        .as_string_scalar()
        .ok_or_else(|| not_scalar(index, tensor))
}

/// Input `index` as a UTF-8 string scalar (a path or key).
fn utf8_scalar(inputs: &[HostTensor], index: usize) -> Result<&str, KernelError> {
    let bytes = string_scalar(inputs, index)?;
    std::str::from_utf8(bytes)
        .map_err(|_| KernelError::invalid(format!("input {index} is not valid UTF-8")))
}

/// Input `index` as an int32 scalar.
fn i32_scalar(inputs: &[HostTensor], index: usize) -> Result<i32, KernelError> {
    let tensor = typed_input(inputs, index, DType::Int32)?;
    tensor
        .as_i32_scalar()
        .ok_or_else(|| not_scalar(index, tensor))
}
