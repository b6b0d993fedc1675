//! Checkpoint key checks: every key is written once, the slices of a sliced key tile its full
//! shape exactly, and every restored key is written by some save.

use std::collections::{BTreeMap, BTreeSet};

use saveplan_ir::Graph;
use saveplan_ir::slice::{ShapeAndSlice, SliceError, overlap_volume};

use super::{Finding, PlanOps, Problem, Scope};

/// One write of a key: the slice spec text, its parse, and the writing op's name.
struct Write<'a> {
    spec: &'a str,
    slice: Option<Slice>,
    op: &'a str,
}

/// A parsed slice spec: the full shape and the region taken of it.
#[derive(PartialEq, Eq, Debug)]
struct Slice {
    full_shape: Vec<i64>,
    region: Vec<(i64, i64)>,
}

impl Slice {
    fn parse(spec: &str) -> Result<Slice, SliceError> {
        let parsed = ShapeAndSlice::parse(spec)?;
        let region = parsed.region()?;
        Ok(Slice {
            full_shape: parsed.full_shape,
            region,
        })
    }
}

/// The writes of one graph's saves, checked per key (keys in sorted order).
pub fn check_writes(graph: &Graph, plan: &PlanOps) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<Write<'_>>> = BTreeMap::new();
    for (op, save) in plan.saves_in_order() {
        let name = graph.op(op).name.as_str();
        for entry in &save.entries {
            let slice = if entry.slice_spec.is_empty() {
                None
            } else {
                match Slice::parse(&entry.slice_spec) {
                    Ok(slice) => Some(slice),
                    Err(reason) => {
                        problems.push(Problem::BadSliceSpec {
                            name: name.to_owned(),
                            key: entry.key.clone(),
                            spec: entry.slice_spec.clone(),
                            reason,
                        });
                        continue;
                    }
                }
            };
            by_key.entry(&entry.key).or_default().push(Write {
                spec: &entry.slice_spec,
                slice,
                op: name,
            });
        }
    }
    for (key, writes) in &by_key {
        check_key(key, writes, &mut problems);
    }
    problems
}

/// Restores of keys that no save of the module writes. Nothing is reported when the module
/// saves nothing (a restore function on its own cannot be checked against its writer).
pub fn check_restores(graphs: &[(&Scope, &Graph, &PlanOps)]) -> Vec<Finding> {
    let written: BTreeSet<&str> = graphs
        .iter()
        .flat_map(|(_, _, plan)| plan.saves.values())
        .flat_map(|save| save.entries.iter().map(|entry| entry.key.as_str()))
        .collect();
    if written.is_empty() {
        return Vec::new();
    }
    let mut findings = Vec::new();
    for (scope, graph, plan) in graphs {
        for (op, restore) in plan.restores_in_order() {
            let mut reported = BTreeSet::new();
            for entry in &restore.entries {
                if !written.contains(entry.key.as_str()) && reported.insert(&entry.key) {
                    findings.push(Finding {
                        scope: (*scope).clone(),
                        problem: Problem::UnknownRestoreKey {
                            name: graph.op(op).name.clone(),
                            key: entry.key.clone(),
                        },
                    });
                }
            }
        }
    }
    findings
}

