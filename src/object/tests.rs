//! The object layer on its own: matching plain data (an index and object graph built here, no
//! bundle), by object and by name, and restore-on-create's bookkeeping.

use std::collections::BTreeMap;

use saveplan_ir::DType;
use saveplan_ir::object_graph::ObjectGraph;

use super::{
    NewValues, Object, ObjectError, OurValue, Ours, RestoreKind, StoredEntry, StoredIndex, Theirs,
    build_object_graph, failure, match_stored,
};

/// A float32 value of the given shape, as a test's value of ours.
struct Value(Vec<u64>);

impl OurValue for Value {
    fn dtype(&self) -> DType {
        DType::Float
    }

    fn dims(&self) -> &[u64] {
        &self.0
    }

    fn bytes(&self) -> Option<&[u8]> {
        None
    }
}

/// `model.kernel` and `model.bias`, with a value each of shape `[2]`.
fn ours() -> (ObjectGraph, BTreeMap<String, Value>) {
    let model = Object::new()
        .child("kernel", &Object::variable("kernel"))
        .child("bias", &Object::variable("bias"));
    let graph = build_object_graph(&Object::new().child("model", &model)).unwrap();
    let values = ["model/kernel", "model/bias"]
        .map(|path| (format!("{path}/.ATTRIBUTES/VARIABLE_VALUE"), Value(vec![2])))
        .into_iter()
        .collect();
    (graph, values)
}

fn node_text(_: &saveplan_ir::object_graph::ObjectNode) -> String {
    "node".to_owned()
}

const SHAPE_2: &[i64] = &[2];
const SCALAR: &[i64] = &[];

#[test]
fn an_index_is_sorted_and_looked_up_by_key() {
    let entry = |key, shape| StoredEntry {
        key,
        dtype: DType::Float,
        shape,
    };
    let index = StoredIndex::new([
        entry("b", SHAPE_2),
        entry("a", SCALAR),
        entry("b/x", SCALAR),
    ]);
    assert_eq!(index.entry("a"), Some(entry("a", SCALAR)));
    assert_eq!(index.entry("c"), None);
    let keys: Vec<&str> = index.entries_from("b").iter().map(|e| e.key).collect();
    assert_eq!(keys, ["b", "b/x"]);
}

#[test]
fn by_object_the_checkpoints_keys_are_read_and_a_mismatch_is_found_before_reading() {
    let (graph, values) = ours();
    let ours = Ours {
        graph: &graph,
        values: &values,
        save_counter: None,
    };
    // The checkpoint stores the same objects; the bias with another shape.
    let theirs = graph.clone();
    let index = StoredIndex::new([
        StoredEntry {
            key: "model/bias/.ATTRIBUTES/VARIABLE_VALUE",
            dtype: DType::Float,
            shape: SCALAR,
        },
        StoredEntry {
            key: "model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            dtype: DType::Float,
            shape: SHAPE_2,
        },
    ]);
    let theirs = Theirs {
        graph: &theirs,
        node_text,
    };
    let matched = match_stored(&ours, Some(theirs), &index, "p", RestoreKind::Read).unwrap();
    assert_eq!(matched.pairs.len(), 2);
    assert_eq!(matched.report.counts.matched, 1);
    assert_eq!(matched.report.counts.mismatched, 1);
    assert!(!matched.report.name_based);
    let error = failure(&matched.pairs).expect("the bias's shape differs");
    assert!(matches!(error, ObjectError::RestoreShape { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        "`(root).model.bias`: received incompatible tensor with shape () when attempting to restore variable with shape (2,)"
    );
}

#[test]
fn by_name_full_names_are_keys_and_a_missing_one_fails_the_assertions() {
    let (graph, values) = ours();
    let ours = Ours {
        graph: &graph,
        values: &values,
        save_counter: None,
    };
    let index = StoredIndex::new([
        StoredEntry {
            key: "kernel",
            dtype: DType::Float,
            shape: SHAPE_2,
        },
        StoredEntry {
            key: "global_step",
            dtype: DType::Int64,
            shape: SCALAR,
        },
    ]);
    let matched = match_stored(&ours, None, &index, "p", RestoreKind::Read).unwrap();
    assert!(matched.report.name_based);
    assert_eq!(matched.status.name_based_prefix(), Some("p"));
    let counts = matched.report.counts;
    assert_eq!((counts.matched, counts.unused, counts.missing), (1, 1, 1));
    assert_eq!(matched.pairs[0].checkpoint_key, "kernel");
    assert!(failure(&matched.pairs).is_none());
    let consumed = matched.status.assert_consumed().unwrap_err();
    assert!(consumed.message.contains("['bias']"), "{consumed}");
}

#[test]
fn restore_on_create_takes_each_new_value_from_the_newest_restore() {
    let (graph, values) = ours();
    let ours = Ours {
        graph: &graph,
        values: &values,
        save_counter: None,
    };
    let index = StoredIndex::new([StoredEntry {
        key: "model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        dtype: DType::Float,
        shape: SHAPE_2,
    }]);
    let theirs = Theirs {
        graph: &graph,
        node_text,
    };
    let kernel = "model/kernel/.ATTRIBUTES/VARIABLE_VALUE".to_owned();
    let mut new_values = NewValues::new([kernel.clone()]);
    // Newest first: the second restore offers the kernel again, and gives nothing.
    for taken in [1, 0] {
        let matched = match_stored(&ours, Some(theirs), &index, "p", RestoreKind::Read).unwrap();
        assert_eq!(new_values.take(matched.pairs).unwrap().len(), taken);
    }
    assert_eq!(new_values.into_keys(), [kernel]);
}
