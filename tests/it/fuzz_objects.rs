//! Seeded fuzzing of object graphs and object specs, with the budget and seed of `fuzz.rs`
//! (`SAVEPLAN_FUZZ_ITERATIONS`, `SAVEPLAN_FUZZ_SEED`; a long run is
//! `SAVEPLAN_FUZZ_ITERATIONS=10000 cargo test --test it fuzz_object -- --nocapture`, about
//! ten minutes in a debug build).
//!
//! Object graphs: hostile graphs (child chains past `MAX_OBJECT_DEPTH`, chains of slot
//! variables each the optimizer of the next, random edges making cycles, ids naming no node or
//! negative, a fan-out of thousands of edges, many attributes, odd local names) written into
//! CRC-valid checkpoints next to a variable `v`, then read, made into keys, and restored by
//! an object spec of `v` (`read()` and `restore()`), and now and then run through the CLI
//! (`inspect --objects`, `--json`, `restore`, `convert`). No panic, every error on one line,
//! within `CASE_LIMIT`; the keys and the report stay within the caps
//! (`MAX_OBJECT_PATH_BYTES`); `v`, always the root's first edge, restores to the stored value.
//!
//! Object specs: random entries (paths deep and wide, variables under variables, slots of
//! missing variables, `also` paths, attributes and suffixes, unknown dtypes, negative and
//! huge shapes, the save counter) are parsed and built, and their fresh checkpoint written
//! now and then and restored by the same spec: every value comes back as written (zeros).

use std::path::{Path, PathBuf};
use std::time::Instant;

use saveplan::bundle::BundleReader;
use saveplan::checkpoint::{ObjectSpec, RestoreKind, read_object_graph};
use saveplan::exec::HostTensor;
use saveplan_ir::object_graph::MAX_OBJECT_PATH_BYTES;
use saveplan_proto::tensorflow::trackable_object_graph as tog;

use crate::fuzz::{
    CLI_EVERY, Rng, budget, cli_problem, keep_finding, not_one_line, report, run_bounded, scratch,
};
use crate::objects_limits::{Node, VALUE, edge, encoded, slot_ref, variable, write_checkpoint};

/// The key of the variable every fuzzed graph holds.
const V_KEY: &str = "v/.ATTRIBUTES/VARIABLE_VALUE";

/// The object spec the graphs are restored with: `v`, and a slot-like module path.
const SPEC: &str = r#"{"objects":[{"path":["v"],"dtype":"float32","shape":[2]},
    {"path":["opt","w"],"dtype":"float32","shape":[2]}]}"#;

/// What one case found: its errors (each must be one line) and wrong results.
struct Outcome {
    errors: Vec<String>,
    wrong: Vec<String>,
}

/// A local name: plain, empty, escaped characters, non-ASCII or long.
fn local_name(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => String::new(),
        1 => ".S/..".to_owned(),
        2 => "ü\u{1F600}".to_owned(),
        3 => "x".repeat(rng.below(300)),
        4 => "root".to_owned(),
        5 => "save_counter".to_owned(),
        _ => format!("n{}", rng.below(20)),
    }
}

/// An id: mostly a node of `n`, sometimes none or negative.
fn node_id(rng: &mut Rng, n: usize) -> i32 {
    match rng.below(20) {
        0 => n as i32 + rng.below(3) as i32,
        1 => -1 - rng.below(2) as i32,
        _ => rng.below(n) as i32,
    }
}

/// Adds `node` as a child `name` of the root; its id.
fn attach(nodes: &mut Vec<Node>, name: &str, node: Node) -> usize {
    let id = nodes.len();
    nodes[0].children.push(edge(id as i32, name));
    nodes.push(node);
    id
}

