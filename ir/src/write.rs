//! The canonical text form of the IR: `impl Display` for [`Module`], [`Graph`], [`AttrValue`],
//! [`Shape`] and [`Tensor`].
//!
//! The text is deterministic and lossless; [`crate::parse`] reads it back. A module prints as
//!
//! ```text
//! versions[bad_consumers=list(int)[3], min_consumer=12, producer=2474]
//! graph {
//!   saver_filename = Placeholder[dtype=string, shape=[]]
//!   Identity = Identity(RestoreV2:1, ^MergeV2Checkpoints)[T=float32] @"/device:CPU:0"
//! }
//! function f {
//!   input x[type=float32]
//!   body {
//!     x = _Arg[T=float32, index=0]
//!   }
//!   ret y = "x"
//! }
//! ```
//!
//! Ops print in a topological order of data and control edges, ties broken by creation order
//! (creation order alone if the graph has a cycle), one op per line:
//! `name = OpType(inputs)[attrs] @"device"`, followed by `debug_info[...]` and
//! `experimental_type=b"..."` when present. An input prints as `src` (output 0), `src:3`
//! ([`Port::Index`]) or `src:arg:1` ([`Port::Named`]); an unconnected slot before a connected
//! one prints as `?`; control inputs come last, each as `^src`. The parentheses are left out
//! when an op has no inputs, the brackets when it has no attributes.
//!
//! Names (of ops, op types, attributes, arguments and functions) print bare when they match
//! `[A-Za-z0-9_.][A-Za-z0-9_./>-]*` and as quoted strings otherwise. Attribute values are typed
//! by their syntax:
//!
//! | kind | syntax |
//! |---|---|
//! | string | `"text"`, valid UTF-8 as is, other bytes as `\xNN` |
//! | int, float, bool | `-3`, `1.5` / `1e-7` / `-0.0` / `inf` / `nan` / `nan(0x7fc00001)`, `true` |
//! | type | the dtype's Python name (`float32`, `string`), `dtype(<number>)` if unknown |
//! | shape | `[2,?,3]` (`?` is -1, a named dim is `name=2`), `<unknown>` for unknown rank |
//! | tensor | `tensor<float32>[3]{content b"\x00\x00\x80?"}`, `tensor<string>[]{strings ["v"]}` |
//! | list | `list(int)[1, 2]`, `list[]` when empty, `list{string["a"], int[1]}` when mixed |
//! | func, placeholder, unset | `func name[attrs]`, `placeholder name`, `unset` |
//!
//! Floats print in Rust's shortest round-trip form, so every value parses back to the same bits.
//! Nothing printed depends on `OpId`s, petgraph indices, addresses or hash-map order.

use std::fmt::{self, Display, Formatter, Write};

use crate::{
    ArgDef, AttrDef, AttrList, AttrValue, Attrs, DType, Function, Graph, Module, NameAttrList,
    OpId, Port, Shape, Signature, Tensor, TensorValues,
};

impl Display for Module {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if let Some(versions) = &self.versions {
            f.write_str("versions")?;
            let mut props = Props::default();
            if !versions.bad_consumers.is_empty() {
                let list = AttrList {
                    i: versions
                        .bad_consumers
                        .iter()
                        .map(|&v| i64::from(v))
                        .collect(),
                    ..AttrList::default()
                };
                props.value("bad_consumers", AttrValue::List(Box::new(list)));
            }
            props.int("min_consumer", i64::from(versions.min_consumer));
            props.int("producer", i64::from(versions.producer));
            props.write_always(f)?;
            f.write_char('\n')?;
        }
        if self.legacy_version != 0 {
            writeln!(f, "legacy_version {}", self.legacy_version)?;
        }
        if let Some(debug_info) = &self.debug_info {
            writeln!(f, "debug_info {}", Bytes(debug_info))?;
        }
        write_graph(f, &self.graph, 0)?;
        for function in &self.library.functions {
            write_function(f, function)?;
        }
        for (function, gradient) in &self.library.gradients {
            writeln!(f, "gradient {} = {}", Name(function), Name(gradient))?;
        }
        for (gradient, op_type) in &self.library.registered_gradients {
            writeln!(
                f,
                "registered_gradient {} = {}",
                Name(gradient),
                Name(op_type)
            )?;
        }
        Ok(())
    }
}

