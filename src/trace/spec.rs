//! Spec files: the JSON input of `saveplan compile`, read with serde.
//!
//! A spec file is the `variables` and `options` of a fixture's `case.json`, taken as they are;
//! other top-level fields (`description`, `files`, …) are ignored:
//!
//! ```json
//! {
//!   "variables": [
//!     {"checkpoint_key": "part", "dtype": "float32", "shape": [2, 3],
//!      "device": "/job:localhost/replica:0/task:0/device:CPU:0", "slice_spec": "4 3 0,2:0,3",
//!      "name": "part_0", "read": "saveable", "trackable": "part", "init": [[1, 2, 3], [4, 5, 6]]}
//!   ],
//!   "options": {"experimental_io_device": null,
//!               "experimental_sharding_callback": "MaxShardSizePolicy", "max_shard_size": 100}
//! }
//! ```
//!
//! Per variable, `checkpoint_key`, `dtype` and `shape` are required; `device` and
//! `slice_spec` default to `""`. The optional extras say how the traced graph creates the
//! variable: `name` (the `VarHandleOp` name, default the key), `init` (initial values, nested
//! or flat, or one value that fills the shape; default `tf.zeros`), `read` (`"graph"` or
//! `"saveable"`, see [`ReadKind`]; by default what TensorFlow does: `"saveable"` for a slice,
//! a variable with a `slice_spec`, as `PartitionedVariable` slices are read when the save
//! runs, `"graph"` otherwise) and `trackable` (variables with the same
//! `trackable` string are restored together; default: each on its own).
//! A variable on a parallel device lists its component devices in `parallel_devices` instead
//! of a `device`; its `checkpoint_key` ends in `VARIABLE_VALUE` and each further component is
//! saved under `parallel_component_<i>` (see [`super::parallel_variable`]).
//!
//! Besides TensorFlow's options, `options` takes `unique_temp_prefix` (`true` writes shards
//! under `<prefix>_temp_<uuid>/part`, with a fresh v4 uuid per call of
//! [`SpecFile::options`]) and `unique_temp_id` (that id instead of a fresh one).

use std::borrow::Cow;
use std::collections::HashMap;

use saveplan_ir::DType;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::{
    ConstError, Init, MaxShardSize, ReadKind, SaveableTensor, Scalar, ShardByTask, TraceError,
    TraceOptions, Trackable, VariableDef,
};

/// A parsed spec file.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SpecFile {
    /// The serialized tensors, in saver order.
    pub variables: Vec<VariableSpec>,
    /// `CheckpointOptions`; `null` or absent for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<OptionsSpec>,
}

/// One entry of `variables`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct VariableSpec {
    /// The checkpoint key.
    pub checkpoint_key: String,
    /// The dtype by TensorFlow name (`float32`, `DT_FLOAT`, `half`, …).
    pub dtype: String,
    /// The shape of the variable (of the slice, when sliced).
    pub shape: Vec<i64>,
    /// The device string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub device: String,
    /// The slice spec; `""` for a whole tensor.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub slice_spec: String,
    /// The `VarHandleOp` name; the checkpoint key when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Initial values (numbers, bools or strings, nested or flat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<serde_json::Value>,
    /// How the saved tensor is read; when absent, as TensorFlow reads it: a slice of a
    /// partitioned variable (a non-empty `slice_spec`) when the save runs
    /// ([`ReadSpec::Saveable`]), anything else in the graph ([`ReadSpec::Graph`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<ReadSpec>,
    /// A trackable id grouping variables restored together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trackable: Option<String>,
    /// The component devices of a variable on a parallel device (see
    /// [`super::parallel_variable`]); `device` and `slice_spec` must then be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_devices: Option<Vec<String>>,
}

/// The `read` field of a variable.
#[derive(Copy, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReadSpec {
    /// [`ReadKind::Graph`].
    Graph,
    /// [`ReadKind::Saveable`].
    Saveable,
}

