//! The cache of traced save and restore functions of [`super::eager::EagerSaver`], mirroring
//! `tf.function`, and the events that say when and why it traced.
//!
//! # TensorFlow's rule
//!
//! In `tensorflow/python/checkpoint/functional_saver.py` (TensorFlow 2.21),
//! `MultiDeviceSaver.save` runs its save function directly unless it executes eagerly and the
//! tensors span more than one task (`context.executing_eagerly() and self._num_unique_tasks >
//! 1`); then it defines a `tf.function` (`tf_function_save`) inside the call and calls it.
//! `restore` does the same (`tf_function_restore`) when it executes eagerly and there is more
//! than one task or any tensor lives on a custom device. Because the function object is new on
//! every call, its own cache is always empty: every multi-task eager call traces again. The
//! source says why: the retrace picks up the latest options, such as
//! `experimental_io_device`.
//!
//! # What this cache does
//!
//! * One task: no function; the call runs op by op ([`CacheEvent::Eager`]).
//! * Several tasks, [`RetracePolicy::TensorFlow`] (the default): every call traces, as
//!   TensorFlow does. The reason says what a persistent cache would have seen: the first call
//!   of a kind finds [`RetraceReason::NoCachedFunction`], a call whose options differ from the
//!   previous call's gets [`RetraceReason::OptionsChanged`] (naming the fields), and a call
//!   with the same key gets [`RetraceReason::NewFunctionPerCall`].
//! * Several tasks, [`RetracePolicy::Cached`]: functions are kept per [`FunctionKey`] (the
//!   call, the input signature and the options); a call with a known key reuses its function
//!   ([`CacheEvent::Reused`]), any other traces with the reasons above.
//!
//! Custom devices are not modelled, so restore uses a function exactly when save does.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use saveplan_ir::DType;

use crate::exec::Executor;
use crate::trace::{TraceOptions, Trackable};

/// Which saver call.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Call {
    /// `save(prefix, options)`.
    Save,
    /// `restore(prefix, options)`.
    Restore,
}

impl Call {
    /// `save` or `restore`.
    pub fn name(self) -> &'static str {
        match self {
            Call::Save => "save",
            Call::Restore => "restore",
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a multi-task call traces its function again.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub enum RetracePolicy {
    /// TensorFlow's behaviour: a new function per call, so every call traces.
    #[default]
    TensorFlow,
    /// A `tf.function` kept across calls: trace only for a new [`FunctionKey`].
    Cached,
}

/// What a function is traced for: the call, the input signature and the options.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct FunctionKey {
    /// Save or restore.
    pub call: Call,
    /// The input signature.
    pub signature: Signature,
    /// The options that shape the trace.
    pub options: OptionsKey,
}

/// The input signature of a saver function: every tensor's identity, type and placement.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Signature {
    /// Per tensor: checkpoint key, slice spec, dtype, shape and device.
    pub tensors: Vec<(String, String, DType, Vec<i64>, String)>,
    /// The number of distinct tasks.
    pub n_tasks: usize,
}

/// The parts of [`TraceOptions`] a traced function depends on.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct OptionsKey {
    /// `experimental_io_device`.
    pub io_device: Option<String>,
    /// The sharding policy's [`cache_key`](crate::trace::ShardingPolicy::cache_key).
    pub sharding: String,
    /// The registered savers' names, in order.
    pub registered_savers: Vec<String>,
    /// The unique temporary id.
    pub unique_temp_id: Option<String>,
}

impl OptionsKey {
    /// The key of `options`.
    pub fn new(options: &TraceOptions) -> OptionsKey {
        OptionsKey {
            io_device: options.io_device.clone(),
            sharding: options.sharding.cache_key(),
            registered_savers: options
                .registered_savers
                .iter()
                .map(|saver| saver.name().to_owned())
                .collect(),
            unique_temp_id: options.unique_temp_id.clone(),
        }
    }

    /// The names of the fields that differ from `other`, in declaration order.
    pub fn changed_fields(&self, other: &OptionsKey) -> Vec<&'static str> {
        let mut fields = Vec::new();
        if self.io_device != other.io_device {
            fields.push("io_device");
        }
        if self.sharding != other.sharding {
            fields.push("sharding");
        }
        if self.registered_savers != other.registered_savers {
            fields.push("registered_savers");
        }
        if self.unique_temp_id != other.unique_temp_id {
            fields.push("unique_temp_id");
        }
        fields
    }
}

impl FunctionKey {
    /// The key of `call` on `trackables` (on `n_tasks` tasks) with `options`.
    pub fn new(
        call: Call,
        trackables: &[Trackable],
        n_tasks: usize,
        options: &TraceOptions,
    ) -> FunctionKey {
        let tensors = trackables
            .iter()
            .flat_map(|trackable| &trackable.tensors)
            .map(|tensor| {
                (
                    tensor.checkpoint_key.clone(),
                    tensor.slice_spec.clone(),
                    tensor.dtype,
                    tensor.shape.clone(),
                    tensor.device.clone(),
                )
            })
            .collect();
        FunctionKey {
            call,
            signature: Signature { tensors, n_tasks },
            options: OptionsKey::new(options),
        }
    }
}

/// Why a call traced its function.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RetraceReason {
    /// No earlier call of this kind.
    NoCachedFunction,
    /// The options differ from the previous call's in these fields.
    OptionsChanged {
        /// The field names (`io_device`, `sharding`, `registered_savers`, `unique_temp_id`).
        fields: Vec<&'static str>,
    },
    /// The input signature differs from the previous call's.
    SignatureChanged,
    /// Same key as before, but TensorFlow creates the function anew on every call.
    NewFunctionPerCall,
}