impl Display for Graph {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_graph(f, self, 0)
    }
}

impl Display for AttrValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Unset => f.write_str("unset"),
            AttrValue::S(bytes) => write!(f, "{}", Str(bytes)),
            AttrValue::I(value) => write!(f, "{value}"),
            AttrValue::F(value) => f.write_str(&format_f32(*value)),
            AttrValue::B(value) => write!(f, "{value}"),
            AttrValue::Type(dtype) => write!(f, "{dtype}"),
            AttrValue::Shape(shape) => write!(f, "{shape}"),
            AttrValue::Tensor(tensor) => write!(f, "{tensor}"),
            AttrValue::List(list) => write_list(f, list),
            AttrValue::Func(func) => {
                f.write_str("func ")?;
                write_func(f, func)
            }
            AttrValue::Placeholder(name) => write!(f, "placeholder {}", Name(name)),
        }
    }
}

impl Display for Shape {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.unknown_rank {
            f.write_str("<unknown>")?;
            if self.dims.is_empty() {
                return Ok(());
            }
        }
        f.write_char('[')?;
        for (pos, dim) in self.dims.iter().enumerate() {
            if pos > 0 {
                f.write_char(',')?;
            }
            if !dim.name.is_empty() {
                write!(f, "{}=", Name(&dim.name))?;
            }
            match dim.size {
                -1 => f.write_char('?')?,
                size => write!(f, "{size}")?,
            }
        }
        f.write_char(']')
    }
}

impl Display for Tensor {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "tensor<{}>", self.dtype)?;
        if let Some(shape) = &self.shape {
            write!(f, "{shape}")?;
        }
        f.write_char('{')?;
        if self.version_number != 0 {
            write!(f, "version={}", self.version_number)?;
            if !matches!(self.values, TensorValues::Empty) {
                f.write_str(", ")?;
            }
        }
        write_tensor_values(f, &self.values)?;
        f.write_char('}')
    }
}

/// Whether `name` prints without quotes: it matches `[A-Za-z0-9_.][A-Za-z0-9_./>-]*`.
pub fn is_bare_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) if first.is_ascii_alphanumeric() || first == '_' || first == '.' => {}
        _ => return false,
    }
    chars.all(is_name_char)
}

/// Whether `c` may appear after the first character of a bare name.
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '>' | '-')
}

/// Formats an `f32` so that parsing the text gives back the same bits.
pub(crate) fn format_f32(value: f32) -> String {
    if value.is_nan() {
        if value.to_bits() == f32::NAN.to_bits() {
            "nan".to_owned()
        } else {
            format!("nan(0x{:08x})", value.to_bits())
        }
    } else {
        format!("{value:?}")
    }
}

/// Formats an `f64` so that parsing the text gives back the same bits.
pub(crate) fn format_f64(value: f64) -> String {
    if value.is_nan() {
        if value.to_bits() == f64::NAN.to_bits() {
            "nan".to_owned()
        } else {
            format!("nan(0x{:016x})", value.to_bits())
        }
    } else {
        format!("{value:?}")
    }
}

/// A name, bare or quoted.
struct Name<'a>(&'a str);

impl Display for Name<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if is_bare_name(self.0) {
            f.write_str(self.0)
        } else {
            write!(f, "{}", Str(self.0.as_bytes()))
        }
    }
}

/// A quoted string: valid UTF-8 prints as text, control characters and invalid bytes as `\xNN`.
struct Str<'a>(&'a [u8]);

