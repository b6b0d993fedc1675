//! The OrderedCode slice keys stored in a bundle's index (FORMATS.md §5). The slice types and
//! region arithmetic are the IR's ([`saveplan_ir::slice`]), re-exported here.

pub use saveplan_ir::slice::{
    Extent, ShapeAndSlice, SliceError, TensorSlice, for_each_overlap_run, overlap_volume,
};

fn slice_err(reason: &'static str) -> SliceError {
    SliceError::BadKey { reason }
}

/// Encodes the index key of the slice `slice` of tensor `name` (OrderedCode, FORMATS.md §5).
pub fn encode_slice_key(name: &str, slice: &TensorSlice) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 8 + 4 * slice.rank());
    write_num_increasing(&mut key, 0);
    for &byte in name.as_bytes() {
        match byte {
            0x00 => key.extend_from_slice(&[0x00, 0xff]),
            0xff => key.extend_from_slice(&[0xff, 0x00]),
            other => key.push(other),
        }
    }
    key.extend_from_slice(&[0x00, 0x01]);
    write_num_increasing(&mut key, slice.rank() as u64);
    for extent in slice.extents() {
        write_signed_num_increasing(&mut key, extent.start);
        write_signed_num_increasing(&mut key, extent.length.unwrap_or(-1));
    }
    key
}

/// Decodes a slice key into the tensor name and the slice.
pub fn decode_slice_key(key: &[u8]) -> Result<(String, TensorSlice), SliceError> {
    let mut rest = key;
    if read_num_increasing(&mut rest)? != 0 {
        return Err(slice_err("slice key does not start with 0"));
    }
    let mut name = Vec::new();
    loop {
        match rest {
            [0x00, 0x01, tail @ ..] => {
                rest = tail;
                break;
            }
            [0x00, 0xff, tail @ ..] => {
                name.push(0x00);
                rest = tail;
            }
            [0xff, 0x00, tail @ ..] => {
                name.push(0xff);
                rest = tail;
            }
            [0x00 | 0xff, ..] | [] => return Err(slice_err("bad string escape in slice key")),
            [byte, tail @ ..] => {
                name.push(*byte);
                rest = tail;
            }
        }
    }
    let name =
        String::from_utf8(name).map_err(|_| slice_err("tensor name in slice key is not UTF-8"))?;
    let rank = read_num_increasing(&mut rest)?;
    if rank > rest.len() as u64 {
        return Err(slice_err("slice key rank exceeds its length"));
    }
    let mut extents = Vec::with_capacity(rank as usize);
    for _ in 0..rank {
        let start = read_signed_num_increasing(&mut rest)?;
        let length = read_signed_num_increasing(&mut rest)?;
        let extent = match length {
            -1 if start == 0 => Extent::FULL,
            length if length >= 0 && start >= 0 => Extent::new(start, length),
            _ => return Err(slice_err("negative extent in slice key")),
        };
        extents.push(extent);
    }
    if !rest.is_empty() {
        return Err(slice_err("trailing bytes after slice key"));
    }
    Ok((name, TensorSlice::new(extents)))
}

fn write_num_increasing(out: &mut Vec<u8>, value: u64) {
    let n_bytes = (8 - value.leading_zeros() as usize / 8) as u8;
    out.push(n_bytes);
    out.extend_from_slice(&value.to_be_bytes()[8 - n_bytes as usize..]);
}

fn read_num_increasing(rest: &mut &[u8]) -> Result<u64, SliceError> {
    let (&n_bytes, tail) = rest
        .split_first()
        .ok_or_else(|| slice_err("slice key truncated"))?;
    let n_bytes = n_bytes as usize;
    if n_bytes > 8 || tail.len() < n_bytes {
        return Err(slice_err("bad number in slice key"));
    }
    let value = tail[..n_bytes]
        .iter()
        .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte));
    *rest = &tail[n_bytes..];
    Ok(value)
}

/// Header bits XOR-ed into an `len`-byte signed number: `len` one-bits from the top.
fn signed_header(len: usize) -> u128 {
    let total_bits = 8 * len as u32;
    ((1u128 << len) - 1) << (total_bits - len as u32)
}

fn write_signed_num_increasing(out: &mut Vec<u8>, value: i64) {
    let magnitude = if value < 0 { !value } else { value } as u64;
    // Smallest len with magnitude < 2^(7 len - 1).
    let len = (1..=10usize)
        .find(|&len| 7 * len > 64 || magnitude < (1u64 << (7 * len - 1)))
        .unwrap_or(10);
    let total_bits = 8 * len as u32;
    let mask = if total_bits == 128 {
        u128::MAX
    } else {
        (1u128 << total_bits) - 1
    };
    let encoded = ((value as i128 as u128) & mask) ^ signed_header(len);
    out.extend_from_slice(&encoded.to_be_bytes()[16 - len..]);
}

