//! The peers `benches/exec.rs` measures in the same run as ours, besides TensorFlow: the Rust
//! `safetensors` crate writing and reading the same tensors, `dd` writing the same number of
//! bytes to the same folder (the write limit), a plain read loop over our checkpoint's files
//! (the read limit), and the `saveplan` CLI end to end. Each returns the best of its [`Rounds`].

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use saveplan::exec::HostTensor;

/// How many times a measurement runs: at least `min` times, and on while its runs have taken
/// less than `min_time` in all, up to [`Rounds::MAX`] times. The best of five runs of 0.1 s
/// moves by ±15 % between runs on a shared machine; of fifteen, far less.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    /// The fewest runs.
    pub min: usize,
    /// The least time spent in runs before stopping.
    pub min_time: Duration,
}

impl Rounds {
    /// The most runs, however short.
    pub const MAX: usize = 50;

    /// Whether to run again after `done` runs that took `spent` in all.
    fn again(self, done: usize, spent: Duration) -> bool {
        done < self.min.max(1) || (spent < self.min_time && done < Rounds::MAX.max(self.min))
    }
}

/// The fastest of [`Rounds`] runs of `run`, each after `reset`.
pub fn best_of(rounds: Rounds, mut reset: impl FnMut(), mut run: impl FnMut()) -> Duration {
    let mut best = Duration::MAX;
    let (mut done, mut spent) = (0, Duration::ZERO);
    while rounds.again(done, spent) {
        reset();
        let start = Instant::now();
        run();
        let took = start.elapsed();
        best = best.min(took);
        done += 1;
        spent += took;
    }
    best
}

/// One measured run: its reset (untimed), then the run itself.
pub type ResetAndRun<'a> = (&'a mut dyn FnMut(), &'a mut dyn FnMut());

/// The time of every run of each `(reset, run)` of `runs`, run [`Rounds`] times in turn (each
/// once, then each again, …) so that a slow stretch of a shared machine falls on all of them;
/// each run after its reset, untimed. The time spent is that of all of them; round `i` of
/// each is at index `i` of its list.
pub fn each_in_turn(rounds: Rounds, runs: &mut [ResetAndRun<'_>]) -> Vec<Vec<Duration>> {
    let mut times = vec![Vec::new(); runs.len()];
    let (mut done, mut spent) = (0, Duration::ZERO);
    while rounds.again(done, spent) {
        for ((reset, run), times) in runs.iter_mut().zip(&mut times) {
            reset();
            let start = Instant::now();
            run();
            let took = start.elapsed();
            times.push(took);
            spent += took;
        }
        done += 1;
    }
    times
}

/// `safetensors::serialize_to_file` of `tensors` (float32) at `path`.
pub fn safetensors_write(tensors: &[(String, HostTensor)], path: &Path) {
    let views = tensors.iter().map(|(key, tensor)| {
        let shape = tensor.shape().iter().map(|&dim| dim as usize).collect();
        let bytes = tensor.bytes().expect("fixed-width values");
        let view = TensorView::new(Dtype::F32, shape, bytes).expect("the view fits");
        (key.as_str(), view)
    });
    safetensors::tensor::serialize_to_file(views, None, path).expect("safetensors write");
}

/// What a user of `safetensors` does to get owned values: map the file, parse its header and
/// copy every tensor out of the map (one copy, as our restore makes). Returns the tensors read.
pub fn safetensors_read(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).expect("open the safetensors file");
    // SAFETY: the benchmark's own file, which nothing modifies while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.expect("map the safetensors file");
    let parsed = SafeTensors::deserialize(&map).expect("safetensors parse");
    parsed
        .iter()
        .map(|(name, view)| (name.to_owned(), view.data().to_vec()))
        .collect()
}

/// `dd if=/dev/zero of=PATH bs=16M` of exactly `bytes` bytes, without `conv=fsync` (our saves
/// do not fsync by default either).
pub fn dd_write(path: &Path, bytes: u64) {
    let status = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", path.display()))
        .args(["bs=16M", "iflag=count_bytes", "status=none"])
        .arg(format!("count={bytes}"))
        .status()
        .expect("dd starts");
    assert!(status.success(), "dd failed");
}

/// Reads every file of the checkpoint at `prefix` (`prefix.index`, `prefix.data-*`) with a
/// reused 16 MiB buffer, as `dd of=/dev/null bs=16M` does; returns the bytes read.
pub fn read_files(prefix: &Path) -> u64 {
    let dir = prefix.parent().expect("a prefix has a folder");
    let stem = prefix
        .file_name()
        .expect("a prefix has a name")
        .to_string_lossy()
        .into_owned();
    let mut buffer = vec![0u8; 16 << 20];
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir).expect("read the folder") {
        let path = entry.expect("a folder entry").path();
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned());
        let Some(name) = name else { continue };
        if !(name == format!("{stem}.index") || name.starts_with(&format!("{stem}.data-"))) {
            continue;
        }
        let mut file = std::fs::File::open(&path).expect("open a checkpoint file");
        loop {
            let n = file.read(&mut buffer).expect("read a checkpoint file");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    total
}

/// Runs the `saveplan` binary with `args`; panics with its stderr if it fails.
pub fn cli(args: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_saveplan"))
        .args(args)
        .output()
        .expect("saveplan starts");
    assert!(
        output.status.success(),
        "saveplan {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
