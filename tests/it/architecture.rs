//! The rules of ARCHITECTURE.md that are about the code's shape, checked against the code:
//! each module of `src/` imports only the modules below it, the CLI's subcommands share code
//! only through its shared modules, protobuf types stay in `export/` and `bundle/`, cranelift
//! in `exec/jit/`, the file system in the layers that own files, printing in the binary, the
//! library's errors stay typed, the IR and protobuf crates depend on nothing of ours, the root
//! package's integration tests are one binary, module docs hold no measurements, and every
//! test the rules name exists. Paths are read from each file's tokens (`rust_paths`): grouped
//! and nested `use` trees, `super::super::` and inline paths all count.

mod rust_paths;

use std::collections::BTreeSet;

use crate::support::files::files_under;
use crate::support::root;

use rust_paths::{Named, module_of_file, paths, resolve};

/// The floor of each top-level module of `src/` (ARCHITECTURE.md, "Layers"); a module may
/// import only modules on lower floors.
const FLOORS: &[(&str, u32)] = &[
    ("storage", 1),
    ("trace", 2),
    ("export", 2),
    ("bundle", 2),
    ("analysis", 2),
    ("process", 2),
    ("object", 2),
    ("partition", 2),
    ("compile", 3),
    ("exec", 3),
    ("session", 4),
    ("checkpoint", 5),
];

/// The CLI's shared modules and what each may use of the others; a subcommand module may use
/// all three.
const CLI_SHARED: &[(&str, &[&str])] = &[
    ("output", &[]),
    ("values", &["output"]),
    ("common", &["output", "values"]),
];

/// The source folders of the workspace's crates.
const CRATE_SOURCES: [&str; 3] = ["src", "ir/src", "proto/src"];

/// A Rust file of a crate: its path relative to the crate's source folder, its module, its
/// text and the paths it names.
struct SourceFile {
    crate_dir: &'static str,
    relative: String,
    module: Vec<String>,
    text: String,
    paths: Vec<Named>,
}

impl SourceFile {
    /// The paths into this crate, from its root.
    fn crate_paths(&self) -> impl Iterator<Item = Vec<String>> + '_ {
        self.paths
            .iter()
            .filter_map(|path| resolve(path, &self.module))
    }

    /// Whether it names a path, as written, for which `holds` holds.
    fn names(&self, holds: impl Fn(&[String]) -> bool) -> bool {
        self.paths
            .iter()
            .any(|path| !path.segments.is_empty() && holds(&path.segments))
    }

    fn top(&self) -> &str {
        self.module.first().map_or("", String::as_str)
    }

    /// Its path from the workspace root.
    fn path(&self) -> String {
        format!("{}/{}", self.crate_dir, self.relative)
    }
}

/// Every `.rs` file under `crate_dir`, a crate's source folder.
fn rust_files(crate_dir: &'static str) -> Vec<SourceFile> {
    files_under(&root().join(crate_dir))
        .into_iter()
        .filter(|file| file.ends_with(".rs"))
        .map(|relative| {
            let text = std::fs::read_to_string(root().join(crate_dir).join(&relative)).unwrap();
            SourceFile {
                crate_dir,
                module: module_of_file(&relative),
                paths: paths(&text),
                text,
                relative,
            }
        })
        .collect()
}

/// Every `.rs` file of the root package's `src/`.
fn source_files() -> Vec<SourceFile> {
    rust_files("src")
}

fn floor(module: &str) -> Option<u32> {
    FLOORS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, floor)| *floor)
}

/// What `file` imports against the floors: one line per module it may not use.
fn layer_violations(file: &SourceFile) -> BTreeSet<String> {
    let Some(own) = floor(file.top()) else {
        return BTreeSet::new();
    };
    file.crate_paths()
        .filter_map(|path| path.first().cloned())
        .filter(|used| used != file.top() && floor(used).is_some_and(|floor| floor >= own))
        .map(|used| format!("{} ({}) imports {used}", file.path(), file.top()))
        .collect()
}

#[test]
fn modules_import_only_lower_layers() {
    let wrong: BTreeSet<String> = source_files().iter().flat_map(layer_violations).collect();
    assert!(wrong.is_empty(), "imports that do not go down: {wrong:#?}");
}

