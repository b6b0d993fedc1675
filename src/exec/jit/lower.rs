//! Lowering of step chunks to cranelift IR and native code: one function per chunk, straight
//! line, calling the runtime's host functions with immediates.
//!
//! A chunk function has the signature `extern "C" fn(invocation: *const u8, resume: u32) ->
//! u32`. Its entry block dispatches on `resume` with a `br_table`: `0` starts at the first step,
//! `k > 0` re-enters at the waits of the `k`-th step of the chunk that has any (where the chunk
//! was parked). Every host call's status is checked; a non-zero status is returned as is.

use std::sync::Arc;

use cranelift_codegen::Context;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{
    AbiParam, BlockArg, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder, JumpTableData,
    Signature, StackSlotData, StackSlotKind, UserExternalName, UserFuncName, types,
};
use cranelift_codegen::isa::{OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, ModuleReloc, default_libcall_names};
use rayon::prelude::*;

use super::{CraneliftError, JitError};

/// A lowered chunk: `(invocation, resume) -> status`.
pub(super) type ChunkFn = unsafe extern "C" fn(*const u8, u32) -> u32;

/// The status a chunk returns when it ran to its end (and a host call that went fine).
pub(super) const DONE: u32 = 0;
/// The status of a chunk (and a `wait`) that parked its queue on an unfinished dependency.
pub(super) const PARKED: u32 = 1;
/// The status of a chunk (and a host call) that stopped the queue: an error, a panic, or a
/// cancelled run.
pub(super) const STOPPED: u32 = 2;

/// The addresses of the runtime's host functions.
pub(super) struct HostFunctions {
    /// `wait(invocation, signal, resume) -> status`.
    pub wait: *const u8,
    /// `step(invocation, step, slots, n_inputs, n_outputs) -> status`.
    pub step: *const u8,
    /// `signal(invocation, signal) -> status`.
    pub signal: *const u8,
}

/// What the code of one step does, as constants.
pub(super) struct ChunkStep {
    /// The step index.
    pub step: u32,
    /// The signals (of steps on other queues) to wait for first.
    pub waits: Vec<u32>,
    /// Its input slots, then its output slots.
    pub slots: Vec<u32>,
    /// How many of `slots` are inputs.
    pub n_inputs: u32,
    /// Its own signal, when another queue waits for it.
    pub signal: Option<u32>,
}

/// The finalized cranelift module holding the code of a plan tree. Dropping it frees the code.
pub(super) struct NativeCode {
    module: Option<JITModule>,
    /// The bytes of machine code of all its functions.
    code_bytes: usize,
}

impl NativeCode {
    /// The bytes of machine code of all its functions.
    pub(super) fn code_bytes(&self) -> usize {
        self.code_bytes
    }
}

// SAFETY: after `finalize_definitions` the module is never used again except to free its
// memory on drop, which needs `&mut self`; the code itself is immutable and callable from any
// thread.
unsafe impl Send for NativeCode {}
// SAFETY: as above, no `&self` method touches the module.
unsafe impl Sync for NativeCode {}

impl Drop for NativeCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: every `JitPlan` holding a pointer into this code holds an `Arc` to it, and
            // runs borrow their `JitPlan`, so no code runs or is called after this.
            unsafe { module.free_memory() };
        }
    }
}

/// Lowers `chunks` to native functions calling `host`, in order. The chunks compile in parallel
/// on the current rayon pool; linking is sequential.
pub(super) fn lower(
    chunks: &[Vec<ChunkStep>],
    host: &HostFunctions,
) -> Result<(NativeCode, Vec<ChunkFn>), JitError> {
    let isa = target_isa()?;
    let mut builder = JITBuilder::with_isa(Arc::clone(&isa), default_libcall_names());
    builder.symbol("saveplan_jit_wait", host.wait);
    builder.symbol("saveplan_jit_step", host.step);
    builder.symbol("saveplan_jit_signal", host.signal);
    let mut module = JITModule::new(builder);
    let ptr = isa.pointer_type();
    let imports = declare_imports(&mut module, ptr)?;
    let mut signature = module.make_signature();
    signature.params.push(AbiParam::new(ptr));
    signature.params.push(AbiParam::new(types::I32));
    signature.returns.push(AbiParam::new(types::I32));
    let ids = (0..chunks.len())
        .map(|index| {
            let name = format!("chunk{index}");
            module
                .declare_function(&name, Linkage::Local, &signature)
                .map_err(|err| codegen(format!("declaring {name}"), err))
        })
        .collect::<Result<Vec<FuncId>, JitError>>()?;
    let compiled = chunks
        .par_iter()
        .zip(&ids)
        .map_init(
            FunctionBuilderContext::new,
            |builder_context, (chunk, &id)| {
                let func = build_chunk(&*isa, builder_context, &signature, &imports, id, chunk);
                compile_chunk(&*isa, func, id)
            },
        )
        .collect::<Result<Vec<Compiled>, JitError>>()?;
    let code_bytes = compiled.iter().map(|compiled| compiled.bytes.len()).sum();
    for (&id, compiled) in ids.iter().zip(compiled) {
        module
            .define_function_bytes(id, compiled.alignment, &compiled.bytes, &compiled.relocs)
            .map_err(|err| codegen(format!("defining chunk{}", id.as_u32()), err))?;
    }
    module
        .finalize_definitions()
        .map_err(|err| codegen("linking".to_owned(), err))?;
    let functions = ids
        .into_iter()
        .map(|id| {
            let code = module.get_finalized_function(id);
            // SAFETY: the function was defined with exactly this signature, in the host's
            // default calling convention, which is `extern "C"`.
            unsafe { std::mem::transmute::<*const u8, ChunkFn>(code) }
        })
        .collect();
    Ok((
        NativeCode {
            module: Some(module),
            code_bytes,
        },
        functions,
    ))
}