/// A hostile graph: the root's first edge is always `v` (node 1, the variable).
fn hostile_graph(rng: &mut Rng) -> (Vec<Node>, String) {
    let mut nodes = vec![
        Node {
            children: vec![edge(1, "v")],
            ..Node::default()
        },
        variable(V_KEY),
    ];
    let mut what = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let len = nodes.len();
        match rng.below(6) {
            0 => {
                // A child chain, sometimes past MAX_OBJECT_DEPTH.
                let depth = rng.below(1_200);
                what.push(format!("chain {depth}"));
                let mut parent = rng.below(len);
                for _ in 0..depth {
                    let id = nodes.len() as i32;
                    let name = if rng.below(4) == 0 {
                        local_name(rng)
                    } else {
                        "c".to_owned()
                    };
                    nodes[parent].children.push(edge(id, &name));
                    nodes.push(Node::default());
                    parent = id as usize;
                }
            }
            1 => {
                // Slot variables, each the optimizer and the variable of the next.
                let links = rng.below(80);
                what.push(format!("slot chain {links}"));
                let optimizer = attach(&mut nodes, "opt", Node::default());
                let mut previous = (optimizer, 1);
                for link in 0..links {
                    let id = nodes.len();
                    nodes.push(variable(&format!("slot_{link}")));
                    let name = local_name(rng);
                    nodes[previous.0].slot_variables.push(slot_ref(
                        previous.1 as i32,
                        &name,
                        id as i32,
                    ));
                    previous = (id, id);
                }
            }
            2 => {
                // Random edges and slot references: cycles, dangling and negative ids.
                let extra = rng.below(40);
                what.push(format!("random {extra}"));
                nodes.extend((0..extra).map(|_| Node::default()));
                let n = nodes.len();
                for _ in 0..rng.below(3 * n) {
                    let from = rng.below(n);
                    if rng.below(4) == 0 {
                        let (variable, name) = (node_id(rng, n), local_name(rng));
                        let slot = slot_ref(variable, &name, node_id(rng, n));
                        nodes[from].slot_variables.push(slot);
                    } else {
                        let to = node_id(rng, n);
                        let name = local_name(rng);
                        nodes[from].children.push(edge(to, &name));
                    }
                }
                let to = node_id(rng, n);
                nodes[0].children.push(edge(to, "r"));
            }
            3 => {
                // A fan-out of thousands of edges, to one node or to many.
                let fan = rng.below(5_000);
                what.push(format!("fan-out {fan}"));
                let hub = attach(&mut nodes, "hub", Node::default());
                let many = rng.below(2) == 0;
                for index in 0..fan {
                    let to = if many {
                        let id = nodes.len();
                        nodes.push(variable(&format!("leaf_{index}")));
                        id
                    } else {
                        rng.below(hub + 1)
                    };
                    nodes[hub]
                        .children
                        .push(edge(to as i32, &format!("e{index}")));
                }
            }
            4 => {
                // Many attributes, some sharing `v`'s key or a prefix of it.
                let count = rng.below(2_000);
                what.push(format!("attributes {count}"));
                let mut node = Node::default();
                for index in 0..count {
                    let key = match rng.below(4) {
                        0 => V_KEY.to_owned(),
                        1 => "v/".to_owned(),
                        _ => format!("k{index}"),
                    };
                    node.attributes
                        .push(tog::trackable_object::SerializedTensor {
                            name: local_name(rng),
                            full_name: String::new(),
                            checkpoint_key: key,
                        });
                }
                attach(&mut nodes, "attrs", node);
            }
            _ => {
                // Odd has_checkpoint_values and registered savers.
                what.push("flags".to_owned());
                for node in nodes.iter_mut().skip(2) {
                    node.has_checkpoint_values = Some(rng.below(2) == 0);
                    if rng.below(5) == 0 {
                        node.registered_saver = Some(saveplan_proto::tensorflow::RegisteredSaver {
                            name: "saver".to_owned(),
                            object_name: "obj".to_owned(),
                        });
                    }
                }
            }
        }
    }
    (nodes, what.join(", "))
}

