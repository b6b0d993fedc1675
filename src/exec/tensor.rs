//! Runtime values: [`HostTensor`], a dtype, a shape and shared element storage, plus the
//! conversion from IR constants ([`saveplan_ir::Tensor`]) with TensorFlow's rules.
//!
//! Storage is reference counted, so cloning a tensor (forwarding it through `Identity`, storing
//! it in a variable, fetching it) never copies elements. Fixed-width dtypes keep row-major
//! little-endian bytes (owned, or a view into the memory map of a checkpoint data file, which
//! is what a restore hands out), `DT_STRING` keeps one byte string per element and
//! `DT_RESOURCE` keeps one [`ResourceHandle`] per element.

use std::sync::Arc;

use saveplan_ir::{DType, Shape, Tensor, TensorValues};

use crate::bundle::MappedTensor;

/// What a value slot of a plan holds. Today every value lives in host memory.
pub type Value = HostTensor;

/// A tensor in host memory.
///
/// Invariant: the number of stored elements equals the product of `shape`, and the storage
/// kind matches `dtype` (bytes of `dtype.element_size()` per element, strings, or handles).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    dtype: DType,
    /// Shared like the elements, so forwarding a tensor from step to step allocates nothing.
    shape: Arc<[u64]>,
    data: TensorData,
}

/// The shared element storage of a [`HostTensor`]. Equality compares elements: owned and
/// mapped bytes with the same contents are equal.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// Row-major little-endian bytes of a fixed-width dtype.
    Bytes(Arc<Vec<u8>>),
    /// Row-major little-endian bytes of a fixed-width dtype, read in place from a checkpoint
    /// data file: a view into its read-only memory map whose CRC32C was checked when it was
    /// made (see [`crate::bundle::BundleReader::map`] for what a later in-place change of the
    /// file does). Restores hand these out instead of copying into a new buffer; the CLI
    /// reads a `.safetensors` values file the same way ([`crate::bundle::MappedTensor::in_map`],
    /// no checksum).
    Mapped(Arc<MappedTensor>),
    /// The elements of a `DT_STRING` tensor, row-major (or of a `DT_VARIANT` tensor, each
    /// element's serialized bytes).
    Strings(Arc<Vec<Vec<u8>>>),
    /// The elements of a `DT_RESOURCE` tensor (normally a scalar).
    Resources(Arc<Vec<ResourceHandle>>),
}

impl TensorData {
    /// The element bytes of fixed-width storage (owned or mapped).
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            TensorData::Bytes(bytes) => Some(bytes),
            TensorData::Mapped(mapped) => Some(mapped),
            _ => None,
        }
    }
}

impl PartialEq for TensorData {
    fn eq(&self, other: &TensorData) -> bool {
        match (self, other) {
            (TensorData::Strings(a), TensorData::Strings(b)) => a == b,
            (TensorData::Resources(a), TensorData::Resources(b)) => a == b,
            _ => match (self.bytes(), other.bytes()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        }
    }
}

/// A handle to a resource variable, as `VarHandleOp` produces it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceHandle {
    /// The resource container (`container` attr; often empty).
    pub container: String,
    /// The resource name (`shared_name`, or the op name when that is empty).
    pub shared_name: String,
    /// The device the handle was created on (canonical form).
    pub device: String,
    /// The variable's declared dtype.
    pub dtype: DType,
    /// The variable's declared shape (may be partial).
    pub shape: Shape,
}

