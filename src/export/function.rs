//! `FunctionDef` ↔ [`Function`] and `FunctionDefLibrary` ↔ [`Library`], signatures included.
//!
//! A function body becomes a [`saveplan_ir::Graph`] that starts with one [`Op::Arg`] op per
//! input argument (named after it, attrs `index` and, for a fixed dtype, `T`), followed by the
//! body nodes in file order. Export leaves the `_Arg` ops out again.

use prost::Message;
use saveplan_ir::{
    ArgDef, AttrDef, AttrValue, Attrs, DType, Function, Graph, Library, Op, Signature,
};
use saveplan_proto::tensorflow as pb;

use super::attr::{
    export_attr, export_attrs, export_shape, import_attr, import_attrs, import_shape,
};
use super::node::{Syntax, encode_node, export_nodes, import_nodes};
use super::{ExportError, ImportError};

/// Converts a `FunctionDef` into a [`Function`].
pub fn import_function_def(function_def: &pb::FunctionDef) -> Result<Function, ImportError> {
    let name = function_def
        .signature
        .as_ref()
        .map(|sig| sig.name.clone())
        .unwrap_or_default();
    import_function_inner(function_def).map_err(|source| ImportError::InFunction {
        function: name,
        source: Box::new(source),
    })
}

/// Converts a [`Function`] into a `FunctionDef`.
pub fn function_def(function: &Function) -> Result<pb::FunctionDef, ExportError> {
    export_function_inner(function).map_err(|source| ExportError::InFunction {
        function: function.signature.name.clone(),
        source: Box::new(source),
    })
}

/// Converts a function library.
pub(crate) fn import_library(library: &pb::FunctionDefLibrary) -> Result<Library, ImportError> {
    Ok(Library {
        functions: library
            .function
            .iter()
            .map(import_function_def)
            .collect::<Result<_, _>>()?,
        gradients: library
            .gradient
            .iter()
            .map(|gradient| {
                (
                    gradient.function_name.clone(),
                    gradient.gradient_func.clone(),
                )
            })
            .collect(),
        registered_gradients: library
            .registered_gradients
            .iter()
            .map(|gradient| {
                (
                    gradient.gradient_func.clone(),
                    gradient.registered_op_type.clone(),
                )
            })
            .collect(),
    })
}

/// Converts a function library back, or `None` when it is empty.
pub(crate) fn export_library(
    library: &Library,
) -> Result<Option<pb::FunctionDefLibrary>, ExportError> {
    if library.is_empty() {
        return Ok(None);
    }
    Ok(Some(pb::FunctionDefLibrary {
        function: library
            .functions
            .iter()
            .map(function_def)
            .collect::<Result<_, _>>()?,
        gradient: library
            .gradients
            .iter()
            .map(|(function_name, gradient_func)| pb::GradientDef {
                function_name: function_name.clone(),
                gradient_func: gradient_func.clone(),
            })
            .collect(),
        registered_gradients: library
            .registered_gradients
            .iter()
            .map(
                |(gradient_func, registered_op_type)| pb::RegisteredGradient {
                    gradient_func: gradient_func.clone(),
                    registered_op_type: registered_op_type.clone(),
                },
            )
            .collect(),
    }))
}

fn import_function_inner(function_def: &pb::FunctionDef) -> Result<Function, ImportError> {
    let signature = match &function_def.signature {
        Some(sig) => import_signature(sig)?,
        None => Signature::default(),
    };
    let mut body = Graph::new();
    for (index, arg) in signature.input_args.iter().enumerate() {
        let mut attrs = Attrs::new();
        if arg.dtype != DType::Invalid {
            attrs.insert("T", AttrValue::Type(arg.dtype));
        }
        attrs.insert("index", AttrValue::I(index as i64));
        body.add_op(arg.name.clone(), Op::Arg, "", attrs)
            .map_err(|_| ImportError::DuplicateNode {
                node: arg.name.clone(),
            })?;
    }
    import_nodes(&mut body, &function_def.node_def, Syntax::FunctionBody)?;
    let function_attrs = |attrs| {
        import_attrs(attrs)
            .map_err(|(attr, source)| ImportError::UnsupportedFunctionTensor { attr, source })
    };
    Ok(Function {
        signature,
        attr: function_attrs(&function_def.attr)?,
        arg_attr: function_def
            .arg_attr
            .iter()
            .map(|(&index, arg_attrs)| Ok((index, function_attrs(&arg_attrs.attr)?)))
            .collect::<Result<_, ImportError>>()?,
        resource_arg_unique_id: function_def.resource_arg_unique_id.clone(),
        body,
        ret: function_def.ret.clone(),
        control_ret: function_def.control_ret.clone(),
    })
}

