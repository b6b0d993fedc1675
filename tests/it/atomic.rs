//! Atomic saves: concurrent `saveplan save` runs to one prefix each leave one writer's
//! checkpoint, never a mix; an interrupted merge is rolled back or completed by `recover` and
//! `verify`; leftovers of killed saves are deleted. (The crash at every file operation is the
//! unit test `bundle::crash_tests`, which needs the library's test-only failpoint.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use saveplan::exec::HostTensor;

use crate::support::files::files_under;
use crate::support::saveplan;
use crate::support::session::{generated_values, read_checkpoint, spec_session};

const SPEC: &str = "run/c3_two_tasks.json";

/// Saves the values of `salt` at `prefix` through the Rust API; returns them.
fn save_values(prefix: &Path, salt: u8) -> BTreeMap<String, HostTensor> {
    let session = spec_session(SPEC);
    let values = generated_values(&session, salt);
    session.assign(values.clone()).unwrap();
    session.save(prefix.to_str().unwrap()).unwrap();
    values
}

fn spec_path() -> PathBuf {
    crate::support::session::input(SPEC)
}

/// Several processes save different values to one prefix at once, round after round: each
/// succeeds, and the checkpoint left is one writer's values, whole, with no other file.
#[test]
fn concurrent_saves_leave_one_writers_checkpoint() {
    const WRITERS: u8 = 6;
    const ROUNDS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<BTreeMap<String, HostTensor>> = (0..WRITERS)
        .map(|salt| save_values(&dir.path().join(format!("values{salt}/v")), salt + 1))
        .collect();
    let prefix = dir.path().join("out/ckpt");
    let mut winners = Vec::new();
    for round in 0..ROUNDS {
        let children: Vec<_> = (0..WRITERS)
            .map(|salt| {
                Command::new(env!("CARGO_BIN_EXE_saveplan"))
                    .arg("save")
                    .arg(spec_path())
                    .arg("--values")
                    .arg(dir.path().join(format!("values{salt}/v")))
                    .arg("--prefix")
                    .arg(&prefix)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "round {round}: {stderr}");
        }
        let found = read_checkpoint(&prefix);
        let winner = written.iter().position(|values| *values == found);
        let Some(winner) = winner else {
            panic!("round {round}: the checkpoint is no writer's values (a mix)");
        };
        winners.push(winner);
        assert_eq!(
            files_under(&dir.path().join("out")),
            [
                "ckpt.data-00000-of-00002",
                "ckpt.data-00001-of-00002",
                "ckpt.index"
            ],
            "round {round}"
        );
    }
    assert_eq!(winners.len(), ROUNDS);
}

/// Lays out a merge of the checkpoint at `new` over the one at `prefix` interrupted by a crash:
/// the journal written, the first data file replaced, the second moved aside, and (when
/// `committed`) the index replaced too. Returns a leftover of a killed save planted next to it.
fn interrupted_merge(prefix: &Path, new: &Path, committed: bool) -> PathBuf {
    let path = |base: &Path, suffix: &str| {
        let mut name = base.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let temp = path(prefix, "_temp");
    std::fs::create_dir_all(&temp).unwrap();
    let mut steps = Vec::new();
    for shard in ["data-00000-of-00002", "data-00001-of-00002", "index"] {
        let from = if shard == "index" {
            path(prefix, ".index.merging99-2")
        } else {
            temp.join(format!("part-{shard}"))
        };
        std::fs::rename(path(new, &format!(".{shard}")), &from).unwrap();
        let to = path(prefix, &format!(".{shard}"));
        let backup = path(&to, ".merging-old99-0");
        steps.push(format!(
            "{}\t{}\t{}",
            from.display(),
            to.display(),
            backup.display()
        ));
        let done = match shard {
            "data-00000-of-00002" => 2,
            "data-00001-of-00002" => 1,
            _ if committed => 2,
            _ => 0,
        };
        if done >= 1 {
            std::fs::rename(&to, &backup).unwrap();
        }
        if done == 2 {
            std::fs::rename(&from, &to).unwrap();
        }
    }
    if committed {
        let second = steps[1].split('\t').map(PathBuf::from).collect::<Vec<_>>();
        std::fs::rename(&second[0], &second[1]).unwrap();
    }
    let journal = format!("saveplan merge journal 1\n{}\n", steps.join("\n"));
    std::fs::write(path(prefix, ".merging"), journal).unwrap();
    let leftover = path(prefix, ".data-00000-of-00002.tempstate4194305-7");
    std::fs::write(&leftover, b"partial").unwrap();
    leftover
}

/// `saveplan recover` rolls an interrupted merge back (before its commit point) or completes it
/// (after), says which, and deletes what killed saves left; `verify` does the same first.
#[test]
fn recover_and_verify_finish_an_interrupted_merge() {
    for (committed, command) in [
        (false, "recover"),
        (true, "recover"),
        (false, "verify"),
        (true, "verify"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let old = save_values(&prefix, 1);
        let new = save_values(&dir.path().join("new/ckpt"), 2);
        let leftover = interrupted_merge(&prefix, &dir.path().join("new/ckpt"), committed);
        let output = saveplan(&[command, prefix.to_str().unwrap()]);
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success(), "{command}: {stdout}");
        let first = stdout.lines().next().unwrap();
        let expected = if committed {
            "completed: "
        } else {
            "rolled back: "
        };
        assert!(
            first.starts_with(expected),
            "{command}, committed {committed}: {stdout}"
        );
        let values = read_checkpoint(&prefix);
        assert!(
            values == if committed { new } else { old },
            "{command}, committed {committed}"
        );
        if command == "recover" {
            assert!(
                stdout.contains(&format!("removed: {}", leftover.display())),
                "{stdout}"
            );
        } else {
            assert!(
                stdout.lines().last().unwrap().starts_with("ok: "),
                "{stdout}"
            );
        }
        let files: Vec<String> = files_under(dir.path())
            .into_iter()
            .filter(|name| !name.starts_with("new/"))
            .collect();
        assert_eq!(
            files,
            [
                "ckpt.data-00000-of-00002",
                "ckpt.data-00001-of-00002",
                "ckpt.index"
            ],
            "{command}, committed {committed}"
        );
    }
}