impl Display for Str<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        // Names and devices are almost always printable ASCII without quotes or backslashes:
        // written whole.
        if self
            .0
            .iter()
            .all(|&byte| (0x20..0x7f).contains(&byte) && byte != b'"' && byte != b'\\')
            && let Ok(text) = std::str::from_utf8(self.0)
        {
            f.write_str(text)?;
            return f.write_char('"');
        }
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    '\n' => f.write_str("\\n")?,
                    '\t' => f.write_str("\\t")?,
                    '\r' => f.write_str("\\r")?,
                    c if c.is_control() => {
                        let mut buf = [0; 4];
                        for byte in c.encode_utf8(&mut buf).bytes() {
                            write!(f, "\\x{byte:02x}")?;
                        }
                    }
                    c => f.write_char(c)?,
                }
            }
            for byte in chunk.invalid() {
                write!(f, "\\x{byte:02x}")?;
            }
        }
        f.write_char('"')
    }
}

/// A byte string `b"..."`: printable ASCII as is, every other byte as `\xNN`.
struct Bytes<'a>(&'a [u8]);

impl Display for Bytes<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("b\"")?;
        for &byte in self.0 {
            match byte {
                b'"' => f.write_str("\\\"")?,
                b'\\' => f.write_str("\\\\")?,
                0x20..=0x7e => f.write_char(char::from(byte))?,
                _ => write!(f, "\\x{byte:02x}")?,
            }
        }
        f.write_char('"')
    }
}

/// A bag of `key=value` properties printed as `[k=v, ...]` in key order.
#[derive(Default)]
struct Props {
    entries: Vec<(&'static str, String)>,
}

impl Props {
    fn value(&mut self, key: &'static str, value: AttrValue) {
        self.entries.push((key, value.to_string()));
    }

    fn raw(&mut self, key: &'static str, text: String) {
        self.entries.push((key, text));
    }

    fn int(&mut self, key: &'static str, value: i64) {
        self.raw(key, value.to_string());
    }

    fn int_nonzero(&mut self, key: &'static str, value: i64) {
        if value != 0 {
            self.int(key, value);
        }
    }

    fn flag(&mut self, key: &'static str, value: bool) {
        if value {
            self.raw(key, "true".to_owned());
        }
    }

    fn string(&mut self, key: &'static str, value: &str) {
        if !value.is_empty() {
            self.raw(key, Str(value.as_bytes()).to_string());
        }
    }

    /// A name-valued property, printed as a quoted string.
    fn name(&mut self, key: &'static str, value: &str) {
        self.string(key, value);
    }

    fn bytes(&mut self, key: &'static str, value: &Option<Vec<u8>>) {
        if let Some(bytes) = value {
            self.raw(key, Bytes(bytes).to_string());
        }
    }

    /// Writes `[..]` unless there are no entries.
    fn write(mut self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.entries.sort_by_key(|(key, _)| *key);
        f.write_char('[')?;
        for (pos, (key, value)) in self.entries.iter().enumerate() {
            if pos > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}={value}")?;
        }
        f.write_char(']')
    }

    /// Writes `[..]`, `[]` when there are no entries.
    fn write_always(self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("[]");
        }
        self.write(f)
    }
}

fn indent(f: &mut Formatter<'_>, depth: usize) -> fmt::Result {
    for _ in 0..depth {
        f.write_str("  ")?;
    }
    Ok(())
}

/// Op lines formatted per parallel task of [`write_graph`].
const LINES_PER_TASK: usize = 2048;

/// Op lines formatted before they are written, at most (bounds the text held at once).
const LINES_PER_ROUND: usize = 32 * LINES_PER_TASK;

