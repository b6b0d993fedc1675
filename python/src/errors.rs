//! Errors as Python exceptions: every error becomes one of `saveplan.errors`' classes, which
//! mirror TensorFlow's (`NotFoundError`, `DataLossError`, `InvalidArgumentError`, …), chosen
//! by kind as TensorFlow 2.21 chooses them for the same bad input, with a one-line message:
//! the error and its sources joined by `: `.

use std::error::Error;
use std::io::ErrorKind;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use saveplan::bundle::BundleError;
use saveplan::checkpoint::{CheckpointError, ObjectError, ObjectSpecError};

/// The `saveplan.errors` classes an error can become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A file or key that does not exist (`tf.errors.NotFoundError`).
    NotFound,
    /// Damaged files (`tf.errors.DataLossError`).
    DataLoss,
    /// A bad argument (`tf.errors.InvalidArgumentError`, also a `ValueError`).
    InvalidArgument,
    /// Not allowed by the file system (`tf.errors.PermissionDeniedError`).
    PermissionDenied,
    /// Anything else (`tf.errors.UnknownError`).
    Unknown,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::NotFound => "NotFoundError",
            Kind::DataLoss => "DataLossError",
            Kind::InvalidArgument => "InvalidArgumentError",
            Kind::PermissionDenied => "PermissionDeniedError",
            Kind::Unknown => "UnknownError",
        }
    }
}

/// The error and its sources on one line.
pub fn message(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text.replace('\n', " ")
}

/// The `saveplan.errors` exception of `kind` with `message`.
pub fn raise(py: Python<'_>, kind: Kind, message: String) -> PyErr {
    let class = py
        .import("saveplan.errors")
        .and_then(|module| module.getattr(kind.class_name()));
    match class.and_then(|class| class.call1((message.clone(),))) {
        Ok(value) => PyErr::from_value(value),
        // The package's own module failed to import: still an exception, never a crash.
        Err(_) => PyValueError::new_err(message),
    }
}

fn io_kind(kind: ErrorKind) -> Kind {
    match kind {
        ErrorKind::NotFound => Kind::NotFound,
        ErrorKind::PermissionDenied => Kind::PermissionDenied,
        _ => Kind::Unknown,
    }
}

/// The kind of a bundle error.
pub fn bundle_kind(err: &BundleError) -> Kind {
    match err {
        BundleError::IndexNotFound { .. }
        | BundleError::KeyNotFound { .. }
        | BundleError::MissingShard { .. }
        | BundleError::MergeSourceMissing { .. }
        | BundleError::MergeNoSources { .. } => Kind::NotFound,
        BundleError::Io { source, .. } => io_kind(source.kind()),
        BundleError::BadMagic { .. }
        | BundleError::CorruptIndex { .. }
        | BundleError::BlockChecksum { .. }
        | BundleError::BadJournal { .. }
        | BundleError::BadHeader { .. }
        | BundleError::BadEntry { .. }
        | BundleError::DataTruncated { .. }
        | BundleError::TensorChecksum { .. }
        | BundleError::SizeMismatch { .. }
        | BundleError::BadStrings { .. } => Kind::DataLoss,
        // TensorFlow's reader raises `ValueError` ("Does not have sufficient slices").
        _ => Kind::InvalidArgument,
    }
}

/// The kind of an object-checkpoint error.
pub fn checkpoint_kind(err: &CheckpointError) -> Kind {
    match err {
        CheckpointError::Bundle(inner) => bundle_kind(inner),
        CheckpointError::NoStateFile { .. }
        | CheckpointError::NotFound { .. }
        | CheckpointError::NoLatestCheckpoint { .. }
        | CheckpointError::MissingLatestCheckpoint { .. }
        | CheckpointError::Object(ObjectError::RestoreKeyMissing { .. }) => Kind::NotFound,
        CheckpointError::CorruptObjectGraph { .. } | CheckpointError::BadStateFile { .. } => {
            Kind::DataLoss
        }
        CheckpointError::DeleteCheckpoint(inner) => bundle_kind(inner),
        CheckpointError::ReadStateFile { source, .. }
        | CheckpointError::WriteStateFile { source, .. } => io_kind(source.kind()),
        CheckpointError::Write { source, .. } => chain_kind(source.as_ref()),
        CheckpointError::Read { source, .. } => chain_kind(source.as_ref()),
        CheckpointError::ReadValues { source, .. } => chain_kind(source.as_ref()),
        _ => Kind::InvalidArgument,
    }
}

/// The kind of the first bundle or IO error in `failure`'s chain; otherwise a bad argument.
fn chain_kind(failure: &(dyn Error + 'static)) -> Kind {
    let mut source: Option<&(dyn Error + 'static)> = Some(failure);
    while let Some(err) = source {
        if let Some(bundle) = err.downcast_ref::<BundleError>() {
            return bundle_kind(bundle);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io_kind(io.kind());
        }
        source = err.source();
    }
    Kind::InvalidArgument
}

/// A bundle error as a Python exception.
pub fn from_bundle(py: Python<'_>, err: BundleError) -> PyErr {
    raise(py, bundle_kind(&err), message(&err))
}

/// An object-checkpoint error as a Python exception.
pub fn from_checkpoint(py: Python<'_>, err: CheckpointError) -> PyErr {
    raise(py, checkpoint_kind(&err), message(&err))
}

/// An object-spec error as a Python exception: a value of the wrong dtype or shape is a
/// `TypeError`/`ValueError`, as `tf.Variable` assignment raises them.
pub fn from_spec(py: Python<'_>, err: ObjectSpecError) -> PyErr {
    match err {
        ObjectSpecError::Checkpoint(inner) => from_checkpoint(py, inner),
        ObjectSpecError::UnknownDType { .. } => PyTypeError::new_err(message(&err)),
        other => raise(py, Kind::InvalidArgument, message(&other)),
    }
}