fn read_signed_num_increasing(rest: &mut &[u8]) -> Result<i64, SliceError> {
    let truncated = || slice_err("signed number in slice key truncated");
    let first = *rest.first().ok_or_else(truncated)?;
    let invert: u8 = if first & 0x80 == 0 { 0xff } else { 0x00 };
    let mut len = (first ^ invert).leading_ones() as usize;
    if len == 8 {
        let second = *rest.get(1).ok_or_else(truncated)?;
        len += (second ^ invert).leading_ones() as usize;
    }
    if !(1..=10).contains(&len) || rest.len() < len {
        return Err(slice_err("bad signed number in slice key"));
    }
    let raw = rest[..len]
        .iter()
        .fold(0u128, |acc, &byte| (acc << 8) | u128::from(byte))
        ^ signed_header(len);
    let shift = 128 - 8 * len as u32;
    let value = ((raw << shift) as i128) >> shift;
    *rest = &rest[len..];
    i64::try_from(value).map_err(|_| slice_err("signed number in slice key out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn keys_from_formats_md() {
        let part = TensorSlice::new(vec![Extent::new(0, 2), Extent::new(0, 3)]);
        assert_eq!(
            hex(&encode_slice_key("part", &part)),
            "00 70 61 72 74 00 01 01 02 80 82 80 83"
        );
        let m = TensorSlice::parse("0,2:-").unwrap();
        assert_eq!(
            hex(&encode_slice_key("m", &m)),
            "00 6d 00 01 01 02 80 82 80 7f"
        );
        let big = TensorSlice::parse("70000,1:0,3").unwrap();
        assert_eq!(
            hex(&encode_slice_key("big", &big)),
            "00 62 69 67 00 01 01 02 e1 11 70 81 80 83"
        );
        let odd = encode_slice_key("a\0b\u{7f}c", &TensorSlice::full(0));
        assert_eq!(
            decode_slice_key(&odd).unwrap(),
            ("a\0b\u{7f}c".to_string(), TensorSlice::full(0))
        );
        for key in [&part, &m, &big] {
            assert_eq!(
                &decode_slice_key(&encode_slice_key("x", key)).unwrap().1,
                key
            );
        }
    }

    #[test]
    fn signed_numbers_round_trip() {
        let values = [
            0,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            8191,
            8192,
            70000,
            -70000,
            i64::MAX,
            i64::MIN,
            1 << 55,
            -(1 << 62),
        ];
        for value in values {
            let mut buf = Vec::new();
            write_signed_num_increasing(&mut buf, value);
            let mut rest = &buf[..];
            assert_eq!(
                read_signed_num_increasing(&mut rest).unwrap(),
                value,
                "{value}"
            );
            assert!(rest.is_empty());
        }
        let mut buf = Vec::new();
        write_signed_num_increasing(&mut buf, -1);
        assert_eq!(buf, [0x7f]);
    }

    #[test]
    fn specs() {
        let spec = ShapeAndSlice::parse("4 3 0,2:0,3").unwrap();
        assert_eq!(spec.full_shape, [4, 3]);
        assert_eq!(spec.to_string(), "4 3 0,2:0,3");
        assert!(
            ShapeAndSlice::parse("3 2 0,3:0,2")
                .unwrap()
                .slice
                .is_full_for(&[3, 2])
        );
        assert!(ShapeAndSlice::parse("5 -").unwrap().slice.is_full_for(&[5]));
        assert!(
            !ShapeAndSlice::parse("4 2 2,2:-")
                .unwrap()
                .slice
                .is_full_for(&[4, 2])
        );
        for bad in [
            "",
            "4",
            "4 3 0,5:0,3",
            "4 x 0,2:0,3",
            "4 3 0,2",
            "4 3 a,b:-",
            "4 3 -1,2:-",
        ] {
            assert!(ShapeAndSlice::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overlap_runs() {
        // Source: rows 0..2 of a 4x3 tensor; destination: rows 1..4, columns 1..3.
        let mut runs = Vec::new();
        for_each_overlap_run(&[(0, 2), (0, 3)], &[(1, 3), (1, 2)], |src, dst, run| {
            runs.push((src, dst, run))
        });
        assert_eq!(runs, [(4, 0, 2)]);
    }

    proptest::proptest! {
        #[test]
        fn slice_keys_round_trip(
            name in "[a-z/._\\x00\\x7f]{0,12}",
            extents in proptest::collection::vec((0i64..1 << 40, proptest::option::of(0i64..1 << 40)), 0..5),
        ) {
            let slice = TensorSlice::new(extents.iter().map(|&(start, length)| match length {
                None => Extent::FULL,
                Some(length) => Extent::new(start, length),
            }).collect());
            let key = encode_slice_key(&name, &slice);
            proptest::prop_assert_eq!(decode_slice_key(&key).unwrap(), (name, slice));
        }

        #[test]
        fn decoding_random_keys_never_panics(key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            let _ = decode_slice_key(&key);
        }
    }
}
