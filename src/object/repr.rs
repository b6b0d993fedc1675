//! The text TensorFlow's messages are made of: node names and paths
//! (`ObjectGraphProtoPrettyPrinter`), Python reprs of shapes, lists and variables (numpy's
//! array text).

use saveplan_ir::DType;
use saveplan_ir::object_graph::{NodeId, ObjectGraph, ObjectNode, PathTree, VARIABLE_VALUE};

use super::status::TensorType;
use super::values::OurValue;

/// Each node's name ([`node_names`]) and path ([`segment_paths`]), from one walk of the
/// graph's first-discovered paths.
pub(crate) fn names_and_paths(graph: &ObjectGraph) -> (Vec<String>, Vec<Vec<String>>) {
    let tree = graph.path_tree();
    (node_names(graph, &tree), segment_paths(graph, &tree))
}

/// TensorFlow's names of nodes (`ObjectGraphProtoPrettyPrinter.node_names`): `(root)` and the
/// first-discovered path's local names joined with `.`; a slot variable
/// `<optimizer>'s state '<slot>' for <variable>`, its optimizer and variable named by their own
/// paths (`node N` for one no child edge reaches) where TensorFlow names them recursively: a
/// chain of slots, each the optimizer of the next, doubled the name per link. Each name is its
/// parent's and one local name, built once.
fn node_names(graph: &ObjectGraph, tree: &PathTree<'_>) -> Vec<String> {
    let own: Vec<Option<String>> = tree.fold("(root)".to_owned(), |parent, name| {
        format!("{parent}.{name}")
    });
    let own_name = |id: NodeId| own[id.index()].clone().unwrap_or_else(|| id.to_string());
    let mut names: Vec<String> = own
        .iter()
        .map(|name| name.clone().unwrap_or_default())
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        for slot in &node.slot_variables {
            names[slot.slot_variable_node_id.index()] = format!(
                "{}'s state '{}' for {}",
                own_name(NodeId(optimizer as u32)),
                slot.slot_name,
                own_name(slot.original_variable_node_id)
            );
        }
    }
    names
}

/// Each node's path as local names; a slot variable's is its variable's own path and
/// `<slot> of <optimizer path>` (`node N` for an optimizer no child edge reaches).
fn segment_paths(graph: &ObjectGraph, tree: &PathTree<'_>) -> Vec<Vec<String>> {
    let own_path =
        |id: NodeId| -> Vec<String> { tree.path(id).into_iter().map(str::to_owned).collect() };
    let mut paths: Vec<Vec<String>> = (0..graph.nodes().len())
        .map(|idx| own_path(NodeId(idx as u32)))
        .collect();
    for (optimizer, node) in graph.nodes().iter().enumerate() {
        let optimizer = NodeId(optimizer as u32);
        for slot in &node.slot_variables {
            let optimizer_path = if tree.is_reached(optimizer) {
                display_path(&tree.path(optimizer))
            } else {
                optimizer.to_string()
            };
            let mut path = own_path(slot.original_variable_node_id);
            path.push(format!("{} of {optimizer_path}", slot.slot_name));
            paths[slot.slot_variable_node_id.index()] = path;
        }
    }
    paths
}

pub(crate) fn tensor_type((dtype, shape): (DType, Vec<i64>)) -> TensorType {
    TensorType {
        dtype: dtype.to_string(),
        shape,
    }
}

/// A shape as Python prints a tuple: `()`, `(2,)`, `(2, 3)`.
pub(crate) fn python_shape(shape: &[i64]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A list of strings as Python prints it: `['a', 'b']`.
pub(crate) fn python_list(names: &[&str]) -> String {
    let items: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
    format!("[{}]", items.join(", "))
}

/// `repr()` of one of our objects: a variable's (one `VARIABLE_VALUE`) as an eager `tf.Variable`'s,
/// anything else `<object (root).path>`.
pub(crate) fn node_repr<'a>(
    node: &ObjectNode,
    name: &str,
    value_of: &dyn Fn(&str) -> &'a dyn OurValue,
) -> String {
    match node.attributes.as_slice() {
        [attribute] if attribute.name == VARIABLE_VALUE => {
            variable_repr(&attribute.full_name, value_of(&attribute.checkpoint_key))
        }
        _ => format!("<object {name}>"),
    }
}

