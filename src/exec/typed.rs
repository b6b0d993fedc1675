//! Typed access to [`HostTensor`]s: [`TensorElement`], the Rust types a tensor's elements can
//! be read and written as (one per fixed-width dtype: `f32`, `i64`, `half::f16`, `bool`,
//! complex numbers as `[re, im]`, …), the constructor [`HostTensor::from_slice`], the views
//! [`HostTensor::to_vec`] and [`HostTensor::as_slice`], and [`HostTensor::cast`] for the
//! conversions that lose nothing. With the `ndarray` feature, [`HostTensor::from_array`] and
//! [`HostTensor::to_array`] convert to and from `ndarray::ArrayD`.
//!
//! ```
//! use saveplan::exec::HostTensor;
//! use saveplan_ir::DType;
//!
//! let t = HostTensor::from_slice(vec![2], &[half::f16::from_f32(1.5), half::f16::ONE])?;
//! assert_eq!(t.dtype(), DType::Half);
//! let wide = t.cast(DType::Float)?;
//! assert_eq!(wide.to_vec::<f32>()?, [1.5, 1.0]);
//! assert!(wide.cast(DType::Half).is_err()); // float32 → float16 may lose
//! # Ok::<(), saveplan::exec::TensorError>(())
//! ```

use saveplan_ir::DType;

use super::tensor::{HostTensor, TensorError};
use crate::bundle::{Element, decode_element};

mod sealed {
    /// Only this module's types are tensor elements.
    pub trait Sealed {}
}

/// A Rust type a fixed-width tensor's elements can be read and written as: the numbers of
/// each dtype, `bool`, `half::f16` and `half::bf16`, and complex numbers as `[re, im]` pairs
/// (`[f32; 2]` for complex64, `[f64; 2]` for complex128). Sealed: the storage layout of each
/// (size, little-endian bytes, no padding) is what [`HostTensor::as_slice`] relies on.
pub trait TensorElement: sealed::Sealed + Copy + std::fmt::Debug + 'static {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;

    /// Appends the little-endian bytes of `self`.
    fn write_le(self, out: &mut Vec<u8>);

    /// Reads one element from its little-endian bytes (exactly the element size).
    fn read_le(bytes: &[u8]) -> Self;

    /// Whether every byte pattern of the element size is a value of this type (false for
    /// `bool`, whose only values are the bytes 0 and 1).
    #[doc(hidden)]
    const ANY_BITS: bool = true;
}

/// Implements [`TensorElement`] for number types with `to_le_bytes`/`from_le_bytes`.
macro_rules! numbers {
    ($($ty:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl TensorElement for $ty {
            const DTYPE: DType = DType::$dtype;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$ty>::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }
        }
    )*};
}

numbers! {
    f32 => Float, f64 => Double,
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => UInt8, u16 => UInt16, u32 => UInt32, u64 => UInt64,
    half::f16 => Half, half::bf16 => BFloat16,
}

/// Implements [`TensorElement`] for complex numbers as `[re, im]` of a float type.
macro_rules! complex {
    ($($float:ty => $dtype:ident),*) => {$(
        impl sealed::Sealed for [$float; 2] {}
        impl TensorElement for [$float; 2] {
            const DTYPE: DType = DType::$dtype;
            fn write_le(self, out: &mut Vec<u8>) {
                self.into_iter().for_each(|part| part.write_le(out));
            }
            fn read_le(bytes: &[u8]) -> Self {
                let (re, im) = bytes.split_at(size_of::<$float>());
                [<$float>::read_le(re), <$float>::read_le(im)]
            }
        }
    )*};
}

complex!(f32 => Complex64, f64 => Complex128);

