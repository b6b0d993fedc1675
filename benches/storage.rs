//! Benchmark of checkpoints on an S3 server (moto's, started here on 127.0.0.1) against the
//! bare `object_store` puts and gets of the same objects and against boto3's `upload_file` /
//! `download_file` of the same files, in one run, on the same bytes.
//!
//! ```text
//! cargo bench --bench storage -- [big] [many-small] [--big-tensors N] [--repeat N]
//! ```
//!
//! Workloads: BENCH.md's `big` (16 × float32[4096, 4096]; `--big-tensors` takes fewer) and
//! `many-small` (100,000 × float32[64]). For each: the bundle written locally (`BundleWriter`,
//! the baseline), written at an `s3://` prefix (the data streamed into its upload as it is
//! written, then the index),
//! the local files put with bare `object_store` (16 MiB parts, 4 in flight) and with boto3;
//! then every tensor read back (`BundleReader::read_into`) from the local prefix (the baseline)
//! and from the `s3://` prefix, against bare `object_store` gets and boto3 downloads of the
//! whole files. Each measurement is made `--repeat` times (3 by default), interleaved so that
//! every column sees the same load; the medians are printed, and the median of each round's
//! ratios (a save against the local write plus the bare puts, a
//! restore against the local restore plus the bare gets, and against the bare gets alone), and
//! `/proc/loadavg`. moto and boto3 come from the venv `$SAVEPLAN_STORAGE_VENV` (default
//! `.venv-storage`; `tests/storage/run.sh` makes it).

#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark binary: prints its table"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use object_store::{ObjectStoreExt, WriteMultipart};
use saveplan::bundle::{BundleReader, BundleWriter, DType};

const HELPER: &str = r#"
import sys, time, boto3, logging
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
port = server._server.server_port
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
s3.create_bucket(Bucket="bench")
print(port, flush=True)
for line in sys.stdin:
    op, *paths = line.split()
    t0 = time.perf_counter()
    for path in paths:
        key = "boto3/" + path.rsplit("/", 1)[1]
        if op == "up":
            s3.upload_file(path, "bench", key)
        else:
            s3.download_file("bench", key, path + ".boto3")
    print(time.perf_counter() - t0, flush=True)
