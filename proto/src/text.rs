//! TensorFlow-style protobuf text format: a printer that reproduces Python's
//! `google.protobuf.text_format.MessageToString` byte for byte, and a parser.
//!
//! Printing re-decodes the message as a [`DynamicMessage`] with [`descriptor_pool`] and walks
//! it the way Python does: set fields in field-number order (proto3 implicit presence: default
//! scalars are left out, set message fields and oneof members are always printed), map fields
//! as one `name { key: … value … }` entry per key in key order, two-space indentation, enums by
//! name, strings and bytes C-escaped, floats as Python's shortest round-trip `repr`.
//! Parsing uses prost-reflect's text-format parser.

use miette::Diagnostic;
use prost::Message;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};

use crate::descriptor_pool;

/// Full name of the well-known `Any` message, which Python prints in expanded form.
const ANY_FULL_NAME: &str = "google.protobuf.Any";

/// Deepest message nesting accepted in text, the same limit prost applies when decoding.
pub const MAX_NESTING: usize = 100;

/// Errors from printing or parsing protobuf text format.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The message type is not in [`descriptor_pool`].
    #[error("unknown message type `{name}`")]
    UnknownMessage {
        /// The full name that was looked up.
        name: String,
    },
    /// The text is not valid text format for the message type.
    #[error("{message}: line {line}, column {column}: {reason}")]
    Parse {
        /// Full name of the message type being parsed.
        message: String,
        /// One-based line of the offending token.
        line: usize,
        /// One-based column (in characters) of the offending token.
        column: usize,
        /// What is wrong, as the parser reports it.
        reason: String,
    },
    /// The binary input is not a valid encoding of the message type.
    #[error("{message}: invalid binary encoding")]
    Decode {
        /// Full name of the message type being decoded.
        message: String,
        /// The decoder's error.
        #[source]
        source: prost::DecodeError,
    },
    /// The sink of [`write_text_dyn`] failed.
    #[error("cannot write the text")]
    Sink {
        /// The sink's error.
        #[source]
        source: std::io::Error,
    },
}

/// Prints `msg` in TensorFlow/Python text format (ends with a newline unless the message is
/// empty).
///
/// # Panics
///
/// Panics if `M` is not a message type of this crate's [`descriptor_pool`], which holds every
/// type this crate generates.
pub fn to_text<M: Message + prost::Name>(msg: &M) -> String {
    to_text_dyn(&M::full_name(), &msg.encode_to_vec())
        .expect("prost types of this crate are in the descriptor pool and encode validly")
}

/// Parses TensorFlow/Python text format into a message of type `M`.
pub fn from_text<M: Message + prost::Name + Default>(text: &str) -> Result<M, TextError> {
    let full_name = M::full_name();
    let bytes = from_text_dyn(&full_name, text)?;
    M::decode(bytes.as_slice()).map_err(|source| TextError::Decode {
        message: full_name,
        source,
    })
}

/// Prints the binary-encoded message `bytes` of type `full_name` (such as
/// `tensorflow.GraphDef`) in TensorFlow/Python text format.
pub fn to_text_dyn(full_name: &str, bytes: &[u8]) -> Result<String, TextError> {
    let mut out = String::new();
    let mut sink = |chunk: &str| {
        out.push_str(chunk);
        Ok(())
    };
    write_text_dyn(full_name, bytes, &mut sink)?;
    Ok(out)
}

