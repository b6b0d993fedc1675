//! Reading and writing TensorFlow protobuf files: `.pb` (binary) or `.pbtxt` (text format),
//! holding a `GraphDef`, `MetaGraphDef`, `FunctionDef` or `SaverDef`, told apart by content.

use std::fmt;
use std::path::{Path, PathBuf};

use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_reflect::{Kind, MessageDescriptor};
use saveplan_ir::{Function, Library, Module, SaverDef};
use saveplan_proto::TextError;
use saveplan_proto::tensorflow as pb;

use super::function::{function_def, import_function_def};
use super::graph_def::{graph_def, import_graph_def};
use super::meta_graph::{MetaGraph, import_meta_graph_def, meta_graph_def};
use super::saver_def::{import_saver_def, saver_def};
use super::wire;
use super::{ExportError, ImportError};

/// The extension of a binary MetaGraphDef as `tf.compat.v1.train.Saver` writes it (`model.meta`).
const META_EXTENSION: &str = "meta";

/// How a file is encoded, from its extension.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Encoding {
    /// Binary protobuf (`.pb`).
    Binary,
    /// Protobuf text format as TensorFlow prints it (`.pbtxt`).
    Text,
}

/// Which message a file holds.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MessageKind {
    /// `tensorflow.GraphDef`.
    GraphDef,
    /// `tensorflow.MetaGraphDef`.
    MetaGraphDef,
    /// `tensorflow.FunctionDef`.
    FunctionDef,
    /// `tensorflow.SaverDef`.
    SaverDef,
}

/// A decoded file, as protobuf.
#[derive(Clone, PartialEq, Debug)]
pub enum ProtoMessage {
    /// A graph.
    GraphDef(pb::GraphDef),
    /// A meta graph.
    MetaGraphDef(Box<pb::MetaGraphDef>),
    /// A single function.
    FunctionDef(pb::FunctionDef),
    /// A saver description.
    SaverDef(pb::SaverDef),
}

/// A decoded file, imported into IR.
#[derive(Clone, Debug)]
pub enum Loaded {
    /// A `GraphDef`.
    Graph(Module),
    /// A `MetaGraphDef`.
    MetaGraph(MetaGraph),
    /// A `FunctionDef`.
    Function(Function),
    /// A `SaverDef`, which has no graph, as plain data (every field kept).
    Saver(SaverDef),
}

impl Loaded {
    /// The module this file holds: a GraphDef's or MetaGraphDef's graph, or a lone
    /// FunctionDef as the library of an otherwise empty module; `None` for a SaverDef.
    pub fn into_module(self) -> Option<Module> {
        match self {
            Loaded::Graph(module) => Some(module),
            Loaded::MetaGraph(meta_graph) => Some(meta_graph.module),
            Loaded::Function(function) => Some(Module {
                library: Library {
                    functions: vec![function],
                    ..Library::default()
                },
                ..Module::default()
            }),
            Loaded::Saver(_) => None,
        }
    }
}

/// Errors from reading or writing graph files. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{}: cannot read file", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("{}: cannot write file", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The extension is neither `.pb` nor `.pbtxt`.
    #[error("{}: unknown extension (expected .pb or .pbtxt)", path.display())]
    UnknownExtension {
        /// The file.
        path: PathBuf,
    },
    /// A `.pbtxt` file that is not UTF-8.
    #[error("{}: text format file is not valid UTF-8", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// A `.pb` file that decodes as none of the supported messages.
    #[error(
        "{}: not a GraphDef, MetaGraphDef, FunctionDef or SaverDef in binary protobuf format (corrupt, truncated or another message)",
        path.display()
    )]
    UnrecognizedBinary {
        /// The file.
        path: PathBuf,
    },
    /// A `.pbtxt` file that parses as none of the supported messages.
    #[error(
        "{}: not a GraphDef, MetaGraphDef, FunctionDef or SaverDef in text format",
        path.display()
    )]
    UnrecognizedText {
        /// The file.
        path: PathBuf,
        /// The parse error of the message type that got furthest.
        #[source]
        source: TextError,
    },
    /// The message decoded but does not import into IR.
    #[error("{}: invalid {kind}", path.display())]
    Import {
        /// The file.
        path: PathBuf,
        /// The message kind.
        kind: MessageKind,
        /// What is wrong.
        #[source]
        source: ImportError,
    },
    /// An encoded message could not be printed as text.
    #[error("{}: cannot print {kind} as text", path.display())]
    Print {
        /// The file.
        path: PathBuf,
        /// The message kind.
        kind: MessageKind,
        /// What is wrong.
        #[source]
        source: TextError,
    },
    /// The IR does not export.
    #[error("{}: cannot export {kind}", path.display())]
    Export {
        /// The file.
        path: PathBuf,
        /// The message kind.
        kind: MessageKind,
        /// What is wrong.
        #[source]
        source: ExportError,
    },
}