"#;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut workloads: Vec<String> = args
        .iter()
        .filter(|arg| matches!(arg.as_str(), "big" | "many-small"))
        .cloned()
        .collect();
    if workloads.is_empty() {
        workloads = vec!["big".into(), "many-small".into()];
    }
    let big_tensors: usize = args
        .iter()
        .position(|arg| arg == "--big-tensors")
        .and_then(|at| args.get(at + 1)?.parse().ok())
        .unwrap_or(16);
    let repeat: usize = args
        .iter()
        .position(|arg| arg == "--repeat")
        .and_then(|at| args.get(at + 1)?.parse().ok())
        .unwrap_or(3)
        .max(1);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var("SAVEPLAN_STORAGE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".venv-storage"));
    let mut helper = Command::new(venv.join("bin/python"))
        .args(["-c", HELPER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python with moto[server] and boto3 (tests/storage/run.sh makes the venv)");
    let mut to_helper = helper.stdin.take().unwrap();
    let mut from_helper = BufReader::new(helper.stdout.take().unwrap());
    let mut line = String::new();
    from_helper.read_line(&mut line).unwrap();
    let port: u16 = line.trim().parse().expect("the server's port");
    // SAFETY (of the environment): set before any thread of ours reads it.
    unsafe {
        std::env::set_var("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
        std::env::set_var("AWS_ALLOW_HTTP", "true");
        std::env::set_var("AWS_ACCESS_KEY_ID", "test");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
        std::env::set_var("AWS_REGION", "us-east-1");
    }
    let mut boto3 = |op: &str, files: &[PathBuf]| -> f64 {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        writeln!(to_helper, "{op} {}", names.join(" ")).unwrap();
        let mut line = String::new();
        from_helper.read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bare = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name("bench")
        .with_allow_http(true)
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "workload   bytes       local-write  s3-save  bare-put  boto3-up  s3-save/(local+bare)  local-restore  s3-restore  bare-get  boto3-down  restore/(local+bare)  restore/bare  restore/boto3"
    );
    for workload in &workloads {
        let tensors: Vec<(String, Vec<i64>)> = match workload.as_str() {
            "big" => (0..big_tensors)
                .map(|i| (format!("big/{i:02}"), vec![4096, 4096]))
                .collect(),
            _ => (0..100_000)
                .map(|i| (format!("small/{i:06}"), vec![64]))
                .collect(),
        };
        let bytes_of = |shape: &[i64]| shape.iter().product::<i64>() as usize * 4;
        let values: Vec<Vec<u8>> = tensors
            .iter()
            .enumerate()
            .map(|(i, (_, shape))| {
                (0..bytes_of(shape))
                    .map(|b| (b as u64 * 2_654_435_761 + i as u64) as u8)
                    .collect()
            })
            .collect();
        let total: usize = values.iter().map(Vec::len).sum();
        let write = |prefix: &Path| {
            let started = Instant::now();
            let mut writer = BundleWriter::create(prefix).unwrap();
            for ((key, shape), bytes) in tensors.iter().zip(&values) {
                writer.add(key, DType::Float, shape, bytes).unwrap();
            }
            writer.finish().unwrap();
            started.elapsed().as_secs_f64()
        };
        // Each measurement `repeat` times, interleaved (every column sees the same load); each
        // round writes prefixes of its own (a save at a new prefix). Printed: the median of
        // each column, and the median of each round's ratios.
        let mut rounds: Vec<[f64; 8]> = Vec::new();
        for round in 0..repeat {
            let dir = tempfile::tempdir().unwrap();
            let local = dir.path().join("ckpt");
            let local_write = write(&local);
            let url = PathBuf::from(format!("s3://bench/{workload}/ckpt-{round}"));
            let s3_save = write(&url);
            let files = [
                PathBuf::from(format!("{}.data-00000-of-00001", local.display())),
                PathBuf::from(format!("{}.index", local.display())),
            ];
            let bare_put = runtime.block_on(async {
                let started = Instant::now();
                for file in &files {
                    let key = object_store::path::Path::from(format!(
                        "bare/{workload}/{round}/{}",
                        file.file_name().unwrap().to_string_lossy()
                    ));
                    let data = std::fs::read(file).unwrap();
                    if data.len() <= 16 << 20 {
                        bare.put(&key, data.into()).await.unwrap();
                    } else {
                        let upload = bare.put_multipart(&key).await.unwrap();
                        let mut writer = WriteMultipart::new_with_chunk_size(upload, 16 << 20);
                        for chunk in data.chunks(16 << 20) {
                            writer.wait_for_capacity(4).await.unwrap();
                            writer.write(chunk);
                        }
                        writer.finish().await.unwrap();
                    }
                }
                started.elapsed().as_secs_f64()
            });
            let boto3_up = boto3("up", &files);
            let restore = |url: &Path| {
                let started = Instant::now();
                let reader = BundleReader::open(url).unwrap();
                let mut out = Vec::new();
                for entry in reader.entries() {
                    out.resize(entry.size as usize, 0);
                    reader.read_into(&entry.key, &mut out).unwrap();
                }
                started.elapsed().as_secs_f64()
            };
            let local_restore = restore(&local);
            let s3_restore = restore(&url);
            let bare_get = runtime.block_on(async {
                let started = Instant::now();
                for file in &files {
                    let key = object_store::path::Path::from(format!(
                        "bare/{workload}/{round}/{}",
                        file.file_name().unwrap().to_string_lossy()
                    ));
                    let got = bare.get(&key).await.unwrap().bytes().await.unwrap();
                    assert_eq!(got.len() as u64, std::fs::metadata(file).unwrap().len());
                }
                started.elapsed().as_secs_f64()
            });
            let boto3_down = boto3("down", &files);
            let times = [
                local_write,
                s3_save,
                bare_put,
                boto3_up,
                local_restore,
                s3_restore,
                bare_get,
                boto3_down,
            ];
            rounds.push(times);
        }
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let column = |at: usize| median(rounds.iter().map(|round| round[at]).collect());
        let ratio = |of: fn(&[f64; 8]) -> f64| median(rounds.iter().map(of).collect());
        let best: [f64; 8] = std::array::from_fn(column);
        let [
            local_write,
            s3_save,
            bare_put,
            boto3_up,
            local_restore,
            s3_restore,
            bare_get,
            boto3_down,
        ] = best;
        println!(
            "{workload:<10} {total:<11} {local_write:>9.2} s {s3_save:>6.2} s {bare_put:>7.2} s {boto3_up:>7.2} s {:>12.2} {local_restore:>17.3} s {s3_restore:>8.3} s {bare_get:>7.3} s {boto3_down:>8.2} s {:>16.2} {:>15.2} {:>13.2}",
            ratio(|t| t[1] / (t[0] + t[2])),
            ratio(|t| t[5] / (t[4] + t[6])),
            ratio(|t| t[5] / t[6]),
            ratio(|t| t[5] / t[7]),
        );
    }
    drop(to_helper);
    let _ = helper.wait();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average: {}", load.trim());
}
