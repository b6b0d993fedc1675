//! TensorFlow's `DataType` enum as the IR sees it.
//!
//! Every value of TensorFlow's `DataType` has a variant, so a dtype read from a foreign graph
//! always survives a round trip; numbers outside the known set are kept in [`DType::Unknown`].

use std::fmt;

macro_rules! dtypes {
    ($($variant:ident = $num:literal, $proto:literal, $py:literal, $size:expr;)*) => {
        /// A TensorFlow dtype (the `tensorflow.DataType` enum, `_REF` types included).
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        #[non_exhaustive]
        pub enum DType {
            $(
                #[doc = concat!("`", $proto, "` (", $num, ").")]
                $variant,
            )*
            /// A `DataType` number this version of saveplan does not know; kept as is.
            Unknown(i32),
        }

        impl DType {
            /// All known dtypes in enum-number order.
            pub const ALL: &'static [DType] = &[$(DType::$variant,)*];

            /// The `DataType` enum number.
            pub fn number(self) -> i32 {
                match self { $(DType::$variant => $num,)* DType::Unknown(n) => n }
            }

            /// The dtype with this enum number; unknown numbers map to [`DType::Unknown`].
            pub fn from_number(number: i32) -> DType {
                match number { $($num => DType::$variant,)* n => DType::Unknown(n) }
            }

            /// The protobuf enum name, e.g. `DT_FLOAT`.
            pub fn proto_name(self) -> Option<&'static str> {
                match self { $(DType::$variant => Some($proto),)* DType::Unknown(_) => None }
            }

            /// TensorFlow's Python name, e.g. `float32`, `bfloat16`, `string`, `float32_ref`.
            pub fn name(self) -> Option<&'static str> {
                match self { $(DType::$variant => Some($py),)* DType::Unknown(_) => None }
            }

            /// Bytes per element in a tensor bundle, or `None` for variable-width and
            /// non-storable types (string, resource, variant, sub-byte and ref types).
            pub fn element_size(self) -> Option<usize> {
                match self { $(DType::$variant => $size,)* DType::Unknown(_) => None }
            }

            /// Parses a dtype from its Python name (`float32`), short alias (`float`, `half`,
            /// `double`) or protobuf name (`DT_FLOAT`).
            pub fn parse(name: &str) -> Option<DType> {
                match name {
                    $($py | $proto => Some(DType::$variant),)*
                    "float" => Some(DType::Float),
                    "double" => Some(DType::Double),
                    "half" => Some(DType::Half),
                    _ => None,
                }
            }
        }
    };
}

