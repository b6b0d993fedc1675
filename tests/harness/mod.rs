//! Shared test harness of the root package's suites: insta settings, workspace paths and
//! running the `saveplan` binary.
#![allow(dead_code, reason = "each test crate uses a different subset")]

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
/// suite and the input file only, without the asserted expression.
pub fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings
}

/// `relative` resolved against the workspace root.
pub fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// `path` relative to the workspace root, as a string.
pub fn relative(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .expect("inputs live in the workspace")
        .to_str()
        .expect("input paths are UTF-8")
        .to_owned()
}

/// Runs the CLI from the workspace root, so paths in its messages are relative and stable.
pub fn saveplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the saveplan binary runs")
}
