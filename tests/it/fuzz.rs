//! Seeded mutation fuzzing of what saveplan reads: TensorFlow's checkpoint fixtures (index and
//! data files) and graph files (`.pbtxt`, `.pb`, `.meta`). Every mutated input goes through the
//! library (bundle reader: open, read, map, verify; graph files: read, import, verify) and now
//! and then through the CLI (`inspect`, `graph show`), which must not panic, must finish
//! within [`CASE_LIMIT`] and must report every error on one line.
//!
//! Mutations are structured (truncation inside the SSTable footer, byte flips in the footer or
//! the blocks, entries of a rebuilt, checksum-valid index whose `BundleEntryProto` /
//! `BundleHeaderProto` varints are set to edge values or cut, entries dropped; text lines
//! dropped, duplicated or swapped, numbers replaced by edge values, braces cut) and raw (byte
//! flips, spans overwritten, inserted or deleted, truncation).
//!
//! The suite runs a small budget; a long run is
//! `SAVEPLAN_FUZZ_ITERATIONS=100000 cargo test --test it fuzz` (iterations per
//! target; `SAVEPLAN_FUZZ_SEED` picks the seed). A failure prints the seed, the iteration and
//! the mutation, and keeps the input under `target/fuzz-findings/`, to be copied into
//! `tests/inputs/graph/err/` (graph files) with its snapshot.
//!
//! Found so far: a node name with a newline (a bit flip in a binary GraphDef) made the
//! verifier's error two lines; import now refuses control characters in names
//! (`tests/inputs/graph/err/control_character_in_node_name.pb`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use saveplan::bundle::sstable::{TableBuilder, put_varint, read_table};
use saveplan::bundle::{BundleError, BundleReader};
use saveplan::export::read_graph_file;

use crate::support::root;

/// How long one case may take (library calls or one CLI run), debug build included.
const CASE_LIMIT: Duration = Duration::from_secs(10);

/// Iterations per target in the default run: a few seconds for the whole module.
const DEFAULT_ITERATIONS: u64 = 150;

/// Every how many iterations a case also runs through the CLI.
pub(crate) const CLI_EVERY: u64 = 50;

/// The checkpoint fixtures fuzzed: (case folder, prefix name).
const BUNDLES: &[(&str, &str)] = &[
    ("c1_dtypes", "ckpt"),
    ("c2_strings", "ckpt"),
    ("c3_two_tasks", "ckpt"),
    ("c5_partitioned", "ckpt"),
    ("c9_multiblock_index", "ckpt"),
    ("c12_slice_keys", "ckpt"),
    // A DT_VARIANT entry (the iterator state) among strings and numbers.
    ("../obj/o7_non_variable_attributes", "ckpt"),
];

/// The graph files fuzzed, relative to the repository root.
const GRAPHS: &[&str] = &[
    "tests/fixtures/tf-2.21/graph/g1_single_cpu/graph.pbtxt",
    "tests/fixtures/tf-2.21/graph/g7_eager_traced/traced_restore.function_def.pbtxt",
    "tests/fixtures/tf-2.21/graph/g8_meta_graph/meta_graph.pbtxt",
    "tests/fixtures/tf-2.21/graph/g9_v1_saver/sharded.graph.pbtxt",
    "tests/fixtures/tf-2.21/graph/g9_v1_saver/sharded.saver_def.pbtxt",
    "tests/inputs/graph/tf_binary/g1_single_cpu.graph.pb",
    "tests/inputs/graph/tf_binary/g8_meta_graph.meta_graph.pb",
    "tests/fixtures/saveplan/v1_saver_meta/model.meta",
];

/// SplitMix64: small, seeded, reproducible on every platform.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// The budget and seed, from `SAVEPLAN_FUZZ_ITERATIONS` and `SAVEPLAN_FUZZ_SEED`.
pub(crate) fn budget() -> (u64, u64) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(default)
    };
    (
        var("SAVEPLAN_FUZZ_ITERATIONS", DEFAULT_ITERATIONS),
        var("SAVEPLAN_FUZZ_SEED", 0x5a7e_91a4),
    )
}