impl fmt::Display for RetraceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetraceReason::NoCachedFunction => f.write_str("no cached function"),
            RetraceReason::OptionsChanged { fields } => {
                write!(f, "options changed ({})", fields.join(", "))
            }
            RetraceReason::SignatureChanged => f.write_str("input signature changed"),
            RetraceReason::NewFunctionPerCall => {
                f.write_str("a new function per call (TensorFlow's rule for several tasks)")
            }
        }
    }
}

/// What one saver call did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CacheEvent {
    /// A single-task call ran op by op, without a function.
    Eager {
        /// Which call.
        call: Call,
    },
    /// The call traced a function.
    Traced {
        /// Which call.
        call: Call,
        /// Why.
        reason: RetraceReason,
    },
    /// The call reused a traced function.
    Reused {
        /// Which call.
        call: Call,
    },
}

impl fmt::Display for CacheEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheEvent::Eager { call } => write!(f, "{call}: eager, no function (one task)"),
            CacheEvent::Traced { call, reason } => write!(f, "{call}: traced: {reason}"),
            CacheEvent::Reused { call } => write!(f, "{call}: reused the traced function"),
        }
    }
}

/// Traced functions by key, and the log of what each call did.
#[derive(Debug)]
pub struct FunctionCache {
    policy: RetracePolicy,
    functions: BTreeMap<FunctionKey, Arc<Executor>>,
    /// The key of the previous call of each kind.
    last: BTreeMap<Call, FunctionKey>,
    events: Vec<CacheEvent>,
}

impl FunctionCache {
    /// An empty cache following `policy`.
    pub fn new(policy: RetracePolicy) -> FunctionCache {
        FunctionCache {
            policy,
            functions: BTreeMap::new(),
            last: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> RetracePolicy {
        self.policy
    }

    /// Looks `key` up for a call. Returns the function to reuse, or `None` when the call must
    /// trace (then [`FunctionCache::insert`] stores what it traced); either way the event is
    /// logged.
    pub fn lookup(&mut self, key: &FunctionKey) -> Option<Arc<Executor>> {
        let previous = self.last.insert(key.call, key.clone());
        if self.policy == RetracePolicy::Cached
            && let Some(function) = self.functions.get(key)
        {
            self.events.push(CacheEvent::Reused { call: key.call });
            return Some(Arc::clone(function));
        }
        let reason = match previous {
            None => RetraceReason::NoCachedFunction,
            Some(previous) if previous.signature != key.signature => {
                RetraceReason::SignatureChanged
            }
            Some(previous) if previous.options != key.options => RetraceReason::OptionsChanged {
                fields: key.options.changed_fields(&previous.options),
            },
            Some(_) => RetraceReason::NewFunctionPerCall,
        };
        self.events.push(CacheEvent::Traced {
            call: key.call,
            reason,
        });
        None
    }

    /// Stores the function traced for `key` (kept only under [`RetracePolicy::Cached`]) and
    /// returns it.
    pub fn insert(&mut self, key: FunctionKey, function: Executor) -> Arc<Executor> {
        let function = Arc::new(function);
        if self.policy == RetracePolicy::Cached {
            self.functions.insert(key, Arc::clone(&function));
        }
        function
    }

    /// Logs a call that used no function.
    pub fn record(&mut self, event: CacheEvent) {
        self.events.push(event);
    }

    /// Every event so far, oldest first.
    pub fn events(&self) -> &[CacheEvent] {
        &self.events
    }

    /// The number of functions kept.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// Whether no function is kept.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{MaxShardSize, SaveableTensor, VariableDef};

    fn trackables(device: &str) -> Vec<Trackable> {
        vec![Trackable {
            tensors: vec![SaveableTensor {
                checkpoint_key: "v".to_owned(),
                slice_spec: String::new(),
                dtype: DType::Float,
                shape: vec![2],
                device: device.to_owned(),
                variable: VariableDef::default(),
            }],
        }]
    }

    #[test]
    fn reasons_follow_the_previous_call_of_the_same_kind() {
        let mut cache = FunctionCache::new(RetracePolicy::TensorFlow);
        let cpu = trackables("/cpu:0");
        let options = TraceOptions::default();
        let sharded = TraceOptions {
            sharding: Box::new(MaxShardSize { max_shard_size: 8 }),
            ..TraceOptions::default()
        };
        let keys = [
            FunctionKey::new(Call::Save, &cpu, 1, &options),
            FunctionKey::new(Call::Restore, &cpu, 1, &options),
            FunctionKey::new(Call::Save, &cpu, 1, &sharded),
            FunctionKey::new(Call::Save, &trackables("/cpu:1"), 1, &sharded),
        ];
        for key in &keys {
            assert!(cache.lookup(key).is_none());
        }
        let reasons: Vec<String> = cache.events().iter().map(ToString::to_string).collect();
        assert_eq!(
            reasons,
            [
                "save: traced: no cached function",
                "restore: traced: no cached function",
                "save: traced: options changed (sharding)",
                "save: traced: input signature changed",
            ]
        );
    }

    #[test]
    fn max_shard_sizes_differ_in_the_key() {
        let small = OptionsKey::new(&TraceOptions {
            sharding: Box::new(MaxShardSize { max_shard_size: 8 }),
            ..TraceOptions::default()
        });
        let large = OptionsKey::new(&TraceOptions {
            sharding: Box::new(MaxShardSize { max_shard_size: 16 }),
            ..TraceOptions::default()
        });
        assert_eq!(small.changed_fields(&large), ["sharding"]);
        assert_eq!(small.changed_fields(&small.clone()), Vec::<&str>::new());
    }
}
