//! The direct import of a binary `GraphDef` or `MetaGraphDef`: nodes are read straight from
//! the file's bytes (names, op types, inputs and devices borrowed from them, attribute values
//! decoded one at a time), so a plan of 700,000 nodes never becomes 700,000 `NodeDef`s with
//! their attribute maps, whose allocation (and the kernel zeroing the pages it touches) was
//! most of the time `check`, `graph show` and `run` spent reading a large plan.
//!
//! It builds exactly what decoding the whole message and [`super::import_graph_def`] build.
//! Anything it does not handle itself (a `NodeDef` field other than name, op, input, device
//! and attr, a repeated field inside an attribute entry, a `graph_def` given twice, invalid
//! UTF-8, a node that does not import) makes it answer `None`: the caller then takes the
//! message path, which also reports any error exactly as before.

use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};
use rayon::prelude::*;
use saveplan_ir::attr::AttrName;
use saveplan_ir::device::DeviceSpec;
use saveplan_ir::signature;
use saveplan_ir::{AttrValue, Attrs, Graph, Module, Op, OpId};
use saveplan_proto::tensorflow as pb;

use super::attr::import_attr;
use super::graph_def::module_of;
use super::meta_graph::{MetaGraph, meta_graph_of};
use super::node::{InputResolver, Syntax, connect_inputs, has_control};

/// Nodes parsed in parallel before they join the graph in order: bounds what is held at once.
const NODES_PER_CHUNK: usize = 1 << 14;

/// `GraphDef.node`.
const NODE: u32 = 1;
/// `MetaGraphDef.graph_def`.
const GRAPH_DEF: u32 = 2;

/// Imports an encoded `GraphDef`, or `None` (see the module header).
pub(crate) fn import_graph_def_bytes(bytes: &[u8]) -> Option<Module> {
    let mut nodes = Vec::new();
    let mut rest = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        let field = next_field(&mut input)?;
        if field.number == NODE {
            nodes.push(field.payload()?);
        } else {
            rest.extend_from_slice(field.raw);
        }
    }
    let graph = import_nodes_bytes(&nodes)?;
    // Everything but the nodes (versions, library, debug info) is small: decoded as ever.
    let rest = pb::GraphDef::decode(rest.as_slice()).ok()?;
    module_of(graph, &rest).ok()
}

/// Imports an encoded `MetaGraphDef`, or `None` (see the module header).
pub(crate) fn import_meta_graph_def_bytes(bytes: &[u8]) -> Option<MetaGraph> {
    let mut graph_def = None;
    let mut rest = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        let field = next_field(&mut input)?;
        if field.number == GRAPH_DEF {
            // A message field given twice is merged by a decoder: left to the message path.
            if graph_def.is_some() {
                return None;
            }
            graph_def = Some(field.payload()?);
        } else {
            rest.extend_from_slice(field.raw);
        }
    }
    // Everything but the graph (the collections hold a `VariableDef` per variable) is
    // decoded beside it, on a core the graph's import leaves idle while it links its ops.
    let graph_def = graph_def?;
    let (module, rest) = rayon::join(
        || import_graph_def_bytes(graph_def),
        || pb::MetaGraphDef::decode(rest.as_slice()).ok(),
    );
    Some(meta_graph_of(module?, rest?))
}

/// Adds the encoded `NodeDef`s to a new graph in order, then connects their inputs.
fn import_nodes_bytes(nodes: &[&[u8]]) -> Option<Graph> {
    let mut graph = Graph::new();
    graph.reserve(nodes.len(), 0);
    let mut placed: Vec<(OpId, &str, &[u8])> = Vec::with_capacity(nodes.len());
    let mut n_inputs = 0;
    // Chunk by chunk, the next chunk is parsed while the nodes of this one join the graph,
    // into one of two buffers used in turn (fresh memory for every chunk costs more than the
    // parsing).
    let mut chunks = nodes.chunks(NODES_PER_CHUNK);
    let (mut parsed, mut next_parsed) = (Vec::new(), Vec::new());
    parse_chunk(chunks.next().unwrap_or_default(), &mut parsed);
    loop {
        let next = chunks.next();
        let (added, ()) = rayon::join(
            || -> Option<()> {
                for node in parsed.drain(..) {
                    let node = node?;
                    n_inputs += node.n_inputs;
                    let id = graph
                        .add_op(node.name, node.op, node.device, node.attrs)
                        .ok()?;
                    placed.push((id, node.name, node.bytes));
                }
                Some(())
            },
            || {
                if let Some(next) = next {
                    parse_chunk(next, &mut next_parsed);
                }
            },
        );
        added?;
        if next.is_none() {
            break;
        }
        std::mem::swap(&mut parsed, &mut next_parsed);
    }
    graph.reserve(0, n_inputs);
    let mut resolver = InputResolver::default();
    for (id, name, bytes) in placed {
        let inputs = inputs(bytes);
        connect_inputs(
            &mut graph,
            &mut resolver,
            name,
            inputs,
            id,
            Syntax::GraphDef,
        )
        .ok()?;
    }
    Some(graph)
}

