//! The function form: what `MultiDeviceSaver.to_proto()` adds to a `tf.Graph` (FORMATS.md
//! §8.3): a `saver_filename` placeholder and two `StatefulPartitionedCall`s into library
//! functions `__inference__traced_save_<uid>` and `__inference__traced_restore_<uid>` whose
//! bodies hold the plan, with the variables captured as arguments.
//!
//! On top of the flat plan, tracing into a `tf.function` adds what automatic control
//! dependencies add: `_has_manual_control_dependencies` on ops used in
//! `control_dependencies` blocks, a control edge between stateful ops on the same resource,
//! an `Identity` of the prefix after the plan on `/device:CPU:0`, the output `Identity` with a
//! control input on a `NoOp` that collects the function's control outputs.

use std::collections::BTreeMap;

use saveplan_ir::{
    ArgDef, AttrList, AttrValue, Attrs, DType, Function, Graph, Library, Module, NameAttrList, Op,
    OpId, Port, SaverDef, Shape, Signature, Versions,
};

use super::builder::{Builder as _, attrs, out};
use super::plan::{Captures, Inputs, PRODUCER, Tracer, VarSource};
use super::{RegisteredSaver, TraceError, TraceOptions, Trackable, VariableOpIds};

/// `GraphDef.versions.min_consumer` of a graph holding functions, as TensorFlow 2.21 writes.
const MIN_CONSUMER: i32 = 12;

/// The parts of the function form that depend on the TensorFlow process, not the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionOptions {
    /// The save function's name; TensorFlow uses `__inference__traced_save_<uid>` with a
    /// process-wide counter.
    pub save_function: String,
    /// The restore function's name (`__inference__traced_restore_<uid>`).
    pub restore_function: String,
    /// The serialized `ConfigProto` TensorFlow stores in each call's `config_proto`
    /// attribute (it describes the devices of the tracing process).
    pub config_proto: Vec<u8>,
}

/// A traced function-form plan.
#[derive(Clone, Debug)]
pub struct FunctionTrace {
    /// The outer graph (variables, placeholder, two calls) and the two functions.
    pub module: Module,
    /// The `SaverDef` `to_proto()` returns: the names, `version: V2`, nothing else set.
    pub saver_def: SaverDef,
    /// The ops of each input tensor's variable in the outer graph, in input order.
    pub variables: Vec<VariableOpIds>,
}

/// Traces `MultiDeviceSaver.to_proto()` for `trackables` into a fresh graph.
///
/// `to_proto` takes no `CheckpointOptions`, so the plan uses the defaults (no io device,
/// shard by task).
pub fn trace_functions(
    trackables: &[Trackable],
    options: &FunctionOptions,
) -> Result<FunctionTrace, TraceError> {
    trace_functions_with_savers(trackables, Vec::new(), options)
}

/// [`trace_functions`] for a `MultiDeviceSaver` built with registered savers.
///
/// As in TensorFlow, a registered saver's functions are called while `_traced_save` and
/// `_traced_restore` are traced, so their ops are part of the function bodies: the saves
/// right after the temporary prefix, ahead of the default shards, and the restores after
/// every default restore, before the trailing `Identity` (which waits for the default
/// restores only). Their ops are not control outputs of the functions.
pub fn trace_functions_with_savers(
    trackables: &[Trackable],
    registered_savers: Vec<Box<dyn RegisteredSaver>>,
    options: &FunctionOptions,
) -> Result<FunctionTrace, TraceError> {
    let trace_options = TraceOptions {
        registered_savers,
        ..TraceOptions::default()
    };
    let inputs = Inputs::collect(trackables, &trace_options)?;
    let mut outer = Tracer::with_capacity(VarSource::Local(Vec::new()), inputs.tensors.len());
    let variables = outer.create_variables(&inputs)?;
    let variable_ops = variables.iter().map(|variable| variable.ids()).collect();
    let prefix = outer.placeholder("saver_filename")?;

    let save_fn = save_body(&inputs, &variables, &trace_options, "file_prefix", false)?
        .finish(&options.save_function, TAIL_DEVICE)?;

    let restore_fn = restore_body(&inputs, &variables, &trace_options)?
        .finish(&options.restore_function, TAIL_DEVICE)?;

    let save_call = call(&mut outer, prefix, &save_fn, &options.config_proto)?;
    let restore_call = call(&mut outer, prefix, &restore_fn, &options.config_proto)?;
    let graph = outer.graph;
    let saver_def = SaverDef::v2(
        format!("{}:0", graph.op(prefix).name),
        format!("{}:0", graph.op(save_call).name),
        graph.op(restore_call).name.clone(),
    );
    let mut functions = vec![save_fn.function, restore_fn.function];
    functions.sort_by(|a, b| a.signature.name.cmp(&b.signature.name));
    let module = Module {
        graph,
        versions: Some(Versions {
            producer: PRODUCER,
            min_consumer: MIN_CONSUMER,
            ..Versions::default()
        }),
        library: Library {
            functions,
            ..Library::default()
        },
        ..Module::default()
    };
    Ok(FunctionTrace {
        module,
        saver_def,
        variables: variable_ops,
    })
}

