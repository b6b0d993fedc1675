//! Storage: the same scenarios against the local disk, an in-process object store
//! (`memory://`) and, when `SAVEPLAN_TEST_S3` names a bucket URL (`s3://bucket/base`, as
//! `tests/storage/run.sh` sets against a moto server), a real S3 server, and when
//! `SAVEPLAN_TEST_AZ` names a container URL (`az://container/base`, as
//! `tests/storage/run-azure.sh` sets against azurite), an Azure blob server: bundles written and
//! read back, byte-identical to the local write (a bundle of several upload parts too, sent as
//! it is written and landing only at the commit); an overwrite leaving nothing behind; parts at
//! TensorFlow's temporary names merged; the checkpoint manager (`max_to_keep`, the state file,
//! a directory resolved to its latest checkpoint); on object stores, the save lease (a second
//! writer fails in one line), a killed overwrite read as the old checkpoint and rolled back,
//! and leftovers deleted by the next save without touching a neighbour.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use saveplan::bundle::{BundleReader, BundleWriter, DType, MergeOptions, SaveLock, merge_bundles};
use saveplan::checkpoint::{
    Checkpoint, CheckpointManager, ManagerOptions, Object, build_object_graph, resolve_prefix,
};
use saveplan::exec::HostTensor;
use saveplan::storage::{self, object, object::Put};

/// A fresh place to write: a local folder (kept alive by the guard), or a unique URL base.
struct Base {
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Base {
    fn at(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("{}/{name}", self.root.display()))
    }

    fn remote(&self) -> bool {
        storage::is_url(&self.root)
    }
}

fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Local, `memory://`, and `$SAVEPLAN_TEST_S3` and `$SAVEPLAN_TEST_AZ` when set.
fn bases() -> Vec<Base> {
    let dir = tempfile::tempdir().unwrap();
    let mut bases = vec![Base {
        root: dir.path().to_path_buf(),
        _dir: Some(dir),
    }];
    if cfg!(feature = "object-store") {
        bases.push(Base {
            root: PathBuf::from(format!("memory://it/{}", unique())),
            _dir: None,
        });
    }
    for var in ["SAVEPLAN_TEST_S3", "SAVEPLAN_TEST_AZ"] {
        if let Ok(url) = std::env::var(var) {
            bases.push(Base {
                root: PathBuf::from(format!("{}/{}", url.trim_end_matches('/'), unique())),
                _dir: None,
            });
        }
    }
    bases
}

fn write(prefix: &Path, values: [f32; 3]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut writer = BundleWriter::create(prefix).unwrap();
    writer.add("a", DType::Float, &[3], &bytes).unwrap();
    writer
        .add_strings("s", &[2], &[b"x".to_vec(), b"yz".to_vec()])
        .unwrap();
    writer.finish().unwrap();
}

fn read_a(prefix: &Path) -> Vec<f32> {
    let reader = BundleReader::open(prefix).unwrap();
    let tensor = reader.read("a").unwrap();
    let saveplan::bundle::Values::Bytes(bytes) = tensor.values else {
        panic!("not bytes")
    };
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Every file or object whose name starts with `prefix`'s text, by name after it.
fn names_after(prefix: &Path) -> Vec<String> {
    let text = prefix.to_string_lossy().into_owned();
    if storage::is_url(prefix) {
        return object::list(prefix)
            .unwrap()
            .into_iter()
            .map(|(path, _)| path.to_string_lossy()[text.len()..].to_string())
            .filter(|rest| !rest.starts_with('-'))
            .collect();
    }
    let dir = prefix.parent().unwrap();
    let name = prefix.file_name().unwrap().to_string_lossy().into_owned();
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|file| file.strip_prefix(&name).map(str::to_string))
        .filter(|rest| !rest.starts_with('-'))
        .collect();
    found.sort();
    found
}

#[test]
fn bundles_round_trip_byte_identical_to_the_local_write() {
    let local = tempfile::tempdir().unwrap();
    let reference = local.path().join("ref");
    write(&reference, [1.0, 2.0, 3.0]);
    for base in bases() {
        let prefix = base.at("run/ckpt");
        write(&prefix, [1.0, 2.0, 3.0]);
        assert_eq!(read_a(&prefix), [1.0, 2.0, 3.0], "{}", base.root.display());
        for suffix in [".index", ".data-00000-of-00001"] {
            let ours = storage::read(Path::new(&format!("{}{suffix}", prefix.display()))).unwrap();
            let theirs = std::fs::read(format!("{}{suffix}", reference.display())).unwrap();
            assert_eq!(ours, theirs, "{}{suffix}", prefix.display());
        }
        assert_eq!(names_after(&prefix), [".data-00000-of-00001", ".index"]);
        let reader = BundleReader::open(&prefix).unwrap();
        assert!(reader.verify().is_empty());
        assert_eq!(
            reader.read_strings("s").unwrap(),
            [b"x".to_vec(), b"yz".to_vec()]
        );
        assert_eq!(
            &*reader.map("a").unwrap(),
            &reader.read("a").unwrap().unwrap_bytes()[..]
        );
    }
}

