//! saveplan: a compiler for TensorFlow checkpoint save/restore plans.
//!
//! A framework knows *what* to save: variables, each with a checkpoint key, dtype, shape,
//! device and slice. TensorFlow turns that into a *plan*, a graph of `SaveV2`,
//! `ShardedFilename`, `MergeV2Checkpoints`, `RestoreV2`, … ops placed on devices, by tracing
//! Python. saveplan builds the same plan in Rust, as data, and then exports it, checks it or
//! runs it. The IR lives in the crate [`saveplan_ir`] (graphs of TensorFlow ops, their
//! canonical text, the verifier and the vocabulary every layer shares: tensor names, slice
//! specs, saver names); the TensorFlow protobufs in [`saveplan_proto`].
//!
//! # The layers, bottom up
//!
//! Each layer imports only the layers below it.
//!
//! * [`trace`] turns saveables ([`trace::Trackable`]s, or a [`trace::spec::SpecFile`]) into a
//!   plan with TensorFlow's `MultiDeviceSaver` semantics: the flat graph `saver.save` builds
//!   ([`trace::trace_flat`]) or `to_proto()`'s functions ([`trace::trace_functions`]). It emits
//!   every op through a [`trace::Builder`], so the same tracing code builds graphs or runs ops
//!   as it goes (eager mode). No IO.
//! * [`export`] maps modules to and from `GraphDef`, `FunctionDef`, `MetaGraphDef` and
//!   `SaverDef`, binary and text. With [`bundle`], which encodes its index entries
//!   (`BundleEntryProto`), it is the only layer besides `saveplan_proto` that touches protobuf
//!   types.
//! * [`bundle`] reads, writes and merges TensorFlow V2 checkpoints (`prefix.index` +
//!   `prefix.data-*`), byte for byte as TensorFlow does; the only code that writes checkpoint
//!   files.
//! * [`analysis`] checks plans without running them (keys written twice, slice gaps and
//!   overlaps, merge order, foreign devices) for `saveplan check`.
//! * [`object`] is the object layer of object-based checkpoints, as plain data: the object
//!   graph a framework's objects make ([`object::build_object_graph`]), matching a checkpoint
//!   by object or by name ([`object::match_stored`]), the load status with TensorFlow's exact
//!   assertion messages ([`object::LoadStatus`]), the restore report and restore-on-create's
//!   bookkeeping. It is handed a checkpoint's index and object graph; no IO.
//! * [`partition`] splits a verified plan by task as TensorFlow's distributed master does:
//!   ops placed on tasks, a send/receive pair on every edge between tasks, one module per task
//!   ([`partition::partition`]).
//! * [`compile`] is the driver behind `saveplan compile`: trace, add the `SaverDef` entry
//!   points, verify, assemble the `MetaGraph`.
//! * [`exec`] is the runtime: a plan verified at entry is compiled once
//!   ([`exec::CompiledPlan`]) and run many times on per-device queues, on the reference
//!   interpreter or the cranelift JIT ([`exec::Executor`], [`exec::Backend`]); both write the
//!   same bytes. Checkpoint ops go through [`exec::CheckpointIo`]. It knows nothing of the
//!   tracer.
//! * [`session`] drives the tracer and the runtime for a user: a [`session::Session`] binds
//!   checkpoint keys to the plan's variables, takes values in and gives them back by key, in
//!   graph mode or eager mode ([`session::Mode`], [`session::EagerSaver`]); every plan run
//!   against a prefix, a session's or an object-based write's, goes through its one runner
//!   ([`session::Runner`]).
//! * [`checkpoint`] is object-based checkpointing (`tf.train.Checkpoint`), the driver around
//!   [`object`] (whose types it re-exports): the object graph a
//!   framework's objects make ([`checkpoint::Checkpointable`], [`checkpoint::Object`]), the
//!   graph a checkpoint stores ([`checkpoint::read_object_graph`]) and the latest checkpoint
//!   of a directory ([`checkpoint::latest_checkpoint`]), writing and restoring by object
//!   ([`checkpoint::Checkpoint`], asynchronously too) and [`checkpoint::CheckpointManager`];
//!   a framework's own types implement [`checkpoint::Saveable`] to be written and restored by
//!   object, and [`checkpoint::read_value`] reads a value by key, object path or full name.
//!   Its graph model and key rules are IR-crate vocabulary ([`saveplan_ir::object_graph`]), its protobuf form is in
//!   [`export::object_graph`].
//!
//! The `saveplan` binary (`src/main.rs`, `src/cli/`) sits on top and is the only code that
//! prints. [`process`] holds the process-wide settings it applies (the library applies none
//! for its caller but one: MPI's rendezvous turns Nagle's algorithm off on Open MPI's
//! connections to its PMIx server before finalizing, [`process::tcp_without_delay_to`]).
//!
//! # Example
//!
//! Trace a one-variable spec, save a value and read it back:
//!
//! ```
//! use std::collections::BTreeMap;
//! use saveplan::exec::HostTensor;
//! use saveplan::session::{Session, SessionOptions};
//! use saveplan::trace::spec::SpecFile;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SpecFile::parse(
//!     r#"{"variables": [{"checkpoint_key": "w", "dtype": "float32", "shape": [2]}]}"#,
//! )?;
//! let session = Session::from_spec(&spec, SessionOptions::default())?;
//! let dir = tempfile::tempdir()?;
//! let prefix = dir.path().join("ckpt").to_string_lossy().into_owned();
//!
//! let w = HostTensor::from_f32s(vec![2], &[1.5, -2.0])?;
//! session.assign(BTreeMap::from([("w".to_owned(), w.clone())]))?;
//! session.save(&prefix)?; // ckpt.index + ckpt.data-00000-of-00001, as TensorFlow writes them
//!
//! session.restore(&prefix)?;
//! assert_eq!(session.values()?["w"], w);
//! # Ok(())
//! # }
//! ```
//!
//! [`prelude`] gathers what a framework embedding saveplan uses; [`exec::HostTensor`] reads
//! and writes elements as Rust types ([`exec::TensorElement`]).
//!
//! The same plan as TensorFlow files: [`compile::compile`] then
//! [`export::encode_meta_graph_def`]; the checkpoint alone: [`bundle::BundleReader`].