/// The `options` object (TensorFlow's `CheckpointOptions`). An unknown field is an error (a
/// misspelt option must not be ignored).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OptionsSpec {
    /// `experimental_io_device`.
    #[serde(default)]
    pub experimental_io_device: Option<String>,
    /// `experimental_sharding_callback` by class name: `ShardByTaskPolicy` or
    /// `MaxShardSizePolicy`.
    #[serde(default)]
    pub experimental_sharding_callback: Option<String>,
    /// The byte limit of `MaxShardSizePolicy`.
    #[serde(default)]
    pub max_shard_size: Option<u64>,
    /// Write shards under `<prefix>_temp_<id>/part` with a fresh uuid as id (see
    /// [`TraceOptions::unique_temp_id`]).
    #[serde(default)]
    pub unique_temp_prefix: bool,
    /// The id to use instead of a fresh uuid (tests need a fixed one); implies
    /// `unique_temp_prefix`.
    #[serde(default)]
    pub unique_temp_id: Option<String>,
}

/// About how many variables the spec `text` lists, to size their vector ahead: the times
/// `"checkpoint_key"` appears, at most one per 40 bytes (the shortest entry's length). A
/// vector of 100,000 entries grown one doubling at a time copied 26 MB and touched twice the
/// memory it ended with.
fn expected_variables(text: &str) -> usize {
    let keys = memchr::memmem::find_iter(text.as_bytes(), b"\"checkpoint_key\"").count();
    keys.min(text.len() / 40)
}

/// Reads a [`SpecFile`] as its derived `Deserialize` would (the same fields, defaults and
/// errors; other top-level fields ignored), with room made ahead for `variables` entries.
struct SpecSeed {
    variables: usize,
}

impl<'de> DeserializeSeed<'de> for SpecSeed {
    type Value = SpecFile;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<SpecFile, D::Error> {
        deserializer.deserialize_struct("SpecFile", &["variables", "options"], self)
    }
}

impl<'de> Visitor<'de> for SpecSeed {
    type Value = SpecFile;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("struct SpecFile")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SpecFile, A::Error> {
        use serde::de::Error;
        let Some(variables) = seq.next_element_seed(VariablesSeed(self.variables))? else {
            return Err(A::Error::invalid_length(
                0,
                &"struct SpecFile with 2 elements",
            ));
        };
        let options = seq.next_element()?.flatten();
        Ok(SpecFile { variables, options })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpecFile, A::Error> {
        use serde::de::Error;
        let (mut variables, mut options) = (None, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "variables" if variables.is_some() => {
                    return Err(A::Error::duplicate_field("variables"));
                }
                "variables" => {
                    variables = Some(map.next_value_seed(VariablesSeed(self.variables))?)
                }
                "options" if options.is_some() => return Err(A::Error::duplicate_field("options")),
                "options" => options = Some(map.next_value()?),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(SpecFile {
            variables: variables.ok_or_else(|| A::Error::missing_field("variables"))?,
            options: options.flatten(),
        })
    }
}

/// The `variables` array, read into a vector with room for as many entries as the seed says.
struct VariablesSeed(usize);

impl<'de> DeserializeSeed<'de> for VariablesSeed {
    type Value = Vec<VariableSpec>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for VariablesSeed {
    type Value = Vec<VariableSpec>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Room asked for, not required: a text that names `checkpoint_key` far more often than
        // it lists variables must not abort the process on a machine that cannot reserve it.
        let mut variables = Vec::new();
        let _ = variables.try_reserve_exact(self.0);
        while let Some(variable) = seq.next_element()? {
            variables.push(variable);
        }
        Ok(variables)
    }
}

impl<'a> From<&'a SpecFile> for Cow<'a, SpecFile> {
    fn from(spec: &'a SpecFile) -> Self {
        Cow::Borrowed(spec)
    }
}

impl From<SpecFile> for Cow<'_, SpecFile> {
    fn from(spec: SpecFile) -> Self {
        Cow::Owned(spec)
    }
}

impl SpecFile {
    /// Parses a spec file's text.
    pub fn parse(text: &str) -> Result<SpecFile, TraceError> {
        let mut json = serde_json::Deserializer::from_str(text);
        let spec = SpecSeed {
            variables: expected_variables(text),
        }
        .deserialize(&mut json)
        .and_then(|spec| json.end().map(|()| spec));
        spec.map_err(TraceError::Json)
    }

