//! A registered saver for the tracer and eager suites (`trace.rs`, `eager.rs`).

use saveplan::trace::{RegisteredSaver, SaverCx, TraceError};
use saveplan_ir::{AttrValue, Attrs, DType, Op, OpId, Port, Tensor};

/// A registered saver for tests: writes one constant string under its
/// own prefix and returns that prefix once written; restores it with a `RestoreV2` only.
pub struct StackSaver;

fn string_const(value: Tensor) -> Attrs {
    let mut attrs = Attrs::new();
    attrs.insert("dtype", AttrValue::Type(value.dtype));
    attrs.insert("value", AttrValue::Tensor(Box::new(value)));
    attrs
}

impl StackSaver {
    fn names(cx: &mut SaverCx<'_>, scope: &str) -> Result<(OpId, OpId), TraceError> {
        let names = cx.add_op(
            &format!("{scope}/tensor_names"),
            Op::Const,
            "/device:CPU:0",
            string_const(Tensor::string_vector(["stack"])),
            &[],
        )?;
        let specs = cx.add_op(
            &format!("{scope}/shape_and_slices"),
            Op::Const,
            "/device:CPU:0",
            string_const(Tensor::string_vector([""])),
            &[],
        )?;
        Ok((names, specs))
    }
}

impl RegisteredSaver for StackSaver {
    fn name(&self) -> &str {
        "test.Stack"
    }

    fn save(
        &self,
        cx: &mut SaverCx<'_>,
        prefix: (OpId, Port),
    ) -> Result<Vec<(OpId, Port)>, TraceError> {
        let scope = cx.unique_name("stack_save");
        let (names, specs) = StackSaver::names(cx, &scope)?;
        let value = cx.add_op(
            &format!("{scope}/value"),
            Op::Const,
            "/device:CPU:0",
            string_const(Tensor::string_scalar("top")),
            &[],
        )?;
        let mut save_attrs = Attrs::new();
        save_attrs.insert("dtypes", AttrValue::types([DType::String]));
        let save = cx.add_op(
            &format!("{scope}/SaveV2"),
            Op::SaveV2,
            "/device:CPU:0",
            save_attrs,
            &[
                prefix.clone(),
                (names, Port::Index(0)),
                (specs, Port::Index(0)),
                (value, Port::Index(0)),
            ],
        )?;
        let mut identity_attrs = Attrs::new();
        identity_attrs.insert("T", AttrValue::Type(DType::String));
        let written = cx.add_op(
            &format!("{scope}/Identity"),
            Op::Identity,
            "/device:CPU:0",
            identity_attrs,
            &[prefix],
        )?;
        cx.add_control(save, written);
        Ok(vec![(written, Port::Index(0))])
    }

    fn restore(&self, cx: &mut SaverCx<'_>, prefix: (OpId, Port)) -> Result<(), TraceError> {
        let scope = cx.unique_name("stack_restore");
        let (names, specs) = StackSaver::names(cx, &scope)?;
        let mut attrs = Attrs::new();
        attrs.insert("dtypes", AttrValue::types([DType::String]));
        cx.add_op(
            &format!("{scope}/RestoreV2"),
            Op::RestoreV2,
            "/device:CPU:0",
            attrs,
            &[prefix, (names, Port::Index(0)), (specs, Port::Index(0))],
        )?;
        Ok(())
    }
}
