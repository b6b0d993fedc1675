//! The root package's integration tests as one binary (ripgrep's `tests/integration` shape):
//! one module per suite, all sharing `support/`. Inputs are in `tests/inputs/`, TensorFlow's
//! fixtures in `tests/fixtures/`, snapshots in the workspace `snapshots/` folder.

mod support;

/// Counts each thread's allocations, for the scale tests that count work
/// (`objects_limits`).
#[global_allocator]
static ALLOCATOR: objects_limits::Counting = objects_limits::Counting;

mod architecture;
mod atomic;

mod bundle_cli;
mod bundle_errors;
mod bundle_fixtures;
mod bundle_merge;
mod bundle_roundtrip;
mod bundle_variant;
mod check;
mod cli_pipes;
mod cluster_run;
mod compile;
mod compile_objects;
mod diff_cli;
// The examples are bash commands, and the binary is linked into their folder.
#[cfg(unix)]
mod docs_examples;
mod eager;
mod eager_cli;
mod exec_fixtures;
mod exec_fuse;
#[cfg(feature = "jit")]
mod exec_jit;
mod exec_kernels;
mod exec_plan;
mod exec_snapshots;
mod export_roundtrip;
mod framework;
mod fuzz;
mod fuzz_journal;
mod fuzz_objects;
mod graph_cli;
mod import_direct;
mod objects;
mod objects_async;
mod objects_attributes;
mod objects_cli;
mod objects_graph_mode;
mod objects_limits;
mod objects_manager;
mod objects_names;
mod objects_restore;
mod objects_save;
mod partition;
mod rendezvous;
mod restore_out;
mod run_cli;
mod session;
mod setup_perf;
// Reads the binary's pages from /proc.
#[cfg(target_os = "linux")]
mod small_pages;
mod spec_cli;
mod storage;
mod trace;
mod trace_perf;
mod trace_share;
mod verify_fixtures;
mod zero_copy;