/// Reads a `.pb` or `.pbtxt` file and imports it into IR.
///
/// A binary `GraphDef` or `MetaGraphDef` is imported straight from its bytes (see
/// `wire.rs`), with the same result as decoding it and importing the message.
pub fn read_graph_file(path: &Path) -> Result<Loaded, FileError> {
    let (encoding, bytes) = read_file(path)?;
    if encoding == Encoding::Binary
        && let Some(loaded) = import_binary(&bytes, is_meta_file(path))
    {
        return Ok(loaded);
    }
    let message = decode_file(path, encoding, &bytes)?;
    drop(bytes);
    message.import().map_err(|source| FileError::Import {
        path: path.to_owned(),
        kind: message.kind(),
        source,
    })
}

/// Exports `loaded` and writes it to a `.pb` or `.pbtxt` file, by extension.
pub fn write_graph_file(path: &Path, loaded: &Loaded) -> Result<(), FileError> {
    let message = loaded.export().map_err(|source| FileError::Export {
        path: path.to_owned(),
        kind: loaded.kind(),
        source,
    })?;
    write_proto_file(path, &message)
}

/// Writes the encoded message `bytes` of kind `kind` to a `.pb` file as it is, or to a
/// `.pbtxt` file printed a piece at a time, by extension.
///
/// With [`super::encode_graph_def`] or [`super::encode_meta_graph_def`] this writes a plan of
/// any size without building its protobuf messages (for 700,000 ops those take gigabytes).
pub fn write_encoded_file(path: &Path, kind: MessageKind, bytes: &[u8]) -> Result<(), FileError> {
    write_encoded_pieces(path, kind, &[bytes])
}

/// [`write_encoded_file`] of a message encoded in consecutive pieces (as
/// [`super::encode_meta_graph_def_pieces`] gives it): a `.pb` file gets the pieces one after
/// the other, never joined in memory; a `.pbtxt` file is printed from them joined.
pub fn write_encoded_pieces<P: AsRef<[u8]>>(
    path: &Path,
    kind: MessageKind,
    pieces: &[P],
) -> Result<(), FileError> {
    use std::io::Write as _;
    let encoding = Encoding::from_path(path).ok_or_else(|| FileError::UnknownExtension {
        path: path.to_owned(),
    })?;
    let write_error = |source| FileError::Write {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::create(path).map_err(write_error)?;
    if encoding == Encoding::Binary {
        // Small pieces are gathered; a piece larger than the buffer (a batch of nodes) goes
        // to the file from where it is, without a copy into the buffer.
        let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
        for piece in pieces {
            out.write_all(piece.as_ref()).map_err(write_error)?;
        }
        return out.flush().map_err(write_error);
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let joined;
    let bytes = match pieces {
        [piece] => piece.as_ref(),
        _ => {
            joined = pieces
                .iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .concat();
            &joined
        }
    };
    let mut sink = |chunk: &str| out.write_all(chunk.as_bytes());
    saveplan_proto::write_text_dyn(&format!("tensorflow.{}", kind.name()), bytes, &mut sink)
        .map_err(|source| match source {
            TextError::Sink { source } => write_error(source),
            source => FileError::Print {
                path: path.to_owned(),
                kind,
                source,
            },
        })?;
    out.flush().map_err(write_error)
}

/// Reads a `.pb` or `.pbtxt` file and tells which message it holds.
pub fn read_proto_file(path: &Path) -> Result<ProtoMessage, FileError> {
    let (encoding, bytes) = read_file(path)?;
    decode_file(path, encoding, &bytes)
}

/// The encoding of a `.pb` or `.pbtxt` file, by extension, and its bytes.
fn read_file(path: &Path) -> Result<(Encoding, FileBytes), FileError> {
    let encoding = Encoding::from_path(path).ok_or_else(|| FileError::UnknownExtension {
        path: path.to_owned(),
    })?;
    let read_error = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if metadata.len() == 0 || !metadata.is_file() {
        // Nothing to map (an empty file cannot be), or not a regular file (a pipe, …).
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(read_error)?;
        return Ok((encoding, FileBytes::Read(bytes)));
    }
    // SAFETY: the map is read-only and lives only while the file is decoded and imported;
    // as with any memory-mapped read, another program truncating the file in the meantime
    // would fault the process. Mapped, a large plan is neither copied nor held twice.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)?;
    Ok((encoding, FileBytes::Mapped(map)))
}

/// The bytes of a file: mapped, or read when it cannot be mapped.
enum FileBytes {
    /// A read-only map of a regular file.
    Mapped(memmap2::Mmap),
    /// The bytes read.
    Read(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(map) => map,
            FileBytes::Read(bytes) => bytes,
        }
    }
}

/// Whether `path` is a `.meta` file, a MetaGraphDef by name.
fn is_meta_file(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == META_EXTENSION)
}

