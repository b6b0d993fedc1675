//! Checkpoint kernels: `SaveV2`, `RestoreV2` and `MergeV2Checkpoints`, which validate their
//! inputs and hand the work to the run's [`crate::exec::CheckpointIo`].

use std::sync::{Arc, Mutex};

use saveplan_ir::DType;

use super::{KernelCx, of_dtype, typed_input, utf8_scalar};
use crate::exec::error::KernelError;
use crate::exec::io::{CheckpointIo, MergeFlags, RestoreRequest, SaveRequest};
use crate::exec::sync::lock;
use crate::exec::tensor::HostTensor;

/// The input of `SaveV2`'s first tensor.
const FIRST_TENSOR: usize = saveplan_ir::saver_ops::save_v2::FIRST_TENSOR as usize;

/// `SaveV2(prefix, tensor_names, shape_and_slices, tensors...)`.
pub(super) fn save_v2(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let tensors = inputs
        .get(FIRST_TENSOR..)
        .unwrap_or_default()
        .iter()
        .collect();
    save_v2_of(cx, dtypes, inputs, tensors, None)
}

/// [`save_v2`] with the prefix, names and specs the first three of `head`, and the tensors
/// to save `tensors`, in position order (a fused save lends the variables it borrowed under
/// their lock). The names and specs come from `cache` when it holds them checked (a fused
/// step's). The errors are those of the inputs as one list.
pub(super) fn save_v2_of(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    head: &[HostTensor],
    tensors: Vec<&HostTensor>,
    cache: Option<&NamesCache>,
) -> Result<Vec<HostTensor>, KernelError> {
    let (prefix, names, specs) = prefix_names_specs(head, dtypes.len())?;
    let checked = cache.and_then(|cache| cache.get(&head[1], &head[2]));
    let requests = if tensors.len() != dtypes.len() {
        Err(KernelError::invalid(format!(
            "expected {} tensors, got {}",
            dtypes.len(),
            tensors.len()
        )))
    } else {
        let requests =
            dtypes
                .iter()
                .zip(tensors)
                .enumerate()
                .map(|(position, (&dtype, tensor))| {
                    let (name, shape_and_slice) =
                        name_and_spec(checked.as_deref(), names, specs, position)?;
                    Ok(SaveRequest {
                        name,
                        shape_and_slice,
                        tensor: of_dtype(tensor, FIRST_TENSOR + position, dtype)?,
                    })
                });
        collect_sized(dtypes.len(), requests)
    };
    let requests = requests.map_err(|err| first_error(names, specs, err))?;
    backend(cx)?
        .save(prefix, &requests)
        .map_err(|source| KernelError::Checkpoint {
            source: Box::new(source),
        })?;
    Ok(Vec::new())
}

/// `RestoreV2(prefix, tensor_names, shape_and_slices) -> tensors...`, with the names and
/// specs from `cache` when it holds them checked (a fused step's).
pub(super) fn restore_v2(
    cx: &KernelCx<'_>,
    dtypes: &[DType],
    inputs: &[HostTensor],
    cache: Option<&NamesCache>,
) -> Result<Vec<HostTensor>, KernelError> {
    let (prefix, names, specs) = prefix_names_specs(inputs, dtypes.len())?;
    let checked = cache.and_then(|cache| cache.get(&inputs[1], &inputs[2]));
    let requests = dtypes.iter().enumerate().map(|(position, &dtype)| {
        let (name, shape_and_slice) = name_and_spec(checked.as_deref(), names, specs, position)?;
        Ok(RestoreRequest {
            name,
            shape_and_slice,
            dtype,
        })
    });
    let requests =
        collect_sized(dtypes.len(), requests).map_err(|err| first_error(names, specs, err))?;
    let tensors =
        backend(cx)?
            .restore(prefix, &requests)
            .map_err(|source| KernelError::Checkpoint {
                source: Box::new(source),
            })?;
    if tensors.len() != dtypes.len() {
        return Err(KernelError::invalid(format!(
            "the checkpoint backend returned {} tensors for {} names",
            tensors.len(),
            dtypes.len()
        )));
    }
    // Against the compact dtypes, not the requests: this touches every restored tensor once
    // more, and the requests are ten times their size.
    if let Some(index) = tensors
        .iter()
        .zip(dtypes)
        .position(|(tensor, &dtype)| tensor.dtype() != dtype)
    {
        return Err(KernelError::invalid(format!(
            "tensor `{}` in the checkpoint is {}, expected {}",
            requests[index].name,
            tensors[index].dtype(),
            dtypes[index]
        )));
    }
    Ok(tensors)
}