/// Traces the `tf.function` `lambda prefix: saver.save(prefix, options)` (TensorFlow's
/// `fn_save.pbtxt` fixtures): the save plan with options, as a library function named `name`
/// whose captured variables are created in the returned module's graph.
///
/// This is the function `to_proto` would contain if it took options; its prefix argument is
/// called `prefix` and its trailing `Identity` has no device.
pub fn trace_save_function(
    trackables: &[Trackable],
    options: &TraceOptions,
    name: &str,
) -> Result<Module, TraceError> {
    let inputs = Inputs::collect(trackables, options)?;
    let mut outer = Tracer::with_capacity(VarSource::Local(Vec::new()), inputs.tensors.len());
    let variables = outer.create_variables(&inputs)?;
    let traced = save_body(&inputs, &variables, options, "prefix", false)?.finish(name, "")?;
    Ok(Module {
        graph: outer.graph,
        versions: Some(Versions {
            producer: PRODUCER,
            ..Versions::default()
        }),
        library: Library {
            functions: vec![traced.function],
            ..Library::default()
        },
        ..Module::default()
    })
}

/// The eager form of a plan: `MultiDeviceSaver._traced_save` and `_traced_restore` traced
/// from eager TensorFlow with `get_concrete_function()` (fixture `g7_eager_traced`).
#[derive(Clone, Debug)]
pub struct EagerTrace {
    /// The two functions, save first, in a module without an outer graph. The variables are
    /// captured as `DT_RESOURCE` arguments named after the capturing op
    /// (`read_disablecopyonread_resource`, `assignvariableop_resource`) and read inside the
    /// save function.
    pub module: Module,
    /// The save function's `FuncGraph` as a graph (`traced_save.graph.pbtxt`): the arguments
    /// are `Placeholder`s (`file_prefix`, `Read/DisableCopyOnRead/resource`, …) with
    /// `_user_specified_name`, the captures on the variable's device.
    pub save_graph: Module,
}

/// Traces the eager form of `MultiDeviceSaver`'s save and restore functions.
///
/// Eager variables serialize through their saveable read, so every tensor that is not a
/// parallel-device component is read as [`ReadKind::Saveable`](super::ReadKind::Saveable),
/// whatever its spec says. Handles enter as captures whose outer name is `resource`. The
/// `config_proto` of `options` is not used (the eager form has no call ops).
pub fn trace_eager_functions(
    trackables: &[Trackable],
    options: &FunctionOptions,
) -> Result<EagerTrace, TraceError> {
    use super::ReadKind;
    let eager: Vec<Trackable> = trackables
        .iter()
        .map(|trackable| {
            let mut trackable = trackable.clone();
            for tensor in &mut trackable.tensors {
                if tensor.variable.read == ReadKind::Graph {
                    tensor.variable.read = ReadKind::Saveable;
                }
            }
            trackable
        })
        .collect();
    let trace_options = TraceOptions::default();
    let inputs = Inputs::collect(&eager, &trace_options)?;
    // The handles live in the eager context, outside any graph: only their capture name
    // matters, so every variable points at one stand-in op.
    let mut outer = Graph::new();
    let stand_in = outer.add_op(EAGER_CAPTURE, Op::NoOp, "", Attrs::new())?;
    let eager_variable = super::plan::Variable {
        handle: stand_in,
        handle_name: EAGER_CAPTURE.to_owned(),
        read: stand_in,
        read_name: EAGER_CAPTURE.to_owned(),
        assign: None,
    };
    let variables = vec![eager_variable; inputs.tensors.len()];

    let save_fn = save_body(&inputs, &variables, &trace_options, "file_prefix", false)?
        .finish(&options.save_function, TAIL_DEVICE)?;
    let restore_fn = restore_body(&inputs, &variables, &trace_options)?
        .finish(&options.restore_function, TAIL_DEVICE)?;

    let save_graph = save_body(&inputs, &variables, &trace_options, "file_prefix", true)?
        .finish_graph(TAIL_DEVICE)?;
    let versions = Some(Versions {
        producer: PRODUCER,
        ..Versions::default()
    });
    Ok(EagerTrace {
        module: Module {
            versions: versions.clone(),
            library: Library {
                functions: vec![save_fn.function, restore_fn.function],
                ..Library::default()
            },
            ..Module::default()
        },
        save_graph: Module {
            graph: save_graph,
            versions,
            ..Module::default()
        },
    })
}

