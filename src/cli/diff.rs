//! `saveplan diff A B`: compares two checkpoints (prefixes, directories, `checkpoint` state
//! files) or `.safetensors` files key by key, as `diff` compares files: each key is the same,
//! different (dtype, shape, how many elements differ and the largest absolute difference), only
//! in A or only in B. Exit 0 when every value is equal, 1 when something differs, 2 on an
//! error. A checkpoint is read one tensor at a time, so memory holds two tensors, not two
//! checkpoints.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use saveplan::bundle::{BundleReader, Element, Values, decode_element, index_path};
use saveplan::exec::HostTensor;
use saveplan_ir::DType;
use serde::Serialize;

use super::output::{out, outln, render_error};
use super::values::{checkpoint_prefix, read_safetensors};

/// Arguments of `saveplan diff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The first checkpoint (prefix, directory or `checkpoint` state file) or `.safetensors`.
    a: PathBuf,
    /// The second one.
    b: PathBuf,
    /// Print the result as JSON: `{"same": [key…], "different": [{"key", "dtype", "shape",
    /// "elements_differing", "max_abs_diff"}…], "only_in_a": [key…], "only_in_b": [key…]}`.
    #[arg(long)]
    json: bool,
}

/// Runs `saveplan diff`: exit 0 when equal, 1 when different, 2 on an error (its one line on
/// stderr).
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    match compare(&args.a, &args.b) {
        Ok(diff) => {
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&diff)?)?;
            } else {
                print_text(&diff)?;
            }
            let equal =
                diff.different.is_empty() && diff.only_in_a.is_empty() && diff.only_in_b.is_empty();
            Ok(std::process::ExitCode::from(if equal { 0 } else { 1 }))
        }
        Err(err) => {
            #[expect(clippy::print_stderr, reason = "diff's errors exit 2, not 1")]
            {
                eprintln!("error: {}", render_error(&err));
            }
            Ok(std::process::ExitCode::from(2))
        }
    }
}

/// What `diff` found.
#[derive(Debug, Default, Serialize)]
struct Diff {
    same: Vec<String>,
    different: Vec<Different>,
    only_in_a: Vec<String>,
    only_in_b: Vec<String>,
}

/// One key whose values differ.
#[derive(Debug, Serialize)]
struct Different {
    key: String,
    /// The dtype, or both when they differ.
    dtype: Either<String>,
    /// The shape, or both when they differ.
    shape: Either<Vec<u64>>,
    /// How many elements differ (`null` when dtype or shape differ).
    elements_differing: Option<u64>,
    /// The largest absolute difference of two numbers (`null` for strings, a dtype or shape
    /// mismatch, or a NaN on one side).
    max_abs_diff: Option<f64>,
}

/// One value where both sides agree, or the two values.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Either<T> {
    Same(T),
    Both([T; 2]),
}

impl<T: PartialEq> Either<T> {
    fn of(a: T, b: T) -> Either<T> {
        if a == b {
            Either::Same(a)
        } else {
            Either::Both([a, b])
        }
    }
}

/// One side of the comparison: a checkpoint read key by key, or a mapped `.safetensors` file.
enum Side {
    Checkpoint(BundleReader),
    Safetensors(std::collections::BTreeMap<String, HostTensor>),
}

impl Side {
    fn open(path: &Path) -> anyhow::Result<Side> {
        let prefix = checkpoint_prefix(path)?;
        let is_checkpoint = saveplan::storage::exists(&index_path(&prefix)).unwrap_or(false)
            && prefix.extension().is_none_or(|ext| ext != "safetensors");
        Ok(if is_checkpoint {
            Side::Checkpoint(BundleReader::open(&prefix)?)
        } else {
            Side::Safetensors(read_safetensors(&prefix)?)
        })
    }

    fn keys(&self) -> BTreeSet<&str> {
        match self {
            Side::Checkpoint(reader) => reader.entries().iter().map(|e| e.key.as_str()).collect(),
            Side::Safetensors(values) => values.keys().map(String::as_str).collect(),
        }
    }

    /// The value of `key` (sliced checkpoint tensors assembled): dtype, shape, values.
    fn read(&self, key: &str) -> anyhow::Result<(DType, Vec<u64>, Values)> {
        match self {
            Side::Checkpoint(reader) => {
                let tensor = reader.read(key)?;
                let shape = tensor.shape.iter().map(|&dim| dim.max(0) as u64).collect();
                Ok((tensor.dtype, shape, tensor.values))
            }
            Side::Safetensors(values) => {
                let value = &values[key];
                let bytes = value.bytes().unwrap_or_default().to_vec();
                Ok((value.dtype(), value.shape().to_vec(), Values::Bytes(bytes)))
            }
        }
    }
}

