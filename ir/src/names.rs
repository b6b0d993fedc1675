//! Tensor names as TensorFlow writes them (`op`, `op:N`, `op:arg:N`) and the entry points of a
//! save/restore plan ([`SaverNames`], [`SaverDef`]).
//!
//! Every layer that reads a name (the plan compiler's feeds and fetches, the importer's
//! inputs, the verifier's function returns, the session's targets, `saveplan check`) parses it
//! here, so `"op"` and `"op:0"` mean the same everywhere.

use std::fmt;

use crate::graph::Port;

/// A reference to an op's output: `op` (output 0, or the op itself as a target), `op:N`, or,
/// in a function body, `op:arg:N` (output argument `arg`, index `N`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TensorName<'a> {
    /// The op's name.
    pub op: &'a str,
    /// The output, when the text names one.
    pub output: Option<OutputRef<'a>>,
}

/// Which output a [`TensorName`] names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OutputRef<'a> {
    /// `op:N`: flat output `N`.
    Index(u32),
    /// `op:arg:N`: index `N` of output argument `arg` (function-body syntax).
    Named {
        /// The output argument.
        arg: &'a str,
        /// The index within it.
        index: u32,
    },
}

/// Why a text is not a tensor name.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("`{text}` is not a tensor name (`op`, `op:N` or `op:arg:N`)")]
pub struct TensorNameError {
    /// The text given.
    pub text: String,
}

impl<'a> TensorName<'a> {
    /// Parses `op`, `op:N` or `op:arg:N`; every part must be non-empty and `N` a `u32`.
    pub fn parse(text: &'a str) -> Result<TensorName<'a>, TensorNameError> {
        let bad = || TensorNameError {
            text: text.to_owned(),
        };
        let mut parts = text.split(':');
        let op = parts.next().filter(|op| !op.is_empty()).ok_or_else(bad)?;
        let index = |part: &str| part.parse::<u32>().map_err(|_| bad());
        let output = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => None,
            (Some(n), None, _) => Some(OutputRef::Index(index(n)?)),
            (Some(arg), Some(n), None) if !arg.is_empty() => Some(OutputRef::Named {
                arg,
                index: index(n)?,
            }),
            _ => return Err(bad()),
        };
        Ok(TensorName { op, output })
    }

    /// The flat output index: `N` for `op:N`, 0 for a bare `op`; `None` for `op:arg:N`.
    pub fn index_or_zero(&self) -> Option<u32> {
        match self.output {
            None => Some(0),
            Some(OutputRef::Index(index)) => Some(index),
            Some(OutputRef::Named { .. }) => None,
        }
    }

    /// The output as a graph [`Port`]; a bare `op` is output 0.
    pub fn port(&self) -> Port {
        match self.output {
            None => Port::Index(0),
            Some(OutputRef::Index(index)) => Port::Index(index),
            Some(OutputRef::Named { arg, index }) => Port::Named {
                arg: arg.to_owned(),
                index,
            },
        }
    }
}

impl fmt::Display for TensorName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op)?;
        match self.output {
            None => Ok(()),
            Some(OutputRef::Index(index)) => write!(f, ":{index}"),
            Some(OutputRef::Named { arg, index }) => write!(f, ":{arg}:{index}"),
        }
    }
}

/// The names that drive a save/restore plan: the string tensor fed with the checkpoint
/// prefix, what is fetched (a tensor) or run (an op) to save, and the ops run to restore.
///
/// A `SaverDef` names one restore op ([`SaverDef::names`]); a flat trace, which has no
/// grouping op, names every `AssignVariableOp` its restore runs.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SaverNames {
    /// The string tensor fed with the prefix (`saver_filename:0`).
    pub filename_tensor_name: String,
    /// The tensor fetched (`op:N`) or op run (`op`) to save.
    pub save_target: String,
    /// The ops run to restore.
    pub restore_targets: Vec<String>,
}

/// TensorFlow's `SaverDef` as plain data: [`SaverNames`] with one restore op, plus the saver's
/// options, which a plan carries but does not act on.
#[derive(Clone, PartialEq, Debug)]
pub struct SaverDef {
    /// `filename_tensor_name`.
    pub filename_tensor_name: String,
    /// `save_tensor_name`.
    pub save_tensor_name: String,
    /// `restore_op_name`.
    pub restore_op_name: String,
    /// `max_to_keep`.
    pub max_to_keep: i32,
    /// `sharded`.
    pub sharded: bool,
    /// `keep_checkpoint_every_n_hours`.
    pub keep_checkpoint_every_n_hours: f32,
    /// `version`: 0 legacy, 1 V1, 2 V2 (TensorFlow's `CheckpointFormatVersion`).
    pub version: i32,
}

impl SaverDef {
    /// The `CheckpointFormatVersion` of V2 checkpoints, the only one saveplan writes.
    pub const V2: i32 = 2;

    /// A V2 `SaverDef` with these names and every option at its protobuf default.
    pub fn v2(
        filename_tensor_name: impl Into<String>,
        save_tensor_name: impl Into<String>,
        restore_op_name: impl Into<String>,
    ) -> SaverDef {
        SaverDef {
            filename_tensor_name: filename_tensor_name.into(),
            save_tensor_name: save_tensor_name.into(),
            restore_op_name: restore_op_name.into(),
            max_to_keep: 0,
            sharded: false,
            keep_checkpoint_every_n_hours: 0.0,
            version: SaverDef::V2,
        }
    }

    /// The names a session runs.
    pub fn names(&self) -> SaverNames {
        SaverNames {
            filename_tensor_name: self.filename_tensor_name.clone(),
            save_target: self.save_tensor_name.clone(),
            restore_targets: vec![self.restore_op_name.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for (text, op, output) in [
            ("a", "a", None),
            ("a/b:3", "a/b", Some(OutputRef::Index(3))),
            (
                "call:output:1",
                "call",
                Some(OutputRef::Named {
                    arg: "output",
                    index: 1,
                }),
            ),
        ] {
            let name = TensorName::parse(text).unwrap();
            assert_eq!((name.op, name.output), (op, output));
            assert_eq!(name.to_string(), text);
        }
        assert_eq!(TensorName::parse("a").unwrap().index_or_zero(), Some(0));
        assert_eq!(TensorName::parse("a:x:0").unwrap().index_or_zero(), None);
        for bad in ["", ":0", "a:", "a:x", "a::1", "a:b:c", "a:b:1:2", "a:-1"] {
            assert!(TensorName::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
