//! The `saveplan` command-line tool: a thin clap front end over the library.
//! This binary (with its `cli` modules) is the only code that prints.
#![expect(
    clippy::print_stderr,
    reason = "the CLI is the one place that prints; stdout goes through `cli::output::out!`"
)]
mod cli;

/// mimalloc, faster than the system allocator on the many small objects of a large plan.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

/// Small pages, from before the first allocation: a large plan is built from millions of
/// small objects, and on VMs zeroing them as 2 MiB pages costs several times the system time
/// (see the function's docs). The Rust runtime allocates before `main` (its thread info),
/// and mimalloc's first allocation reserves its arena and touches two 2 MiB pages of it: 4 MiB
/// of every process, each rank of a cluster included, and up to 5 ms a page on a VM whose
/// host has to supply it. So this runs among the program's initializers (`.init_array`),
/// before the runtime starts (`tests/it/small_pages.rs`). Elsewhere than Linux there is
/// nothing to turn off.
#[cfg(target_os = "linux")]
#[used]
// SAFETY: glibc calls each `.init_array` entry as a C function, before `main`; this one takes
// none of the arguments it is passed (the C ABI lets a callee ignore them) and makes one system
// call, with no allocation and no panic, so nothing of the runtime is needed yet.
#[unsafe(link_section = ".init_array")]
static SMALL_PAGES: extern "C" fn() = {
    extern "C" fn small_pages() {
        saveplan::process::disable_transparent_huge_pages();
    }
    small_pages
};

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        // The reader of our stdout left (`saveplan graph show F | head -1`): nothing to say.
        Err(err) if cli::is_broken_pipe(&err) => std::process::ExitCode::SUCCESS,
        // Reported already (by a process of a cluster, before it told the others).
        Err(err) if err.is::<cli::Reported>() => std::process::ExitCode::FAILURE,
        Err(err) => {
            cli::report_error(&err);
            std::process::ExitCode::FAILURE
        }
    }
}