/// The host functions as declared in the module (or as referenced in one function).
struct Imports<T> {
    wait: T,
    step: T,
    signal: T,
}

/// A host function's id in the module and its signature.
struct Import {
    id: FuncId,
    signature: Signature,
}

/// The machine code of one chunk, not yet placed in memory.
struct Compiled {
    bytes: Vec<u8>,
    alignment: u64,
    relocs: Vec<ModuleReloc>,
}

/// The target ISA of the host: no optimizations, single-pass register allocation (the code is
/// a sequence of calls), the verifier only in debug builds.
fn target_isa() -> Result<OwnedTargetIsa, JitError> {
    let mut flags = settings::builder();
    let mut set = |name: &str, value: &str| {
        flags
            .set(name, value)
            .map_err(|err| codegen(format!("setting {name}"), err))
    };
    set("use_colocated_libcalls", "false")?;
    set("is_pic", "false")?;
    set("opt_level", "none")?;
    set("regalloc_algorithm", "single_pass")?;
    set(
        "enable_verifier",
        if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        },
    )?;
    cranelift_native::builder()
        .map_err(|reason| JitError::UnsupportedHost {
            reason: reason.to_owned(),
        })?
        .finish(settings::Flags::new(flags))
        .map_err(|err| codegen("building the target ISA".to_owned(), err))
}

/// Declares the runtime's functions as imports.
fn declare_imports(module: &mut JITModule, ptr: types::Type) -> Result<Imports<Import>, JitError> {
    let signature = |params: &[types::Type]| {
        let mut signature: Signature = module.make_signature();
        signature
            .params
            .extend(params.iter().map(|&ty| AbiParam::new(ty)));
        signature.returns.push(AbiParam::new(types::I32));
        signature
    };
    let i32 = types::I32;
    let wait = signature(&[ptr, i32, i32]);
    let step = signature(&[ptr, i32, ptr, i32, i32]);
    let signal = signature(&[ptr, i32]);
    let mut declare = |name: &str, signature: Signature| {
        let id = module
            .declare_function(name, Linkage::Import, &signature)
            .map_err(|err| codegen(format!("declaring {name}"), err))?;
        Ok(Import { id, signature })
    };
    Ok(Imports {
        wait: declare("saveplan_jit_wait", wait)?,
        step: declare("saveplan_jit_step", step)?,
        signal: declare("saveplan_jit_signal", signal)?,
    })
}

/// Builds the IR of chunk function `id`.
fn build_chunk(
    isa: &dyn TargetIsa,
    builder_context: &mut FunctionBuilderContext,
    signature: &Signature,
    imports: &Imports<Import>,
    id: FuncId,
    chunk: &[ChunkStep],
) -> Function {
    let mut func =
        Function::with_name_signature(UserFuncName::user(0, id.as_u32()), signature.clone());
    let mut builder = FunctionBuilder::new(&mut func, builder_context);
    let refs = Imports {
        wait: import(builder.func, &imports.wait),
        step: import(builder.func, &imports.step),
        signal: import(builder.func, &imports.signal),
    };
    emit_chunk(&mut builder, &refs, isa.pointer_type(), chunk);
    builder.seal_all_blocks();
    builder.finalize(isa.frontend_config());
    func
}

/// References host function `import` in `func`, as `Module::declare_func_in_func` does.
fn import(func: &mut Function, import: &Import) -> FuncRef {
    let signature = func.import_signature(import.signature.clone());
    let name = func.declare_imported_user_function(UserExternalName::new(0, import.id.as_u32()));
    func.import_function(ExtFuncData {
        name: ExternalName::user(name),
        signature,
        colocated: false,
        patchable: false,
    })
}

