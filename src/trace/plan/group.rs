//! The validated input of a plan: the tensors of every trackable flattened in order, each
//! device string parsed once, and the tensors grouped by task (their device with `CPU:0`),
//! tasks in order of first appearance.

use rustc_hash::{FxHashMap, FxHashSet};

use saveplan_ir::device::DeviceSpec;
use saveplan_ir::slice::ShapeAndSlice;

use crate::trace::{
    BadSlice, ConstError, Init, MAX_RANK, SaveableTensor, TraceError, TraceOptions, Trackable,
};

/// The validated input: tensors flattened in trackable order, grouped by task.
pub(in crate::trace) struct Inputs<'a> {
    pub(in crate::trace) tensors: Vec<&'a SaveableTensor>,
    /// The distinct devices of the tensors, in order of first appearance.
    device_table: Vec<Device>,
    /// The device of each tensor, as an index into `device_table`.
    pub(super) device_of: Vec<u32>,
    /// The trackable of each tensor.
    pub(super) trackable_of: Vec<usize>,
    /// Where each trackable's tensors start in `tensors` (they are consecutive), and where
    /// the last one's end: one more entry than there are trackables.
    trackable_start: Vec<usize>,
    /// Tasks in order of first appearance.
    pub(super) tasks: Vec<Task>,
    pub(super) io_device: Option<DeviceSpec>,
}

/// One distinct device string of the input, parsed once.
struct Device {
    /// The canonical device string.
    name: String,
    /// The parsed device.
    spec: DeviceSpec,
    /// The device's task: its `CPU:0`.
    host: String,
}

/// One task: its `CPU:0` and its tensors in input order.
pub(super) struct Task {
    pub(super) spec: DeviceSpec,
    pub(super) name: String,
    pub(super) tensors: Vec<usize>,
}

impl<'a> Inputs<'a> {
    /// Orders each task's tensors by checkpoint key: a graph-mode `read()` restores in key
    /// order, whatever order the write saved in.
    pub(in crate::trace) fn sort_tasks_by_key(&mut self) {
        let tensors = &self.tensors;
        for task in &mut self.tasks {
            task.tensors
                .sort_by(|&a, &b| tensors[a].checkpoint_key.cmp(&tensors[b].checkpoint_key));
        }
    }