/// A planted upward import is caught however it is written: grouped, nested, renamed, through
/// `super::super::`, or as a path in the code.
#[test]
fn grouped_and_relative_upward_imports_are_caught() {
    let planted = |relative: &str, text: &str| {
        layer_violations(&SourceFile {
            crate_dir: "src",
            relative: relative.to_owned(),
            module: module_of_file(relative),
            text: text.to_owned(),
            paths: paths(text),
        })
    };
    let upward = [
        "use crate::{ir_helpers, session::Session};",
        "use crate::{exec::{self, x}, checkpoint::{Checkpoint as C}};",
        "pub(crate) use crate::{\n    // a comment\n    session,\n};",
        "use super::super::super::session::Session;",
        "fn f() { crate::session::Session::new(); }",
        "use self::super::super::super::checkpoint::*;",
        "mod tests { use super::super::super::super::session::Session; }",
    ];
    for text in upward {
        assert!(!planted("trace/plan/save.rs", text).is_empty(), "{text}");
    }
    let fine = [
        "use crate::trace::{Builder, names::{self, Names}};",
        "use super::names::Names;",
        "use super::super::session::Session;", // trace::session
        "mod tests { use super::super::super::super::Session; }",
        "// use crate::session::Session;\nconst A: &str = \"crate::session::x\";",
        "use saveplan_ir::{Graph, session};",
    ];
    for text in fine {
        assert!(planted("trace/plan/save.rs", text).is_empty(), "{text}");
    }
    // The same floor is not below: trace and export do not know each other.
    assert!(!planted("trace/mod.rs", "use crate::{export::graph_def};").is_empty());
}

