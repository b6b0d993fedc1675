//! Seeded fuzzing of planted merge journals (`<prefix>.merging`): journals made of the
//! prefix's own names, names of files elsewhere (absolute, relative, through `..`, in sibling
//! and nested folders), names that do not exist, wrong field counts and bad first lines.
//! Whatever the journal says, a reader (`BundleReader::open`) changes nothing anywhere, and
//! `recover` and a save change nothing outside the checkpoint's own folder: no file there is
//! deleted, moved, created or rewritten. Errors are one line.
//!
//! The suite runs a small budget; a long run is
//! `SAVEPLAN_FUZZ_ITERATIONS=100000 cargo test --release --test it fuzz_journal`.

use std::path::Path;

use saveplan::bundle::{self, BundleReader, BundleWriter, DType};

use crate::fuzz::{Rng, budget};
use crate::support::files::file_bytes_under;

/// A one-tensor checkpoint at `prefix`, holding `value`.
fn write_checkpoint(prefix: &Path, value: f32) {
    let mut writer = BundleWriter::create(prefix).unwrap();
    writer
        .add("t", DType::Float, &[1], &value.to_le_bytes())
        .unwrap();
    writer.finish().unwrap();
}

/// One journal path: the prefix's own names and names outside its folder, mixed.
fn path(rng: &mut Rng, ck: &Path, outside: &Path) -> String {
    let own = [
        "ckpt.index",
        "ckpt.data-00000-of-00001",
        "ckpt.index.merging7-1",
        "ckpt.index.merging-old7-1",
        "ckpt.data-00000-of-00001.merging-old7-2",
        "ckpt_temp/part-00000-of-00001.data-00000-of-00001",
        "ckpt.lock",
        "ckpt.merging",
    ];
    let foreign = [
        "victim.txt",
        "b.txt",
        "sub/deep.txt",
        "missing.txt",
        "ckpt.index",
        "ckpt.data-00000-of-00001.merging-old7-2",
    ];
    match rng.below(6) {
        0 | 1 => ck.join(own[rng.below(own.len())]).display().to_string(),
        2 => outside
            .join(foreign[rng.below(foreign.len())])
            .display()
            .to_string(),
        3 => format!(
            "{}/../outside/{}",
            ck.display(),
            foreign[rng.below(foreign.len())]
        ),
        4 => format!("../outside/{}", foreign[rng.below(foreign.len())]),
        _ => ["", "/", ".", "..", "ckpt.index", "/etc/hostname"][rng.below(6)].to_owned(),
    }
}

/// A journal: a well-formed commit whose data step comes from a random path, with its staged
/// index there or not (a third of the cases), or random steps.
fn journal(rng: &mut Rng, ck: &Path, outside: &Path) -> String {
    if rng.below(3) == 0 {
        let (index, data) = (ck.join("ckpt.index"), ck.join("ckpt.data-00000-of-00001"));
        let staged = ck.join("ckpt.index.merging7-1");
        if rng.below(2) == 0 {
            std::fs::copy(&index, &staged).unwrap();
        }
        return format!(
            "saveplan merge journal 1\n{}\t{}\t{}.merging-old7-2\n{}\t{}\t{}.merging-old7-1\n",
            path(rng, ck, outside),
            data.display(),
            data.display(),
            staged.display(),
            index.display(),
            index.display(),
        );
    }
    let mut text = match rng.below(10) {
        0 => "saveplan merge journal 2\n".to_owned(),
        _ => "saveplan merge journal 1\n".to_owned(),
    };
    for _ in 0..rng.below(4) {
        let fields = match rng.below(8) {
            0 => 2,
            1 => 4,
            _ => 3,
        };
        let line: Vec<String> = (0..fields).map(|_| path(rng, ck, outside)).collect();
        text.push_str(&line.join("\t"));
        text.push('\n');
    }
    text
}

#[test]
fn fuzz_planted_journals() {
    let (iterations, seed) = budget();
    let mut rng = Rng(seed ^ 0x6a6f_7572);
    let root = tempfile::tempdir().unwrap();
    let ck = root.path().join("ck");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::fs::write(outside.join("victim.txt"), b"victim").unwrap();
    std::fs::write(outside.join("b.txt"), b"b").unwrap();
    std::fs::write(outside.join("sub/deep.txt"), b"deep").unwrap();
    // Files named like the checkpoint's, outside its folder.
    write_checkpoint(&outside.join("ckpt"), 9.0);
    let prefix = ck.join("ckpt");
    let (mut refused, mut recovered) = (0u64, 0u64);
    for iteration in 0..iterations {
        let _ = std::fs::remove_dir_all(&ck);
        std::fs::create_dir_all(ck.join("ckpt_temp")).unwrap();
        write_checkpoint(&prefix, 1.0);
        let text = journal(&mut rng, &ck, &outside);
        std::fs::write(bundle::journal::journal_path(&prefix), &text).unwrap();
        let context = format!("iteration {iteration}, journal {text:?}");

        let everything = file_bytes_under(root.path());
        let _ = BundleReader::open(&prefix).map(|reader| reader.read("t"));
        let _ = bundle::journal::read_view(&prefix);
        assert!(
            file_bytes_under(root.path()) == everything,
            "{context}: a reader changed files"
        );

        let elsewhere = file_bytes_under(&outside);
        match bundle::recover(&prefix) {
            Ok(_) => recovered += 1,
            Err(err) => {
                refused += 1;
                assert_eq!(err.to_string().lines().count(), 1, "{context}: {err}");
            }
        }
        let mut writer = BundleWriter::create(&prefix).unwrap();
        writer
            .add("t", DType::Float, &[1], &2f32.to_le_bytes())
            .unwrap();
        let _ = bundle::SaveLock::acquire(&prefix).and_then(|_lock| writer.finish());
        assert!(
            file_bytes_under(&outside) == elsewhere,
            "{context}: files outside the checkpoint's folder changed"
        );
    }
    assert!(
        refused > 0 && recovered > 0,
        "{refused} refused, {recovered} recovered"
    );
}
