//! The node-level conversion shared by `GraphDef`s and function bodies: `NodeDef` ↔ op,
//! input strings (`node`, `node:1`, `node:arg:1`, `arg`, `^node`) ↔ edges, and the streaming
//! encoder of one `NodeDef`.

use std::mem::Discriminant;

use prost::Message;
use rustc_hash::FxHashMap;
use saveplan_ir::device::DeviceSpec;
use saveplan_ir::signature::{self, SignatureError, attr_len};
use saveplan_ir::{Attrs, Graph, NodeDebugInfo, Op, OpId, OutputRef, Port, Stride, TensorName};
use saveplan_proto::tensorflow as pb;

use super::attr::{encode_attr_value, export_attrs, import_attrs};
use super::{ExportError, ImportError};

/// Writes the fields of op `id`'s `NodeDef` as prost would encode them:
/// in tag order, empty strings and unset messages left out, attributes in name order.
/// `scratch` holds one attribute value at a time (a buffer kept across calls).
pub(crate) fn encode_node(
    graph: &Graph,
    id: OpId,
    syntax: Syntax,
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), ExportError> {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    let op = graph.op(id);
    let put_raw = |tag: u32, parts: &[&[u8]], buf: &mut Vec<u8>| {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(parts.iter().map(|p| p.len()).sum::<usize>() as u64, buf);
        for part in parts {
            buf.extend_from_slice(part);
        }
    };
    if !op.name.is_empty() {
        put_raw(1, &[op.name.as_bytes()], buf);
    }
    put_raw(2, &[op.op.type_name().as_bytes()], buf);
    let mut digits = itoa_buffer();
    for (expected, (slot, data)) in graph.inputs(id).into_iter().enumerate() {
        if slot as usize != expected {
            return Err(ExportError::MissingInputSlot {
                node: op.name.clone(),
                slot: expected as u32,
            });
        }
        let src = &graph.op(data.src).name;
        match (syntax, &data.output) {
            (Syntax::GraphDef, Port::Index(0)) => put_raw(3, &[src.as_bytes()], buf),
            (Syntax::GraphDef, Port::Index(index)) => {
                let index = write_u32(&mut digits, *index);
                put_raw(3, &[src.as_bytes(), b":", index], buf);
            }
            (_, output) => {
                let input = format_input(graph, id, data.src, output, syntax)?;
                put_raw(3, &[input.as_bytes()], buf);
            }
        }
    }
    for src in graph.control_inputs(id) {
        put_raw(3, &[b"^", graph.op(src).name.as_bytes()], buf);
    }
    if !op.device.is_empty() {
        put_raw(4, &[op.device.as_bytes()], buf);
    }
    for (name, value) in op.attrs.iter() {
        // A map entry: the key (1) unless empty, the value (2) unless it is the default.
        scratch.clear();
        let set = encode_attr_value(value, scratch);
        let field_len = |tag: u32, len: usize| key_len(tag) + encoded_len_varint(len as u64) + len;
        let name_len = if name.is_empty() {
            0
        } else {
            field_len(1, name.len())
        };
        let value_len = if set { field_len(2, scratch.len()) } else { 0 };
        encode_key(5, WireType::LengthDelimited, buf);
        encode_varint((name_len + value_len) as u64, buf);
        if !name.is_empty() {
            put_raw(1, &[name.as_bytes()], buf);
        }
        if set {
            put_raw(2, &[scratch], buf);
        }
    }
    if op.debug_info.is_some() || op.experimental_type.is_some() {
        // Rare (imported graphs only): let prost write these two fields.
        let mut rest = export_node(graph, id, syntax)?;
        rest.name.clear();
        rest.op.clear();
        rest.input.clear();
        rest.device.clear();
        rest.attr.clear();
        buf.extend(rest.encode_to_vec());
    }
    Ok(())
}

/// A buffer for [`write_u32`].
fn itoa_buffer() -> [u8; 10] {
    [0; 10]
}

