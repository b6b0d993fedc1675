//! The recursive-descent parser of the IR text form: modules, graph blocks, op lines,
//! attribute values, tensors and functions, over the tokens of `lexer.rs`.

use std::collections::BTreeMap;

use crate::graph::NodeDebugInfo;
use crate::{
    ArgDef, AttrDef, AttrList, AttrValue, Attrs, DType, Dim, Function, Graph, Module, NameAttrList,
    Op, Port, Shape, Signature, Tensor, TensorValues, Versions,
};

use super::lexer::{Tok, Token, lex};
use super::{ParseError, ParseErrorKind, Pos};

/// Parses a module printed by `Display for Module`.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let mut parser = Parser::new(text)?;
    let module = parser.module()?;
    parser.expect_end()?;
    Ok(module)
}

/// Parses a graph printed by `Display for Graph` (`graph { ... }`).
pub fn parse_graph(text: &str) -> Result<Graph, ParseError> {
    let mut parser = Parser::new(text)?;
    parser.keyword("graph")?;
    let graph = parser.graph_block()?;
    parser.expect_end()?;
    Ok(graph)
}

/// One op line before the graph is built, so inputs may refer forward.
struct PendingOp {
    pos: Pos,
    name: String,
    op: Op,
    inputs: Vec<Option<(Pos, String, Port)>>,
    controls: Vec<(Pos, String)>,
    attrs: Attrs,
    device: String,
    debug_info: Option<NodeDebugInfo>,
    experimental_type: Option<Vec<u8>>,
}

/// A `[key=value, ...]` property bag being taken apart.
struct Props {
    /// Key → (position of the key, position of the value, value).
    entries: BTreeMap<String, (Pos, Pos, AttrValue)>,
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
}