impl sealed::Sealed for bool {}
impl TensorElement for bool {
    const DTYPE: DType = DType::Bool;
    const ANY_BITS: bool = false;
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

impl HostTensor {
    /// A tensor of `T`'s dtype from row-major elements (copied into little-endian bytes).
    pub fn from_slice<T: TensorElement>(
        shape: Vec<u64>,
        values: &[T],
    ) -> Result<HostTensor, TensorError> {
        let mut bytes = Vec::with_capacity(std::mem::size_of_val(values));
        values.iter().for_each(|value| value.write_le(&mut bytes));
        HostTensor::from_bytes(T::DTYPE, shape, bytes)
    }

    /// A scalar of `T`'s dtype.
    pub fn scalar<T: TensorElement>(value: T) -> HostTensor {
        HostTensor::from_slice(Vec::new(), &[value]).expect("one element fills a scalar")
    }

    /// The elements as `T`, row-major (copied). [`TensorError::ElementType`] unless the
    /// tensor's dtype is `T`'s.
    pub fn to_vec<T: TensorElement>(&self) -> Result<Vec<T>, TensorError> {
        let bytes = self.typed_bytes::<T>()?;
        Ok(bytes.chunks_exact(size_of::<T>()).map(T::read_le).collect())
    }

    /// The elements as `T`, in place (no copy): [`TensorError::ElementType`] unless the
    /// tensor's dtype is `T`'s, and [`TensorError::NoView`] when the bytes cannot be read as
    /// `&[T]` where they are (not aligned for `T`, which a view into a checkpoint file may
    /// well be; a big-endian target; a bool tensor holding a byte other than 0 or 1):
    /// [`HostTensor::to_vec`] reads those.
    pub fn as_slice<T: TensorElement>(&self) -> Result<&[T], TensorError> {
        let bytes = self.typed_bytes::<T>()?;
        let no_view = |reason| TensorError::NoView {
            dtype: T::DTYPE,
            reason,
        };
        if cfg!(target_endian = "big") {
            return Err(no_view("the target is big-endian"));
        }
        if !T::ANY_BITS && bytes.iter().any(|&byte| byte > 1) {
            return Err(no_view("it holds a byte other than 0 and 1"));
        }
        // SAFETY: `T` is one of the sealed types above: plain numbers, `half`'s `u16`
        // wrappers, arrays of two floats, or `bool`; none has padding, and each is its
        // little-endian bytes on this (little-endian) target, so any bytes of the element
        // size are a valid `T`, except for `bool`, whose bytes were just checked to be 0 or 1.
        // `align_to` puts only aligned, whole elements in the middle part, and that part is
        // taken only when it covers every byte.
        let (head, elements, tail) = unsafe { bytes.align_to::<T>() };
        if !head.is_empty() || !tail.is_empty() {
            return Err(no_view("its bytes are not aligned for the element type"));
        }
        Ok(elements)
    }

    /// The element bytes, when the dtype is `T`'s.
    fn typed_bytes<T: TensorElement>(&self) -> Result<&[u8], TensorError> {
        match self.bytes() {
            Some(bytes) if self.dtype() == T::DTYPE => Ok(bytes),
            _ => Err(TensorError::ElementType {
                dtype: self.dtype(),
                requested: T::DTYPE,
            }),
        }
    }

    /// The tensor converted to `dtype`, when every element converts exactly: wider floats
    /// (float16 and bfloat16 to float32 or float64, float32 to float64), wider integers (a
    /// signed type to a wider signed one; an unsigned type to a wider unsigned or signed
    /// one), integers to floats whose mantissa holds them (int8/uint8 to every float,
    /// int16/uint16 to float32 and float64, int32/uint32 to float64), bool to any number,
    /// complex64 to complex128. The same dtype shares the storage. Anything else is
    /// [`TensorError::LossyCast`].
    pub fn cast(&self, dtype: DType) -> Result<HostTensor, TensorError> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let lossy = TensorError::LossyCast {
            from: self.dtype(),
            to: dtype,
        };
        let (Some(from), Some(to)) = (Number::of(self.dtype()), Number::of(dtype)) else {
            return Err(lossy);
        };
        if !from.fits_in(to) {
            return Err(lossy);
        }
        let (bytes, size) = match (self.bytes(), self.dtype().element_size()) {
            (Some(bytes), Some(size)) => (bytes, size),
            _ => return Err(lossy),
        };
        let mut out = Vec::with_capacity(self.num_elements() * to.size());
        for element in bytes.chunks_exact(size) {
            encode(decode_element(self.dtype(), element), dtype, &mut out);
        }
        HostTensor::from_bytes(dtype, self.shape().to_vec(), out)
    }
}