/// The outer name of an eager variable's captured handle.
const EAGER_CAPTURE: &str = "resource";

/// The device of the `Identity` `_traced_save` and `_traced_restore` end with.
const TAIL_DEVICE: &str = "/device:CPU:0";

/// A function body under construction: its tracer, the prefix argument and the ops the
/// trailing `Identity` of the prefix waits for.
struct Body {
    tracer: Tracer,
    prefix: OpId,
    after: Vec<OpId>,
}

/// A body holding the save plan.
fn save_body(
    inputs: &Inputs<'_>,
    variables: &[super::plan::Variable],
    options: &TraceOptions,
    prefix_name: &str,
    placeholders: bool,
) -> Result<Body, TraceError> {
    let mut save = body_in(variables, prefix_name, placeholders)?;
    let merge = save.tracer.save(inputs, out(save.prefix), options)?;
    save.tracer.graph.mark_manual_control(merge);
    save.tracer.resource_ops.push(merge);
    save.after = vec![merge];
    Ok(save)
}

/// A body holding the restore plan (`_traced_restore`): one `RestoreV2` per task and the
/// assigns, which the trailing `Identity` waits for (they are used in a
/// `control_dependencies` block), then the registered savers' restores.
fn restore_body(
    inputs: &Inputs<'_>,
    variables: &[super::plan::Variable],
    options: &TraceOptions,
) -> Result<Body, TraceError> {
    let mut restore = body(variables, "file_prefix")?;
    let restore_ops = restore.tracer.restore(inputs, out(restore.prefix))?.ops;
    restore.after = restore_ops.iter().map(|&(_, op)| op).collect();
    for &op in &restore.after {
        restore.tracer.graph.mark_manual_control(op);
    }
    restore
        .tracer
        .restore_registered(options, out(restore.prefix))?;
    Ok(restore)
}

/// A finished function and the outer ops its captured arguments come from.
struct Traced {
    function: Function,
    captured: Vec<(OpId, DType)>,
}

fn body(variables: &[super::plan::Variable], prefix_name: &str) -> Result<Body, TraceError> {
    body_in(variables, prefix_name, false)
}

/// A body whose arguments are `_Arg`s, or with `placeholders` the `Placeholder`s a `FuncGraph`
/// holds before it becomes a function.
fn body_in(
    variables: &[super::plan::Variable],
    prefix_name: &str,
    placeholders: bool,
) -> Result<Body, TraceError> {
    let mut captures = Captures::new(variables.to_vec());
    captures.placeholders = placeholders;
    let mut tracer = Tracer::with_capacity(VarSource::Captured(captures), variables.len());
    let name = tracer.names.unique(prefix_name);
    let prefix = if placeholders {
        let attrs = attrs([
            ("_user_specified_name", AttrValue::s(prefix_name)),
            ("dtype", AttrValue::Type(DType::String)),
            ("shape", AttrValue::Shape(Shape::scalar())),
        ]);
        tracer.graph.add_op(name, Op::Placeholder, "", attrs)?
    } else {
        let arg_attrs = attrs([
            ("T", AttrValue::Type(DType::String)),
            ("index", AttrValue::I(0)),
        ]);
        tracer.graph.add_op(name, Op::Arg, "", arg_attrs)?
    };
    Ok(Body {
        tracer,
        prefix,
        after: Vec::new(),
    })
}

impl Body {
    /// Adds the epilogue and returns the graph as is (the `FuncGraph` form).
    fn finish_graph(mut self, tail_device: &str) -> Result<Graph, TraceError> {
        self.epilogue(tail_device)?;
        Ok(self.tracer.graph)
    }

