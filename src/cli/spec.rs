//! `saveplan spec PREFIX [--plain]`: prints the spec of a checkpoint, such that
//! `saveplan save SPEC --values PREFIX --prefix Q` writes PREFIX's files again, byte for byte.
//!
//! An object-based checkpoint gets an object spec (every node of its object graph, value-less
//! ones as `object` entries, every path, full names, order; see
//! [`saveplan::checkpoint::object_spec_of`]), a TF1 (name-based) one, or any with `--plain`,
//! a plain spec of its keys ([`saveplan::checkpoint::plain_spec_of`]). A checkpoint no spec
//! writes again (a registered saver, a child order no spec gives, several data files) is a
//! one-line error. One entry per line.

use std::path::PathBuf;

use saveplan::bundle::BundleReader;
use saveplan::checkpoint::{is_object_based, object_spec_of, plain_spec_of};
use serde::Serialize;

use super::output::out;
use super::values::checkpoint_prefix;

/// Arguments of `saveplan spec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Checkpoint prefix (the path without `.index`), or a directory or `checkpoint` state
    /// file, meaning its latest checkpoint.
    prefix: PathBuf,
    /// Print a plain spec (checkpoint keys) even for an object-based checkpoint.
    #[arg(long)]
    plain: bool,
}

/// Runs `saveplan spec`.
pub fn run(args: Args) -> anyhow::Result<std::process::ExitCode> {
    let reader = BundleReader::open_for_lookups(checkpoint_prefix(&args.prefix)?)?;
    let text = if is_object_based(&reader) && !args.plain {
        let spec = object_spec_of(&reader)?;
        let head = if spec.root { "\"root\": true, " } else { "" };
        listing(head, "objects", &spec.objects)?
    } else {
        listing("", "variables", &plain_spec_of(&reader)?.variables)?
    };
    out!("{text}")?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// `{<head>"<field>": [` and one entry per line.
fn listing<T: Serialize>(head: &str, field: &str, entries: &[T]) -> anyhow::Result<String> {
    let mut text = format!("{{{head}\"{field}\": [\n");
    for (index, entry) in entries.iter().enumerate() {
        let comma = if index + 1 < entries.len() { "," } else { "" };
        text.push_str(&format!("  {}{comma}\n", serde_json::to_string(entry)?));
    }
    text.push_str("]}\n");
    Ok(text)
}
