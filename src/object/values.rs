//! What the object layer reads of values: of a checkpoint's, its index as plain data (each
//! stored value's key, dtype and shape, sorted by key: [`StoredIndex`], which the driver builds
//! from the bundle it opened), and of ours, dtype, shape and bytes ([`OurValue`], which the
//! driver implements for its tensors). No value is read here.

use saveplan_ir::DType;

/// What the object layer reads of one of our values: dtype, shape and, for a value held as
/// little-endian bytes of a fixed-width dtype, those bytes (for Python's `repr` in messages).
pub trait OurValue {
    /// The dtype.
    fn dtype(&self) -> DType;
    /// The shape.
    fn dims(&self) -> &[u64];
    /// The elements' row-major little-endian bytes, when held so.
    fn bytes(&self) -> Option<&[u8]>;
}

/// One value a checkpoint stores: its key, dtype and shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredEntry<'a> {
    /// The checkpoint key.
    pub key: &'a str,
    /// The dtype.
    pub dtype: DType,
    /// The shape.
    pub shape: &'a [i64],
}

/// A checkpoint's index: its entries, sorted by key, each key once.
#[derive(Clone, Debug, Default)]
pub struct StoredIndex<'a> {
    entries: Vec<StoredEntry<'a>>,
}

impl<'a> StoredIndex<'a> {
    /// The index of `entries` (sorted here when they are not; a key given twice keeps its
    /// first entry).
    pub fn new(entries: impl IntoIterator<Item = StoredEntry<'a>>) -> StoredIndex<'a> {
        let mut entries: Vec<StoredEntry<'a>> = entries.into_iter().collect();
        if !entries.is_sorted_by(|a, b| a.key < b.key) {
            entries.sort_by(|a, b| a.key.cmp(b.key));
            entries.dedup_by(|later, first| later.key == first.key);
        }
        StoredIndex { entries }
    }

    /// The value stored under `key`, if any.
    pub fn entry(&self, key: &str) -> Option<StoredEntry<'a>> {
        let at = self.entries.binary_search_by(|entry| entry.key.cmp(key));
        at.ok().map(|at| self.entries[at])
    }

    /// The values whose keys are `start` or sort after it, in key order.
    pub fn entries_from(&self, start: &str) -> &[StoredEntry<'a>] {
        let at = self.entries.partition_point(|entry| entry.key < start);
        &self.entries[at..]
    }
}
