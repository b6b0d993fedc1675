//! `saveplan inspect PREFIX`: lists a checkpoint's tensors like TensorFlow's inspect_checkpoint,
//! as JSON with `--json`, prints one tensor's values with `--tensor KEY`, or shows the object
//! graph of an object-based checkpoint with `--objects` (`inspect/objects.rs`).
//!
//! The listing uses TensorFlow's `key (DT_FLOAT) [2,3]` line format. Unlike TensorFlow, which
//! prints the encoded slice keys of a sliced tensor and skips its full entry, it prints one line
//! per tensor with its full shape.

use std::fmt::Write as _;
use std::path::PathBuf;

mod objects;

use saveplan::bundle::{
    BundleReader, DType, Element, Entry, Tensor, Values, decode_element, element_json,
};
use saveplan::checkpoint::{read_object_graph, resolve_name};
use serde_json::{Value, json};

use super::output::{one_line, out};
use super::values::checkpoint_prefix;

/// Arguments of `saveplan inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint prefix (the path without `.index`), or a directory or `checkpoint` state
    /// file, meaning its latest checkpoint.
    prefix: PathBuf,
    /// Print JSON: the entries (key, dtype, shape, shard, offset, size, crc32c, slices), or
    /// with `--objects` the object graph's nodes.
    #[arg(long)]
    json: bool,
    /// Print the values of this tensor instead of the listing: a checkpoint key, or in an
    /// object-based checkpoint an object path (`model/dense/kernel`) or a variable's full name
    /// (an ambiguous name lists its candidates).
    #[arg(long, value_name = "NAME", conflicts_with = "objects")]
    tensor: Option<String>,
    /// Print the object graph of an object-based checkpoint: objects by path, their tensors
    /// with dtype and shape, slot variables under their variable.
    #[arg(long)]
    objects: bool,
}

/// Runs `saveplan inspect`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let reader = BundleReader::open_for_lookups(checkpoint_prefix(&args.prefix)?)?;
    if args.objects {
        let graph = read_object_graph(&reader)?;
        let out = if args.json {
            format!("{}\n", objects::json(&graph)?)
        } else {
            objects::tree(&graph, &reader)
        };
        out!("{out}")?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let out = match (&args.tensor, args.json) {
        (Some(name), json) => {
            let key = &resolve_name(&reader, name).map_err(|err| one_line(&err))?;
            let tensor = reader.read(key)?;
            if json {
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(&tensor_json(key, &tensor))?
                )
            } else {
                format!(
                    "{key} ({}) {}\n{}\n",
                    tensor.dtype.proto_name().unwrap_or("DT_INVALID"),
                    shape_text(&tensor.shape),
                    tensor_text(&tensor)
                )
            }
        }
        (None, true) => {
            let entries: Vec<EntryJson<'_>> = reader
                .entries()
                .iter()
                .map(|entry| entry_json(&reader, entry))
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&entries)?)
        }
        (None, false) => reader
            .entries()
            .iter()
            .fold(String::new(), |mut out, entry| {
                let _ = writeln!(
                    out,
                    "{} ({}) {}",
                    entry.key,
                    entry.dtype.proto_name().unwrap_or("DT_INVALID"),
                    shape_text(&entry.shape)
                );
                out
            }),
    };
    out!("{out}")?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// TensorFlow's `TensorShape::DebugString`: `[2,3]`, `[]` for a scalar.
fn shape_text(shape: &[i64]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// One line of `inspect --json`, fields in this order.
#[derive(serde::Serialize)]
struct EntryJson<'a> {
    key: &'a str,
    dtype: String,
    shape: &'a [i64],
    shard: u32,
    offset: u64,
    size: u64,
    crc32c: u32,
    slices: Vec<SliceJson>,
}

/// A stored slice of a sliced tensor in `inspect --json`.
#[derive(serde::Serialize)]
struct SliceJson {
    slice: String,
    shape: Vec<i64>,
    shard: u32,
    offset: u64,
    size: u64,
    crc32c: u32,
}

fn entry_json<'a>(reader: &BundleReader, entry: &'a Entry) -> EntryJson<'a> {
    let slices = reader
        .slice_entries(&entry.key)
        .iter()
        .map(|stored| SliceJson {
            slice: stored
                .slice
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            shape: stored.shape.clone(),
            shard: stored.shard,
            offset: stored.offset,
            size: stored.size,
            crc32c: stored.crc32c,
        })
        .collect();
    EntryJson {
        key: &entry.key,
        dtype: entry.dtype.to_string(),
        shape: &entry.shape,
        shard: entry.shard,
        offset: entry.offset,
        size: entry.size,
        crc32c: entry.crc32c,
        slices,
    }
}

fn tensor_json<'a>(key: &'a str, tensor: &'a Tensor) -> TensorJson<'a> {
    let values: Vec<Value> = match &tensor.values {
        Values::Bytes(bytes) => element_chunks(tensor.dtype, bytes)
            .map(|element| element_json(tensor.dtype, element))
            .collect(),
        Values::Strings(strings) => strings
            .iter()
            .map(|string| match std::str::from_utf8(string) {
                Ok(text) => json!(text),
                Err(_) => json!({ "bytes": string }),
            })
            .collect(),
    };
    TensorJson {
        key,
        dtype: tensor.dtype.to_string(),
        shape: &tensor.shape,
        values,
    }
}

/// `inspect --tensor KEY --json`, fields in this order.
#[derive(serde::Serialize)]
struct TensorJson<'a> {
    key: &'a str,
    dtype: String,
    shape: &'a [i64],
    values: Vec<Value>,
}

fn element_chunks(dtype: DType, bytes: &[u8]) -> std::slice::ChunksExact<'_, u8> {
    bytes.chunks_exact(dtype.element_size().unwrap_or(1))
}

fn element_text(dtype: DType, element: &[u8]) -> String {
    match decode_element(dtype, element) {
        Element::Float32(value) => format!("{value:?}"),
        Element::Float(value) => format!("{value:?}"),
        Element::Complex(re, im) => format!("({re:?}{im:+?}j)"),
        Element::Int(value) => value.to_string(),
        Element::UInt(value) => value.to_string(),
        Element::Bool(value) => value.to_string(),
    }
}

/// The values nested in brackets by shape, e.g. `[[1, 2], [3, 4]]`; a scalar prints bare.
fn tensor_text(tensor: &Tensor) -> String {
    let elements: Vec<String> = match &tensor.values {
        Values::Bytes(bytes) => element_chunks(tensor.dtype, bytes)
            .map(|element| element_text(tensor.dtype, element))
            .collect(),
        Values::Strings(strings) => strings
            .iter()
            .map(|string| format!("b\"{}\"", string.escape_ascii()))
            .collect(),
    };
    let mut out = String::new();
    nest(&mut out, &tensor.shape, &elements);
    out
}

fn nest(out: &mut String, shape: &[i64], elements: &[String]) {
    let Some((&dim, inner)) = shape.split_first() else {
        out.push_str(elements.first().map_or("", String::as_str));
        return;
    };
    let stride: usize = inner.iter().map(|&d| d.max(0) as usize).product();
    out.push('[');
    for idx in 0..dim.max(0) as usize {
        if idx > 0 {
            out.push_str(", ");
        }
        let start = (idx * stride).min(elements.len());
        nest(
            out,
            inner,
            &elements[start..(start + stride).min(elements.len())],
        );
    }
    out.push(']');
}
