//! Attribute values, tensors and shapes: `saveplan_ir` values ↔ `tensorflow.AttrValue`,
//! `TensorProto` and `TensorShapeProto`, both ways and without loss.

use saveplan_ir::{
    AttrList, AttrValue, Attrs, DType, Dim, NameAttrList, Shape, Tensor, TensorValues,
};
use saveplan_proto::tensorflow as pb;
use saveplan_proto::tensorflow::attr_value::{ListValue, Value};
use saveplan_proto::tensorflow::tensor_shape_proto;

/// Why a `TensorProto` cannot be represented in the IR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// More than one value field is set, such as both `tensor_content` and `float_val`.
    #[error("tensor sets several value fields ({fields})")]
    MixedValues {
        /// The fields that are set, comma-separated.
        fields: String,
    },
    /// A value field the IR does not model (`resource_handle_val`, `variant_val`).
    #[error("tensor uses `{field}`, which saveplan does not support")]
    Unsupported {
        /// The field name.
        field: &'static str,
    },
}

/// Converts an attribute map.
pub(crate) fn import_attrs(
    attrs: &std::collections::BTreeMap<String, pb::AttrValue>,
) -> Result<Attrs, (String, TensorError)> {
    attrs
        .iter()
        .map(|(name, value)| match import_attr(value) {
            Ok(value) => Ok((name.clone(), value)),
            Err(err) => Err((name.clone(), err)),
        })
        .collect()
}

/// Converts an attribute map back to protobuf.
pub(crate) fn export_attrs(attrs: &Attrs) -> std::collections::BTreeMap<String, pb::AttrValue> {
    attrs
        .iter()
        .map(|(name, value)| (name.to_owned(), export_attr(value)))
        .collect()
}

/// Converts one attribute value.
pub(crate) fn import_attr(value: &pb::AttrValue) -> Result<AttrValue, TensorError> {
    Ok(match &value.value {
        None => AttrValue::Unset,
        Some(Value::S(s)) => AttrValue::S(s.clone()),
        Some(Value::I(i)) => AttrValue::I(*i),
        Some(Value::F(f)) => AttrValue::F(*f),
        Some(Value::B(b)) => AttrValue::B(*b),
        Some(Value::Type(t)) => AttrValue::Type(DType::from_number(*t)),
        Some(Value::Shape(shape)) => AttrValue::Shape(import_shape(shape)),
        Some(Value::Tensor(tensor)) => AttrValue::Tensor(Box::new(import_tensor(tensor)?)),
        Some(Value::List(list)) => AttrValue::List(Box::new(import_list(list)?)),
        Some(Value::Func(func)) => AttrValue::Func(Box::new(import_func(func)?)),
        Some(Value::Placeholder(name)) => AttrValue::Placeholder(name.clone()),
    })
}

/// Converts one attribute value back to protobuf.
pub(crate) fn export_attr(value: &AttrValue) -> pb::AttrValue {
    let value = match value {
        AttrValue::Unset => None,
        AttrValue::S(s) => Some(Value::S(s.clone())),
        AttrValue::I(i) => Some(Value::I(*i)),
        AttrValue::F(f) => Some(Value::F(*f)),
        AttrValue::B(b) => Some(Value::B(*b)),
        AttrValue::Type(t) => Some(Value::Type(t.number())),
        AttrValue::Shape(shape) => Some(Value::Shape(export_shape(shape))),
        AttrValue::Tensor(tensor) => Some(Value::Tensor(Box::new(export_tensor(tensor)))),
        AttrValue::List(list) => Some(Value::List(Box::new(export_list(list)))),
        AttrValue::Func(func) => Some(Value::Func(export_func(func))),
        AttrValue::Placeholder(name) => Some(Value::Placeholder(name.clone())),
    };
    pb::AttrValue { value }
}

