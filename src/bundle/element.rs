//! One element of a fixed-width tensor, decoded from its little-endian bytes, and its JSON
//! form in the fixtures' `values.json` format (used by `saveplan inspect` and the interop
//! tools).

use serde_json::{Value, json};

use super::DType;

/// One decoded element of a fixed-width tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Element {
    /// A float32, kept as itself so it prints as `f32`.
    Float32(f32),
    /// A float64, or a float16/bfloat16 widened exactly.
    Float(f64),
    /// A complex64 or complex128 as (real, imaginary).
    Complex(f64, f64),
    /// A signed integer (int8 to int64 and the quantized signed types).
    Int(i64),
    /// An unsigned integer, or the raw bits of a type without a number form (float8 types).
    UInt(u64),
    /// A bool.
    Bool(bool),
}

/// Decodes one element of `dtype` from `bytes` (its little-endian encoding, as long as the
/// dtype's element size; missing bytes read as zero).
pub fn decode_element(dtype: DType, bytes: &[u8]) -> Element {
    let mut raw = [0u8; 16];
    let width = bytes.len().min(raw.len());
    raw[..width].copy_from_slice(&bytes[..width]);
    let word = |at: usize| {
        u64::from_le_bytes(
            raw[at..at + 8]
                .try_into()
                .expect("8 bytes of a 16-byte buffer"),
        )
    };
    let unsigned = word(0);
    let signed = |bits: u32| ((unsigned << (64 - bits)) as i64) >> (64 - bits);
    let f32_at = |at: usize| f64::from(f32::from_bits((word(at) & 0xffff_ffff) as u32));
    let f64_at = |at: usize| f64::from_bits(word(at));
    match dtype {
        DType::Float => Element::Float32(f32::from_bits(unsigned as u32)),
        DType::Double => Element::Float(f64_at(0)),
        DType::Half => Element::Float(f64::from(half::f16::from_bits(unsigned as u16).to_f32())),
        DType::BFloat16 => {
            Element::Float(f64::from(half::bf16::from_bits(unsigned as u16).to_f32()))
        }
        DType::Complex64 => Element::Complex(f32_at(0), f32_at(4)),
        DType::Complex128 => Element::Complex(f64_at(0), f64_at(8)),
        DType::Bool => Element::Bool(unsigned != 0),
        DType::Int8 | DType::QInt8 => Element::Int(signed(8)),
        DType::Int16 | DType::QInt16 => Element::Int(signed(16)),
        DType::Int32 | DType::QInt32 => Element::Int(signed(32)),
        DType::Int64 => Element::Int(unsigned as i64),
        // Unsigned integers, and float8 types as their raw bit patterns.
        _ => Element::UInt(unsigned),
    }
}

/// One element as `values.json` writes it: floats as numbers (exactly, as doubles) or
/// `"nan"`, `"inf"`, `"-inf"`; complex numbers as `[re, im]`; integers and bools as
/// themselves; float8 types as their raw bits.
pub fn element_json(dtype: DType, bytes: &[u8]) -> Value {
    match decode_element(dtype, bytes) {
        Element::Float32(value) => float_json(f64::from(value)),
        Element::Float(value) => float_json(value),
        Element::Complex(re, im) => json!([float_json(re), float_json(im)]),
        Element::Int(value) => json!(value),
        Element::UInt(value) => json!(value),
        Element::Bool(value) => json!(value),
    }
}

/// A float as JSON, with non-finite values as the strings `values.json` uses.
fn float_json(value: f64) -> Value {
    if value.is_nan() {
        json!("nan")
    } else if value.is_infinite() {
        json!(if value > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_decode_by_dtype() {
        assert_eq!(
            decode_element(DType::Float, &1.5f32.to_le_bytes()),
            Element::Float32(1.5)
        );
        assert_eq!(
            decode_element(DType::Int8, &[0xff]),
            Element::Int(-1),
            "sign-extended"
        );
        assert_eq!(decode_element(DType::UInt8, &[0xff]), Element::UInt(255));
        let mut complex = 1.0f32.to_le_bytes().to_vec();
        complex.extend((-2.0f32).to_le_bytes());
        assert_eq!(
            decode_element(DType::Complex64, &complex),
            Element::Complex(1.0, -2.0)
        );
        assert_eq!(
            decode_element(DType::Half, &half::f16::from_f32(0.5).to_le_bytes()),
            Element::Float(0.5)
        );
        // Short input reads as zero rather than panicking.
        assert_eq!(
            decode_element(DType::Complex128, &[]),
            Element::Complex(0.0, 0.0)
        );
        assert_eq!(
            element_json(DType::Double, &f64::NEG_INFINITY.to_le_bytes()),
            json!("-inf")
        );
        assert_eq!(element_json(DType::Bool, &[1]), json!(true));
    }
}