/// Errors from building a [`HostTensor`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// Bytes whose length does not fit the dtype and shape.
    #[error("a {dtype} tensor of shape {shape:?} needs {expected} bytes, got {got}")]
    ByteLength {
        /// The dtype.
        dtype: DType,
        /// The shape.
        shape: Vec<u64>,
        /// The bytes needed.
        expected: usize,
        /// The bytes given.
        got: usize,
    },
    /// A number of elements that does not fit the shape.
    #[error("a tensor of shape {shape:?} needs {expected} elements, got {got}")]
    ElementCount {
        /// The shape.
        shape: Vec<u64>,
        /// The elements needed.
        expected: usize,
        /// The elements given.
        got: usize,
    },
    /// A dtype that host tensors cannot hold (sub-byte, variant, reference types).
    #[error("cannot hold a {dtype} tensor in host memory")]
    UnsupportedDType {
        /// The dtype.
        dtype: DType,
    },
    /// A constant shape with an unknown rank or dimension.
    #[error("constant shape {shape:?} is not fully known")]
    UnknownShape {
        /// The dimension sizes (-1 for unknown), empty for unknown rank.
        shape: Vec<i64>,
    },
    /// A constant that would need more host memory than any plan constant may
    /// ([`saveplan_ir::MAX_TENSOR_ATTR_BYTES`]) once its stored values fill its shape.
    #[error(
        "a {dtype} constant of shape {shape:?} would need {}, above the {}-byte limit for constants",
        match bytes { Some(bytes) => format!("{bytes} bytes"), None => "more than 2^64 bytes".to_owned() },
        saveplan_ir::MAX_TENSOR_ATTR_BYTES
    )]
    ConstTooLarge {
        /// The dtype.
        dtype: DType,
        /// The declared shape.
        shape: Vec<u64>,
        /// The host bytes it would need; `None` when that overflows `u64`.
        bytes: Option<u64>,
    },
    /// A constant with more stored values than elements.
    #[error("a {dtype} constant of {n_elements} elements has {n_values} values")]
    TooManyValues {
        /// The dtype.
        dtype: DType,
        /// The elements of the shape.
        n_elements: usize,
        /// The values stored.
        n_values: usize,
    },
    /// Elements read as a Rust type of another dtype ([`HostTensor::to_vec`]).
    #[error("a {dtype} tensor cannot be read as {requested} elements")]
    ElementType {
        /// The tensor's dtype.
        dtype: DType,
        /// The dtype of the type asked for.
        requested: DType,
    },
    /// Elements that cannot be viewed in place ([`HostTensor::as_slice`]).
    #[error("cannot view the elements of a {dtype} tensor in place: {reason}")]
    NoView {
        /// The dtype.
        dtype: DType,
        /// Why not.
        reason: &'static str,
    },
    /// A conversion some values would not survive ([`HostTensor::cast`]).
    #[error("cannot cast a {from} tensor to {to} without loss")]
    LossyCast {
        /// The tensor's dtype.
        from: DType,
        /// The dtype asked for.
        to: DType,
    },
    /// A constant whose values are stored in a field that does not fit its dtype.
    #[error("a {dtype} constant cannot store its values in `{field}`")]
    ValuesMismatch {
        /// The dtype.
        dtype: DType,
        /// The `TensorProto` field used.
        field: &'static str,
    },
}

impl HostTensor {
    /// A fixed-width tensor from little-endian row-major bytes, taken without copying.
    pub fn from_bytes(dtype: DType, shape: Vec<u64>, bytes: Vec<u8>) -> Result<Self, TensorError> {
        HostTensor::from_shared_bytes(dtype, shape, Arc::new(bytes))
    }

    /// A fixed-width tensor sharing already reference-counted bytes.
    pub fn from_shared_bytes(
        dtype: DType,
        shape: Vec<u64>,
        bytes: Arc<Vec<u8>>,
    ) -> Result<Self, TensorError> {
        let size = fixed_size(dtype)?;
        let expected = element_count(&shape)?
            .checked_mul(size)
            .ok_or_else(|| too_big(&shape))?;
        if bytes.len() != expected {
            return Err(TensorError::ByteLength {
                dtype,
                shape,
                expected,
                got: bytes.len(),
            });
        }
        Ok(HostTensor {
            dtype,
            shape: shape.into(),
            data: TensorData::Bytes(bytes),
        })
    }

    /// A fixed-width tensor whose bytes stay in the memory map of a checkpoint data file (no
    /// copy), with the stored dtype and shape.
    pub fn from_mapped(mapped: MappedTensor) -> Result<Self, TensorError> {
        HostTensor::from_mapped_sharing(mapped, &mut None)
    }