/// Imports binary protobuf straight from its bytes when it is the `GraphDef` or
/// `MetaGraphDef` that [`ProtoMessage::decode_binary`] (or, for a `.meta` file, decoding a
/// `MetaGraphDef`) would take it for; `None` for anything else, or anything the direct
/// import leaves to the message path.
fn import_binary(bytes: &[u8], is_meta: bool) -> Option<Loaded> {
    if is_meta {
        return import_binary_direct(bytes, MessageKind::MetaGraphDef);
    }
    if has_only_known_fields::<pb::GraphDef>(bytes) {
        // If the direct import gives up, so may the decoder, which then tries the next kind.
        return import_binary_direct(bytes, MessageKind::GraphDef);
    }
    // The scan and the import it allows read the same bytes and nothing else: the import is
    // made while the scan runs (a tenth of a second for a 100,000-variable plan) on the other
    // core, and dropped if the scan finds a field the schema does not define. Not so for
    // the GraphDef scan above, which fails at the first field of a MetaGraphDef: an import
    // begun beside it would be waited for in vain.
    let (known, imported) = rayon::join(
        || has_only_known_fields::<pb::MetaGraphDef>(bytes),
        || import_binary_direct(bytes, MessageKind::MetaGraphDef),
    );
    imported.filter(|_| known)
}

/// Imports an encoded `GraphDef` or `MetaGraphDef` (`kind`) straight from its bytes, without
/// building its `NodeDef`s: names, op types, inputs and devices are read in place and only
/// attribute values are decoded, one at a time. The result equals decoding the message and
/// importing it ([`ProtoMessage::import`]).
///
/// `None` for another kind and for anything the direct import leaves to that path: a node
/// with `experimental_debug_info`, `experimental_type` or a field the schema does not define,
/// a field repeated inside an attribute entry, a `graph_def` given twice, bytes that do not
/// decode, or a graph that does not import (whose error the message path reports).
/// [`read_graph_file`] takes this path first.
pub fn import_binary_direct(bytes: &[u8], kind: MessageKind) -> Option<Loaded> {
    match kind {
        MessageKind::GraphDef => wire::import_graph_def_bytes(bytes).map(Loaded::Graph),
        MessageKind::MetaGraphDef => {
            wire::import_meta_graph_def_bytes(bytes).map(Loaded::MetaGraph)
        }
        MessageKind::FunctionDef | MessageKind::SaverDef => None,
    }
}

/// Whether `bytes` are wire format of message `M` with only fields its schema defines (see
/// [`only_known_fields`]).
fn has_only_known_fields<M: prost::Name>(bytes: &[u8]) -> bool {
    let pool = saveplan_proto::descriptor_pool();
    pool.get_message_by_name(&M::full_name())
        .is_some_and(|descriptor| only_known_fields(&descriptor, bytes, 0))
}