/// Writes the encoded `FunctionDef` of `function` (no outer tag): the same bytes as
/// `function_def(function)?.encode_to_vec()`, body nodes written one at a time.
pub(crate) fn encode_function_def(
    function: &Function,
    buf: &mut Vec<u8>,
) -> Result<(), ExportError> {
    encode_function_inner(function, buf).map_err(|source| ExportError::InFunction {
        function: function.signature.name.clone(),
        source: Box::new(source),
    })
}

fn encode_function_inner(function: &Function, buf: &mut Vec<u8>) -> Result<(), ExportError> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    // prost writes fields in tag order: `signature` (1), every `node_def` (3), then `ret` (4),
    // `attr` (5), `control_ret` (6), `arg_attr` (7) and `resource_arg_unique_id` (8).
    let head = pb::FunctionDef {
        signature: Some(export_signature(&function.signature)?),
        ..pb::FunctionDef::default()
    };
    buf.extend(head.encode_to_vec());
    let body = &function.body;
    let mut node = Vec::with_capacity(1024);
    let mut scratch = Vec::new();
    for id in body.ops() {
        if body.op(id).op == Op::Arg {
            continue;
        }
        node.clear();
        encode_node(body, id, Syntax::FunctionBody, &mut node, &mut scratch)?;
        encode_key(3, WireType::LengthDelimited, buf);
        encode_varint(node.len() as u64, buf);
        buf.extend_from_slice(&node);
    }
    let mut tail = export_function_parts(function)?;
    tail.signature = None;
    buf.extend(tail.encode_to_vec());
    Ok(())
}

/// Every field of a function's `FunctionDef` but `node_def`.
fn export_function_parts(function: &Function) -> Result<pb::FunctionDef, ExportError> {
    Ok(pb::FunctionDef {
        signature: Some(export_signature(&function.signature)?),
        attr: export_attrs(&function.attr),
        arg_attr: function
            .arg_attr
            .iter()
            .map(|(&index, attrs)| {
                (
                    index,
                    pb::function_def::ArgAttrs {
                        attr: export_attrs(attrs),
                    },
                )
            })
            .collect(),
        resource_arg_unique_id: function.resource_arg_unique_id.clone(),
        node_def: Vec::new(),
        ret: function.ret.clone(),
        control_ret: function.control_ret.clone(),
    })
}

fn export_function_inner(function: &Function) -> Result<pb::FunctionDef, ExportError> {
    Ok(pb::FunctionDef {
        node_def: export_nodes(&function.body, Syntax::FunctionBody)?,
        ..export_function_parts(function)?
    })
}

/// Converts an `OpDef` used as a function signature.
pub(crate) fn import_signature(sig: &pb::OpDef) -> Result<Signature, ImportError> {
    Ok(Signature {
        name: sig.name.clone(),
        input_args: sig.input_arg.iter().map(import_arg_def).collect(),
        output_args: sig.output_arg.iter().map(import_arg_def).collect(),
        control_outputs: sig.control_output.clone(),
        attrs: sig
            .attr
            .iter()
            .map(import_attr_def)
            .collect::<Result<_, _>>()?,
        deprecation: sig
            .deprecation
            .as_ref()
            .map(|deprecation| (deprecation.version, deprecation.explanation.clone())),
        summary: sig.summary.clone(),
        description: sig.description.clone(),
        is_commutative: sig.is_commutative,
        is_aggregate: sig.is_aggregate,
        is_stateful: sig.is_stateful,
        allows_uninitialized_input: sig.allows_uninitialized_input,
        is_distributed_communication: sig.is_distributed_communication,
    })
}