/// Writes the fields of `value`'s `AttrValue` message into `buf` (no key, no length), byte
/// for byte what prost writes for [`export_attr`]`(value)`, without building it: scalars,
/// shapes and lists of them are written here (a plan's attributes are nearly all of these),
/// tensors and functions through prost. `false`, writing nothing, for an unset value.
pub(crate) fn encode_attr_value(value: &AttrValue, buf: &mut Vec<u8>) -> bool {
    use prost::encoding::{WireType, encode_key, encode_varint};
    match value {
        AttrValue::Unset => return false,
        AttrValue::S(s) => put_bytes(2, s, buf),
        AttrValue::I(i) => {
            encode_key(3, WireType::Varint, buf);
            encode_varint(*i as u64, buf);
        }
        AttrValue::F(f) => {
            encode_key(4, WireType::ThirtyTwoBit, buf);
            buf.extend_from_slice(&f.to_le_bytes());
        }
        AttrValue::B(b) => {
            encode_key(5, WireType::Varint, buf);
            encode_varint(u64::from(*b), buf);
        }
        AttrValue::Type(dtype) => {
            encode_key(6, WireType::Varint, buf);
            encode_varint(enum_varint(*dtype), buf);
        }
        AttrValue::Shape(shape) => {
            encode_key(7, WireType::LengthDelimited, buf);
            encode_varint(shape_len(shape) as u64, buf);
            encode_shape(shape, buf);
        }
        AttrValue::List(list) if list.tensors.is_empty() && list.funcs.is_empty() => {
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(list_len(list) as u64, buf);
            encode_list(list, buf);
        }
        AttrValue::List(_)
        | AttrValue::Tensor(_)
        | AttrValue::Func(_)
        | AttrValue::Placeholder(_) => {
            prost::Message::encode_raw(&export_attr(value), buf);
        }
    }
    true
}

/// The varint of an `int32` or enum field: negative values take ten bytes, as in protobuf.
fn enum_varint(dtype: DType) -> u64 {
    i64::from(dtype.number()) as u64
}

/// Field `tag` holding `bytes`.
fn put_bytes(tag: u32, bytes: &[u8], buf: &mut Vec<u8>) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.extend_from_slice(bytes);
}

/// The encoded length of field `tag` holding `len` bytes.
fn field_len(tag: u32, len: usize) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// The encoded length of a `TensorShapeProto.Dim`.
fn dim_len(dim: &Dim) -> usize {
    use prost::encoding::encoded_len_varint;
    let size = if dim.size == 0 {
        0
    } else {
        1 + encoded_len_varint(dim.size as u64)
    };
    let name = if dim.name.is_empty() {
        0
    } else {
        field_len(2, dim.name.len())
    };
    size + name
}

/// The encoded length of a `TensorShapeProto`.
fn shape_len(shape: &Shape) -> usize {
    let dims: usize = shape
        .dims
        .iter()
        .map(|dim| field_len(2, dim_len(dim)))
        .sum();
    dims + if shape.unknown_rank { 2 } else { 0 }
}

/// A `TensorShapeProto`'s fields: `dim` (2; `size` 1, `name` 2, each left out when default),
/// then `unknown_rank` (3) when set.
fn encode_shape(shape: &Shape, buf: &mut Vec<u8>) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    for dim in &shape.dims {
        encode_key(2, WireType::LengthDelimited, buf);
        encode_varint(dim_len(dim) as u64, buf);
        if dim.size != 0 {
            encode_key(1, WireType::Varint, buf);
            encode_varint(dim.size as u64, buf);
        }
        if !dim.name.is_empty() {
            put_bytes(2, dim.name.as_bytes(), buf);
        }
    }
    if shape.unknown_rank {
        encode_key(3, WireType::Varint, buf);
        encode_varint(1, buf);
    }
}

/// The encoded length of `values` as varints.
fn varints_len(values: impl Iterator<Item = u64>) -> usize {
    values.map(prost::encoding::encoded_len_varint).sum()
}

/// The encoded length of a packed field `tag` of `len` bytes: nothing when empty.
fn packed_len(tag: u32, len: usize) -> usize {
    if len == 0 { 0 } else { field_len(tag, len) }
}

