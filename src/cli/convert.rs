//! `saveplan convert SRC DST`: converts a `.safetensors` file into a TF checkpoint prefix or a
//! checkpoint prefix into a `.safetensors` file, keeping keys, dtypes, shapes and bytes.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use safetensors::tensor::{SafeTensors, TensorView};
use saveplan::bundle::{BundleReader, BundleWriter, DType, Values, index_path};

use super::common::progress_bar;
use super::values::{from_safetensors, to_safetensors};

/// Arguments of `saveplan convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A `.safetensors` file or a checkpoint prefix (the path without `.index`).
    src: PathBuf,
    /// The checkpoint prefix or `.safetensors` file to write.
    dst: PathBuf,
}

/// Runs `saveplan convert`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let is_safetensors = args.src.extension().is_some_and(|ext| ext == "safetensors")
        || (args.src.is_file() && !index_path(&args.src).exists());
    if is_safetensors {
        safetensors_to_checkpoint(&args.src, &args.dst)?;
    } else if index_path(&args.src).exists() {
        checkpoint_to_safetensors(&args.src, &args.dst)?;
    } else {
        bail!(
            "{}: neither a .safetensors file nor a checkpoint prefix (no .index file)",
            args.src.display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn checkpoint_to_safetensors(prefix: &Path, dst: &Path) -> anyhow::Result<()> {
    let reader = BundleReader::open(prefix)?;
    for entry in reader.entries() {
        if entry.dtype == DType::String {
            bail!(
                "tensor `{}` is a string tensor: safetensors cannot hold strings",
                entry.key
            );
        }
        if to_safetensors(entry.dtype).is_none() {
            bail!(
                "tensor `{}` has dtype {}, which safetensors has no type for",
                entry.key,
                entry.dtype
            );
        }
    }
    let total: u64 = reader
        .entries()
        .iter()
        .map(|entry| tensor_bytes(entry.dtype, &entry.shape))
        .sum();
    let progress = progress_bar(total, "reading");
    let mut tensors = Vec::with_capacity(reader.entries().len());
    for entry in reader.entries() {
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
    safetensors::tensor::serialize_to_file(views, None, dst)
        .with_context(|| format!("{}: writing", dst.display()))?;
    Ok(())
}

fn tensor_bytes(dtype: DType, shape: &[i64]) -> u64 {
    shape.iter().map(|&dim| dim.max(0) as u64).product::<u64>()
        * dtype.element_size().unwrap_or(0) as u64
}

fn safetensors_to_checkpoint(src: &Path, prefix: &Path) -> anyhow::Result<()> {
    let buffer = std::fs::read(src).with_context(|| format!("{}: reading", src.display()))?;
    let file = SafeTensors::deserialize(&buffer)
        .with_context(|| format!("{}: not a valid safetensors file", src.display()))?;
    let (_, metadata) = SafeTensors::read_metadata(&buffer)
        .with_context(|| format!("{}: bad header", src.display()))?;
    // Write in file order, which is deterministic (the header is a hash map).
    let mut names: Vec<(usize, String)> = metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| (info.data_offsets.0, name))
        .collect();
    names.sort();
    let total = buffer.len() as u64;
    let progress = progress_bar(total, "writing");
    let mut writer = BundleWriter::create(prefix)?;
    for (_, name) in &names {
        let view = file.tensor(name)?;
        let Some(dtype) = from_safetensors(view.dtype()) else {
            bail!(
                "tensor `{name}` has safetensors dtype {}, which TensorFlow has no type for",
                view.dtype()
            );
        };
        let shape: Vec<i64> = view.shape().iter().map(|&dim| dim as i64).collect();
        writer.add(name, dtype, &shape, view.data())?;
        if let Some(bar) = &progress {
            bar.inc(view.data().len() as u64);
        }
    }
    writer.finish()?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    Ok(())
}
