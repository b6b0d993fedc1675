//! Where restored values go (`restore --out`, `run --restore --out`): a `.safetensors` file or a
//! checkpoint prefix (string tensors kept), its folders made and its name checked before
//! anything is read, written with the mode a new file gets; and checkpoint files named in place
//! of their prefix (`ckpt.index`, `ckpt.data-00000-of-00001`).

use std::path::Path;

use saveplan::bundle::BundleReader;

use crate::support::{fixture, manifest_path, saveplan};

fn restore_o7(out: &Path) -> std::process::Output {
    saveplan(&[
        "restore",
        manifest_path("tests/inputs/objects/restore/o7_attributes.json")
            .to_str()
            .unwrap(),
        "--prefix",
        fixture("obj/o7_non_variable_attributes/ckpt")
            .to_str()
            .unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
}

/// The process's umask, as Linux reports it (022 elsewhere).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("Umask:"))?;
            u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
        })
        .unwrap_or(0o022)
}

#[test]
fn out_as_a_prefix_keeps_strings_and_out_folders_are_made() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("new/folder/values");
    let output = restore_o7(&prefix);
    assert!(output.status.success(), "{output:?}");
    let reader = BundleReader::open(&prefix).unwrap();
    let original = BundleReader::open(fixture("obj/o7_non_variable_attributes/ckpt")).unwrap();
    // Every restored value, strings and variants included, as the checkpoint holds it.
    for entry in reader.entries() {
        assert_eq!(
            reader.read(&entry.key).unwrap(),
            original.read(&entry.key).unwrap(),
            "{}",
            entry.key
        );
    }
    assert_eq!(reader.entries().len(), 7);

    let file = dir.path().join("other/new/values.safetensors");
    let output = restore_o7(&file);
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("give --out a checkpoint prefix to keep it"),
        "{stderr}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask(), "{mode:o}");
    }
}

#[test]
fn a_folder_as_out_is_refused_before_anything_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let output = saveplan(&[
        "restore",
        manifest_path("tests/inputs/run/c4_two_cpus_one_task.json")
            .to_str()
            .unwrap(),
        "--prefix",
        dir.path().join("no/such/ckpt").to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("is a folder, not a file or prefix to write"),
        "{stderr}"
    );
}