/// Writes `graph {` or `body {`, the ops, and the closing brace, at `depth` levels of indent.
///
/// The op lines of a large graph are formatted in parallel, a round at a time, and written in
/// order: the text is the same as one line after the other.
fn write_graph(f: &mut Formatter<'_>, graph: &Graph, depth: usize) -> fmt::Result {
    use rayon::prelude::*;
    indent(f, depth)?;
    f.write_str(if depth == 0 { "graph {\n" } else { "body {\n" })?;
    let order = graph.topo_order().unwrap_or_else(|_| graph.ops());
    for round in order.chunks(LINES_PER_ROUND) {
        let texts = round
            .par_chunks(LINES_PER_TASK)
            .map(|ids| {
                let mut text = String::new();
                for &id in ids {
                    writeln!(text, "{}{}", Indent(depth + 1), OpLine(graph, id))?;
                }
                Ok(text)
            })
            .collect::<Result<Vec<String>, fmt::Error>>()?;
        for text in texts {
            f.write_str(&text)?;
        }
    }
    indent(f, depth)?;
    f.write_str("}\n")
}

/// `depth` levels of indent.
struct Indent(usize);

impl Display for Indent {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        indent(f, self.0)
    }
}

/// One op line, without indent or newline.
struct OpLine<'a>(&'a Graph, OpId);

impl Display for OpLine<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_op(f, self.0, self.1)
    }
}

/// Writes one op line without indent or newline.
fn write_op(f: &mut Formatter<'_>, graph: &Graph, id: OpId) -> fmt::Result {
    let node = graph.op(id);
    write!(f, "{} = {}", Name(&node.name), Name(node.op.type_name()))?;
    let inputs = graph.inputs(id);
    let controls = graph.control_inputs(id);
    if !inputs.is_empty() || !controls.is_empty() {
        f.write_char('(')?;
        let mut first = true;
        let mut sep = |f: &mut Formatter<'_>| -> fmt::Result {
            if !std::mem::take(&mut first) {
                f.write_str(", ")?;
            }
            Ok(())
        };
        let mut next_slot = 0;
        for (slot, input) in &inputs {
            while next_slot < *slot {
                sep(f)?;
                f.write_char('?')?;
                next_slot += 1;
            }
            sep(f)?;
            write!(f, "{}", Name(&graph.op(input.src).name))?;
            match &input.output {
                Port::Index(0) => {}
                Port::Index(index) => write!(f, ":{index}")?,
                Port::Named { arg, index } => write!(f, ":{}:{index}", Name(arg))?,
            }
            next_slot = slot + 1;
        }
        for src in controls {
            sep(f)?;
            write!(f, "^{}", Name(&graph.op(src).name))?;
        }
        f.write_char(')')?;
    }
    write_attrs(f, &node.attrs)?;
    if !node.device.is_empty() {
        write!(f, " @{}", Str(node.device.as_bytes()))?;
    }
    if let Some(debug_info) = &node.debug_info {
        f.write_str(" debug_info")?;
        let mut props = Props::default();
        for (key, names) in [
            ("original_func_names", &debug_info.original_func_names),
            ("original_node_names", &debug_info.original_node_names),
        ] {
            if !names.is_empty() {
                props.value(key, AttrValue::strings(names.iter().map(String::as_str)));
            }
        }
        props.write_always(f)?;
    }
    if let Some(bytes) = &node.experimental_type {
        write!(f, " experimental_type={}", Bytes(bytes))?;
    }
    Ok(())
}

/// Writes `[key=value, ...]` in key order, nothing when empty.
fn write_attrs(f: &mut Formatter<'_>, attrs: &Attrs) -> fmt::Result {
    if attrs.is_empty() {
        return Ok(());
    }
    f.write_char('[')?;
    for (pos, (key, value)) in attrs.iter().enumerate() {
        if pos > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{}={value}", Name(key))?;
    }
    f.write_char(']')
}

fn write_func(f: &mut Formatter<'_>, func: &NameAttrList) -> fmt::Result {
    write!(f, "{}", Name(&func.name))?;
    write_attrs(f, &func.attr)
}

