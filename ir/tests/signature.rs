//! Checks the hand-written op signature table against the OpDefs TF 2.21 registered, read from
//! `tests/fixtures/tf-2.21/meta/op_defs.pbtxt` with a small text-format reader.

use std::path::Path;

use saveplan_ir::signature::{
    self, ArgSig, ArgType, AttrDefault, AttrSig, ElemType, OpSignature, SIGNATURES,
};

/// A text-format field value: a scalar token or a nested message.
#[derive(Debug)]
enum Value {
    Scalar(String),
    Message(Message),
}

/// A text-format message: its fields in file order.
#[derive(Debug, Default)]
struct Message {
    fields: Vec<(String, Value)>,
}

impl Message {
    /// Returns every value of field `name`.
    fn all(&self, name: &str) -> Vec<&Value> {
        self.fields
            .iter()
            .filter(|(field, _)| field == name)
            .map(|(_, value)| value)
            .collect()
    }

    /// Returns every nested message of field `name`.
    fn messages(&self, name: &str) -> Vec<&Message> {
        self.all(name)
            .into_iter()
            .map(|value| match value {
                Value::Message(message) => message,
                Value::Scalar(scalar) => {
                    panic!("field {name} is the scalar {scalar}, not a message")
                }
            })
            .collect()
    }

    /// Returns the scalar field `name`, if present.
    fn scalar(&self, name: &str) -> Option<&str> {
        self.all(name).first().map(|value| match value {
            Value::Scalar(scalar) => scalar.as_str(),
            Value::Message(_) => panic!("field {name} is a message, not a scalar"),
        })
    }

    /// Returns the single nested message `name`, if present.
    fn message(&self, name: &str) -> Option<&Message> {
        self.messages(name).first().copied()
    }

    /// Returns whether the bool field `name` is `true`.
    fn flag(&self, name: &str) -> bool {
        self.scalar(name) == Some("true")
    }
}

/// Splits text-format source into tokens: `{`, `}`, `:`, quoted strings (unquoted, without
/// escapes, which the fixture does not use) and bare words.
fn tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' | '}' | ':' => tokens.push(c.to_string()),
            '"' => {
                let quoted: String = chars.by_ref().take_while(|&c| c != '"').collect();
                tokens.push(format!("\"{quoted}"));
            }
            c if c.is_whitespace() => {}
            c => {
                let mut word = c.to_string();
                while let Some(&next) = chars.peek() {
                    if next.is_whitespace() || "{}:\"".contains(next) {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                tokens.push(word);
            }
        }
    }
    tokens
}

/// Parses fields from `tokens` until a `}` or the end.
fn parse_message(tokens: &mut std::slice::Iter<'_, String>) -> Message {
    let mut message = Message::default();
    while let Some(name) = tokens.next() {
        if name == "}" {
            break;
        }
        let mut next = tokens.next().expect("a value after a field name");
        if next == ":" {
            next = tokens.next().expect("a value after `:`");
        }
        let value = if next == "{" {
            Value::Message(parse_message(tokens))
        } else {
            Value::Scalar(next.strip_prefix('"').unwrap_or(next).to_owned())
        };
        message.fields.push((name.clone(), value));
    }
    message
}

/// Reads the OpDefs fixture.
fn op_defs() -> Message {
    op_list("../tests/fixtures/tf-2.21/meta/op_defs.pbtxt")
}

/// TF 2.21's OpDefs of the modelled ops the shared fixture does not list, written by
/// `tests/fixtures/generators/gen_op_defs_extra.py`.
fn extra_op_defs() -> Message {
    op_list("../tests/fixtures/saveplan/op_defs_extra.pbtxt")
}

fn op_list(relative: &str) -> Message {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let tokens = tokens(&text);
    parse_message(&mut tokens.iter())
}

/// Converts `DT_STRING` to TF's dtype name `string`.
fn dtype_name(dt: &str) -> String {
    dt.strip_prefix("DT_")
        .unwrap_or_else(|| panic!("{dt} is not a DT_ enum"))
        .to_ascii_lowercase()
}

/// The dtype of each tensor of an argument, borrowed from either the table or the OpDef.
#[derive(Debug, PartialEq)]
enum Elem<'a> {
    Fixed(&'a str),
    Attr(&'a str),
}

impl<'a> From<ElemType> for Elem<'a> {
    fn from(elem: ElemType) -> Elem<'a> {
        match elem {
            ElemType::Fixed(dtype) => Elem::Fixed(dtype),
            ElemType::Attr(attr) => Elem::Attr(attr),
        }
    }
}

/// Checks one `input_arg` / `output_arg` against the table.
fn check_arg(op: &str, def: &Message, arg: &ArgSig) {
    let name = def.scalar("name").expect("arg name");
    assert_eq!(arg.name, name, "{op}: arg name");
    let fixed = def.scalar("type").map(dtype_name);
    let type_attr = def.scalar("type_attr");
    let elem = match (&fixed, type_attr) {
        (Some(dtype), None) => Some(Elem::Fixed(dtype)),
        (None, Some(attr)) => Some(Elem::Attr(attr)),
        _ => None,
    };
    let matches = match (
        arg.ty,
        def.scalar("number_attr"),
        def.scalar("type_list_attr"),
    ) {
        (ArgType::Fixed(dtype), None, None) => elem == Some(Elem::Fixed(dtype)),
        (ArgType::Attr(attr), None, None) => !def.flag("is_ref") && elem == Some(Elem::Attr(attr)),
        (ArgType::RefAttr(attr), None, None) => {
            def.flag("is_ref") && elem == Some(Elem::Attr(attr))
        }
        (
            ArgType::Repeated {
                number_attr,
                elem: table_elem,
            },
            Some(number),
            None,
        ) => number_attr == number && elem == Some(table_elem.into()),
        (ArgType::List(list_attr), None, Some(list)) => list_attr == list && elem.is_none(),
        _ => false,
    };
    assert!(
        matches,
        "{op}: arg {name}: table {:?} vs OpDef {def:?}",
        arg.ty
    );
}

