//! How a session runs: [`SessionOptions`] (write options, backend, [`Mode`], [`Plans`]) and
//! the mode's names (`graph`, `eager`; [`UnknownMode`]).

use std::fmt;
use std::str::FromStr;

use crate::bundle::WriteOptions;
use crate::exec::Backend;

/// How a session runs its save and restore.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Graph mode, as a TensorFlow session runs a `SaverDef`: the plans are compiled once and
    /// run with the prefix fed.
    #[default]
    Graph,
    /// Eager TensorFlow's `MultiDeviceSaver`: each call runs its ops as they are traced (one
    /// task), or traces a function and runs it (several tasks; see
    /// [`Session::trace_log`](super::Session::trace_log)).
    /// Only a session made from a spec has the trackables this needs.
    Eager,
}

/// How a session runs its plans.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionOptions {
    /// How checkpoint files are written (fsync or not).
    pub write: WriteOptions,
    /// The executor: the reference interpreter (default) or the JIT.
    pub backend: Backend,
    /// Graph (default) or eager mode.
    pub mode: Mode,
    /// Which plans a graph-mode session compiles and binds (default: both). Eager mode
    /// traces each call and ignores it.
    pub plans: Plans,
    /// The task this process runs, when it is one process of a cluster (its rendezvous's
    /// `task()`, given to [`Session::with_cluster`](super::Session::with_cluster)): a plan
    /// split by task then compiles that task's partition alone, and a graph-mode session of
    /// a spec that only saves ([`Plans::SaveOnly`]) or only restores ([`Plans::RestoreOnly`])
    /// traces only that task's share of a plain plan ([`crate::trace::trace_flat_save_share`],
    /// [`crate::trace::trace_flat_share`]: its own variables and the first of each other
    /// task). The values given must cover those, and the others' are ignored, so every
    /// process can be given the same values; the restored tensors
    /// ([`Session::restored_tensors`](super::Session::restored_tensors)) are still every
    /// task's, for [`Session::gather`](super::Session::gather) to bring to task 0. `None` (the
    /// default): every task's, as a session that runs them all in this process needs.
    pub task: Option<usize>,
}

/// The plans a graph-mode [`Session`](super::Session) compiles and binds keys for. A program
/// that only saves (the CLI's `save` and `run --save`) or only restores skips the other plan's
/// compile and binding, about a third of [`Session::new`](super::Session::new)'s work at
/// 100,000 variables; the plan left out fails with
/// [`SessionError::PlanLeftOut`](super::SessionError::PlanLeftOut) when asked to run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Plans {
    /// The save and the restore plan.
    #[default]
    Both,
    /// The save plan only.
    SaveOnly,
    /// The restore plan only.
    RestoreOnly,
}

impl Plans {
    /// Whether the save plan is compiled.
    pub fn save(self) -> bool {
        self != Plans::RestoreOnly
    }

    /// Whether the restore plan is compiled.
    pub fn restore(self) -> bool {
        self != Plans::SaveOnly
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Graph => "graph",
            Mode::Eager => "eager",
        })
    }
}

impl FromStr for Mode {
    type Err = UnknownMode;

    /// Parses `graph` or `eager`.
    fn from_str(text: &str) -> Result<Mode, UnknownMode> {
        match text {
            "graph" => Ok(Mode::Graph),
            "eager" => Ok(Mode::Eager),
            _ => Err(UnknownMode {
                name: text.to_owned(),
            }),
        }
    }
}

/// A mode name other than `graph` or `eager`.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("unknown mode `{name}` (expected `graph` or `eager`)")]
pub struct UnknownMode {
    /// The name given.
    pub name: String,
}
