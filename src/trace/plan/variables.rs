//! The variables of a plan: created as a graph-mode `ResourceVariable` (initial value,
//! handle, `IsInitialized`, `Assign`, `Read`) or only attached (handle and read).

use saveplan_ir::{AttrValue, Attrs, DType, Op, OpId, Shape, Tensor};

use super::{Inputs, Tracer, Variable};
use crate::trace::builder::{Builder, attrs, out};
use crate::trace::names::Scope;
use crate::trace::{Init, ReadKind, SaveableTensor, TraceError, consts};

/// Elements from which `tf.zeros` builds a `Fill` instead of a constant (`_constant_if_small`).
const ZEROS_FILL_THRESHOLD: i64 = 1000;

/// Whether [`Tracer::create_variable`] builds a variable's initializer ops.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Initializers {
    /// Build them: the initial value, `IsInitialized` and `Assign`, as `tf.Variable` does.
    Build,
    /// Take their names and check the initial value, but build nothing: what the save and
    /// restore plans reach is then exactly what [`Initializers::Build`] builds, same names.
    NamesOnly,
}

/// Whether `tf.zeros` builds `tensor`'s zeros as a `Fill` of a shape and a scalar (three ops)
/// rather than one filled constant.
pub(in crate::trace) fn zeros_fill(tensor: &SaveableTensor) -> bool {
    tensor.shape.iter().product::<i64>() >= ZEROS_FILL_THRESHOLD
}

/// Checks initial values as [`initial_value`] makes them, keeping none: a `tf.zeros` constant
/// that is not a fill depends on the dtype alone, so it is made once per dtype (a share checks
/// every variable of a spec this way, the 100,000 it leaves out included).
#[derive(Default)]
pub(in crate::trace) struct InitialValueCheck {
    /// The dtypes whose `tf.zeros` constant was made.
    zeros_made: Vec<DType>,
}

impl InitialValueCheck {
    /// [`initial_value`]'s error for `tensor`, if any.
    pub(in crate::trace) fn check(&mut self, tensor: &SaveableTensor) -> Result<(), TraceError> {
        let zeros = matches!(tensor.variable.init, Init::Zeros) && !zeros_fill(tensor);
        if zeros && self.zeros_made.contains(&tensor.dtype) {
            return Ok(());
        }
        initial_value(tensor)?;
        if zeros {
            self.zeros_made.push(tensor.dtype);
        }
        Ok(())
    }
}

/// A variable's initial value, made and checked from its [`Init`].
pub(in crate::trace) enum InitialValue {
    /// The values given ([`Init::Values`]).
    Given(Tensor),
    /// `tf.zeros` ([`Init::Zeros`]).
    Zeros(Zeros),
}

/// What `tf.zeros` builds.
pub(in crate::trace) enum Zeros {
    /// For a small shape, one filled constant.
    Constant(Tensor),
    /// For [`ZEROS_FILL_THRESHOLD`] elements or more, a `Fill` of this shape and this scalar.
    Fill { shape: Tensor, zero: Tensor },
}

/// `tensor`'s initial value, as [`Tracer::create_variable`] builds it; also what a task's share
/// checks of a variable it leaves out (`trace::share`), which must fail as the whole trace
/// does.
pub(in crate::trace) fn initial_value(tensor: &SaveableTensor) -> Result<InitialValue, TraceError> {
    let zero = [consts::zero(tensor.dtype)];
    let made = match &tensor.variable.init {
        Init::Values(values) => {
            consts::make_tensor(tensor.dtype, &tensor.shape, values).map(InitialValue::Given)
        }
        Init::Zeros if zeros_fill(tensor) => {
            consts::int32_vector(&tensor.shape).and_then(|shape| {
                let zero = consts::make_tensor(tensor.dtype, &[], &zero)?;
                Ok(InitialValue::Zeros(Zeros::Fill { shape, zero }))
            })
        }
        Init::Zeros => consts::make_tensor(tensor.dtype, &tensor.shape, &zero)
            .map(|value| InitialValue::Zeros(Zeros::Constant(value))),
    };
    made.map_err(|reason| TraceError::BadInit {
        key: tensor.checkpoint_key.clone(),
        reason,
    })
}

