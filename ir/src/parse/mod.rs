//! The parser for the canonical text form that [`crate::write`] prints.
//!
//! [`parse_module`] and [`parse_graph`] read exactly what `Display` for
//! [`Module`](crate::Module) and [`Graph`](crate::Graph) writes, so
//! `parse_module(&module.to_string())` prints the same text again. Ops are created in line
//! order; inputs may name ops defined later (a cyclic graph parses, and the verifier reports
//! the cycle). Errors carry the 1-based line and column and say what was
//! expected.
//!
//! The work is split in two: `lexer.rs` turns the text into tokens with positions, and
//! `parser.rs` builds the module from them. This file owns the errors both report.

mod lexer;
mod parser;

pub use parser::{parse_graph, parse_module};

/// A syntax error in IR text, with the position where it was found.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("{line}:{column}: {kind}")]
pub struct ParseError {
    /// The 1-based line.
    pub line: u32,
    /// The 1-based column, in characters.
    pub column: u32,
    /// What is wrong.
    pub kind: ParseErrorKind,
}

/// What is wrong at the position of a [`ParseError`].
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ParseErrorKind {
    /// Another token was expected.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the parser wanted, e.g. "`=`" or "an attribute value".
        expected: String,
        /// What it found, e.g. "`(`" or "end of input".
        found: String,
    },
    /// A character that starts no token.
    #[error("unexpected character `{0}`")]
    UnexpectedChar(char),
    /// A string without its closing quote.
    #[error("unterminated string")]
    UnterminatedString,
    /// A `<` without its closing `>`.
    #[error("unterminated `<`")]
    UnterminatedAngle,
    /// An escape sequence other than `\n \t \r \" \\ \xNN`.
    #[error("invalid escape `{0}`")]
    InvalidEscape(String),
    /// A number that does not fit or does not parse.
    #[error("invalid {what} `{text}`")]
    InvalidNumber {
        /// The kind of number, e.g. "int32".
        what: &'static str,
        /// The text.
        text: String,
    },
    /// A dtype name that TensorFlow does not have.
    #[error("unknown dtype `{0}`")]
    UnknownDType(String),
    /// A string used as a name is not valid UTF-8.
    #[error("name is not valid UTF-8")]
    InvalidUtf8,
    /// Two ops of one graph share a name.
    #[error("op `{0}` is defined twice")]
    DuplicateOp(String),
    /// An input names an op the graph does not define.
    #[error("op `{op}` uses undefined op `{name}`")]
    UndefinedOp {
        /// The consumer.
        op: String,
        /// The missing producer.
        name: String,
    },
    /// A key appears twice in one `[...]`.
    #[error("duplicate key `{0}`")]
    DuplicateKey(String),
    /// A property this construct does not have.
    #[error("unknown property `{0}`")]
    UnknownProperty(String),
    /// A property whose value has the wrong kind.
    #[error("property `{key}` must be {expected}, found {found}")]
    WrongKind {
        /// The property.
        key: String,
        /// The kind it needs.
        expected: &'static str,
        /// The kind it has.
        found: &'static str,
    },
    /// The module has two `graph` blocks.
    #[error("second `graph` block")]
    DuplicateGraph,
}

/// A line and column, 1-based.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Pos {
    line: u32,
    column: u32,
}

impl Pos {
    /// An error of `kind` at this position.
    fn error(self, kind: ParseErrorKind) -> ParseError {
        ParseError {
            line: self.line,
            column: self.column,
            kind,
        }
    }
}
