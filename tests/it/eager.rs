//! Eager mode: `EagerSaver` saves the g1–g6 specs (`tests/inputs/trace/g*.json`) op by op or
//! through traced functions and writes the same bytes as the graph-mode plan of `trace_flat`
//! on every backend; restores give the values back; the function cache logs when and why it
//! traced; an eager failure names the op and device and leaves no checkpoint.

use crate::support::exec::{backends, prepare, verified};
use crate::support::files::{file_bytes_under, files_under};
use crate::support::stack_saver::StackSaver;
use crate::support::{ErrorForm, TRACE_CASES, error_chain, for_each_case, root};

use std::collections::BTreeMap;
use std::path::Path;

use saveplan::exec::{Backend, BundleIo, CompiledPlan, HostTensor, RunContext, VariableStore};
use saveplan::session::{CacheEvent, Call, EagerBuilder, EagerSaver, RetracePolicy, RetraceReason};
use saveplan::trace::spec::SpecFile;
use saveplan::trace::{
    FlatParts, TraceOptions, Trackable, VariableOps, trace_flat, trace_flat_with,
};
use saveplan_ir::{DType, Graph, Op};
use tempfile::TempDir;

fn spec(name: &str) -> SpecFile {
    let path = root().join(format!("tests/inputs/trace/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    SpecFile::parse(&text).unwrap_or_else(|err| panic!("{name}: {err}"))
}

fn trackables(spec: &SpecFile) -> Vec<Trackable> {
    spec.trackables().unwrap()
}

fn options(spec: &SpecFile) -> TraceOptions {
    spec.options().unwrap()
}

/// A fresh directory and the checkpoint prefix `ckpt` in it.
fn checkpoint_dir() -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
    (dir, prefix)
}

/// Graph mode: the flat plan compiled once, variables initialized by their `Assign` ops, the
/// save run with the prefix fed.
fn graph_save(name: &str, backend: Backend, store: &VariableStore, prefix: &str) {
    let spec = spec(name);
    graph_save_with(name, &options(&spec), backend, store, prefix);
}

/// [`graph_save`] with `options`.
fn graph_save_with(
    name: &str,
    options: &TraceOptions,
    backend: Backend,
    store: &VariableStore,
    prefix: &str,
) {
    graph_save_spec(&spec(name), name, options, backend, store, prefix);
}

/// [`graph_save_with`] for a spec given as such (`name` labels failures).
fn graph_save_spec(
    spec: &SpecFile,
    name: &str,
    options: &TraceOptions,
    backend: Backend,
    store: &VariableStore,
    prefix: &str,
) {
    let flat = trace_flat(&trackables(spec), options).unwrap();
    let graph = &flat.module.graph;
    let inits: Vec<String> = graph
        .ops()
        .into_iter()
        .map(|id| graph.op(id))
        .filter(|node| node.op == Op::AssignVariableOp && node.name.ends_with("/Assign"))
        .map(|node| node.name.clone())
        .collect();
    let inits: Vec<&str> = inits.iter().map(String::as_str).collect();
    let init = CompiledPlan::compile(verified(&flat.module), &inits, &[]).unwrap();
    let save = CompiledPlan::compile(
        verified(&flat.module),
        &[flat.saver.save_target.as_str()],
        &[flat.saver.filename_tensor_name.as_str()],
    )
    .unwrap();
    let io = BundleIo::default();
    let cx = RunContext::new(store).with_io(&io);
    prepare(&init, backend).run(&cx, Vec::new()).unwrap();
    prepare(&save, backend)
        .run(&cx, vec![HostTensor::string_scalar(prefix)])
        .unwrap_or_else(|err| {
            panic!(
                "{name}: {backend}: {}",
                error_chain(&err, ErrorForm::OneLine)
            )
        });
}

/// For every g1–g6 spec, [`eager_matches_graph`]; a failure names the spec.
#[test]
fn eager_save_matches_graph_mode() {
    for_each_case(TRACE_CASES, eager_matches_graph);
}

/// Eager save of `name` matches graph mode byte for byte, and an eager restore into an empty
/// store gives every variable back.
fn eager_matches_graph(name: &str) {
    let spec = spec(name);
    for backend in backends() {
        let (graph_dir, graph_prefix) = checkpoint_dir();
        let graph_store = VariableStore::new();
        graph_save(name, backend, &graph_store, &graph_prefix);

        let (eager_dir, eager_prefix) = checkpoint_dir();
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let mut saver = EagerSaver::new(trackables(&spec))
            .unwrap()
            .with_backend(backend);
        saver.create_variables(&cx).unwrap();
        saver
            .save(&cx, &eager_prefix, &options(&spec))
            .unwrap_or_else(|err| {
                panic!(
                    "{name}: {backend}: {}",
                    error_chain(&err, ErrorForm::OneLine)
                )
            });
        let written = file_bytes_under(eager_dir.path());
        assert!(
            written.iter().any(|(file, _)| file == "ckpt.index"),
            "{name}: {backend}: {written:?}"
        );
        assert!(
            written == file_bytes_under(graph_dir.path()),
            "{name}: {backend}: eager and graph checkpoints differ"
        );
        assert_eq!(store.keys(), graph_store.keys(), "{name}: {backend}");

        let restored = VariableStore::new();
        let restore_cx = RunContext::new(&restored).with_io(&io);
        let mut restorer = EagerSaver::new(trackables(&spec))
            .unwrap()
            .with_backend(backend);
        restorer
            .restore(&restore_cx, &eager_prefix, &options(&spec))
            .unwrap_or_else(|err| {
                panic!(
                    "{name}: {backend}: {}",
                    error_chain(&err, ErrorForm::OneLine)
                )
            });
        assert_eq!(restored.keys(), store.keys(), "{name}: {backend}");
        for key in store.keys() {
            assert_eq!(
                restored.get(&key).unwrap(),
                store.get(&key).unwrap(),
                "{name}: {backend}: {key}"
            );
        }
        let expected = if saver.uses_function() {
            vec![CacheEvent::Traced {
                call: Call::Restore,
                reason: RetraceReason::NoCachedFunction,
            }]
        } else {
            vec![CacheEvent::Eager {
                call: Call::Restore,
            }]
        };
        assert_eq!(restorer.trace_log(), expected, "{name}: {backend}");
    }
}

#[test]
fn task_counts_choose_eager_or_function() {
    let uses: Vec<(usize, bool)> = TRACE_CASES
        .iter()
        .map(|name| {
            let saver = EagerSaver::new(trackables(&spec(name))).unwrap();
            (saver.n_tasks(), saver.uses_function())
        })
        .collect();
    // g2 has two CPUs on one task; g3 and g4 span two tasks.
    assert_eq!(
        uses,
        [
            (1, false),
            (1, false),
            (2, true),
            (2, true),
            (1, false),
            (1, false)
        ]
    );
}

#[test]
fn single_task_saves_run_without_a_function() {
    let spec = spec("g1_single_cpu");
    let store = VariableStore::new();
    let io = BundleIo::default();
    let cx = RunContext::new(&store).with_io(&io);
    let mut saver = EagerSaver::new(trackables(&spec)).unwrap();
    saver.create_variables(&cx).unwrap();
    let (_dir, prefix) = checkpoint_dir();
    saver.save(&cx, &prefix, &options(&spec)).unwrap();
    saver.save(&cx, &prefix, &options(&spec)).unwrap();
    let eager = CacheEvent::Eager { call: Call::Save };
    assert_eq!(saver.trace_log(), [eager.clone(), eager]);
}

fn io_device_options() -> TraceOptions {
    TraceOptions {
        io_device: Some("/job:localhost/replica:0/task:0/device:CPU:0".to_owned()),
        ..TraceOptions::default()
    }
}

/// Four saves of g3 (two tasks): default options twice, with an io device, default again.
fn four_saves(policy: RetracePolicy) -> Vec<CacheEvent> {
    let spec = spec("g3_two_tasks");
    let store = VariableStore::new();
    let io = BundleIo::default();
    let cx = RunContext::new(&store).with_io(&io);
    let mut saver = EagerSaver::new(trackables(&spec))
        .unwrap()
        .with_policy(policy);
    saver.create_variables(&cx).unwrap();
    let (dir, prefix) = checkpoint_dir();
    let first = {
        saver.save(&cx, &prefix, &TraceOptions::default()).unwrap();
        file_bytes_under(dir.path())
    };
    saver.save(&cx, &prefix, &TraceOptions::default()).unwrap();
    saver.save(&cx, &prefix, &io_device_options()).unwrap();
    saver.save(&cx, &prefix, &TraceOptions::default()).unwrap();
    assert!(
        first == file_bytes_under(dir.path()),
        "{policy:?}: saves differ"
    );
    saver.trace_log().to_vec()
}

#[test]
fn two_tasks_trace_on_every_call_as_tensorflow_does() {
    let traced = |reason| CacheEvent::Traced {
        call: Call::Save,
        reason,
    };
    assert_eq!(
        four_saves(RetracePolicy::TensorFlow),
        [
            traced(RetraceReason::NoCachedFunction),
            traced(RetraceReason::NewFunctionPerCall),
            traced(RetraceReason::OptionsChanged {
                fields: vec!["io_device"]
            }),
            traced(RetraceReason::OptionsChanged {
                fields: vec!["io_device"]
            }),
        ]
    );
}

#[test]
fn cached_policy_reuses_a_function_per_key() {
    let reused = CacheEvent::Reused { call: Call::Save };
    assert_eq!(
        four_saves(RetracePolicy::Cached),
        [
            CacheEvent::Traced {
                call: Call::Save,
                reason: RetraceReason::NoCachedFunction
            },
            reused.clone(),
            CacheEvent::Traced {
                call: Call::Save,
                reason: RetraceReason::OptionsChanged {
                    fields: vec!["io_device"]
                }
            },
            reused,
        ]
    );
}

#[test]
fn event_text_names_the_reason() {
    let event = CacheEvent::Traced {
        call: Call::Save,
        reason: RetraceReason::OptionsChanged {
            fields: vec!["io_device", "sharding"],
        },
    };
    assert_eq!(
        event.to_string(),
        "save: traced: options changed (io_device, sharding)"
    );
}

/// A save whose `SaveV2` cannot write (the prefix's directory is a file) fails naming the op
/// and its device, and leaves no `ckpt.index`.
#[test]
fn eager_errors_name_the_op_and_device() {
    for name in ["g1_single_cpu", "g3_two_tasks"] {
        let spec = spec(name);
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let mut saver = EagerSaver::new(trackables(&spec)).unwrap();
        saver.create_variables(&cx).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"not a directory").unwrap();
        let prefix = blocker.join("ckpt").to_string_lossy().into_owned();
        let err = saver.save(&cx, &prefix, &options(&spec)).unwrap_err();
        let text = error_chain(&err, ErrorForm::OneLine);
        assert!(text.contains("op `SaveV2"), "{name}: {text}");
        assert!(text.contains("/device:CPU:0"), "{name}: {text}");
        assert_eq!(files_under(dir.path()), ["file"], "{name}");
    }
}