/// Raw mutations of any bytes; returns what was done.
fn mutate_raw(rng: &mut Rng, bytes: &mut Vec<u8>) -> String {
    if bytes.is_empty() {
        bytes.push(rng.byte());
        return "raw: one byte into an empty file".to_owned();
    }
    let at = rng.below(bytes.len());
    match rng.below(6) {
        0 => {
            bytes.truncate(at);
            format!("raw: truncated to {at}")
        }
        1 => {
            let flips = 1 + rng.below(4);
            for _ in 0..flips {
                let pos = rng.below(bytes.len());
                bytes[pos] ^= 1 << rng.below(8);
            }
            format!("raw: {flips} bit flips")
        }
        2 => {
            let len = (1 + rng.below(16)).min(bytes.len() - at);
            for byte in &mut bytes[at..at + len] {
                *byte = rng.byte();
            }
            format!("raw: {len} bytes at {at} overwritten")
        }
        3 => {
            let len = 1 + rng.below(16);
            let insert: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
            bytes.splice(at..at, insert);
            format!("raw: {len} bytes inserted at {at}")
        }
        4 => {
            let len = (1 + rng.below(32)).min(bytes.len() - at);
            bytes.drain(at..at + len);
            format!("raw: {len} bytes deleted at {at}")
        }
        _ => {
            let len = (1 + rng.below(32)).min(bytes.len() - at);
            let span = bytes[at..at + len].to_vec();
            bytes.splice(at..at, span);
            format!("raw: {len} bytes at {at} duplicated")
        }
    }
}

/// An edge value for a varint field.
fn edge_value(rng: &mut Rng) -> u64 {
    const EDGES: &[u64] = &[
        0,
        1,
        2,
        127,
        128,
        255,
        1 << 31,
        (1 << 32) + 1,
        1 << 40,
        i64::MAX as u64,
        u64::MAX,
    ];
    match rng.below(EDGES.len() + 1) {
        n if n < EDGES.len() => EDGES[n],
        _ => rng.next() % 100_000,
    }
}

/// Replaces the varint after the first occurrence of `tag` in a protobuf message by `value`.
fn set_varint_after_tag(message: &[u8], tag: u8, value: u64) -> Option<Vec<u8>> {
    let pos = message.iter().position(|&byte| byte == tag)?;
    let mut rest = &message[pos + 1..];
    saveplan::bundle::sstable::get_varint(&mut rest)?;
    let mut out = message[..=pos].to_vec();
    put_varint(&mut out, value);
    out.extend_from_slice(rest);
    Some(out)
}

/// Structured mutations of an SSTable index: footer and block damage, or a rebuilt table
/// (valid checksums) whose entries are damaged.
fn mutate_index(rng: &mut Rng, index: &[u8]) -> (Vec<u8>, String) {
    const FOOTER: usize = 48;
    let mut bytes = index.to_vec();
    let len = bytes.len();
    let what = match rng.below(6) {
        0 if len > FOOTER => {
            let cut = len - 1 - rng.below(FOOTER);
            bytes.truncate(cut);
            format!("index: truncated in the footer to {cut}")
        }
        1 if len > FOOTER => {
            let pos = len - 1 - rng.below(FOOTER);
            bytes[pos] = rng.byte();
            format!("index: footer byte {pos} set")
        }
        2 if len > FOOTER => {
            let pos = rng.below(len - FOOTER);
            bytes[pos] ^= 1 << rng.below(8);
            format!("index: block bit flip at {pos}")
        }
        3 | 4 => return rebuilt_index(rng, index),
        _ => mutate_raw(rng, &mut bytes),
    };
    (bytes, what)
}

/// Reads the table, damages one entry (or drops one) and writes it again with valid checksums.
fn rebuilt_index(rng: &mut Rng, index: &[u8]) -> (Vec<u8>, String) {
    let Ok(entries) = read_table(Path::new("fixture.index"), index) else {
        return (
            index.to_vec(),
            "index: unreadable fixture, unchanged".to_owned(),
        );
    };
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = entries
        .into_iter()
        .map(|(key, value)| (key, value.to_vec()))
        .collect();
    let pick = rng.below(entries.len());
    let key = String::from_utf8_lossy(&entries[pick].0).into_owned();
    let what = match rng.below(4) {
        0 => {
            entries.remove(pick);
            format!("entries: `{key}` dropped")
        }
        1 => {
            // dtype, num_shards / shape, shard_id, offset, size (BundleEntryProto and the
            // header's BundleHeaderProto share the low tags).
            let tag = [0x08, 0x10, 0x18, 0x20, 0x28][rng.below(5)];
            let value = edge_value(rng);
            let value_bytes = &mut entries[pick].1;
            match set_varint_after_tag(value_bytes, tag, value) {
                Some(changed) => *value_bytes = changed,
                None => value_bytes.push(tag),
            }
            format!("entries: `{key}` tag {tag:#x} set to {value}")
        }
        2 => {
            let value_bytes = &mut entries[pick].1;
            let cut = rng.below(value_bytes.len().max(1));
            value_bytes.truncate(cut);
            format!("entries: `{key}` cut to {cut} bytes")
        }
        _ => {
            let what = mutate_raw(rng, &mut entries[pick].1);
            format!("entries: `{key}` {what}")
        }
    };
    let mut builder = TableBuilder::new();
    for (key, value) in &entries {
        builder.add(key, value);
    }
    (builder.finish(), what)
}

