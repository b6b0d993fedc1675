//! TensorFlow-compatible protobuf messages (GraphDef, SaverDef, MetaGraphDef, tensor bundle,
//! checkpoint state, trackable object graph) and TensorFlow-style protobuf text format.
//!
//! The `.proto` files under `protos/` carry TensorFlow's package, message names and field
//! numbers, so the wire format matches what TensorFlow 2.21 reads and writes.
//! `SavedObjectGraph` (field 7 of `MetaGraphDef`) and `TensorInfo.composite_tensor` are not
//! defined; prost drops them when decoding.

#![warn(missing_docs)]

use std::sync::OnceLock;

pub mod text;

pub use prost_types::Any;
pub use text::{TextError, from_text, from_text_dyn, to_text, to_text_dyn, write_text_dyn};

/// Generated code; its one module `tensorflow` is re-exported below.
#[allow(clippy::all, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
}

/// Generated message types, all in protobuf package `tensorflow`.
pub use generated::tensorflow;

/// The serialized `FileDescriptorSet` of every `.proto` file of this crate and its imports.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// Returns the descriptor pool built from [`FILE_DESCRIPTOR_SET`].
pub fn descriptor_pool() -> &'static prost_reflect::DescriptorPool {
    static POOL: OnceLock<prost_reflect::DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        prost_reflect::DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the descriptor set embedded at build time is valid")
    })
}

impl tensorflow::DataType {
    /// Returns the dtype name TensorFlow's Python API uses (`float32`, `string`, `resource`),
    /// or `None` for values without one (`DT_INVALID`, reference types, unnamed new types).
    pub fn python_name(self) -> Option<&'static str> {
        use tensorflow::DataType as D;
        Some(match self {
            D::DtFloat => "float32",
            D::DtDouble => "float64",
            D::DtInt32 => "int32",
            D::DtUint8 => "uint8",
            D::DtInt16 => "int16",
            D::DtInt8 => "int8",
            D::DtString => "string",
            D::DtComplex64 => "complex64",
            D::DtInt64 => "int64",
            D::DtBool => "bool",
            D::DtQint8 => "qint8",
            D::DtQuint8 => "quint8",
            D::DtQint32 => "qint32",
            D::DtBfloat16 => "bfloat16",
            D::DtQint16 => "qint16",
            D::DtQuint16 => "quint16",
            D::DtUint16 => "uint16",
            D::DtComplex128 => "complex128",
            D::DtHalf => "float16",
            D::DtResource => "resource",
            D::DtVariant => "variant",
            D::DtUint32 => "uint32",
            D::DtUint64 => "uint64",
            _ => return None,
        })
    }

    /// Returns whether this is a reference type (`DT_*_REF`, value above 100).
    pub fn is_ref(self) -> bool {
        (self as i32) > 100
    }
}

#[cfg(test)]
mod tests {
    use super::tensorflow::DataType;

    #[test]
    fn data_type_helpers() {
        assert_eq!(DataType::DtFloat.python_name(), Some("float32"));
        assert_eq!(DataType::DtHalf.python_name(), Some("float16"));
        assert_eq!(DataType::DtFloatRef.python_name(), None);
        assert!(DataType::DtResourceRef.is_ref());
        assert!(!DataType::DtUint64.is_ref());
        assert_eq!(DataType::DtString.as_str_name(), "DT_STRING");
    }

    #[test]
    fn pool_holds_generated_types() {
        let pool = super::descriptor_pool();
        for name in [
            "tensorflow.GraphDef",
            "tensorflow.BundleEntryProto",
            "google.protobuf.Any",
        ] {
            assert!(pool.get_message_by_name(name).is_some(), "{name}");
        }
    }
}
