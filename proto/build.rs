//! Compiles our TensorFlow-compatible `.proto` files with protox (no system `protoc` needed)
//! and generates Rust types for them with prost-build.

use std::path::PathBuf;

/// Every `.proto` file of the crate, relative to `protos/`.
const PROTOS: &[&str] = &[
    "tensorflow/core/framework/types.proto",
    "tensorflow/core/framework/tensor_shape.proto",
    "tensorflow/core/framework/resource_handle.proto",
    "tensorflow/core/framework/tensor.proto",
    "tensorflow/core/framework/attr_value.proto",
    "tensorflow/core/framework/full_type.proto",
    "tensorflow/core/framework/node_def.proto",
    "tensorflow/core/framework/op_def.proto",
    "tensorflow/core/framework/function.proto",
    "tensorflow/core/framework/versions.proto",
    "tensorflow/core/framework/graph_debug_info.proto",
    "tensorflow/core/framework/graph.proto",
    "tensorflow/core/framework/tensor_slice.proto",
    "tensorflow/core/framework/variable.proto",
    "tensorflow/core/protobuf/saver.proto",
    "tensorflow/core/protobuf/meta_graph.proto",
    "tensorflow/core/protobuf/tensor_bundle.proto",
    "tensorflow/core/protobuf/checkpoint_state.proto",
    "tensorflow/core/protobuf/trackable_object_graph.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // prost-build does not emit this itself.
    println!("cargo:rerun-if-changed=protos");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(PROTOS, ["protos"])?;
    std::fs::write(
        out_dir.join("file_descriptor_set.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    prost_build::Config::new()
        .btree_map(["."])
        // An `AttrValue` is a map value of every `NodeDef`, and a B-tree node holds room for
        // eleven: unboxed, the tensor and list variants (~0.6 KB) made each node's attributes
        // take kilobytes, and decoding a 100k-variable plan gigabytes.
        .boxed(".tensorflow.AttrValue.value.tensor")
        .boxed(".tensorflow.AttrValue.value.list")
        .enable_type_names()
        .include_file("_includes.rs")
        .compile_fds(fds)?;
    Ok(())
}