trait UnwrapBytes {
    fn unwrap_bytes(self) -> Vec<u8>;
}

impl UnwrapBytes for saveplan::bundle::Tensor {
    fn unwrap_bytes(self) -> Vec<u8> {
        match self.values {
            saveplan::bundle::Values::Bytes(bytes) => bytes,
            saveplan::bundle::Values::Strings(_) => panic!("strings"),
        }
    }
}

#[test]
fn an_overwrite_replaces_the_checkpoint_and_leaves_nothing_behind() {
    for base in bases() {
        let prefix = base.at("ckpt");
        write(&prefix, [1.0, 2.0, 3.0]);
        {
            let _lock = SaveLock::acquire(&prefix).unwrap();
            write(&prefix, [4.0, 5.0, 6.0]);
        }
        assert_eq!(read_a(&prefix), [4.0, 5.0, 6.0]);
        assert_eq!(
            names_after(&prefix),
            [".data-00000-of-00001", ".index"],
            "{}",
            base.root.display()
        );
    }
}

#[test]
fn parts_at_tensorflows_temporary_names_are_merged_and_never_left() {
    for base in bases() {
        let prefix = base.at("m/ckpt");
        let temp = saveplan::bundle::temp_prefix(&prefix.to_string_lossy());
        let parts: Vec<PathBuf> = (0..2)
            .map(|shard| PathBuf::from(saveplan::bundle::sharded_filename(&temp, shard, 2)))
            .collect();
        for (shard, part) in parts.iter().enumerate() {
            let mut writer = BundleWriter::create(part).unwrap();
            let key = format!("t{shard}");
            writer
                .add(&key, DType::Float, &[1], &(shard as f32).to_le_bytes())
                .unwrap();
            writer.finish().unwrap();
        }
        merge_bundles(&parts, &prefix, MergeOptions::default()).unwrap();
        let reader = BundleReader::open(&prefix).unwrap();
        assert_eq!(reader.num_shards(), 2);
        assert_eq!(
            reader.read("t1").unwrap().unwrap_bytes(),
            1f32.to_le_bytes()
        );
        let names = names_after(&prefix);
        assert_eq!(
            names,
            [".data-00000-of-00002", ".data-00001-of-00002", ".index"],
            "{}",
            base.root.display()
        );
    }
}

fn v_checkpoint(x: f32) -> Checkpoint {
    let graph =
        build_object_graph(&Object::new().child("v", &Object::variable("Variable"))).unwrap();
    let value = HostTensor::from_f32s(vec![1], &[x]).unwrap();
    Checkpoint::new(
        graph,
        BTreeMap::from([("v/.ATTRIBUTES/VARIABLE_VALUE".to_owned(), value)]),
    )
    .unwrap()
}

#[test]
fn the_manager_keeps_max_to_keep_and_the_directory_resolves_to_the_latest() {
    for base in bases() {
        let dir = base.at("mgr");
        let options = ManagerOptions::new(Some(2));
        let mut manager = CheckpointManager::new(v_checkpoint(1.0), &dir, options).unwrap();
        let mut saved = Vec::new();
        for _ in 0..3 {
            saved.push(manager.save(None, false).unwrap().unwrap());
        }
        manager.sync().unwrap();
        assert_eq!(manager.checkpoints(), saved[1..]);
        assert_eq!(manager.latest_checkpoint().as_ref(), Some(&saved[2]));
        assert_eq!(resolve_prefix(&dir).unwrap(), saved[2], "{}", dir.display());
        let state = storage::read_to_string(&dir.join("checkpoint")).unwrap();
        assert!(
            state.contains("model_checkpoint_path: \"ckpt-3\""),
            "{state}"
        );
        assert!(
            names_after(&saved[0]).is_empty(),
            "{:?}",
            names_after(&saved[0])
        );
        assert!(BundleReader::open(&saved[2]).is_ok());
        // A second manager takes the directory over.
        let again =
            CheckpointManager::new(v_checkpoint(2.0), &dir, ManagerOptions::new(Some(2))).unwrap();
        assert_eq!(again.latest_checkpoint().as_ref(), Some(&saved[2]));
    }
}