    /// The trackables, in order of their first variable.
    pub fn trackables(&self) -> Result<Vec<Trackable>, TraceError> {
        grouped(self.variables.iter().map(|variable| {
            let id = variable.trackable.as_deref().map(Cow::Borrowed);
            Ok((id, variable.to_tensors()?))
        }))
    }

    /// [`SpecFile::trackables`] of a spec no longer needed: each variable's strings and shape
    /// move into its tensor rather than being copied, and what is left of the entry is freed
    /// as it goes, so the tensors take its memory back: no copies to make, and no fresh pages
    /// to fault in for them.
    pub fn into_trackables(self) -> Result<Vec<Trackable>, TraceError> {
        grouped(self.variables.into_iter().map(|mut variable| {
            let id = variable.trackable.take().map(Cow::Owned);
            Ok((id, variable.into_tensors()?))
        }))
    }

    /// The trace options.
    pub fn options(&self) -> Result<TraceOptions, TraceError> {
        let Some(options) = &self.options else {
            return Ok(TraceOptions::default());
        };
        let sharding: Box<dyn super::ShardingPolicy> =
            match options.experimental_sharding_callback.as_deref() {
                None | Some("ShardByTaskPolicy") => Box::new(ShardByTask),
                Some("MaxShardSizePolicy") => Box::new(MaxShardSize {
                    max_shard_size: options
                        .max_shard_size
                        .ok_or(TraceError::MissingMaxShardSize)?,
                }),
                Some(other) => {
                    return Err(TraceError::UnknownShardingCallback {
                        name: other.to_owned(),
                    });
                }
            };
        let unique_temp_id = match (&options.unique_temp_id, options.unique_temp_prefix) {
            (Some(id), _) => Some(id.clone()),
            (None, true) => Some(super::new_temp_id()),
            (None, false) => None,
        };
        Ok(TraceOptions {
            io_device: options.experimental_io_device.clone(),
            sharding,
            registered_savers: Vec::new(),
            unique_temp_id,
        })
    }
}

/// The tensors of each entry grouped into trackables by the entry's trackable id (an entry
/// without one is a trackable of its own), in order of their first entry.
fn grouped<'a>(
    entries: impl Iterator<Item = Result<(Option<Cow<'a, str>>, Vec<SaveableTensor>), TraceError>>,
) -> Result<Vec<Trackable>, TraceError> {
    let mut trackables: Vec<Trackable> = Vec::new();
    let mut by_id: HashMap<Cow<'a, str>, usize> = HashMap::new();
    for entry in entries {
        let (id, tensors) = entry?;
        let Some(id) = id else {
            trackables.push(Trackable { tensors });
            continue;
        };
        match by_id.get(&id) {
            Some(&slot) => trackables[slot].tensors.extend(tensors),
            None => {
                by_id.insert(id, trackables.len());
                trackables.push(Trackable { tensors });
            }
        }
    }
    Ok(trackables)
}

/// What a tensor takes of its entry as it is ([`VariableSpec::tensor`]): copied from an entry
/// kept, moved out of one let go of.
struct TensorParts {
    checkpoint_key: String,
    slice_spec: String,
    shape: Vec<i64>,
    device: String,
    name: Option<String>,
}

impl VariableSpec {
    /// The tensors of this entry: one, or one per component of a parallel variable.
    fn to_tensors(&self) -> Result<Vec<SaveableTensor>, TraceError> {
        let parts = TensorParts {
            checkpoint_key: self.checkpoint_key.clone(),
            slice_spec: self.slice_spec.clone(),
            shape: self.shape.clone(),
            device: self.device.clone(),
            name: self.name.clone(),
        };
        self.tensors(parts)
    }