/// The member lists of an [`AttrList`] as (kind, number of elements).
fn list_parts(list: &AttrList) -> [(&'static str, usize); 8] {
    [
        ("string", list.s.len()),
        ("int", list.i.len()),
        ("float", list.f.len()),
        ("bool", list.b.len()),
        ("type", list.types.len()),
        ("shape", list.shapes.len()),
        ("tensor", list.tensors.len()),
        ("func", list.funcs.len()),
    ]
}

fn write_list(f: &mut Formatter<'_>, list: &AttrList) -> fmt::Result {
    let parts: Vec<&'static str> = list_parts(list)
        .into_iter()
        .filter(|(_, len)| *len > 0)
        .map(|(kind, _)| kind)
        .collect();
    match parts.as_slice() {
        [] => f.write_str("list[]"),
        [kind] => {
            write!(f, "list({kind})")?;
            write_list_part(f, list, kind)
        }
        kinds => {
            f.write_str("list{")?;
            for (pos, kind) in kinds.iter().enumerate() {
                if pos > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(kind)?;
                write_list_part(f, list, kind)?;
            }
            f.write_char('}')
        }
    }
}

/// Writes `[e1, e2, ...]` for the member list of `kind`.
fn write_list_part(f: &mut Formatter<'_>, list: &AttrList, kind: &str) -> fmt::Result {
    let items: Vec<String> = match kind {
        "string" => list.s.iter().map(|s| Str(s).to_string()).collect(),
        "int" => list.i.iter().map(i64::to_string).collect(),
        "float" => list.f.iter().map(|v| format_f32(*v)).collect(),
        "bool" => list.b.iter().map(bool::to_string).collect(),
        "type" => list.types.iter().map(DType::to_string).collect(),
        "shape" => list.shapes.iter().map(Shape::to_string).collect(),
        "tensor" => list.tensors.iter().map(Tensor::to_string).collect(),
        _ => list
            .funcs
            .iter()
            .map(|func| FuncText(func).to_string())
            .collect(),
    };
    write_items(f, &items)
}

struct FuncText<'a>(&'a NameAttrList);

impl Display for FuncText<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write_func(f, self.0)
    }
}

fn write_items(f: &mut Formatter<'_>, items: &[String]) -> fmt::Result {
    f.write_char('[')?;
    f.write_str(&items.join(", "))?;
    f.write_char(']')
}

fn write_tensor_values(f: &mut Formatter<'_>, values: &TensorValues) -> fmt::Result {
    fn items<T>(values: &[T], format: impl Fn(&T) -> String) -> Vec<String> {
        values.iter().map(format).collect()
    }
    let (kind, list) = match values {
        TensorValues::Empty => return Ok(()),
        TensorValues::Content(bytes) => return write!(f, "content {}", Bytes(bytes)),
        TensorValues::Float8(bytes) => return write!(f, "float8 {}", Bytes(bytes)),
        TensorValues::Half(v) => ("half", items(v, i32::to_string)),
        TensorValues::Float(v) => ("float", items(v, |v| format_f32(*v))),
        TensorValues::Double(v) => ("double", items(v, |v| format_f64(*v))),
        TensorValues::Int(v) => ("int", items(v, i32::to_string)),
        TensorValues::String(v) => ("strings", items(v, |s| Str(s).to_string())),
        TensorValues::SComplex(v) => ("scomplex", items(v, |v| format_f32(*v))),
        TensorValues::Int64(v) => ("int64", items(v, i64::to_string)),
        TensorValues::Bool(v) => ("bool", items(v, bool::to_string)),
        TensorValues::DComplex(v) => ("dcomplex", items(v, |v| format_f64(*v))),
        TensorValues::UInt32(v) => ("uint32", items(v, u32::to_string)),
        TensorValues::UInt64(v) => ("uint64", items(v, u64::to_string)),
    };
    write!(f, "{kind} ")?;
    write_items(f, &list)
}