/// Reads the graph at `prefix`, makes its keys and restores `v` by [`SPEC`].
fn graph_case(prefix: &Path) -> Outcome {
    let mut outcome = Outcome {
        errors: Vec::new(),
        wrong: Vec::new(),
    };
    let reader = BundleReader::open(prefix).unwrap();
    match read_object_graph(&reader) {
        Err(err) => outcome.errors.push(one_line(&err)),
        Ok(graph) => {
            let bytes: usize = graph.key_prefixes().iter().flatten().map(String::len).sum();
            // Escaping at most doubles a name; slots join two paths.
            if bytes as u64 > 4 * MAX_OBJECT_PATH_BYTES {
                outcome.wrong.push(format!("key prefixes of {bytes} bytes"));
            }
            graph.derived_keys();
            graph.computed_has_values();
        }
    }
    let spec = ObjectSpec::parse(SPEC).unwrap();
    for kind in [RestoreKind::Read, RestoreKind::Restore] {
        let mut checkpoint = spec.fresh_checkpoint().unwrap();
        let matched = match checkpoint.match_checkpoint(&prefix.to_string_lossy(), kind) {
            Ok(matched) => matched,
            Err(err) => {
                outcome.errors.push(one_line(&err));
                continue;
            }
        };
        let text = matched.report().to_string();
        if text.len() as u64 > 4 * MAX_OBJECT_PATH_BYTES {
            outcome
                .wrong
                .push(format!("a report of {} bytes", text.len()));
        }
        match checkpoint.apply(matched) {
            Err(err) => outcome.errors.push(one_line(&err)),
            Ok(_) => {
                let restored = checkpoint.values().get(V_KEY).and_then(HostTensor::bytes);
                let expected: Vec<u8> = VALUE.iter().flat_map(|x| x.to_le_bytes()).collect();
                if restored != Some(expected.as_slice()) {
                    outcome.wrong.push(format!("v restored as {restored:?}"));
                }
            }
        }
    }
    outcome
}

fn one_line(err: &dyn std::error::Error) -> String {
    crate::support::error_chain(err, crate::support::ErrorForm::OneLine)
        .trim_end()
        .to_owned()
}

/// The problem of a case's outcome, if any.
fn problem_of(outcome: Result<Outcome, String>) -> Option<String> {
    match outcome {
        Ok(outcome) => not_one_line(&outcome.errors).or_else(|| {
            (!outcome.wrong.is_empty()).then(|| format!("wrong: {}", outcome.wrong.join("; ")))
        }),
        Err(problem) => Some(problem),
    }
}

/// The CLI commands run on a graph now and then.
fn cli_graph_problem(dir: &Path, prefix: &Path) -> Option<String> {
    let spec = dir.join("spec.json");
    std::fs::write(&spec, SPEC).unwrap();
    let prefix = prefix.to_str().unwrap();
    let out = dir.join("out.safetensors");
    let converted = dir.join("converted.safetensors");
    let commands: [Vec<&str>; 4] = [
        vec!["inspect", prefix, "--objects"],
        vec!["inspect", prefix, "--objects", "--json"],
        vec![
            "restore",
            spec.to_str().unwrap(),
            "--prefix",
            prefix,
            "--out",
            out.to_str().unwrap(),
            "--read",
        ],
        vec!["convert", prefix, converted.to_str().unwrap()],
    ];
    commands.iter().find_map(|args| cli_problem(args))
}

