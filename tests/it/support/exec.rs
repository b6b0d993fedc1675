//! Shared helpers of the `exec*` test suites: loading IR inputs and TF fixtures, running plans
//! on a rayon pool of a given size, comparing what runs wrote.

use std::path::Path;
use std::sync::Mutex;

use saveplan::exec::{
    Backend, CompiledPlan, ExecError, Executor, HostTensor, RunContext, StepEvent,
};
use saveplan_ir::Module;

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
