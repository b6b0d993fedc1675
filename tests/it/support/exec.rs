//! Shared helpers of the `exec*` test suites: loading IR inputs and TF fixtures, running plans
//! on a rayon pool of a given size, comparing what runs wrote.

use std::path::Path;
use std::sync::Mutex;

use saveplan::exec::{
    Backend, BundleIo, CheckpointIo, CompiledPlan, ExecError, Executor, HostTensor, IoError,
    MergeFlags, RestoreRequest, RunContext, SaveRequest, StepEvent, VarKey, VariableStore,
};
use saveplan_ir::{AttrValue, Module, Op};

use super::files::files_under;
use super::{ErrorForm, error_chain, fixture, root};

/// Parses `tests/inputs/exec/<name>` as IR text.
pub fn input_module(name: &str) -> Module {
    let path = root().join("tests/inputs/exec").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    saveplan_ir::parse_module(&text).unwrap_or_else(|err| panic!("{path:?}: {err}"))
}

/// Imports a GraphDef fixture (`graph/g1_single_cpu/flat_graph.pbtxt`).
pub fn fixture_module(relative: &str) -> Module {
    match saveplan::export::read_graph_file(&fixture(relative)) {
        Ok(saveplan::export::Loaded::Graph(module)) => module,
        Ok(_) => panic!("{relative} is not a GraphDef"),
        Err(err) => panic!("{relative}: {err}"),
    }
}

/// Runs `f` on a fresh rayon pool of `threads` threads.
pub fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool")
        .install(f)
}

/// The backends every executor test runs on: the interpreter and (with the `jit` feature, on
/// by default) the JIT.
pub fn backends() -> Vec<Backend> {
    Backend::available()
}

/// Prepares `plan` for `backend`.
pub fn prepare(plan: &CompiledPlan, backend: Backend) -> Executor {
    Executor::new(plan.clone(), backend)
        .unwrap_or_else(|err| panic!("{backend}: {}", error_chain(&err, ErrorForm::OneLine)))
}

/// Asserts that `dirs` (one per labelled run, e.g. per backend) hold the same files with the
/// same bytes.
pub fn assert_same_files(dirs: &[(&str, &Path)]) {
    let Some(((first_backend, first), rest)) = dirs.split_first() else {
        return;
    };
    let reference = files_under(first);
    assert!(!reference.is_empty(), "{first_backend} wrote no files");
    for (backend, dir) in rest {
        assert_eq!(files_under(dir), reference, "{backend} vs {first_backend}");
        for name in &reference {
            let expected = std::fs::read(first.join(name)).unwrap();
            let got = std::fs::read(dir.join(name)).unwrap();
            assert!(
                got == expected,
                "{name}: {backend} wrote different bytes than {first_backend}"
            );
        }
    }
}

/// Runs `plan` and records the names of the steps in the order they finished.
pub fn run_logged(
    plan: &Executor,
    cx: RunContext<'_>,
    feeds: Vec<HostTensor>,
) -> (Result<Vec<HostTensor>, ExecError>, Vec<String>) {
    let log = Mutex::new(Vec::new());
    let observer = |event: &StepEvent<'_>| {
        log.lock().unwrap().push(event.step.name.clone());
    };
    let result = plan.run(&cx.with_observer(&observer), feeds);
    (result, log.into_inner().unwrap())
}

/// The strings of a string tensor as UTF-8.
pub fn strings(tensor: &HostTensor) -> Vec<String> {
    tensor
        .strings()
        .expect("a string tensor")
        .iter()
        .map(|s| String::from_utf8(s.clone()).expect("UTF-8"))
        .collect()
}

/// `module`, verified as every graph is where it enters; panics with every violation.
pub fn verified(module: &Module) -> saveplan_ir::Verified<'_> {
    saveplan_ir::verify_module(module).unwrap_or_else(|errors| panic!("invalid plan: {errors}"))
}

/// Puts a distinct value into every variable a `VarHandleOp` of `module` names, and returns
/// the keys and values.
pub fn fill_variables(
    module: &Module,
    store: &VariableStore,
    salt: u8,
) -> Vec<(VarKey, HostTensor)> {
    let graph = &module.graph;
    let mut filled = Vec::new();
    for id in graph.ops() {
        let node = graph.op(id);
        if node.op != Op::VarHandleOp {
            continue;
        }
        let text = |attr: &str| match node.attrs.get(attr) {
            Some(AttrValue::S(bytes)) => String::from_utf8(bytes.clone()).unwrap(),
            _ => String::new(),
        };
        let Some(AttrValue::Type(dtype)) = node.attrs.get("dtype") else {
            panic!("{}: no dtype", node.name)
        };
        let Some(AttrValue::Shape(shape)) = node.attrs.get("shape") else {
            panic!("{}: no shape", node.name)
        };
        let dims: Vec<u64> = shape.dims.iter().map(|dim| dim.size as u64).collect();
        let n_bytes = dims.iter().product::<u64>() as usize * dtype.element_size().unwrap();
        // Distinct per variable too (up to 64 of one shape), so that a value saved or
        // restored under another variable's key shows.
        let ordinal = (filled.len() as u8).wrapping_mul(13);
        let bytes = (0..n_bytes)
            .map(|i| {
                (i as u8)
                    .wrapping_mul(31)
                    .wrapping_add(salt)
                    .wrapping_add(ordinal)
                    & 0x3f
            })
            .collect();
        let value = HostTensor::from_bytes(*dtype, dims, bytes).unwrap();
        let shared_name = text("shared_name");
        let key = VarKey::new(text("container"), shared_name);
        store.put(&key, value.clone()).unwrap();
        filled.push((key, value));
    }
    filled
}

/// A checkpoint backend that calls `before_save(prefix)` before each `SaveV2` and
/// `before_merge()` before each merge, failing the op when they return an error, and is
/// otherwise `BundleIo`.
pub struct HookedIo<S, M> {
    /// Called with the prefix before each save.
    pub before_save: S,
    /// Called before each merge.
    pub before_merge: M,
}

impl<S, M> CheckpointIo for HookedIo<S, M>
where
    S: Fn(&str) -> Result<(), IoError> + Sync,
    M: Fn() -> Result<(), IoError> + Sync,
{
    fn save(&self, prefix: &str, tensors: &[SaveRequest<'_>]) -> Result<(), IoError> {
        (self.before_save)(prefix)?;
        BundleIo::default().save(prefix, tensors)
    }

    fn restore(
        &self,
        prefix: &str,
        tensors: &[RestoreRequest<'_>],
    ) -> Result<Vec<HostTensor>, IoError> {
        BundleIo::default().restore(prefix, tensors)
    }

    fn merge(&self, sources: &[&str], destination: &str, flags: MergeFlags) -> Result<(), IoError> {
        (self.before_merge)()?;
        BundleIo::default().merge(sources, destination, flags)
    }
}
