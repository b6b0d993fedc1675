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
//!    header written, full length set) and sends the others its path and its [`Identity`];
//!    each answers whether it could not open that file, opened it, or opened that same inode
//!    on task 0's kernel, and task 0 sends every process the least of the answers. If one
//!    could not (another host, not sharing the folder), task 0 deletes it and every process
//!    falls back to the gather.
//! 3. Each process writes at their offsets the tensors of [`IN_PLACE`] bytes or more that it
//!    holds whole (the first task holding every variable of one writes it: the plan says
//!    which, the same in every process).
//! 4. The rest (smaller tensors, and tensors whose slices several tasks hold) are gathered to
//!    task 0 ([`Session::gather_where`], which ends at a barrier: every write is done by
//!    then); task 0 writes them and renames the file over `--out`.
//!
//! Where every process has the file in one page cache (one kernel: every process writes
//! through the same inode as task 0, [`Identity`]) nothing is synced, as a single process's
//! restore syncs nothing: each write is every process's to read as soon as it is made. Where
//! one does not (a folder shared between hosts), each process that does not syncs what it
//! wrote before the barrier, and task 0 syncs the file before renaming it (which covers the
//! writes made through its page cache), so that no reader on any host sees `--out` before its
//! bytes.
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
        // This task's tensors written in place (then synced where another kernel reads
        // them), before the gather's barrier.
        let mine = session.values_where(|index| layout.writer[index] == Some(task))?;
        (layout.write(file.file(), &mine))
            .and_then(|()| file.sync(File::sync_data))
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
    /// Whether writes are synced: some process does not share task 0's page cache.
    synced: bool,
}

impl OutFile {
    fn file(&self) -> &File {
        &self.file
    }

    /// Runs `sync` on the file where writes are synced ([`OutFile::synced`]); else nothing.
    fn sync(&self, sync: fn(&File) -> std::io::Result<()>) -> std::io::Result<()> {
        match self.synced {
            true => sync(&self.file),
            false => Ok(()),
        }
    }

    /// Task 0: syncs the file (where writes are synced) and renames it over `out`, with the
    /// mode a new file gets.
    fn commit(&mut self, out: &Path) -> anyhow::Result<()> {
        (self.sync(File::sync_all))
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
    // What a process says of task 0's file (`opened`), and what task 0 says back (`shared`):
    // not reached, reached, or reached in task 0's page cache.
    const NOT: i32 = 0;
    const REACHED: i32 = 1;
    const SAME_PAGES: i32 = 2;
    let number = |value: i32| HostTensor::from_i32s(vec![1], &[value]).expect("one element");
    let number_of = |value: HostTensor| match value.bytes() {
        Some(&[a, b, c, d]) => Some(i32::from_le_bytes([a, b, c, d]))
            .filter(|number| (NOT..=SAME_PAGES).contains(number))
            .unwrap_or(NOT),
        _ => NOT,
    };
    if task == 0 {
        let mut file = create_beside(out, layout)?;
        // The name's bytes as they are (a name need not be UTF-8), and which file it is.
        let path = file.path.as_os_str().as_bytes();
        let identity = Identity::of(&file.file).map(|identity| identity.0);
        let identity = identity.as_deref().unwrap_or_default().as_bytes();
        for dst in 1..n_tasks {
            let sent = HostTensor::string_vector([path, identity]);
            rendezvous.send(&key(0, dst, "file"), sent)?;
        }
        let mut shared = SAME_PAGES;
        for src in 1..n_tasks {
            shared = shared.min(number_of(rendezvous.recv(&key(src, 0, "opened"))?));
        }
        for dst in 1..n_tasks {
            rendezvous.send(&key(0, dst, "shared"), number(shared))?;
        }
        file.synced = shared == REACHED;
        return Ok((shared != NOT).then_some(file));
    }
    let sent = rendezvous.recv(&key(0, task, "file"))?;
    let (path, identity) = match sent.strings() {
        Some([path, identity]) => (PathBuf::from(OsStr::from_bytes(path)), identity),
        _ => anyhow::bail!("task 0 sent no file name for --out"),
    };
    // Task 0's file, if this process reaches it: its name is new, and its length is the one
    // task 0 set.
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .ok()
        .filter(|file| file.metadata().is_ok_and(|meta| meta.len() == layout.len));
    let said = match &opened {
        None => NOT,
        Some(file) => match Identity::of(file) {
            Some(Identity(mine)) if !identity.is_empty() && mine.as_bytes() == identity => {
                SAME_PAGES
            }
            _ => REACHED,
        },
    };
    rendezvous.send(&key(task, 0, "opened"), number(said))?;
    let shared = number_of(rendezvous.recv(&key(0, task, "shared"))?);
    Ok(opened.filter(|_| shared != NOT).map(|file| OutFile {
        file,
        path,
        owned: false,
        // What this process wrote through task 0's own pages, task 0's sync covers.
        synced: shared == REACHED && said == REACHED,
    }))
}

/// Which file an open file is, to the kernel that opened it: the kernel's boot id (new at
/// every boot of every machine) and host name, the file's device and inode. Two processes
/// holding files of one identity hold one inode of one kernel, whose pages they share: what
/// one writes the other reads, with no sync between. (Two virtual machines resumed from one
/// memory snapshot share a boot id: their host names tell them apart, unless those are the
/// same too.) `None` where the kernel does not say its boot id (not Linux): the file is then
/// taken as another kernel's.
#[derive(Debug, PartialEq, Eq)]
struct Identity(String);

impl Identity {
    fn of(file: &File) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let host = saveplan::storage::local::host_name();
        let meta = file.metadata().ok()?;
        let boot = boot.trim();
        (!boot.is_empty()).then(|| Identity(format!("{boot} {host} {} {}", meta.dev(), meta.ino())))
    }
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
        synced: true,
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