/// `MergeV2Checkpoints(checkpoint_prefixes, destination_prefix)`.
pub(super) fn merge_v2(
    cx: &KernelCx<'_>,
    flags: MergeFlags,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let sources = typed_input(inputs, 0, DType::String)?;
    if sources.shape().len() > 1 {
        return Err(KernelError::InputShape {
            input: 0,
            expected: "a scalar or a vector".to_owned(),
            got: sources.shape().to_vec(),
        });
    }
    let sources = utf8_elements(sources, 0)?;
    let destination = utf8_scalar(inputs, 1)?;
    backend(cx)?
        .merge(&sources, destination, flags)
        .map_err(|source| KernelError::Checkpoint {
            source: Box::new(source),
        })?;
    Ok(Vec::new())
}

/// The requests `items` (at most `len`), or the first error among them, in a vector allocated
/// once: collecting `Result`s cannot tell the length ahead, and a vector of 100,000 requests
/// grew, and was copied, seventeen times.
fn collect_sized<T>(
    len: usize,
    items: impl Iterator<Item = Result<T, KernelError>>,
) -> Result<Vec<T>, KernelError> {
    let mut out = Vec::with_capacity(len);
    for item in items {
        out.push(item?);
    }
    Ok(out)
}

/// Name and spec `position` of a `SaveV2` or `RestoreV2`: the strings `checked` holds when
/// a fused step's cache had them, else elements of `names` and `specs`, which must be UTF-8.
fn name_and_spec<'a>(
    checked: Option<&'a CheckedNames>,
    names: Strings<'a>,
    specs: Strings<'a>,
    position: usize,
) -> Result<(&'a str, &'a str), KernelError> {
    match checked {
        Some(checked) => Ok((checked.name(position), checked.spec(position))),
        None => Ok((utf8(&names[position], 1)?, utf8(&specs[position], 2)?)),
    }
}

/// The names and specs of a fused step's `SaveV2` or `RestoreV2`, checked for UTF-8 once and
/// kept between runs. They are the plan's constants: checking them at every run touched
/// 100,000 names lying apart on the heap, a cache miss each, where the bundle code alone reads
/// its names one after another. The cache holds the checked strings of the last name and
/// spec tensors it was asked about (their storage is shared and never changes while the
/// cache holds it), and makes them again for any other. Cloning keeps what was made.
#[derive(Debug, Default)]
pub(crate) struct NamesCache(Mutex<Option<Arc<CheckedNames>>>);

impl Clone for NamesCache {
    fn clone(&self) -> NamesCache {
        NamesCache(Mutex::new(lock(&self.0).clone()))
    }
}

/// Names and specs checked for UTF-8, one after another in one buffer.
#[derive(Debug)]
pub(crate) struct CheckedNames {
    /// The tensors they were read from, held so that their storage stays theirs.
    names: HostTensor,
    specs: HostTensor,
    /// Every name, then every spec.
    text: String,
    /// Where each of them starts in `text`, and where the last one ends.
    bounds: Vec<usize>,
}

impl CheckedNames {
    /// The strings of `names` and `specs` (string vectors of one length), or `None` when one
    /// is not UTF-8 (the op then reports which, as it does uncached).
    fn new(names: &HostTensor, specs: &HostTensor) -> Option<CheckedNames> {
        let (names_of, specs_of) = (names.strings()?, specs.strings()?);
        let elements = names_of.iter().chain(specs_of);
        let mut text = String::with_capacity(elements.clone().map(Vec::len).sum());
        let mut bounds = Vec::with_capacity(names_of.len() + specs_of.len() + 1);
        bounds.push(0);
        for element in elements {
            text.push_str(std::str::from_utf8(element).ok()?);
            bounds.push(text.len());
        }
        Some(CheckedNames {
            names: names.clone(),
            specs: specs.clone(),
            text,
            bounds,
        })
    }

    /// String `index` of all of them.
    fn string(&self, index: usize) -> &str {
        &self.text[self.bounds[index]..self.bounds[index + 1]]
    }

    /// Name `index`.
    fn name(&self, index: usize) -> &str {
        self.string(index)
    }

    /// Spec `index`.
    fn spec(&self, index: usize) -> &str {
        self.string(self.bounds.len() / 2 + index)
    }
}

impl NamesCache {
    /// The checked strings of `names` and `specs`: the kept ones if they were made of these
    /// very tensors, else made now and kept. `None` when one is not UTF-8.
    fn get(&self, names: &HostTensor, specs: &HostTensor) -> Option<Arc<CheckedNames>> {
        let mut kept = lock(&self.0);
        if let Some(checked) = kept.as_ref().filter(|checked| {
            checked.names.shares_storage_with(names) && checked.specs.shares_storage_with(specs)
        }) {
            return Some(Arc::clone(checked));
        }
        let checked = Arc::new(CheckedNames::new(names, specs)?);
        *kept = Some(Arc::clone(&checked));
        Some(checked)
    }
}

