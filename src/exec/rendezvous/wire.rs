//! The byte form of a value crossing processes: a tensor's name, dtype, shape and elements.
//!
//! Layout, little-endian: `u32` name length, the name's bytes, `i32` dtype number (TF's
//! `DataType`), `u32` rank, `rank` × `u64` dimensions, then the elements: for fixed-width
//! dtypes `u64` byte length and the row-major bytes; for `DT_STRING` and `DT_VARIANT` one
//! `u64` length and the bytes per element. Decoding checks every length against what is left,
//! so a malformed message is an error, never a panic or a huge allocation.

use saveplan_ir::DType;

use crate::exec::tensor::HostTensor;

/// Why a message could not be decoded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// The message ends before a field it announces.
    #[error("message ends early, in {0}")]
    Truncated(&'static str),
    /// Bytes are left after the value.
    #[error("{0} byte(s) left after the value")]
    Trailing(usize),
    /// The tensor's name is not UTF-8.
    #[error("tensor name is not UTF-8")]
    Name,
    /// The value does not fit its dtype and shape.
    #[error("bad value: {0}")]
    Value(String),
}

/// Appends `name` and `value` to `out`. Resource tensors have no byte form: callers refuse
/// them first (they would encode as an empty string list).
pub fn encode(name: &str, value: &HostTensor, out: &mut Vec<u8>) {
    encode_prefix(name, value, out);
    if let Some(bytes) = value.bytes() {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    } else {
        for element in value.strings().unwrap_or(&[]) {
            out.extend_from_slice(&(element.len() as u64).to_le_bytes());
            out.extend_from_slice(element);
        }
    }
}

/// Appends what [`encode`] writes of a fixed-width `value` but its bytes (their length
/// included): the head of a value whose bytes a transport sends from where they are, to be
/// joined again by [`Head::value`]. `None` (nothing appended) for strings and variants.
pub fn encode_head(name: &str, value: &HostTensor, out: &mut Vec<u8>) -> Option<()> {
    let bytes = value.bytes()?;
    encode_prefix(name, value, out);
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    Some(())
}

/// The name, dtype and shape.
fn encode_prefix(name: &str, value: &HostTensor, out: &mut Vec<u8>) {
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&value.dtype().number().to_le_bytes());
    out.extend_from_slice(&(value.shape().len() as u32).to_le_bytes());
    for dim in value.shape() {
        out.extend_from_slice(&dim.to_le_bytes());
    }
}

/// A fixed-width value's head ([`encode_head`]): everything but its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<u64>,
    /// How many bytes its elements take.
    pub len: usize,
}

impl Head {
    /// The head encoded in `bytes` by [`encode_head`].
    pub fn decode(bytes: &[u8]) -> Result<Head, WireError> {
        let mut reader = Reader { bytes };
        let (name, dtype, shape) = reader.prefix()?;
        if matches!(dtype, DType::String | DType::Variant) {
            return Err(WireError::Value(format!(
                "a {dtype} tensor has no fixed-width bytes"
            )));
        }
        let len = reader.u64("byte length")?;
        let len = usize::try_from(len).map_err(|_| WireError::Truncated("elements"))?;
        if !reader.bytes.is_empty() {
            return Err(WireError::Trailing(reader.bytes.len()));
        }
        Ok(Head {
            name,
            dtype,
            shape,
            len,
        })
    }

    /// The value of this head with its `bytes` (taken as they are, not copied).
    pub fn value(self, bytes: Vec<u8>) -> Result<(String, HostTensor), WireError> {
        if bytes.len() != self.len {
            return Err(WireError::Truncated("elements"));
        }
        let value = HostTensor::from_bytes(self.dtype, self.shape, bytes)
            .map_err(|error| WireError::Value(error.to_string()))?;
        Ok((self.name, value))
    }
}

