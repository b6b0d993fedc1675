//! Every graph TensorFlow 2.21 wrote (`tests/fixtures/tf-2.21/graph/*/*.pbtxt` and the meta
//! graph) imports into IR that verifies clean, and its canonical text parses back to the same
//! text.

use std::path::{Path, PathBuf};

use saveplan::export::{self};
use saveplan_ir::{parse_module, verify_module};

/// All `.pbtxt` files under the graph fixture folder, sorted.
fn graph_fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf-2.21/graph");
    let mut files = Vec::new();
    for case in std::fs::read_dir(&root).expect("graph fixtures") {
        for file in std::fs::read_dir(case.expect("case dir").path()).expect("case dir") {
            let path = file.expect("fixture file").path();
            if path.extension().is_some_and(|ext| ext == "pbtxt") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn reference_graphs_verify_clean_and_print_canonically() {
    let mut n_modules = 0;
    for path in graph_fixtures() {
        let loaded = export::read_graph_file(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let Some(module) = loaded.into_module() else {
            continue;
        };
        n_modules += 1;
        if let Err(errors) = verify_module(&module) {
            panic!("{}:\n{errors}", path.display());
        }
        let text = module.to_string();
        let reparsed =
            parse_module(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert_eq!(reparsed.to_string(), text, "{}", path.display());
    }
    // g1-g6 hold 16 graphs (and 4 SaverDefs), g7 three, g8 one, g9 two (and 2 SaverDefs).
    assert_eq!(n_modules, 22);
}