/// Saving variables that were never created fails at the first read, naming it.
#[test]
fn eager_read_of_a_missing_variable_names_the_read() {
    let spec = spec("g1_single_cpu");
    let store = VariableStore::new();
    let io = BundleIo::default();
    let cx = RunContext::new(&store).with_io(&io);
    let mut saver = EagerSaver::new(trackables(&spec)).unwrap();
    let (dir, prefix) = checkpoint_dir();
    let err = saver.save(&cx, &prefix, &options(&spec)).unwrap_err();
    let text = error_chain(&err, ErrorForm::OneLine);
    assert!(
        text.contains("/Read/ReadVariableOp` on /job:localhost/replica:0/task:0/device:CPU:0"),
        "{text}"
    );
    assert!(files_under(dir.path()).is_empty());
}

/// The graph builder with every part traces exactly `trace_flat`'s graph, and the eager
/// builder, running the same parts (create, save, restore) as it goes, records the same ops.
#[test]
fn both_builders_trace_the_flat_graph() {
    for name in TRACE_CASES {
        let spec = spec(name);
        let (trackables, options) = (trackables(&spec), options(&spec));
        let flat = trace_flat(&trackables, &options).unwrap();
        let parts = FlatParts {
            variables: VariableOps::Create,
            save: true,
            restore: true,
        };
        let (graph, ops) = trace_flat_with(Graph::new(), &trackables, &options, parts).unwrap();
        let expected = flat.module.graph.to_string();
        assert_eq!(graph.to_string(), expected, "{name}");
        assert_eq!(
            graph.op(ops.save.unwrap()).name,
            flat.saver.save_target,
            "{name}"
        );

        let (_dir, prefix) = checkpoint_dir();
        let store = VariableStore::new();
        let io = BundleIo::default();
        let feeds = BTreeMap::from([(
            "saver_filename".to_owned(),
            HostTensor::string_scalar(prefix.as_str()),
        )]);
        let builder = EagerBuilder::new(RunContext::new(&store).with_io(&io), feeds);
        let (builder, ops) = trace_flat_with(builder, &trackables, &options, parts)
            .unwrap_or_else(|err| panic!("{name}: {}", error_chain(&err, ErrorForm::OneLine)));
        let merge = builder.outputs(ops.save.unwrap()).unwrap();
        assert!(
            merge.is_empty(),
            "{name}: MergeV2Checkpoints has no outputs"
        );
        assert!(Path::new(&format!("{prefix}.index")).exists(), "{name}");
        assert_eq!(builder.into_graph().to_string(), expected, "{name}");
    }
}

