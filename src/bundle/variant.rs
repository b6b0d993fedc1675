//! DT_VARIANT tensors in a data file (FORMATS.md 13.15), kept as opaque bytes: per element a
//! varint64 length, the element's bytes (a serialized `VariantTensorDataProto`) and its own
//! masked checksum. One running CRC32C covers the data: per element it is extended with the
//! length as an 8-byte little-endian integer and the bytes, the element checksum is the masked
//! running CRC, and then the 4 checksum bytes extend it too; the entry's `crc32c` is the masked
//! final CRC.

use super::crc;
use super::sstable::{get_varint, put_varint};
use super::string::{EncodedStrings, StringError};

/// Encodes variant elements (opaque bytes each) as TensorFlow's bundle writer does.
pub fn encode_variants<S: AsRef<[u8]>>(elements: &[S]) -> EncodedStrings {
    let total: usize = elements.iter().map(|e| e.as_ref().len()).sum();
    let mut bytes = Vec::with_capacity(total + 14 * elements.len());
    let mut running = 0u32;
    for element in elements {
        let element = element.as_ref();
        let len = element.len() as u64;
        put_varint(&mut bytes, len);
        bytes.extend_from_slice(element);
        running = crc::extend(crc::extend(running, &len.to_le_bytes()), element);
        let checksum = crc::mask(running).to_le_bytes();
        bytes.extend_from_slice(&checksum);
        running = crc::extend(running, &checksum);
    }
    EncodedStrings {
        bytes,
        crc32c: crc::mask(running),
    }
}

/// Decodes `n_elements` variant elements from `bytes`, checking each element's checksum, that
/// the bytes are used exactly, and the entry checksum `entry_crc32c` (masked).
pub fn decode_variants(
    bytes: &[u8],
    n_elements: u64,
    entry_crc32c: u32,
) -> Result<Vec<Vec<u8>>, StringError> {
    let mut rest = bytes;
    // Every element takes at least 5 bytes, so this bounds the allocation by the input.
    let mut elements = Vec::with_capacity(n_elements.min(bytes.len() as u64 / 5) as usize);
    let mut running = 0u32;
    for _ in 0..n_elements {
        let len = get_varint(&mut rest).ok_or(StringError::Layout("truncated variant length"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= rest.len())
            .ok_or(StringError::Layout("variant element longer than the data"))?;
        let (element, after) = rest.split_at(len);
        running = crc::extend(crc::extend(running, &(len as u64).to_le_bytes()), element);
        let (stored, after) = after
            .split_first_chunk::<4>()
            .ok_or(StringError::Layout("missing variant element checksum"))?;
        if u32::from_le_bytes(*stored) != crc::mask(running) {
            return Err(StringError::Layout("variant element checksum mismatch"));
        }
        running = crc::extend(running, stored);
        elements.push(element.to_vec());
        rest = after;
    }
    if !rest.is_empty() {
        return Err(StringError::Layout(
            "variant elements do not use the stored size",
        ));
    }
    let entry_crc = crc::mask(running);
    if entry_crc != entry_crc32c {
        return Err(StringError::Checksum(entry_crc));
    }
    Ok(elements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let elements = vec![vec![], vec![b'a'; 200], vec![0xff; 7]];
        let encoded = encode_variants(&elements);
        assert_eq!(
            decode_variants(&encoded.bytes, 3, encoded.crc32c).unwrap(),
            elements
        );
        assert!(matches!(
            decode_variants(&encoded.bytes, 3, 0),
            Err(StringError::Checksum(_))
        ));
        assert!(decode_variants(&encoded.bytes[..10], 3, encoded.crc32c).is_err());
        assert!(decode_variants(&encoded.bytes, 2, encoded.crc32c).is_err());
        assert!(decode_variants(&encoded.bytes, 4, encoded.crc32c).is_err());
        let mut flipped = encoded.bytes.clone();
        flipped[3] ^= 1;
        assert!(decode_variants(&flipped, 3, encoded.crc32c).is_err());
    }
}