/// Decodes the bytes of the file `path` in `encoding`, telling which message they hold.
fn decode_file(path: &Path, encoding: Encoding, bytes: &[u8]) -> Result<ProtoMessage, FileError> {
    let is_meta = is_meta_file(path);
    match encoding {
        // A `.meta` file is a MetaGraphDef by name; TensorFlow's carry fields we do not model
        // (`collection_def`, `signature_def`, …), which decoding skips.
        Encoding::Binary if is_meta => pb::MetaGraphDef::decode(bytes)
            .map(|message| ProtoMessage::MetaGraphDef(Box::new(message)))
            .map_err(|_| FileError::UnrecognizedBinary {
                path: path.to_owned(),
            }),
        Encoding::Binary => {
            ProtoMessage::decode_binary(bytes).ok_or_else(|| FileError::UnrecognizedBinary {
                path: path.to_owned(),
            })
        }
        Encoding::Text => {
            let text = std::str::from_utf8(bytes).map_err(|_| FileError::NotUtf8 {
                path: path.to_owned(),
            })?;
            ProtoMessage::parse_text(text).map_err(|source| FileError::UnrecognizedText {
                path: path.to_owned(),
                source,
            })
        }
    }
}

/// Writes a message to a `.pb` or `.pbtxt` file, by extension.
pub fn write_proto_file(path: &Path, message: &ProtoMessage) -> Result<(), FileError> {
    let encoding = Encoding::from_path(path).ok_or_else(|| FileError::UnknownExtension {
        path: path.to_owned(),
    })?;
    let bytes = match encoding {
        Encoding::Binary => message.encode_binary(),
        Encoding::Text => message.to_text().into_bytes(),
    };
    std::fs::write(path, bytes).map_err(|source| FileError::Write {
        path: path.to_owned(),
        source,
    })
}

impl Encoding {
    /// The encoding for a file name: `.pb` and `.meta` (the binary MetaGraphDef
    /// `tf.compat.v1.train.Saver` writes) are binary, `.pbtxt` is text, anything else `None`.
    pub fn from_path(path: &Path) -> Option<Encoding> {
        match path.extension()?.to_str()? {
            "pb" | META_EXTENSION => Some(Encoding::Binary),
            "pbtxt" => Some(Encoding::Text),
            _ => None,
        }
    }
}

impl MessageKind {
    /// The protobuf message name without package (`GraphDef`, …).
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::GraphDef => "GraphDef",
            MessageKind::MetaGraphDef => "MetaGraphDef",
            MessageKind::FunctionDef => "FunctionDef",
            MessageKind::SaverDef => "SaverDef",
        }
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ProtoMessage {
    /// Which message this is.
    pub fn kind(&self) -> MessageKind {
        match self {
            ProtoMessage::GraphDef(_) => MessageKind::GraphDef,
            ProtoMessage::MetaGraphDef(_) => MessageKind::MetaGraphDef,
            ProtoMessage::FunctionDef(_) => MessageKind::FunctionDef,
            ProtoMessage::SaverDef(_) => MessageKind::SaverDef,
        }
    }

    /// Decodes binary protobuf, trying `GraphDef`, `MetaGraphDef`, `FunctionDef` and
    /// `SaverDef` in that order.
    ///
    /// The wire format does not say which message it holds, so a candidate is accepted only if
    /// it decodes without any field its schema does not define, at any depth: bytes of another
    /// message type almost always fail to decode or leave unknown fields behind. Empty input is
    /// an empty `GraphDef`.
    pub fn decode_binary(bytes: &[u8]) -> Option<ProtoMessage> {
        fn strict<M: Message + prost::Name + Default>(bytes: &[u8]) -> Option<M> {
            if !has_only_known_fields::<M>(bytes) {
                return None;
            }
            M::decode(bytes).ok()
        }
        strict(bytes)
            .map(ProtoMessage::GraphDef)
            .or_else(|| strict(bytes).map(|message| ProtoMessage::MetaGraphDef(Box::new(message))))
            .or_else(|| strict(bytes).map(ProtoMessage::FunctionDef))
            .or_else(|| strict(bytes).map(ProtoMessage::SaverDef))
    }

    /// Parses text format, trying `GraphDef`, `MetaGraphDef`, `FunctionDef` and `SaverDef` in
    /// that order (field names tell them apart). On failure returns the error of the message
    /// type whose parse got furthest into the text.
    pub fn parse_text(text: &str) -> Result<ProtoMessage, TextError> {
        let mut errors = Vec::new();
        match saveplan_proto::from_text(text) {
            Ok(message) => return Ok(ProtoMessage::GraphDef(message)),
            Err(err) => errors.push(err),
        }
        match saveplan_proto::from_text(text) {
            Ok(message) => return Ok(ProtoMessage::MetaGraphDef(Box::new(message))),
            Err(err) => errors.push(err),
        }
        match saveplan_proto::from_text(text) {
            Ok(message) => return Ok(ProtoMessage::FunctionDef(message)),
            Err(err) => errors.push(err),
        }
        match saveplan_proto::from_text(text) {
            Ok(message) => return Ok(ProtoMessage::SaverDef(message)),
            Err(err) => errors.push(err),
        }
        // The first error wins ties, so a file that is wrong everywhere reports as a GraphDef.
        let mut best = errors.remove(0);
        for err in errors {
            if text_error_position(&err) > text_error_position(&best) {
                best = err;
            }
        }
        Err(best)
    }

    /// The binary encoding (deterministic: maps are sorted).
    pub fn encode_binary(&self) -> Vec<u8> {
        match self {
            ProtoMessage::GraphDef(message) => message.encode_to_vec(),
            ProtoMessage::MetaGraphDef(message) => message.encode_to_vec(),
            ProtoMessage::FunctionDef(message) => message.encode_to_vec(),
            ProtoMessage::SaverDef(message) => message.encode_to_vec(),
        }
    }

    /// The text format, exactly as TensorFlow's Python prints it.
    pub fn to_text(&self) -> String {
        match self {
            ProtoMessage::GraphDef(message) => saveplan_proto::to_text(message),
            ProtoMessage::MetaGraphDef(message) => saveplan_proto::to_text(message.as_ref()),
            ProtoMessage::FunctionDef(message) => saveplan_proto::to_text(message),
            ProtoMessage::SaverDef(message) => saveplan_proto::to_text(message),
        }
    }

    /// Imports the message into IR.
    pub fn import(&self) -> Result<Loaded, ImportError> {
        Ok(match self {
            ProtoMessage::GraphDef(message) => Loaded::Graph(import_graph_def(message)?),
            ProtoMessage::MetaGraphDef(message) => {
                Loaded::MetaGraph(import_meta_graph_def(message)?)
            }
            ProtoMessage::FunctionDef(message) => Loaded::Function(import_function_def(message)?),
            ProtoMessage::SaverDef(message) => Loaded::Saver(import_saver_def(message)),
        })
    }
}