/// What [`HostTensor::cast`] knows of a number dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Number {
    Bool,
    Signed(u32),
    Unsigned(u32),
    /// Significand bits (the implicit one included) and exponent bits.
    Float(u32, u32),
    /// Bits of each part.
    Complex(u32),
}

impl Number {
    fn of(dtype: DType) -> Option<Number> {
        Some(match dtype {
            DType::Bool => Number::Bool,
            DType::Int8 => Number::Signed(8),
            DType::Int16 => Number::Signed(16),
            DType::Int32 => Number::Signed(32),
            DType::Int64 => Number::Signed(64),
            DType::UInt8 => Number::Unsigned(8),
            DType::UInt16 => Number::Unsigned(16),
            DType::UInt32 => Number::Unsigned(32),
            DType::UInt64 => Number::Unsigned(64),
            DType::Half => Number::Float(11, 5),
            DType::BFloat16 => Number::Float(8, 8),
            DType::Float => Number::Float(24, 8),
            DType::Double => Number::Float(53, 11),
            DType::Complex64 => Number::Complex(32),
            DType::Complex128 => Number::Complex(64),
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Number::Bool => 1,
            Number::Signed(bits) | Number::Unsigned(bits) => bits as usize / 8,
            Number::Float(significand, exponent) => (significand + exponent) as usize / 8,
            Number::Complex(bits) => bits as usize / 4,
        }
    }

    /// Whether every value of `self` is a value of `to`.
    fn fits_in(self, to: Number) -> bool {
        use Number as N;
        match (self, to) {
            (N::Bool, N::Signed(_) | N::Unsigned(_) | N::Float(..)) => true,
            (N::Signed(a), N::Signed(b)) | (N::Unsigned(a), N::Unsigned(b)) => a <= b,
            (N::Unsigned(a), N::Signed(b)) => a < b,
            // A sign bit aside, the integer's bits must fit in the significand.
            (N::Signed(a), N::Float(significand, _)) => a - 1 <= significand,
            (N::Unsigned(a), N::Float(significand, _)) => a <= significand,
            (N::Float(s1, e1), N::Float(s2, e2)) => s1 <= s2 && e1 <= e2,
            (N::Complex(a), N::Complex(b)) => a <= b,
            _ => false,
        }
    }
}

/// Appends `element` as `dtype`'s little-endian bytes; [`HostTensor::cast`] checked that it
/// converts exactly.
fn encode(element: Element, dtype: DType, out: &mut Vec<u8>) {
    let real = match element {
        Element::Float32(value) => f64::from(value),
        Element::Float(value) => value,
        Element::Int(value) => value as f64,
        Element::UInt(value) => value as f64,
        Element::Bool(value) => f64::from(u8::from(value)),
        Element::Complex(re, _) => re,
    };
    let integer = match element {
        Element::Int(value) => i128::from(value),
        Element::UInt(value) => i128::from(value),
        Element::Bool(value) => i128::from(value),
        _ => real as i128,
    };
    match dtype {
        DType::Float => (real as f32).write_le(out),
        DType::Double => real.write_le(out),
        DType::Half => half::f16::from_f64(real).write_le(out),
        DType::BFloat16 => half::bf16::from_f64(real).write_le(out),
        DType::Complex128 => match element {
            Element::Complex(re, im) => [re, im].write_le(out),
            _ => [real, 0.0].write_le(out),
        },
        DType::Int8 => (integer as i8).write_le(out),
        DType::Int16 => (integer as i16).write_le(out),
        DType::Int32 => (integer as i32).write_le(out),
        DType::Int64 => (integer as i64).write_le(out),
        DType::UInt8 => (integer as u8).write_le(out),
        DType::UInt16 => (integer as u16).write_le(out),
        DType::UInt32 => (integer as u32).write_le(out),
        DType::UInt64 => (integer as u64).write_le(out),
        // No lossless cast ends anywhere else (`Number::fits_in`).
        _ => {}
    }
}

#[cfg(feature = "ndarray")]
impl HostTensor {
    /// A tensor of `T`'s dtype with the shape and elements of `array` (copied, row-major
    /// whatever the array's memory order).
    pub fn from_array<T: TensorElement>(
        array: &ndarray::ArrayD<T>,
    ) -> Result<HostTensor, TensorError> {
        let shape = array.shape().iter().map(|&dim| dim as u64).collect();
        let values: Vec<T> = array.iter().copied().collect();
        HostTensor::from_slice(shape, &values)
    }

