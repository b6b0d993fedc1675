//! A small framework's model, checkpointed by object through `saveplan::prelude::Saveable`:
//! saved as `tf.train.Checkpoint(layers=[…], step=…).write(prefix)` would save it, restored
//! into a fresh instance, compared.
//!
//! Run from this folder: `cargo run -- [PREFIX]` (default: a checkpoint in the system's
//! temporary directory, removed afterwards).

mod model;

use model::Model;
use saveplan::prelude::*;

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
