//! Constant tensors encoded the way TensorFlow's Python `make_tensor_proto` encodes them.
//!
//! The rule (read from `tensor_util.make_tensor_proto`, confirmed by every `Const` in the
//! `graph/` fixtures): when the values fill the whole shape, the shape has more than one
//! element and the dtype is one of `_TENSOR_CONTENT_TYPES`, the elements go into
//! `tensor_content` as little-endian bytes; otherwise they go into the typed repeated field
//! (`float_val`, `int_val`, …), where a single value stands for a filled tensor.

use saveplan_ir::{DType, Shape, Tensor, TensorValues};

/// One element of an initial value, as written in a spec file.
#[derive(Clone, PartialEq, Debug)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string (bytes).
    Bytes(Vec<u8>),
}

/// Why values cannot become a constant tensor (an initial value, a shape or slice bounds).
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
pub enum ConstError {
    /// An integer dtype got a value that is not a whole number.
    #[error("{0:?} is not an integer")]
    NotInteger(Scalar),
    /// A floating-point dtype got a value that is not a number.
    #[error("{0:?} is not a number")]
    NotNumber(Scalar),
    /// A bool tensor got a value that is not a bool.
    #[error("{0:?} is not a bool")]
    NotBool(Scalar),
    /// A string tensor got a value that is not a string.
    #[error("{0:?} is not a string")]
    NotString(Scalar),
    /// An integer is outside the range of the dtype.
    #[error("{value} does not fit in {dtype}")]
    OutOfRange {
        /// The value.
        value: i64,
        /// The dtype it should fit.
        dtype: DType,
    },
    /// Constants of this dtype cannot be written from spec values.
    #[error("initial values of dtype {0} are not supported")]
    UnsupportedDType(DType),
    /// The number of values neither fills the shape nor is one value to fill it with.
    #[error("{n_values} values for a tensor of {n_elements} elements")]
    WrongCount {
        /// The number of values given.
        n_values: usize,
        /// The number of elements of the shape.
        n_elements: i64,
    },
    /// A JSON number of a spec file fits neither an `i64` nor an `f64`.
    #[error("number {0} is out of range")]
    NumberOutOfRange(String),
    /// A JSON value of a spec file is not a number, bool, string or array of them.
    #[error("unsupported value `{0}`")]
    UnsupportedValue(String),
}

/// Dtypes whose full, multi-element constants are written to `tensor_content`.
fn uses_tensor_content(dtype: DType) -> bool {
    use DType::*;
    matches!(
        dtype,
        Half | Float
            | Double
            | Int32
            | UInt8
            | Int16
            | Int8
            | Int64
            | QInt8
            | QUInt8
            | QInt16
            | QUInt16
            | QInt32
            | UInt32
            | UInt64
            | Float8E5M2
            | Float8E4M3FN
            | BFloat16
    )
}

/// The constant `values` of `dtype` with `shape`; `values` holds every element in row-major
/// order or a single value that fills the shape. Fails when a value does not fit the dtype or
/// the dtype cannot be written from spec values.
pub fn make_tensor(dtype: DType, shape: &[i64], values: &[Scalar]) -> Result<Tensor, ConstError> {
    let n_elements: i64 = shape.iter().product();
    let full = i64::try_from(values.len()).is_ok_and(|n| n == n_elements);
    let tensor_values = if full && n_elements > 1 && uses_tensor_content(dtype) {
        TensorValues::Content(content_bytes(dtype, values)?)
    } else {
        typed_values(dtype, values)?
    };
    Ok(Tensor {
        dtype,
        shape: Some(Shape::from_dims(shape)),
        version_number: 0,
        values: tensor_values,
    })
}

/// The zero of `dtype` as a spec value.
pub fn zero(dtype: DType) -> Scalar {
    match dtype {
        DType::Bool => Scalar::Bool(false),
        DType::String => Scalar::Bytes(Vec::new()),
        DType::Float | DType::Double | DType::Half | DType::BFloat16 => Scalar::Float(0.0),
        _ => Scalar::Int(0),
    }
}

/// A rank-1 int32 constant (`Slice` begin and size).
pub fn int32_vector(values: &[i64]) -> Result<Tensor, ConstError> {
    let values: Vec<Scalar> = values.iter().map(|&v| Scalar::Int(v)).collect();
    make_tensor(DType::Int32, &[values.len() as i64], &values)
}

fn as_i64(value: &Scalar) -> Result<i64, ConstError> {
    match value {
        Scalar::Int(v) => Ok(*v),
        Scalar::Bool(b) => Ok(i64::from(*b)),
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        other => Err(ConstError::NotInteger(other.clone())),
    }
}

fn as_f64(value: &Scalar) -> Result<f64, ConstError> {
    match value {
        Scalar::Float(f) => Ok(*f),
        Scalar::Int(v) => Ok(*v as f64),
        other => Err(ConstError::NotNumber(other.clone())),
    }
}

fn narrow<T: TryFrom<i64>>(value: &Scalar, dtype: DType) -> Result<T, ConstError> {
    let wide = as_i64(value)?;
    T::try_from(wide).map_err(|_| ConstError::OutOfRange { value: wide, dtype })
}

