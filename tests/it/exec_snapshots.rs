//! Golden tests of plan compilation: every `tests/inputs/exec/plans/*.ir` compiles, and its
//! plan text (queues, steps, slots, dependencies) is snapshotted; every input under `err/`
//! must fail, and the snapshot is the error chain. The first line of an input says what to
//! compile: `# targets: a:0, b | feeds: c`. Every plan that compiles also compiles on every
//! backend (the JIT lowers it to native code).

use crate::support::exec::{backends, prepare};
use crate::support::{ErrorForm, error_chain, settings};

use std::path::Path;

use saveplan::exec::CompiledPlan;

/// Splits a comma-separated header list, dropping empty entries.
fn names(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect()
}

/// Compiles the input at `path` as its header says, after verifying it as every graph is
/// where it enters; the error is the rendered chain of whichever step failed.
fn compile(path: &Path) -> Result<CompiledPlan, String> {
    let text = std::fs::read_to_string(path).expect("input is readable");
    let header = text.lines().next().unwrap_or_default();
    let spec = header
        .strip_prefix("# targets:")
        .unwrap_or_else(|| panic!("{path:?}: first line must be `# targets: … | feeds: …`"));
    let (targets, feeds) = spec
        .split_once("| feeds:")
        .unwrap_or_else(|| panic!("{path:?}: header has no `| feeds:`"));
    let module = saveplan_ir::parse_module(&text).unwrap_or_else(|err| panic!("{path:?}: {err}"));
    let render = |err: &dyn std::error::Error| error_chain(err, ErrorForm::OneLine);
    let module = saveplan_ir::verify_module(&module).map_err(|err| render(&err))?;
    CompiledPlan::compile(module, &names(targets), &names(feeds)).map_err(|err| render(&err))
}

#[test]
fn exec_plans() {
    settings().bind(|| {
        insta::glob!("..", "inputs/exec/plans/*.ir", |path| {
            let plan = compile(path).unwrap_or_else(|err| panic!("{path:?}: {err}"));
            for backend in backends() {
                prepare(&plan, backend);
            }
            insta::assert_snapshot!(format!("## plan\n{plan}"));
        });
    });
}

#[test]
fn exec_plan_errors() {
    settings().bind(|| {
        insta::glob!("..", "inputs/exec/plans/err/*.ir", |path| {
            let err = compile(path).expect_err("inputs under err/ must fail");
            insta::assert_snapshot!(format!("## error\n{err}"));
        });
    });
}
