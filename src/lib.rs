//! saveplan: a compiler for TensorFlow checkpoint save/restore plans.

pub mod analysis;
pub mod bundle;
pub mod compile;
pub mod exec;
pub mod export;
pub mod session;
pub mod trace;
