//! The examples of `README.md` and `docs/*.md` hold as printed (`docs/testing.md`): every
//! `console` block runs, command by command, in a fresh folder holding a copy of `examples/`,
//! `tests/fixtures/` and `tests/inputs/`, with `saveplan` the binary under test, and prints
//! what the page says; every `json` block parses as a spec file or an object spec; every page
//! is a doctest of `src/lib.rs` (its `rust` blocks); no other kind of block is an example.

use std::path::{Path, PathBuf};
use std::process::Command;

use saveplan::checkpoint::ObjectSpec;
use saveplan::trace::spec::SpecFile;

use crate::support::files::files_under;
use crate::support::root;

/// The marker line, just above a block, of an example that cannot run here, with its reason.
const NOT_RUN: &str = "<!-- docs-examples: not run:";
/// The marker line, just above a block, of an example that needs a server this test does not
/// start, run as printed by another suite: `<!-- docs-examples: run by FILE: REASON -->`.
const RUN_BY: &str = "<!-- docs-examples: run by ";

/// The folders copied into each page's working folder: what the examples read.
const COPIED: [&str; 3] = ["examples", "tests/fixtures", "tests/inputs"];

/// A fenced code block of a page.
#[derive(Debug)]
struct Block {
    /// The line of its opening fence (1-based).
    line: usize,
    /// The first word of its info string (`console`, `rust`, …).
    lang: String,
    /// Its lines, without the fence's indentation.
    body: Vec<String>,
    /// Why it is not run, from a [`NOT_RUN`] line just above it.
    not_run: Option<String>,
    /// The suite that runs it (a path from the workspace root), and why, from a [`RUN_BY`]
    /// line just above it.
    run_by: Option<(String, String)>,
}

/// The fenced code blocks of a Markdown page, with the indentation of their fence (a block in
/// a list item) taken off their lines.
fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    // The last line that is not blank, for the marker of a block not run.
    let mut previous = "";
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            Some((_, block)) if trimmed.trim_end() == "```" => found.push(block),
            Some((fence_indent, mut block)) => {
                let cut = indent.min(fence_indent);
                block.body.push(line[cut..].to_owned());
                open = Some((fence_indent, block));
            }
            None if trimmed.starts_with("```") => {
                let info = trimmed.trim_start_matches('`');
                let lang = info.split([',', ' ']).next().unwrap_or_default().to_owned();
                let not_run = previous
                    .trim()
                    .strip_prefix(NOT_RUN)
                    .and_then(|rest| rest.strip_suffix("-->"))
                    .map(|reason| reason.trim().to_owned());
                let run_by = previous
                    .trim()
                    .strip_prefix(RUN_BY)
                    .and_then(|rest| rest.strip_suffix("-->"))
                    .and_then(|rest| rest.split_once(": "))
                    .map(|(file, reason)| (file.trim().to_owned(), reason.trim().to_owned()));
                let block = Block {
                    line: index + 1,
                    lang,
                    body: Vec::new(),
                    not_run,
                    run_by,
                };
                open = Some((indent, block));
            }
            None => {}
        }
        if !trimmed.is_empty() {
            previous = line;
        }
    }
    assert!(open.is_none(), "a code block is never closed");
    found
}

/// One `$` line of a `console` block (with its `\` continuation lines) and the lines printed
/// after it.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    output: Vec<String>,
}

/// The steps of a `console` block; the lines before its first `$` line are refused.
fn steps(body: &[String]) -> Result<Vec<Step>, String> {
    let mut found: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in body {
        if continued {
            let step = found.last_mut().expect("a continued command");
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            found.push(Step {
                command: command.to_owned(),
                output: Vec::new(),
            });
            continued = command.ends_with('\\');
        } else if let Some(step) = found.last_mut() {
            step.output.push(line.clone());
        } else {
            return Err(format!("output before any `$` command: {line:?}"));
        }
    }
    Ok(found)
}

/// Whether `actual` is `expected`, where a line `...` of `expected` stands for any number of
/// lines.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((wild, rest)) if wild.trim() == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((line, rest)) => actual
            .split_first()
            .is_some_and(|(first, others)| first == line && matches(rest, others)),
    }
}

/// `README.md` and every page of `docs/`, relative to the workspace root, with their text.
fn pages() -> Vec<(String, String)> {
    let docs = files_under(&root().join("docs"))
        .into_iter()
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"));
    std::iter::once("README.md".to_owned())
        .chain(docs)
        .map(|page| {
            let text = std::fs::read_to_string(root().join(&page)).unwrap();
            (page, text)
        })
        .collect()
}

/// A fresh working folder for one page's examples: the [`COPIED`] folders, and `bin/saveplan`,
/// the binary under test.
fn working_folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for folder in COPIED {
        for file in files_under(&root().join(folder)) {
            let to = dir.path().join(folder).join(&file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(root().join(folder).join(&file), &to).unwrap();
        }
    }
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_saveplan"), bin.join("saveplan")).unwrap();
    (dir, bin)
}

/// Runs one command in `folder` through bash, stderr into stdout as on a terminal: its
/// output lines and exit code.
fn run(command: &str, folder: &Path, bin: &Path) -> (String, Option<i32>) {
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("exec 2>&1\n{command}"))
        .current_dir(folder)
        .env("PATH", path)
        .env("SAVEPLAN_BIN", env!("CARGO_BIN_EXE_saveplan"))
        .output()
        .expect("bash runs");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.status.code(),
    )
}