/// The encoded length of a `ListValue` without tensors or functions.
fn list_len(list: &AttrList) -> usize {
    let s: usize = list.s.iter().map(|s| field_len(2, s.len())).sum();
    let i = packed_len(3, varints_len(list.i.iter().map(|&i| i as u64)));
    let f = packed_len(4, 4 * list.f.len());
    let b = packed_len(5, list.b.len());
    let types = packed_len(6, varints_len(list.types.iter().map(|&t| enum_varint(t))));
    let shapes: usize = list
        .shapes
        .iter()
        .map(|shape| field_len(7, shape_len(shape)))
        .sum();
    s + i + f + b + types + shapes
}

/// A `ListValue`'s fields in tag order: `s` (2), then `i` (3), `f` (4), `b` (5) and `type`
/// (6), each packed and left out when empty, then `shape` (7). Tensors (8) and functions
/// (9) are not written here.
fn encode_list(list: &AttrList, buf: &mut Vec<u8>) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let start_packed = |tag: u32, len: usize, buf: &mut Vec<u8>| {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(len as u64, buf);
    };
    for s in &list.s {
        put_bytes(2, s, buf);
    }
    if !list.i.is_empty() {
        start_packed(3, varints_len(list.i.iter().map(|&i| i as u64)), buf);
        for &i in &list.i {
            encode_varint(i as u64, buf);
        }
    }
    if !list.f.is_empty() {
        start_packed(4, 4 * list.f.len(), buf);
        for f in &list.f {
            buf.extend_from_slice(&f.to_le_bytes());
        }
    }
    if !list.b.is_empty() {
        start_packed(5, list.b.len(), buf);
        buf.extend(list.b.iter().map(|&b| u8::from(b)));
    }
    if !list.types.is_empty() {
        start_packed(
            6,
            varints_len(list.types.iter().map(|&t| enum_varint(t))),
            buf,
        );
        for &dtype in &list.types {
            encode_varint(enum_varint(dtype), buf);
        }
    }
    for shape in &list.shapes {
        encode_key(7, WireType::LengthDelimited, buf);
        encode_varint(shape_len(shape) as u64, buf);
        encode_shape(shape, buf);
    }
}

fn import_list(list: &ListValue) -> Result<AttrList, TensorError> {
    Ok(AttrList {
        s: list.s.clone(),
        i: list.i.clone(),
        f: list.f.clone(),
        b: list.b.clone(),
        types: list.r#type.iter().map(|&t| DType::from_number(t)).collect(),
        shapes: list.shape.iter().map(import_shape).collect(),
        tensors: list
            .tensor
            .iter()
            .map(import_tensor)
            .collect::<Result<_, _>>()?,
        funcs: list
            .func
            .iter()
            .map(import_func)
            .collect::<Result<_, _>>()?,
    })
}

fn export_list(list: &AttrList) -> ListValue {
    ListValue {
        s: list.s.clone(),
        i: list.i.clone(),
        f: list.f.clone(),
        b: list.b.clone(),
        r#type: list.types.iter().map(|t| t.number()).collect(),
        shape: list.shapes.iter().map(export_shape).collect(),
        tensor: list.tensors.iter().map(export_tensor).collect(),
        func: list.funcs.iter().map(export_func).collect(),
    }
}

fn import_func(func: &pb::NameAttrList) -> Result<NameAttrList, TensorError> {
    Ok(NameAttrList {
        name: func.name.clone(),
        attr: import_attrs(&func.attr).map_err(|(_, err)| err)?,
    })
}

fn export_func(func: &NameAttrList) -> pb::NameAttrList {
    pb::NameAttrList {
        name: func.name.clone(),
        attr: export_attrs(&func.attr),
    }
}

/// Converts a shape.
pub(crate) fn import_shape(shape: &pb::TensorShapeProto) -> Shape {
    Shape {
        dims: shape
            .dim
            .iter()
            .map(|dim| Dim {
                size: dim.size,
                name: dim.name.clone(),
            })
            .collect(),
        unknown_rank: shape.unknown_rank,
    }
}

/// Converts a shape back to protobuf.
pub(crate) fn export_shape(shape: &Shape) -> pb::TensorShapeProto {
    pb::TensorShapeProto {
        dim: shape
            .dims
            .iter()
            .map(|dim| tensor_shape_proto::Dim {
                size: dim.size,
                name: dim.name.clone(),
            })
            .collect(),
        unknown_rank: shape.unknown_rank,
    }
}

