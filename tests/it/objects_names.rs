//! Name-based restore (FORMATS.md 13.13) against TensorFlow's `obj/o5_name_based`: a TF1
//! `Saver` checkpoint (no object graph) restored by `Checkpoint::restore` matches variables by
//! their `full_name`, restores late-attached objects, and its status passes or fails with
//! TensorFlow's exact messages (`expected.json`).

use saveplan::checkpoint::{
    Assertion, Checkpoint, CheckpointError, LoadStatus, ObjectError, ObjectSpec, RestoreKind,
    ValueStatus,
};
use saveplan::exec::HostTensor;
use saveplan_ir::DType;
use serde_json::Value;

use crate::support::objects::assert_status_checks;
use crate::support::{fixture, fixture_json};

const O5: &str = "obj/o5_name_based";

fn tf1_prefix() -> String {
    fixture(&format!("{O5}/tf1/model"))
        .to_string_lossy()
        .into_owned()
}

fn scenario(name: &str) -> Value {
    fixture_json(&format!("{O5}/expected.json"))[name].clone()
}

/// A `Checkpoint(model=m)` of zero-valued variables: (attribute of `m`, `tf.Variable` name,
/// dtype, shape).
fn model(variables: &[(&str, &str, DType, &[u64])]) -> Checkpoint {
    let entries: Vec<Value> = variables
        .iter()
        .map(|(attr, name, dtype, shape)| {
            serde_json::json!({"path": ["model", attr], "name": name,
                               "dtype": dtype.to_string(), "shape": shape})
        })
        .collect();
    let spec = ObjectSpec::parse(&serde_json::json!({ "objects": entries }).to_string()).unwrap();
    spec.fresh_checkpoint().unwrap()
}

fn value(checkpoint: &Checkpoint, attr: &str) -> HostTensor {
    checkpoint.values()[&format!("model/{attr}/.ATTRIBUTES/VARIABLE_VALUE")].clone()
}

/// The values of a float32 tensor as `expected.json` nests them (flattened).
fn f32_values(tensor: &HostTensor) -> Vec<f64> {
    tensor
        .bytes()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
        .collect()
}

fn flat(value: &Value) -> Vec<f64> {
    match value {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        other => vec![other.as_f64().unwrap()],
    }
}

fn i64_value(tensor: &HostTensor) -> i64 {
    i64::from_le_bytes(tensor.bytes().unwrap().try_into().unwrap())
}

/// A name-based status whose assertions are those of `expected`.
fn assert_name_based_status(status: &LoadStatus, expected: &Value, what: &str) {
    assert_eq!(expected["type"], "NameBasedSaverStatus");
    assert!(status.is_name_based(), "{what}");
    assert_status_checks(status, expected, what);
}

