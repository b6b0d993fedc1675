//! [`Executor`]: one entry point over both backends, the reference interpreter
//! ([`super::scheduler`]) and the cranelift JIT (`crate::exec::jit`, cargo feature `jit`).

use std::sync::Arc;

use super::backend::Backend;
use super::error::ExecError;
use super::plan::CompiledPlan;
use super::step::RunContext;
use super::tensor::HostTensor;

/// A compiled plan prepared for one backend: compile once, run many times.
#[derive(Debug)]
pub struct Executor {
    plan: Arc<CompiledPlan>,
    backend: Prepared,
}

/// The per-backend form of the plan.
#[derive(Debug)]
enum Prepared {
    Interp,
    #[cfg(feature = "jit")]
    Jit(super::jit::JitPlan),
}

impl Executor {
    /// Prepares `plan` for `backend`; for the JIT this generates the native code.
    pub fn new(
        plan: impl Into<Arc<CompiledPlan>>,
        backend: Backend,
    ) -> Result<Executor, ExecError> {
        let plan = plan.into();
        let backend = match backend {
            Backend::Interp => Prepared::Interp,
            #[cfg(feature = "jit")]
            Backend::Jit => Prepared::Jit(super::jit::JitPlan::compile_shared(Arc::clone(&plan))?),
            #[cfg(not(feature = "jit"))]
            Backend::Jit => return Err(ExecError::BackendUnavailable { backend }),
        };
        Ok(Executor { plan, backend })
    }

    /// Runs the plan on the current rayon pool with `feeds` in compile order, returning the
    /// fetched tensors in target order, as [`CompiledPlan::run`] does on either backend.
    pub fn run(
        &self,
        run: &RunContext<'_>,
        feeds: Vec<HostTensor>,
    ) -> Result<Vec<HostTensor>, ExecError> {
        match &self.backend {
            Prepared::Interp => self.plan.run(run, feeds),
            #[cfg(feature = "jit")]
            Prepared::Jit(jit) => jit.run(run, feeds),
        }
    }

    /// The plan.
    pub fn plan(&self) -> &CompiledPlan {
        &self.plan
    }

    /// The JIT's code for the plan, when the backend is [`Backend::Jit`].
    #[cfg(feature = "jit")]
    pub fn jit_plan(&self) -> Option<&super::jit::JitPlan> {
        match &self.backend {
            Prepared::Jit(jit) => Some(jit),
            Prepared::Interp => None,
        }
    }

    /// The backend the plan runs on.
    pub fn backend(&self) -> Backend {
        match self.backend {
            Prepared::Interp => Backend::Interp,
            #[cfg(feature = "jit")]
            Prepared::Jit(_) => Backend::Jit,
        }
    }
}
