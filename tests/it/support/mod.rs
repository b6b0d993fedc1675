//! Shared support of the root package's suites: insta settings, workspace paths, running the
//! `saveplan` binary, rendering error chains and running a check per case. The submodules hold
//! what a group of suites shares: `bundle` (bundle fixtures and values), `exec` (IR inputs,
//! rayon pools, backends), `session` (specs, generated values, fixture checkpoints), `files`
//! (what a test wrote), `objects` (object-based checkpoint fixtures) and `stack_saver` (a registered saver).

pub mod bundle;
pub mod exec;
pub mod files;
pub mod objects;
pub mod session;
pub mod stack_saver;

use std::error::Error;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The graph fixtures g1–g6, whose inputs are the traced specs `tests/inputs/trace/<case>.json`.
pub const TRACE_CASES: [&str; 6] = [
    "g1_single_cpu",
    "g2_two_cpus",
    "g3_two_tasks",
    "g4_io_device",
    "g5_sliced",
    "g6_max_shard_size",
];

/// insta settings: snapshots in the workspace `snapshots/` folder (STYLE.md §6), named after the
/// suite and the input file only, without the asserted expression. The path is relative to the
/// suite file that asserts (`tests/it/<suite>.rs`).
pub fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings
}

/// The root of the package (the workspace root).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `relative` resolved against the workspace root.
pub fn manifest_path(relative: &str) -> PathBuf {
    root().join(relative)
}

/// `path` relative to the workspace root, as a string.
pub fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .expect("inputs live in the workspace")
        .to_str()
        .expect("input paths are UTF-8")
        .to_owned()
}

/// A file under `tests/fixtures/tf-2.21/`.
pub fn fixture(relative: &str) -> PathBuf {
    root().join("tests/fixtures/tf-2.21").join(relative)
}

/// Reads a JSON fixture under `tests/fixtures/tf-2.21/`.
pub fn fixture_json(relative: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(relative)).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// Runs the CLI from the workspace root, so paths in its messages are relative and stable.
pub fn saveplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the saveplan binary runs")
}

/// How [`error_chain`] lays out an error and its sources.
#[derive(Clone, Copy, Debug)]
pub enum ErrorForm {
    /// `<error>: <source>: …` on one line: panic messages and the `exec_plan_errors` snapshots.
    OneLine,
    /// `error: <error>` and then one `caused by: <source>` line per source, each line ending in
    /// a newline: the `trace_errors` snapshots.
    CausedBy,
}

/// The one rendering of an error chain in the suites: `err` and every `source()` below it,
/// laid out as `form` says.
pub fn error_chain(err: &dyn Error, form: ErrorForm) -> String {
    let mut text = match form {
        ErrorForm::OneLine => err.to_string(),
        ErrorForm::CausedBy => format!("error: {err}\n"),
    };
    let mut source = err.source();
    while let Some(cause) = source {
        match form {
            ErrorForm::OneLine => write!(text, ": {cause}"),
            ErrorForm::CausedBy => writeln!(text, "caused by: {cause}"),
        }
        .expect("writing to a String cannot fail");
        source = cause.source();
    }
    text
}

/// Runs `check` for every case, and then fails naming every case whose check panicked (each
/// panic's own message is printed as it happens), so one bad case does not hide the others.
pub fn for_each_case<'a>(cases: impl IntoIterator<Item = &'a str>, check: impl Fn(&str)) {
    let failed: Vec<&str> = cases
        .into_iter()
        .filter(|case| catch_unwind(AssertUnwindSafe(|| check(case))).is_err())
        .collect();
    assert!(failed.is_empty(), "failed cases: {}", failed.join(", "));
}