/// Writes `value` in decimal into `buf`; returns the digits.
fn write_u32(buf: &mut [u8; 10], mut value: u32) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buf[start..]
}

/// How input strings are written: GraphDef nodes use flat output indices, function bodies
/// name the output argument and refer to function inputs by their bare names.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Syntax {
    /// `node`, `node:N`, `^node`.
    GraphDef,
    /// `node:arg:N`, `arg`, `^node`.
    FunctionBody,
}

/// Adds every node to `graph` (after any ops already there), then connects their inputs.
pub(crate) fn import_nodes(
    graph: &mut Graph,
    nodes: &[pb::NodeDef],
    syntax: Syntax,
) -> Result<(), ImportError> {
    use rayon::prelude::*;
    // What each node is on its own (checked names, op, device, attributes) does not depend
    // on the others: converted in parallel, then added in order, so the first error is the
    // one a sequential import meets.
    let converted: Vec<Result<Converted, ImportError>> = nodes
        .par_iter()
        .with_min_len(1024)
        .map(|node| convert_node(node, syntax))
        .collect();
    let n_inputs: usize = nodes.iter().map(|node| node.input.len()).sum();
    graph.reserve(nodes.len(), n_inputs);
    let ids = nodes
        .iter()
        .zip(converted)
        .map(|(node, converted)| import_node(graph, node, converted?))
        .collect::<Result<Vec<OpId>, _>>()?;
    let mut resolver = InputResolver::default();
    for (node, &id) in nodes.iter().zip(&ids) {
        connect_inputs(
            graph,
            &mut resolver,
            &node.name,
            node.input.iter().map(String::as_str),
            id,
            syntax,
        )?;
    }
    Ok(())
}

/// Converts every op of `graph` (except `_Arg` ops of a function body) into a `NodeDef`.
pub(crate) fn export_nodes(graph: &Graph, syntax: Syntax) -> Result<Vec<pb::NodeDef>, ExportError> {
    graph
        .ops()
        .into_iter()
        .filter(|&id| !(syntax == Syntax::FunctionBody && graph.op(id).op == Op::Arg))
        .map(|id| export_node(graph, id, syntax))
        .collect()
}

/// Refuses a control character in what the node names (the node, its op type, inputs and
/// attribute names): TensorFlow does, and every error quoting them must stay on one line.
fn check_printable(node: &pb::NodeDef) -> Result<(), ImportError> {
    let bad = has_control;
    let refuse = |what: String, text: &str| ImportError::ControlCharacter {
        what,
        escaped: text.escape_debug().to_string(),
    };
    if bad(&node.name) {
        return Err(refuse("node name".to_owned(), &node.name));
    }
    let name = &node.name;
    if bad(&node.op) {
        return Err(refuse(format!("node `{name}`: op type"), &node.op));
    }
    if let Some(input) = node.input.iter().find(|input| bad(input)) {
        return Err(refuse(format!("node `{name}`: input"), input));
    }
    if let Some(attr) = node.attr.keys().find(|attr| bad(attr)) {
        return Err(refuse(format!("node `{name}`: attribute"), attr));
    }
    Ok(())
}

/// Whether `text` holds a control character, which no name, op type, input or attribute
/// name may.
pub(crate) fn has_control(text: &str) -> bool {
    if text.is_ascii() {
        text.bytes().any(|byte| byte.is_ascii_control())
    } else {
        text.chars().any(char::is_control)
    }
}

/// What a `NodeDef` converts to on its own, before it joins a graph.
struct Converted {
    op: Op,
    attrs: Attrs,
}

/// Checks a `NodeDef` and converts its op and attributes.
fn convert_node(node: &pb::NodeDef, syntax: Syntax) -> Result<Converted, ImportError> {
    check_printable(node)?;
    let op = Op::from_type_name(&node.op);
    if syntax == Syntax::FunctionBody && op == Op::Arg {
        return Err(ImportError::ArgNodeInBody {
            node: node.name.clone(),
        });
    }
    if !matches!(op, Op::Other(_)) {
        DeviceSpec::parse(&node.device).map_err(|source| ImportError::MalformedDevice {
            node: node.name.clone(),
            source: Box::new(source),
        })?;
    }
    let attrs =
        import_attrs(&node.attr).map_err(|(attr, source)| ImportError::UnsupportedTensor {
            node: node.name.clone(),
            attr,
            source,
        })?;
    Ok(Converted { op, attrs })
}