#[test]
fn cli_subcommands_share_code_only_through_common_output_and_values() {
    let mut wrong = BTreeSet::new();
    for file in source_files() {
        let [cli, own, ..] = file.module.as_slice() else {
            continue;
        };
        if cli != "cli" {
            continue;
        }
        let allowed: &[&str] = CLI_SHARED
            .iter()
            .find(|(shared, _)| shared == own)
            .map_or(&["common", "output", "values"], |(_, uses)| uses);
        for path in file.crate_paths() {
            if let [top, used, ..] = path.as_slice()
                && top == "cli"
                && used != own
                && !allowed.contains(&used.as_str())
            {
                wrong.insert(format!("{} uses cli::{used}", file.path()));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn protobuf_and_cranelift_stay_in_their_rooms() {
    let mut wrong = BTreeSet::new();
    for file in source_files() {
        let proto_room = matches!(file.top(), "export" | "bundle");
        if !proto_room
            && file.names(|path| path[0] == "saveplan_proto" || path[0].starts_with("prost"))
        {
            wrong.insert(format!("{} uses protobuf types", file.path()));
        }
        let jit_room = file.relative.starts_with("exec/jit/");
        if !jit_room && file.names(|path| path[0].starts_with("cranelift")) {
            wrong.insert(format!("{} uses cranelift", file.path()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Only `storage` touches checkpoint files and objects: no other module of the library (its
/// test modules aside) names `std::fs` or an object-store client (`object_store`, `tokio`,
/// `reqwest`); `bundle` memory-maps the data files `storage` opened (`memmap2`); `export`
/// (graph files), `process` (`/proc`) and the binary use the file system for their own files.
/// The IR, the tracer, the analyses, the plan compiler, the runtime, sessions and
/// `checkpoint` do no file IO of their own.
#[test]
fn only_the_storage_room_touches_checkpoint_files() {
    let test_module =
        regex::Regex::new(r"\n#\[cfg\(test\)\]\n(pub(\(crate\))? )?mod \w+ \{").unwrap();
    let mut wrong = BTreeSet::new();
    for file in source_files().into_iter().chain(rust_files("ir/src")) {
        if file.relative.ends_with("_tests.rs") {
            continue;
        }
        let code = match test_module.find(&file.text) {
            Some(found) => &file.text[..found.start()],
            None => file.text.as_str(),
        };
        let named = paths(code);
        let names = |first: &str, second: Option<&str>| {
            named.iter().any(|path| {
                path.segments.first().is_some_and(|s| s == first)
                    && second.is_none_or(|second| path.segments.get(1).is_some_and(|s| s == second))
            })
        };
        let top = if file.crate_dir == "src" {
            file.top()
        } else {
            "ir"
        };
        let own_files = matches!(top, "storage" | "export" | "process" | "cli" | "");
        if names("std", Some("fs")) && !own_files {
            wrong.insert(format!("{}: std::fs", file.path()));
        }
        if names("memmap2", None) && !own_files && top != "bundle" {
            wrong.insert(format!("{}: memmap2", file.path()));
        }
        let store = ["object_store", "tokio", "reqwest", "rustls"]
            .iter()
            .any(|client| names(client, None));
        if store && top != "storage" {
            wrong.insert(format!("{}: an object-store client", file.path()));
        }
    }
    assert!(
        wrong.is_empty(),
        "file IO outside the storage room: {wrong:#?}"
    );
}

/// The std and crate modules through which a program reaches files, processes, the network,
/// threads or its environment.
fn does_io(path: &[String]) -> bool {
    let std_io = ["fs", "io", "path", "net", "process", "env", "thread", "os"];
    (matches!(path[0].as_str(), "std" | "core")
        && path
            .get(1)
            .is_some_and(|module| std_io.contains(&module.as_str())))
        || matches!(path[0].as_str(), "memmap2" | "libc" | "tempfile" | "rayon")
}

/// What a file of the object layer (`src/object/`) uses that it may not: any other module of
/// `src/` (so no `exec`, `session`, `trace`, `bundle` or `export`), and IO.
fn object_layer_violations(file: &SourceFile) -> BTreeSet<String> {
    let mut wrong: BTreeSet<String> = file
        .crate_paths()
        .filter_map(|path| path.first().cloned())
        .filter(|used| used != "object")
        .map(|used| format!("{} (object) imports {used}", file.path()))
        .collect();
    if file.names(does_io) {
        wrong.insert(format!("{} (object) does IO", file.path()));
    }
    wrong
}

/// The object layer works over plain data and the interfaces it is handed
/// (`object::StoredValues`, `object::OurValue`): it imports no other module of the crate and
/// does no file, process or thread IO.
#[test]
fn the_object_layer_is_plain_data() {
    let files: Vec<SourceFile> = source_files()
        .into_iter()
        .filter(|file| file.top() == "object")
        .collect();
    assert!(files.len() >= 4, "src/object/ has gone: {}", files.len());
    let wrong: BTreeSet<String> = files.iter().flat_map(object_layer_violations).collect();
    assert!(wrong.is_empty(), "the object layer reaches out: {wrong:#?}");
}

/// A planted import of the runtime, a session, the tracer or IO into the object layer is
/// caught however it is written: grouped, nested, relative or inline.
#[test]
fn the_object_layer_rule_catches_grouped_imports() {
    let planted = |text: &str| {
        object_layer_violations(&SourceFile {
            crate_dir: "src",
            relative: "object/matching.rs".to_owned(),
            module: module_of_file("object/matching.rs"),
            text: text.to_owned(),
            paths: paths(text),
        })
    };
    let wrong = [
        "use crate::{object::Ours, exec::HostTensor};",
        "use crate::{\n    exec::{self, io::restore_from},\n};",
        "use crate::{session::{Session as S}};",
        "use super::super::trace::Trackable;",
        "fn f() { crate::bundle::BundleReader::open(\"p\"); }",
        "use std::{collections::BTreeMap, fs};",
        "use std::{io::{self, Read}};",
        "fn f() { std::fs::read(\"p\"); }",
        "use memmap2::Mmap;",
    ];
    for text in wrong {
        assert!(!planted(text).is_empty(), "{text}");
    }
    let fine = [
        "use super::{ObjectError, status::LoadStatus};",
        "use crate::object::{Ours, build::value_keys};",
        "use std::collections::{BTreeMap, BTreeSet};",
        "use saveplan_ir::{DType, object_graph::{NodeId, ObjectGraph}};",
        "// use crate::exec::HostTensor;\nconst A: &str = \"std::fs::read\";",
    ];
    for text in fine {
        assert!(planted(text).is_empty(), "{text}: {:?}", planted(text));
    }
}

/// A plan runs against a prefix only through the one plan runner (`session::Runner`): outside
/// the runtime (`exec`), only `session/runner.rs` and eager mode's builder (`session/eager.rs`,
/// which runs each op as it is traced, the runner's eager mode) make the `RunContext` a plan
/// runs with.
#[test]
fn plans_run_only_through_the_one_runner() {
    let names_run_context =
        |file: &SourceFile| file.names(|path| path.iter().any(|segment| segment == "RunContext"));
    let files = source_files();
    let runner = files
        .iter()
        .find(|file| file.relative == "session/runner.rs")
        .expect("src/session/runner.rs exists");
    assert!(
        names_run_context(runner),
        "the runner's RunContext is not seen"
    );
    let wrong: BTreeSet<String> = files
        .iter()
        .filter(|file| {
            file.top() != "exec"
                && !matches!(
                    file.relative.as_str(),
                    "session/runner.rs" | "session/eager.rs"
                )
                && names_run_context(file)
        })
        .map(SourceFile::path)
        .collect();
    assert!(
        wrong.is_empty(),
        "plans run outside session::Runner: {wrong:#?}"
    );
}

/// Every compiled plan runs through `exec::TaskPlans` (rule 26): whole when it names at most
/// one task, else split by task, its tasks in one process or one per process. Outside `exec`,
/// only eager mode (`session/eager.rs`: a traced function runs in one process, as TensorFlow's
/// function runtime runs it) makes an `Executor` or compiles a `CompiledPlan` of its own.
#[test]
fn compiled_plans_run_through_task_plans() {
    let names = |file: &SourceFile| {
        file.names(|path| {
            path.iter()
                .any(|segment| segment == "Executor" || segment == "CompiledPlan")
        }) && (file.text.contains("Executor::") || file.text.contains("CompiledPlan::compile"))
    };
    let files = source_files();
    let wrong: BTreeSet<String> = files
        .iter()
        .filter(|file| file.top() != "exec" && file.relative != "session/eager.rs" && names(file))
        .map(SourceFile::path)
        .collect();
    assert!(
        wrong.is_empty(),
        "plans compiled outside exec::TaskPlans: {wrong:#?}"
    );
}

/// Only the binary prints: the workspace lints deny `print!`/`eprint!` (CI runs clippy with
/// `-D warnings`), and only `src/main.rs`, `src/cli/` and tests of the library lift them.
#[test]
fn only_the_binary_prints() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    for lint in ["print_stdout = \"warn\"", "print_stderr = \"warn\""] {
        assert!(manifest.contains(lint), "the workspace lints lack {lint}");
    }
    let mut wrong = BTreeSet::new();
    for file in CRATE_SOURCES.into_iter().flat_map(rust_files) {
        let binary = file.crate_dir == "src"
            && (file.relative == "main.rs" || file.relative.starts_with("cli/"));
        let test_only = file.relative.ends_with("_tests.rs");
        let lifted = file.names(|path| {
            path[0] == "clippy" && path.get(1).is_some_and(|lint| lint.starts_with("print_"))
        });
        if lifted && !binary && !test_only {
            wrong.insert(file.path());
        }
    }
    assert!(wrong.is_empty(), "library code that may print: {wrong:#?}");
}

/// The library's errors stay typed: no `anyhow` and no boxed `dyn Error` outside the binary.
#[test]
fn library_errors_stay_typed() {
    let mut wrong = BTreeSet::new();
    for file in source_files() {
        if matches!(file.top(), "cli" | "") {
            continue;
        }
        let code: String = file
            .text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        if file.names(|path| path[0] == "anyhow")
            || code.contains("dyn Error")
            || code.contains("dyn std::error::Error")
        {
            wrong.insert(file.path());
        }
    }
    assert!(
        wrong.is_empty(),
        "untyped errors in the library: {wrong:#?}"
    );
}

/// Module docs describe the code; measurements, which date, live in `docs/benchmarks.md`: no
/// `//!` line holds a date or a throughput.
#[test]
fn module_docs_hold_no_dated_measurements() {
    let measured = regex::Regex::new(r"\b20\d\d-\d\d-\d\d\b|[GMK]i?B/s\b").unwrap();
    let mut wrong = BTreeSet::new();
    for file in CRATE_SOURCES.into_iter().flat_map(rust_files) {
        let module_docs = file
            .text
            .lines()
            .filter(|line| line.trim_start().starts_with("//!"));
        for line in module_docs.filter(|line| measured.is_match(line)) {
            wrong.insert(format!("{}: {}", file.path(), line.trim()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every test ARCHITECTURE.md's rules name (`suite::test` in the "checked by" column) exists:
/// a test of `tests/it/<suite>.rs`, or a unit-test file `src/<module>/<file>.rs`.
#[test]
fn every_rule_names_tests_that_exist() {
    let architecture = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let rules = architecture
        .split("\n## Rules\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("ARCHITECTURE.md has a Rules section");
    let named = regex::Regex::new(r"`(\w+)::(\w+)`").unwrap();
    let mut wrong = Vec::new();
    let mut rows = 0;
    for row in rules.lines().filter(|line| line.starts_with("| ")) {
        let Some(checked_by) = row.split('|').nth(3) else {
            continue;
        };
        for captures in named.captures_iter(checked_by) {
            let (suite, test) = (&captures[1], &captures[2]);
            let suite_file = root().join(format!("tests/it/{suite}.rs"));
            let exists = match std::fs::read_to_string(&suite_file) {
                Ok(text) => text.contains(&format!("fn {test}(")),
                Err(_) => root().join(format!("src/{suite}/{test}.rs")).is_file(),
            };
            if !exists {
                wrong.push(format!("{suite}::{test}"));
            }
        }
        rows += 1;
    }
    assert!(rows >= 20, "only {rows} rules found");
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md names tests that do not exist: {wrong:?}"
    );
}

/// The dependency names of a manifest's `[dependencies]` table.
fn dependencies(crate_dir: &str) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root().join(crate_dir).join("Cargo.toml")).unwrap();
    manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("the crate has dependencies")
        .lines()
        .filter_map(|line| line.split(['=', '.']).next())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn the_ir_and_proto_crates_depend_on_nothing_of_ours() {
    let ir = dependencies("ir");
    let allowed = [
        "hashbrown",
        "petgraph",
        "rayon",
        "rustc-hash",
        "serde",
        "smallvec",
        "thiserror",
    ];
    assert!(
        ir.iter().all(|name| allowed.contains(&name.as_str())),
        "ir depends on {ir:?}, ARCHITECTURE.md allows {allowed:?}"
    );
    let proto = dependencies("proto");
    assert!(
        proto.iter().all(|name| !name.starts_with("saveplan")),
        "proto depends on {proto:?}"
    );
}

/// `tests/it/` is the root package's one integration test binary: cargo's discovery is off
/// and one `[[test]]` is declared.
#[test]
fn the_root_package_has_one_integration_test_binary() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("\nautotests = false\n"));
    assert_eq!(manifest.matches("[[test]]").count(), 1);
    assert!(manifest.contains("path = \"tests/it/main.rs\""));
}

/// The paths of `source`, joined, each with the inline modules it is named in.
fn joined(source: &str) -> Vec<String> {
    paths(source)
        .iter()
        .map(|path| [path.within.join("/"), path.segments.join("::")].join(" "))
        .collect()
}

#[test]
fn use_trees_expand_into_their_leaves() {
    let source = "pub use crate::{trace::{self, Builder as B}, export::*};\nmod tests { use super::super::bundle::x; }";
    assert_eq!(
        joined(source),
        [
            " crate::trace",
            " crate::trace::Builder",
            " crate::export::*",
            "tests super::super::bundle::x",
        ]
    );
}

#[test]
fn comments_and_literals_name_nothing() {
    let source = r####"
        // use crate::session::Session;
        /* crate::session /* nested */ crate::checkpoint::x */
        let a = "crate::session::x"; let b = r#"crate::session::"y""#; let c = '"';
        fn f<'a>(x: &'a str) -> char { '\'' }
        let d = crate::analysis::check(b'a', "\"");
    "####;
    assert_eq!(joined(source), [" crate::analysis::check"]);
}

#[test]
fn paths_resolve_from_their_module() {
    let module = module_of_file("export/node.rs");
    assert_eq!(module, ["export", "node"]);
    let resolved = |path: &str, within: &[&str]| {
        let named = Named {
            within: within.iter().map(|name| (*name).to_owned()).collect(),
            segments: path.split("::").map(str::to_owned).collect(),
        };
        resolve(&named, &module).map(|path| path.join("::"))
    };
    assert_eq!(
        resolved("super::super::trace::f", &[]).as_deref(),
        Some("trace::f")
    );
    assert_eq!(
        resolved("super::super::attr::f", &["tests"]).as_deref(),
        Some("export::attr::f")
    );
    assert_eq!(resolved("self::x", &[]).as_deref(), Some("export::node::x"));
    assert_eq!(
        resolved("crate::bundle", &["tests"]).as_deref(),
        Some("bundle")
    );
    assert_eq!(resolved("std::fs::read", &[]), None);
    assert_eq!(resolved("super::super::super::x", &[]), None);
    assert_eq!(module_of_file("session.rs"), ["session"]);
    assert_eq!(module_of_file("exec/mod.rs"), ["exec"]);
    assert!(module_of_file("main.rs").is_empty());
}
