//! The native layer of the `saveplan` Python package (`saveplan._saveplan`): it only converts
//! values between Python and the `saveplan` crate and runs the crate's IO with the GIL
//! released. The public API is the pure-Python package around it (`py_src/saveplan`).
//!
//! Arrays cross without a copy: a fixed-width tensor comes back as a one-dimensional `uint8`
//! NumPy array that either views the read-only memory map of its data file (its base object
//! keeps the map alive) or owns the buffer Rust read it into; the Python side reinterprets it
//! with the tensor's dtype and shape (`ndarray.view`, `reshape`: views, not copies).

mod errors;
mod objects;
mod read;
mod write;

use pyo3::prelude::*;

/// The module `saveplan._saveplan`.
#[pymodule]
fn _saveplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<read::Reader>()?;
    m.add_class::<read::MappedOwner>()?;
    m.add_class::<read::ArenaOwner>()?;
    m.add_function(wrap_pyfunction!(read::resolve_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(read::latest_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(write::write_bundle, m)?)?;
    m.add_function(wrap_pyfunction!(objects::write_objects, m)?)?;
    m.add_function(wrap_pyfunction!(objects::restore_objects, m)?)?;
    m.add_class::<objects::Manager>()?;
    Ok(())
}
