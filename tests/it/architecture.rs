//! The layering ARCHITECTURE.md promises, checked against the code: each module of `src/`
//! imports only the modules below it, protobuf types stay in `export/` and `bundle/`, cranelift
//! stays in `exec/jit/`, and the IR crate depends on nothing of ours.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::files::files_under;
use crate::support::root;

/// The floor of each top-level module of `src/` (ARCHITECTURE.md, "Layers"); a module may
/// import only modules on lower floors.
const FLOORS: &[(&str, u32)] = &[
    ("trace", 2),
    ("export", 2),
    ("bundle", 2),
    ("analysis", 2),
    ("process", 2),
    ("compile", 3),
    ("exec", 3),
    ("session", 4),
    ("checkpoint", 5),
];

/// The top-level module a file of `src/` belongs to (`src/session.rs` and `src/session/…` are
/// both `session`); `None` for the crate root, `main.rs` and the CLI, which may use anything.
fn module_of(relative: &str) -> Option<&str> {
    let first = relative.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    FLOORS
        .iter()
        .any(|(module, _)| *module == name)
        .then_some(name)
}

/// The code of a file without its comment lines (doc links name other layers freely).
fn code_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("{path:?}: {err}"))
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(str::to_owned)
        .collect()
}

/// The `src/` files, relative to `src/`.
fn source_files() -> Vec<String> {
    files_under(&root().join("src"))
        .into_iter()
        .filter(|file| file.ends_with(".rs"))
        .collect()
}

fn floor(module: &str) -> u32 {
    FLOORS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, floor)| *floor)
        .expect("every module has a floor")
}

#[test]
fn modules_import_only_lower_layers() {
    let mut wrong = BTreeSet::new();
    for file in source_files() {
        let Some(module) = module_of(&file) else {
            continue;
        };
        for line in code_lines(&root().join("src").join(&file)) {
            for (used, _) in FLOORS {
                let imported = line.contains(&format!("crate::{used}::"))
                    || line.contains(&format!("crate::{used};"))
                    || line.contains(&format!("crate::{used}}}"));
                if imported && *used != module && floor(used) >= floor(module) {
                    wrong.insert(format!("src/{file} ({module}) imports {used}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports that do not go down: {wrong:#?}");
}

#[test]
fn protobuf_and_cranelift_stay_in_their_rooms() {
    let mut wrong = BTreeSet::new();
    for file in source_files() {
        let lines = code_lines(&root().join("src").join(&file));
        let uses = |needle: &str| lines.iter().any(|line| line.contains(needle));
        let proto_room = file.starts_with("export/") || file.starts_with("bundle/");
        if !proto_room && (uses("saveplan_proto") || uses("prost::")) {
            wrong.insert(format!("src/{file} uses protobuf types"));
        }
        if !file.starts_with("exec/jit/") && uses("cranelift") {
            wrong.insert(format!("src/{file} uses cranelift"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_ir_crate_depends_on_nothing_of_ours() {
    let manifest = std::fs::read_to_string(root().join("ir/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("ir/Cargo.toml has dependencies");
    let names: BTreeSet<&str> = dependencies
        .lines()
        .filter_map(|line| line.split(['=', '.']).next())
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    let allowed = BTreeSet::from([
        "hashbrown",
        "petgraph",
        "rayon",
        "rustc-hash",
        "serde",
        "smallvec",
        "thiserror",
    ]);
    assert!(
        names.is_subset(&allowed),
        "ir depends on {names:?}, ARCHITECTURE.md allows {allowed:?}"
    );
}