    /// [`VariableSpec::to_tensors`], moving the entry's strings and shape into its tensor.
    fn into_tensors(mut self) -> Result<Vec<SaveableTensor>, TraceError> {
        if self.parallel_devices.is_some() {
            // Several tensors share the entry's parts: copied (parallel variables are few).
            return self.to_tensors();
        }
        let parts = TensorParts {
            checkpoint_key: std::mem::take(&mut self.checkpoint_key),
            slice_spec: std::mem::take(&mut self.slice_spec),
            shape: std::mem::take(&mut self.shape),
            device: std::mem::take(&mut self.device),
            name: self.name.take(),
        };
        self.tensors(parts)
    }

    /// The tensors of this entry, made of `parts` (this entry's own, copied or moved out):
    /// one, or one per component of a parallel variable.
    fn tensors(&self, parts: TensorParts) -> Result<Vec<SaveableTensor>, TraceError> {
        let tensor = self.tensor(parts)?;
        let Some(devices) = &self.parallel_devices else {
            return Ok(vec![tensor]);
        };
        if !tensor.device.is_empty() || !tensor.slice_spec.is_empty() {
            return Err(TraceError::BadParallelVariable {
                key: tensor.checkpoint_key.clone(),
                reason: "`device` and `slice_spec` must be empty; components take \
                         `parallel_devices`"
                    .to_owned(),
            });
        }
        let trackable = super::parallel_variable(
            &tensor.checkpoint_key,
            tensor.dtype,
            &tensor.shape,
            devices,
            &tensor.variable,
        )?;
        Ok(trackable.tensors)
    }

    /// The tensor of this entry, made of `parts`.
    fn tensor(&self, parts: TensorParts) -> Result<SaveableTensor, TraceError> {
        let TensorParts {
            checkpoint_key,
            slice_spec,
            shape,
            device,
            name,
        } = parts;
        let dtype = DType::parse(&self.dtype).ok_or_else(|| TraceError::UnknownDType {
            key: checkpoint_key.clone(),
            dtype: self.dtype.clone(),
        })?;
        let init = match &self.init {
            None => Init::Zeros,
            Some(value) => {
                let mut values = Vec::new();
                flatten(value, &mut values).map_err(|reason| TraceError::BadInit {
                    key: checkpoint_key.clone(),
                    reason,
                })?;
                Init::Values(values)
            }
        };
        let read = match self.read {
            Some(ReadSpec::Graph) => ReadKind::Graph,
            Some(ReadSpec::Saveable) => ReadKind::Saveable,
            None if slice_spec.is_empty() => ReadKind::Graph,
            None => ReadKind::Saveable,
        };
        Ok(SaveableTensor {
            checkpoint_key,
            slice_spec,
            dtype,
            shape,
            device,
            variable: VariableDef { name, init, read },
        })
    }
}

