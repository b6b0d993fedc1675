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
        source: Box<CraneliftError>,
    },
    /// A plan too large for the native code's 32-bit immediates.
    #[error("the plan is too large to compile ({what})")]
    TooLarge {
        /// What overflowed.
        what: String,
    },
}

/// The errors cranelift reports, by the crate that reports them.
#[derive(Debug, thiserror::Error)]
pub enum CraneliftError {
    /// Declaring, defining or linking functions (`cranelift-module`).
    #[error(transparent)]
    Module(#[from] cranelift_module::ModuleError),
    /// Compiling a function or building the target ISA (`cranelift-codegen`).
    #[error(transparent)]
    Codegen(#[from] cranelift_codegen::CodegenError),
    /// A code generator setting (`cranelift-codegen`).
    #[error(transparent)]
    Setting(#[from] cranelift_codegen::settings::SetError),
}