fn content_bytes(dtype: DType, values: &[Scalar]) -> Result<Vec<u8>, ConstError> {
    let mut bytes = Vec::new();
    for value in values {
        match dtype {
            DType::Float => bytes.extend((as_f64(value)? as f32).to_le_bytes()),
            DType::Double => bytes.extend(as_f64(value)?.to_le_bytes()),
            DType::Int32 | DType::QInt32 => {
                bytes.extend(narrow::<i32>(value, dtype)?.to_le_bytes())
            }
            DType::Int64 => bytes.extend(as_i64(value)?.to_le_bytes()),
            DType::Int16 | DType::QInt16 => {
                bytes.extend(narrow::<i16>(value, dtype)?.to_le_bytes())
            }
            DType::QUInt16 => bytes.extend(narrow::<u16>(value, dtype)?.to_le_bytes()),
            DType::Int8 | DType::QInt8 => bytes.extend(narrow::<i8>(value, dtype)?.to_le_bytes()),
            DType::UInt8 | DType::QUInt8 => bytes.extend(narrow::<u8>(value, dtype)?.to_le_bytes()),
            DType::UInt32 => bytes.extend(narrow::<u32>(value, dtype)?.to_le_bytes()),
            DType::UInt64 => bytes.extend(narrow::<u64>(value, dtype)?.to_le_bytes()),
            _ => return Err(ConstError::UnsupportedDType(dtype)),
        }
    }
    Ok(bytes)
}

fn typed_values(dtype: DType, values: &[Scalar]) -> Result<TensorValues, ConstError> {
    // `int_val` holds the small integer types widened to int32; check each type's own range.
    let int = |value: &Scalar| -> Result<i32, ConstError> {
        match dtype {
            DType::Int8 | DType::QInt8 => narrow::<i8>(value, dtype).map(i32::from),
            DType::UInt8 | DType::QUInt8 => narrow::<u8>(value, dtype).map(i32::from),
            DType::Int16 | DType::QInt16 => narrow::<i16>(value, dtype).map(i32::from),
            DType::UInt16 | DType::QUInt16 => narrow::<u16>(value, dtype).map(i32::from),
            _ => narrow::<i32>(value, dtype),
        }
    };
    let ints =
        |values: &[Scalar]| -> Result<Vec<i32>, ConstError> { values.iter().map(int).collect() };
    Ok(match dtype {
        DType::Float => TensorValues::Float(
            values
                .iter()
                .map(|v| as_f64(v).map(|f| f as f32))
                .collect::<Result<_, _>>()?,
        ),
        DType::Double => TensorValues::Double(values.iter().map(as_f64).collect::<Result<_, _>>()?),
        DType::Int32
        | DType::Int16
        | DType::Int8
        | DType::UInt8
        | DType::UInt16
        | DType::QInt8
        | DType::QUInt8
        | DType::QInt16
        | DType::QUInt16
        | DType::QInt32 => TensorValues::Int(ints(values)?),
        DType::Int64 => TensorValues::Int64(values.iter().map(as_i64).collect::<Result<_, _>>()?),
        DType::UInt32 => TensorValues::UInt32(
            values
                .iter()
                .map(|v| narrow::<u32>(v, dtype))
                .collect::<Result<_, _>>()?,
        ),
        DType::UInt64 => TensorValues::UInt64(
            values
                .iter()
                .map(|v| narrow::<u64>(v, dtype))
                .collect::<Result<_, _>>()?,
        ),
        DType::Bool => TensorValues::Bool(
            values
                .iter()
                .map(|v| match v {
                    Scalar::Bool(b) => Ok(*b),
                    other => Err(ConstError::NotBool(other.clone())),
                })
                .collect::<Result<_, _>>()?,
        ),
        DType::String => TensorValues::String(
            values
                .iter()
                .map(|v| match v {
                    Scalar::Bytes(b) => Ok(b.clone()),
                    other => Err(ConstError::NotString(other.clone())),
                })
                .collect::<Result<_, _>>()?,
        ),
        // Only the zero of these types is supported: its bit pattern is 0.
        DType::Half | DType::BFloat16 if values.iter().all(|v| as_f64(v) == Ok(0.0)) => {
            TensorValues::Half(vec![0; values.len()])
        }
        _ => return Err(ConstError::UnsupportedDType(dtype)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_only_for_full_multi_element_tensors() {
        let full = make_tensor(DType::Float, &[3], &vec![Scalar::Float(1.0); 3]).unwrap();
        assert!(matches!(full.values, TensorValues::Content(ref b) if b.len() == 12));
        let filled = make_tensor(DType::Float, &[10, 8], &[Scalar::Float(0.0)]).unwrap();
        assert_eq!(filled.values, TensorValues::Float(vec![0.0]));
        let one = make_tensor(DType::Int32, &[1], &[Scalar::Int(0)]).unwrap();
        assert_eq!(one.values, TensorValues::Int(vec![0]));
        let flags = make_tensor(DType::Bool, &[2], &vec![Scalar::Bool(true); 2]).unwrap();
        assert_eq!(flags.values, TensorValues::Bool(vec![true, true]));
        let err = make_tensor(DType::Int8, &[], &[Scalar::Int(300)]).unwrap_err();
        assert_eq!(
            err,
            ConstError::OutOfRange {
                value: 300,
                dtype: DType::Int8
            }
        );
        assert_eq!(err.to_string(), "300 does not fit in int8");
    }
}