/// Registered savers run through the same `SaverCx` eagerly: the eager save (op by op for g1,
/// a traced function for g3) writes graph mode's bytes, the registered tensor included, and
/// the eager restore runs the saver's `RestoreV2` on the merged checkpoint.
#[test]
fn registered_savers_run_eagerly() {
    for name in ["g1_single_cpu", "g3_two_tasks"] {
        let with_saver = || TraceOptions {
            registered_savers: vec![Box::new(StackSaver)],
            ..options(&spec(name))
        };
        let (graph_dir, graph_prefix) = checkpoint_dir();
        graph_save_with(
            name,
            &with_saver(),
            Backend::Interp,
            &VariableStore::new(),
            &graph_prefix,
        );
        let (eager_dir, eager_prefix) = checkpoint_dir();
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let mut saver = EagerSaver::new(trackables(&spec(name))).unwrap();
        saver.create_variables(&cx).unwrap();
        saver
            .save(&cx, &eager_prefix, &with_saver())
            .unwrap_or_else(|err| panic!("{name}: {}", error_chain(&err, ErrorForm::OneLine)));
        let written = file_bytes_under(eager_dir.path());
        assert!(
            written == file_bytes_under(graph_dir.path()),
            "{name}: bytes differ"
        );
        let reader = saveplan::bundle::BundleReader::open(Path::new(&eager_prefix)).unwrap();
        assert!(
            reader.entries().iter().any(|entry| entry.key == "stack"),
            "{name}"
        );
        saver
            .restore(&cx, &eager_prefix, &with_saver())
            .unwrap_or_else(|err| panic!("{name}: {}", error_chain(&err, ErrorForm::OneLine)));
    }
}

