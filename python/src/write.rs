//! Writing: key-based checkpoints (`saveplan.save`) from NumPy buffers, with the GIL released
//! while the files are written; and the conversion of Python values shared with
//! [`crate::objects`].

use std::path::PathBuf;

use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use saveplan::bundle::{BundleWriter, DType, TensorValues};

use crate::errors::from_bundle;

/// One tensor from Python: `(key, dtype name, shape, values)`, the values a contiguous `uint8`
/// array of the element bytes or a list of `bytes`.
pub type PyTensor<'py> = (String, String, Vec<i64>, Bound<'py, PyAny>);

/// A tensor's values, borrowed from Python.
pub enum Values<'a> {
    /// Element bytes of a fixed-width dtype, borrowed from a NumPy array.
    Bytes(&'a [u8]),
    /// `DT_STRING` elements, copied out of Python `bytes`.
    Strings(&'a [Vec<u8>]),
}

/// The Python values of one tensor, held while their bytes are borrowed.
pub enum Held<'py> {
    /// A `uint8` array, borrowed read-only.
    Array(PyReadonlyArray1<'py, u8>),
    /// Strings, copied.
    Strings(Vec<Vec<u8>>),
}

impl Held<'_> {
    /// The values, borrowed.
    pub fn values(&self) -> PyResult<Values<'_>> {
        match self {
            Held::Array(array) => Ok(Values::Bytes(array.as_slice().map_err(|_| {
                PyValueError::new_err("the values of a tensor must be a contiguous array")
            })?)),
            Held::Strings(strings) => Ok(Values::Strings(strings)),
        }
    }
}

/// The dtype named `name` (a TensorFlow name), which must be storable.
pub fn parse_dtype(key: &str, name: &str) -> PyResult<DType> {
    DType::parse(name)
        .filter(|&dtype| saveplan::bundle::dtype::is_storable(dtype) && dtype != DType::Variant)
        .ok_or_else(|| {
            PyTypeError::new_err(format!("`{key}`: a checkpoint cannot store dtype `{name}`"))
        })
}

/// Borrows one tensor's values: a `uint8` array or a list of `bytes`.
pub fn hold<'py>(key: &str, dtype: DType, values: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    if dtype == DType::String {
        let items: Vec<Bound<'py, PyAny>> = values.extract()?;
        let strings = items
            .iter()
            .map(|item| {
                item.cast::<PyBytes>()
                    .map(|bytes| bytes.as_bytes().to_vec())
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "`{key}`: a string tensor's elements must be bytes, not {}",
                            item.get_type()
                                .name()
                                .map_or_else(|_| "?".to_owned(), |name| name.to_string())
                        ))
                    })
            })
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        return Ok(Held::Strings(strings));
    }
    let array: PyReadonlyArray1<'py, u8> = values.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "`{key}`: values must be a one-dimensional uint8 array"
        ))
    })?;
    if !array.is_contiguous() {
        return Err(PyValueError::new_err(format!(
            "`{key}`: values must be contiguous"
        )));
    }
    Ok(Held::Array(array))
}

/// `saveplan.save(path, tensors)`'s native half: writes a key-based checkpoint (one data
/// file) holding `tensors` in the order given, with the GIL released while writing.
#[pyfunction]
pub fn write_bundle(py: Python<'_>, prefix: PathBuf, tensors: Vec<PyTensor<'_>>) -> PyResult<()> {
    let mut held = Vec::with_capacity(tensors.len());
    for (key, dtype, shape, values) in &tensors {
        let dtype = parse_dtype(key, dtype)?;
        held.push((
            key.as_str(),
            dtype,
            shape.as_slice(),
            hold(key, dtype, values)?,
        ));
    }
    let borrowed = held
        .iter()
        .map(|(key, dtype, shape, held)| Ok((*key, *dtype, *shape, held.values()?)))
        .collect::<PyResult<Vec<_>>>()?;
    py.detach(|| {
        let mut writer = BundleWriter::create(&prefix)?;
        for (key, dtype, shape, values) in &borrowed {
            let values = match values {
                Values::Bytes(bytes) => TensorValues::Bytes(bytes),
                Values::Strings(strings) => TensorValues::Strings(strings),
            };
            writer.add_values(key, *dtype, shape, values)?;
        }
        writer.finish()
    })
    .map_err(|err| from_bundle(py, err))
}