/// Adds a converted `NodeDef` to `graph` (its inputs are connected once every node is in).
fn import_node(
    graph: &mut Graph,
    node: &pb::NodeDef,
    Converted { op, attrs }: Converted,
) -> Result<OpId, ImportError> {
    let id = graph
        .add_op(node.name.clone(), op, &node.device, attrs)
        .map_err(|_| ImportError::DuplicateNode {
            node: node.name.clone(),
        })?;
    let mut op_mut = graph.op_mut(id);
    *op_mut.debug_info() = node.experimental_debug_info.as_ref().map(|info| {
        Box::new(NodeDebugInfo {
            original_node_names: info.original_node_names.clone(),
            original_func_names: info.original_func_names.clone(),
        })
    });
    *op_mut.experimental_type() = node
        .experimental_type
        .as_ref()
        .map(|full_type| full_type.encode_to_vec().into_boxed_slice());
    Ok(id)
}

fn export_node(graph: &Graph, id: OpId, syntax: Syntax) -> Result<pb::NodeDef, ExportError> {
    let op = graph.op(id);
    let mut input = Vec::new();
    for (expected, (slot, data)) in graph.inputs(id).into_iter().enumerate() {
        if slot as usize != expected {
            return Err(ExportError::MissingInputSlot {
                node: op.name.clone(),
                slot: expected as u32,
            });
        }
        input.push(format_input(graph, id, data.src, &data.output, syntax)?);
    }
    for src in graph.control_inputs(id) {
        input.push(format!("^{}", graph.op(src).name));
    }
    let experimental_type = match &op.experimental_type {
        Some(bytes) => Some(pb::FullTypeDef::decode(&bytes[..]).map_err(|source| {
            ExportError::CorruptBytes {
                owner: format!("node `{}`", op.name),
                field: "experimental_type",
                source,
            }
        })?),
        None => None,
    };
    Ok(pb::NodeDef {
        name: op.name.clone(),
        op: op.op.type_name().to_owned(),
        input,
        device: op.device.to_string(),
        attr: export_attrs(&op.attrs),
        experimental_debug_info: op.debug_info.as_ref().map(|info| {
            pb::node_def::ExperimentalDebugInfo {
                original_node_names: info.original_node_names.clone(),
                original_func_names: info.original_func_names.clone(),
            }
        }),
        experimental_type,
    })
}

/// One parsed input string.
enum ParsedInput {
    Data(OpId, Port),
    Control(OpId),
}

/// Finds the ops that imported inputs name, looking first where the inputs of a plan usually
/// are, and in the name index only when not there. A plan's ops mostly read an op made just
/// before them (a variable's ops, its handle), or an op a fixed number of ops after the one
/// the same kind of input read last (a `SaveV2`'s tensors, each restore's assign of its
/// variable, `save/restore_all`'s control inputs). A guess is taken only when the op there
/// has the very name asked for, and names are unique, so the answer is always the index's.
/// What a guess saves is the index lookup: at 100,000 variables, about 900,000 of them, each
/// a few cache misses in a table of 700,000 names.
#[derive(Default)]
pub(crate) struct InputResolver {
    /// Per kind of input (the reading op's kind and its input slot, slots from [`MANY`] on
    /// together; control inputs apart): the run of ops such inputs named.
    last: FxHashMap<(Discriminant<Op>, u32), Stride>,
}

/// The input slot from which on all the inputs of an op count as one kind (a `SaveV2`'s
/// tensors follow its three string inputs).
const MANY: u32 = 3;

/// The kind of a control input in [`InputResolver::last`].
const CONTROL: u32 = u32::MAX;