#[test]
fn a_checkpoint_file_stands_for_its_prefix() {
    let prefix = fixture("ckpt/c4_two_cpus_one_task/ckpt");
    let listing = |path: &Path| {
        let output = saveplan(&["inspect", path.to_str().unwrap()]);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let expected = listing(&prefix);
    for file in ["ckpt.index", "ckpt.data-00000-of-00001"] {
        assert_eq!(listing(&prefix.with_file_name(file)), expected, "{file}");
    }
}

/// A session given the open checkpoint (`OpenedBundleIo`) restores from that reader and does
/// not open the bundle again: the restore works after the files are gone.
#[test]
fn a_restore_reads_from_the_reader_it_is_given() {
    use std::sync::Arc;

    use saveplan::exec::{BundleIo, OpenedBundleIo};
    use saveplan::session::{Session, SessionOptions};
    use saveplan::trace::spec::SpecFile;

    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    for file in ["ckpt.index", "ckpt.data-00000-of-00001"] {
        std::fs::copy(
            fixture("ckpt/c4_two_cpus_one_task").join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    let text = std::fs::read_to_string(manifest_path("tests/inputs/run/c4_two_cpus_one_task.json"))
        .unwrap();
    let spec = SpecFile::parse(&text).unwrap();
    let reader = Arc::new(BundleReader::open(&prefix).unwrap());
    let expected = reader.read("a").unwrap();
    let prefix = prefix.to_str().unwrap();
    let session = Session::from_spec(&spec, SessionOptions::default())
        .unwrap()
        .with_io(Box::new(OpenedBundleIo::new(
            BundleIo::default(),
            prefix,
            reader,
        )));
    for file in ["ckpt.index", "ckpt.data-00000-of-00001"] {
        std::fs::remove_file(dir.path().join(file)).unwrap();
    }
    session.restore(prefix).unwrap();
    let values = session.values().unwrap();
    let saveplan::bundle::Values::Bytes(bytes) = expected.values else {
        panic!("a float tensor");
    };
    assert_eq!(values["a"].bytes().unwrap(), bytes.as_slice());
    // Another prefix is not served by the reader.
    assert!(session.restore(&format!("{prefix}-other")).is_err());
}

/// `save OBJSPEC` takes a values checkpoint holding variant tensors (read as variants, not
/// strings), and `restore OBJSPEC --expect consumed` of a `write()` checkpoint says why
/// `save_counter` is unbound and what to use instead.
#[test]
fn objspec_round_trip_with_variants_and_the_save_counter_hint() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let spec = manifest_path("tests/inputs/objects/restore/o7_attributes.json");
    let original = fixture("obj/o7_non_variable_attributes/ckpt");
    let output = saveplan(&[
        "save",
        spec.to_str().unwrap(),
        "--values",
        original.to_str().unwrap(),
        "--prefix",
        prefix.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let ours = BundleReader::open(&prefix).unwrap();
    let theirs = BundleReader::open(&original).unwrap();
    for entry in theirs
        .entries()
        .iter()
        .filter(|e| e.key != "_CHECKPOINTABLE_OBJECT_GRAPH")
    {
        assert_eq!(
            ours.read(&entry.key).unwrap(),
            theirs.read(&entry.key).unwrap(),
            "{}",
            entry.key
        );
    }
    let restore = |extra: &[&str]| {
        let mut args = vec![
            "restore",
            spec.to_str().unwrap(),
            "--prefix",
            prefix.to_str().unwrap(),
            "--out",
        ];
        let out = dir.path().join("values");
        args.push(out.to_str().unwrap());
        args.extend(extra);
        saveplan(&args)
    };
    let output = restore(&["--expect", "consumed"]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr.contains("--read restores as Checkpoint.read"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let output = restore(&["--expect", "consumed", "--read"]);
    assert!(output.status.success(), "{output:?}");
}

/// A URL given where a path goes is an object, never a local path (`s3://b/ckpt` made a folder
/// `s3:` before): with the store unreachable each command fails in one line within seconds and
/// leaves nothing in the working folder; `compile`'s output folder is local only.
#[test]
fn urls_go_to_the_store_and_never_become_local_paths() {
    let dir = tempfile::tempdir().unwrap();
    let spec = manifest_path("examples/model.json");
    let values = manifest_path("examples/model.safetensors");
    let (spec, values) = (spec.to_str().unwrap(), values.to_str().unwrap());
    let runs: [&[&str]; 6] = [
        &[
            "save",
            spec,
            "--values",
            values,
            "--prefix",
            "s3://bucket/run/ckpt",
        ],
        &[
            "restore",
            spec,
            "--prefix",
            "s3://b/ckpt",
            "--out",
            "x.safetensors",
        ],
        &[
            "restore",
            spec,
            "--prefix",
            "local/ckpt",
            "--out",
            "s3://b/x.safetensors",
        ],
        &["inspect", "az://b/ckpt"],
        &["convert", values, "s3://b/ckpt"],
        &["compile", spec, "-o", "s3://b/plan"],
    ];
    for args in runs {
        let started = std::time::Instant::now();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_saveplan"))
            .args(args)
            .current_dir(dir.path())
            // Nothing listens on port 1: the store is unreachable at once.
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env_remove("AZURE_STORAGE_ACCOUNT_NAME")
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(!output.status.success(), "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(started.elapsed().as_secs() < 20, "{args:?}: {stderr}");
        if args[0] == "compile" {
            assert!(stderr.contains("a URL, not a local path"), "{stderr}");
        } else if !cfg!(feature = "object-store") {
            assert!(
                stderr.contains("object stores are not built in"),
                "{stderr}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `inspect --tensor` takes a key, an object path along any of an object's paths (o1's
/// `encoder/kernel` is stored under its shorter path `shared`) or a full name; a name meaning
/// several values is one line counting and naming them.
#[test]
fn inspect_tensor_takes_object_paths_and_full_names() {
    let prefix = fixture("obj/o1_module_tree/write/ckpt");
    let prefix = prefix.to_str().unwrap();
    let first_line = |name: &str| {
        let output = saveplan(&["inspect", prefix, "--tensor", name]);
        let text =
            String::from_utf8(output.stdout).unwrap() + &String::from_utf8(output.stderr).unwrap();
        (
            output.status.success(),
            text.lines().next().unwrap_or_default().to_owned(),
        )
    };
    let shared = first_line("shared/.ATTRIBUTES/VARIABLE_VALUE");
    assert!(shared.0, "{shared:?}");
    assert_eq!(first_line("shared"), shared);
    assert_eq!(first_line("encoder/kernel"), shared);
    let (ok, line) = first_line("Variable");
    assert!(!ok);
    assert!(
        line.starts_with("error: `Variable` names 8 values: "),
        "{line}"
    );
    let (ok, line) = first_line("no/such/thing");
    assert!(!ok);
    assert!(line.contains("no value named `no/such/thing`"), "{line}");
}

/// A `.safetensors` output that cannot be written says why once, without the temporary
/// file's name (the safetensors crate's error repeated its IO error and that name).
#[test]
fn a_safetensors_write_failure_is_said_once() {
    let prefix = fixture("ckpt/c4_two_cpus_one_task/ckpt");
    // procfs refuses new files, even to root.
    let output = saveplan(&[
        "convert",
        prefix.to_str().unwrap(),
        "/proc/values.safetensors",
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: /proc/values.safetensors: cannot write: "),
        "{stderr}"
    );
    assert!(
        !stderr.contains(".tmp") && !stderr.contains("at path"),
        "{stderr}"
    );
}
