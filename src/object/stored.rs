//! What the object layer reads of a checkpoint, as plain data: its index, each stored value's
//! key, dtype and shape, sorted by key ([`StoredIndex`]). The driver builds it from the open
//! bundle it matches against; no value is read here.

use saveplan_ir::DType;

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