/// The run's checkpoint backend, which checkpoint ops need.
fn backend<'a>(cx: &KernelCx<'a>) -> Result<&'a dyn CheckpointIo, KernelError> {
    cx.io
        .ok_or_else(|| KernelError::invalid("the run has no checkpoint backend"))
}

/// The elements of a string vector input, UTF-8 or not.
type Strings<'a> = &'a [Vec<u8>];

/// The inputs `SaveV2` and `RestoreV2` share: the prefix, then `len` tensor names and `len`
/// shape-and-slice specs. Their elements are checked for UTF-8 as the requests are made
/// ([`utf8`]); an error then is replaced by [`first_error`].
fn prefix_names_specs(
    inputs: &[HostTensor],
    len: usize,
) -> Result<(&str, Strings<'_>, Strings<'_>), KernelError> {
    let prefix = utf8_scalar(inputs, 0)?;
    let names = string_vector(inputs, 1, len)?;
    let specs = string_vector(inputs, 2, len).map_err(|err| first_error(names, &[], err))?;
    Ok((prefix, names, specs))
}

/// The error the ops report first, given that `err` came up while the requests were made of
/// `names` and `specs`: the inputs are checked one after another, every name (input 1), then
/// every spec (input 2), then the rest.
fn first_error(names: &[Vec<u8>], specs: &[Vec<u8>], err: KernelError) -> KernelError {
    let utf8_all = |elements: &[Vec<u8>], index| {
        elements
            .iter()
            .try_for_each(|bytes| utf8(bytes, index).map(drop))
    };
    utf8_all(names, 1)
        .and_then(|()| utf8_all(specs, 2))
        .err()
        .unwrap_or(err)
}

/// Input `index` as the elements of a vector of `len` strings.
fn string_vector(
    inputs: &[HostTensor],
    index: usize,
    len: usize,
) -> Result<&[Vec<u8>], KernelError> {
    let tensor = typed_input(inputs, index, DType::String)?;
    if tensor.shape() != [len as u64] {
        return Err(KernelError::InputShape {
            input: index,
            expected: format!("shape [{len}]"),
            got: tensor.shape().to_vec(),
        });
    }
    Ok(tensor.strings().unwrap_or_default())
}

/// Element `bytes` of string input `index`, which must be UTF-8.
fn utf8(bytes: &[u8], index: usize) -> Result<&str, KernelError> {
    std::str::from_utf8(bytes)
        .map_err(|_| KernelError::invalid(format!("input {index} is not valid UTF-8")))
}

/// The elements of string tensor input `index`, which must be UTF-8.
fn utf8_elements(tensor: &HostTensor, index: usize) -> Result<Vec<&str>, KernelError> {
    tensor
        .strings()
        .unwrap_or_default()
        .iter()
        .map(|bytes| utf8(bytes, index))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names and specs the cache hands out, as owned strings.
    fn strings(checked: &CheckedNames, len: usize) -> Vec<(String, String)> {
        (0..len)
            .map(|index| {
                (
                    checked.name(index).to_owned(),
                    checked.spec(index).to_owned(),
                )
            })
            .collect()
    }

    /// The cache gives the strings of the tensors it is asked about: kept while they are the
    /// same tensors (shared storage), made again for others, and none when one is not UTF-8.
    #[test]
    fn the_names_cache_follows_the_tensors_it_is_given() {
        let cache = NamesCache::default();
        let names = HostTensor::string_vector(["a", "bé", ""]);
        let specs = HostTensor::string_vector(["", "4 0,2", "x"]);
        let expected_first = [("a", ""), ("bé", "4 0,2"), ("", "x")]
            .map(|(name, spec)| (name.to_owned(), spec.to_owned()));
        let first = cache.get(&names, &specs).expect("UTF-8");
        assert_eq!(strings(&first, 3), expected_first);
        // The same tensors (a clone shares the storage): the kept strings.
        let again = cache.get(&names.clone(), &specs.clone()).expect("UTF-8");
        assert!(Arc::ptr_eq(&first, &again));
        // Equal contents in other storage are checked again, and so are other names.
        let other = HostTensor::string_vector(["c", "d", "e"]);
        let second = cache.get(&other, &specs).expect("UTF-8");
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(strings(&second, 3)[2], ("e".to_owned(), "x".to_owned()));
        let bad = HostTensor::string_vector([b"a".to_vec(), vec![0xff], b"c".to_vec()]);
        assert!(cache.get(&bad, &specs).is_none());
        assert!(cache.get(&names, &bad).is_none());
        // The cache is left as it was, and a clone keeps what it holds.
        let kept = cache.clone().get(&other, &specs).expect("UTF-8");
        assert!(Arc::ptr_eq(&second, &kept));
    }
}