/// `tf.zeros` of 1000 elements or more traces as `Fill`; creating such a variable eagerly runs
/// the `Fill` kernel and stores zeros of the right shape, and the eager save of it matches
/// graph mode byte for byte.
#[test]
fn large_zero_initial_values_are_filled() {
    let path = root().join("tests/inputs/eager/large_zeros.json");
    let spec = SpecFile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let traced = trace_flat(&trackables(&spec), &options(&spec)).unwrap();
    let graph = &traced.module.graph;
    let fills: Vec<_> = graph
        .ops()
        .into_iter()
        .filter(|&id| graph.op(id).op == Op::Fill)
        .collect();
    assert_eq!(fills.len(), 1, "only the 2000-element variable uses Fill");
    for backend in backends() {
        let store = VariableStore::new();
        let io = BundleIo::default();
        let cx = RunContext::new(&store).with_io(&io);
        let mut saver = EagerSaver::new(trackables(&spec))
            .unwrap()
            .with_backend(backend);
        saver.create_variables(&cx).unwrap();
        let big = store.get(&saveplan::exec::VarKey::new("", "big")).unwrap();
        assert_eq!(big.shape(), [40, 50]);
        assert_eq!(big.dtype(), DType::Float);
        assert_eq!(big.bytes().unwrap(), vec![0u8; 2000 * 4].as_slice());
        let (dir, prefix) = checkpoint_dir();
        saver.save(&cx, &prefix, &options(&spec)).unwrap();
        let graph_store = VariableStore::new();
        let (graph_dir, graph_prefix) = checkpoint_dir();
        graph_save_spec(
            &spec,
            "large_zeros",
            &options(&spec),
            backend,
            &graph_store,
            &graph_prefix,
        );
        assert_eq!(
            file_bytes_under(dir.path()),
            file_bytes_under(graph_dir.path()),
            "{backend}"
        );
    }
}