/// Converts an OpDef `default_value` to the table's form.
fn default_value(op: &str, def: &Message) -> AttrDefault {
    let (field, value) = def.fields.first().expect("non-empty default_value");
    match (field.as_str(), value) {
        ("b", Value::Scalar(b)) => AttrDefault::Bool(b == "true"),
        ("i", Value::Scalar(i)) => AttrDefault::Int(i.parse().expect("int default")),
        ("s", Value::Scalar(s)) => AttrDefault::String(s.clone().leak()),
        ("list", Value::Message(list)) if list.fields.is_empty() => AttrDefault::EmptyList,
        ("shape", Value::Message(shape)) if shape.flag("unknown_rank") => {
            AttrDefault::UnknownRankShape
        }
        ("type", Value::Scalar(dt)) => AttrDefault::Type(dtype_name(dt).leak()),
        _ => panic!("{op}: unexpected default {def:?}"),
    }
}

/// Checks one `attr` against the table.
fn check_attr(op: &str, def: &Message, attr: &AttrSig) {
    let name = def.scalar("name").expect("attr name");
    assert_eq!(attr.name, name, "{op}: attr name");
    assert_eq!(Some(attr.ty), def.scalar("type"), "{op}: attr {name} type");
    let minimum = def.flag("has_minimum").then(|| {
        def.scalar("minimum")
            .map_or(0, |min| min.parse().expect("int minimum"))
    });
    assert_eq!(attr.minimum, minimum, "{op}: attr {name} minimum");
    let default = def
        .message("default_value")
        .map(|value| default_value(op, value));
    assert_eq!(attr.default, default, "{op}: attr {name} default");
    let allowed: Vec<String> = def
        .message("allowed_values")
        .and_then(|values| values.message("list"))
        .map(|list| {
            list.all("type")
                .into_iter()
                .map(|value| match value {
                    Value::Scalar(dt) => dtype_name(dt),
                    Value::Message(_) => panic!("{op}: attr {name}: nested allowed type"),
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(attr.allowed, allowed, "{op}: attr {name} allowed values");
}

/// Checks a whole OpDef against the table entry.
fn check_op(def: &Message, sig: &OpSignature) {
    let op = sig.name;
    let inputs = def.messages("input_arg");
    let outputs = def.messages("output_arg");
    let attrs = def.messages("attr");
    assert_eq!(sig.inputs.len(), inputs.len(), "{op}: number of inputs");
    assert_eq!(sig.outputs.len(), outputs.len(), "{op}: number of outputs");
    assert_eq!(sig.attrs.len(), attrs.len(), "{op}: number of attrs");
    for (def, arg) in inputs.iter().zip(sig.inputs) {
        check_arg(op, def, arg);
    }
    for (def, arg) in outputs.iter().zip(sig.outputs) {
        check_arg(op, def, arg);
    }
    for (def, attr) in attrs.iter().zip(sig.attrs) {
        check_attr(op, def, attr);
    }
    assert_eq!(
        sig.is_stateful,
        def.flag("is_stateful"),
        "{op}: is_stateful"
    );
    assert_eq!(
        sig.is_distributed_communication,
        def.flag("is_distributed_communication"),
        "{op}: is_distributed_communication"
    );
}

#[test]
fn table_matches_registered_op_defs() {
    let defs = op_defs();
    let mut names = Vec::new();
    for def in defs.messages("op") {
        let name = def.scalar("name").expect("op name");
        let sig = signature::signature(name).unwrap_or_else(|| panic!("table lacks op {name}"));
        check_op(def, sig);
        names.push(name);
    }
    assert_eq!(names.len(), 24, "ops in op_defs.pbtxt: {names:?}");
    let extra = extra_op_defs();
    for def in extra.messages("op") {
        let name = def.scalar("name").expect("op name");
        let sig = signature::signature(name).unwrap_or_else(|| panic!("table lacks op {name}"));
        check_op(def, sig);
        names.push(name);
    }
    assert_eq!(names.len(), 32, "ops in both OpDef files: {names:?}");
    for sig in SIGNATURES {
        assert!(
            names.contains(&sig.name),
            "table op {} is in neither OpDef file",
            sig.name
        );
    }
}

#[test]
fn reader_sees_known_fields() {
    // Guards the reader itself: a broken tokenizer could make every comparison vacuous.
    let defs = op_defs();
    let save = defs
        .messages("op")
        .into_iter()
        .find(|def| def.scalar("name") == Some("SaveV2"))
        .expect("SaveV2 in op_defs.pbtxt");
    assert_eq!(save.messages("input_arg").len(), 4);
    assert!(save.flag("is_stateful"));
    let tensors = save.messages("input_arg")[3];
    assert_eq!(tensors.scalar("type_list_attr"), Some("dtypes"));
}
