//! Shared helpers of the bundle tests: fixture paths, `values.json` decoding, slicing expected
//! values, and writing a bundle from a rebuild plan (`tests/inputs/bundle/rebuild.json`).

use std::path::{Path, PathBuf};

use base64::Engine;
use saveplan::bundle::slice::for_each_overlap_run;
use saveplan::bundle::{
    BundleWriter, DType, MergeOptions, ShapeAndSlice, TensorSlice, TensorValues, Values,
    merge_bundles, temp_prefix,
};
use serde_json::Value;

/// The TF 2.21 checkpoint fixtures.
pub fn ckpt_root() -> PathBuf {
    super::fixture("ckpt")
}

/// A file under `tests/inputs/bundle/`.
pub fn input(name: &str) -> PathBuf {
    super::manifest_path("tests/inputs/bundle").join(name)
}

/// Parses a JSON file.
pub fn load_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// An expected tensor from `values.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub values: Values,
}

/// Decodes one tensor object of `values.json`.
pub fn expected(tensor: &Value) -> Expected {
    let b64 = base64::engine::general_purpose::STANDARD;
    let dtype = DType::parse(tensor["dtype"].as_str().unwrap()).unwrap();
    assert_eq!(
        i64::from(dtype.number()),
        tensor["dtype_enum"].as_i64().unwrap()
    );
    let shape = tensor["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|dim| dim.as_i64().unwrap())
        .collect();
    let values = match tensor.get("raw_le_b64") {
        Some(raw) => Values::Bytes(b64.decode(raw.as_str().unwrap()).unwrap()),
        None => Values::Strings(
            tensor["values_b64"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| b64.decode(s.as_str().unwrap()).unwrap())
                .collect(),
        ),
    };
    Expected {
        dtype,
        shape,
        values,
    }
}

/// Cuts `slice` out of a whole expected tensor.
pub fn cut(full: &Expected, slice: &TensorSlice) -> Expected {
    let region = slice.resolve(&full.shape).unwrap();
    let whole: Vec<(i64, i64)> = full.shape.iter().map(|&dim| (0, dim)).collect();
    let shape: Vec<i64> = region.iter().map(|&(_, length)| length).collect();
    let n: usize = shape.iter().product::<i64>() as usize;
    let values = match &full.values {
        Values::Bytes(bytes) => {
            let size = full.dtype.element_size().unwrap();
            let mut out = vec![0u8; n * size];
            for_each_overlap_run(&whole, &region, |src, dst, run| {
                let (src, dst, len) = (
                    src as usize * size,
                    dst as usize * size,
                    run as usize * size,
                );
                out[dst..dst + len].copy_from_slice(&bytes[src..src + len]);
            });
            Values::Bytes(out)
        }
        Values::Strings(strings) => {
            let mut out = vec![Vec::new(); n];
            for_each_overlap_run(&whole, &region, |src, dst, run| {
                for k in 0..run as usize {
                    out[dst as usize + k] = strings[src as usize + k].clone();
                }
            });
            Values::Strings(out)
        }
    };
    Expected {
        dtype: full.dtype,
        shape,
        values,
    }
}

/// The values to save for (`key`, `spec`) from one prefix's `values.json` object: the whole
/// tensor cut to the spec, or the `_partial:<key>` entry holding exactly that slice.
pub fn values_for(tensors: &Value, key: &str, spec: &str) -> Expected {
    if let Some(full) = tensors.get(key) {
        let full = expected(full);
        if spec.is_empty() {
            return full;
        }
        return cut(&full, &ShapeAndSlice::parse(spec).unwrap().slice);
    }
    let partial = &tensors[format!("_partial:{key}")];
    assert_eq!(
        partial["slice"].as_str().unwrap(),
        spec,
        "no values for {key} {spec}"
    );
    expected(partial)
}

fn tensor_values(values: &Values) -> TensorValues<'_> {
    match values {
        Values::Bytes(bytes) => TensorValues::Bytes(bytes),
        Values::Strings(strings) => TensorValues::Strings(strings),
    }
}

/// Writes one bundle of a rebuild plan under `root`: a single part directly at its prefix, or
/// several parts under the temporary prefix followed by a merge (as MultiDeviceSaver does).
pub fn write_planned(root: &Path, bundle: &Value, tensors: &Value) {
    let prefix = root.join(bundle["prefix"].as_str().unwrap());
    if let Some(generate) = bundle.get("generate") {
        let mut writer = BundleWriter::create(&prefix).unwrap();
        let pad = "p".repeat(generate["pad"].as_u64().unwrap() as usize);
        for idx in 0..generate["count"].as_i64().unwrap() {
            let value = (idx as i32).to_le_bytes();
            writer
                .add(&format!("k{idx:05}/{pad}"), DType::Int32, &[1], &value)
                .unwrap();
        }
        writer.finish().unwrap();
        return;
    }
    let parts = bundle["parts"].as_array().unwrap();
    let tmp = temp_prefix(prefix.to_str().unwrap());
    let part_prefixes: Vec<PathBuf> = if parts.len() == 1 {
        vec![prefix.clone()]
    } else {
        (0..parts.len())
            .map(|idx| {
                PathBuf::from(saveplan::bundle::sharded_filename(
                    &tmp,
                    idx as u32,
                    parts.len() as u32,
                ))
            })
            .collect()
    };
    for (part, part_prefix) in parts.iter().zip(&part_prefixes) {
        let mut writer = BundleWriter::create(part_prefix).unwrap();
        for item in part.as_array().unwrap() {
            let (key, spec) = (item[0].as_str().unwrap(), item[1].as_str().unwrap());
            let value = values_for(tensors, key, spec);
            writer
                .add_with_spec(
                    key,
                    value.dtype,
                    &value.shape,
                    spec,
                    tensor_values(&value.values),
                )
                .unwrap();
        }
        writer.finish().unwrap();
    }
    if parts.len() > 1 {
        merge_bundles(&part_prefixes, &prefix, MergeOptions::default()).unwrap();
    }
}

/// Copies the fixture files of `case` whose names start with `prefix_name` into `dest`.
pub fn copy_fixture(case: &str, prefix_name: &str, dest: &Path) -> PathBuf {
    let src_dir = ckpt_root().join(case);
    for item in std::fs::read_dir(&src_dir).unwrap() {
        let path = item.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(&format!("{prefix_name}.")) {
            std::fs::copy(&path, dest.join(&name)).unwrap();
        }
    }
    dest.join(prefix_name)
}
