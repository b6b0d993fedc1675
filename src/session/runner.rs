//! [`Runner`]: what runs a session's save and restore, the compiled plans (graph mode) or the
//! spec's eager saver (eager mode), and how one call runs: the prefix's save lock taken, the
//! run's view of the checkpoint backend, then the plan or the saver.

use std::sync::Mutex;

use super::eager::EagerSaver;
use super::error::SessionError;
use super::function_cache::Call;
use crate::exec::sync::lock;
use crate::exec::{
    Backend, CheckpointIo, Executor, HostTensor, RunContext, RunIo, StepEvent, VariableStore,
};
use crate::trace::TraceOptions;

/// What runs a session's save and restore.
pub(super) enum Runner {
    /// Graph mode: the compiled save and restore plans (those [`Plans`](super::Plans) asked
    /// for).
    Graph {
        save: Option<Executor>,
        restore: Option<Executor>,
        backend: Backend,
    },
    /// Eager mode: the spec's saver and the options it was traced with.
    Eager {
        saver: Mutex<EagerSaver>,
        options: Box<TraceOptions>,
        backend: Backend,
    },
}

impl Runner {
    /// Runs `call` with `prefix` on `variables`, through `io`: the compiled plan with the
    /// prefix fed, or the eager saver.
    pub(super) fn run(
        &self,
        call: Call,
        prefix: &str,
        variables: &VariableStore,
        io: &dyn CheckpointIo,
        observer: Option<&(dyn Fn(&StepEvent<'_>) + Sync)>,
    ) -> Result<(), SessionError> {
        /// What runs the call.
        enum Runs<'s> {
            Plan(&'s Executor),
            Eager(&'s Mutex<EagerSaver>, &'s TraceOptions),
        }
        // A plan the session left out is refused before anything touches the prefix (a
        // save's lock cleans up what killed saves left there).
        let left_out = || SessionError::PlanLeftOut { what: call.name() };
        let runs = match (self, call) {
            (Runner::Graph { save, .. }, Call::Save) => {
                Runs::Plan(save.as_ref().ok_or_else(left_out)?)
            }
            (Runner::Graph { restore, .. }, Call::Restore) => {
                Runs::Plan(restore.as_ref().ok_or_else(left_out)?)
            }
            (Runner::Eager { saver, options, .. }, _) => Runs::Eager(saver, options),
        };
        // Held until the save ends: BundleIo's lock on the prefix.
        let _guard = if call == Call::Save {
            let guard = io
                .begin_save(prefix)
                .map_err(|source| SessionError::BadPrefix {
                    prefix: prefix.to_owned(),
                    source: Box::new(source),
                })?;
            Some(guard)
        } else {
            None
        };
        // One run's view of the backend: its restore ops share the bundles they open.
        let io = RunIo::new(io);
        let mut cx = RunContext::new(variables).with_io(&io);
        if let Some(observer) = observer {
            cx = cx.with_observer(observer);
        }
        let plan = match runs {
            Runs::Plan(plan) => plan,
            Runs::Eager(saver, options) => {
                return Ok(lock(saver).call(&cx, call, prefix, options)?);
            }
        };
        plan.run(&cx, vec![HostTensor::string_scalar(prefix)])
            .map_err(|source| SessionError::Run {
                what: call.name(),
                prefix: prefix.to_owned(),
                source: Box::new(source),
            })?;
        Ok(())
    }
}