/// Structured mutations of text format: lines, numbers, braces; or raw ones.
fn mutate_text(rng: &mut Rng, bytes: &[u8]) -> (Vec<u8>, String) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        let mut bytes = bytes.to_vec();
        let what = mutate_raw(rng, &mut bytes);
        return (bytes, what);
    };
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len().max(1);
    let at = rng.below(n).min(lines.len().saturating_sub(1));
    let what = match rng.below(6) {
        0 if !lines.is_empty() => {
            lines.remove(at);
            format!("text: line {at} dropped")
        }
        1 if !lines.is_empty() => {
            let line = lines[at].clone();
            lines.insert(at, line);
            format!("text: line {at} duplicated")
        }
        2 if lines.len() > 1 => {
            let other = rng.below(lines.len());
            lines.swap(at, other);
            format!("text: lines {at} and {other} swapped")
        }
        3 => {
            // The first number on the line becomes an edge value.
            let line = &mut lines[at];
            let Some(start) = line.find(|c: char| c.is_ascii_digit()) else {
                return (lines.join("\n").into_bytes(), "text: unchanged".to_owned());
            };
            let end = line[start..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(line.len(), |end| start + end);
            let value = match rng.below(3) {
                0 => format!("-{}", edge_value(rng)),
                _ => edge_value(rng).to_string(),
            };
            line.replace_range(start..end, &value);
            format!("text: number on line {at} set to {value}")
        }
        4 => {
            let line = &mut lines[at];
            let before = line.len();
            line.retain(|c| c != '{' && c != '}');
            format!(
                "text: braces of line {at} cut ({} chars)",
                before - line.len()
            )
        }
        _ => {
            let mut bytes = lines.join("\n").into_bytes();
            let what = mutate_raw(rng, &mut bytes);
            return (bytes, what);
        }
    };
    let mut out = lines.join("\n");
    out.push('\n');
    (out.into_bytes(), what)
}

/// What one case found, if anything.
pub(crate) fn run_bounded<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(work());
    });
    match receive.recv_timeout(CASE_LIMIT) {
        Ok(errors) => Ok(errors),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("hang: more than {CASE_LIMIT:?}")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("panic".to_owned()),
    }
}

/// Every error of reading the bundle at `prefix` as the CLI would: open, read, map, verify.
fn bundle_errors(prefix: &Path) -> Vec<String> {
    let reader = match BundleReader::open(prefix) {
        Ok(reader) => reader,
        Err(err) => return vec![err.to_string()],
    };
    let mut errors: Vec<BundleError> = Vec::new();
    for entry in reader.entries().to_vec() {
        errors.extend(reader.read(&entry.key).err());
        errors.extend(reader.map(&entry.key).err());
    }
    errors.extend(reader.verify());
    errors.iter().map(ToString::to_string).collect()
}

/// Every error of reading the graph file at `path`: read, import, verify.
fn graph_errors(path: &Path) -> Vec<String> {
    let loaded = match read_graph_file(path) {
        Ok(loaded) => loaded,
        Err(err) => return vec![err.to_string()],
    };
    let Some(module) = loaded.into_module() else {
        return Vec::new();
    };
    match saveplan_ir::verify_module(&module) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

/// Runs the CLI with a time bound: `None` when it is fine (exit 0, or exit 1 with one line on
/// stderr), else what is wrong.
pub(crate) fn cli_problem(args: &[&str]) -> Option<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the saveplan binary runs");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > CASE_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Some(format!("cli hang: saveplan {args:?}"));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    match status.code() {
        Some(0) => None,
        Some(1) if stderr.lines().count() == 1 => None,
        code => Some(format!("cli exit {code:?}: saveplan {args:?}: {stderr}")),
    }
}

/// Where a failing input is kept.
pub(crate) fn keep_finding(name: &str, files: &[(String, Vec<u8>)]) -> PathBuf {
    let dir = root().join("target/fuzz-findings").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, bytes) in files {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    dir
}

/// The multi-line errors among `errors`.
pub(crate) fn not_one_line(errors: &[String]) -> Option<String> {
    errors
        .iter()
        .find(|error| error.is_empty() || error.contains('\n'))
        .map(|error| format!("error not on one line: {error:?}"))
}