#[test]
fn a_second_writer_on_an_object_store_fails_in_one_line() {
    for base in bases().into_iter().filter(Base::remote) {
        let prefix = base.at("locked/ckpt");
        let first = SaveLock::acquire(&prefix).unwrap();
        let err = SaveLock::acquire(&prefix).unwrap_err().to_string();
        assert!(err.contains("another save is writing"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        drop(first);
        let lock = prefix.with_extension("lock");
        assert!(!storage::exists(&lock).unwrap(), "{}", lock.display());
        drop(SaveLock::acquire(&prefix).unwrap());
    }
}

#[test]
fn a_killed_overwrite_reads_as_the_old_checkpoint_and_is_rolled_back() {
    for base in bases().into_iter().filter(Base::remote) {
        let prefix = base.at("killed/ckpt");
        write(&prefix, [1.0, 2.0, 3.0]);
        // What a save killed after its journal landed and its new data was put leaves.
        let text = prefix.to_string_lossy().into_owned();
        let mut journal = String::from("saveplan object journal 1\n");
        for suffix in [".data-00000-of-00001", ".index"] {
            let from = PathBuf::from(format!("{text}{suffix}"));
            let backup = PathBuf::from(format!("{text}{suffix}.old-9-9-9"));
            object::copy(&from, &backup).unwrap();
            journal.push_str(&format!("{}\t{}\n", from.display(), backup.display()));
        }
        let journal_path = PathBuf::from(format!("{text}.merging"));
        object::put(&journal_path, journal.into_bytes(), Put::Create).unwrap();
        let data = PathBuf::from(format!("{text}.data-00000-of-00001"));
        object::put(&data, vec![0; 7], Put::Overwrite).unwrap();
        assert_eq!(read_a(&prefix), [1.0, 2.0, 3.0]);
        // A stray part, a data object no index names, and a neighbour that must stay.
        let stray = PathBuf::from(format!("{text}.data-00000-of-00004"));
        object::put(&stray, vec![1], Put::Overwrite).unwrap();
        let neighbour = base.at("killed/ckpt-10");
        write(&neighbour, [7.0, 8.0, 9.0]);
        drop(SaveLock::acquire(&prefix).unwrap());
        assert_eq!(
            names_after(&prefix)[..2],
            [".data-00000-of-00001", ".index"]
        );
        assert!(!storage::exists(&journal_path).unwrap());
        assert!(!storage::exists(&stray).unwrap());
        assert_eq!(read_a(&prefix), [1.0, 2.0, 3.0]);
        assert_eq!(read_a(&neighbour), [7.0, 8.0, 9.0]);
    }
}

#[test]
fn a_new_prefix_commits_with_a_conditional_put() {
    for base in bases().into_iter().filter(Base::remote) {
        let index = base.at("c/ckpt.index");
        object::put(&index, b"first".to_vec(), Put::Create).unwrap();
        let err = object::put(&index, b"second".to_vec(), Put::Create).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(storage::read(&index).unwrap(), b"first");
    }
}

/// The first word said twice in a row in `line` (`read: read:`), ignoring punctuation.
fn repeated_word(line: &str) -> Option<String> {
    let words: Vec<String> = line
        .split_whitespace()
        .map(|word| {
            word.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|word| !word.is_empty())
        .collect();
    words
        .windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0].clone())
}

#[test]
fn a_store_failure_names_the_object_and_the_operation_once() {
    assert_eq!(repeated_word("x: read: read: denied"), Some("read".into()));
    assert_eq!(repeated_word("x: read: denied"), None);
    for base in bases().into_iter().filter(Base::remote) {
        // The store's own error is the reason only, as a file's `io::Error` is.
        let missing = base.at("gone/ckpt.index");
        let err = storage::read(&missing).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(err.to_string(), "no such object");
        let index = base.at("gone/taken.index");
        object::put(&index, b"first".to_vec(), Put::Create).unwrap();
        let err = object::put(&index, b"second".to_vec(), Put::Create).unwrap_err();
        assert!(!err.to_string().contains("write"), "{err}");
        // Carried by the bundle layer, the object and the reason are said once. (A reader
        // sends its data objects' GETs when it opens, so the object is gone before.)
        let prefix = base.at("gone/ckpt");
        write(&prefix, [1.0, 2.0, 3.0]);
        object::delete(&PathBuf::from(format!(
            "{}.data-00000-of-00001",
            prefix.display()
        )))
        .unwrap();
        let reader = BundleReader::open(&prefix).unwrap();
        let line = crate::support::error_chain(
            &reader.read("a").unwrap_err(),
            crate::support::ErrorForm::OneLine,
        );
        assert_eq!(repeated_word(&line), None, "{line}");
        assert_eq!(
            line.matches("ckpt.data-00000-of-00001").count(),
            1,
            "{line}"
        );
        assert!(
            line.ends_with("`a`: data shard missing: no such object"),
            "{line}"
        );
    }
}

#[test]
fn tensors_read_in_any_order_give_the_bytes_written() {
    // Small tensors and tensors of more than a block (2 MiB), read in file order (one open
    // GET continued), backwards, and skipping (new GETs and cached blocks).
    let sizes = [16usize, 3 << 20, 40, 4096, 5 << 20, 8];
    let values: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|b| (b * 31 + i * 7) as u8).collect())
        .collect();
    for base in bases() {
        let prefix = base.at("order/ckpt");
        let mut writer = BundleWriter::create(&prefix).unwrap();
        for (i, bytes) in values.iter().enumerate() {
            let shape = [bytes.len() as i64];
            writer
                .add(&format!("t{i}"), DType::UInt8, &shape, bytes)
                .unwrap();
        }
        writer.finish().unwrap();
        let orders: [&[usize]; 4] = [
            &[0, 1, 2, 3, 4, 5],
            &[5, 4, 3, 2, 1, 0],
            &[0, 2, 4, 1, 3, 5],
            &[3, 3, 0, 5, 1, 1],
        ];
        for order in orders {
            let reader = BundleReader::open(&prefix).unwrap();
            for &i in order {
                let mut out = vec![0; sizes[i]];
                reader.read_into(&format!("t{i}"), &mut out).unwrap();
                assert!(
                    out == values[i],
                    "{}: t{i} in {order:?}",
                    base.root.display()
                );
            }
        }
    }
}

