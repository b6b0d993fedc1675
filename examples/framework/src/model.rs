//! The model of a small framework, a struct of its own implementing
//! `saveplan::prelude::Saveable`: its layers are a list (children `0`, `1`), each layer's
//! tensors are variables (children `kernel`, `bias`), and the step is a named variable, so
//! the checkpoint is `tf.train.Checkpoint(layers=[…], step=…)`'s. saveplan's integration
//! tests use this file too.

use saveplan::prelude::*;

/// A dense layer: `y = x · kernel + bias`.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    /// `[inputs, outputs]`.
    pub kernel: HostTensor,
    /// `[outputs]`.
    pub bias: HostTensor,
}

/// The model: its layers and a training step counter.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// The layers, first to last.
    pub layers: Vec<Dense>,
    /// The training step (an int64 scalar named `step`).
    pub step: Variable,
}

impl Dense {
    /// A layer whose kernel is `fill * i` (row-major) and whose bias is `fill`.
    pub fn new(inputs: usize, outputs: usize, fill: f32) -> Result<Dense, TensorError> {
        let kernel: Vec<f32> = (0..inputs * outputs).map(|i| fill * i as f32).collect();
        Ok(Dense {
            kernel: HostTensor::from_slice(vec![inputs as u64, outputs as u64], &kernel)?,
            bias: HostTensor::from_slice(vec![outputs as u64], &vec![fill; outputs])?,
        })
    }
}

impl Model {
    /// Layers 4 → 3 → 1 filled from `fill`, at step 0.
    pub fn new(fill: f32) -> Result<Model, TensorError> {
        Ok(Model {
            layers: vec![Dense::new(4, 3, fill)?, Dense::new(3, 1, fill)?],
            step: Variable {
                name: "step".to_owned(),
                value: HostTensor::scalar(0i64),
            },
        })
    }
}

impl Saveable for Dense {
    fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
        node.child("kernel", &self.kernel);
        node.child("bias", &self.bias);
    }

    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
        node.child("kernel", &mut self.kernel)?;
        node.child("bias", &mut self.bias)
    }
}

impl Saveable for Model {
    fn save<'a>(&'a self, node: &mut SaveNode<'a>) {
        node.child("layers", &self.layers);
        node.child("step", &self.step);
    }

    fn restore(&mut self, node: &mut RestoreNode<'_>) -> Result<(), CheckpointError> {
        node.child("layers", &mut self.layers)?;
        node.child("step", &mut self.step)
    }
}