    /// [`HostTensor::from_mapped`], sharing the shape `last` holds when it is this tensor's
    /// (and leaving this tensor's in `last`): a restore of many tensors of one shape makes it
    /// once, and whoever reads them reads one shape.
    pub(crate) fn from_mapped_sharing(
        mapped: MappedTensor,
        last: &mut Option<Arc<[u64]>>,
    ) -> Result<Self, TensorError> {
        let dtype = mapped.dtype;
        let size = fixed_size(dtype)?;
        // The reader checks every stored dimension is non-negative.
        let dims = mapped.shape.iter().map(|&dim| dim.max(0) as u64);
        let shape = match last {
            Some(shape) if shape.iter().copied().eq(dims.clone()) => Arc::clone(shape),
            // Collected straight into the shared slice: one allocation.
            _ => Arc::clone(last.insert(dims.collect())),
        };
        let expected = element_count(&shape)?
            .checked_mul(size)
            .ok_or_else(|| too_big(&shape))?;
        if mapped.len() != expected {
            return Err(TensorError::ByteLength {
                dtype,
                shape: shape.to_vec(),
                expected,
                got: mapped.len(),
            });
        }
        Ok(HostTensor {
            dtype,
            shape,
            data: TensorData::Mapped(Arc::new(mapped)),
        })
    }

    /// A `DT_STRING` tensor, taken without copying.
    pub fn from_strings(shape: Vec<u64>, strings: Vec<Vec<u8>>) -> Result<Self, TensorError> {
        let expected = element_count(&shape)?;
        if strings.len() != expected {
            return Err(TensorError::ElementCount {
                shape,
                expected,
                got: strings.len(),
            });
        }
        Ok(HostTensor {
            dtype: DType::String,
            shape: shape.into(),
            data: TensorData::Strings(Arc::new(strings)),
        })
    }

    /// A `DT_VARIANT` tensor whose elements are kept as opaque bytes (serialized
    /// `VariantTensorDataProto`s, as a bundle stores them), taken without copying.
    pub fn from_variants(shape: Vec<u64>, elements: Vec<Vec<u8>>) -> Result<Self, TensorError> {
        let mut tensor = HostTensor::from_strings(shape, elements)?;
        tensor.dtype = DType::Variant;
        Ok(tensor)
    }

    /// A `DT_STRING` scalar.
    pub fn string_scalar(value: impl Into<Vec<u8>>) -> Self {
        HostTensor {
            dtype: DType::String,
            shape: Arc::new([]),
            data: TensorData::Strings(Arc::new(vec![value.into()])),
        }
    }

    /// A rank-1 `DT_STRING` tensor.
    pub fn string_vector<S: Into<Vec<u8>>>(values: impl IntoIterator<Item = S>) -> Self {
        let strings: Vec<Vec<u8>> = values.into_iter().map(Into::into).collect();
        HostTensor {
            dtype: DType::String,
            shape: Arc::new([strings.len() as u64]),
            data: TensorData::Strings(Arc::new(strings)),
        }
    }

    /// A `DT_BOOL` tensor.
    pub fn from_bools(shape: Vec<u64>, values: &[bool]) -> Result<Self, TensorError> {
        let bytes = values.iter().map(|&value| u8::from(value)).collect();
        HostTensor::from_bytes(DType::Bool, shape, bytes)
    }

    /// A `DT_BOOL` scalar.
    pub fn bool_scalar(value: bool) -> Self {
        HostTensor {
            dtype: DType::Bool,
            shape: Arc::new([]),
            data: TensorData::Bytes(Arc::new(vec![u8::from(value)])),
        }
    }

    /// A `DT_INT32` scalar.
    pub fn int32_scalar(value: i32) -> Self {
        HostTensor {
            dtype: DType::Int32,
            shape: Arc::new([]),
            data: TensorData::Bytes(Arc::new(value.to_le_bytes().to_vec())),
        }
    }

    /// A `DT_INT64` scalar.
    pub fn int64_scalar(value: i64) -> Self {
        HostTensor {
            dtype: DType::Int64,
            shape: Arc::new([]),
            data: TensorData::Bytes(Arc::new(value.to_le_bytes().to_vec())),
        }
    }

    /// A `DT_FLOAT` tensor.
    pub fn from_f32s(shape: Vec<u64>, values: &[f32]) -> Result<Self, TensorError> {
        let bytes = values
            .iter()
            .flat_map(|value| value.to_le_bytes())
            .collect();
        HostTensor::from_bytes(DType::Float, shape, bytes)
    }

    /// A `DT_INT32` tensor.
    pub fn from_i32s(shape: Vec<u64>, values: &[i32]) -> Result<Self, TensorError> {
        let bytes = values
            .iter()
            .flat_map(|value| value.to_le_bytes())
            .collect();
        HostTensor::from_bytes(DType::Int32, shape, bytes)
    }