/// [`to_text_dyn`], handing the text to `sink` in pieces of about [`TEXT_CHUNK`] bytes.
///
/// Memory stays bounded for messages of any size: a large message field (a `MetaGraphDef`'s
/// `graph_def`, a `GraphDef`'s nodes, a function's `node_def`s) is printed one message at a
/// time, straight from the encoding, and only small messages are decoded whole. An error of `sink` ends the
/// printing and is returned as [`TextError::Sink`].
pub fn write_text_dyn(
    full_name: &str,
    bytes: &[u8],
    sink: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<(), TextError> {
    write_text_split(full_name, bytes, sink, STREAM_THRESHOLD)
}

/// [`write_text_dyn`] streaming repeated message fields larger than `threshold` bytes
/// (`usize::MAX`: decode the whole message at once).
fn write_text_split(
    full_name: &str,
    bytes: &[u8],
    sink: &mut dyn FnMut(&str) -> std::io::Result<()>,
    threshold: usize,
) -> Result<(), TextError> {
    let desc = message_descriptor(full_name)?;
    let mut printer = Printer {
        out: String::with_capacity(TEXT_CHUNK + 4096),
        sink,
        threshold,
    };
    printer.message(&desc, bytes, 0)?;
    printer.flush()
}

/// How much text [`write_text_dyn`] gathers before handing it to its sink.
pub const TEXT_CHUNK: usize = 1 << 20;

/// Message fields whose occurrences take more bytes than this in total are printed one
/// message at a time; smaller messages are decoded and printed whole.
const STREAM_THRESHOLD: usize = 1 << 16;

/// The streaming printer of [`write_text_dyn`].
struct Printer<'a> {
    out: String,
    sink: &'a mut dyn FnMut(&str) -> std::io::Result<()>,
    /// Repeated message fields larger than this are printed element by element.
    threshold: usize,
}

/// One field occurrence in an encoded message: its number and its bytes, key included.
struct RawField {
    number: u32,
    /// The whole field, key and value.
    whole: std::ops::Range<usize>,
    /// A length-delimited field's payload (empty for other wire types).
    payload: std::ops::Range<usize>,
}

impl Printer<'_> {
    /// Prints the fields of the message `bytes` of type `desc` at `indent`.
    fn message(
        &mut self,
        desc: &MessageDescriptor,
        bytes: &[u8],
        indent: usize,
    ) -> Result<(), TextError> {
        let decode_error = |source| TextError::Decode {
            message: desc.full_name().to_owned(),
            source,
        };
        // A message no larger than the threshold has no field to stream (most messages, such
        // as every node): decode it whole without scanning it first. An encoding the scan
        // cannot split is decoded whole too, which reports what is wrong.
        let fields = if bytes.len() > self.threshold {
            scan_fields(bytes).unwrap_or_default()
        } else {
            Vec::new()
        };
        // Printing fields one by one would print every member of a oneof that the encoding
        // repeats, where decoding keeps the last: messages with oneofs are decoded whole.
        let has_oneof = desc.oneofs().any(|oneof| !oneof.is_synthetic());
        let threshold = self.threshold;
        let streamed = |number: u32| {
            desc.get_field(number).filter(|field| {
                let occurrences = fields.iter().filter(|f| f.number == number);
                // A singular message field given twice is a merge of both: decode it.
                let once = field.is_list() || occurrences.clone().count() == 1;
                !has_oneof
                    && once
                    && !field.is_map()
                    && matches!(field.kind(), Kind::Message(ref m) if m.full_name() != ANY_FULL_NAME)
                    && occurrences.map(|f| f.payload.len()).sum::<usize>() > threshold
            })
        };
        let mut numbers: Vec<u32> = fields.iter().map(|f| f.number).collect();
        numbers.sort_unstable();
        numbers.dedup();
        if numbers.iter().all(|&number| streamed(number).is_none()) {
            let msg = DynamicMessage::decode(desc.clone(), bytes).map_err(decode_error)?;
            print_fields(&mut self.out, &msg, indent);
            return self.maybe_flush();
        }
        // Fields print in number order; a streamed field element by element, any other field
        // by decoding a message holding only its occurrences.
        for number in numbers {
            match streamed(number) {
                Some(field) => {
                    let Kind::Message(element) = field.kind() else {
                        unreachable!("only message fields are streamed");
                    };
                    for raw in fields.iter().filter(|f| f.number == number) {
                        push_indent(&mut self.out, indent);
                        self.out.push_str(field.name());
                        self.out.push_str(" {\n");
                        self.message(&element, &bytes[raw.payload.clone()], indent + 2)?;
                        push_indent(&mut self.out, indent);
                        self.out.push_str("}\n");
                    }
                }
                None => {
                    let mut only: Vec<u8> = Vec::new();
                    for raw in fields.iter().filter(|f| f.number == number) {
                        only.extend_from_slice(&bytes[raw.whole.clone()]);
                    }
                    let msg = DynamicMessage::decode(desc.clone(), only.as_slice())
                        .map_err(decode_error)?;
                    print_fields(&mut self.out, &msg, indent);
                }
            }
            self.maybe_flush()?;
        }
        Ok(())
    }

    fn maybe_flush(&mut self) -> Result<(), TextError> {
        if self.out.len() >= TEXT_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TextError> {
        (self.sink)(&self.out).map_err(|source| TextError::Sink { source })?;
        self.out.clear();
        Ok(())
    }
}