/// Converts a function signature back to an `OpDef`.
pub(crate) fn export_signature(sig: &Signature) -> Result<pb::OpDef, ExportError> {
    Ok(pb::OpDef {
        name: sig.name.clone(),
        input_arg: sig
            .input_args
            .iter()
            .map(export_arg_def)
            .collect::<Result<_, _>>()?,
        output_arg: sig
            .output_args
            .iter()
            .map(export_arg_def)
            .collect::<Result<_, _>>()?,
        control_output: sig.control_outputs.clone(),
        attr: sig.attrs.iter().map(export_attr_def).collect(),
        deprecation: sig
            .deprecation
            .as_ref()
            .map(|(version, explanation)| pb::OpDeprecation {
                version: *version,
                explanation: explanation.clone(),
            }),
        summary: sig.summary.clone(),
        description: sig.description.clone(),
        is_commutative: sig.is_commutative,
        is_aggregate: sig.is_aggregate,
        is_stateful: sig.is_stateful,
        allows_uninitialized_input: sig.allows_uninitialized_input,
        is_distributed_communication: sig.is_distributed_communication,
    })
}

fn import_arg_def(arg: &pb::op_def::ArgDef) -> ArgDef {
    ArgDef {
        name: arg.name.clone(),
        description: arg.description.clone(),
        dtype: DType::from_number(arg.r#type),
        type_attr: arg.type_attr.clone(),
        number_attr: arg.number_attr.clone(),
        type_list_attr: arg.type_list_attr.clone(),
        handle_data: arg
            .handle_data
            .iter()
            .map(|handle| {
                (
                    DType::from_number(handle.dtype),
                    handle.shape.as_ref().map(import_shape).unwrap_or_default(),
                )
            })
            .collect(),
        is_ref: arg.is_ref,
        experimental_full_type: arg
            .experimental_full_type
            .as_ref()
            .map(|full_type| full_type.encode_to_vec()),
    }
}

fn export_arg_def(arg: &ArgDef) -> Result<pb::op_def::ArgDef, ExportError> {
    let experimental_full_type = match &arg.experimental_full_type {
        Some(bytes) => Some(pb::FullTypeDef::decode(bytes.as_slice()).map_err(|source| {
            ExportError::CorruptBytes {
                owner: format!("argument `{}`", arg.name),
                field: "experimental_full_type",
                source,
            }
        })?),
        None => None,
    };
    Ok(pb::op_def::ArgDef {
        name: arg.name.clone(),
        description: arg.description.clone(),
        r#type: arg.dtype.number(),
        type_attr: arg.type_attr.clone(),
        number_attr: arg.number_attr.clone(),
        type_list_attr: arg.type_list_attr.clone(),
        handle_data: arg
            .handle_data
            .iter()
            .map(|(dtype, shape)| pb::resource_handle_proto::DtypeAndShape {
                dtype: dtype.number(),
                shape: Some(export_shape(shape)),
            })
            .collect(),
        is_ref: arg.is_ref,
        experimental_full_type,
    })
}

fn import_attr_def(attr: &pb::op_def::AttrDef) -> Result<AttrDef, ImportError> {
    let value = |value: &Option<pb::AttrValue>| {
        value
            .as_ref()
            .map(import_attr)
            .transpose()
            .map_err(|source| ImportError::UnsupportedFunctionTensor {
                attr: attr.name.clone(),
                source,
            })
    };
    Ok(AttrDef {
        name: attr.name.clone(),
        ty: attr.r#type.clone(),
        default_value: value(&attr.default_value)?,
        description: attr.description.clone(),
        has_minimum: attr.has_minimum,
        minimum: attr.minimum,
        allowed_values: value(&attr.allowed_values)?,
    })
}

fn export_attr_def(attr: &AttrDef) -> pb::op_def::AttrDef {
    pb::op_def::AttrDef {
        name: attr.name.clone(),
        r#type: attr.ty.clone(),
        default_value: attr.default_value.as_ref().map(export_attr),
        description: attr.description.clone(),
        has_minimum: attr.has_minimum,
        minimum: attr.minimum,
        allowed_values: attr.allowed_values.as_ref().map(export_attr),
    }
}