/// Prints the figures of a run (seen with `--nocapture`).
#[expect(
    clippy::print_stderr,
    reason = "the fuzz figures are for the person running it"
)]
pub(crate) fn report(line: String) {
    eprintln!("{line}");
}

/// A scratch directory on /dev/shm when there (no disk writes for thousands of cases).
pub(crate) fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    match shm.is_dir().then(|| tempfile::tempdir_in(shm)) {
        Some(Ok(dir)) => dir,
        _ => tempfile::tempdir().unwrap(),
    }
}

#[test]
fn fuzz_bundles() {
    let (iterations, seed) = budget();
    let started = Instant::now();
    let mut findings = Vec::new();
    let ckpt = crate::support::bundle::ckpt_root();
    for (target, &(case, prefix_name)) in BUNDLES.iter().enumerate() {
        let files: Vec<(String, Vec<u8>)> = {
            let mut files: Vec<_> = std::fs::read_dir(ckpt.join(case))
                .unwrap()
                .map(|item| item.unwrap().path())
                .filter(|path| {
                    let name = path.file_name().unwrap().to_string_lossy();
                    name.starts_with(&format!("{prefix_name}."))
                })
                .map(|path| {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    (name, std::fs::read(&path).unwrap())
                })
                .collect();
            files.sort();
            files
        };
        let dir = scratch();
        let mut rng = Rng(seed ^ ((target as u64) << 48));
        for iteration in 0..iterations {
            let mut mutated = files.clone();
            let pick = rng.below(mutated.len());
            let (name, bytes) = &mut mutated[pick];
            let what = if name.ends_with(".index") {
                let (changed, what) = mutate_index(&mut rng, bytes);
                *bytes = changed;
                what
            } else {
                mutate_raw(&mut rng, bytes)
            };
            let what = format!("{case}/{name}: {what}");
            for (name, bytes) in &mutated {
                std::fs::write(dir.path().join(name), bytes).unwrap();
            }
            let prefix = dir.path().join(prefix_name);
            let library = {
                let prefix = prefix.clone();
                run_bounded(move || bundle_errors(&prefix))
            };
            let mut problem = match library {
                Ok(errors) => not_one_line(&errors),
                Err(problem) => Some(problem),
            };
            if problem.is_none() && iteration % CLI_EVERY == 0 {
                problem = cli_problem(&["inspect", prefix.to_str().unwrap()]);
            }
            if let Some(problem) = problem {
                let name = case.rsplit('/').next().unwrap_or(case);
                let kept = keep_finding(&format!("bundle-{seed}-{name}-{iteration}"), &mutated);
                findings.push(format!(
                    "seed {seed} iteration {iteration} {what}: {problem} (kept in {})",
                    kept.display()
                ));
            }
        }
    }
    report(format!(
        "fuzz_bundles: {} cases in {:?}, {} findings",
        iterations * BUNDLES.len() as u64,
        started.elapsed(),
        findings.len()
    ));
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

#[test]
fn fuzz_graph_files() {
    let (iterations, seed) = budget();
    let started = Instant::now();
    let mut findings = Vec::new();
    for (target, &file) in GRAPHS.iter().enumerate() {
        let original = std::fs::read(root().join(file)).unwrap();
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let is_text = name.ends_with(".pbtxt");
        let dir = scratch();
        let path = dir.path().join(&name);
        let mut rng = Rng(seed ^ ((0x100 + target as u64) << 48));
        for iteration in 0..iterations {
            let (bytes, what) = if is_text {
                mutate_text(&mut rng, &original)
            } else {
                let mut bytes = original.clone();
                let what = mutate_raw(&mut rng, &mut bytes);
                (bytes, what)
            };
            std::fs::write(&path, &bytes).unwrap();
            let library = {
                let path = path.clone();
                run_bounded(move || graph_errors(&path))
            };
            let mut problem = match library {
                Ok(errors) => not_one_line(&errors),
                Err(problem) => Some(problem),
            };
            if problem.is_none() && iteration % CLI_EVERY == 0 {
                problem = cli_problem(&["graph", "show", path.to_str().unwrap()]);
            }
            if let Some(problem) = problem {
                let kept = keep_finding(
                    &format!("graph-{seed}-{target}-{iteration}"),
                    &[(name.clone(), bytes)],
                );
                findings.push(format!(
                    "seed {seed} iteration {iteration} {file}: {what}: {problem} (kept in {})",
                    kept.display()
                ));
            }
        }
    }
    report(format!(
        "fuzz_graph_files: {} cases in {:?}, {} findings",
        iterations * GRAPHS.len() as u64,
        started.elapsed(),
        findings.len()
    ));
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}