fn compare(a: &Path, b: &Path) -> anyhow::Result<Diff> {
    let (a, b) = (Side::open(a)?, Side::open(b)?);
    let (keys_a, keys_b) = (a.keys(), b.keys());
    let mut diff = Diff {
        only_in_a: keys_a.difference(&keys_b).map(|k| k.to_string()).collect(),
        only_in_b: keys_b.difference(&keys_a).map(|k| k.to_string()).collect(),
        ..Diff::default()
    };
    for key in keys_a.intersection(&keys_b) {
        let (dtype_a, shape_a, values_a) = a.read(key)?;
        let (dtype_b, shape_b, values_b) = b.read(key)?;
        let comparable = dtype_a == dtype_b && shape_a == shape_b;
        let (differing, max_abs_diff) = if comparable {
            compare_values(dtype_a, &values_a, &values_b)
        } else {
            (None, None)
        };
        if differing == Some(0) {
            diff.same.push(key.to_string());
            continue;
        }
        diff.different.push(Different {
            key: key.to_string(),
            dtype: Either::of(dtype_a.to_string(), dtype_b.to_string()),
            shape: Either::of(shape_a, shape_b),
            elements_differing: differing,
            max_abs_diff,
        });
    }
    Ok(diff)
}

/// How many elements differ (by their bytes: a NaN equals the same NaN) and the largest
/// absolute difference of two differing numbers (`None` when there is none to give).
fn compare_values(dtype: DType, a: &Values, b: &Values) -> (Option<u64>, Option<f64>) {
    match (a, b) {
        (Values::Strings(a), Values::Strings(b)) => {
            let differing = a.iter().zip(b).filter(|(x, y)| x != y).count();
            (Some(differing as u64), None)
        }
        (Values::Bytes(a), Values::Bytes(b)) => {
            let Some(size) = dtype.element_size().filter(|&size| size > 0) else {
                return (Some(u64::from(a != b)), None);
            };
            let mut differing = 0u64;
            let mut max: Option<f64> = None;
            let mut nan = false;
            for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
                if x == y {
                    continue;
                }
                differing += 1;
                match abs_diff(decode_element(dtype, x), decode_element(dtype, y)) {
                    Some(d) if d.is_nan() => nan = true,
                    Some(d) => max = Some(max.map_or(d, |m| m.max(d))),
                    None => nan = true,
                }
            }
            (Some(differing), if nan { None } else { max })
        }
        _ => (None, None),
    }
}

/// `|a - b|` of two decoded elements of one dtype (complex: the modulus of the difference).
fn abs_diff(a: Element, b: Element) -> Option<f64> {
    Some(match (a, b) {
        (Element::Float32(x), Element::Float32(y)) => (f64::from(x) - f64::from(y)).abs(),
        (Element::Float(x), Element::Float(y)) => (x - y).abs(),
        (Element::Complex(xr, xi), Element::Complex(yr, yi)) => (xr - yr).hypot(xi - yi),
        (Element::Int(x), Element::Int(y)) => x.abs_diff(y) as f64,
        (Element::UInt(x), Element::UInt(y)) => x.abs_diff(y) as f64,
        (Element::Bool(x), Element::Bool(y)) => f64::from(u8::from(x != y)),
        _ => return None,
    })
}

fn print_text(diff: &Diff) -> anyhow::Result<()> {
    for key in &diff.only_in_a {
        outln!("only in A: {key}")?;
    }
    for key in &diff.only_in_b {
        outln!("only in B: {key}")?;
    }
    for different in &diff.different {
        out!("different: {}: ", different.key)?;
        match (&different.dtype, &different.shape) {
            (Either::Both([a, b]), _) => outln!("dtype {a} vs {b}")?,
            (_, Either::Both([a, b])) => outln!("shape {a:?} vs {b:?}")?,
            (Either::Same(dtype), Either::Same(shape)) => {
                let count = different.elements_differing.unwrap_or_default();
                let total: u64 = shape.iter().product();
                match different.max_abs_diff {
                    Some(max) => outln!(
                        "{dtype} {shape:?}: {count} of {total} elements differ, max abs diff {max}"
                    )?,
                    None => outln!("{dtype} {shape:?}: {count} of {total} elements differ")?,
                }
            }
        }
    }
    outln!(
        "{} same, {} different, {} only in A, {} only in B",
        diff.same.len(),
        diff.different.len(),
        diff.only_in_a.len(),
        diff.only_in_b.len()
    )?;
    Ok(())
}
