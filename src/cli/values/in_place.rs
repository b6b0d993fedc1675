//! `restore --out FILE.safetensors` in a cluster: large tensors written in place by the
//! process that holds them.
//!
//! Gathering every value to task 0 ([`Session::gather`]) sends each byte through the
//! rendezvous and holds the whole model in task 0's memory. When `--out` is a local
//! `.safetensors` file that every process reaches (one host, or a folder the hosts share),
//! the processes write it together instead:
//!
//! 1. Every process makes the same header from the plan alone (each restored tensor's dtype
//!    and full shape), through the safetensors crate, so the file is the one a single process
//!    writes, byte for byte; each tensor's offset follows the crate's order (dtype alignment
//!    descending, then name).
//! 2. Task 0 creates the file under a temporary name beside `--out` (`.<name>.tmp<pid>-<n>`,
//!    header written, full length set) and sends the others its path; each says whether it
//!    could open that file, and task 0 tells every process whether all could. If one could
//!    not (another host, not sharing the folder), task 0 deletes it and every process falls
//!    back to the gather.
//! 3. Each process writes at their offsets the tensors of [`IN_PLACE`] bytes or more that it
//!    holds whole (the first task holding every variable of one writes it: the plan says
//!    which, the same in every process), and syncs them.
//! 4. The rest (smaller tensors, and tensors whose slices several tasks hold) are gathered to
//!    task 0 ([`Session::gather_where`], which ends at a barrier: every write is done by
//!    then); task 0 writes them, syncs the file and renames it over `--out`.
//!
//! A failure anywhere aborts the rendezvous with its line, so every process fails; the
//! temporary file is deleted and `--out` is left as it was.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use safetensors::tensor::{Dtype, View};
use saveplan::exec::rendezvous::{Rendezvous, RendezvousKey, settle};
use saveplan::exec::{HostTensor, VarKey};
use saveplan::session::Session;

use super::{is_safetensors_name, set_new_file_mode, to_safetensors};
use crate::cli::output::render_error;

/// Tensors of this many bytes or more are written in place by the process holding them;
/// smaller ones travel to task 0 in batches (the gather's own threshold for sending a value
/// alone).
pub const IN_PLACE: u64 = 64 << 10;

/// Writes are gathered into runs of up to this many bytes.
const RUN: usize = 4 << 20;

/// Writes the restored values of `session`'s cluster run to `out` in place (see the module
/// docs). `Ok(false)` when that does not apply, the same in every process: no cluster, `out`
/// not a local `.safetensors` file, a tensor of unknown shape or without a safetensors type,
/// no tensor large enough, or a process that cannot reach task 0's file; the caller then
/// gathers. `Ok(true)` once this process's part is written (task 0: the whole file, in place).
pub fn write_in_place(session: &Session, out: &Path) -> anyhow::Result<bool> {
    let Some(rendezvous) = session.cluster() else {
        return Ok(false);
    };
    if saveplan::storage::is_url(out) || !is_safetensors_name(out) {
        return Ok(false);
    }
    let Some(layout) = Layout::of(session)? else {
        return Ok(false);
    };
    let task = rendezvous.task();
    let result = (|| -> anyhow::Result<bool> {
        let Some(mut file) = share_file(rendezvous, out, &layout)? else {
            return Ok(false);
        };
        // This task's tensors written in place, then synced, before the gather's barrier.
        let mine = session.values_where(|index| layout.writer[index] == Some(task))?;
        (layout.write(file.file(), &mine))
            .and_then(|()| file.file().sync_data())
            .map_err(|err| cannot_write(out, &err))?;
        drop(mine);
        // The variables of the tensors written in place stay; one that a gathered tensor
        // uses too travels all the same.
        let variables = |in_place: bool| -> HashSet<_> {
            (session.restored_tensors().values().enumerate())
                .filter(|(index, _)| layout.writer[*index].is_some() == in_place)
                .flat_map(|(_, tensor)| tensor.parts.iter().map(|part| &part.variable))
                .collect()
        };
        let (stay, travel) = (variables(true), variables(false));
        let sent = |variable: &VarKey| !stay.contains(variable) || travel.contains(variable);
        if session.gather_where(sent)? {
            let rest = session.values_where(|index| layout.writer[index].is_none())?;
            (layout.write(file.file(), &rest)).map_err(|err| cannot_write(out, &err))?;
            file.commit(out)?;
        }
        Ok(true)
    })();
    // Task 0 writes the rest and renames the file last: its failure is every process's. (A
    // fallback, decided alike everywhere, meets at the barrier too.)
    settle(rendezvous, result, render_error)
}

