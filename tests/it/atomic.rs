//! Atomic saves: concurrent `saveplan save` runs to one prefix each leave one writer's
//! checkpoint, never a mix; an interrupted merge is rolled back or completed by `recover` and
//! `verify`; leftovers of killed saves are deleted. (The crash at every file operation is the
//! unit test `bundle::crash_tests`, which needs the library's test-only failpoint.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use saveplan::exec::HostTensor;

use crate::support::files::{file_bytes_under, files_under};
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
/// (after), says which, and deletes what killed saves left; `verify` and `inspect` before it
/// read the checkpoint the journal implies and change nothing (not a byte, not a name).
#[test]
fn recover_finishes_an_interrupted_merge_and_readers_change_nothing() {
    for committed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let old = save_values(&prefix, 1);
        let new = save_values(&dir.path().join("new/ckpt"), 2);
        let leftover = interrupted_merge(&prefix, &dir.path().join("new/ckpt"), committed);
        let expected_values = if committed { &new } else { &old };
        let before = file_bytes_under(dir.path());

        let output = saveplan(&["verify", prefix.to_str().unwrap()]);
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success(), "verify: {stdout}");
        let said = if committed {
            "interrupted: a save stopped after its commit point; checking the new checkpoint"
        } else {
            "interrupted: a save stopped before its commit point; checking the previous checkpoint"
        };
        assert!(stdout.starts_with(said), "committed {committed}: {stdout}");
        assert!(
            stdout.lines().last().unwrap().starts_with("ok: "),
            "{stdout}"
        );
        let output = saveplan(&["inspect", prefix.to_str().unwrap()]);
        assert!(output.status.success(), "inspect: {output:?}");
        assert_eq!(
            &read_checkpoint(&prefix),
            expected_values,
            "committed {committed}"
        );
        assert!(
            file_bytes_under(dir.path()) == before,
            "committed {committed}: a reader changed files"
        );

        let output = saveplan(&["recover", prefix.to_str().unwrap()]);
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success(), "recover: {stdout}");
        let expected = if committed {
            "completed: "
        } else {
            "rolled back: "
        };
        assert!(
            stdout.starts_with(expected),
            "committed {committed}: {stdout}"
        );
        assert_eq!(
            &read_checkpoint(&prefix),
            expected_values,
            "committed {committed}"
        );
        assert!(
            stdout.contains(&format!("removed: {}", leftover.display())),
            "{stdout}"
        );
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
            "committed {committed}"
        );
    }
}

/// A planted journal that names files outside its checkpoint (the attack: a staged index that
/// does not exist, so recovery "rolls forward" and deletes the "backup", any file) is refused
/// with one line by `recover` and `save`, before anything is touched; readers ignore it; once
/// it is deleted, as the error says, saves work again.
#[test]
fn a_planted_journal_cannot_delete_or_move_files_outside_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck/ckpt");
    let saved = save_values(&prefix, 1);
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("important.txt"), b"keep me").unwrap();
    std::fs::write(victim.join("b.txt"), b"and me").unwrap();
    let (v, p) = (victim.display(), prefix.display());
    let journals = [
        // The attack as reported: every path outside.
        format!("{v}/nonexistent_staged\t{v}/b.txt\t{v}/important.txt"),
        // The prefix's own index, a foreign backup.
        format!("{p}.index.merging1-1\t{p}.index\t{v}/important.txt"),
        // The prefix's own names, reached through `..`.
        format!("{p}.index.merging1-1\t{p}.index\t{p}/../../victim/important.txt"),
        // A data step moving a foreign file over the prefix's data file.
        format!(
            "{v}/b.txt\t{v}/important.txt\t{p}.data-00000-of-00002.merging-old1-1\n{p}.index.merging1-1\t{p}.index\t{p}.index.merging-old1-1"
        ),
    ];
    let journal = dir.path().join("ck/ckpt.merging");
    for steps in journals {
        std::fs::write(&journal, format!("saveplan merge journal 1\n{steps}\n")).unwrap();
        let before = file_bytes_under(dir.path());
        let output = saveplan(&["inspect", prefix.to_str().unwrap()]);
        assert!(output.status.success(), "{steps}: inspect: {output:?}");
        for args in [
            vec!["recover", prefix.to_str().unwrap()],
            vec![
                "save",
                spec_path().to_str().unwrap(),
                "--values",
                prefix.to_str().unwrap(),
                "--prefix",
                prefix.to_str().unwrap(),
            ],
        ] {
            let output = saveplan(&args);
            let stderr = String::from_utf8(output.stderr).unwrap();
            assert!(!output.status.success(), "{steps}: {args:?} succeeded");
            assert_eq!(stderr.lines().count(), 1, "{steps}: {stderr}");
            assert!(
                stderr.contains("bad merge journal") && stderr.contains("delete the journal"),
                "{steps}: {stderr}"
            );
            assert!(
                file_bytes_under(dir.path()) == before,
                "{steps}: {args:?} changed files"
            );
        }
    }
    std::fs::remove_file(&journal).unwrap();
    assert_eq!(read_checkpoint(&prefix), saved);
    save_values(&prefix, 2);
    assert_eq!(
        std::fs::read(victim.join("important.txt")).unwrap(),
        b"keep me"
    );
}

/// A lock that cannot be taken (a directory where the lock file goes) stops the save with one
/// line, before it writes anything; it never runs unlocked.
#[test]
fn a_lock_that_cannot_be_taken_stops_the_save() {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values/v");
    save_values(&values, 1);
    let prefix = dir.path().join("out/ckpt");
    std::fs::create_dir_all(dir.path().join("out/ckpt.lock")).unwrap();
    let output = saveplan(&[
        "save",
        spec_path().to_str().unwrap(),
        "--values",
        values.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("ckpt.lock: open lock file"), "{stderr}");
    assert_eq!(files_under(&dir.path().join("out")), Vec::<String>::new());
}

/// A reader holds the checkpoint it opened: a save replacing it afterwards (new data files
/// renamed over the old ones) changes nothing the reader reads, and no read fails a checksum.
#[test]
fn a_reader_keeps_reading_the_checkpoint_it_opened_while_a_save_replaces_it() {
    use saveplan::bundle::BundleReader;
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    save_values(&prefix, 1);
    let opened = BundleReader::open(&prefix).unwrap();
    let first = BundleReader::open(&prefix).unwrap();
    let expected: Vec<_> = first
        .entries()
        .iter()
        .map(|entry| first.read(&entry.key).unwrap())
        .collect();
    drop(first);
    save_values(&prefix, 2);
    let read: Vec<_> = opened
        .entries()
        .iter()
        .map(|entry| opened.read(&entry.key).unwrap())
        .collect();
    assert_eq!(read, expected);
    let now = BundleReader::open(&prefix).unwrap();
    assert_ne!(now.read(&now.entries()[0].key).unwrap(), expected[0]);
}

/// A hostile `checkpoint` state file naming a 5 MB path gets a short one-line error: an error
/// quotes at most a few KiB of what it was given.
#[test]
fn a_huge_path_in_a_state_file_is_quoted_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = "a".repeat(5 << 20);
    std::fs::write(
        dir.path().join("checkpoint"),
        format!("model_checkpoint_path: \"{path}\"\n"),
    )
    .unwrap();
    let output = saveplan(&["inspect", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1);
    assert!(stderr.len() < 8 << 10, "{} bytes", stderr.len());
    assert!(stderr.contains("bytes left out"), "{stderr:.300}");
}