#[test]
fn n1_names_match_restore_now_and_on_attach() {
    let expected = scenario("n1_names_match");
    let mut checkpoint = model(&[
        ("kernel", "dense/kernel", DType::Float, &[2, 2]),
        ("bias", "dense/bias", DType::Float, &[2]),
    ]);
    let status = checkpoint.restore(Some(&tf1_prefix())).unwrap();
    assert_name_based_status(&status, &expected["status"], "n1");
    let after = &expected["values_right_after_restore"];
    assert_eq!(
        f32_values(&value(&checkpoint, "kernel")),
        flat(&after["kernel"])
    );
    assert_eq!(
        f32_values(&value(&checkpoint, "bias")),
        flat(&after["bias"])
    );
    assert_eq!(
        checkpoint.save_counter(),
        Some(expected["save_counter_after"].as_i64().unwrap())
    );

    // `m.step` (global_step) and `m.other` (not_in_ckpt) attached after the restore.
    let grown = model(&[
        ("kernel", "dense/kernel", DType::Float, &[2, 2]),
        ("bias", "dense/bias", DType::Float, &[2]),
        ("step", "global_step", DType::Int64, &[]),
        ("other", "not_in_ckpt", DType::Int64, &[]),
    ]);
    let new_values = grown
        .values()
        .iter()
        .filter(|(key, _)| key.contains("/step/") || key.contains("/other/"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let restored = checkpoint
        .attach(grown.graph().clone(), new_values)
        .unwrap();
    assert_eq!(restored, ["model/step/.ATTRIBUTES/VARIABLE_VALUE"]);
    assert_eq!(
        i64_value(&value(&checkpoint, "step")),
        expected["late_variable_global_step"].as_i64().unwrap()
    );
    assert_eq!(
        i64_value(&value(&checkpoint, "other")),
        expected["late_variable_not_in_ckpt"].as_i64().unwrap()
    );
    // The status as it was stays; refreshed, it sees the late objects as TensorFlow does.
    assert!(status.assert_consumed().is_ok());
    let refreshed = checkpoint.refresh_status(&status).unwrap();
    assert_name_based_status(
        &refreshed,
        &expected["status_after_late_variables"],
        "n1 late",
    );
}

#[test]
fn n2_n3_only_the_exact_name_matches() {
    let expected = scenario("n2_name_scope");
    let mut checkpoint = model(&[("kernel", "dense/kernel", DType::Float, &[2, 2])]);
    let status = checkpoint.read(&tf1_prefix()).unwrap();
    assert_name_based_status(&status, &expected["status"], "n2");
    assert_eq!(
        f32_values(&value(&checkpoint, "kernel")),
        flat(&expected["value"])
    );

    let expected = scenario("n3_names_differ");
    let mut checkpoint = model(&[("kernel", "kernel", DType::Float, &[2, 2])]);
    let status = checkpoint.restore(Some(&tf1_prefix())).unwrap();
    // The message shows the 2-D value as numpy prints it, one row per line.
    assert_name_based_status(&status, &expected["status"], "n3");
    assert_eq!(
        f32_values(&value(&checkpoint, "kernel")),
        flat(&expected["value"])
    );
}

#[test]
fn n4_a_dtype_mismatch_fails_at_assignment_and_changes_nothing() {
    let expected = scenario("n4_dtype_mismatch");
    let mut checkpoint = model(&[("kernel", "dense/kernel", DType::Double, &[2, 2])]);
    let before = checkpoint.values().clone();
    let err = checkpoint.restore(Some(&tf1_prefix())).unwrap_err();
    assert!(
        matches!(
            err,
            CheckpointError::Object(ObjectError::AssignDType { .. })
        ),
        "{err:?}"
    );
    // TensorFlow's text after its `{{function_node …}}` prefix, up to the op name.
    let tf = expected["restore"]["message"].as_str().unwrap();
    let tf_core = tf
        .split("}} ")
        .nth(1)
        .unwrap()
        .split(" [Op:")
        .next()
        .unwrap();
    assert_eq!(err.to_string(), format!("`(root).model.kernel`: {tf_core}"));
    assert_eq!(checkpoint.values(), &before);
    assert_eq!(checkpoint.save_counter(), None);
    assert!(checkpoint.pending_restores().is_empty());
}

#[test]
fn the_name_based_report_lists_every_value_once() {
    let checkpoint = model(&[
        ("kernel", "dense/kernel", DType::Float, &[2, 2]),
        ("bias", "dense/bias", DType::Double, &[2]),
        ("extra", "extra", DType::Float, &[]),
    ]);
    let matched = checkpoint
        .match_checkpoint(&tf1_prefix(), RestoreKind::Read)
        .unwrap();
    let report = matched.report();
    assert!(report.name_based);
    let by_status = |status| {
        report
            .values
            .iter()
            .filter(|v| v.status == status)
            .map(|v| (v.path.join("."), v.checkpoint_key.clone()))
            .collect::<Vec<_>>()
    };
    let key = |k: &str| Some(k.to_owned());
    assert_eq!(
        by_status(ValueStatus::Matched),
        [("model.kernel".to_owned(), key("dense/kernel"))]
    );
    assert_eq!(
        by_status(ValueStatus::Mismatched),
        [("model.bias".to_owned(), key("dense/bias"))]
    );
    // Checkpoint keys nobody asked for: in the report, never in an assertion.
    assert_eq!(
        by_status(ValueStatus::Unused),
        [("global_step".to_owned(), key("global_step"))]
    );
    assert_eq!(
        by_status(ValueStatus::Missing),
        [("model.extra".to_owned(), None)]
    );
    let message = matched
        .status()
        .check(Assertion::Consumed)
        .unwrap_err()
        .message;
    assert!(message.ends_with(": ['extra']"), "{message}");
    assert!(!message.contains("global_step"), "{message}");
}

/// The reverse direction (n6): a plain spec naming `dense/kernel` and `dense/bias` restores
/// TensorFlow's object-based checkpoint through each attribute's `full_name`, as a TF1
/// `Saver` does, and the values keep the spec's names.
#[test]
fn n6_a_plain_spec_restores_an_object_based_checkpoint_by_full_name() {
    let expected = scenario("n6_tf1_saver_reads_object_based");
    assert_eq!(expected["restore"]["ok"], true);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        serde_json::json!({"variables": [
            {"checkpoint_key": "dense/kernel", "dtype": "float32", "shape": [2, 2]},
            {"checkpoint_key": "dense/bias", "dtype": "float32", "shape": [2]},
        ]})
        .to_string(),
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let prefix = format!("tests/fixtures/tf-2.21/{O5}/object_based/ckpt");
    let output = crate::support::saveplan(&[
        "restore",
        spec.to_str().unwrap(),
        "--prefix",
        &prefix,
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("by variable name: 2 of 2 variables"),
        "{stderr}"
    );
    let bytes = std::fs::read(&out).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for (key, field) in [("dense/kernel", "kernel"), ("dense/bias", "bias")] {
        let got: Vec<f64> = tensors
            .tensor(key)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect();
        assert_eq!(got, flat(&expected["values"][field]), "{key}");
    }
}