/// How many ops before the reading one [`InputResolver`] looks at.
const WINDOW: usize = 6;

impl InputResolver {
    /// The op named `name`, as input `slot` (or a control input, [`CONTROL`]) of `reader`.
    fn find(&mut self, graph: &Graph, reader: OpId, slot: u32, name: &str) -> Option<OpId> {
        let kind = if slot == CONTROL {
            CONTROL
        } else {
            slot.min(MANY)
        };
        let key = (std::mem::discriminant(&graph.op(reader).op), kind);
        let stride = self.last.entry(key).or_default();
        let before = (1..=WINDOW).filter_map(|back| reader.index().checked_sub(back));
        let found = graph.find_near(name, stride.guesses().chain(before))?;
        stride.record(found);
        Some(found)
    }
}

/// Connects the input strings of the node `name` (op `id`) in order: data inputs to the next
/// slots, control inputs (`^node`) after them. `resolver` is kept across the nodes of one
/// graph.
pub(crate) fn connect_inputs<'s>(
    graph: &mut Graph,
    resolver: &mut InputResolver,
    name: &str,
    inputs: impl IntoIterator<Item = &'s str>,
    id: OpId,
    syntax: Syntax,
) -> Result<(), ImportError> {
    let mut seen_control = false;
    let mut slot = 0;
    for input in inputs {
        let at = Reader {
            id,
            slot,
            resolver: &mut *resolver,
        };
        match parse_input(graph, at, name, input, syntax)? {
            ParsedInput::Control(src) => {
                seen_control = true;
                graph.add_control(src, id);
            }
            ParsedInput::Data(_, _) if seen_control => {
                return Err(ImportError::ControlBeforeData {
                    node: name.to_owned(),
                    input: input.to_owned(),
                });
            }
            ParsedInput::Data(src, port) => {
                graph.push_input(id, src, port);
                slot += 1;
            }
        }
    }
    Ok(())
}

/// Which input of which op is being parsed, and where its op is looked for.
struct Reader<'r> {
    id: OpId,
    /// The data input slot it fills, if it is a data input.
    slot: u32,
    resolver: &'r mut InputResolver,
}

fn parse_input(
    graph: &Graph,
    reader: Reader<'_>,
    node: &str,
    input: &str,
    syntax: Syntax,
) -> Result<ParsedInput, ImportError> {
    let malformed = || ImportError::MalformedInput {
        node: node.to_owned(),
        input: input.to_owned(),
    };
    let missing = || ImportError::MissingInput {
        node: node.to_owned(),
        input: input.to_owned(),
    };
    if let Some(name) = input.strip_prefix('^') {
        return match TensorName::parse(name) {
            Ok(TensorName { op, output: None }) => reader
                .resolver
                .find(graph, reader.id, CONTROL, op)
                .map(ParsedInput::Control)
                .ok_or_else(missing),
            _ => Err(malformed()),
        };
    }
    let mut find = |name: &str| {
        reader
            .resolver
            .find(graph, reader.id, reader.slot, name)
            .ok_or_else(missing)
    };
    let name = TensorName::parse(input).map_err(|_| malformed())?;
    if syntax == Syntax::GraphDef {
        // `node` or `node:N`; `node:arg:N` is function-body syntax.
        let index = name.index_or_zero().ok_or_else(malformed)?;
        return Ok(ParsedInput::Data(find(name.op)?, Port::Index(index)));
    }
    // A function body names an argument bare or with an index, and any other op's output
    // by its output argument.
    let src = find(name.op)?;
    let is_arg = graph.op(src).op == Op::Arg;
    match name.output {
        None | Some(OutputRef::Index(_)) if is_arg => Ok(ParsedInput::Data(src, name.port())),
        Some(OutputRef::Named { arg, index }) if !is_arg => {
            let port = named_to_flat(graph, src, arg, index).map_err(|source| {
                ImportError::BadOutputArg {
                    node: node.to_owned(),
                    input: input.to_owned(),
                    source: Box::new(source),
                }
            })?;
            Ok(ParsedInput::Data(src, port))
        }
        _ => Err(malformed()),
    }
}