/// Where each restored tensor goes in the file, and who writes it.
struct Layout<'k> {
    /// The file's first bytes: the header's length and the header.
    header: Vec<u8>,
    /// The file's length.
    len: u64,
    /// Each restored tensor's offset in the file, by key.
    offsets: BTreeMap<&'k str, u64>,
    /// The task writing each restored tensor in place; `None` for those task 0 gathers.
    writer: Vec<Option<usize>>,
}

/// A tensor's dtype and shape, for a header without its bytes.
struct Described {
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
}

impl View for &Described {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

impl Layout<'_> {
    /// The layout of the restored tensors of `session`, or `None` when one has no known
    /// shape or no safetensors type, or none is written in place.
    fn of(session: &Session) -> anyhow::Result<Option<Layout<'_>>> {
        let tensors = session.restored_tensors();
        // Each tensor's dtype and length first: a restore of many small ones stops here.
        let mut sized = Vec::with_capacity(tensors.len());
        for tensor in tensors.values() {
            let (Some(dtype), Some(shape)) = (to_safetensors(tensor.dtype), &tensor.shape) else {
                return Ok(None);
            };
            let len = shape.iter().product::<u64>() * dtype.bitsize() as u64 / 8;
            sized.push((dtype, len as usize));
        }
        if sized.iter().all(|&(_, len)| (len as u64) < IN_PLACE) {
            return Ok(None);
        }
        let Some(owners) = session.restored_owners() else {
            return Ok(None);
        };
        let writer: Vec<Option<usize>> = (owners.into_iter().zip(&sized))
            .map(|(owner, &(_, len))| owner.filter(|_| len as u64 >= IN_PLACE))
            .collect();
        if writer.iter().all(Option::is_none) {
            return Ok(None);
        }
        let described: Vec<(&str, Described)> = (tensors.values().zip(sized))
            .map(|(tensor, (dtype, len))| {
                let shape = (tensor.shape.iter().flatten()).map(|&dim| dim as usize);
                let shape = shape.collect();
                (tensor.key.as_str(), Described { dtype, shape, len })
            })
            .collect();
        Layout::new(&described, writer).map(Some)
    }

    /// The layout of the `described` tensors (sorted by key), with their `writer`s.
    fn new<'k>(
        described: &[(&'k str, Described)],
        writer: Vec<Option<usize>>,
    ) -> anyhow::Result<Layout<'k>> {
        let header = safetensors::tensor::serialize(
            described.iter().map(|(key, tensor)| (*key, tensor)),
            None,
        )
        .context("cannot make the safetensors header")?;
        // The crate's order: dtype alignment descending, then name.
        let mut order: Vec<&(&str, Described)> = described.iter().collect();
        order.sort_by(|(a, left), (b, right)| right.dtype.cmp(&left.dtype).then(a.cmp(b)));
        let mut offset = header.len() as u64;
        let mut offsets = BTreeMap::new();
        for (key, tensor) in order {
            offsets.insert(*key, offset);
            offset += tensor.len as u64;
        }
        Ok(Layout {
            header,
            len: offset,
            offsets,
            writer,
        })
    }

    /// Writes `values` at their offsets, adjacent ones in one write.
    fn write(&self, file: &File, values: &BTreeMap<String, HostTensor>) -> std::io::Result<()> {
        let mut pieces: Vec<(u64, &[u8])> = Vec::with_capacity(values.len());
        for (key, value) in values {
            // A tensor of the plan's safetensors dtype has its bytes: `Layout::of` checked.
            let bytes = value.bytes().unwrap_or_default();
            pieces.push((self.offsets[key.as_str()], bytes));
        }
        pieces.sort_unstable_by_key(|&(offset, _)| offset);
        let mut run: Vec<u8> = Vec::new();
        let mut run_at = 0;
        for (offset, bytes) in pieces {
            if run_at + run.len() as u64 != offset || run.len() + bytes.len() > RUN {
                file.write_all_at(&run, run_at)?;
                run.clear();
                run_at = offset;
            }
            if run.is_empty() && bytes.len() >= RUN {
                file.write_all_at(bytes, offset)?;
                run_at = offset + bytes.len() as u64;
                continue;
            }
            run.extend_from_slice(bytes);
        }
        file.write_all_at(&run, run_at)?;
        Ok(())
    }
}