    pub(in crate::trace) fn collect(
        trackables: &'a [Trackable],
        options: &TraceOptions,
    ) -> Result<Inputs<'a>, TraceError> {
        let io_device = options
            .io_device
            .as_deref()
            .map(DeviceSpec::parse)
            .transpose()
            .map_err(|source| TraceError::BadIoDevice { source })?;
        let n_tensors: usize = trackables.iter().map(|t| t.tensors.len()).sum();
        let mut inputs = Inputs {
            tensors: Vec::with_capacity(n_tensors),
            device_table: Vec::new(),
            device_of: Vec::with_capacity(n_tensors),
            trackable_of: Vec::with_capacity(n_tensors),
            trackable_start: Vec::with_capacity(trackables.len() + 1),
            tasks: Vec::new(),
            io_device,
        };
        // Keys given in increasing order (as a checkpoint lists them, and `saveplan spec`
        // writes them) are distinct without a set of them: 100,000 keys put in a hash set
        // cost a cache miss each, in every process of a cluster.
        let keys_increase = (trackables.iter().flat_map(|t| &t.tensors))
            .map(|tensor| (tensor.checkpoint_key.as_str(), tensor.slice_spec.as_str()))
            .is_sorted_by(|a, b| a < b);
        let mut seen: FxHashSet<(&str, &str)> = match keys_increase {
            true => FxHashSet::default(),
            false => FxHashSet::with_capacity_and_hasher(n_tensors, Default::default()),
        };
        let mut task_index: FxHashMap<String, usize> = FxHashMap::default();
        // Per distinct device string: its entry in `device_table` and its task.
        let mut by_device: FxHashMap<&str, (u32, usize)> = FxHashMap::default();
        for (trackable_idx, trackable) in trackables.iter().enumerate() {
            inputs.trackable_start.push(inputs.tensors.len());
            for tensor in &trackable.tensors {
                validate(tensor)?;
                if !keys_increase && !seen.insert((&tensor.checkpoint_key, &tensor.slice_spec)) {
                    return Err(TraceError::DuplicateKey {
                        key: tensor.checkpoint_key.clone(),
                        slice_spec: tensor.slice_spec.clone(),
                    });
                }
                let (device, task) = match by_device.get(tensor.device.as_str()) {
                    Some(&known) => known,
                    None => {
                        let spec = DeviceSpec::parse(&tensor.device).map_err(|source| {
                            TraceError::BadDevice {
                                key: tensor.checkpoint_key.clone(),
                                source,
                            }
                        })?;
                        let task_spec = spec.set_cpu0();
                        let task_name = task_spec.to_string();
                        let task = *task_index.entry(task_name.clone()).or_insert_with(|| {
                            inputs.tasks.push(Task {
                                spec: task_spec,
                                name: task_name.clone(),
                                tensors: Vec::new(),
                            });
                            inputs.tasks.len() - 1
                        });
                        let device = inputs.device_table.len() as u32;
                        inputs.device_table.push(Device {
                            name: spec.to_string(),
                            spec,
                            host: task_name,
                        });
                        by_device.insert(&tensor.device, (device, task));
                        (device, task)
                    }
                };
                let index = inputs.tensors.len();
                inputs.tasks[task].tensors.push(index);
                inputs.device_of.push(device);
                inputs.tensors.push(tensor);
                inputs.trackable_of.push(trackable_idx);
            }
        }
        inputs.trackable_start.push(inputs.tensors.len());
        if inputs.tensors.is_empty() {
            return Err(TraceError::Empty);
        }
        Ok(inputs)
    }
}

impl Inputs<'_> {
    /// The tensors of trackable `trackable`, as indices into `tensors`.
    pub(super) fn members(&self, trackable: usize) -> std::ops::Range<usize> {
        self.trackable_start[trackable]..self.trackable_start[trackable + 1]
    }

    /// The number of trackables.
    pub(super) fn n_trackables(&self) -> usize {
        self.trackable_start.len() - 1
    }

    /// The number of distinct tasks.
    pub(in crate::trace) fn n_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The tracer's groups of tensors (one shard each under the default policy), in order
    /// of first appearance: each one's task spec (its `CPU:0`) and its tensors, in input
    /// order.
    pub(in crate::trace) fn groups(&self) -> impl Iterator<Item = (&DeviceSpec, &[usize])> {
        (self.tasks.iter()).map(|task| (&task.spec, task.tensors.as_slice()))
    }

    /// The canonical device string of tensor `index`.
    pub(super) fn device(&self, index: usize) -> &str {
        &self.device_table[self.device_of[index] as usize].name
    }

    /// The parsed device of tensor `index`.
    pub(super) fn spec(&self, index: usize) -> &DeviceSpec {
        &self.device_table[self.device_of[index] as usize].spec
    }

    /// The `CPU:0` of tensor `index`'s task.
    pub(super) fn host(&self, index: usize) -> &str {
        &self.device_table[self.device_of[index] as usize].host
    }
}

/// Checks what can be checked on one tensor alone: shape, slice spec and initial value.
/// A shape TensorFlow can hold: no negative dimension, at most [`MAX_RANK`] dimensions and
/// at most 2^63 - 1 elements.
fn check_shape(key: &str, shape: &[i64]) -> Result<(), TraceError> {
    if shape.iter().any(|&dim| dim < 0) {
        return Err(TraceError::BadShape {
            key: key.to_owned(),
            shape: shape.to_vec(),
        });
    }
    if shape.len() > MAX_RANK {
        return Err(TraceError::RankTooLarge {
            key: key.to_owned(),
            rank: shape.len(),
        });
    }
    if shape
        .iter()
        .try_fold(1i64, |acc, &dim| acc.checked_mul(dim))
        .is_none()
    {
        return Err(TraceError::TooManyElements {
            key: key.to_owned(),
            shape: shape.to_vec(),
        });
    }
    Ok(())
}