impl Loaded {
    /// Which message this came from.
    pub fn kind(&self) -> MessageKind {
        match self {
            Loaded::Graph(_) => MessageKind::GraphDef,
            Loaded::MetaGraph(_) => MessageKind::MetaGraphDef,
            Loaded::Function(_) => MessageKind::FunctionDef,
            Loaded::Saver(_) => MessageKind::SaverDef,
        }
    }

    /// Exports back to protobuf.
    pub fn export(&self) -> Result<ProtoMessage, ExportError> {
        Ok(match self {
            Loaded::Graph(module) => ProtoMessage::GraphDef(graph_def(module)?),
            Loaded::MetaGraph(meta_graph) => {
                ProtoMessage::MetaGraphDef(Box::new(meta_graph_def(meta_graph)?))
            }
            Loaded::Function(function) => ProtoMessage::FunctionDef(function_def(function)?),
            Loaded::Saver(saver) => ProtoMessage::SaverDef(saver_def(saver)),
        })
    }
}

/// How deep messages may nest (prost's own decoding limit).
const MAX_DEPTH: u32 = 100;

/// Whether `bytes` are well-formed wire format of `descriptor` in which every field, at any
/// depth, is one its schema defines, with a wire type that field can have. A single scan of
/// the bytes that builds nothing, so a 100 MB plan costs one pass, not a dynamic message tree.
fn only_known_fields(descriptor: &MessageDescriptor, bytes: &[u8], depth: u32) -> bool {
    Schema::of(descriptor).scan(0, bytes, depth)
}

/// What a field's wire type may be, from its schema.
#[derive(Copy, Clone, PartialEq, Eq)]
enum FieldKind {
    /// A varint scalar (integers, bools, enums).
    Varint,
    /// `double`, `fixed64`, `sfixed64`.
    Fixed64,
    /// `float`, `fixed32`, `sfixed32`.
    Fixed32,
    /// `string` or `bytes`.
    Bytes,
    /// A message: the index of its table in [`Schema::messages`].
    Message(usize),
}