/// Splits an encoded message into its field occurrences, in order; `None` if the encoding is
/// invalid or uses groups.
fn scan_fields(bytes: &[u8]) -> Option<Vec<RawField>> {
    use prost::encoding::{WireType, decode_key, decode_varint};
    let mut fields = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let start = bytes.len() - rest.len();
        let (number, wire_type) = decode_key(&mut rest).ok()?;
        let mut payload = 0..0;
        match wire_type {
            WireType::Varint => {
                decode_varint(&mut rest).ok()?;
            }
            WireType::SixtyFourBit => rest = rest.get(8..)?,
            WireType::ThirtyTwoBit => rest = rest.get(4..)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
                let at = bytes.len() - rest.len();
                rest = rest.get(len..)?;
                payload = at..at + len;
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        }
        fields.push(RawField {
            number,
            whole: start..bytes.len() - rest.len(),
            payload,
        });
    }
    Some(fields)
}

/// Parses text format for the message type `full_name` and returns its binary encoding.
pub fn from_text_dyn(full_name: &str, text: &str) -> Result<Vec<u8>, TextError> {
    let desc = message_descriptor(full_name)?;
    check_nesting(full_name, text)?;
    let msg = DynamicMessage::parse_text_format(desc, text).map_err(|err| {
        let offset = err
            .labels()
            .and_then(|mut labels| labels.next())
            .map_or(0, |label| label.offset());
        let (line, column) = line_column(text, offset);
        TextError::Parse {
            message: full_name.to_owned(),
            line,
            column,
            reason: err.to_string(),
        }
    })?;
    Ok(msg.encode_to_vec())
}

/// Formats a 32-bit float field value as Python's text_format does: the shortest `%g` form
/// (from 6 significant digits up) that rounds back to the same `f32`, printed with `repr`.
pub fn format_f32(value: f32) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let wide = f64::from(value);
    for precision in 6..=17 {
        let rounded: f64 = format!("{:.*e}", precision - 1, wide)
            .parse()
            .expect("Rust's own exponent formatting parses as f64");
        if rounded as f32 == value {
            return format_f64(rounded);
        }
    }
    format_f64(wide)
}

/// Formats a 64-bit float as Python's `repr(float)`: shortest round-trip digits, positional
/// for exponents from -5 to 15 (with `.0` when integral), scientific (`1e-05`, `1e+20`)
/// otherwise, and `inf`, `-inf`, `nan`.
pub fn format_f64(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let sci = format!("{value:e}");
    let (mantissa, exponent) = sci
        .split_once('e')
        .expect("Rust's `{:e}` output always has an exponent");
    let exponent: i32 = exponent
        .parse()
        .expect("Rust's `{:e}` exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let body = if (-5 < exponent) && (exponent < 16) {
        positional(&digits, exponent)
    } else {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{first}{fraction}e{exp_sign}{:02}", exponent.abs())
    };
    format!("{sign}{body}")
}

/// Escapes bytes as Python's `text_encoding.CEscape(.., as_utf8=False)`.
pub fn c_escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        match byte {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'"' => out.push_str("\\\""),
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\{byte:03o}")),
        }
    }
    out
}