/// Converts a tensor, keeping the value field it was written with.
pub(crate) fn import_tensor(tensor: &pb::TensorProto) -> Result<Tensor, TensorError> {
    if !tensor.resource_handle_val.is_empty() {
        return Err(TensorError::Unsupported {
            field: "resource_handle_val",
        });
    }
    if !tensor.variant_val.is_empty() {
        return Err(TensorError::Unsupported {
            field: "variant_val",
        });
    }
    let candidates = [
        (
            "tensor_content",
            (!tensor.tensor_content.is_empty())
                .then(|| TensorValues::Content(tensor.tensor_content.clone())),
        ),
        ("half_val", non_empty(&tensor.half_val, TensorValues::Half)),
        (
            "float_val",
            non_empty(&tensor.float_val, TensorValues::Float),
        ),
        (
            "double_val",
            non_empty(&tensor.double_val, TensorValues::Double),
        ),
        ("int_val", non_empty(&tensor.int_val, TensorValues::Int)),
        (
            "string_val",
            non_empty(&tensor.string_val, TensorValues::String),
        ),
        (
            "scomplex_val",
            non_empty(&tensor.scomplex_val, TensorValues::SComplex),
        ),
        (
            "int64_val",
            non_empty(&tensor.int64_val, TensorValues::Int64),
        ),
        ("bool_val", non_empty(&tensor.bool_val, TensorValues::Bool)),
        (
            "dcomplex_val",
            non_empty(&tensor.dcomplex_val, TensorValues::DComplex),
        ),
        (
            "uint32_val",
            non_empty(&tensor.uint32_val, TensorValues::UInt32),
        ),
        (
            "uint64_val",
            non_empty(&tensor.uint64_val, TensorValues::UInt64),
        ),
        (
            "float8_val",
            (!tensor.float8_val.is_empty())
                .then(|| TensorValues::Float8(tensor.float8_val.clone())),
        ),
    ];
    let mut set: Vec<(&str, TensorValues)> = candidates
        .into_iter()
        .filter_map(|(field, values)| values.map(|values| (field, values)))
        .collect();
    let values = match set.len() {
        0 => TensorValues::Empty,
        1 => set.remove(0).1,
        _ => {
            let fields: Vec<&str> = set.iter().map(|(field, _)| *field).collect();
            return Err(TensorError::MixedValues {
                fields: fields.join(", "),
            });
        }
    };
    Ok(Tensor {
        dtype: DType::from_number(tensor.dtype),
        shape: tensor.tensor_shape.as_ref().map(import_shape),
        version_number: tensor.version_number,
        values,
    })
}

fn non_empty<T: Clone>(values: &[T], wrap: fn(Vec<T>) -> TensorValues) -> Option<TensorValues> {
    (!values.is_empty()).then(|| wrap(values.to_vec()))
}