/// Compiles chunk function `id` to machine code with its relocations.
fn compile_chunk(isa: &dyn TargetIsa, func: Function, id: FuncId) -> Result<Compiled, JitError> {
    let mut context = Context::for_function(func);
    let what = || format!("compiling chunk{}", id.as_u32());
    context
        .compile(isa, &mut ControlPlane::default())
        .map(|_| ())
        .map_err(|err| codegen(what(), err.inner))?;
    let code = context
        .compiled_code()
        .expect("a successful compile leaves its code");
    let alignment = u64::from(code.buffer.alignment);
    let bytes = code.code_buffer().to_vec();
    let relocs = code
        .buffer
        .relocs()
        .iter()
        .map(|reloc| ModuleReloc::from_mach_reloc(reloc, &context.func, id))
        .collect();
    Ok(Compiled {
        bytes,
        alignment,
        relocs,
    })
}

/// Emits the body of one chunk function.
fn emit_chunk(
    builder: &mut FunctionBuilder<'_>,
    refs: &Imports<FuncRef>,
    ptr: types::Type,
    chunk: &[ChunkStep],
) {
    let i32 = types::I32;
    let entry = builder.create_block();
    builder.append_block_params_for_function_params(entry);
    let exit = builder.create_block();
    let status = builder.append_block_param(exit, i32);
    let step_blocks: Vec<_> = chunk.iter().map(|_| builder.create_block()).collect();
    let end = builder.create_block();
    let max_slots = chunk.iter().map(|step| step.slots.len()).max().unwrap_or(0);
    let slot_array = builder.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (max_slots * 4) as u32,
        2,
    ));

    // The entry: dispatch on the resume point.
    builder.switch_to_block(entry);
    let invocation = builder.block_params(entry)[0];
    let resume = builder.block_params(entry)[1];
    let mut targets = vec![step_blocks.first().copied().unwrap_or(end)];
    targets.extend(
        chunk
            .iter()
            .zip(&step_blocks)
            .filter(|(step, _)| !step.waits.is_empty())
            .map(|(_, &block)| block),
    );
    let bad_resume = builder.ins().iconst(i32, i64::from(STOPPED));
    let default = builder
        .func
        .dfg
        .block_call(exit, &[BlockArg::Value(bad_resume)]);
    let table: Vec<_> = targets
        .iter()
        .map(|&block| builder.func.dfg.block_call(block, &[]))
        .collect();
    let jump_table = builder.create_jump_table(JumpTableData::new(default, &table));
    builder.ins().br_table(resume, jump_table);

    // One straight-line run of blocks per step; every call's status is checked.
    let mut resume_point = 0i64;
    for (position, step) in chunk.iter().enumerate() {
        builder.switch_to_block(step_blocks[position]);
        let next = step_blocks.get(position + 1).copied().unwrap_or(end);
        let check = |builder: &mut FunctionBuilder<'_>, call| {
            let result = builder.inst_results(call)[0];
            let continued = builder.create_block();
            builder
                .ins()
                .brif(result, exit, &[BlockArg::Value(result)], continued, &[]);
            builder.switch_to_block(continued);
        };
        if !step.waits.is_empty() {
            resume_point += 1;
            for &signal in &step.waits {
                let signal = builder.ins().iconst(i32, i64::from(signal));
                let resume = builder.ins().iconst(i32, resume_point);
                let call = builder.ins().call(refs.wait, &[invocation, signal, resume]);
                check(builder, call);
            }
        }
        for (index, &slot) in step.slots.iter().enumerate() {
            let slot = builder.ins().iconst(i32, i64::from(slot));
            builder
                .ins()
                .stack_store(ptr, slot, slot_array, (index * 4) as i32);
        }
        let slots = builder.ins().stack_addr(ptr, slot_array, 0);
        let id = builder.ins().iconst(i32, i64::from(step.step));
        let n_inputs = builder.ins().iconst(i32, i64::from(step.n_inputs));
        let n_outputs = builder
            .ins()
            .iconst(i32, (step.slots.len() as u32 - step.n_inputs) as i64);
        let call = builder
            .ins()
            .call(refs.step, &[invocation, id, slots, n_inputs, n_outputs]);
        check(builder, call);
        if let Some(signal) = step.signal {
            let signal = builder.ins().iconst(i32, i64::from(signal));
            let call = builder.ins().call(refs.signal, &[invocation, signal]);
            check(builder, call);
        }
        builder.ins().jump(next, &[]);
    }

    builder.switch_to_block(end);
    let done = builder.ins().iconst(i32, i64::from(DONE));
    builder.ins().jump(exit, &[BlockArg::Value(done)]);
    builder.switch_to_block(exit);
    builder.ins().return_(&[status]);
}

/// A [`JitError::Codegen`] for `what`.
fn codegen(what: String, source: impl Into<CraneliftError>) -> JitError {
    JitError::Codegen {
        what,
        source: Box::new(source.into()),
    }
}