/// Runs the steps of one `console` block in `folder`; a `$ echo $?` step gives the exit code
/// of the step before it, which is 0 otherwise. Returns what differs from the page.
fn run_block(steps: &[Step], folder: &Path, bin: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if step.command == "echo $?" {
            continue;
        }
        let (printed, code) = run(&step.command, folder, bin);
        let expected_code = match steps.get(index + 1) {
            Some(next) if next.command == "echo $?" => next.output.join("\n"),
            _ => "0".to_owned(),
        };
        let lines: Vec<&str> = printed.lines().collect();
        if !matches(&step.output, &lines) || code.map(|c| c.to_string()) != Some(expected_code) {
            wrong.push(format!(
                "$ {}\nexit code {code:?}, printed:\n{printed}",
                step.command
            ));
        }
    }
    wrong
}

#[test]
#[expect(
    clippy::print_stdout,
    reason = "names each example not run, with its reason"
)]
fn console_examples_run_as_printed() {
    let mut wrong = Vec::new();
    let mut ran = 0;
    for (page, text) in pages() {
        let (folder, bin) = working_folder();
        for block in blocks(&text).iter().filter(|block| block.lang == "console") {
            let at = format!("{page}:{}", block.line);
            if let Some(reason) = &block.not_run {
                println!("{at}: not run: {reason}");
                continue;
            }
            if let Some((suite, reason)) = &block.run_by {
                // That suite exists and reads this page (it extracts the block from it).
                let text = std::fs::read_to_string(root().join(suite)).unwrap_or_default();
                if !text.contains(page.as_str()) {
                    wrong.push(format!("{at}: `{suite}` does not read {page}"));
                }
                println!("{at}: run by {suite}: {reason}");
                continue;
            }
            match steps(&block.body) {
                Ok(steps) => {
                    ran += steps.len();
                    wrong.extend(
                        run_block(&steps, folder.path(), &bin)
                            .into_iter()
                            .map(|problem| format!("{at}: {problem}")),
                    );
                }
                Err(problem) => wrong.push(format!("{at}: {problem}")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "examples that do not run as printed:\n{}",
        wrong.join("\n")
    );
    assert!(ran >= 20, "only {ran} commands found in the docs");
}

/// The README is the overview (at most 300 lines); the rest is in `docs/`.
#[test]
fn readme_stays_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
}

/// Every relative link of a page (`[text](path#anchor)`) names a file that exists.
#[test]
fn links_name_files_that_exist() {
    let link = regex::Regex::new(r"\]\(([^)#\s]*)(#[^)\s]*)?\)").unwrap();
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        let folder = root().join(&page);
        let folder = folder.parent().unwrap();
        for captures in link.captures_iter(&text) {
            let target = &captures[1];
            if !target.is_empty() && !target.contains("://") && !folder.join(target).exists() {
                wrong.push(format!("{page}: {target}"));
            }
        }
    }
    assert!(wrong.is_empty(), "links to nothing: {wrong:#?}");
}

#[test]
fn json_examples_are_specs() {
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        for block in blocks(&text).iter().filter(|block| block.lang == "json") {
            let json = block.body.join("\n");
            let parsed = if ObjectSpec::is_object_spec(&json) {
                ObjectSpec::parse(&json)
                    .map(drop)
                    .map_err(|err| err.to_string())
            } else {
                SpecFile::parse(&json)
                    .map(drop)
                    .map_err(|err| err.to_string())
            };
            if let Err(err) = parsed {
                wrong.push(format!("{page}:{}: {err}", block.line));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every page's `rust` blocks are doctests: `src/lib.rs` includes each page. The blocks of a
/// page are `console` (run above), `rust`, `json` (specs), `python` (run by the Python
/// package's suite, `python/tests/core/test_docs_examples.py`, which needs the package built)
/// or `text` (synopses and plain output, not examples); a block without a language would be
/// taken for Rust by rustdoc.
#[test]
fn every_page_is_a_doctest_and_every_block_has_a_kind() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        let included = format!("#[doc = include_str!(\"../{page}\")]");
        if !lib.contains(&included) {
            wrong.push(format!("src/lib.rs does not include {page} as a doctest"));
        }
        for block in blocks(&text) {
            if !["console", "rust", "json", "python", "text"].contains(&block.lang.as_str()) {
                wrong.push(format!(
                    "{page}:{}: a block of kind {:?}",
                    block.line, block.lang
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn blocks_and_steps_are_read_as_documented() {
    let page = "text\n<!-- docs-examples: not run: needs TensorFlow -->\n  ```console\n  $ a \\\n      --b\n  out\n  ...\n  ```\n```rust,no_run\nfn main() {}\n```\n";
    let found = blocks(page);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].lang, "console");
    assert_eq!(found[0].line, 3);
    assert_eq!(found[0].not_run.as_deref(), Some("needs TensorFlow"));
    assert_eq!(found[1].lang, "rust");
    assert_eq!(found[1].not_run, None);
    let marked =
        "<!-- docs-examples: run by tests/x.py: needs a server -->\n```console\n$ a\n```\n";
    let marked = blocks(marked);
    assert_eq!(
        marked[0].run_by,
        Some(("tests/x.py".to_owned(), "needs a server".to_owned()))
    );
    assert_eq!(marked[0].not_run, None);
    assert_eq!(
        steps(&found[0].body).unwrap(),
        vec![Step {
            command: "a \\\n    --b".to_owned(),
            output: vec!["out".to_owned(), "...".to_owned()],
        }]
    );
    assert!(steps(&["out".to_owned()]).is_err());
    let expected = ["a".to_owned(), "...".to_owned(), "z".to_owned()];
    assert!(matches(&expected, &["a", "z"]));
    assert!(matches(&expected, &["a", "b", "c", "z"]));
    assert!(!matches(&expected, &["a", "b"]));
    assert!(!matches(&expected, &["b", "z"]));
}