fn write_function(f: &mut Formatter<'_>, function: &Function) -> fmt::Result {
    let signature = &function.signature;
    writeln!(f, "function {} {{", Name(&signature.name))?;
    write_signature_props(f, signature)?;
    for arg in &signature.input_args {
        write_arg(f, "input", arg)?;
    }
    for arg in &signature.output_args {
        write_arg(f, "output", arg)?;
    }
    for name in &signature.control_outputs {
        writeln!(f, "  control_output {}", Name(name))?;
    }
    for attr in &signature.attrs {
        write_attr_def(f, attr)?;
    }
    if !function.attr.is_empty() {
        f.write_str("  attrs")?;
        write_attrs(f, &function.attr)?;
        f.write_char('\n')?;
    }
    for (index, attrs) in &function.arg_attr {
        write!(f, "  arg_attr {index}")?;
        if attrs.is_empty() {
            f.write_str("[]")?;
        }
        write_attrs(f, attrs)?;
        f.write_char('\n')?;
    }
    for (index, id) in &function.resource_arg_unique_id {
        writeln!(f, "  resource_arg_unique_id {index} = {id}")?;
    }
    write_graph(f, &function.body, 1)?;
    for (name, target) in &function.ret {
        writeln!(f, "  ret {} = {}", Name(name), Str(target.as_bytes()))?;
    }
    for (name, target) in &function.control_ret {
        writeln!(
            f,
            "  control_ret {} = {}",
            Name(name),
            Str(target.as_bytes())
        )?;
    }
    f.write_str("}\n")
}

fn write_signature_props(f: &mut Formatter<'_>, signature: &Signature) -> fmt::Result {
    let mut props = Props::default();
    props.flag(
        "allows_uninitialized_input",
        signature.allows_uninitialized_input,
    );
    if let Some((version, explanation)) = &signature.deprecation {
        props.int("deprecation_version", i64::from(*version));
        props.raw(
            "deprecation_explanation",
            Str(explanation.as_bytes()).to_string(),
        );
    }
    props.string("description", &signature.description);
    props.flag("is_aggregate", signature.is_aggregate);
    props.flag("is_commutative", signature.is_commutative);
    props.flag(
        "is_distributed_communication",
        signature.is_distributed_communication,
    );
    props.flag("is_stateful", signature.is_stateful);
    props.string("summary", &signature.summary);
    if props.entries.is_empty() {
        return Ok(());
    }
    f.write_str("  signature")?;
    props.write(f)?;
    f.write_char('\n')
}

fn write_arg(f: &mut Formatter<'_>, keyword: &str, arg: &ArgDef) -> fmt::Result {
    write!(f, "  {keyword} {}", Name(&arg.name))?;
    let mut props = Props::default();
    props.string("description", &arg.description);
    props.bytes("experimental_full_type", &arg.experimental_full_type);
    if !arg.handle_data.is_empty() {
        let list = AttrList {
            types: arg.handle_data.iter().map(|(dtype, _)| *dtype).collect(),
            shapes: arg
                .handle_data
                .iter()
                .map(|(_, shape)| shape.clone())
                .collect(),
            ..AttrList::default()
        };
        props.value("handle_data", AttrValue::List(Box::new(list)));
    }
    props.flag("is_ref", arg.is_ref);
    props.name("number_attr", &arg.number_attr);
    if arg.dtype != DType::Invalid {
        props.value("type", AttrValue::Type(arg.dtype));
    }
    props.name("type_attr", &arg.type_attr);
    props.name("type_list_attr", &arg.type_list_attr);
    props.write(f)?;
    f.write_char('\n')
}