/// A bundle of 45 MiB (three upload parts of 16 MiB) at `prefix`, its bytes a function of
/// `seed`; dropped unfinished unless `finish`.
fn write_large(prefix: &Path, seed: u8, finish: bool) {
    let mut writer = BundleWriter::create(prefix).unwrap();
    for i in 0..5u8 {
        let bytes: Vec<u8> = (0..9usize << 20)
            .map(|b| (b as u8).wrapping_mul(31).wrapping_add(i ^ seed))
            .collect();
        writer
            .add(
                &format!("t{i}"),
                DType::UInt8,
                &[bytes.len() as i64],
                &bytes,
            )
            .unwrap();
    }
    if finish {
        writer.finish().unwrap();
    }
}

#[test]
fn a_bundle_larger_than_a_part_uploads_as_written_and_lands_only_at_the_commit() {
    let local = tempfile::tempdir().unwrap();
    let reference = |seed: u8, suffix: &str| {
        let prefix = local.path().join(format!("ref-{seed}"));
        if !prefix.with_extension("index").exists() {
            write_large(&prefix, seed, true);
        }
        std::fs::read(format!("{}{suffix}", prefix.display())).unwrap()
    };
    for base in bases().into_iter().filter(Base::remote) {
        let prefix = base.at("large/ckpt");
        let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
        // A writer dropped after its parts were sent leaves nothing at a new prefix.
        write_large(&prefix, 1, false);
        assert_eq!(names_after(&prefix), Vec::<String>::new());
        write_large(&prefix, 1, true);
        {
            // An overwrite: the old checkpoint stays whole until the commit.
            let _lock = SaveLock::acquire(&prefix).unwrap();
            write_large(&prefix, 2, false);
            assert!(storage::read(&data).unwrap() == reference(1, ".data-00000-of-00001"));
            write_large(&prefix, 2, true);
        }
        for suffix in [".index", ".data-00000-of-00001"] {
            let ours = storage::read(Path::new(&format!("{}{suffix}", prefix.display()))).unwrap();
            assert!(ours == reference(2, suffix), "{}{suffix}", prefix.display());
        }
        assert_eq!(names_after(&prefix), [".data-00000-of-00001", ".index"]);
        assert!(BundleReader::open(&prefix).unwrap().verify().is_empty());
    }
}