/// Looks up a message type in the pool.
fn message_descriptor(full_name: &str) -> Result<MessageDescriptor, TextError> {
    descriptor_pool()
        .get_message_by_name(full_name)
        .ok_or_else(|| TextError::UnknownMessage {
            name: full_name.to_owned(),
        })
}

/// Rejects text nested deeper than [`MAX_NESTING`] before the (recursive) parser sees it, so
/// hostile input cannot overflow the stack. Quoted strings and `#` comments are skipped.
fn check_nesting(full_name: &str, text: &str) -> Result<(), TextError> {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    let mut in_comment = false;
    for (offset, byte) in text.bytes().enumerate() {
        if in_comment {
            in_comment = byte != b'\n';
        } else if let Some(open) = quote {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == open || byte == b'\n' {
                quote = None;
            }
        } else {
            match byte {
                b'"' | b'\'' => quote = Some(byte),
                b'#' => in_comment = true,
                b'{' | b'<' | b'[' => depth += 1,
                b'}' | b'>' | b']' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_NESTING {
                let (line, column) = line_column(text, offset);
                return Err(TextError::Parse {
                    message: full_name.to_owned(),
                    line,
                    column,
                    reason: format!("nesting deeper than {MAX_NESTING} levels"),
                });
            }
        }
    }
    Ok(())
}

/// Converts a byte offset into one-based line and column numbers.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |pos| pos + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Writes `digits × 10^exponent` (first digit before the point) positionally.
fn positional(digits: &str, exponent: i32) -> String {
    if exponent < 0 {
        let zeros = "0".repeat((-exponent - 1) as usize);
        return format!("0.{zeros}{digits}");
    }
    let int_len = exponent as usize + 1;
    if digits.len() <= int_len {
        let zeros = "0".repeat(int_len - digits.len());
        format!("{digits}{zeros}.0")
    } else {
        let (int_part, fraction) = digits.split_at(int_len);
        format!("{int_part}.{fraction}")
    }
}

/// Writes every set field of `msg` at `indent` spaces, in field-number order.
fn print_fields(out: &mut String, msg: &DynamicMessage, indent: usize) {
    let mut fields: Vec<FieldDescriptor> = msg.descriptor().fields().collect();
    fields.sort_by_key(FieldDescriptor::number);
    for field in fields {
        if !msg.has_field(&field) {
            continue;
        }
        match msg.get_field(&field).as_ref() {
            Value::List(items) => {
                for item in items {
                    print_field(out, &field, item, indent);
                }
            }
            Value::Map(map) => {
                let mut entries: Vec<(&MapKey, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    print_map_entry(out, &field, key, value, indent);
                }
            }
            value => print_field(out, &field, value, indent),
        }
    }
}

/// Writes one `name: value` line or one `name { … }` block.
fn print_field(out: &mut String, field: &FieldDescriptor, value: &Value, indent: usize) {
    push_indent(out, indent);
    out.push_str(field.name());
    if let Value::Message(inner) = value {
        print_block_body(out, inner, indent);
    } else {
        out.push_str(": ");
        out.push_str(&scalar_text(&field.kind(), value));
        out.push('\n');
    }
}

/// Writes one entry of a map field as Python does: a message with `key` and `value`, where a
/// default scalar key or value is left out but a message value is always printed.
fn print_map_entry(
    out: &mut String,
    field: &FieldDescriptor,
    key: &MapKey,
    value: &Value,
    indent: usize,
) {
    push_indent(out, indent);
    out.push_str(field.name());
    out.push_str(" {\n");
    if let Kind::Message(entry) = field.kind() {
        let key_field = entry.map_entry_key_field();
        let value_field = entry.map_entry_value_field();
        let key_value = Value::from(key.clone());
        if !key_value.is_default_for_field(&key_field) {
            print_field(out, &key_field, &key_value, indent + 2);
        }
        if value_field.kind().as_message().is_some() || !value.is_default_for_field(&value_field) {
            print_field(out, &value_field, value, indent + 2);
        }
    }
    push_indent(out, indent);
    out.push_str("}\n");
}

/// Writes ` {`, the fields of `inner` (or an expanded `Any`) and the closing `}`.
fn print_block_body(out: &mut String, inner: &DynamicMessage, indent: usize) {
    out.push_str(" {\n");
    if !print_expanded_any(out, inner, indent + 2) {
        print_fields(out, inner, indent + 2);
    }
    push_indent(out, indent);
    out.push_str("}\n");
}

/// Writes an `Any` as `[type_url] { … }` when its type is in the pool, as Python does.
fn print_expanded_any(out: &mut String, msg: &DynamicMessage, indent: usize) -> bool {
    if msg.descriptor().full_name() != ANY_FULL_NAME {
        return false;
    }
    let Ok(any) = msg.transcode_to::<prost_types::Any>() else {
        return false;
    };
    let Some((_, type_name)) = any.type_url.rsplit_once('/') else {
        return false;
    };
    let Some(desc) = descriptor_pool().get_message_by_name(type_name) else {
        return false;
    };
    let Ok(packed) = DynamicMessage::decode(desc, any.value.as_slice()) else {
        return false;
    };
    push_indent(out, indent);
    out.push('[');
    out.push_str(&any.type_url);
    out.push(']');
    print_block_body(out, &packed, indent);
    true
}

/// Formats a non-message value as Python's text_format does.
fn scalar_text(kind: &Kind, value: &Value) -> String {
    match value {
        Value::Bool(b) => b.to_string(),
        Value::I32(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::U32(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::F32(x) => format_f32(*x),
        Value::F64(x) => format_f64(*x),
        Value::String(s) => format!("\"{}\"", c_escape(s.as_bytes())),
        Value::Bytes(b) => format!("\"{}\"", c_escape(b)),
        Value::EnumNumber(number) => match kind {
            Kind::Enum(desc) => desc
                .get_value(*number)
                .map_or_else(|| number.to_string(), |v| v.name().to_owned()),
            _ => number.to_string(),
        },
        Value::Message(_) | Value::List(_) | Value::Map(_) => String::new(),
    }
}

/// Appends `indent` spaces.
fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_text(full_name: &str, bytes: &[u8], threshold: usize) -> String {
        let mut out = String::new();
        let mut sink = |chunk: &str| {
            out.push_str(chunk);
            Ok(())
        };
        write_text_split(full_name, bytes, &mut sink, threshold).unwrap();
        out
    }

    /// Printing element by element gives the same text as decoding the whole message, for
    /// every message of the reference fixtures with every repeated message field split, and
    /// for a GraphDef large enough that the default threshold splits it.
    #[test]
    fn streamed_text_equals_whole_text() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tf-2.21");
        let cases = [
            ("graph/g3_two_tasks/graph.pbtxt", "tensorflow.GraphDef"),
            ("graph/g5_sliced/flat_graph.pbtxt", "tensorflow.GraphDef"),
            (
                "graph/g7_eager_traced/traced_save.function_def.pbtxt",
                "tensorflow.FunctionDef",
            ),
            (
                "graph/g8_meta_graph/meta_graph.pbtxt",
                "tensorflow.MetaGraphDef",
            ),
            ("meta/op_defs.pbtxt", "tensorflow.OpList"),
        ];
        for (file, full_name) in cases {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let bytes = from_text_dyn(full_name, &text).unwrap();
            let whole = split_text(full_name, &bytes, usize::MAX);
            assert_eq!(whole, text, "{file}: the whole-message printer");
            assert_eq!(
                split_text(full_name, &bytes, 0),
                whole,
                "{file}: split everywhere"
            );
        }
        // 2,000 copies of g3's nodes: well past the default threshold and several chunks.
        let text =
            std::fs::read_to_string(root.join("graph/g3_two_tasks/flat_graph.pbtxt")).unwrap();
        let graph: crate::tensorflow::GraphDef = from_text(&text).unwrap();
        let mut big = graph.clone();
        for _ in 0..2_000 {
            big.node.extend(graph.node.iter().cloned());
        }
        let bytes = big.encode_to_vec();
        let mut chunks = 0;
        let mut streamed = String::new();
        let mut sink = |chunk: &str| {
            chunks += 1;
            streamed.push_str(chunk);
            Ok(())
        };
        write_text_dyn("tensorflow.GraphDef", &bytes, &mut sink).unwrap();
        assert!(chunks > 1, "the text comes in pieces");
        assert_eq!(
            streamed,
            split_text("tensorflow.GraphDef", &bytes, usize::MAX)
        );
    }

    /// A bad encoding is reported as such, whether the message is printed whole or split.
    #[test]
    fn bad_encodings_are_decode_errors() {
        let graph = crate::tensorflow::GraphDef {
            node: vec![
                crate::tensorflow::NodeDef {
                    name: "n".repeat(100),
                    ..Default::default()
                };
                10
            ],
            ..Default::default()
        };
        let mut bytes = graph.encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        for threshold in [0, usize::MAX] {
            let mut sink = |_: &str| Ok(());
            let err =
                write_text_split("tensorflow.GraphDef", &bytes, &mut sink, threshold).unwrap_err();
            assert!(
                matches!(&err, TextError::Decode { message, .. } if message.ends_with("NodeDef") || message.ends_with("GraphDef")),
                "{threshold}: {err:?}"
            );
        }
    }

    /// A failing sink stops the printing with its error.
    #[test]
    fn sink_errors_are_reported() {
        let graph = crate::tensorflow::GraphDef {
            node: vec![crate::tensorflow::NodeDef::default(); 1],
            ..Default::default()
        };
        let mut sink = |_: &str| Err(std::io::Error::other("disk full"));
        let err =
            write_text_dyn("tensorflow.GraphDef", &graph.encode_to_vec(), &mut sink).unwrap_err();
        assert!(matches!(err, TextError::Sink { .. }), "{err:?}");
    }

    /// Expected strings are what Python 3 prints for `ToShortestFloat(x)` of these `f32`s.
    #[test]
    fn f32_matches_python_shortest_float() {
        let cases: &[(f32, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (0.3, "0.3"),
            (10000.0, "10000.0"),
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (2.5e-5, "2.5e-05"),
            (7e-10, "7e-10"),
            (1.0 / 3.0, "0.33333334"),
            (123456.79, "123456.79"),
            (std::f32::consts::PI, "3.1415927"),
            (16777216.0, "16777216.0"),
            (12345678.0, "12345678.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (f32::MAX, "3.4028235e+38"),
            (f32::MIN_POSITIVE, "1.1754944e-38"),
            (1e-45, "1.4013e-45"),
            (f32::INFINITY, "inf"),
            (f32::NEG_INFINITY, "-inf"),
            (f32::NAN, "nan"),
        ];
        for &(value, expected) in cases {
            assert_eq!(format_f32(value), expected, "f32 {value:e}");
        }
    }

    /// Expected strings are Python 3's `repr(x)`.
    #[test]
    fn f64_matches_python_repr() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (1e-5, "1e-05"),
            (1e-4, "0.0001"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1e20, "1e+20"),
            (1e22, "1e+22"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (1795219507.4775453, "1795219507.4775453"),
            (-2.5, "-2.5"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for &(value, expected) in cases {
            assert_eq!(format_f64(value), expected, "f64 {value:e}");
        }
    }

    #[test]
    fn c_escape_matches_python_cescape() {
        assert_eq!(c_escape(b"plain/text_0-9"), "plain/text_0-9");
        assert_eq!(c_escape(b"a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(c_escape(b"\"'\\"), "\\\"\\'\\\\");
        assert_eq!(
            c_escape(&[0, 1, 0x1f, 0x7f, 0x80, 0xff]),
            "\\000\\001\\037\\177\\200\\377"
        );
        assert_eq!(c_escape("é".as_bytes()), "\\303\\251");
        assert_eq!(c_escape(b" ~"), " ~");
    }

    #[test]
    fn line_column_counts_from_one() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("ab\ncd", 99), (2, 3));
    }
}
