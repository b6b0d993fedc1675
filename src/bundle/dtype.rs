//! The bundle's view of [`DType`] (the IR's dtype, re-exported): which dtypes a tensor bundle
//! can store, and element counts of shapes (FORMATS.md §10).

pub use saveplan_ir::DType;

/// Whether a tensor bundle can store `dtype`: every fixed-width type plus `DT_STRING` and
/// `DT_VARIANT` (kept as opaque bytes per element). Reference types, `DT_INVALID`,
/// `DT_RESOURCE`, the sub-byte types and unknown numbers are not storable.
pub fn is_storable(dtype: DType) -> bool {
    is_element_list(dtype) || dtype.element_size().is_some()
}

/// Whether `dtype` is stored as a list of byte strings (`DT_STRING`, `DT_VARIANT`) rather than
/// fixed-width bytes.
pub fn is_element_list(dtype: DType) -> bool {
    matches!(dtype, DType::String | DType::Variant)
}

/// The storable dtype with `tensorflow.DataType` enum number `number`, if there is one.
pub fn storable_from_number(number: i32) -> Option<DType> {
    Some(DType::from_number(number)).filter(|&dtype| is_storable(dtype))
}

/// Every storable dtype, in enum-number order.
pub fn storable() -> impl Iterator<Item = DType> {
    DType::ALL
        .iter()
        .copied()
        .filter(|&dtype| is_storable(dtype))
}

/// Number of elements of `shape`, or `None` if a dimension is negative or the product overflows.
pub fn num_elements(shape: &[i64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |acc, &dim| acc.checked_mul(u64::try_from(dim).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storable_set() {
        let numbers: Vec<i32> = storable().map(DType::number).collect();
        let mut expected: Vec<i32> = (1..=19).chain(21..=28).collect();
        expected.sort_unstable();
        assert_eq!(numbers, expected);
        assert_eq!(storable_from_number(20), None);
        assert_eq!(storable_from_number(101), None);
        assert_eq!(storable_from_number(14), Some(DType::BFloat16));
        assert!(is_storable(DType::String));
        assert!(!is_storable(DType::Int4));
        assert!(!is_storable(DType::Unknown(999)));
        assert_eq!(num_elements(&[3, 0]), Some(0));
        assert_eq!(num_elements(&[]), Some(1));
        assert_eq!(num_elements(&[-1]), None);
    }
}
