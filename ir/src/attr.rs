//! Attribute values of ops: a lossless mirror of TensorFlow's `AttrValue`, `TensorProto` and
//! `TensorShapeProto`, without any protobuf dependency.
//!
//! The attribute map of an op is the single source of truth for its parameters: import keeps
//! every attribute (private `_class`, `_output_shapes`, … included) and export writes them back,
//! so a foreign graph round-trips exactly. Typed access goes through the accessors on
//! [`Attrs`] and is checked against the op signatures by the verifier.

use std::borrow::Cow;

use crate::DType;

/// The name of an attribute: borrowed for the fixed names ops are built with, owned for names
/// read from a file, so building an op allocates nothing for its attribute names.
pub type AttrName = Cow<'static, str>;

/// The attributes of one op: a map from name to value, iterated in name order.
///
/// Stored as a vector sorted by name, sized to fit: ops have a handful of attributes, and a
/// plan has hundreds of thousands of ops, so a tree node per op would dominate tracing time.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Attrs {
    entries: Vec<(AttrName, AttrValue)>,
}

impl Attrs {
    /// An empty map.
    pub fn new() -> Attrs {
        Attrs {
            entries: Vec::new(),
        }
    }

    /// An empty map with room for `capacity` attributes.
    pub fn with_capacity(capacity: usize) -> Attrs {
        Attrs {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// The value of an attribute.
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.position(name).ok().map(|i| &self.entries[i].1)
    }

    /// Mutable access to the value of an attribute.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut AttrValue> {
        self.position(name).ok().map(|i| &mut self.entries[i].1)
    }

    /// Whether the attribute is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Sets an attribute, returning its previous value.
    pub fn insert(&mut self, name: impl Into<AttrName>, value: AttrValue) -> Option<AttrValue> {
        let name = name.into();
        match self.position(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (name, value));
                None
            }
        }
    }

    /// Removes an attribute, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<AttrValue> {
        self.position(name).ok().map(|i| self.entries.remove(i).1)
    }

    /// The number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no attributes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The attributes in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &AttrValue)> + '_ {
        self.entries.iter().map(|(name, value)| (&**name, value))
    }

    /// The names in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(|(name, _)| &**name)
    }

    /// The values in name order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &AttrValue> + '_ {
        self.entries.iter().map(|(_, value)| value)
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(key, _)| (**key).cmp(name))
    }
}

impl<K: Into<AttrName>> FromIterator<(K, AttrValue)> for Attrs {
    /// Collects attributes; a repeated name keeps the last value, as a map would.
    fn from_iter<I: IntoIterator<Item = (K, AttrValue)>>(iter: I) -> Attrs {
        let mut entries: Vec<(AttrName, AttrValue)> = iter
            .into_iter()
            .map(|(name, value)| (name.into(), value))
            .collect();
        // Callers mostly list attributes in order already: nothing to sort or drop then.
        if entries.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            return Attrs { entries };
        }
        entries.reverse();
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        entries.dedup_by(|(a, _), (b, _)| a == b);
        entries.shrink_to_fit();
        Attrs { entries }
    }
}

impl<K: Into<AttrName>, const N: usize> From<[(K, AttrValue); N]> for Attrs {
    fn from(entries: [(K, AttrValue); N]) -> Attrs {
        entries.into_iter().collect()
    }
}

impl<K: Into<AttrName>> Extend<(K, AttrValue)> for Attrs {
    fn extend<I: IntoIterator<Item = (K, AttrValue)>>(&mut self, iter: I) {
        for (name, value) in iter {
            self.insert(name, value);
        }
    }
}