/// The name a variable's `VarHandleOp` asks for (before uniquing): its own or the key.
pub(in crate::trace) fn handle_base_name(tensor: &SaveableTensor) -> &str {
    tensor
        .variable
        .name
        .as_deref()
        .unwrap_or(&tensor.checkpoint_key)
}

/// The `_class` attribute colocating an op with `name`.
fn colocation(name: &str) -> AttrValue {
    AttrValue::strings([["loc:@", name].concat()])
}

impl<B: Builder> Tracer<B> {
    /// [`Tracer::create_variable`] for every tensor, in order.
    pub(in crate::trace) fn create_variables(
        &mut self,
        inputs: &Inputs<'_>,
    ) -> Result<Vec<Variable>, TraceError> {
        self.variables_with(inputs, Initializers::Build)
    }

    /// Every tensor's variable, in order, created as [`Tracer::create_variable`] creates it
    /// with or without its initializer ops.
    pub(in crate::trace) fn variables_with(
        &mut self,
        inputs: &Inputs<'_>,
        initializers: Initializers,
    ) -> Result<Vec<Variable>, TraceError> {
        (0..inputs.tensors.len())
            .map(|index| self.create_variable(inputs, index, initializers))
            .collect()
    }

    /// Creates a graph-mode `ResourceVariable`: initial value, handle, `IsInitialized`,
    /// `Assign` and `Read`. With [`Initializers::NamesOnly`] the initial value is still
    /// checked and every initializer op's name still taken, but only the handle and the read
    /// are built.
    pub(in crate::trace) fn create_variable(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
        initializers: Initializers,
    ) -> Result<Variable, TraceError> {
        if inputs.tensors[index].variable.read == ReadKind::Constant {
            return self.saved_constant(inputs, index);
        }
        let build = initializers == Initializers::Build;
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let base = handle_base_name(tensor);
        // The variable's ops are all named inside its handle's scope: looked up from there.
        let (handle, initial) = match initial_value(tensor)? {
            InitialValue::Given(value) => {
                let handle = self.names.scope(base);
                let scope = self.names.scope_under(&handle, "Initializer");
                let name = self.names.unique_under(&scope, "initial_value");
                let initial = if build {
                    let attrs = attrs([
                        ("_class", colocation(&handle.name)),
                        ("dtype", AttrValue::Type(tensor.dtype)),
                        ("value", AttrValue::Tensor(Box::new(value))),
                    ]);
                    Some(self.op(name, Op::Const, "", attrs, [])?)
                } else {
                    None
                };
                (handle, initial)
            }
            InitialValue::Zeros(zeros) => {
                let zeros = self.zeros(zeros, tensor.dtype, device, build)?;
                (self.names.scope(base), zeros)
            }
        };
        let handle_op = self.var_handle(&handle.name, tensor, device)?;
        let scope = self.names.scope_under(&handle, "IsInitialized");
        let name = self.names.unique_under(&scope, "VarIsInitializedOp");
        if build {
            self.op(
                name,
                Op::VarIsInitializedOp,
                device,
                Attrs::new(),
                [out(handle_op)],
            )?;
        }
        let name = self.names.unique_under(&handle, "Assign");
        let assign = match initial {
            Some(initial) => {
                Some(self.assign(name, device, tensor.dtype, out(handle_op), out(initial))?)
            }
            None => None,
        };
        let mut variable = self.variable_read(handle_op, handle, tensor, device)?;
        variable.assign = assign;
        Ok(variable)
    }

    /// Looks variable `index` up without creating it: its handle (the same shared name as
    /// [`Tracer::create_variable`] gives it) and, with `read`, a `Read/ReadVariableOp`. Without
    /// it the handle stands in for the read, which a restore never uses.
    pub(in crate::trace) fn attach_variable(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
        read: bool,
    ) -> Result<Variable, TraceError> {
        if inputs.tensors[index].variable.read == ReadKind::Constant {
            return self.saved_constant(inputs, index);
        }
        let tensor = inputs.tensors[index];
        let device = inputs.device(index);
        let handle = self.names.scope(handle_base_name(tensor));
        let handle_op = self.var_handle(&handle.name, tensor, device)?;
        if !read {
            return Ok(Variable {
                handle: handle_op,
                read: handle_op,
                read_name: handle.name.clone(),
                handle_name: handle.name,
                assign: None,
            });
        }
        self.variable_read(handle_op, handle, tensor, device)
    }