    /// Adds the epilogue `_traced_save` / `_traced_restore` and function tracing add (the
    /// prefix `Identity` on `tail_device`, the output `Identity` and the `NoOp` of control
    /// outputs). Returns the output op and the control outputs sorted by name.
    fn epilogue(&mut self, tail_device: &str) -> Result<(OpId, Vec<(String, OpId)>), TraceError> {
        let tracer = &mut self.tracer;
        let identity = tracer.identity(tail_device, DType::String, out(self.prefix))?;
        for &op in &self.after {
            tracer.graph.add_control(op, identity);
        }
        let output = tracer.identity("", DType::String, out(identity))?;
        let noop_name = tracer.names.unique("NoOp");
        let mut control_outputs: Vec<(String, OpId)> = tracer
            .resource_ops
            .iter()
            .map(|&op| (tracer.graph.op(op).name.clone(), op))
            .collect();
        control_outputs.sort();
        let noop = tracer.op(noop_name, Op::NoOp, "", Attrs::new(), [])?;
        for (_, op) in &control_outputs {
            tracer.graph.add_control(*op, noop);
        }
        tracer.graph.add_control(noop, output);
        Ok((output, control_outputs))
    }

    /// Adds the epilogue and packs the body into a [`Function`].
    fn finish(mut self, name: &str, tail_device: &str) -> Result<Traced, TraceError> {
        let (output, control_outputs) = self.epilogue(tail_device)?;
        let tracer = &mut self.tracer;
        let prefix_name = tracer.graph.op(self.prefix).name.clone();
        let VarSource::Captured(captures) = &tracer.vars else {
            unreachable!("function bodies capture their variables")
        };
        let output_name = tracer.graph.op(output).name.clone();
        let output_arg = output_name.to_lowercase();
        let mut input_args = vec![arg_def(&prefix_name, DType::String)];
        let mut arg_attr = BTreeMap::new();
        arg_attr.insert(0, arg_attrs(&prefix_name, Some(Shape::scalar())));
        let mut captured = Vec::with_capacity(captures.args.len());
        for (i, capture) in captures.args.iter().enumerate() {
            input_args.push(arg_def(&capture.name, capture.dtype));
            arg_attr.insert(
                i as u32 + 1,
                arg_attrs(&capture.outer_name, capture.shape.clone()),
            );
            captured.push((capture.outer, capture.dtype));
        }
        let names: Vec<String> = control_outputs.into_iter().map(|(n, _)| n).collect();
        let function = Function {
            signature: Signature {
                name: name.to_owned(),
                input_args,
                output_args: vec![arg_def(&output_arg, DType::String)],
                control_outputs: names.clone(),
                is_stateful: true,
                ..Signature::default()
            },
            attr: attrs([("_construction_context", AttrValue::s("kEagerRuntime"))]),
            arg_attr,
            ret: BTreeMap::from([(output_arg, format!("{output_name}:output:0"))]),
            control_ret: names.iter().map(|n| (n.clone(), n.clone())).collect(),
            body: std::mem::take(&mut tracer.graph),
            ..Function::default()
        };
        Ok(Traced { function, captured })
    }
}

fn arg_def(name: &str, dtype: DType) -> ArgDef {
    ArgDef {
        name: name.to_owned(),
        dtype,
        ..ArgDef::default()
    }
}

/// `arg_attr` of an argument: `_output_shapes` (values only) and `_user_specified_name`.
fn arg_attrs(user_name: &str, shape: Option<Shape>) -> Attrs {
    let mut attrs = Attrs::new();
    if let Some(shape) = shape {
        let shapes = AttrList {
            shapes: vec![shape],
            ..AttrList::default()
        };
        attrs.insert(
            "_output_shapes".to_owned(),
            AttrValue::List(Box::new(shapes)),
        );
    }
    attrs.insert("_user_specified_name", AttrValue::s(user_name));
    attrs
}

/// A `StatefulPartitionedCall` of `traced` with the prefix and the captured outer tensors.
fn call(
    outer: &mut Tracer,
    prefix: OpId,
    traced: &Traced,
    config_proto: &[u8],
) -> Result<OpId, TraceError> {
    let name = outer.names.unique("StatefulPartitionedCall");
    let tin = std::iter::once(DType::String).chain(traced.captured.iter().map(|(_, t)| *t));
    let empty = || AttrValue::List(Box::default());
    let call_attrs = attrs([
        ("Tin", AttrValue::types(tin)),
        ("Tout", AttrValue::types([DType::String])),
        ("_collective_manager_ids", empty()),
        ("_read_only_resource_inputs", empty()),
        ("config", AttrValue::s("")),
        ("config_proto", AttrValue::S(config_proto.to_vec())),
        ("executor_type", AttrValue::s("")),
        (
            "f",
            AttrValue::Func(Box::new(NameAttrList {
                name: traced.function.signature.name.clone(),
                attr: Attrs::new(),
            })),
        ),
    ]);
    let args = std::iter::once(out(prefix))
        .chain(traced.captured.iter().map(|&(op, _)| (op, Port::Index(0))));
    outer.op(name, Op::StatefulPartitionedCall, "", call_attrs, args)
}
