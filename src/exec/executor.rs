//! [`Executor`]: one entry point over both backends, the reference interpreter
//! ([`super::scheduler`]) and the cranelift JIT (`crate::exec::jit`, cargo feature `jit`).
//! The JIT's native code is generated when the executor is made ([`Executor::new`]) or at its
//! first run ([`Executor::lazy`], what a `Session` uses: a plan of 100k variables takes seconds
//! to lower, which a session that only saves once, or never restores, need not pay up front).

use std::sync::Arc;
#[cfg(feature = "jit")]
use std::sync::{Mutex, OnceLock};

use super::backend::Backend;
use super::error::ExecError;
use super::plan::CompiledPlan;
use super::step::RunContext;
#[cfg(feature = "jit")]
use super::sync::lock;
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
    Jit(LazyJit),
}

/// The JIT's code for a plan, generated once, on first use (or at once by [`Executor::new`]).
#[cfg(feature = "jit")]
#[derive(Debug, Default)]
struct LazyJit {
    code: OnceLock<super::jit::JitPlan>,
    /// Held while generating, so that concurrent first runs lower the plan once.
    lowering: Mutex<()>,
}

impl Executor {
    /// Prepares `plan` for `backend`; for the JIT this generates the native code.
    pub fn new(
        plan: impl Into<Arc<CompiledPlan>>,
        backend: Backend,
    ) -> Result<Executor, ExecError> {
        let executor = Executor::lazy(plan, backend)?;
        #[cfg(feature = "jit")]
        if let Prepared::Jit(jit) = &executor.backend {
            executor.lowered(jit)?;
        }
        Ok(executor)
    }

    /// Prepares `plan` for `backend` without generating the JIT's native code: the first
    /// [`Executor::run`] does (and reports a lowering error). Fails only if `backend` is not
    /// built in.
    ///
    /// A plan that receives from other tasks (a cluster partition, [`CompiledPlan::receives`])
    /// runs on the interpreter whatever `backend` says: its scheduler waits for receives off
    /// the pool ([`super::scheduler`]), where the JIT's queues would block a pool thread. Both
    /// write the same bytes.
    pub fn lazy(
        plan: impl Into<Arc<CompiledPlan>>,
        backend: Backend,
    ) -> Result<Executor, ExecError> {
        let plan = plan.into();
        let backend = match backend {
            Backend::Interp => Prepared::Interp,
            #[cfg(feature = "jit")]
            Backend::Jit if plan.receives() => Prepared::Interp,
            #[cfg(feature = "jit")]
            Backend::Jit => Prepared::Jit(LazyJit::default()),
            #[cfg(not(feature = "jit"))]
            Backend::Jit => return Err(ExecError::BackendUnavailable { backend }),
        };
        Ok(Executor { plan, backend })
    }

    /// The JIT's code for the plan, generated now if no run has yet.
    #[cfg(feature = "jit")]
    fn lowered<'e>(&'e self, jit: &'e LazyJit) -> Result<&'e super::jit::JitPlan, ExecError> {
        if let Some(code) = jit.code.get() {
            return Ok(code);
        }
        let _lowering = lock(&jit.lowering);
        if let Some(code) = jit.code.get() {
            return Ok(code);
        }
        let code = super::jit::JitPlan::compile_shared(Arc::clone(&self.plan))?;
        Ok(jit.code.get_or_init(|| code))
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
            Prepared::Jit(jit) => self.lowered(jit)?.run(run, feeds),
        }
    }

    /// The plan.
    pub fn plan(&self) -> &CompiledPlan {
        &self.plan
    }

    /// The JIT's code for the plan, when the backend is [`Backend::Jit`] and the code was
    /// generated ([`Executor::new`], or a first run of an [`Executor::lazy`]).
    #[cfg(feature = "jit")]
    pub fn jit_plan(&self) -> Option<&super::jit::JitPlan> {
        match &self.backend {
            Prepared::Jit(jit) => jit.code.get(),
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