/// Parses encoded `NodeDef`s in parallel into `parsed`, in order; `None` for a node left to
/// the message path.
///
/// A node on its own (checked names, op, device, attributes) does not depend on the others;
/// each thread remembers the last device string it checked (a plan repeats a handful).
fn parse_chunk<'a>(chunk: &[&'a [u8]], parsed: &mut Vec<Option<WireNode<'a>>>) {
    chunk
        .par_iter()
        .with_min_len(1024)
        .map_init(|| None, |checked, bytes| parse_node(bytes, checked))
        .collect_into_vec(parsed);
}

/// A `NodeDef` read from its bytes, before it joins a graph.
struct WireNode<'a> {
    /// `name`.
    name: &'a str,
    /// `op`, converted.
    op: Op,
    /// `device`.
    device: &'a str,
    /// `attr`, converted.
    attrs: Attrs,
    /// How many `input` strings it has.
    n_inputs: usize,
    /// The encoded `NodeDef`, read again for its inputs once every node is in the graph.
    bytes: &'a [u8],
}

/// Reads an encoded `NodeDef` and checks it as the message path does; `checked` is the last
/// device string that parsed.
fn parse_node<'a>(bytes: &'a [u8], checked: &mut Option<&'a str>) -> Option<WireNode<'a>> {
    let (mut name, mut op_type, mut device) = ("", "", "");
    let mut n_inputs = 0;
    let mut attrs: Vec<(&str, AttrValue)> = Vec::new();
    let mut input = bytes;
    while !input.is_empty() {
        let field = next_field(&mut input)?;
        let payload = field.payload()?;
        match field.number {
            1 => name = text(payload)?,
            2 => op_type = text(payload)?,
            3 => {
                if has_control(text(payload)?) {
                    return None;
                }
                n_inputs += 1;
            }
            4 => device = text(payload)?,
            5 => attrs.push(parse_attr(payload)?),
            // `experimental_debug_info`, `experimental_type` (rare, merged when repeated)
            // and fields the schema does not define: the message path.
            _ => return None,
        }
    }
    if has_control(name) || has_control(op_type) {
        return None;
    }
    let op = Op::from_type_name(op_type);
    // The names the op's signature knows are shared, not copied for every node.
    let signature = signature::signature(op_type);
    let attr_name = |name: &str| match signature.and_then(|signature| signature.attr(name)) {
        Some(known) => AttrName::Borrowed(known.name),
        None => AttrName::Owned(name.to_owned()),
    };
    if !matches!(op, Op::Other(_)) && *checked != Some(device) {
        DeviceSpec::parse(device).ok()?;
        *checked = Some(device);
    }
    Some(WireNode {
        name,
        op,
        device,
        // A repeated name keeps the last value, as the decoded map does.
        attrs: attrs
            .into_iter()
            .map(|(name, value)| (attr_name(name), value))
            .collect(),
        n_inputs,
        bytes,
    })
}

/// One entry of `NodeDef.attr`: the key (1) and the `AttrValue` (2), each at most once.
fn parse_attr(entry: &[u8]) -> Option<(&str, AttrValue)> {
    let (mut key, mut value) = (None, None);
    let mut input = entry;
    while !input.is_empty() {
        let field = next_field(&mut input)?;
        let payload = field.payload()?;
        let slot = match field.number {
            1 => &mut key,
            2 => &mut value,
            _ => return None,
        };
        if slot.replace(payload).is_some() {
            return None;
        }
    }
    let key = text(key.unwrap_or_default())?;
    if has_control(key) {
        return None;
    }
    let value = pb::AttrValue::decode(value.unwrap_or_default()).ok()?;
    Some((key, import_attr(&value).ok()?))
}

/// The `input` strings of an encoded `NodeDef` that [`parse_node`] accepted.
fn inputs(bytes: &[u8]) -> impl Iterator<Item = &str> {
    let mut input = bytes;
    std::iter::from_fn(move || {
        while !input.is_empty() {
            let field = next_field(&mut input)?;
            if field.number == 3 {
                return text(field.payload()?);
            }
        }
        None
    })
}

/// A `string` field's text; `None` if it is not UTF-8 (a decoder refuses it).
fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// One field as it is on the wire.
pub(super) struct RawField<'a> {
    /// The field number.
    pub(super) number: u32,
    /// The key and the value, as they are.
    raw: &'a [u8],
    /// The value of a length-delimited field (`None` for any other wire type).
    payload: Option<&'a [u8]>,
}

impl<'a> RawField<'a> {
    /// The value of a length-delimited field; `None` for another wire type.
    pub(super) fn payload(&self) -> Option<&'a [u8]> {
        self.payload
    }
}

/// Reads the next field of `input` and advances past it; `None` if it is malformed or a group.
pub(super) fn next_field<'a>(input: &mut &'a [u8]) -> Option<RawField<'a>> {
    let start = *input;
    let (number, wire_type) = decode_key(input).ok()?;
    let mut payload = None;
    match wire_type {
        WireType::Varint => {
            decode_varint(input).ok()?;
        }
        WireType::SixtyFourBit => *input = input.get(8..)?,
        WireType::ThirtyTwoBit => *input = input.get(4..)?,
        WireType::LengthDelimited => {
            let len = usize::try_from(decode_varint(input).ok()?).ok()?;
            let (value, rest) = input.split_at_checked(len)?;
            payload = Some(value);
            *input = rest;
        }
        WireType::StartGroup | WireType::EndGroup => return None,
    }
    let used = start.len() - input.len();
    Some(RawField {
        number,
        raw: &start[..used],
        payload,
    })
}