/// The name and value encoded in `bytes` by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<(String, HostTensor), WireError> {
    let mut reader = Reader { bytes };
    let (name, dtype, shape) = reader.prefix()?;
    let value = match dtype {
        DType::String | DType::Variant => {
            let mut elements = Vec::new();
            while !reader.bytes.is_empty() {
                let len = reader.u64("element length")?;
                let len = usize::try_from(len).map_err(|_| WireError::Truncated("element"))?;
                elements.push(reader.take(len, "element")?.to_vec());
            }
            if dtype == DType::String {
                HostTensor::from_strings(shape, elements)
            } else {
                HostTensor::from_variants(shape, elements)
            }
        }
        _ => {
            let len = reader.u64("byte length")?;
            let len = usize::try_from(len).map_err(|_| WireError::Truncated("elements"))?;
            let data = reader.take(len, "elements")?.to_vec();
            if !reader.bytes.is_empty() {
                return Err(WireError::Trailing(reader.bytes.len()));
            }
            HostTensor::from_bytes(dtype, shape, data)
        }
    }
    .map_err(|error| WireError::Value(error.to_string()))?;
    Ok((name, value))
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// The name, dtype and shape every message starts with.
    fn prefix(&mut self) -> Result<(String, DType, Vec<u64>), WireError> {
        let name_len = self.u32("name length")? as usize;
        let name = std::str::from_utf8(self.take(name_len, "name")?)
            .map_err(|_| WireError::Name)?
            .to_owned();
        let dtype = DType::from_number(self.i32("dtype")?);
        let rank = self.u32("rank")? as usize;
        // Each dimension takes 8 bytes: a rank larger than what is left is a short message.
        if rank > self.bytes.len() / 8 {
            return Err(WireError::Truncated("shape"));
        }
        let shape = (0..rank)
            .map(|_| self.u64("shape"))
            .collect::<Result<Vec<u64>, _>>()?;
        Ok((name, dtype, shape))
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.bytes.len() {
            return Err(WireError::Truncated(what));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let bytes = self.take(4, what)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        let bytes = self.take(4, what)?;
        Ok(i32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let bytes = self.take(8, what)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: HostTensor) {
        let mut bytes = Vec::new();
        encode("edge_7_a", &value, &mut bytes);
        let (name, back) = decode(&bytes).unwrap();
        assert_eq!(name, "edge_7_a");
        assert_eq!(back, value);
        // Every strict prefix is refused, never a panic.
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
    }

    #[test]
    fn values_round_trip_and_prefixes_fail() {
        round_trip(HostTensor::from_f32s(vec![2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap());
        round_trip(HostTensor::string_vector(["a", "", "ccc"]));
        round_trip(HostTensor::string_scalar(""));
        round_trip(HostTensor::int64_scalar(-5));
        round_trip(HostTensor::from_f32s(vec![0, 4], &[]).unwrap());
        round_trip(HostTensor::from_variants(vec![1], vec![b"\x0a\x01x".to_vec()]).unwrap());
    }

    #[test]
    fn hostile_messages_are_errors() {
        // A rank of four billion on a short message, a huge element length, a wrong byte count.
        let mut bytes = Vec::new();
        encode("t", &HostTensor::int32_scalar(1), &mut bytes);
        let mut huge_rank = bytes.clone();
        huge_rank[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge_rank), Err(WireError::Truncated("shape")));
        let mut short = Vec::new();
        encode(
            "t",
            &HostTensor::from_i32s(vec![2], &[1, 2]).unwrap(),
            &mut short,
        );
        let at = short.len() - 16;
        short[at..at + 8].copy_from_slice(&4u64.to_le_bytes());
        assert!(matches!(decode(&short), Err(WireError::Trailing(4))));
        let mut strings = Vec::new();
        encode("t", &HostTensor::string_scalar("x"), &mut strings);
        let at = strings.len() - 9;
        strings[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&strings).is_err());
    }

    #[test]
    fn heads_join_their_bytes_and_refuse_what_does_not_fit() {
        let value = HostTensor::from_f32s(vec![2, 2], &[1., 2., 3., 4.]).unwrap();
        let mut head = Vec::new();
        assert_eq!(encode_head("edge_1_w", &value, &mut head), Some(()));
        // The head is the whole message's beginning: everything but the bytes.
        let mut whole = Vec::new();
        encode("edge_1_w", &value, &mut whole);
        assert_eq!(whole[..head.len()], head[..]);
        let bytes = value.bytes().unwrap().to_vec();
        let decoded = Head::decode(&head).unwrap();
        assert_eq!(decoded.len, 16);
        assert_eq!(
            decoded.clone().value(bytes.clone()).unwrap(),
            ("edge_1_w".to_owned(), value)
        );
        // Bytes of another length, or a byte count the shape does not take, are errors.
        assert!(decoded.clone().value(bytes[..12].to_vec()).is_err());
        let mut wrong = decoded;
        wrong.len = 12;
        assert!(wrong.value(bytes[..12].to_vec()).is_err());
        // Strings have no head; a head's strict prefixes and a head with bytes left fail.
        assert_eq!(
            encode_head("s", &HostTensor::string_scalar("x"), &mut Vec::new()),
            None
        );
        for cut in 0..head.len() {
            assert!(
                Head::decode(&head[..cut]).is_err(),
                "prefix of {cut} bytes decoded"
            );
        }
        head.push(0);
        assert_eq!(Head::decode(&head), Err(WireError::Trailing(1)));
        let mut strings = Vec::new();
        encode("s", &HostTensor::string_scalar("x"), &mut strings);
        assert!(Head::decode(&strings[..strings.len() - 9]).is_err());
    }
}
