//! The closed set of ops the IR models, named exactly as TensorFlow names them.

use std::fmt;

macro_rules! ops {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// The kind of an op: TensorFlow's op vocabulary for save and restore plans.
        ///
        /// The set is closed, so a backend that `match`es on it must handle every op; anything
        /// else a foreign graph contains is kept verbatim in [`Op::Other`] and round-trips.
        /// Parameters live in the op's attribute map, see [`crate::attr`].
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub enum Op {
            $($(#[$doc])* $variant,)*
            /// Any op type the IR does not model, by its TensorFlow name.
            Other(String),
        }

        impl Op {
            /// Every modelled op (not [`Op::Other`]).
            pub const ALL: &'static [Op] = &[$(Op::$variant,)*];

            /// The TensorFlow op type name (`SaveV2`, `_Arg`, …).
            pub fn type_name(&self) -> &str {
                match self { $(Op::$variant => $name,)* Op::Other(name) => name }
            }

            /// The position of a modelled op in [`Op::ALL`]; `None` for [`Op::Other`]. An
            /// index for tables kept per op kind.
            pub fn ordinal(&self) -> Option<usize> {
                /// The modelled ops in declaration order, without data, so that a variant
                /// converts to its position.
                #[allow(dead_code, reason = "only converted to numbers")]
                enum Ordinal { $($variant,)* }
                match self { $(Op::$variant => Some(Ordinal::$variant as usize),)* Op::Other(_) => None }
            }

            /// The op for a TensorFlow op type name; unknown names become [`Op::Other`].
            pub fn from_type_name(name: &str) -> Op {
                match name { $($name => Op::$variant,)* other => Op::Other(other.to_owned()) }
            }
        }
    };
}

ops! {
    /// A value fed at run time (`dtype`, `shape`).
    Placeholder = "Placeholder",
    /// A fed value with a default input.
    PlaceholderWithDefault = "PlaceholderWithDefault",
    /// A constant (`value`, `dtype`).
    Const = "Const",
    /// Concatenates `N` strings with `separator`.
    StringJoin = "StringJoin",
    /// Matches a string against the constant regex `pattern`.
    StaticRegexFullMatch = "StaticRegexFullMatch",
    /// Matches a string against a regex given as input.
    RegexFullMatch = "RegexFullMatch",
    /// `condition ? t : e` (TF1 `where`).
    Select = "Select",
    /// `condition ? t : e` with broadcasting.
    SelectV2 = "SelectV2",
    /// Stacks `N` tensors along `axis`.
    Pack = "Pack",
    /// `basename-SSSSS-of-NNNNN`.
    ShardedFilename = "ShardedFilename",
    /// `basename-?????-of-NNNNN`.
    ShardedFilespec = "ShardedFilespec",
    /// Writes tensors into a bundle at a prefix.
    SaveV2 = "SaveV2",
    /// Reads tensors from a bundle at a prefix.
    RestoreV2 = "RestoreV2",
    /// Merges bundle prefixes into one checkpoint.
    MergeV2Checkpoints = "MergeV2Checkpoints",
    /// Forwards its input.
    Identity = "Identity",
    /// Forwards a list of inputs.
    IdentityN = "IdentityN",
    /// Does nothing; used to group control dependencies.
    NoOp = "NoOp",
    /// Creates (or looks up) a resource variable handle.
    VarHandleOp = "VarHandleOp",
    /// Reads a resource variable.
    ReadVariableOp = "ReadVariableOp",
    /// Assigns a value to a resource variable.
    AssignVariableOp = "AssignVariableOp",
    /// Whether a resource variable holds a value.
    VarIsInitializedOp = "VarIsInitializedOp",
    /// Turns off copy-on-read for a resource variable.
    DisableCopyOnRead = "DisableCopyOnRead",
    /// A TF1 reference variable (`dtype`, `shape`, `container`, `shared_name`); its output is
    /// a `_ref` tensor.
    VariableV2 = "VariableV2",
    /// Assigns its value input to the TF1 reference variable of its `ref` input.
    Assign = "Assign",
    /// Cuts a slice out of a tensor.
    Slice = "Slice",
    /// A tensor of shape `dims` filled with a scalar `value` (what `tf.zeros` builds for
    /// 1000 elements and more).
    Fill = "Fill",
    /// Calls a library function with side effects.
    StatefulPartitionedCall = "StatefulPartitionedCall",
    /// Calls a library function.
    PartitionedCall = "PartitionedCall",
    /// A function argument (only in function bodies; `T`, `index`).
    Arg = "_Arg",
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in Op::ALL {
            assert_eq!(&Op::from_type_name(op.type_name()), op);
        }
        assert_eq!(Op::from_type_name("MatMul"), Op::Other("MatMul".into()));
        assert_eq!(Op::Other("MatMul".into()).to_string(), "MatMul");
    }

    #[test]
    fn ordinals_are_positions_in_all() {
        for (position, op) in Op::ALL.iter().enumerate() {
            assert_eq!(op.ordinal(), Some(position));
        }
        assert_eq!(Op::Other("MatMul".into()).ordinal(), None);
    }
}