/// The file being written: task 0's own (created here, deleted unless committed), or task
/// 0's as another process opened it.
struct OutFile {
    file: File,
    path: PathBuf,
    /// Task 0: whether the file is still to be renamed over `--out` (deleted when dropped).
    owned: bool,
}

impl OutFile {
    fn file(&self) -> &File {
        &self.file
    }

    /// Task 0: syncs the file and renames it over `out`, with the mode a new file gets.
    fn commit(&mut self, out: &Path) -> anyhow::Result<()> {
        (self.file.sync_all())
            .and_then(|()| std::fs::rename(&self.path, out))
            .map_err(|err| cannot_write(out, &err))?;
        self.owned = false;
        set_new_file_mode(out)
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Step 2 of the module docs: the file every process opened, or `None` (in every process)
/// when one could not.
fn share_file(
    rendezvous: &dyn Rendezvous,
    out: &Path,
    layout: &Layout,
) -> anyhow::Result<Option<OutFile>> {
    let (task, n_tasks) = (rendezvous.task(), rendezvous.n_tasks());
    let key = |src: usize, dst: usize, what: &str| {
        RendezvousKey::new(src, dst, format!("saveplan/out/{what}"))
    };
    let flag =
        |value: bool| HostTensor::from_i32s(vec![1], &[i32::from(value)]).expect("one element");
    let is_set = |value: HostTensor| value.bytes() == Some(&1i32.to_le_bytes()[..]);
    if task == 0 {
        let file = create_beside(out, layout)?;
        // The name's bytes as they are: a name need not be UTF-8.
        let path = file.path.as_os_str().as_bytes();
        for dst in 1..n_tasks {
            rendezvous.send(&key(0, dst, "file"), HostTensor::string_vector([path]))?;
        }
        let mut shared = true;
        for src in 1..n_tasks {
            shared &= is_set(rendezvous.recv(&key(src, 0, "opened"))?);
        }
        for dst in 1..n_tasks {
            rendezvous.send(&key(0, dst, "shared"), flag(shared))?;
        }
        return Ok(shared.then_some(file));
    }
    let path = rendezvous.recv(&key(0, task, "file"))?;
    let path = match path.strings() {
        Some([path]) => PathBuf::from(OsStr::from_bytes(path)),
        _ => anyhow::bail!("task 0 sent no file name for --out"),
    };
    // Task 0's file, if this process reaches it: its name is new, and its length is the one
    // task 0 set.
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .ok()
        .filter(|file| file.metadata().is_ok_and(|meta| meta.len() == layout.len));
    rendezvous.send(&key(task, 0, "opened"), flag(opened.is_some()))?;
    let shared = is_set(rendezvous.recv(&key(0, task, "shared"))?);
    Ok(opened.filter(|_| shared).map(|file| OutFile {
        file,
        path,
        owned: false,
    }))
}

/// Task 0: a new file beside `out` (`bundle::small_file::temp_beside`: the temporary files
/// that ranks killed while writing the same `out` left are deleted first), holding `layout`'s
/// header at `layout`'s length.
fn create_beside(out: &Path, layout: &Layout) -> anyhow::Result<OutFile> {
    let cannot = |err| cannot_write(out, &err);
    let path = saveplan::bundle::small_file::temp_beside(out).map_err(cannot)?;
    let file = (std::fs::OpenOptions::new().write(true).create_new(true))
        .open(&path)
        .map_err(cannot)?;
    let file = OutFile {
        file,
        path,
        owned: true,
    };
    (file.file.set_len(layout.len))
        .and_then(|()| file.file.write_all_at(&layout.header, 0))
        .map_err(cannot)?;
    Ok(file)
}

/// `OUT: cannot write: CAUSE`, the cause said by its kind, as a single process says it
/// ([`super::serialize_to_file`]): the temporary file's name is not the user's.
fn cannot_write(out: &Path, err: &std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: cannot write: {}",
        out.display(),
        std::io::Error::from(err.kind())
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use saveplan::exec::rendezvous::LocalRendezvous;
    use saveplan::session::SessionOptions;
    use saveplan::trace::spec::SpecFile;

    use super::*;

    /// The MPI suite's in-place spec (`tests/mpi/mixed3.json`: four dtypes, tensors of 64 KiB
    /// and more on each of 3 tasks, small ones, and two large ones sliced across tasks, one by
    /// rows, one by columns), saved by one process at `prefix`, every value's bytes differing
    /// from key to key.
    fn saved_three_task_spec(prefix: &Path) -> SpecFile {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mixed3.json");
        let spec = SpecFile::parse(&std::fs::read_to_string(path).unwrap()).expect("the spec");
        let one = Session::from_spec(&spec, SessionOptions::default()).expect("a session");
        // Each checkpoint tensor whole, as the plan has it (a sliced one at its full shape).
        let values = (one.restored_tensors().values().enumerate())
            .map(|(number, tensor)| {
                let shape = tensor.shape.clone().expect("a known shape");
                let element = tensor.dtype.element_size().expect("a fixed-size dtype");
                let len = shape.iter().product::<u64>() as usize * element;
                let bytes = (0..len).map(|i| (i * 7 + number) as u8).collect();
                let value = HostTensor::from_bytes(tensor.dtype, shape, bytes).expect("a tensor");
                (tensor.key.clone(), value)
            })
            .collect();
        one.assign(values).expect("the values");
        one.save(&prefix.to_string_lossy()).expect("the save");
        spec
    }

    /// Runs `each` as task 0, 1 and 2 of a cluster of threads meeting through a
    /// `LocalRendezvous`, each with its own session of `spec` restored from `prefix`.
    fn in_three_tasks<T: Send>(
        spec: &SpecFile,
        prefix: &Path,
        each: impl Fn(usize, &Session) -> T + Sync,
    ) -> Vec<T> {
        let rendezvous = LocalRendezvous::new(3);
        std::thread::scope(|scope| {
            let running: Vec<_> = (0..3)
                .map(|task| {
                    let view: Arc<dyn Rendezvous> = Arc::new(rendezvous.task(task).unwrap());
                    let each = &each;
                    scope.spawn(move || {
                        let options = SessionOptions {
                            task: Some(task),
                            ..SessionOptions::default()
                        };
                        let session = Session::from_spec(spec, options)
                            .expect("a session")
                            .with_cluster(view);
                        session
                            .restore(&prefix.to_string_lossy())
                            .expect("restored");
                        each(task, &session)
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|task| task.join().unwrap())
                .collect()
        })
    }

    /// Three tasks write `--out` together, each its own large tensors, task 0 the gathered
    /// rest: the file of one process, byte for byte and with its mode, and no temporary file
    /// left beside it.
    #[test]
    fn three_tasks_write_the_file_one_process_writes() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let spec = saved_three_task_spec(&prefix);
        let one_out = dir.path().join("one.safetensors");
        let one = Session::from_spec(&spec, SessionOptions::default()).unwrap();
        one.restore(&prefix.to_string_lossy()).unwrap();
        super::super::write_values(&one_out, &one.values().unwrap()).unwrap();
        let out = dir.path().join("many.safetensors");
        let layouts = in_three_tasks(&spec, &prefix, |_, session| {
            let writer = Layout::of(session).unwrap().expect("a layout").writer;
            (writer, write_in_place(session, &out).unwrap())
        });
        for (task, (writer, in_place)) in layouts.iter().enumerate() {
            assert!(in_place, "task {task} fell back to the gather");
            // In key order: big/h1, big/w0, big/w1, big/w2 by their tasks (1, 0, 1, 2); the
            // sliced and small ones gathered.
            let mut expected = vec![Some(1), Some(0), Some(1), Some(2)];
            expected.resize(expected.len() + 2 + 9, None);
            assert_eq!(writer, &expected, "task {task}");
        }
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&one_out).unwrap()
        );
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions();
        assert_eq!(mode(&out), mode(&one_out));
        let hidden: Vec<_> = (std::fs::read_dir(dir.path()).unwrap())
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
    }

    /// Task 0's last step failing (its rename: `--out` ends in a slash) fails every task with
    /// task 0's line, and leaves no file.
    #[test]
    fn task_0_failing_last_fails_every_task_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let spec = saved_three_task_spec(&prefix);
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let out = PathBuf::from(format!("{}/out/x.safetensors/", dir.path().display()));
        let results = in_three_tasks(&spec, &prefix, |_, session| {
            write_in_place(session, &out).map_err(|err| format!("{err:#}"))
        });
        for (task, result) in results.iter().enumerate() {
            let err = result.as_ref().expect_err("every task fails");
            assert!(
                err.contains("x.safetensors/: cannot write"),
                "task {task}: {err}"
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path().join("out")).unwrap().count(),
            0
        );
    }

    /// The header and offsets made without the bytes are the safetensors crate's own, for
    /// tensors of several dtypes (whose order the crate sorts by alignment first) and sizes.
    #[test]
    fn the_layout_is_the_one_the_crate_writes() {
        let specs: [(&str, Dtype, &[usize]); 6] = [
            ("a", Dtype::I8, &[3, 5]),
            ("b", Dtype::F64, &[7]),
            ("c/kernel", Dtype::F32, &[2, 3, 4]),
            ("d", Dtype::BF16, &[9]),
            ("e", Dtype::F32, &[]),
            ("f", Dtype::I64, &[0, 4]),
        ];
        let mut data = Vec::new();
        let mut described = Vec::new();
        for (number, (key, dtype, shape)) in specs.iter().enumerate() {
            let len = shape.iter().product::<usize>() * dtype.bitsize() / 8;
            data.push(
                (0..len)
                    .map(|i| (i * 7 + number) as u8)
                    .collect::<Vec<u8>>(),
            );
            let shape = shape.to_vec();
            described.push((
                *key,
                Described {
                    dtype: *dtype,
                    shape,
                    len,
                },
            ));
        }
        let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = (specs.iter().zip(&data))
            .map(|((key, dtype, shape), bytes)| {
                let view = safetensors::tensor::TensorView::new(*dtype, shape.to_vec(), bytes);
                (*key, view.expect("a view"))
            })
            .collect();
        let whole = safetensors::tensor::serialize(views, None).expect("serialize");
        let layout = Layout::new(&described, vec![None; specs.len()]).expect("a layout");
        assert_eq!(layout.len, whole.len() as u64);
        assert_eq!(&whole[..layout.header.len()], &layout.header[..]);
        for ((key, _, _), bytes) in specs.iter().zip(&data) {
            let at = layout.offsets[*key] as usize;
            assert_eq!(&whole[at..at + bytes.len()], &bytes[..], "{key}");
        }
    }
}
