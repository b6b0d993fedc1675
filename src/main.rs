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

fn main() -> std::process::ExitCode {
    // Small pages: a large plan is built from millions of small objects, and on VMs zeroing
    // them as 2 MiB pages costs several times the system time (see the function's docs).
    saveplan::process::disable_transparent_huge_pages();
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
