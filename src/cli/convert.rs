//! `saveplan convert SRC DST`: converts a `.safetensors` file into a TF checkpoint prefix or a
//! checkpoint prefix (or a directory / `checkpoint` state file: its latest checkpoint) into a
//! `.safetensors` file, keeping keys, dtypes, shapes and bytes.
//!
//! An object-based checkpoint's serialized object graph goes into the safetensors header's
//! `__metadata__`, base64 under `_CHECKPOINTABLE_OBJECT_GRAPH`; converting back writes it as
//! the `_CHECKPOINTABLE_OBJECT_GRAPH` string tensor again, last, and the other tensors in the
//! graph's node order, as TensorFlow does (FORMATS.md 13.5), so TensorFlow restores the result
//! by object.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use safetensors::tensor::{TensorInfo, TensorView};
use saveplan::bundle::{BundleReader, BundleWriter, DType, Values, index_path};
use saveplan::checkpoint::{OBJECT_GRAPH_KEY, ObjectGraph, read_object_graph_bytes};
use saveplan::checkpoint::{resolve_name, without_attributes_of};
use saveplan::export::object_graph::{decode, encode};

use super::common::progress_bar;
use super::output::one_line;
use super::values::{
    checkpoint_prefix, dtype_of, header, prepare_out, serialize_to_file, to_safetensors,
};

/// Arguments of `saveplan convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A `.safetensors` file, or a checkpoint prefix (the path without `.index`), directory or
    /// `checkpoint` state file (its latest checkpoint).
    src: PathBuf,
    /// The checkpoint prefix or `.safetensors` file to write; missing folders are created.
    dst: PathBuf,
    /// Checkpoint to safetensors: leave out string and variant tensors (other than the object graph, which
    /// goes into the metadata), with a note on stderr, instead of failing.
    #[arg(long)]
    skip_strings: bool,
    /// Checkpoint to safetensors: convert only the keys matching this glob (`*` any run of
    /// characters, `/` included; `?` one character), or the value a name without wildcards
    /// names (a key, an object path or a full name). Repeatable. The object graph is kept only
    /// if a glob matches `_CHECKPOINTABLE_OBJECT_GRAPH`.
    #[arg(long = "keys", value_name = "GLOB")]
    keys: Vec<String>,
}