/// `repr()` of an eager `tf.Variable`:
/// `<tf.Variable 'Variable:0' shape=(2,) dtype=float32, numpy=array([0., 0.], dtype=float32)>`.
fn variable_repr(full_name: &str, value: &dyn OurValue) -> String {
    let numpy = numpy_repr(value);
    // Python puts a multi-line array on a line of its own.
    let newline = if numpy.contains('\n') { "\n" } else { "" };
    format!(
        "<tf.Variable '{full_name}:0' shape={} dtype={}, numpy={newline}{numpy}>",
        python_shape(&shape_of(value)),
        value.dtype(),
    )
}

/// numpy's `repr` of a value (scalars as numbers, arrays as `array([...], dtype=…)`, one row per
/// line for two and more dimensions, without numpy's wrapping of long rows).
fn numpy_repr(value: &dyn OurValue) -> String {
    let Some(elements) = elements(value) else {
        return "...".to_owned();
    };
    if value.dims().is_empty() {
        return elements
            .first()
            .map_or_else(String::new, |e| e.scalar.clone());
    }
    let items: Vec<&str> = elements.iter().map(|e| e.array.as_str()).collect();
    let body = nest(value.dims(), &items, 0);
    let dtype = value.dtype();
    if matches!(dtype, DType::Double | DType::Int64 | DType::Bool) {
        format!("array({body})")
    } else {
        format!("array({body}, dtype={dtype})")
    }
}

struct Element {
    scalar: String,
    array: String,
}

/// Nests `items` into numpy's array text: `, ` between elements of the last axis; between
/// sub-arrays a comma, one newline per inner axis and the indent of `array(` plus the depth.
fn nest(shape: &[u64], items: &[&str], depth: usize) -> String {
    match shape {
        [] => items.first().copied().unwrap_or_default().to_owned(),
        [_] => format!("[{}]", items.join(", ")),
        [first, rest @ ..] => {
            let stride = items.len() / (*first).max(1) as usize;
            let parts: Vec<String> = (0..*first as usize)
                .map(|i| nest(rest, &items[i * stride..(i + 1) * stride], depth + 1))
                .collect();
            let separator = format!(",{}{}", "\n".repeat(rest.len()), " ".repeat(7 + depth));
            format!("[{}]", parts.join(&separator))
        }
    }
}

fn elements(value: &dyn OurValue) -> Option<Vec<Element>> {
    let bytes = value.bytes()?;
    let float = |x: f64, text: String| Element {
        array: if x.fract() == 0.0 && x.is_finite() && x.abs() < 1e16 {
            format!("{}.", x as i64)
        } else {
            text.clone()
        },
        scalar: text,
    };
    let int = |text: String| Element {
        array: text.clone(),
        scalar: text,
    };
    Some(match value.dtype() {
        DType::Float => bytes
            .chunks_exact(4)
            .map(|c| {
                let x = f32::from_le_bytes(c.try_into().expect("4 bytes"));
                float(f64::from(x), format!("{x:?}"))
            })
            .collect(),
        DType::Double => bytes
            .chunks_exact(8)
            .map(|c| {
                let x = f64::from_le_bytes(c.try_into().expect("8 bytes"));
                float(x, format!("{x:?}"))
            })
            .collect(),
        DType::Int32 => bytes
            .chunks_exact(4)
            .map(|c| int(i32::from_le_bytes(c.try_into().expect("4 bytes")).to_string()))
            .collect(),
        DType::Int64 => bytes
            .chunks_exact(8)
            .map(|c| int(i64::from_le_bytes(c.try_into().expect("8 bytes")).to_string()))
            .collect(),
        DType::Bool => bytes
            .iter()
            .map(|b| int(if *b != 0 { "True" } else { "False" }.to_owned()))
            .collect(),
        _ => return None,
    })
}

/// A value's shape as signed dimensions, as checkpoints store shapes.
pub(crate) fn shape_of(value: &dyn OurValue) -> Vec<i64> {
    value.dims().iter().map(|&dim| dim as i64).collect()
}

/// The path TensorFlow's messages use for an object: `(root)` and the local names joined with
/// `.` (`(root).model.kernel`).
pub fn display_path(names: &[&str]) -> String {
    std::iter::once("(root)")
        .chain(names.iter().copied())
        .collect::<Vec<_>>()
        .join(".")
}