    /// A scalar `DT_RESOURCE` tensor holding one handle.
    pub fn resource(handle: ResourceHandle) -> Self {
        HostTensor {
            dtype: DType::Resource,
            shape: Arc::new([]),
            data: TensorData::Resources(Arc::new(vec![handle])),
        }
    }

    /// A tensor with the same elements and dtype under another shape of equal element count.
    pub fn reshaped(&self, shape: Vec<u64>) -> Result<Self, TensorError> {
        let expected = element_count(&shape)?;
        if expected != self.num_elements() {
            return Err(TensorError::ElementCount {
                shape,
                expected,
                got: self.num_elements(),
            });
        }
        Ok(HostTensor {
            dtype: self.dtype,
            shape: shape.into(),
            data: self.data.clone(),
        })
    }

    /// Converts an IR constant, following TensorFlow's `Tensor::FromProto`: a missing shape
    /// is a scalar; no stored values means zeros (or empty strings); fewer stored values than
    /// elements repeat the last one; `tensor_content` must hold every element exactly. A
    /// constant needing more than [`saveplan_ir::MAX_TENSOR_ATTR_BYTES`] once filled is refused
    /// before anything is allocated.
    pub fn from_const(tensor: &Tensor) -> Result<Self, TensorError> {
        let dtype = tensor.dtype;
        let shape = const_shape(tensor.shape.as_ref())?;
        // Checked before anything is allocated: a few stored values may declare a huge fill.
        if dtype != DType::String {
            fixed_size(dtype)?;
        }
        let bytes = tensor.filled_bytes();
        if bytes.is_none_or(|bytes| bytes > saveplan_ir::MAX_TENSOR_ATTR_BYTES) {
            return Err(TensorError::ConstTooLarge {
                dtype,
                shape,
                bytes,
            });
        }
        let n = element_count(&shape)?;
        if dtype == DType::String {
            let strings = match &tensor.values {
                TensorValues::Empty => vec![Vec::new(); n],
                TensorValues::String(values) => repeat_last(dtype, values, n, Vec::new())?,
                other => return Err(mismatch(dtype, other)),
            };
            return HostTensor::from_strings(shape, strings);
        }
        let size = fixed_size(dtype)?;
        let n_bytes = n.checked_mul(size).ok_or_else(|| too_big(&shape))?;
        let bytes = match &tensor.values {
            TensorValues::Empty => vec![0; n_bytes],
            TensorValues::Content(bytes) => bytes.clone(),
            values => typed_values_to_bytes(dtype, values, n)?,
        };
        HostTensor::from_bytes(dtype, shape, bytes)
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, outermost dimension first.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The number of elements.
    pub fn num_elements(&self) -> usize {
        match &self.data {
            TensorData::Bytes(_) | TensorData::Mapped(_) => {
                let len = self.data.bytes().map_or(0, <[u8]>::len);
                match self.dtype.element_size() {
                    Some(size) if size > 0 => len / size,
                    _ => 0,
                }
            }
            TensorData::Strings(strings) => strings.len(),
            TensorData::Resources(handles) => handles.len(),
        }
    }

    /// Whether the tensor is a scalar (rank 0).
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    /// The storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The element bytes of a fixed-width tensor.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.data.bytes()
    }

    /// Whether the elements are a view into a checkpoint data file's memory map
    /// ([`TensorData::Mapped`]) rather than a buffer of their own.
    pub fn is_mapped(&self) -> bool {
        matches!(&self.data, TensorData::Mapped(mapped) if mapped.is_mapped())
    }

    /// The elements of a string tensor (or a variant tensor's opaque bytes).
    pub fn strings(&self) -> Option<&[Vec<u8>]> {
        match &self.data {
            TensorData::Strings(strings) => Some(strings),
            _ => None,
        }
    }

    /// The handles of a resource tensor.
    pub fn resources(&self) -> Option<&[ResourceHandle]> {
        match &self.data {
            TensorData::Resources(handles) => Some(handles),
            _ => None,
        }
    }

    /// The element bytes, moved out when this is the only reference and copied otherwise
    /// (mapped bytes are always copied).
    pub fn into_bytes(self) -> Option<Vec<u8>> {
        match self.data {
            TensorData::Bytes(bytes) => Some(Arc::unwrap_or_clone(bytes)),
            TensorData::Mapped(mapped) => Some(mapped.to_vec()),
            _ => None,
        }
    }

