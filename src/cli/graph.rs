//! `saveplan graph`: show, draw and convert TensorFlow graph files (`.pb` / `.pbtxt`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use saveplan::export;
use saveplan_ir::Module;

use super::common::free_at_exit;
use super::output::{one_line, out};

/// Inspect and convert GraphDef / MetaGraphDef files.
#[derive(Debug, Args)]
pub struct GraphArgs {
    #[command(subcommand)]
    command: GraphCommand,
}

#[derive(Debug, Subcommand)]
enum GraphCommand {
    /// Print the canonical IR text of a GraphDef, MetaGraphDef or FunctionDef file.
    Show {
        /// A `.pb` (binary) or `.pbtxt` (text) file.
        file: PathBuf,
    },
    /// Print the graph of a GraphDef, MetaGraphDef or FunctionDef file as Graphviz DOT.
    Dot {
        /// A `.pb` (binary) or `.pbtxt` (text) file.
        file: PathBuf,
    },
    /// Convert between binary (`.pb`) and text (`.pbtxt`) protobuf, by extension.
    Convert {
        /// The file to read.
        input: PathBuf,
        /// The file to write.
        output: PathBuf,
    },
}

/// Runs `saveplan graph …`.
pub fn run(args: GraphArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        GraphCommand::Show { file } => {
            let module = read_module(&file)?;
            out!("{module}")?;
            free_at_exit(module);
        }
        GraphCommand::Dot { file } => {
            let module = read_module(&file)?;
            out!("{}", saveplan_ir::dot::to_dot(&module))?;
        }
        GraphCommand::Convert { input, output } => {
            let loaded = export::read_graph_file(&input).map_err(|err| one_line(&err))?;
            export::write_graph_file(&output, &loaded).map_err(|err| one_line(&err))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads a file holding a graph; a lone function becomes the library of an empty module.
fn read_module(path: &Path) -> anyhow::Result<Module> {
    export::read_graph_file(path)
        .map_err(|err| one_line(&err))?
        .into_module()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}: expected a GraphDef, MetaGraphDef or FunctionDef, found a SaverDef",
                path.display()
            )
        })
}