    /// The tensor as an `ndarray::ArrayD` of `T` (copied); [`TensorError::ElementType`]
    /// unless the dtype is `T`'s.
    pub fn to_array<T: TensorElement>(&self) -> Result<ndarray::ArrayD<T>, TensorError> {
        let shape: Vec<usize> = self.shape().iter().map(|&dim| dim as usize).collect();
        let values = self.to_vec::<T>()?;
        Ok(ndarray::ArrayD::from_shape_vec(shape, values)
            .expect("a host tensor's elements fill its shape"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: TensorElement + PartialEq>(values: &[T]) {
        let tensor = HostTensor::from_slice(vec![values.len() as u64], values).unwrap();
        assert_eq!(tensor.dtype(), T::DTYPE);
        assert_eq!(tensor.to_vec::<T>().unwrap(), values);
        assert_eq!(tensor.bytes().unwrap().len(), size_of_val(values));
    }

    #[test]
    fn every_element_type_round_trips() {
        round_trip(&[1.5f32, -2.0]);
        round_trip(&[1.5f64, f64::MAX]);
        round_trip(&[i8::MIN, 3]);
        round_trip(&[i16::MIN, 3]);
        round_trip(&[i32::MIN, 3]);
        round_trip(&[i64::MIN, 3]);
        round_trip(&[u8::MAX, 3]);
        round_trip(&[u16::MAX, 3]);
        round_trip(&[u32::MAX, 3]);
        round_trip(&[u64::MAX, 3]);
        round_trip(&[true, false]);
        round_trip(&[half::f16::from_f32(0.5), half::f16::MAX]);
        round_trip(&[half::bf16::from_f32(0.5), half::bf16::MIN]);
        round_trip(&[[1.0f32, -1.0], [0.0, 2.5]]);
        round_trip(&[[1.0f64, -1.0]]);
    }

    #[test]
    fn the_existing_constructors_agree() {
        let a = HostTensor::from_slice(vec![2], &[1.5f32, 2.0]).unwrap();
        assert_eq!(a, HostTensor::from_f32s(vec![2], &[1.5, 2.0]).unwrap());
        assert_eq!(HostTensor::scalar(7i64), HostTensor::int64_scalar(7));
        assert_eq!(HostTensor::scalar(true), HostTensor::bool_scalar(true));
    }

    #[test]
    fn views_check_dtype_alignment_and_bools() {
        let tensor = HostTensor::from_slice(vec![3], &[1i32, 2, 3]).unwrap();
        match tensor.as_slice::<i32>() {
            Ok(view) => assert_eq!(view, [1, 2, 3]),
            Err(err) => assert!(matches!(err, TensorError::NoView { .. })),
        }
        assert_eq!(
            tensor.to_vec::<f32>().unwrap_err().to_string(),
            "a int32 tensor cannot be read as float32 elements"
        );
        let bad_bools = HostTensor::from_bytes(DType::Bool, vec![2], vec![1, 2]).unwrap();
        assert!(matches!(
            bad_bools.as_slice::<bool>(),
            Err(TensorError::NoView { .. })
        ));
        assert_eq!(bad_bools.to_vec::<bool>().unwrap(), [true, true]);
        let strings = HostTensor::string_vector(["a"]);
        assert!(matches!(
            strings.to_vec::<u8>(),
            Err(TensorError::ElementType { .. })
        ));
    }

    #[test]
    fn lossless_casts_convert_and_lossy_ones_are_refused() {
        let halves =
            HostTensor::from_slice(vec![2], &[half::f16::from_f32(-0.25), half::f16::MAX]).unwrap();
        assert_eq!(
            halves.cast(DType::Float).unwrap().to_vec::<f32>().unwrap(),
            [-0.25, 65504.0]
        );
        let bf = HostTensor::from_slice(vec![1], &[half::bf16::from_f32(3.0e38)]).unwrap();
        assert_eq!(
            bf.cast(DType::Double).unwrap().to_vec::<f64>().unwrap(),
            [f64::from(half::bf16::from_f32(3.0e38).to_f32())]
        );
        let ints = HostTensor::from_slice(vec![2], &[i32::MIN, 7]).unwrap();
        assert_eq!(
            ints.cast(DType::Int64).unwrap().to_vec::<i64>().unwrap(),
            [i64::from(i32::MIN), 7]
        );
        assert_eq!(
            ints.cast(DType::Double).unwrap().to_vec::<f64>().unwrap(),
            [f64::from(i32::MIN), 7.0]
        );
        let bytes = HostTensor::from_slice(vec![2], &[255u8, 0]).unwrap();
        assert_eq!(
            bytes.cast(DType::Int16).unwrap().to_vec::<i16>().unwrap(),
            [255, 0]
        );
        assert_eq!(
            bytes
                .cast(DType::BFloat16)
                .unwrap()
                .to_vec::<half::bf16>()
                .unwrap(),
            [half::bf16::from_f32(255.0), half::bf16::ZERO]
        );
        let flags = HostTensor::from_slice(vec![2], &[true, false]).unwrap();
        assert_eq!(
            flags.cast(DType::Float).unwrap().to_vec::<f32>().unwrap(),
            [1.0, 0.0]
        );
        let complex = HostTensor::from_slice(vec![1], &[[1.5f32, -2.0]]).unwrap();
        assert_eq!(
            complex
                .cast(DType::Complex128)
                .unwrap()
                .to_vec::<[f64; 2]>()
                .unwrap(),
            [[1.5, -2.0]]
        );
        assert!(ints.cast(DType::Int32).unwrap().shares_storage_with(&ints));
        for (tensor, to) in [
            (&ints, DType::Float),
            (&ints, DType::Int16),
            (&bytes, DType::Int8),
            (&halves, DType::BFloat16),
            (&flags, DType::String),
        ] {
            let err = tensor.cast(to).unwrap_err();
            assert!(matches!(err, TensorError::LossyCast { .. }), "{err}");
        }
        assert_eq!(
            ints.cast(DType::Float).unwrap_err().to_string(),
            "cannot cast a int32 tensor to float32 without loss"
        );
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn ndarray_round_trips() {
        let array = ndarray::ArrayD::from_shape_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
        let tensor = HostTensor::from_array(&array).unwrap();
        assert_eq!(tensor.shape(), [2, 3]);
        assert_eq!(tensor.to_array::<i64>().unwrap(), array);
        // A transposed view is copied in row-major order of its own shape.
        let transposed = HostTensor::from_array(&array.t().to_owned()).unwrap();
        assert_eq!(transposed.to_vec::<i64>().unwrap(), [1, 4, 2, 5, 3, 6]);
    }
}