fn validate(tensor: &SaveableTensor) -> Result<(), TraceError> {
    let key = &tensor.checkpoint_key;
    if key.is_empty() {
        return Err(TraceError::EmptyKey);
    }
    check_shape(key, &tensor.shape)?;
    if !tensor.slice_spec.is_empty() {
        let bad = |reason: BadSlice| TraceError::BadSliceSpec {
            key: key.clone(),
            spec: tensor.slice_spec.clone(),
            reason,
        };
        let spec = ShapeAndSlice::parse(&tensor.slice_spec).map_err(|err| bad(err.into()))?;
        check_shape(key, &spec.full_shape)?;
        let region = spec.region().map_err(|err| bad(err.into()))?;
        let lengths: Vec<i64> = region.iter().map(|&(_, length)| length).collect();
        if lengths != tensor.shape {
            return Err(bad(BadSlice::ShapeMismatch {
                slice: lengths,
                variable: tensor.shape.clone(),
            }));
        }
    }
    if let Init::Values(values) = &tensor.variable.init {
        let n_elements: i64 = tensor.shape.iter().product();
        if values.len() != 1 && i64::try_from(values.len()).ok() != Some(n_elements) {
            return Err(TraceError::BadInit {
                key: key.clone(),
                reason: ConstError::WrongCount {
                    n_values: values.len(),
                    n_elements,
                },
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::spec::SpecFile;

    /// The trackables of variables `(key, slice spec)`, whole float32[4] (sliced: rows of
    /// float32[4]).
    fn trackables(keys: &[(&str, &str)]) -> Vec<Trackable> {
        let variables: Vec<String> = (keys.iter())
            .map(|(key, slice)| {
                format!(
                    r#"{{"checkpoint_key": "{key}", "dtype": "float32", "shape": [{}],
                         "slice_spec": "{slice}"}}"#,
                    if slice.is_empty() { 4 } else { 2 }
                )
            })
            .collect();
        let text = format!(r#"{{"variables": [{}]}}"#, variables.join(", "));
        SpecFile::parse(&text).unwrap().trackables().unwrap()
    }

    /// A key given twice with the same slice spec is refused (keys given twice never
    /// increase strictly, so the set checks them), the first one given twice in input order
    /// named; a key with distinct slices is not, its pairs increasing or not.
    #[test]
    fn keys_given_twice_are_refused_and_distinct_pairs_pass() {
        let options = TraceOptions::default();
        let twice: [(&[(&str, &str)], &str); 4] = [
            (&[("a", ""), ("a", "")], "a"),
            (&[("a", ""), ("b", ""), ("b", "")], "b"),
            (&[("c", ""), ("a", ""), ("c", ""), ("a", "")], "c"),
            (&[("a", "4 0,2"), ("b", ""), ("a", "4 0,2")], "a"),
        ];
        for (keys, named) in twice {
            let given = trackables(keys);
            match Inputs::collect(&given, &options).map(|_| ()) {
                Err(TraceError::DuplicateKey { key, .. }) => assert_eq!(key, named, "{keys:?}"),
                other => panic!("{keys:?}: {other:?}"),
            }
        }
        for keys in [
            &[("a", "4 0,2"), ("a", "4 2,2"), ("b", "")][..],
            &[("b", ""), ("a", "4 2,2"), ("a", "4 0,2")][..],
            &[("a", ""), ("b", ""), ("c", "")][..],
        ] {
            let given = trackables(keys);
            assert!(Inputs::collect(&given, &options).is_ok(), "{keys:?}");
        }
    }
}
