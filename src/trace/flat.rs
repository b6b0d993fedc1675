//! The flat form: what `saver.save(prefix)` and `saver.restore(prefix)` add to a fresh
//! `tf.Graph`, preceded by the creation of the variables (FORMATS.md §8.2).

use saveplan_ir::{Module, Versions};

use super::plan::{Inputs, PRODUCER, Tracer, VarSource, out};
use super::{FlatTrace, SaverNames, TraceError, TraceOptions, Trackable};

/// Traces the flat save and restore plan of `trackables` into a fresh graph.
///
/// The graph first creates every variable (in input order), then holds the `saver_filename`
/// placeholder, the save plan and the restore plan, named exactly as TensorFlow names them.
pub fn trace_flat(
    trackables: &[Trackable],
    options: &TraceOptions,
) -> Result<FlatTrace, TraceError> {
    let inputs = Inputs::collect(trackables, options)?;
    let mut tracer = Tracer::with_capacity(VarSource::Local(Vec::new()), inputs.tensors.len());
    let variables = tracer.create_variables(&inputs)?;
    tracer.vars = VarSource::Local(variables);
    let prefix = tracer.placeholder("saver_filename")?;
    let save_op = tracer.save(&inputs, out(prefix), options)?;
    let restore_ops = tracer.restore(&inputs, out(prefix))?;
    tracer.restore_registered(options, out(prefix))?;
    let graph = tracer.graph;
    let saver = SaverNames {
        filename_tensor_name: format!("{}:0", graph.op(prefix).name),
        save_op_name: graph.op(save_op).name.clone(),
        restore_ops: restore_ops
            .into_iter()
            .map(|(key, op)| (key, graph.op(op).name.clone()))
            .collect(),
    };
    let module = Module {
        graph,
        versions: Some(Versions {
            producer: PRODUCER,
            ..Versions::default()
        }),
        ..Module::default()
    };
    Ok(FlatTrace { module, saver })
}