/// Converts a tensor back to protobuf, into the value field it came from.
pub(crate) fn export_tensor(tensor: &Tensor) -> pb::TensorProto {
    let mut out = pb::TensorProto {
        dtype: tensor.dtype.number(),
        tensor_shape: tensor.shape.as_ref().map(export_shape),
        version_number: tensor.version_number,
        ..pb::TensorProto::default()
    };
    match &tensor.values {
        TensorValues::Empty => {}
        TensorValues::Content(bytes) => out.tensor_content = bytes.clone(),
        TensorValues::Half(values) => out.half_val = values.clone(),
        TensorValues::Float(values) => out.float_val = values.clone(),
        TensorValues::Double(values) => out.double_val = values.clone(),
        TensorValues::Int(values) => out.int_val = values.clone(),
        TensorValues::String(values) => out.string_val = values.clone(),
        TensorValues::SComplex(values) => out.scomplex_val = values.clone(),
        TensorValues::Int64(values) => out.int64_val = values.clone(),
        TensorValues::Bool(values) => out.bool_val = values.clone(),
        TensorValues::DComplex(values) => out.dcomplex_val = values.clone(),
        TensorValues::UInt32(values) => out.uint32_val = values.clone(),
        TensorValues::UInt64(values) => out.uint64_val = values.clone(),
        TensorValues::Float8(bytes) => out.float8_val = bytes.clone(),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_keeps_its_representation() {
        let proto = pb::TensorProto {
            dtype: DType::Float.number(),
            tensor_shape: Some(pb::TensorShapeProto::default()),
            float_val: vec![1.5],
            ..pb::TensorProto::default()
        };
        let tensor = import_tensor(&proto).unwrap();
        assert_eq!(tensor.values, TensorValues::Float(vec![1.5]));
        assert_eq!(export_tensor(&tensor), proto);
    }

    #[test]
    fn mixed_tensor_values_are_rejected() {
        let proto = pb::TensorProto {
            dtype: DType::Int32.number(),
            int_val: vec![1],
            tensor_content: vec![0, 0, 0, 0],
            ..pb::TensorProto::default()
        };
        assert_eq!(
            import_tensor(&proto).unwrap_err().to_string(),
            "tensor sets several value fields (tensor_content, int_val)"
        );
    }

    #[test]
    fn unset_and_empty_list_differ() {
        let unset = pb::AttrValue { value: None };
        let empty = pb::AttrValue {
            value: Some(Value::List(Box::default())),
        };
        assert_eq!(import_attr(&unset).unwrap(), AttrValue::Unset);
        assert_eq!(export_attr(&import_attr(&empty).unwrap()), empty);
    }

    mod direct {
        use super::*;
        use proptest::collection::vec;
        use proptest::prelude::*;
        use prost::Message as _;

        fn dtype() -> impl Strategy<Value = DType> {
            // Known types, unknown numbers, and negative ones (ten-byte varints).
            prop_oneof![(0i32..30), (-3i32..0), (100i32..200)].prop_map(DType::from_number)
        }

        fn shape() -> impl Strategy<Value = Shape> {
            let size = prop_oneof![Just(0i64), Just(-1i64), 1i64..300, any::<i64>()];
            (vec((size, "[a-z]{0,2}"), 0..4), any::<bool>()).prop_map(|(dims, unknown_rank)| {
                Shape {
                    dims: dims
                        .into_iter()
                        .map(|(size, name)| Dim { size, name })
                        .collect(),
                    unknown_rank,
                }
            })
        }

        fn list() -> impl Strategy<Value = AttrList> {
            (
                vec(vec(any::<u8>(), 0..4), 0..3),
                vec(any::<i64>(), 0..3),
                vec(any::<f32>(), 0..3),
                vec(any::<bool>(), 0..3),
                vec(dtype(), 0..3),
                vec(shape(), 0..2),
                any::<bool>(),
            )
                .prop_map(|(s, i, f, b, types, shapes, tensor)| AttrList {
                    s,
                    i,
                    f,
                    b,
                    types,
                    shapes,
                    tensors: if tensor {
                        vec![Tensor::string_vector(["a"])]
                    } else {
                        Vec::new()
                    },
                    funcs: Vec::new(),
                })
        }

        fn value() -> impl Strategy<Value = AttrValue> {
            prop_oneof![
                Just(AttrValue::Unset),
                vec(any::<u8>(), 0..200).prop_map(AttrValue::S),
                any::<i64>().prop_map(AttrValue::I),
                any::<f32>().prop_map(AttrValue::F),
                any::<bool>().prop_map(AttrValue::B),
                dtype().prop_map(AttrValue::Type),
                shape().prop_map(AttrValue::Shape),
                list().prop_map(|list| AttrValue::List(Box::new(list))),
                Just(AttrValue::Tensor(Box::new(Tensor::string_vector([
                    "x", ""
                ])))),
                "[a-z]{0,3}".prop_map(AttrValue::Placeholder),
            ]
        }

        proptest! {
            /// Every value is written byte for byte as prost writes the `AttrValue` message.
            #[test]
            fn values_are_written_as_prost_writes_them(value in value()) {
                let mut buf = vec![7u8];
                let set = encode_attr_value(&value, &mut buf);
                let expected = export_attr(&value);
                prop_assert_eq!(set, expected.value.is_some());
                prop_assert_eq!(&buf[1..], &expected.encode_to_vec()[..]);
            }
        }
    }
}