/// Runs `saveplan convert`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let is_state_file = args
        .src
        .file_name()
        .is_some_and(|name| name == "checkpoint");
    let is_safetensors = args.src.extension().is_some_and(|ext| ext == "safetensors")
        || (args.src.is_file() && !index_path(&args.src).exists() && !is_state_file);
    prepare_out(&args.dst)?;
    if is_safetensors {
        safetensors_to_checkpoint(&args.src, &args.dst)?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let prefix = checkpoint_prefix(&args.src)?;
    if !saveplan::storage::exists(&index_path(&prefix)).unwrap_or(false) {
        bail!(
            "{}: neither a .safetensors file nor a checkpoint prefix (no .index file)",
            args.src.display()
        );
    }
    checkpoint_to_safetensors(&prefix, &args.dst, &args)?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn checkpoint_to_safetensors(prefix: &Path, dst: &Path, args: &Args) -> anyhow::Result<()> {
    let reader = BundleReader::open(prefix)?;
    // A pattern without wildcards may name a value by object path or full name too.
    let patterns = (args.keys.iter())
        .map(|pattern| match pattern.contains(['*', '?']) {
            true => Ok(pattern.clone()),
            false => resolve_name(&reader, pattern).map_err(|err| one_line(&err)),
        })
        .collect::<anyhow::Result<Vec<String>>>()?;
    let selected =
        |key: &str| patterns.is_empty() || patterns.iter().any(|glob| glob_matches(glob, key));
    let mut metadata = HashMap::new();
    let mut keys = Vec::new();
    // The object graph, and the keys left out: the graph written names none of them.
    let mut object_graph = None;
    let mut left_out = std::collections::BTreeSet::new();
    for entry in reader.entries() {
        if !selected(&entry.key) {
            left_out.insert(entry.key.as_str());
            continue;
        }
        if entry.key == OBJECT_GRAPH_KEY && entry.dtype == DType::String {
            let bytes = read_object_graph_bytes(&reader).map_err(|err| one_line(&err))?;
            let graph = decode(&bytes)
                .map_err(|err| one_line(&err))
                .with_context(|| format!("{}: corrupt object graph", prefix.display()))?;
            object_graph = Some((bytes, graph));
            continue;
        }
        if saveplan::bundle::dtype::is_element_list(entry.dtype) {
            if args.skip_strings {
                eprintln!(
                    "saveplan: convert: skipped {} tensor `{}`",
                    entry.dtype, entry.key
                );
                left_out.insert(entry.key.as_str());
                continue;
            }
            bail!(
                "tensor `{}` is a {dtype} tensor: safetensors cannot hold {dtype}s (--skip-strings leaves them out)",
                entry.key,
                dtype = entry.dtype
            );
        }
        if to_safetensors(entry.dtype).is_none() {
            bail!(
                "tensor `{}` has dtype {}, which safetensors has no type for",
                entry.key,
                entry.dtype
            );
        }
        keys.push(entry);
    }
    if let Some((bytes, graph)) = object_graph {
        // Unchanged (byte for byte) unless values it names were left out.
        let bytes = match without_attributes_of(&graph, &left_out) {
            Some(pruned) => encode(&pruned),
            None => bytes,
        };
        metadata.insert(OBJECT_GRAPH_KEY.to_owned(), BASE64.encode(bytes));
    }
    let total: u64 = keys
        .iter()
        .map(|entry| tensor_bytes(entry.dtype, &entry.shape))
        .sum();
    let progress = progress_bar(total, "reading");
    let mut tensors = Vec::with_capacity(keys.len());
    for entry in keys {
        let tensor = reader.read(&entry.key)?;
        let Values::Bytes(bytes) = tensor.values else {
            bail!(
                "tensor `{}` is a string tensor: safetensors cannot hold strings",
                entry.key
            );
        };
        if let Some(bar) = &progress {
            bar.inc(bytes.len() as u64);
        }
        let shape: Vec<usize> = tensor.shape.iter().map(|&dim| dim as usize).collect();
        tensors.push((entry.key.clone(), to_safetensors(entry.dtype), shape, bytes));
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let views = tensors
        .iter()
        .map(|(key, dtype, shape, bytes)| {
            let dtype = dtype.context("checked above")?;
            let view = TensorView::new(dtype, shape.clone(), bytes)
                .with_context(|| format!("tensor `{key}`"))?;
            Ok((key.clone(), view))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let metadata = (!metadata.is_empty()).then_some(metadata);
    serialize_to_file(views, metadata, dst)
}

/// Whether `key` matches `glob`: `*` matches any run of characters, `?` one character.
fn glob_matches(glob: &str, key: &str) -> bool {
    let (glob, key): (Vec<char>, Vec<char>) = (glob.chars().collect(), key.chars().collect());
    // matches[j]: whether glob[..i] matches key[..j], row by row.
    let mut matches = vec![false; key.len() + 1];
    matches[0] = true;
    for &g in &glob {
        let mut next = vec![false; key.len() + 1];
        if g == '*' {
            let mut any = false;
            for j in 0..=key.len() {
                any |= matches[j];
                next[j] = any;
            }
        } else {
            for j in 1..=key.len() {
                next[j] = matches[j - 1] && (g == '?' || g == key[j - 1]);
            }
        }
        matches = next;
    }
    matches[key.len()]
}

fn tensor_bytes(dtype: DType, shape: &[i64]) -> u64 {
    shape.iter().map(|&dim| dim.max(0) as u64).product::<u64>()
        * dtype.element_size().unwrap_or(0) as u64
}

fn safetensors_to_checkpoint(src: &Path, prefix: &Path) -> anyhow::Result<()> {
    let buffer =
        saveplan::storage::read(src).with_context(|| format!("{}: reading", src.display()))?;
    let header = header::read(&buffer)
        .with_context(|| format!("{}: not a valid safetensors file", src.display()))?;
    let object_graph = match (header.metadata.as_ref()).and_then(|map| map.get(OBJECT_GRAPH_KEY)) {
        Some(text) => {
            let bytes = BASE64.decode(text).with_context(|| {
                format!(
                    "{}: metadata `{OBJECT_GRAPH_KEY}` is not base64",
                    src.display()
                )
            })?;
            let graph = decode(&bytes)
                .map_err(|err| one_line(&err))
                .with_context(|| format!("{}: corrupt object graph in metadata", src.display()))?;
            Some((bytes, graph))
        }
        None => None,
    };
    // File order, which is deterministic (the header is a hash map), then, for an object-based
    // checkpoint, node order as TensorFlow writes it.
    let mut names: Vec<String> = (header.entries.iter())
        .map(|entry| entry.name.clone())
        .collect();
    if let Some((_, graph)) = &object_graph {
        names = node_order(graph, names);
    }
    // Every dtype checked before anything is written.
    let mut entries: HashMap<&str, (DType, &TensorInfo)> = HashMap::new();
    for header::Entry { name, info } in &header.entries {
        entries.insert(name, (dtype_of(src, name, info)?, info));
    }
    let total = buffer.len() as u64;
    let progress = progress_bar(total, "writing");
    let mut writer = BundleWriter::create(prefix)?;
    for name in &names {
        let (dtype, info) = entries[name.as_str()];
        let shape: Vec<i64> = info.shape.iter().map(|&dim| dim as i64).collect();
        let data = &buffer[header.range(info)];
        writer.add(name, dtype, &shape, data)?;
        if let Some(bar) = &progress {
            bar.inc(data.len() as u64);
        }
    }
    if let Some((bytes, _)) = object_graph {
        writer.add_strings(OBJECT_GRAPH_KEY, &[], &[bytes])?;
    }
    writer.finish()?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    Ok(())
}

/// `names` reordered as TensorFlow writes an object-based checkpoint's data (13.5): each
/// node's attributes in node order (a legacy saveable's keys, which share its key as prefix,
/// in place), then the names no attribute claims, in their order.
fn node_order(graph: &ObjectGraph, names: Vec<String>) -> Vec<String> {
    let mut rest = names;
    let mut ordered = Vec::with_capacity(rest.len());
    for node in graph.nodes() {
        for attribute in &node.attributes {
            let key = attribute.checkpoint_key.as_str();
            let (mut claimed, others): (Vec<String>, Vec<String>) = rest
                .into_iter()
                .partition(|name| name == key || name.starts_with(key));
            claimed.sort_by_key(|name| name != key);
            ordered.extend(claimed);
            rest = others;
        }
    }
    ordered.extend(rest);
    ordered
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn globs() {
        assert!(glob_matches(
            "model/*",
            "model/kernel/.ATTRIBUTES/VARIABLE_VALUE"
        ));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(!glob_matches("model/*", "optimizer/x"));
        assert!(glob_matches(
            "*/bias/*",
            "model/bias/.ATTRIBUTES/VARIABLE_VALUE"
        ));
    }
}