    /// A [`ReadKind::Constant`] tensor: one `Const` (named `Const`, uniqued) on its device
    /// holding its initial value, standing in for both the handle and the read.
    fn saved_constant(
        &mut self,
        inputs: &Inputs<'_>,
        index: usize,
    ) -> Result<Variable, TraceError> {
        let tensor = inputs.tensors[index];
        let device = inputs.device(index).to_owned();
        let zero;
        let values = match &tensor.variable.init {
            Init::Values(values) => values.as_slice(),
            Init::Zeros => {
                zero = [consts::zero(tensor.dtype)];
                &zero
            }
        };
        let value = consts::make_tensor(tensor.dtype, &tensor.shape, values).map_err(|reason| {
            TraceError::BadInit {
                key: tensor.checkpoint_key.clone(),
                reason,
            }
        })?;
        let name = self.names.unique("Const");
        let constant = self.constant(name.clone(), &device, value)?;
        Ok(Variable {
            handle: constant,
            handle_name: name.clone(),
            read: constant,
            read_name: name,
            assign: None,
        })
    }

    /// The `VarHandleOp` of a graph-mode `ResourceVariable` named `handle_name`.
    fn var_handle(
        &mut self,
        handle_name: &str,
        tensor: &SaveableTensor,
        device: &str,
    ) -> Result<OpId, TraceError> {
        let handle_attrs = attrs([
            ("_class", colocation(handle_name)),
            ("allowed_devices", AttrValue::List(Box::default())),
            ("container", AttrValue::s("")),
            ("debug_name", AttrValue::s([handle_name, "/"].concat())),
            ("dtype", AttrValue::Type(tensor.dtype)),
            ("shape", AttrValue::Shape(Shape::from_dims(&tensor.shape))),
            ("shared_name", AttrValue::s(handle_name)),
        ]);
        self.op(
            handle_name.to_owned(),
            Op::VarHandleOp,
            device,
            handle_attrs,
            [],
        )
    }

    /// The variable's `<name>/Read/ReadVariableOp`, completing its [`Variable`] (`handle_name`
    /// is the scope of the `VarHandleOp` `handle`).
    fn variable_read(
        &mut self,
        handle: OpId,
        handle_name: Scope,
        tensor: &SaveableTensor,
        device: &str,
    ) -> Result<Variable, TraceError> {
        let scope = self.names.scope_under(&handle_name, "Read");
        let read_name = self.names.unique_under(&scope, "ReadVariableOp");
        let read_attrs = attrs([("dtype", AttrValue::Type(tensor.dtype))]);
        let read = self.op(
            read_name.clone(),
            Op::ReadVariableOp,
            device,
            read_attrs,
            [out(handle)],
        )?;
        Ok(Variable {
            handle,
            read,
            read_name,
            handle_name: handle_name.name,
            assign: None,
        })
    }

    /// `tf.zeros(shape, dtype)` under the variable's device: a filled constant, or for 1000
    /// elements and more a `Fill` of a shape constant and a scalar zero, of `value`
    /// ([`initial_value`], which checked it). Without `build` the names are taken, and nothing
    /// is built.
    fn zeros(
        &mut self,
        value: Zeros,
        dtype: DType,
        device: &str,
        build: bool,
    ) -> Result<Option<OpId>, TraceError> {
        let scope = self.names.unique("zeros");
        let (shape, zero) = match value {
            Zeros::Fill { shape, zero } => (shape, zero),
            Zeros::Constant(value) => {
                if !build {
                    return Ok(None);
                }
                return self.constant(scope, device, value).map(Some);
            }
        };
        let shape_name = self.names.unique_in(&scope, "shape_as_tensor");
        let zero_name = self.names.unique_in(&scope, "Const");
        if !build {
            return Ok(None);
        }
        let shape = self.constant(shape_name, device, shape)?;
        let zero = self.constant(zero_name, device, zero)?;
        let attrs = attrs([
            ("T", AttrValue::Type(dtype)),
            ("index_type", AttrValue::Type(DType::Int32)),
        ]);
        self.op(scope, Op::Fill, device, attrs, [out(shape), out(zero)])
            .map(Some)
    }
}