dtypes! {
    Invalid = 0, "DT_INVALID", "invalid", None;
    Float = 1, "DT_FLOAT", "float32", Some(4);
    Double = 2, "DT_DOUBLE", "float64", Some(8);
    Int32 = 3, "DT_INT32", "int32", Some(4);
    UInt8 = 4, "DT_UINT8", "uint8", Some(1);
    Int16 = 5, "DT_INT16", "int16", Some(2);
    Int8 = 6, "DT_INT8", "int8", Some(1);
    String = 7, "DT_STRING", "string", None;
    Complex64 = 8, "DT_COMPLEX64", "complex64", Some(8);
    Int64 = 9, "DT_INT64", "int64", Some(8);
    Bool = 10, "DT_BOOL", "bool", Some(1);
    QInt8 = 11, "DT_QINT8", "qint8", Some(1);
    QUInt8 = 12, "DT_QUINT8", "quint8", Some(1);
    QInt32 = 13, "DT_QINT32", "qint32", Some(4);
    BFloat16 = 14, "DT_BFLOAT16", "bfloat16", Some(2);
    QInt16 = 15, "DT_QINT16", "qint16", Some(2);
    QUInt16 = 16, "DT_QUINT16", "quint16", Some(2);
    UInt16 = 17, "DT_UINT16", "uint16", Some(2);
    Complex128 = 18, "DT_COMPLEX128", "complex128", Some(16);
    Half = 19, "DT_HALF", "float16", Some(2);
    Resource = 20, "DT_RESOURCE", "resource", None;
    Variant = 21, "DT_VARIANT", "variant", None;
    UInt32 = 22, "DT_UINT32", "uint32", Some(4);
    UInt64 = 23, "DT_UINT64", "uint64", Some(8);
    Float8E5M2 = 24, "DT_FLOAT8_E5M2", "float8_e5m2", Some(1);
    Float8E4M3FN = 25, "DT_FLOAT8_E4M3FN", "float8_e4m3fn", Some(1);
    Float8E4M3FNUZ = 26, "DT_FLOAT8_E4M3FNUZ", "float8_e4m3fnuz", Some(1);
    Float8E4M3B11FNUZ = 27, "DT_FLOAT8_E4M3B11FNUZ", "float8_e4m3b11fnuz", Some(1);
    Float8E5M2FNUZ = 28, "DT_FLOAT8_E5M2FNUZ", "float8_e5m2fnuz", Some(1);
    Int4 = 29, "DT_INT4", "int4", None;
    UInt4 = 30, "DT_UINT4", "uint4", None;
    Int2 = 31, "DT_INT2", "int2", None;
    UInt2 = 32, "DT_UINT2", "uint2", None;
    Float4E2M1FN = 33, "DT_FLOAT4_E2M1FN", "float4_e2m1fn", None;
    FloatRef = 101, "DT_FLOAT_REF", "float32_ref", None;
    DoubleRef = 102, "DT_DOUBLE_REF", "float64_ref", None;
    Int32Ref = 103, "DT_INT32_REF", "int32_ref", None;
    UInt8Ref = 104, "DT_UINT8_REF", "uint8_ref", None;
    Int16Ref = 105, "DT_INT16_REF", "int16_ref", None;
    Int8Ref = 106, "DT_INT8_REF", "int8_ref", None;
    StringRef = 107, "DT_STRING_REF", "string_ref", None;
    Complex64Ref = 108, "DT_COMPLEX64_REF", "complex64_ref", None;
    Int64Ref = 109, "DT_INT64_REF", "int64_ref", None;
    BoolRef = 110, "DT_BOOL_REF", "bool_ref", None;
    QInt8Ref = 111, "DT_QINT8_REF", "qint8_ref", None;
    QUInt8Ref = 112, "DT_QUINT8_REF", "quint8_ref", None;
    QInt32Ref = 113, "DT_QINT32_REF", "qint32_ref", None;
    BFloat16Ref = 114, "DT_BFLOAT16_REF", "bfloat16_ref", None;
    QInt16Ref = 115, "DT_QINT16_REF", "qint16_ref", None;
    QUInt16Ref = 116, "DT_QUINT16_REF", "quint16_ref", None;
    UInt16Ref = 117, "DT_UINT16_REF", "uint16_ref", None;
    Complex128Ref = 118, "DT_COMPLEX128_REF", "complex128_ref", None;
    HalfRef = 119, "DT_HALF_REF", "float16_ref", None;
    ResourceRef = 120, "DT_RESOURCE_REF", "resource_ref", None;
    VariantRef = 121, "DT_VARIANT_REF", "variant_ref", None;
    UInt32Ref = 122, "DT_UINT32_REF", "uint32_ref", None;
    UInt64Ref = 123, "DT_UINT64_REF", "uint64_ref", None;
    Float8E5M2Ref = 124, "DT_FLOAT8_E5M2_REF", "float8_e5m2_ref", None;
    Float8E4M3FNRef = 125, "DT_FLOAT8_E4M3FN_REF", "float8_e4m3fn_ref", None;
    Float8E4M3FNUZRef = 126, "DT_FLOAT8_E4M3FNUZ_REF", "float8_e4m3fnuz_ref", None;
    Float8E4M3B11FNUZRef = 127, "DT_FLOAT8_E4M3B11FNUZ_REF", "float8_e4m3b11fnuz_ref", None;
    Float8E5M2FNUZRef = 128, "DT_FLOAT8_E5M2FNUZ_REF", "float8_e5m2fnuz_ref", None;
    Int4Ref = 129, "DT_INT4_REF", "int4_ref", None;
    UInt4Ref = 130, "DT_UINT4_REF", "uint4_ref", None;
    Int2Ref = 131, "DT_INT2_REF", "int2_ref", None;
    UInt2Ref = 132, "DT_UINT2_REF", "uint2_ref", None;
    Float4E2M1FNRef = 133, "DT_FLOAT4_E2M1FN_REF", "float4_e2m1fn_ref", None;
}

impl DType {
    /// Whether this is a reference dtype (`float32_ref`: what a TF1 `VariableV2` outputs).
    pub fn is_ref(self) -> bool {
        (101..=199).contains(&self.number())
    }

    /// The reference dtype of a value dtype (`float32` → `float32_ref`); ref dtypes unchanged.
    pub fn to_ref(self) -> DType {
        match self.number() {
            n @ 1..=100 => DType::from_number(n + 100),
            _ => self,
        }
    }

    /// The value dtype of a reference dtype (`float32_ref` → `float32`); others unchanged.
    pub fn base(self) -> DType {
        if self.is_ref() {
            DType::from_number(self.number() - 100)
        } else {
            self
        }
    }
}

impl Default for DType {
    /// `DT_INVALID`, the protobuf default.
    fn default() -> DType {
        DType::Invalid
    }
}

impl fmt::Display for DType {
    /// Prints the Python name (`float32`), or `dtype(<n>)` for an unknown number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "dtype({})", self.number()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip() {
        for &dtype in DType::ALL {
            assert_eq!(DType::from_number(dtype.number()), dtype);
            assert_eq!(DType::parse(dtype.name().unwrap()), Some(dtype));
            assert_eq!(DType::parse(dtype.proto_name().unwrap()), Some(dtype));
        }
        assert_eq!(DType::from_number(999), DType::Unknown(999));
        assert_eq!(DType::Unknown(999).to_string(), "dtype(999)");
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(DType::BFloat16.to_string(), "bfloat16");
        assert_eq!(DType::parse("half"), Some(DType::Half));
        assert_eq!(DType::Complex128.element_size(), Some(16));
        assert_eq!(DType::String.element_size(), None);
        assert_eq!(DType::parse("float33"), None);
        assert_eq!(DType::Float.to_ref(), DType::FloatRef);
        assert_eq!(DType::Int64Ref.base(), DType::Int64);
        assert!(DType::FloatRef.is_ref() && !DType::Float.is_ref());
    }
}
