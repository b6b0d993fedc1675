//! TensorFlow's unique node names (`Graph.unique_name` in `framework/ops.py`).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// Hands out unique node names the way a `tf.Graph` does: the first use of a name keeps it,
/// later uses get `_1`, `_2`, … suffixes, and names compare case-insensitively.
///
/// A counter table keyed by the lower-cased name (TensorFlow's `_names_in_use`) makes every
/// call O(1) amortized, so tracing many variables stays linear. The names live back to back
/// in fixed-size chunks that are never reallocated (a growing single string would copy every
/// name at each doubling), their records in a vector in first-use order, and the hash table
/// holds only record positions: a name costs no allocation of its own, and a new name writes
/// one 4-byte slot at a random place and appends the rest. The table is never iterated.
#[derive(Clone, Debug, Default)]
pub struct UniqueNames {
    /// Every lower-cased name in use, concatenated; a name never spans two chunks.
    chunks: Vec<String>,
    /// The names in use, in the order they were first used.
    names: Vec<InUse>,
    /// Positions in `names`, by name. Only 4 bytes a slot: a lookup of a name not in use (the
    /// common case) touches nothing but the table, and a new name is appended to `names`.
    in_use: HashTable<u32>,
    /// A reused buffer for the lower-cased name and candidates, so that looking a name up
    /// allocates nothing.
    scratch: String,
}

/// One name in use.
#[derive(Clone, Debug)]
struct InUse {
    /// The name's hash, which a lookup compares before the name itself.
    hash: u64,
    /// The chunk holding the name.
    chunk: u32,
    /// Where the name starts in its chunk.
    start: u32,
    /// The name's length in bytes.
    len: u32,
    /// TensorFlow's counter: the next suffix to try.
    count: u32,
}

/// The size of a name chunk; longer names get a chunk of their own.
const CHUNK: usize = 1 << 20;

impl InUse {
    fn name<'a>(&self, chunks: &'a [String]) -> &'a str {
        let start = self.start as usize;
        &chunks[self.chunk as usize][start..start + self.len as usize]
    }
}

impl UniqueNames {
    /// An empty name table.
    pub fn new() -> UniqueNames {
        UniqueNames::default()
    }

    /// An empty name table with room for `capacity` names.
    pub fn with_capacity(capacity: usize) -> UniqueNames {
        UniqueNames {
            chunks: Vec::new(),
            names: Vec::with_capacity(capacity),
            in_use: HashTable::with_capacity(capacity),
            scratch: String::new(),
        }
    }

    /// Returns `name` or the first free `name_<i>` and marks it as used.
    ///
    /// Name scopes are marked with the same call: entering scope `a/Read` is
    /// `unique("a/Read")`, and ops inside it are `unique("a/Read/ReadVariableOp")`.
    pub fn unique(&mut self, name: &str) -> String {
        self.unique_parts(&[name])
    }

    /// [`UniqueNames::unique`] of `scope/name`, without building that string first.
    pub fn unique_in(&mut self, scope: &str, name: &str) -> String {
        self.unique_parts(&[scope, "/", name])
    }

    /// `unique` of the concatenation of `parts`.
    fn unique_parts(&mut self, parts: &[&str]) -> String {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        for part in parts {
            lower_into(&mut key, part);
        }
        let mut i = match self.get_mut(&key) {
            Some(entry) => {
                entry.count += 1;
                entry.count - 1
            }
            None => {
                self.insert(&key, 1);
                self.scratch = key;
                return parts.concat();
            }
        };
        let key_len = key.len();
        loop {
            key.truncate(key_len);
            push_suffix(&mut key, i);
            if self.get_mut(&key).is_none() {
                break;
            }
            i += 1;
        }
        self.insert(&key, 1);
        self.scratch = key;
        let len: usize = parts.iter().map(|part| part.len()).sum();
        let mut unique = String::with_capacity(len + 11);
        for part in parts {
            unique.push_str(part);
        }
        push_suffix(&mut unique, i);
        unique
    }

    /// Marks `name` as used without renaming it (for names fixed by the caller).
    pub fn mark(&mut self, name: &str) {
        let key = name.to_lowercase();
        match self.get_mut(&key) {
            Some(entry) => entry.count += 1,
            None => self.insert(&key, 1),
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut InUse> {
        let hash = hash(key);
        let (chunks, names) = (&self.chunks, &self.names);
        let index = *self.in_use.find(hash, |&index| {
            let entry = &names[index as usize];
            entry.hash == hash && entry.name(chunks) == key
        })?;
        Some(&mut self.names[index as usize])
    }

    /// Adds `key`, which is not in the table.
    fn insert(&mut self, key: &str, count: u32) {
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.capacity() - chunk.len() >= key.len());
        if !fits {
            self.chunks
                .push(String::with_capacity(CHUNK.max(key.len())));
        }
        let chunk_index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[chunk_index];
        let start = chunk.len();
        chunk.push_str(key);
        let hash = hash(key);
        // Names are far shorter than 4 GiB and there are far fewer than 2^32 chunks or names.
        let index = self.names.len() as u32;
        self.names.push(InUse {
            hash,
            chunk: chunk_index as u32,
            start: start as u32,
            len: key.len() as u32,
            count,
        });
        let names = &self.names;
        self.in_use
            .insert_unique(hash, index, |&index| names[index as usize].hash);
    }
}

fn hash(key: &str) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Appends `name` lower-cased to `buf` (Python's `str.lower`, as TensorFlow compares names).
fn lower_into(buf: &mut String, name: &str) {
    if name.is_ascii() {
        let start = buf.len();
        buf.push_str(name);
        buf[start..].make_ascii_lowercase();
    } else {
        buf.push_str(&name.to_lowercase());
    }
}

/// Appends `_<i>`.
fn push_suffix(buf: &mut String, i: u32) {
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    let mut rest = i;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.push('_');
    buf.push_str(std::str::from_utf8(&digits[start..]).expect("digits are ASCII"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_follow_tensorflow() {
        let mut names = UniqueNames::new();
        assert_eq!(names.unique("Const"), "Const");
        assert_eq!(names.unique("Const"), "Const_1");
        assert_eq!(names.unique("const"), "const_2");
        assert_eq!(names.unique("Identity_1"), "Identity_1");
        assert_eq!(names.unique("Identity"), "Identity");
        // `identity_1` is taken, so the second `Identity` skips to `_2`.
        assert_eq!(names.unique("Identity"), "Identity_2");
        assert_eq!(names.unique("Identity"), "Identity_3");
    }

    #[test]
    fn scoped_names_are_the_joined_names() {
        let mut names = UniqueNames::new();
        assert_eq!(
            names.unique_in("Read", "ReadVariableOp"),
            "Read/ReadVariableOp"
        );
        assert_eq!(names.unique("read/readvariableop"), "read/readvariableop_1");
        assert_eq!(
            names.unique_in("Read", "ReadVariableOp"),
            "Read/ReadVariableOp_2"
        );
        names.mark("Ünïcode/X");
        assert_eq!(names.unique_in("üNÏcode", "x"), "üNÏcode/x_1");
    }
}
