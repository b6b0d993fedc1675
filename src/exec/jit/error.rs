//! [`JitError`]: what can go wrong while lowering a plan to native code. A leaf module, so the
//! executor's [`crate::exec::ExecError`] can wrap it without importing the JIT.

/// Errors from lowering a plan to native code.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    /// Cranelift does not support the host machine.
    #[error("the host machine is not supported by cranelift: {reason}")]
    UnsupportedHost {
        /// What cranelift reported.
        reason: String,
    },
    /// Cranelift rejected a setting, a declaration or a function.
    #[error("cranelift failed while {what}")]
    Codegen {
        /// What was being done (`compiling chunk3`).
        what: String,
        /// Cranelift's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A plan too large for the native code's 32-bit immediates.
    #[error("the plan is too large to compile ({what})")]
    TooLarge {
        /// What overflowed.
        what: String,
    },
}