/// A field of a [`Schema`] table.
#[derive(Copy, Clone)]
struct FieldClass {
    /// Its kind.
    kind: FieldKind,
    /// Whether it is repeated (a repeated scalar may come packed, length-delimited).
    list: bool,
}

/// The fields of every message reachable from a root, flattened into tables once, so the scan
/// costs a slice index per field instead of a descriptor lookup.
struct Schema {
    /// Per message, its fields by number (`None` where it has none).
    messages: Vec<Vec<Option<FieldClass>>>,
}

impl Schema {
    /// The tables of `root` (index 0) and every message its fields reach.
    fn of(root: &MessageDescriptor) -> Schema {
        // Messages by full name: every descriptor here comes from the same pool.
        let mut index: std::collections::HashMap<String, usize> =
            std::collections::HashMap::from([(root.full_name().to_owned(), 0)]);
        let mut pending = vec![(root.clone(), 0)];
        let mut messages = vec![Vec::new()];
        while let Some((message, at)) = pending.pop() {
            let mut fields: Vec<Option<FieldClass>> = Vec::new();
            for field in message.fields() {
                let kind = match field.kind() {
                    Kind::Int32
                    | Kind::Int64
                    | Kind::Uint32
                    | Kind::Uint64
                    | Kind::Sint32
                    | Kind::Sint64
                    | Kind::Bool
                    | Kind::Enum(_) => FieldKind::Varint,
                    Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => FieldKind::Fixed64,
                    Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => FieldKind::Fixed32,
                    Kind::String | Kind::Bytes => FieldKind::Bytes,
                    Kind::Message(inner) => {
                        let next = index.len();
                        let inner_at =
                            *index
                                .entry(inner.full_name().to_owned())
                                .or_insert_with(|| {
                                    pending.push((inner, next));
                                    messages.push(Vec::new());
                                    next
                                });
                        FieldKind::Message(inner_at)
                    }
                };
                let number = field.number() as usize;
                if fields.len() <= number {
                    fields.resize(number + 1, None);
                }
                fields[number] = Some(FieldClass {
                    kind,
                    list: field.is_list(),
                });
            }
            messages[at] = fields;
        }
        Schema { messages }
    }

    /// [`only_known_fields`] for message table `message`.
    fn scan(&self, message: usize, mut bytes: &[u8], depth: u32) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        let fields = &self.messages[message];
        while !bytes.is_empty() {
            let Ok((tag, wire_type)) = decode_key(&mut bytes) else {
                return false;
            };
            let Some(&Some(class)) = fields.get(tag as usize) else {
                return false;
            };
            let known = match wire_type {
                WireType::Varint => {
                    decode_varint(&mut bytes).is_ok() && class.kind == FieldKind::Varint
                }
                WireType::SixtyFourBit => skip(&mut bytes, 8) && class.kind == FieldKind::Fixed64,
                WireType::ThirtyTwoBit => skip(&mut bytes, 4) && class.kind == FieldKind::Fixed32,
                WireType::LengthDelimited => {
                    let Some(inner) = decode_varint(&mut bytes)
                        .ok()
                        .and_then(|len| usize::try_from(len).ok())
                        .and_then(|len| bytes.split_at_checked(len))
                        .map(|(inner, rest)| {
                            bytes = rest;
                            inner
                        })
                    else {
                        return false;
                    };
                    match class.kind {
                        FieldKind::Message(inner_message) => {
                            self.scan(inner_message, inner, depth + 1)
                        }
                        FieldKind::Bytes => true,
                        // A packed repeated scalar.
                        FieldKind::Varint | FieldKind::Fixed64 | FieldKind::Fixed32 => class.list,
                    }
                }
                WireType::StartGroup | WireType::EndGroup => false,
            };
            if !known {
                return false;
            }
        }
        true
    }
}
/// Advances `bytes` past `n` bytes; false if fewer are left.
fn skip(bytes: &mut &[u8], n: usize) -> bool {
    match bytes.split_at_checked(n) {
        Some((_, rest)) => {
            *bytes = rest;
            true
        }
        None => false,
    }
}

/// Where a parse error happened, for picking the most plausible message type.
fn text_error_position(err: &TextError) -> (usize, usize) {
    match err {
        TextError::Parse { line, column, .. } => (*line, *column),
        _ => (0, 0),
    }
}