    /// The strings, moved out when this is the only reference and copied otherwise.
    pub fn into_strings(self) -> Option<Vec<Vec<u8>>> {
        match self.data {
            TensorData::Strings(strings) => Some(Arc::unwrap_or_clone(strings)),
            _ => None,
        }
    }

    /// Whether both tensors share the same storage (no copy was made between them).
    pub fn shares_storage_with(&self, other: &HostTensor) -> bool {
        match (&self.data, &other.data) {
            (TensorData::Bytes(a), TensorData::Bytes(b)) => Arc::ptr_eq(a, b),
            (TensorData::Mapped(a), TensorData::Mapped(b)) => Arc::ptr_eq(a, b),
            (TensorData::Strings(a), TensorData::Strings(b)) => Arc::ptr_eq(a, b),
            (TensorData::Resources(a), TensorData::Resources(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The value of a string scalar.
    pub fn as_string_scalar(&self) -> Option<&[u8]> {
        match self.strings() {
            Some([value]) if self.is_scalar() => Some(value),
            _ => None,
        }
    }

    /// The value of an int32 scalar.
    pub fn as_i32_scalar(&self) -> Option<i32> {
        match self.bytes() {
            Some(bytes) if self.dtype == DType::Int32 && self.is_scalar() => {
                Some(i32::from_le_bytes(bytes.try_into().ok()?))
            }
            _ => None,
        }
    }

    /// The value of an int64 scalar.
    pub fn as_i64_scalar(&self) -> Option<i64> {
        match self.bytes() {
            Some(bytes) if self.dtype == DType::Int64 && self.is_scalar() => {
                Some(i64::from_le_bytes(bytes.try_into().ok()?))
            }
            _ => None,
        }
    }

    /// The value of a bool scalar.
    pub fn as_bool_scalar(&self) -> Option<bool> {
        match self.bytes() {
            Some([byte]) if self.dtype == DType::Bool && self.is_scalar() => Some(*byte != 0),
            _ => None,
        }
    }

    /// The elements of a bool tensor.
    pub fn to_bools(&self) -> Option<Vec<bool>> {
        match self.bytes() {
            Some(bytes) if self.dtype == DType::Bool => {
                Some(bytes.iter().map(|&byte| byte != 0).collect())
            }
            _ => None,
        }
    }

    /// The handle of a scalar resource tensor.
    pub fn as_resource_scalar(&self) -> Option<&ResourceHandle> {
        match self.resources() {
            Some([handle]) if self.is_scalar() => Some(handle),
            _ => None,
        }
    }
}

/// The number of elements of `shape`, if it fits in `usize`.
pub fn element_count(shape: &[u64]) -> Result<usize, TensorError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &dim| {
            usize::try_from(dim)
                .ok()
                .and_then(|dim| acc.checked_mul(dim))
        })
        .ok_or_else(|| too_big(shape))
}

/// The element size of a dtype host tensors store as bytes.
fn fixed_size(dtype: DType) -> Result<usize, TensorError> {
    dtype
        .element_size()
        .ok_or(TensorError::UnsupportedDType { dtype })
}

/// The error for a shape whose size overflows `usize`.
fn too_big(shape: &[u64]) -> TensorError {
    TensorError::ElementCount {
        shape: shape.to_vec(),
        expected: usize::MAX,
        got: 0,
    }
}

/// The concrete shape of a constant; `None` is a scalar.
fn const_shape(shape: Option<&Shape>) -> Result<Vec<u64>, TensorError> {
    let Some(shape) = shape else {
        return Ok(Vec::new());
    };
    let unknown = || TensorError::UnknownShape {
        shape: shape.dims.iter().map(|dim| dim.size).collect(),
    };
    if shape.unknown_rank {
        return Err(unknown());
    }
    shape
        .dims
        .iter()
        .map(|dim| u64::try_from(dim.size).map_err(|_| unknown()))
        .collect()
}

/// Extends `values` to `n` elements by repeating the last one (or `zero` if there is none).
fn repeat_last<T: Clone>(
    dtype: DType,
    values: &[T],
    n: usize,
    zero: T,
) -> Result<Vec<T>, TensorError> {
    if values.len() > n {
        return Err(TensorError::TooManyValues {
            dtype,
            n_elements: n,
            n_values: values.len(),
        });
    }
    let last = values.last().cloned().unwrap_or(zero);
    let mut out = Vec::with_capacity(n);
    out.extend_from_slice(values);
    out.resize(n, last);
    Ok(out)
}

/// Encodes typed `TensorProto` values as little-endian bytes of `n` elements of `dtype`.
fn typed_values_to_bytes(
    dtype: DType,
    values: &TensorValues,
    n: usize,
) -> Result<Vec<u8>, TensorError> {
    /// Repeats to `n` elements, then encodes each with `encode`.
    fn encode<T: Copy + Default, const W: usize>(
        dtype: DType,
        values: &[T],
        n: usize,
        encode: impl Fn(T) -> [u8; W],
    ) -> Result<Vec<u8>, TensorError> {
        let full = repeat_last(dtype, values, n, T::default())?;
        Ok(full.into_iter().flat_map(encode).collect())
    }
    use DType as D;
    use TensorValues as V;
    match (dtype, values) {
        (D::Float, V::Float(values)) => encode(dtype, values, n, f32::to_le_bytes),
        (D::Double, V::Double(values)) => encode(dtype, values, n, f64::to_le_bytes),
        (D::Int32 | D::QInt32, V::Int(values)) => encode(dtype, values, n, i32::to_le_bytes),
        (D::Int16 | D::QInt16, V::Int(values)) => {
            encode(dtype, values, n, |v| (v as i16).to_le_bytes())
        }
        (D::UInt16 | D::QUInt16, V::Int(values)) => {
            encode(dtype, values, n, |v| (v as u16).to_le_bytes())
        }
        (D::Int8 | D::QInt8, V::Int(values)) => encode(dtype, values, n, |v| [v as i8 as u8]),
        (D::UInt8 | D::QUInt8, V::Int(values)) => encode(dtype, values, n, |v| [v as u8]),
        (D::Half | D::BFloat16, V::Half(values)) => {
            encode(dtype, values, n, |v| (v as u16).to_le_bytes())
        }
        (D::Int64, V::Int64(values)) => encode(dtype, values, n, i64::to_le_bytes),
        (D::UInt32, V::UInt32(values)) => encode(dtype, values, n, u32::to_le_bytes),
        (D::UInt64, V::UInt64(values)) => encode(dtype, values, n, u64::to_le_bytes),
        (D::Bool, V::Bool(values)) => encode(dtype, values, n, |v| [u8::from(v)]),
        (D::Complex64, V::SComplex(values)) => {
            let pairs = complex_pairs(dtype, values)?;
            encode(dtype, &pairs, n, |(re, im): (f32, f32)| {
                let mut out = [0; 8];
                out[..4].copy_from_slice(&re.to_le_bytes());
                out[4..].copy_from_slice(&im.to_le_bytes());
                out
            })
        }
        (D::Complex128, V::DComplex(values)) => {
            let pairs = complex_pairs(dtype, values)?;
            encode(dtype, &pairs, n, |(re, im): (f64, f64)| {
                let mut out = [0; 16];
                out[..8].copy_from_slice(&re.to_le_bytes());
                out[8..].copy_from_slice(&im.to_le_bytes());
                out
            })
        }
        (
            D::Float8E5M2
            | D::Float8E4M3FN
            | D::Float8E4M3FNUZ
            | D::Float8E4M3B11FNUZ
            | D::Float8E5M2FNUZ,
            V::Float8(values),
        ) => encode(dtype, values, n, |v| [v]),
        (dtype, values) => Err(mismatch(dtype, values)),
    }
}

/// Groups interleaved (real, imaginary) values into pairs.
fn complex_pairs<T: Copy>(dtype: DType, values: &[T]) -> Result<Vec<(T, T)>, TensorError> {
    if !values.len().is_multiple_of(2) {
        return Err(TensorError::ValuesMismatch {
            dtype,
            field: "odd-length complex values",
        });
    }
    Ok(values
        .chunks_exact(2)
        .map(|pair| (pair[0], pair[1]))
        .collect())
}

/// The error for values stored in a field that does not fit the dtype.
fn mismatch(dtype: DType, values: &TensorValues) -> TensorError {
    let field = match values {
        TensorValues::Empty => "nothing",
        TensorValues::Content(_) => "tensor_content",
        TensorValues::Half(_) => "half_val",
        TensorValues::Float(_) => "float_val",
        TensorValues::Double(_) => "double_val",
        TensorValues::Int(_) => "int_val",
        TensorValues::String(_) => "string_val",
        TensorValues::SComplex(_) => "scomplex_val",
        TensorValues::Int64(_) => "int64_val",
        TensorValues::Bool(_) => "bool_val",
        TensorValues::DComplex(_) => "dcomplex_val",
        TensorValues::UInt32(_) => "uint32_val",
        TensorValues::UInt64(_) => "uint64_val",
        TensorValues::Float8(_) => "float8_val",
    };
    TensorError::ValuesMismatch { dtype, field }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constant(dtype: DType, dims: &[i64], values: TensorValues) -> Tensor {
        Tensor {
            dtype,
            shape: Some(Shape::from_dims(dims)),
            version_number: 0,
            values,
        }
    }

    #[test]
    fn short_typed_lists_repeat_the_last_value() {
        let tensor = constant(DType::Int32, &[4], TensorValues::Int(vec![7, 9]));
        let host = HostTensor::from_const(&tensor).unwrap();
        assert_eq!(host, HostTensor::from_i32s(vec![4], &[7, 9, 9, 9]).unwrap());
        let strings = constant(
            DType::String,
            &[3],
            TensorValues::String(vec![b"a".to_vec()]),
        );
        let host = HostTensor::from_const(&strings).unwrap();
        assert_eq!(host.strings().unwrap(), [b"a", b"a", b"a"]);
    }

    #[test]
    fn empty_values_are_zeros_and_missing_shape_is_scalar() {
        let zeros = constant(DType::Float, &[2], TensorValues::Empty);
        assert_eq!(
            HostTensor::from_const(&zeros).unwrap().bytes(),
            Some(&[0; 8][..])
        );
        let scalar = Tensor {
            shape: None,
            ..constant(DType::Bool, &[], TensorValues::Bool(vec![true]))
        };
        assert_eq!(
            HostTensor::from_const(&scalar).unwrap().as_bool_scalar(),
            Some(true)
        );
    }

    #[test]
    fn content_half_and_complex() {
        let content = constant(DType::Float, &[3], TensorValues::Content(vec![0; 12]));
        assert!(HostTensor::from_const(&content).is_ok());
        let short = constant(DType::Float, &[3], TensorValues::Content(vec![0; 8]));
        assert!(matches!(
            HostTensor::from_const(&short),
            Err(TensorError::ByteLength {
                expected: 12,
                got: 8,
                ..
            })
        ));
        let half = constant(DType::BFloat16, &[2], TensorValues::Half(vec![0x3f80]));
        assert_eq!(
            HostTensor::from_const(&half).unwrap().bytes(),
            Some(&[0x80, 0x3f, 0x80, 0x3f][..])
        );
        let complex = constant(
            DType::Complex64,
            &[2],
            TensorValues::SComplex(vec![1.0, 2.0]),
        );
        let bytes = HostTensor::from_const(&complex)
            .unwrap()
            .into_bytes()
            .unwrap();
        assert_eq!(bytes.len(), 16);
        assert_eq!(bytes[8..12], 1.0f32.to_le_bytes());
    }

    #[test]
    fn bad_constants_are_errors() {
        let too_many = constant(DType::Int64, &[1], TensorValues::Int64(vec![1, 2]));
        assert!(matches!(
            HostTensor::from_const(&too_many),
            Err(TensorError::TooManyValues { .. })
        ));
        let wrong_field = constant(DType::Int64, &[1], TensorValues::Float(vec![1.0]));
        assert_eq!(
            HostTensor::from_const(&wrong_field)
                .unwrap_err()
                .to_string(),
            "a int64 constant cannot store its values in `float_val`"
        );
        let unknown = constant(DType::Int64, &[-1], TensorValues::Empty);
        assert!(matches!(
            HostTensor::from_const(&unknown),
            Err(TensorError::UnknownShape { .. })
        ));
    }

    #[test]
    fn clones_share_storage() {
        let tensor = HostTensor::from_bytes(DType::UInt8, vec![3], vec![1, 2, 3]).unwrap();
        let clone = tensor.clone();
        assert!(clone.shares_storage_with(&tensor));
        drop(tensor);
        assert_eq!(clone.into_bytes(), Some(vec![1, 2, 3]));
    }
}