impl IntoIterator for Attrs {
    type Item = (AttrName, AttrValue);
    type IntoIter = std::vec::IntoIter<(AttrName, AttrValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a Attrs {
    type Item = (&'a str, &'a AttrValue);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (AttrName, AttrValue)>,
        fn(&'a (AttrName, AttrValue)) -> (&'a str, &'a AttrValue),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(name, value)| (&**name, value))
    }
}

/// One attribute value (`tensorflow.AttrValue`).
#[derive(Clone, PartialEq, Debug)]
pub enum AttrValue {
    /// No member of the `value` oneof is set.
    Unset,
    /// `s`: a byte string (usually UTF-8).
    S(Vec<u8>),
    /// `i`: an integer.
    I(i64),
    /// `f`: a 32-bit float.
    F(f32),
    /// `b`: a bool.
    B(bool),
    /// `type`: a dtype.
    Type(DType),
    /// `shape`: a tensor shape.
    Shape(Shape),
    /// `tensor`: a constant tensor (boxed: it is large and rarer than scalars).
    Tensor(Box<Tensor>),
    /// `list`: lists of the scalar kinds above (TF allows several to be set at once; boxed
    /// because eight vectors would make every attribute value large).
    List(Box<AttrList>),
    /// `func`: a function name with attributes (boxed: rare, and inline it would make every
    /// attribute value half as large again, 48 bytes instead of 32).
    Func(Box<NameAttrList>),
    /// `placeholder`: the name of a function attribute to substitute.
    Placeholder(String),
}

// A plan holds hundreds of thousands of ops with a few attribute values each: a value that
// grows is a cost per attribute of every large plan, so its size is kept here on purpose.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<AttrValue>() == 32);

/// `AttrValue.ListValue`. An empty list is a list with every field empty.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct AttrList {
    /// Byte strings.
    pub s: Vec<Vec<u8>>,
    /// Integers.
    pub i: Vec<i64>,
    /// Floats.
    pub f: Vec<f32>,
    /// Bools.
    pub b: Vec<bool>,
    /// Dtypes.
    pub types: Vec<DType>,
    /// Shapes.
    pub shapes: Vec<Shape>,
    /// Tensors.
    pub tensors: Vec<Tensor>,
    /// Functions.
    pub funcs: Vec<NameAttrList>,
}

/// A function reference with attributes (`tensorflow.NameAttrList`).
#[derive(Clone, PartialEq, Debug, Default)]
pub struct NameAttrList {
    /// The function name.
    pub name: String,
    /// Its attributes.
    pub attr: Attrs,
}

/// A tensor shape (`tensorflow.TensorShapeProto`), kept exactly as written.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Shape {
    /// The dimensions, outermost first. A size of -1 means unknown.
    pub dims: Vec<Dim>,
    /// Whether the rank is unknown (then `dims` is normally empty).
    pub unknown_rank: bool,
}

/// One dimension of a [`Shape`].
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Dim {
    /// The size; -1 for unknown.
    pub size: i64,
    /// An optional dimension name (rarely used by TensorFlow).
    pub name: String,
}

/// A constant tensor (`tensorflow.TensorProto`), kept in the representation it was written in.
#[derive(Clone, PartialEq, Debug)]
pub struct Tensor {
    /// The element type.
    pub dtype: DType,
    /// The shape, if present in the proto.
    pub shape: Option<Shape>,
    /// `version_number` (0 when absent).
    pub version_number: i32,
    /// The element values.
    pub values: TensorValues,
}

/// Which `TensorProto` field holds a [`Tensor`]'s elements.
///
/// TensorFlow writes either packed little-endian bytes (`tensor_content`) or one of the typed
/// repeated fields; a constant with fewer stored values than elements repeats the last one.
#[derive(Clone, PartialEq, Debug)]
pub enum TensorValues {
    /// No values at all (a zero-element tensor, or all defaults).
    Empty,
    /// `tensor_content`: raw little-endian element bytes.
    Content(Vec<u8>),
    /// `half_val` (float16 and bfloat16 bit patterns).
    Half(Vec<i32>),
    /// `float_val`.
    Float(Vec<f32>),
    /// `double_val`.
    Double(Vec<f64>),
    /// `int_val` (int32, int16, int8, uint8, uint16, bool-like and quantized types).
    Int(Vec<i32>),
    /// `string_val`.
    String(Vec<Vec<u8>>),
    /// `scomplex_val` (interleaved real, imaginary).
    SComplex(Vec<f32>),
    /// `int64_val`.
    Int64(Vec<i64>),
    /// `bool_val`.
    Bool(Vec<bool>),
    /// `dcomplex_val` (interleaved real, imaginary).
    DComplex(Vec<f64>),
    /// `uint32_val`.
    UInt32(Vec<u32>),
    /// `uint64_val`.
    UInt64(Vec<u64>),
    /// `float8_val` (packed bytes).
    Float8(Vec<u8>),
}