pub mod analysis;
pub mod bundle;
pub mod checkpoint;
pub mod compile;
pub mod exec;
pub mod export;
pub mod object;
pub mod partition;
pub mod process;
pub mod session;
pub mod storage;
pub mod trace;

/// What a framework embedding saveplan uses, in one `use saveplan::prelude::*;`: tensors and
/// their element types (`f16` and `bf16` are the `half` crate's), object-based checkpoints of its own types ([`checkpoint::Saveable`]),
/// reading values by name, and sessions of spec files.
pub mod prelude {
    pub use crate::checkpoint::{
        Checkpoint, CheckpointError, CheckpointManager, LoadStatus, ManagerOptions, RestoreNode,
        SaveNode, Saveable, Variable, read_all, read_value, restore_object, save_object,
    };
    pub use crate::exec::{HostTensor, TensorElement, TensorError};
    pub use crate::session::{Session, SessionError, SessionOptions};
    pub use crate::trace::spec::SpecFile;
    pub use half::{bf16, f16};
    pub use saveplan_ir::DType;
}

/// The examples of `README.md` and `docs/`: each page's `rust` blocks compile and run as
/// doctests, as printed; `tests/it/docs_examples.rs` runs their `console` blocks and checks
/// that every page is listed here.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/README.md")]
    struct DocsIndex;
    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../docs/canonical-text.md")]
    struct CanonicalText;
    #[doc = include_str!("../docs/cli.md")]
    struct Cli;
    #[doc = include_str!("../docs/cluster.md")]
    struct Cluster;
    #[doc = include_str!("../docs/eager.md")]
    struct Eager;
    #[doc = include_str!("../docs/fidelity.md")]
    struct Fidelity;
    #[doc = include_str!("../docs/library.md")]
    struct Library;
    #[doc = include_str!("../docs/objects.md")]
    struct Objects;
    #[doc = include_str!("../docs/partition.md")]
    struct Partition;
    #[doc = include_str!("../docs/object-stores.md")]
    struct ObjectStores;
    #[doc = include_str!("../docs/python.md")]
    struct Python;
    #[doc = include_str!("../docs/rust-api.md")]
    struct RustApi;
    #[doc = include_str!("../docs/spec-format.md")]
    struct SpecFormat;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
}