/// Checks the writes of one key: a whole write must be the only one; slices must agree on the
/// full shape, not overlap and cover it.
fn check_key(key: &str, writes: &[Write<'_>], problems: &mut Vec<Problem>) {
    let duplicate = |first: &Write<'_>, second: &Write<'_>| Problem::DuplicateKey {
        key: key.to_owned(),
        slice_spec: second.spec.to_owned(),
        first: first.op.to_owned(),
        second: second.op.to_owned(),
    };
    if let Some(whole) = writes.iter().position(|write| write.slice.is_none()) {
        for (pos, write) in writes.iter().enumerate() {
            if pos != whole {
                let (first, second) = if pos < whole {
                    (write, &writes[whole])
                } else {
                    (&writes[whole], write)
                };
                problems.push(duplicate(first, second));
            }
        }
        return;
    }
    let slices: Vec<(&Write<'_>, &Slice)> = writes
        .iter()
        .filter_map(|write| write.slice.as_ref().map(|slice| (write, slice)))
        .collect();
    let mut clean = true;
    for (pos, (a_write, a)) in slices.iter().enumerate() {
        for (b_write, b) in &slices[pos + 1..] {
            let problem = if a.full_shape != b.full_shape {
                Problem::FullShapeMismatch {
                    key: key.to_owned(),
                    a: a_write.spec.to_owned(),
                    b: b_write.spec.to_owned(),
                }
            } else if a == b {
                duplicate(a_write, b_write)
            } else if overlap_volume(&a.region, &b.region) > 0 {
                Problem::OverlappingSlices {
                    key: key.to_owned(),
                    a: a_write.spec.to_owned(),
                    b: b_write.spec.to_owned(),
                }
            } else {
                continue;
            };
            clean = false;
            problems.push(problem);
        }
    }
    // Disjoint slices inside the full shape tile it exactly when their sizes add up to it.
    if let (true, Some((_, first))) = (clean, slices.first()) {
        let total = volume(&first.full_shape);
        let covered: u128 = slices
            .iter()
            .map(|(_, slice)| {
                let lengths: Vec<i64> = slice.region.iter().map(|&(_, length)| length).collect();
                volume(&lengths)
            })
            .sum();
        if covered != total {
            problems.push(Problem::SliceGap {
                key: key.to_owned(),
                full_shape: first.full_shape.clone(),
                covered,
                total,
            });
        }
    }
}

/// The number of elements of a shape (negative sizes count as zero).
fn volume(dims: &[i64]) -> u128 {
    dims.iter()
        .map(|&size| u128::try_from(size).unwrap_or(0))
        .product()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(specs: &[&str]) -> Vec<Problem> {
        let writes: Vec<Write<'_>> = specs
            .iter()
            .map(|spec| Write {
                spec,
                slice: (!spec.is_empty()).then(|| Slice::parse(spec).unwrap()),
                op: "SaveV2",
            })
            .collect();
        let mut problems = Vec::new();
        check_key("k", &writes, &mut problems);
        problems
    }

    #[test]
    fn tiling_slices_are_clean() {
        assert_eq!(problems_of(&[""]), vec![]);
        assert_eq!(problems_of(&["4 3 0,2:0,3", "4 3 2,2:0,3"]), vec![]);
        // MaxShardSizePolicy cuts (g6): rows, then a row cut in columns.
        let g6 = [
            "10 8 0,3:0,8",
            "10 8 3,3:0,8",
            "10 8 6,2:0,8",
            "10 8 8,1:0,8",
        ];
        let mut specs = g6.to_vec();
        specs.extend(["10 8 9,1:0,1", "10 8 9,1:1,7"]);
        assert_eq!(problems_of(&specs), vec![]);
    }

    #[test]
    fn whole_and_sliced_is_a_duplicate() {
        let problems = problems_of(&["4 3 0,2:0,3", ""]);
        assert!(matches!(&problems[..], [Problem::DuplicateKey { .. }]));
    }

    #[test]
    fn overlap_gap_and_shape_mismatch() {
        assert!(matches!(
            &problems_of(&["4 3 0,3:0,3", "4 3 2,2:0,3"])[..],
            [Problem::OverlappingSlices { .. }]
        ));
        assert!(matches!(
            &problems_of(&["4 3 0,2:0,3", "4 3 3,1:0,3"])[..],
            [Problem::SliceGap {
                covered: 9,
                total: 12,
                ..
            }]
        ));
        assert!(matches!(
            &problems_of(&["4 3 0,2:0,3", "5 3 2,2:0,3"])[..],
            [Problem::FullShapeMismatch { .. }]
        ));
        // Touching but disjoint in one dimension: no overlap.
        assert_eq!(problems_of(&["4 3 0,4:0,1", "4 3 0,4:1,2"]), vec![]);
    }
}