impl Shape {
    /// A fully known shape.
    pub fn from_dims(dims: &[i64]) -> Shape {
        Shape {
            dims: dims
                .iter()
                .map(|&size| Dim {
                    size,
                    name: String::new(),
                })
                .collect(),
            unknown_rank: false,
        }
    }

    /// The scalar shape `[]`.
    pub fn scalar() -> Shape {
        Shape::default()
    }

    /// A shape of unknown rank.
    pub fn unknown() -> Shape {
        Shape {
            dims: Vec::new(),
            unknown_rank: true,
        }
    }

    /// The dimension sizes, or `None` if the rank is unknown.
    pub fn sizes(&self) -> Option<Vec<i64>> {
        (!self.unknown_rank).then(|| self.dims.iter().map(|dim| dim.size).collect())
    }

    /// The number of elements, if every dimension is known and the product fits in `u64`.
    pub fn num_elements(&self) -> Option<u64> {
        if self.unknown_rank {
            return None;
        }
        self.dims.iter().try_fold(1u64, |acc, dim| {
            let size = u64::try_from(dim.size).ok()?;
            acc.checked_mul(size)
        })
    }
}

/// The most host memory one tensor attr (a `Const`'s `value`) may need once its stored values
/// are repeated to fill its shape: 2 GiB, protobuf's message-size limit.
///
/// No `GraphDef` TensorFlow writes is larger, so a tensor stored in full never needs more; only
/// one whose few stored values TensorFlow's fill rule repeats (a 3 KB graph can declare 10^12
/// elements) can, and TensorFlow then allocates it all. Plans never need such a constant (their
/// constants are names, slice specs and shard numbers), so the verifier refuses it before
/// anything is allocated.
pub const MAX_TENSOR_ATTR_BYTES: u64 = 1 << 31;

/// The host bytes each string element takes besides its own bytes (the header of a
/// TensorFlow `tstring` and of a `Vec<u8>`, 24 bytes each).
pub const STRING_ELEMENT_OVERHEAD: u64 = 24;

impl Tensor {
    /// The host bytes this tensor takes once its stored values fill its shape (fixed-width
    /// elements at their size, strings at their length plus [`STRING_ELEMENT_OVERHEAD`]);
    /// `None` when the shape is not fully known, the dtype has no host size, or the count
    /// overflows `u64`. A missing shape is a scalar.
    pub fn filled_bytes(&self) -> Option<u64> {
        let n_elements = match &self.shape {
            Some(shape) => shape.num_elements()?,
            None => 1,
        };
        if let TensorValues::String(values) = &self.values {
            let stored: u64 = values.iter().map(|value| value.len() as u64).sum();
            let last = values.last().map_or(0, |value| value.len() as u64);
            let repeated = n_elements.saturating_sub(values.len() as u64);
            return repeated
                .checked_mul(last)?
                .checked_add(stored)?
                .checked_add(n_elements.checked_mul(STRING_ELEMENT_OVERHEAD)?);
        }
        let size = match self.dtype {
            DType::String => STRING_ELEMENT_OVERHEAD,
            dtype => dtype.element_size()? as u64,
        };
        n_elements.checked_mul(size)
    }

    /// A string scalar.
    pub fn string_scalar(value: impl Into<Vec<u8>>) -> Tensor {
        Tensor {
            dtype: DType::String,
            shape: Some(Shape::scalar()),
            version_number: 0,
            values: TensorValues::String(vec![value.into()]),
        }
    }

    /// A rank-1 string tensor, as `Const` ops holding SaveV2's `tensor_names` are written.
    pub fn string_vector<S: Into<Vec<u8>>>(values: impl IntoIterator<Item = S>) -> Tensor {
        let values: Vec<Vec<u8>> = values.into_iter().map(Into::into).collect();
        Tensor {
            dtype: DType::String,
            shape: Some(Shape::from_dims(&[values.len() as i64])),
            version_number: 0,
            values: TensorValues::String(values),
        }
    }