#[test]
fn fuzz_object_graphs() {
    let (iterations, seed) = budget();
    let started = Instant::now();
    let mut findings = Vec::new();
    let dir = scratch();
    let prefix = dir.path().join("ckpt");
    let mut rng = Rng(seed ^ (0x200 << 48));
    for iteration in 0..iterations {
        let (nodes, what) = hostile_graph(&mut rng);
        let graph = encoded(nodes);
        write_checkpoint(&prefix, &graph, &[V_KEY]);
        let outcome = {
            let prefix = prefix.clone();
            run_bounded(move || graph_case(&prefix))
        };
        let mut problem = problem_of(outcome);
        if problem.is_none() && iteration % CLI_EVERY == 0 {
            problem = cli_graph_problem(dir.path(), &prefix);
        }
        if let Some(problem) = problem {
            let kept = keep_finding(
                &format!("object-graph-{seed}-{iteration}"),
                &[("graph.pb".to_owned(), graph)],
            );
            findings.push(format!(
                "seed {seed} iteration {iteration} ({what}): {problem} (kept in {})",
                kept.display()
            ));
        }
    }
    report(format!(
        "fuzz_object_graphs: {iterations} cases in {:?}, {} findings",
        started.elapsed(),
        findings.len()
    ));
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// A path of up to `depth` names from a small set, so that paths meet.
fn spec_path(rng: &mut Rng, depth: usize) -> Vec<String> {
    (0..1 + rng.below(depth))
        .map(|_| format!("p{}", rng.below(4)))
        .collect()
}

/// A random object spec.
fn hostile_spec(rng: &mut Rng) -> String {
    let deep = rng.below(10) == 0;
    let count = if rng.below(10) == 0 {
        500 + rng.below(1_500)
    } else {
        1 + rng.below(20)
    };
    let depth = if deep { 1_200 } else { 4 };
    let entries: Vec<serde_json::Value> = (0..count)
        .map(|_| {
            let dtype = ["float32", "int64", "string", "bogus", "variant"][rng.below(5)];
            let shape: Vec<i64> = match rng.below(12) {
                0 => vec![1 << 40, 1024],
                1 => vec![-1],
                2 => vec![100_000, 100_000],
                _ => (0..rng.below(3)).map(|_| rng.below(4) as i64).collect(),
            };
            let mut entry = serde_json::json!({"dtype": dtype, "shape": shape});
            match rng.below(8) {
                0 => {
                    entry["slot"] = serde_json::json!({
                        "variable": spec_path(rng, depth),
                        "optimizer": spec_path(rng, 2),
                        "name": format!("s{}", rng.below(3)),
                    });
                }
                1 => {
                    entry["path"] = serde_json::json!(["save_counter"]);
                    entry["dtype"] = serde_json::json!("int64");
                    entry["shape"] = serde_json::json!([]);
                }
                _ => entry["path"] = serde_json::json!(spec_path(rng, depth)),
            }
            match rng.below(6) {
                0 => entry["also"] = serde_json::json!([spec_path(rng, depth)]),
                1 => {
                    entry["attribute"] = serde_json::json!(format!("a{}", rng.below(3)));
                    if rng.below(2) == 0 {
                        entry["suffix"] = serde_json::json!(format!("-s{}", rng.below(2)));
                    }
                }
                _ => {}
            }
            entry
        })
        .collect();
    serde_json::json!({ "objects": entries }).to_string()
}

/// Builds `text`'s graph and fresh checkpoint; with `prefix`, writes it there and restores it
/// by the same spec.
fn spec_case(text: &str, prefix: Option<&Path>) -> Outcome {
    let mut outcome = Outcome {
        errors: Vec::new(),
        wrong: Vec::new(),
    };
    let spec = match ObjectSpec::parse(text) {
        Ok(spec) => spec,
        Err(err) => {
            outcome.errors.push(one_line(&err));
            return outcome;
        }
    };
    if let Err(err) = spec.object_graph() {
        outcome.errors.push(one_line(&err));
    }
    let written = match spec.fresh_checkpoint() {
        Ok(written) => written,
        Err(err) => {
            outcome.errors.push(one_line(&err));
            return outcome;
        }
    };
    let Some(prefix) = prefix else {
        return outcome;
    };
    let prefix = prefix.to_string_lossy();
    if let Err(err) = written.write(&prefix) {
        outcome.errors.push(one_line(&err));
        return outcome;
    }
    let mut read = spec.fresh_checkpoint().unwrap();
    let status = read
        .match_checkpoint(&prefix, RestoreKind::Read)
        .and_then(|matched| read.apply(matched));
    match status {
        Err(err) => outcome
            .wrong
            .push(format!("restoring what was written: {}", one_line(&err))),
        Ok(_) => {
            if read.values() != written.values() {
                outcome
                    .wrong
                    .push("values differ from those written".to_owned());
            }
        }
    }
    outcome
}

#[test]
fn fuzz_object_specs() {
    let (iterations, seed) = budget();
    let started = Instant::now();
    let mut findings = Vec::new();
    let dir = scratch();
    let mut rng = Rng(seed ^ (0x300 << 48));
    for iteration in 0..iterations {
        let text = hostile_spec(&mut rng);
        let prefix: Option<PathBuf> =
            (iteration % 5 == 0).then(|| dir.path().join(format!("ckpt{iteration}")));
        let outcome = {
            let text = text.clone();
            run_bounded(move || spec_case(&text, prefix.as_deref()))
        };
        if let Some(problem) = problem_of(outcome) {
            let kept = keep_finding(
                &format!("object-spec-{seed}-{iteration}"),
                &[("spec.json".to_owned(), text.into_bytes())],
            );
            findings.push(format!(
                "seed {seed} iteration {iteration}: {problem} (kept in {})",
                kept.display()
            ));
        }
    }
    report(format!(
        "fuzz_object_specs: {iterations} cases in {:?}, {} findings",
        started.elapsed(),
        findings.len()
    ));
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}