impl Parser {
    fn new(text: &str) -> Result<Parser, ParseError> {
        Ok(Parser {
            tokens: lex(text)?,
            next: 0,
        })
    }

    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        &self.tokens[(self.next + ahead).min(self.tokens.len() - 1)].tok
    }

    fn bump(&mut self) -> Token {
        let token = self.peek().clone();
        if self.next < self.tokens.len() - 1 {
            self.next += 1;
        }
        token
    }

    fn pos(&self) -> Pos {
        self.peek().pos
    }

    fn expected(&self, expected: impl Into<String>) -> ParseError {
        self.pos().error(ParseErrorKind::Expected {
            expected: expected.into(),
            found: self.peek().tok.describe(),
        })
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek().tok == Tok::Punct(c)
    }

    fn at_word(&self, word: &str) -> bool {
        matches!(&self.peek().tok, Tok::Word(w) if w == word)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let at = self.at_punct(c);
        if at {
            self.bump();
        }
        at
    }

    fn punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(format!("`{c}`")))
        }
    }

    fn keyword(&mut self, word: &str) -> Result<(), ParseError> {
        if self.at_word(word) {
            self.bump();
            Ok(())
        } else {
            Err(self.expected(format!("`{word}`")))
        }
    }

    fn expect_end(&self) -> Result<(), ParseError> {
        if self.peek().tok == Tok::End {
            Ok(())
        } else {
            Err(self.expected("end of input"))
        }
    }

    /// A bare word, without interpretation.
    fn word(&mut self, expected: &str) -> Result<(Pos, String), ParseError> {
        match &self.peek().tok {
            Tok::Word(word) => {
                let word = word.clone();
                Ok((self.bump().pos, word))
            }
            _ => Err(self.expected(expected)),
        }
    }

    /// A name: a bare word or a quoted UTF-8 string.
    fn name(&mut self, expected: &str) -> Result<String, ParseError> {
        let pos = self.pos();
        match &self.peek().tok {
            Tok::Word(word) => {
                let word = word.clone();
                self.bump();
                Ok(word)
            }
            Tok::Str(bytes) => {
                let name = String::from_utf8(bytes.clone())
                    .map_err(|_| pos.error(ParseErrorKind::InvalidUtf8))?;
                self.bump();
                Ok(name)
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn string(&mut self, expected: &str) -> Result<Vec<u8>, ParseError> {
        match &self.peek().tok {
            Tok::Str(bytes) => {
                let bytes = bytes.clone();
                self.bump();
                Ok(bytes)
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn utf8_string(&mut self, expected: &str) -> Result<String, ParseError> {
        let pos = self.pos();
        let bytes = self.string(expected)?;
        String::from_utf8(bytes).map_err(|_| pos.error(ParseErrorKind::InvalidUtf8))
    }

    fn number<T: std::str::FromStr>(&mut self, what: &'static str) -> Result<T, ParseError> {
        let (pos, word) = self.word(what)?;
        word.parse()
            .map_err(|_| pos.error(ParseErrorKind::InvalidNumber { what, text: word }))
    }

    fn f32(&mut self) -> Result<f32, ParseError> {
        let bits = self.nan_bits("float")?;
        match bits {
            Some((pos, bits, text)) => u32::try_from(bits).map(f32::from_bits).map_err(|_| {
                pos.error(ParseErrorKind::InvalidNumber {
                    what: "float",
                    text,
                })
            }),
            None => self.number("float"),
        }
    }

    fn f64(&mut self) -> Result<f64, ParseError> {
        match self.nan_bits("double")? {
            Some((_, bits, _)) => Ok(f64::from_bits(bits)),
            None => self.number("double"),
        }
    }

    /// Reads `nan(0x...)` and returns its bits; leaves anything else in place.
    fn nan_bits(&mut self, what: &'static str) -> Result<Option<(Pos, u64, String)>, ParseError> {
        if !(self.at_word("nan") && *self.peek_at(1) == Tok::Punct('(')) {
            return Ok(None);
        }
        self.bump();
        self.bump();
        let (pos, word) = self.word("NaN bits")?;
        let bits = word
            .strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .ok_or_else(|| {
                pos.error(ParseErrorKind::InvalidNumber {
                    what,
                    text: word.clone(),
                })
            })?;
        self.punct(')')?;
        Ok(Some((pos, bits, word)))
    }

    fn bool(&mut self) -> Result<bool, ParseError> {
        let value = match &self.peek().tok {
            Tok::Word(word) if word == "true" => true,
            Tok::Word(word) if word == "false" => false,
            _ => return Err(self.expected("`true` or `false`")),
        };
        self.bump();
        Ok(value)
    }

    /// A dtype: a name such as `float32`, or `dtype(<number>)`.
    fn dtype(&mut self) -> Result<DType, ParseError> {
        let (pos, word) = self.word("a dtype")?;
        if word == "dtype" && self.eat_punct('(') {
            let number = self.number("dtype number")?;
            self.punct(')')?;
            return Ok(DType::from_number(number));
        }
        DType::parse(&word).ok_or_else(|| pos.error(ParseErrorKind::UnknownDType(word)))
    }

    fn module(&mut self) -> Result<Module, ParseError> {
        let mut module = Module::default();
        let mut seen_graph = false;
        loop {
            let pos = self.pos();
            let keyword = match &self.peek().tok {
                Tok::End => return Ok(module),
                Tok::Word(word) => word.clone(),
                _ => return Err(self.expected("a module item")),
            };
            match keyword.as_str() {
                "versions" => {
                    self.bump();
                    let mut props = self.props()?;
                    let versions = Versions {
                        producer: props.int("producer")?.unwrap_or(0),
                        min_consumer: props.int("min_consumer")?.unwrap_or(0),
                        bad_consumers: props.int_list("bad_consumers")?,
                    };
                    props.finish()?;
                    module.versions = Some(versions);
                }
                "legacy_version" => {
                    self.bump();
                    module.legacy_version = self.number("int32")?;
                }
                "debug_info" => {
                    self.bump();
                    module.debug_info = Some(self.string("a byte string")?);
                }
                "graph" => {
                    self.bump();
                    if seen_graph {
                        return Err(pos.error(ParseErrorKind::DuplicateGraph));
                    }
                    seen_graph = true;
                    module.graph = self.graph_block()?;
                }
                "function" => {
                    self.bump();
                    let function = self.function()?;
                    module.library.functions.push(function);
                }
                "gradient" | "registered_gradient" => {
                    self.bump();
                    let from = self.name("a function name")?;
                    self.punct('=')?;
                    let to = self.name("a name")?;
                    let pairs = if keyword == "gradient" {
                        &mut module.library.gradients
                    } else {
                        &mut module.library.registered_gradients
                    };
                    pairs.push((from, to));
                }
                _ => return Err(self.expected("a module item")),
            }
        }
    }

    /// `{ op* }` after `graph` or `body`.
    fn graph_block(&mut self) -> Result<Graph, ParseError> {
        self.punct('{')?;
        let mut pending = Vec::new();
        while !self.eat_punct('}') {
            pending.push(self.op_line()?);
        }
        build_graph(pending)
    }

    fn op_line(&mut self) -> Result<PendingOp, ParseError> {
        let pos = self.pos();
        let name = self.name("an op name or `}`")?;
        self.punct('=')?;
        let op = Op::from_type_name(&self.name("an op type")?);
        let mut inputs = Vec::new();
        let mut controls = Vec::new();
        if self.eat_punct('(') && !self.eat_punct(')') {
            loop {
                let input_pos = self.pos();
                if self.eat_punct('?') {
                    inputs.push(None);
                } else if self.eat_punct('^') {
                    controls.push((input_pos, self.name("an op name")?));
                } else {
                    let src = self.name("an input")?;
                    let port = self.port()?;
                    inputs.push(Some((input_pos, src, port)));
                }
                if self.eat_punct(')') {
                    break;
                }
                self.punct(',')?;
            }
        }
        let attrs = if self.at_punct('[') {
            self.attrs()?
        } else {
            Attrs::new()
        };
        let mut device = String::new();
        if self.eat_punct('@') {
            device = self.utf8_string("a device string")?;
        }
        let mut debug_info = None;
        if self.at_word("debug_info") && !self.peek().line_start {
            self.bump();
            let mut props = self.props()?;
            debug_info = Some(NodeDebugInfo {
                original_node_names: props.string_list("original_node_names")?,
                original_func_names: props.string_list("original_func_names")?,
            });
            props.finish()?;
        }
        let mut experimental_type = None;
        if self.at_word("experimental_type") && !self.peek().line_start {
            self.bump();
            self.punct('=')?;
            experimental_type = Some(self.string("a byte string")?);
        }
        if !self.peek().line_start && !self.at_punct('}') {
            return Err(self.expected("end of line"));
        }
        Ok(PendingOp {
            pos,
            name,
            op,
            inputs,
            controls,
            attrs,
            device,
            debug_info,
            experimental_type,
        })
    }

    /// The output part of an input after the source name: ``, `:3` or `:arg:1`.
    fn port(&mut self) -> Result<Port, ParseError> {
        if !self.eat_punct(':') {
            return Ok(Port::Index(0));
        }
        if *self.peek_at(1) == Tok::Punct(':') {
            let arg = self.name("an output argument name")?;
            self.punct(':')?;
            let index = self.number("output index")?;
            return Ok(Port::Named { arg, index });
        }
        Ok(Port::Index(self.number("output index")?))
    }

    /// `[key=value, ...]` as attributes.
    fn attrs(&mut self) -> Result<Attrs, ParseError> {
        Ok(self
            .props()?
            .entries
            .into_iter()
            .map(|(key, (_, _, value))| (key, value))
            .collect())
    }

    /// `[key=value, ...]`, keys unique.
    fn props(&mut self) -> Result<Props, ParseError> {
        self.punct('[')?;
        let mut entries = BTreeMap::new();
        if !self.eat_punct(']') {
            loop {
                let pos = self.pos();
                let key = self.name("a key")?;
                self.punct('=')?;
                let value_pos = self.pos();
                let value = self.value()?;
                if entries
                    .insert(key.clone(), (pos, value_pos, value))
                    .is_some()
                {
                    return Err(pos.error(ParseErrorKind::DuplicateKey(key)));
                }
                if self.eat_punct(']') {
                    break;
                }
                self.punct(',')?;
            }
        }
        Ok(Props { entries })
    }

    /// An attribute value; its syntax says its kind.
    fn value(&mut self) -> Result<AttrValue, ParseError> {
        let pos = self.pos();
        let word = match &self.peek().tok {
            Tok::Str(bytes) => {
                let bytes = bytes.clone();
                self.bump();
                return Ok(AttrValue::S(bytes));
            }
            Tok::Punct('[') | Tok::Angle(_) => return Ok(AttrValue::Shape(self.shape()?)),
            Tok::Word(word) => word.clone(),
            _ => return Err(self.expected("an attribute value")),
        };
        match word.as_str() {
            "unset" => {
                self.bump();
                Ok(AttrValue::Unset)
            }
            "true" | "false" => Ok(AttrValue::B(self.bool()?)),
            "list" => {
                self.bump();
                Ok(AttrValue::List(Box::new(self.list()?)))
            }
            "tensor" => Ok(AttrValue::Tensor(Box::new(self.tensor()?))),
            "func" => {
                self.bump();
                Ok(AttrValue::Func(Box::new(self.func()?)))
            }
            "placeholder" => {
                self.bump();
                Ok(AttrValue::Placeholder(self.name("a placeholder name")?))
            }
            "dtype" => Ok(AttrValue::Type(self.dtype()?)),
            "nan" => Ok(AttrValue::F(self.f32()?)),
            _ => {
                if let Ok(int) = word.parse::<i64>() {
                    self.bump();
                    Ok(AttrValue::I(int))
                } else if let Some(dtype) = DType::parse(&word) {
                    self.bump();
                    Ok(AttrValue::Type(dtype))
                } else if let Ok(float) = word.parse::<f32>() {
                    self.bump();
                    Ok(AttrValue::F(float))
                } else {
                    Err(pos.error(ParseErrorKind::Expected {
                        expected: "an attribute value".to_owned(),
                        found: format!("`{word}`"),
                    }))
                }
            }
        }
    }

    /// `[2,?,name=3]`, `<unknown>` or `<unknown>[...]`.
    fn shape(&mut self) -> Result<Shape, ParseError> {
        let mut shape = Shape::default();
        if let Tok::Angle(text) = &self.peek().tok {
            if text != "unknown" {
                return Err(self.expected("`<unknown>` or `[`"));
            }
            self.bump();
            shape.unknown_rank = true;
            if !self.at_punct('[') {
                return Ok(shape);
            }
        }
        self.punct('[')?;
        if self.eat_punct(']') {
            return Ok(shape);
        }
        loop {
            let mut name = String::new();
            if *self.peek_at(1) == Tok::Punct('=') {
                name = self.name("a dimension name")?;
                self.punct('=')?;
            }
            let size = if self.eat_punct('?') {
                -1
            } else {
                self.number("dimension size")?
            };
            shape.dims.push(Dim { size, name });
            if self.eat_punct(']') {
                return Ok(shape);
            }
            self.punct(',')?;
        }
    }

    /// `tensor<dtype>[shape]{values}`.
    fn tensor(&mut self) -> Result<Tensor, ParseError> {
        self.keyword("tensor")?;
        let pos = self.pos();
        let dtype = match &self.peek().tok {
            Tok::Angle(text) => {
                let text = text.clone();
                self.bump();
                parse_dtype_text(&text)
                    .ok_or_else(|| pos.error(ParseErrorKind::UnknownDType(text)))?
            }
            _ => return Err(self.expected("`<dtype>`")),
        };
        let shape = if self.at_punct('[') || matches!(self.peek().tok, Tok::Angle(_)) {
            Some(self.shape()?)
        } else {
            None
        };
        self.punct('{')?;
        let mut version_number = 0;
        if self.at_word("version") {
            self.bump();
            self.punct('=')?;
            version_number = self.number("int32")?;
            if self.eat_punct('}') {
                return Ok(Tensor {
                    dtype,
                    shape,
                    version_number,
                    values: TensorValues::Empty,
                });
            }
            self.punct(',')?;
        }
        let values = if self.at_punct('}') {
            TensorValues::Empty
        } else {
            self.tensor_values()?
        };
        self.punct('}')?;
        Ok(Tensor {
            dtype,
            shape,
            version_number,
            values,
        })
    }

    fn tensor_values(&mut self) -> Result<TensorValues, ParseError> {
        let (pos, kind) = self.word("a tensor value kind")?;
        Ok(match kind.as_str() {
            "content" => TensorValues::Content(self.string("a byte string")?),
            "float8" => TensorValues::Float8(self.string("a byte string")?),
            "half" => TensorValues::Half(self.items(|p| p.number("int32"))?),
            "float" => TensorValues::Float(self.items(Parser::f32)?),
            "double" => TensorValues::Double(self.items(Parser::f64)?),
            "int" => TensorValues::Int(self.items(|p| p.number("int32"))?),
            "strings" => TensorValues::String(self.items(|p| p.string("a string"))?),
            "scomplex" => TensorValues::SComplex(self.items(Parser::f32)?),
            "int64" => TensorValues::Int64(self.items(|p| p.number("int64"))?),
            "bool" => TensorValues::Bool(self.items(Parser::bool)?),
            "dcomplex" => TensorValues::DComplex(self.items(Parser::f64)?),
            "uint32" => TensorValues::UInt32(self.items(|p| p.number("uint32"))?),
            "uint64" => TensorValues::UInt64(self.items(|p| p.number("uint64"))?),
            _ => {
                return Err(pos.error(ParseErrorKind::Expected {
                    expected: "a tensor value kind".to_owned(),
                    found: format!("`{kind}`"),
                }));
            }
        })
    }

    /// `[item, ...]`.
    fn items<T>(
        &mut self,
        mut item: impl FnMut(&mut Parser) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.punct('[')?;
        let mut items = Vec::new();
        if self.eat_punct(']') {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat_punct(']') {
                return Ok(items);
            }
            self.punct(',')?;
        }
    }

    /// The rest of a list after `list`: `[]`, `(kind)[...]` or `{kind[...], ...}`.
    fn list(&mut self) -> Result<AttrList, ParseError> {
        let mut list = AttrList::default();
        if self.eat_punct('[') {
            self.punct(']')?;
        } else if self.eat_punct('(') {
            let (pos, kind) = self.word("a list kind")?;
            self.punct(')')?;
            self.list_part(&mut list, pos, &kind)?;
        } else if self.eat_punct('{') {
            loop {
                let (pos, kind) = self.word("a list kind")?;
                self.list_part(&mut list, pos, &kind)?;
                if self.eat_punct('}') {
                    break;
                }
                self.punct(',')?;
            }
        } else {
            return Err(self.expected("`[`, `(` or `{`"));
        }
        Ok(list)
    }

    fn list_part(&mut self, list: &mut AttrList, pos: Pos, kind: &str) -> Result<(), ParseError> {
        match kind {
            "string" => list.s = self.items(|p| p.string("a string"))?,
            "int" => list.i = self.items(|p| p.number("int64"))?,
            "float" => list.f = self.items(Parser::f32)?,
            "bool" => list.b = self.items(Parser::bool)?,
            "type" => list.types = self.items(Parser::dtype)?,
            "shape" => list.shapes = self.items(Parser::shape)?,
            "tensor" => list.tensors = self.items(Parser::tensor)?,
            "func" => list.funcs = self.items(Parser::func)?,
            _ => {
                return Err(pos.error(ParseErrorKind::Expected {
                    expected: "a list kind".to_owned(),
                    found: format!("`{kind}`"),
                }));
            }
        }
        Ok(())
    }

    /// `name` or `name[attrs]`.
    fn func(&mut self) -> Result<NameAttrList, ParseError> {
        let name = self.name("a function name")?;
        let attr = if self.at_punct('[') {
            self.attrs()?
        } else {
            Attrs::new()
        };
        Ok(NameAttrList { name, attr })
    }

    /// The rest of `function NAME { ... }`.
    fn function(&mut self) -> Result<Function, ParseError> {
        let mut function = Function::default();
        function.signature.name = self.name("a function name")?;
        self.punct('{')?;
        let mut seen_body = false;
        loop {
            if self.eat_punct('}') {
                return Ok(function);
            }
            let (pos, keyword) = self.word("a function item or `}`")?;
            match keyword.as_str() {
                "signature" => {
                    let props = self.props()?;
                    signature_props(&mut function.signature, props)?;
                }
                "input" | "output" => {
                    let arg = self.arg_def()?;
                    let args = if keyword == "input" {
                        &mut function.signature.input_args
                    } else {
                        &mut function.signature.output_args
                    };
                    args.push(arg);
                }
                "control_output" => {
                    let name = self.name("a control output name")?;
                    function.signature.control_outputs.push(name);
                }
                "attr" => {
                    let attr = self.attr_def()?;
                    function.signature.attrs.push(attr);
                }
                "attrs" => function.attr = self.attrs()?,
                "arg_attr" => {
                    let index = self.number("argument index")?;
                    let attrs = self.attrs()?;
                    function.arg_attr.insert(index, attrs);
                }
                "resource_arg_unique_id" => {
                    let index = self.number("argument index")?;
                    self.punct('=')?;
                    let id = self.number("unique id")?;
                    function.resource_arg_unique_id.insert(index, id);
                }
                "body" if !seen_body => {
                    seen_body = true;
                    function.body = self.graph_block()?;
                }
                "ret" | "control_ret" => {
                    let name = self.name("an output name")?;
                    self.punct('=')?;
                    let target = self.utf8_string("a string")?;
                    let map = if keyword == "ret" {
                        &mut function.ret
                    } else {
                        &mut function.control_ret
                    };
                    map.insert(name, target);
                }
                _ => {
                    return Err(pos.error(ParseErrorKind::Expected {
                        expected: "a function item or `}`".to_owned(),
                        found: format!("`{keyword}`"),
                    }));
                }
            }
        }
    }

    /// `NAME` or `NAME[props]` of an `input` or `output` line.
    fn arg_def(&mut self) -> Result<ArgDef, ParseError> {
        let name = self.name("an argument name")?;
        let mut arg = ArgDef {
            name,
            ..ArgDef::default()
        };
        if !self.at_punct('[') {
            return Ok(arg);
        }
        let mut props = self.props()?;
        arg.description = props.utf8("description")?.unwrap_or_default();
        arg.experimental_full_type = props.bytes("experimental_full_type")?;
        if let Some((pos, list)) = props.list("handle_data")? {
            if list.types.len() != list.shapes.len() {
                return Err(pos.error(ParseErrorKind::WrongKind {
                    key: "handle_data".to_owned(),
                    expected: "a list of as many types as shapes",
                    found: list.kind(),
                }));
            }
            arg.handle_data = list.types.into_iter().zip(list.shapes).collect();
        }
        arg.is_ref = props.bool("is_ref")?.unwrap_or(false);
        arg.number_attr = props.utf8("number_attr")?.unwrap_or_default();
        arg.dtype = props.dtype("type")?.unwrap_or_default();
        arg.type_attr = props.utf8("type_attr")?.unwrap_or_default();
        arg.type_list_attr = props.utf8("type_list_attr")?.unwrap_or_default();
        props.finish()?;
        Ok(arg)
    }

    /// `NAME` or `NAME[props]` of an `attr` line.
    fn attr_def(&mut self) -> Result<AttrDef, ParseError> {
        let name = self.name("an attribute name")?;
        let mut attr = AttrDef {
            name,
            ..AttrDef::default()
        };
        if !self.at_punct('[') {
            return Ok(attr);
        }
        let mut props = self.props()?;
        attr.allowed_values = props.take("allowed").map(|(_, value)| value);
        attr.default_value = props.take("default").map(|(_, value)| value);
        attr.description = props.utf8("description")?.unwrap_or_default();
        attr.has_minimum = props.bool("has_minimum")?.unwrap_or(false);
        attr.minimum = props.int("minimum")?.unwrap_or(0);
        attr.ty = props.utf8("ty")?.unwrap_or_default();
        props.finish()?;
        Ok(attr)
    }
}

fn signature_props(signature: &mut Signature, mut props: Props) -> Result<(), ParseError> {
    signature.allows_uninitialized_input =
        props.bool("allows_uninitialized_input")?.unwrap_or(false);
    let version = props.int("deprecation_version")?;
    let explanation = props.utf8("deprecation_explanation")?;
    if version.is_some() || explanation.is_some() {
        signature.deprecation = Some((version.unwrap_or(0), explanation.unwrap_or_default()));
    }
    signature.description = props.utf8("description")?.unwrap_or_default();
    signature.is_aggregate = props.bool("is_aggregate")?.unwrap_or(false);
    signature.is_commutative = props.bool("is_commutative")?.unwrap_or(false);
    signature.is_distributed_communication =
        props.bool("is_distributed_communication")?.unwrap_or(false);
    signature.is_stateful = props.bool("is_stateful")?.unwrap_or(false);
    signature.summary = props.utf8("summary")?.unwrap_or_default();
    props.finish()
}

/// Parses the text inside `tensor<...>`: a dtype name or `dtype(<number>)`.
fn parse_dtype_text(text: &str) -> Option<DType> {
    if let Some(number) = text
        .strip_prefix("dtype(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        return number.parse().ok().map(DType::from_number);
    }
    DType::parse(text)
}

/// Creates the ops in line order, then connects inputs by name.
fn build_graph(pending: Vec<PendingOp>) -> Result<Graph, ParseError> {
    let mut graph = Graph::new();
    let mut ids = Vec::with_capacity(pending.len());
    for op in &pending {
        let id = graph
            .add_op(
                op.name.clone(),
                op.op.clone(),
                op.device.clone(),
                op.attrs.clone(),
            )
            .map_err(|_| op.pos.error(ParseErrorKind::DuplicateOp(op.name.clone())))?;
        let mut node = graph.op_mut(id);
        *node.debug_info() = op.debug_info.clone().map(Box::new);
        *node.experimental_type() = op.experimental_type.clone().map(Vec::into_boxed_slice);
        ids.push(id);
    }
    for (op, &dst) in pending.iter().zip(&ids) {
        let find = |pos: Pos, name: &str| {
            graph.find(name).ok_or_else(|| {
                pos.error(ParseErrorKind::UndefinedOp {
                    op: op.name.clone(),
                    name: name.to_owned(),
                })
            })
        };
        let mut connections = Vec::new();
        for (slot, input) in op.inputs.iter().enumerate() {
            if let Some((pos, src, port)) = input {
                connections.push((find(*pos, src)?, port.clone(), slot as u32));
            }
        }
        let controls = op
            .controls
            .iter()
            .map(|(pos, src)| find(*pos, src))
            .collect::<Result<Vec<_>, _>>()?;
        for (src, port, slot) in connections {
            graph
                .connect(src, port, dst, slot)
                .expect("each slot of a freshly parsed op is connected once");
        }
        for src in controls {
            graph.add_control(src, dst);
        }
    }
    Ok(graph)
}

impl Props {
    /// Removes `key`, returning the position of its value and the value.
    fn take(&mut self, key: &str) -> Option<(Pos, AttrValue)> {
        self.entries
            .remove(key)
            .map(|(_, value_pos, value)| (value_pos, value))
    }

    fn wrong(pos: Pos, key: &str, expected: &'static str, value: &AttrValue) -> ParseError {
        pos.error(ParseErrorKind::WrongKind {
            key: key.to_owned(),
            expected,
            found: value.kind(),
        })
    }

    fn int<T: TryFrom<i64>>(&mut self, key: &str) -> Result<Option<T>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((pos, AttrValue::I(value))) => T::try_from(value).map(Some).map_err(|_| {
                pos.error(ParseErrorKind::InvalidNumber {
                    what: "int32",
                    text: value.to_string(),
                })
            }),
            Some((pos, value)) => Err(Props::wrong(pos, key, "an int", &value)),
        }
    }

    fn bool(&mut self, key: &str) -> Result<Option<bool>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((_, AttrValue::B(value))) => Ok(Some(value)),
            Some((pos, value)) => Err(Props::wrong(pos, key, "a bool", &value)),
        }
    }

    fn dtype(&mut self, key: &str) -> Result<Option<DType>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((_, AttrValue::Type(value))) => Ok(Some(value)),
            Some((pos, value)) => Err(Props::wrong(pos, key, "a type", &value)),
        }
    }

    fn bytes(&mut self, key: &str) -> Result<Option<Vec<u8>>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((_, AttrValue::S(value))) => Ok(Some(value)),
            Some((pos, value)) => Err(Props::wrong(pos, key, "a string", &value)),
        }
    }

    fn utf8(&mut self, key: &str) -> Result<Option<String>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((pos, AttrValue::S(bytes))) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| pos.error(ParseErrorKind::InvalidUtf8)),
            Some((pos, value)) => Err(Props::wrong(pos, key, "a string", &value)),
        }
    }

    fn list(&mut self, key: &str) -> Result<Option<(Pos, AttrList)>, ParseError> {
        match self.take(key) {
            None => Ok(None),
            Some((pos, AttrValue::List(list))) => Ok(Some((pos, *list))),
            Some((pos, value)) => Err(Props::wrong(pos, key, "a list", &value)),
        }
    }

    fn int_list(&mut self, key: &str) -> Result<Vec<i32>, ParseError> {
        let Some((pos, list)) = self.list(key)? else {
            return Ok(Vec::new());
        };
        if list.len() != list.i.len() {
            return Err(Props::wrong(
                pos,
                key,
                "a list(int)",
                &AttrValue::List(Box::new(list)),
            ));
        }
        list.i
            .iter()
            .map(|&value| {
                i32::try_from(value).map_err(|_| {
                    pos.error(ParseErrorKind::InvalidNumber {
                        what: "int32",
                        text: value.to_string(),
                    })
                })
            })
            .collect()
    }

    fn string_list(&mut self, key: &str) -> Result<Vec<String>, ParseError> {
        let Some((pos, list)) = self.list(key)? else {
            return Ok(Vec::new());
        };
        if list.len() != list.s.len() {
            return Err(Props::wrong(
                pos,
                key,
                "a list(string)",
                &AttrValue::List(Box::new(list)),
            ));
        }
        list.s
            .into_iter()
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|_| pos.error(ParseErrorKind::InvalidUtf8))
            })
            .collect()
    }

    /// Fails on the first key nobody took.
    fn finish(self) -> Result<(), ParseError> {
        match self.entries.into_iter().next() {
            None => Ok(()),
            Some((key, (pos, _, _))) => Err(pos.error(ParseErrorKind::UnknownProperty(key))),
        }
    }
}

impl Module {
    /// Parses the canonical text form; see [`parse_module`].
    pub fn parse(text: &str) -> Result<Module, ParseError> {
        parse_module(text)
    }
}
