//! A small framework's model, checkpointed by object through `saveplan::prelude::Saveable`:
//! saved as `tf.train.Checkpoint(layers=[…], step=…).write(prefix)` would save it, restored
//! into a fresh instance, compared.
//!
//! Run from this folder: `cargo run -- [PREFIX]` (default: a checkpoint in the system's
//! temporary directory, removed afterwards).

use saveplan::prelude::*;

/// A dense layer: `y = x · kernel + bias`.
#[derive(Debug, PartialEq)]
struct Dense {
    kernel: HostTensor,
    bias: HostTensor,
}

/// The model: its layers and a training step counter.
#[derive(Debug, PartialEq)]
struct Model {
    layers: Vec<Dense>,
    step: Variable,
}

impl Dense {
    fn new(inputs: usize, outputs: usize, fill: f32) -> Result<Dense, TensorError> {
        let kernel: Vec<f32> = (0..inputs * outputs).map(|i| fill * i as f32).collect();
        Ok(Dense {
            kernel: HostTensor::from_slice(vec![inputs as u64, outputs as u64], &kernel)?,
            bias: HostTensor::from_slice(vec![outputs as u64], &vec![fill; outputs])?,
        })
    }
}

impl Model {
    fn new(fill: f32) -> Result<Model, TensorError> {
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = std::env::temp_dir().join(format!("framework-example-{}", std::process::id()));
    let prefix = match std::env::args().nth(1) {
        Some(prefix) => prefix,
        None => scratch.join("ckpt").to_string_lossy().into_owned(),
    };

    let mut trained = Model::new(0.5)?;
    trained.step.value = HostTensor::scalar(1000i64);
    save_object(&trained, &prefix)?;

    let mut fresh = Model::new(0.0)?;
    assert_ne!(fresh, trained);
    restore_object(&mut fresh, &prefix)?.assert_consumed()?;
    assert_eq!(fresh, trained);

    let kernel = read_value(&prefix, "layers/1/kernel")?;
    assert_eq!(kernel.to_vec::<f32>()?, [0.0, 0.5, 1.0]);
    println!(
        "saved and restored {prefix}: {} values, step {:?}",
        read_all(&prefix)?.len(),
        fresh.step.value.to_vec::<i64>()?
    );
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)?;
    }
    Ok(())
}