/// `arg:index` of `src` as a flat [`Port::Index`] when the signature table knows the op, else
/// kept as a [`Port::Named`].
fn named_to_flat(graph: &Graph, src: OpId, arg: &str, index: u32) -> Result<Port, SignatureError> {
    let op = graph.op(src);
    match signature::signature(op.op.type_name()) {
        Some(sig) => {
            let flat = sig.output_index(arg, index as usize, &|name| attr_len(&op.attrs, name))?;
            Ok(Port::Index(flat as u32))
        }
        None => Ok(Port::Named {
            arg: arg.to_owned(),
            index,
        }),
    }
}

fn format_input(
    graph: &Graph,
    dst: OpId,
    src: OpId,
    output: &Port,
    syntax: Syntax,
) -> Result<String, ExportError> {
    let src_op = graph.op(src);
    let name = &src_op.name;
    let sig = signature::signature(src_op.op.type_name());
    let attr_len = |attr: &str| attr_len(&src_op.attrs, attr);
    let unnamed = |output: String| ExportError::UnnamedOutput {
        node: graph.op(dst).name.clone(),
        src: name.clone(),
        op: src_op.op.type_name().to_owned(),
        output,
    };
    let bad = |output: String, source: SignatureError| ExportError::BadOutput {
        node: graph.op(dst).name.clone(),
        src: name.clone(),
        output,
        source: Box::new(source),
    };
    match (syntax, output) {
        (Syntax::GraphDef, Port::Index(0)) => Ok(name.clone()),
        (Syntax::GraphDef, Port::Index(index)) => Ok(format!("{name}:{index}")),
        (Syntax::GraphDef, Port::Named { arg, index }) => {
            let sig = sig.ok_or_else(|| unnamed(format!("{arg}:{index}")))?;
            let flat = sig
                .output_index(arg, *index as usize, &attr_len)
                .map_err(|source| bad(format!("{arg}:{index}"), source))?;
            Ok(match flat {
                0 => name.clone(),
                flat => format!("{name}:{flat}"),
            })
        }
        (Syntax::FunctionBody, Port::Index(0)) if src_op.op == Op::Arg => Ok(name.clone()),
        (Syntax::FunctionBody, Port::Index(index)) if src_op.op == Op::Arg => {
            Ok(format!("{name}:{index}"))
        }
        (Syntax::FunctionBody, Port::Index(flat)) => {
            let sig = sig.ok_or_else(|| unnamed(flat.to_string()))?;
            let (arg, index) = sig
                .output_arg(*flat as usize, &attr_len)
                .map_err(|source| bad(flat.to_string(), source))?;
            Ok(format!("{name}:{arg}:{index}"))
        }
        (Syntax::FunctionBody, Port::Named { arg, index }) => Ok(format!("{name}:{arg}:{index}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op: &str, inputs: &[&str]) -> pb::NodeDef {
        pb::NodeDef {
            name: name.to_owned(),
            op: op.to_owned(),
            input: inputs.iter().map(|input| (*input).to_owned()).collect(),
            ..pb::NodeDef::default()
        }
    }

    fn restore(name: &str, n_tensors: usize) -> pb::NodeDef {
        let mut restore = node(name, "RestoreV2", &[]);
        let dtypes = saveplan_ir::AttrValue::types(vec![saveplan_ir::DType::Float; n_tensors]);
        restore.attr.insert(
            "dtypes".to_owned(),
            super::super::attr::export_attr(&dtypes),
        );
        restore
    }

    #[test]
    fn function_body_outputs_become_flat_for_known_ops_only() {
        let mut graph = Graph::new();
        graph.add_op("prefix", Op::Arg, "", Attrs::new()).unwrap();
        let nodes = vec![
            restore("restore", 3),
            node("custom", "MyOp", &["prefix"]),
            node("a", "Identity", &["restore:tensors:2"]),
            node("b", "Identity", &["custom:out:1", "^a"]),
            node("c", "IdentityN", &["prefix:1"]),
        ];
        import_nodes(&mut graph, &nodes, Syntax::FunctionBody).unwrap();
        let input_of = |name: &str| graph.inputs(graph.find(name).unwrap())[0].1.output.clone();
        assert_eq!(input_of("a"), Port::Index(2));
        assert_eq!(
            input_of("b"),
            Port::Named {
                arg: "out".to_owned(),
                index: 1
            }
        );
        assert_eq!(input_of("c"), Port::Index(1));
        assert_eq!(export_nodes(&graph, Syntax::FunctionBody).unwrap(), nodes);
    }

    #[test]
    fn graph_def_inputs_round_trip_and_node_0_normalizes() {
        let nodes = vec![
            restore("restore", 2),
            node("a", "Identity", &["restore:1"]),
            node("b", "Identity", &["restore:0", "^a", "^restore"]),
        ];
        let mut graph = Graph::new();
        import_nodes(&mut graph, &nodes, Syntax::GraphDef).unwrap();
        let exported = export_nodes(&graph, Syntax::GraphDef).unwrap();
        assert_eq!(exported[1], nodes[1]);
        assert_eq!(exported[2].input, ["restore", "^a", "^restore"]);
    }

    #[test]
    fn bad_inputs_name_the_node() {
        let cases: &[(&[pb::NodeDef], Syntax, &str)] = &[
            (
                &[node("a", "NoOp", &[]), node("b", "Identity", &["a:x"])],
                Syntax::GraphDef,
                "node `b`: malformed input `a:x`",
            ),
            (
                &[node("b", "Identity", &["gone:out:1"])],
                Syntax::GraphDef,
                "node `b`: malformed input `gone:out:1`",
            ),
            (
                &[node("a", "NoOp", &[]), node("b", "Identity", &["a::1"])],
                Syntax::FunctionBody,
                "node `b`: malformed input `a::1`",
            ),
            (
                &[node("a", "NoOp", &[]), node("b", "Identity", &["^a:1"])],
                Syntax::GraphDef,
                "node `b`: malformed input `^a:1`",
            ),
            (
                &[node("a", "NoOp", &[]), node("b", "Identity", &["a"])],
                Syntax::FunctionBody,
                "node `b`: malformed input `a`",
            ),
            (
                &[restore("r", 2), node("b", "Identity", &["r:tensors:2"])],
                Syntax::FunctionBody,
                "node `b`: input `r:tensors:2` does not name an output of its producer",
            ),
            (
                &[node("b", "Identity", &["^gone"])],
                Syntax::GraphDef,
                "node `b`: input `^gone` names a node that does not exist",
            ),
            (
                &[node("x", "_Arg", &[])],
                Syntax::FunctionBody,
                "node `x`: `_Arg` nodes are not allowed in a function body",
            ),
        ];
        for (nodes, syntax, message) in cases {
            let err = import_nodes(&mut Graph::new(), nodes, *syntax).unwrap_err();
            assert_eq!(err.to_string(), *message);
        }
    }

    #[test]
    fn export_rejects_what_the_format_cannot_express() {
        let mut graph = Graph::new();
        let custom = graph
            .add_op("custom", Op::Other("MyOp".into()), "", Attrs::new())
            .unwrap();
        let user = graph
            .add_op("user", Op::Identity, "", Attrs::new())
            .unwrap();
        graph.connect(custom, Port::Index(1), user, 0).unwrap();
        let err = export_nodes(&graph, Syntax::FunctionBody).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node `user`: cannot name output 1 of `custom` (op `MyOp` has no known signature)"
        );
        let sparse = graph.add_op("sparse", Op::Pack, "", Attrs::new()).unwrap();
        graph.connect(custom, Port::Index(0), sparse, 1).unwrap();
        let err = export_nodes(&graph, Syntax::GraphDef).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node `sparse`: data input 0 is not connected"
        );
    }
}