/// Appends the leaves of a (nested) JSON value in row-major order.
fn flatten(value: &serde_json::Value, out: &mut Vec<Scalar>) -> Result<(), ConstError> {
    use serde_json::Value;
    match value {
        Value::Array(items) => {
            for item in items {
                flatten(item, out)?;
            }
        }
        Value::Bool(b) => out.push(Scalar::Bool(*b)),
        Value::String(s) => out.push(Scalar::Bytes(s.as_bytes().to_vec())),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => out.push(Scalar::Int(i)),
            (None, Some(f)) if n.is_f64() => out.push(Scalar::Float(f)),
            _ => return Err(ConstError::NumberOutOfRange(n.to_string())),
        },
        Value::Null | Value::Object(_) => {
            return Err(ConstError::UnsupportedValue(value.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`SpecFile::parse`] reads what the derived `Deserialize` reads, and fails where it
    /// fails with the same message (position included), whatever room it made ahead.
    #[test]
    fn parse_reads_as_the_derived_deserialize_does() {
        let variable = r#"{"checkpoint_key": "a", "dtype": "float32", "shape": [2]}"#;
        let texts = [
            format!(r#"{{"variables": [{variable}, {variable}]}}"#),
            format!(r#"{{"variables": [{variable}], "options": null, "description": "x"}}"#),
            format!(r#"{{"description": {{"variables": 1}}, "variables": [{variable}]}}"#),
            format!(r#"{{"vari\u0061bles": [{variable}], "options": {{"max_shard_size": 5}}}}"#),
            format!(r#"[[{variable}], {{"unique_temp_prefix": true}}]"#),
            format!(r#"[[{variable}]]"#),
            format!(r#"[[{variable}], null, 3]"#),
            "[]".to_owned(),
            "{}".to_owned(),
            r#"{"options": {}}"#.to_owned(),
            r#"{"variables": [], "variables": []}"#.to_owned(),
            r#"{"variables": [], "options": null, "options": null}"#.to_owned(),
            r#"{"variables": {}}"#.to_owned(),
            r#"{"variables": [1]}"#.to_owned(),
            r#"{"variables": [], "options": {"bad": 1}}"#.to_owned(),
            r#"{"variables": []} x"#.to_owned(),
            r#"{"variables": ["#.to_owned(),
            r#""checkpoint_key""#.to_owned(),
            "null".to_owned(),
            String::new(),
        ];
        for text in texts {
            let ours = SpecFile::parse(&text).map_err(|err| match err {
                TraceError::Json(err) => err.to_string(),
                other => panic!("{text}: not a JSON error: {other}"),
            });
            let derived = serde_json::from_str::<SpecFile>(&text).map_err(|err| err.to_string());
            assert_eq!(format!("{ours:?}"), format!("{derived:?}"), "{text}");
        }
    }

    /// [`SpecFile::into_trackables`] gives what [`SpecFile::trackables`] gives, error included:
    /// every fixture case's spec, trackables shared by id, parallel variables, and each
    /// refusal of an entry (the first bad one in input order).
    #[test]
    fn into_trackables_gives_what_trackables_gives() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
        let mut texts: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|case| std::fs::read_to_string(case.unwrap().path().join("case.json")).unwrap())
            .collect();
        assert!(
            texts.len() >= 9,
            "{}: {} cases",
            root.display(),
            texts.len()
        );
        let entry = |key: &str, dtype: &str, extra: &str| {
            format!(r#"{{"checkpoint_key": "{key}", "dtype": "{dtype}", "shape": [2]{extra}}}"#)
        };
        let f32 = |key: &str, extra: &str| entry(key, "float32", extra);
        let device = r#", "device": "/job:w/replica:0/task:0/device:CPU:0""#;
        let parallel = r#", "parallel_devices": ["/device:CPU:0", "/device:CPU:1"]"#;
        let cases = [
            vec![
                f32("a", r#", "trackable": "t""#),
                f32("b", ""),
                f32("c", r#", "trackable": "t""#),
            ],
            vec![
                f32("a", device),
                f32("p/.ATTRIBUTES/VARIABLE_VALUE", parallel),
            ],
            vec![f32(
                "a",
                r#", "init": [1, 2], "name": "n", "read": "saveable""#,
            )],
            vec![
                f32("a", r#", "slice_spec": "4 0,2""#),
                f32("b", r#", "read": "graph""#),
            ],
            vec![
                f32("a", ""),
                f32("b", r#", "init": [[1], {}]"#),
                entry("c", "x", ""),
            ],
            vec![
                f32("a", ""),
                entry("b", "float33", ""),
                f32("c", r#", "init": [null]"#),
            ],
            vec![f32("p", &format!("{parallel}{device}"))],
        ];
        texts.extend(
            cases
                .iter()
                .map(|vars| format!(r#"{{"variables": [{}]}}"#, vars.join(", "))),
        );
        for text in texts {
            let spec = SpecFile::parse(&text).unwrap();
            let lent = format!("{:?}", spec.trackables());
            let given = format!("{:?}", spec.into_trackables());
            assert_eq!(given, lent, "{text}");
        }
    }

    /// The room made ahead counts the keys, at most one per 40 bytes of text.
    #[test]
    fn room_is_made_for_each_key_within_the_text() {
        let entry = r#"{"checkpoint_key":"","dtype":"","shape":[]}"#;
        assert_eq!(expected_variables(&format!("[{entry},{entry}]")), 2);
        assert_eq!(expected_variables(r#""checkpoint_key""checkpoint_key""#), 0);
        assert_eq!(expected_variables(""), 0);
    }
}