    /// A folder, an `--out` in it, and the smallest layout of an in-place write: one
    /// float32[4] `w`, written by task 1.
    fn one_vector_out() -> (tempfile::TempDir, PathBuf, Layout<'static>) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        let w = Described {
            dtype: Dtype::F32,
            shape: vec![4],
            len: 16,
        };
        let layout = Layout::new(&[("w", w)], vec![Some(1)]).expect("a layout");
        (dir, out, layout)
    }

    /// The key of `share_file`'s message `what` from `src` to `dst`.
    fn key(src: usize, dst: usize, what: &str) -> RendezvousKey {
        RendezvousKey::new(src, dst, format!("saveplan/out/{what}"))
    }

    /// An answer of `share_file`'s exchange, as sent.
    fn answer(value: i32) -> HostTensor {
        HostTensor::from_i32s(vec![1], &[value]).unwrap()
    }

    /// One file opened twice is one identity (one inode of this kernel); another file is
    /// another.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_opened_twice_is_one_identity() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let identity = |path: &Path| Identity::of(&File::open(path).unwrap()).expect("Linux");
        assert_eq!(identity(&a), identity(&a));
        assert_ne!(identity(&a), identity(&b));
    }

    /// Task 0 and another process on this kernel share the file's pages and sync nothing; a
    /// process that reaches the file on another kernel (played here by the test) makes both
    /// sync, whichever of them it is; so does a task 0 that cannot say which file it is.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_processes_on_another_kernel_sync() {
        let (dir, out, layout) = one_vector_out();
        let said = |value: HostTensor| value.bytes().unwrap().to_vec();
        // Both on this kernel.
        let cluster = LocalRendezvous::new(2);
        let (zero, one) = std::thread::scope(|scope| {
            let one = scope.spawn(|| share_file(&cluster.task(1).unwrap(), &out, &layout));
            let zero = share_file(&cluster.task(0).unwrap(), &out, &layout);
            (
                zero.unwrap().unwrap(),
                one.join().unwrap().unwrap().unwrap(),
            )
        });
        assert!(!zero.synced && !one.synced);
        drop((zero, one));
        // Task 1 on another kernel: task 0 syncs.
        let cluster = LocalRendezvous::new(2);
        let other = cluster.task(1).unwrap();
        let zero = std::thread::scope(|scope| {
            let zero = scope.spawn(|| share_file(&cluster.task(0).unwrap(), &out, &layout));
            let sent = other.recv(&key(0, 1, "file")).unwrap();
            assert_eq!(sent.strings().unwrap().len(), 2, "a path and an identity");
            other.send(&key(1, 0, "opened"), answer(1)).unwrap();
            assert_eq!(
                said(other.recv(&key(0, 1, "shared")).unwrap()),
                1i32.to_le_bytes()
            );
            zero.join().unwrap().unwrap().unwrap()
        });
        assert!(zero.synced);
        // Task 0 on another kernel (its file reached, its identity not this kernel's): task 1
        // says so and syncs.
        let path = dir.path().join(".out.safetensors.tmp");
        std::fs::write(&path, vec![0; layout.len as usize]).unwrap();
        for identity in ["another-kernel host 1 2", ""] {
            let cluster = LocalRendezvous::new(2);
            let zero = cluster.task(0).unwrap();
            let one = std::thread::scope(|scope| {
                let one = scope.spawn(|| share_file(&cluster.task(1).unwrap(), &out, &layout));
                let identity = identity.as_bytes();
                let sent = HostTensor::string_vector([path.as_os_str().as_bytes(), identity]);
                zero.send(&key(0, 1, "file"), sent).unwrap();
                let opened = said(zero.recv(&key(1, 0, "opened")).unwrap());
                assert_eq!(opened, 1i32.to_le_bytes());
                zero.send(&key(0, 1, "shared"), answer(1)).unwrap();
                one.join().unwrap().unwrap().unwrap()
            });
            assert!(one.synced, "task 0's identity {identity:?}");
        }
    }

    /// Three tasks, task 2 (played by the test) reaching task 0's file from another kernel:
    /// task 0 syncs before its rename, task 1, writing through task 0's pages, does not. An
    /// answer that is none of the three counts as "not reached" (the gather then), and a
    /// message from task 0 without the file's identity is refused.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_on_another_kernel_makes_task_0_sync_not_its_neighbours() {
        let (_dir, out, layout) = one_vector_out();
        for (told, reached) in [(1, true), (7, false), (-1, false)] {
            let cluster = LocalRendezvous::new(3);
            let two = cluster.task(2).unwrap();
            let (zero, one) = std::thread::scope(|scope| {
                let zero = scope.spawn(|| share_file(&cluster.task(0).unwrap(), &out, &layout));
                let one = scope.spawn(|| share_file(&cluster.task(1).unwrap(), &out, &layout));
                two.recv(&key(0, 2, "file")).unwrap();
                two.send(&key(2, 0, "opened"), answer(told)).unwrap();
                two.recv(&key(0, 2, "shared")).unwrap();
                let zero = zero.join().unwrap().unwrap();
                (zero, one.join().unwrap().unwrap())
            });
            match (zero, one) {
                (Some(zero), Some(one)) if reached => assert!(zero.synced && !one.synced),
                (None, None) if !reached => {}
                _ => panic!("answer {told}: not the file every task opened, or not none"),
            }
        }
        // Task 0's message as it was before the identity: a path alone.
        let cluster = LocalRendezvous::new(2);
        let zero = cluster.task(0).unwrap();
        let sent = HostTensor::string_vector([out.as_os_str().as_bytes()]);
        zero.send(&key(0, 1, "file"), sent).unwrap();
        let Err(error) = share_file(&cluster.task(1).unwrap(), &out, &layout) else {
            panic!("a message without the identity taken");
        };
        assert!(
            error
                .to_string()
                .contains("task 0 sent no file name for --out"),
            "{error}"
        );
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