fn write_attr_def(f: &mut Formatter<'_>, attr: &AttrDef) -> fmt::Result {
    write!(f, "  attr {}", Name(&attr.name))?;
    let mut props = Props::default();
    if let Some(allowed) = &attr.allowed_values {
        props.value("allowed", allowed.clone());
    }
    if let Some(default) = &attr.default_value {
        props.value("default", default.clone());
    }
    props.string("description", &attr.description);
    props.flag("has_minimum", attr.has_minimum);
    props.int_nonzero("minimum", attr.minimum);
    props.string("ty", &attr.ty);
    props.write(f)?;
    f.write_char('\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_strings() {
        assert!(is_bare_name("save/SaveV2_1"));
        assert!(is_bare_name("_Arg"));
        assert!(!is_bare_name(""));
        assert!(!is_bare_name("-x"));
        assert!(!is_bare_name("a b"));
        assert_eq!(Name("a b").to_string(), "\"a b\"");
        assert_eq!(
            Str(b"\xc3\xa9\"\\\n\x01\xff").to_string(),
            r#""é\"\\\n\x01\xff""#
        );
        assert_eq!(Bytes(b"\x00\x00\x80?").to_string(), r#"b"\x00\x00\x80?""#);
    }

    #[test]
    fn floats_round_trip_in_text() {
        for value in [
            0.0f32,
            -0.0,
            1.0,
            0.1,
            1e-7,
            3.4e38,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            let text = format_f32(value);
            assert_eq!(
                text.parse::<f32>().unwrap().to_bits(),
                value.to_bits(),
                "{text}"
            );
        }
        assert_eq!(format_f32(-0.0), "-0.0");
        assert_eq!(format_f32(f32::NAN), "nan");
        assert_eq!(format_f32(f32::from_bits(0x7fc0_0001)), "nan(0x7fc00001)");
    }

    #[test]
    fn ops_print_in_topological_order_with_gaps_and_controls() {
        let mut graph = Graph::new();
        let sink = graph
            .add_op("sink", crate::Op::Identity, "", Attrs::new())
            .unwrap();
        let source = graph
            .add_op("source", crate::Op::NoOp, "/device:CPU:0", Attrs::new())
            .unwrap();
        let other = graph
            .add_op("x y", crate::Op::NoOp, "", Attrs::new())
            .unwrap();
        graph.connect(source, Port::Index(2), sink, 1).unwrap();
        graph.add_control(other, sink);
        assert_eq!(
            graph.to_string(),
            "graph {\n  source = NoOp @\"/device:CPU:0\"\n  \"x y\" = NoOp\n  \
             sink = Identity(?, source:2, ^\"x y\")\n}\n"
        );
    }

    #[test]
    fn ops_of_many_rounds_print_in_order() {
        // A chain created backwards: its topological order is the reverse of creation, and
        // spans several rounds of parallel formatting.
        let n = LINES_PER_ROUND + LINES_PER_TASK + 3;
        let mut graph = Graph::new();
        let ids: Vec<OpId> = (0..n)
            .map(|i| {
                graph
                    .add_op(format!("op{i}"), crate::Op::Identity, "", Attrs::new())
                    .unwrap()
            })
            .collect();
        for pair in ids.windows(2) {
            graph.connect(pair[1], Port::Index(0), pair[0], 0).unwrap();
        }
        let text = graph.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), n + 2);
        assert_eq!(lines[1], format!("  op{} = Identity", n - 1));
        for (i, line) in lines[2..=n].iter().enumerate() {
            let (me, src) = (n - 2 - i, n - 1 - i);
            assert_eq!(*line, format!("  op{me} = Identity(op{src})"));
        }
    }

    #[test]
    fn attr_values() {
        let shape = Shape {
            dims: vec![
                crate::Dim {
                    size: 2,
                    name: String::new(),
                },
                crate::Dim {
                    size: -1,
                    name: "batch".into(),
                },
            ],
            unknown_rank: false,
        };
        assert_eq!(AttrValue::Shape(shape).to_string(), "[2,batch=?]");
        assert_eq!(AttrValue::Shape(Shape::unknown()).to_string(), "<unknown>");
        assert_eq!(
            AttrValue::Tensor(Box::new(Tensor::string_vector(["v"]))).to_string(),
            r#"tensor<string>[1]{strings ["v"]}"#
        );
        assert_eq!(AttrValue::List(Box::default()).to_string(), "list[]");
        assert_eq!(
            AttrValue::types([DType::Float, DType::String]).to_string(),
            "list(type)[float32, string]"
        );
    }
}
