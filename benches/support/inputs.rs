//! Inputs and timing shared by the CLI benches (`setup`, `objects`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A `.safetensors` file of `n` zero float32[64] variables named `key(index)` (the format is
/// a little-endian header length, a JSON header, then the data).
pub fn safetensors_values(n: usize, key: impl Fn(usize) -> String) -> Vec<u8> {
    const N_BYTES: usize = 64 * 4;
    let header: serde_json::Map<String, Value> = (0..n)
        .map(|index| {
            let offsets = [index * N_BYTES, (index + 1) * N_BYTES];
            let entry = json!({"dtype": "F32", "shape": [64], "data_offsets": offsets});
            (key(index), entry)
        })
        .collect();
    let mut header = Value::Object(header).to_string().into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&header);
    bytes.resize(bytes.len() + n * N_BYTES, 0);
    bytes
}

/// The fastest of `repeat` runs.
pub fn best_of(repeat: usize, mut run: impl FnMut()) -> Duration {
    (0..repeat.max(1))
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}
