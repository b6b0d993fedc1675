//! Writes and dumps checkpoints described in the fixtures' `values.json` tensor format, so that
//! scripts (the interop suite) can make saveplan write arbitrary bundles and read them back.
//!
//! ```text
//! bundle_json write VALUES.json PREFIX [--shards N]
//! bundle_json dump PREFIX
//! ```
//!
//! `write` takes a JSON object `{key: tensor}`. A tensor has `dtype` (TF name), `shape`, and
//! `raw_le_b64` (little-endian element bytes) or, for strings, `values_b64` (one base64 string
//! per element). A key `_partial:<name>` holds one slice of tensor `<name>` (or of the tensor
//! named by its `name` field, so that several slices of one tensor can be listed) with its
//! `slice` spec (`"4 2 0,2:0,2"`); its shape and values are the slice's. With `--shards N`
//! the tensors are spread over N SaveV2-like parts (a tensor's `shard` field, or its position
//! modulo N) under the temporary prefix, which are then merged into PREFIX.
//!
//! `dump` prints `{key: tensor}` for every tensor of the bundle, assembled from its slices, with
//! `dtype`, `dtype_enum`, `shape`, `values` and `raw_le_b64` (or `values_b64` for strings).

#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool: prints its dump and its errors"
)]

use std::process::ExitCode;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use saveplan::bundle::{
    BundleReader, BundleWriter, DType, MergeOptions, TensorValues, Values, element_json,
    merge_bundles, sharded_filename, temp_prefix,
};
use serde_json::{Map, Value, json};

type Error = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["write", values, prefix] => write(values, prefix, 1),
        ["write", values, prefix, "--shards", n] => match n.parse() {
            Ok(n) if n > 0 => write(values, prefix, n),
            _ => Err(format!("bad shard count `{n}`").into()),
        },
        ["dump", prefix] => dump(prefix),
        _ => Err("usage: bundle_json write VALUES.json PREFIX [--shards N] | dump PREFIX".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bundle_json: {err}");
            ExitCode::FAILURE
        }
    }
}

/// One tensor (or slice) to write.
struct Item {
    name: String,
    dtype: DType,
    shape: Vec<i64>,
    spec: String,
    shard: usize,
    bytes: Vec<u8>,
    strings: Vec<Vec<u8>>,
}

fn write(values_path: &str, prefix: &str, n_shards: usize) -> Result<(), Error> {
    let text = std::fs::read_to_string(values_path)?;
    let Value::Object(tensors) = serde_json::from_str::<Value>(&text)? else {
        return Err("the values file must hold a JSON object".into());
    };
    let items = tensors
        .iter()
        .enumerate()
        .map(|(position, (key, tensor))| parse_item(key, tensor, position % n_shards))
        .collect::<Result<Vec<_>, Error>>()?;
    if n_shards == 1 {
        return write_part(prefix, &items);
    }
    let base = temp_prefix(prefix);
    let parts: Vec<String> = (0..n_shards)
        .map(|shard| sharded_filename(&base, shard as u32, n_shards as u32))
        .collect();
    for (shard, part) in parts.iter().enumerate() {
        let mine: Vec<&Item> = items.iter().filter(|item| item.shard == shard).collect();
        write_part_refs(part, &mine)?;
    }
    merge_bundles(&parts, prefix, MergeOptions::default())?;
    Ok(())
}

fn write_part(prefix: &str, items: &[Item]) -> Result<(), Error> {
    write_part_refs(prefix, &items.iter().collect::<Vec<_>>())
}

fn write_part_refs(prefix: &str, items: &[&Item]) -> Result<(), Error> {
    let mut writer = BundleWriter::create(prefix)?;
    for item in items {
        let values = if item.dtype == DType::String {
            TensorValues::Strings(&item.strings)
        } else {
            TensorValues::Bytes(&item.bytes)
        };
        writer.add_with_spec(&item.name, item.dtype, &item.shape, &item.spec, values)?;
    }
    writer.finish()?;
    Ok(())
}

fn parse_item(key: &str, tensor: &Value, default_shard: usize) -> Result<Item, Error> {
    let field = |name: &str| {
        tensor
            .get(name)
            .ok_or_else(|| format!("tensor `{key}` has no `{name}`"))
    };
    let dtype_name = field("dtype")?.as_str().unwrap_or_default();
    let dtype = DType::parse(dtype_name).ok_or_else(|| format!("unknown dtype `{dtype_name}`"))?;
    let shape = field("shape")?
        .as_array()
        .ok_or("shape must be a list")?
        .iter()
        .map(|dim| dim.as_i64().ok_or("dimensions must be integers"))
        .collect::<Result<Vec<i64>, _>>()?;
    let (name, spec) = match key.strip_prefix("_partial:") {
        Some(rest) => {
            let name = tensor.get("name").and_then(Value::as_str).unwrap_or(rest);
            let spec = field("slice")?.as_str().ok_or("slice must be a string")?;
            (name.to_string(), spec.to_string())
        }
        None => (key.to_string(), String::new()),
    };
    let shard = match tensor.get("shard") {
        Some(shard) => shard.as_u64().ok_or("shard must be an integer")? as usize,
        None => default_shard,
    };
    let (mut bytes, mut strings) = (Vec::new(), Vec::new());
    if dtype == DType::String {
        for value in field("values_b64")?.as_array().ok_or("values_b64: list")? {
            strings.push(B64.decode(value.as_str().ok_or("values_b64: strings")?)?);
        }
    } else {
        bytes = B64.decode(field("raw_le_b64")?.as_str().ok_or("raw_le_b64: string")?)?;
    }
    Ok(Item {
        name,
        dtype,
        shape,
        spec,
        shard,
        bytes,
        strings,
    })
}

fn dump(prefix: &str) -> Result<(), Error> {
    let reader = BundleReader::open(prefix)?;
    let mut out = Map::new();
    for entry in reader.entries() {
        let tensor = reader.read(&entry.key)?;
        let mut json = Map::new();
        json.insert("dtype".into(), json!(tensor.dtype.to_string()));
        json.insert("dtype_enum".into(), json!(tensor.dtype.number()));
        json.insert("shape".into(), json!(tensor.shape));
        match &tensor.values {
            Values::Bytes(bytes) => {
                let size = tensor.dtype.element_size().unwrap_or(1);
                let values: Vec<Value> = bytes
                    .chunks_exact(size)
                    .map(|element| element_json(tensor.dtype, element))
                    .collect();
                json.insert("values".into(), Value::Array(values));
                json.insert("raw_le_b64".into(), json!(B64.encode(bytes)));
            }
            Values::Strings(strings) => {
                let encoded: Vec<String> = strings.iter().map(|s| B64.encode(s)).collect();
                json.insert("values_b64".into(), json!(encoded));
            }
        }
        out.insert(entry.key.clone(), Value::Object(json));
    }
    println!("{}", serde_json::to_string_pretty(&Value::Object(out))?);
    Ok(())
}