    /// An int32 scalar, written with `int_val` as TensorFlow does for small constants.
    pub fn int32_scalar(value: i32) -> Tensor {
        Tensor {
            dtype: DType::Int32,
            shape: Some(Shape::scalar()),
            version_number: 0,
            values: TensorValues::Int(vec![value]),
        }
    }

    /// The strings of a string tensor, if this is one.
    pub fn strings(&self) -> Option<&[Vec<u8>]> {
        match &self.values {
            TensorValues::String(values) => Some(values),
            TensorValues::Empty if self.dtype == DType::String => Some(&[]),
            _ => None,
        }
    }

    /// The value of an integer scalar stored in `int_val`, `int64_val` or `tensor_content`.
    pub fn as_i64_scalar(&self) -> Option<i64> {
        match &self.values {
            TensorValues::Int(values) => values.last().map(|&v| i64::from(v)),
            TensorValues::Int64(values) => values.last().copied(),
            TensorValues::Content(bytes) => match (self.dtype, bytes.len()) {
                (DType::Int32, 4) => {
                    Some(i64::from(i32::from_le_bytes(bytes[..4].try_into().ok()?)))
                }
                (DType::Int64, 8) => Some(i64::from_le_bytes(bytes[..8].try_into().ok()?)),
                _ => None,
            },
            TensorValues::Empty if matches!(self.dtype, DType::Int32 | DType::Int64) => Some(0),
            _ => None,
        }
    }
}

impl AttrValue {
    /// A string attribute.
    pub fn s(value: impl Into<Vec<u8>>) -> AttrValue {
        AttrValue::S(value.into())
    }

    /// A list-of-dtypes attribute.
    pub fn types(types: impl IntoIterator<Item = DType>) -> AttrValue {
        AttrValue::List(Box::new(AttrList {
            types: types.into_iter().collect(),
            ..AttrList::default()
        }))
    }

    /// A list-of-strings attribute.
    pub fn strings<S: Into<Vec<u8>>>(values: impl IntoIterator<Item = S>) -> AttrValue {
        AttrValue::List(Box::new(AttrList {
            s: values.into_iter().map(Into::into).collect(),
            ..AttrList::default()
        }))
    }

    /// The kind of value held, as TensorFlow names attribute types (`string`, `int`,
    /// `list(type)`, …); `list` for an empty list, whose element kind is unknown.
    pub fn kind(&self) -> &'static str {
        match self {
            AttrValue::Unset => "unset",
            AttrValue::S(_) => "string",
            AttrValue::I(_) => "int",
            AttrValue::F(_) => "float",
            AttrValue::B(_) => "bool",
            AttrValue::Type(_) => "type",
            AttrValue::Shape(_) => "shape",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Func(_) => "func",
            AttrValue::Placeholder(_) => "placeholder",
            AttrValue::List(list) => list.kind(),
        }
    }
}

impl AttrList {
    /// The number of elements over all member lists.
    pub fn len(&self) -> usize {
        self.s.len()
            + self.i.len()
            + self.f.len()
            + self.b.len()
            + self.types.len()
            + self.shapes.len()
            + self.tensors.len()
            + self.funcs.len()
    }

    /// Whether every member list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The attribute type this list holds (`list(type)`, …), `list` when empty or mixed.
    pub fn kind(&self) -> &'static str {
        let kinds = [
            (!self.s.is_empty(), "list(string)"),
            (!self.i.is_empty(), "list(int)"),
            (!self.f.is_empty(), "list(float)"),
            (!self.b.is_empty(), "list(bool)"),
            (!self.types.is_empty(), "list(type)"),
            (!self.shapes.is_empty(), "list(shape)"),
            (!self.tensors.is_empty(), "list(tensor)"),
            (!self.funcs.is_empty(), "list(func)"),
        ];
        let mut present = kinds.iter().filter(|(set, _)| *set);
        match (present.next(), present.next()) {
            (Some((_, kind)), None) => kind,
            _ => "list",
        }
    }
}
