//! Kernel tests: each kernel on hand-made inputs, against the TF probes in
//! `meta/op_behaviour.json` where they exist, and their input validation.

use crate::support::exec::{backends, input_module, prepare, strings, verified};
use crate::support::{ErrorForm, error_chain, fixture_json};

use saveplan::exec::{
    CheckpointIo, CompiledPlan, HostTensor, IoError, Kernel, KernelCx, KernelError, MergeFlags,
    RestoreRequest, RunContext, SaveRequest, VariableStore,
    kernels::{sharded_filename, sharded_filespec},
};
use saveplan_ir::DType;

/// Runs `kernel` on `inputs` outside any plan.
fn run(kernel: &Kernel, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, KernelError> {
    let variables = VariableStore::new();
    let cx = KernelCx {
        variables: &variables,
        io: None,
        cluster: None,
        name: "op",
        device: "/job:localhost/replica:0/task:0/device:CPU:0",
    };
    kernel.run(&cx, inputs)
}

fn s(value: &str) -> HostTensor {
    HostTensor::string_scalar(value)
}

#[test]
fn sharded_filename_matches_tf_probes() {
    let probes = fixture_json("meta/op_behaviour.json");
    let cases = probes["ShardedFilename"].as_array().expect("cases");
    assert_eq!(cases.len(), 4);
    for case in cases {
        let basename = case["basename"].as_str().unwrap();
        let shard = case["shard"].as_i64().unwrap() as i32;
        let num_shards = case["num_shards"].as_i64().unwrap() as i32;
        let out = run(
            &Kernel::ShardedFilename,
            &[
                s(basename),
                HostTensor::int32_scalar(shard),
                HostTensor::int32_scalar(num_shards),
            ],
        )
        .unwrap();
        assert_eq!(strings(&out[0]), [case["filename"].as_str().unwrap()]);
        assert!(out[0].is_scalar());
    }
    assert_eq!(sharded_filename(b"ckpt", 1, 2), b"ckpt-00001-of-00002");
    assert_eq!(
        sharded_filename(b"a", 123456, 200000),
        b"a-123456-of-200000"
    );
}

#[test]
fn sharded_filespec_matches_tf_probe() {
    let probes = fixture_json("meta/op_behaviour.json");
    let case = &probes["ShardedFilespec"];
    let out = run(
        &Kernel::ShardedFilespec,
        &[
            s(case["basename"].as_str().unwrap()),
            HostTensor::int32_scalar(case["num_shards"].as_i64().unwrap() as i32),
        ],
    )
    .unwrap();
    assert_eq!(strings(&out[0]), [case["filename"].as_str().unwrap()]);
    assert_eq!(sharded_filespec(b"x", 100000), b"x-?????-of-100000");
}

#[test]
fn sharded_filename_rejects_bad_inputs() {
    let vector = HostTensor::from_i32s(vec![1], &[0]).unwrap();
    let err = run(
        &Kernel::ShardedFilename,
        &[s("a"), vector, HostTensor::int32_scalar(1)],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "input 1 must be a scalar, got shape [1]");
    let err = run(&Kernel::ShardedFilename, &[s("a"), s("0"), s("1")]).unwrap_err();
    assert_eq!(err.to_string(), "input 1 must be int32, got string");
    let err = run(&Kernel::ShardedFilename, &[s("a")]).unwrap_err();
    assert_eq!(err.to_string(), "missing input 1");
}

/// The temporary-prefix subgraph of every TF save plan, run on TF's probed prefixes.
#[test]
fn temp_prefix_matches_tf_probes() {
    let module = input_module("temp_prefix.ir");
    let plan =
        CompiledPlan::compile(verified(&module), &["StringJoin:0"], &["saver_filename"]).unwrap();
    let variables = VariableStore::new();
    let probes = fixture_json("meta/op_behaviour.json");
    let cases = probes["tmp_prefix"].as_array().expect("cases");
    let prefixes: Vec<&str> = cases
        .iter()
        .map(|c| c["prefix"].as_str().unwrap())
        .collect();
    assert!(prefixes.contains(&"s3://bucket/ckpt") && prefixes.contains(&"S3://x"));
    for backend in backends() {
        let exec = prepare(&plan, backend);
        for case in cases {
            let prefix = case["prefix"].as_str().unwrap();
            let out = exec
                .run(&RunContext::new(&variables), vec![s(prefix)])
                .unwrap();
            assert_eq!(
                strings(&out[0]),
                [case["tmp_prefix"].as_str().unwrap()],
                "{backend}: {prefix}"
            );
        }
    }
}

#[test]
fn string_join_broadcasts_scalars() {
    let kernel = Kernel::StringJoin {
        separator: b"/".to_vec(),
    };
    let out = run(
        &kernel,
        &[s("a"), HostTensor::string_vector(["x", "y"]), s("b")],
    )
    .unwrap();
    assert_eq!(out[0].shape(), [2]);
    assert_eq!(strings(&out[0]), ["a/x/b", "a/y/b"]);
    let out = run(&kernel, &[s("a"), s("b")]).unwrap();
    assert_eq!(strings(&out[0]), ["a/b"]);
    let err = run(
        &kernel,
        &[
            HostTensor::string_vector(["x"]),
            HostTensor::string_vector(["x", "y"]),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "input 1 must be a scalar or shape [1], got shape [2]"
    );
}

#[test]
fn regex_full_match_is_anchored() {
    let out = run(
        &Kernel::RegexFullMatch,
        &[
            HostTensor::string_vector(["s3://b/x", "xs3://b", "S3://b"]),
            s("s3://.*"),
        ],
    )
    .unwrap();
    assert_eq!(out[0].to_bools().unwrap(), [true, false, false]);
    assert_eq!(out[0].shape(), [3]);
    let err = run(&Kernel::RegexFullMatch, &[s("x"), s("(")]).unwrap_err();
    assert!(error_chain(&err, ErrorForm::OneLine).starts_with("bad regex `(`: regex parse error"));
}

#[test]
fn select_scalar_condition_shares_the_chosen_tensor() {
    let kernel = Kernel::Select { v2: false };
    let then = s(".part");
    let otherwise = s("_temp/part");
    let out = run(
        &kernel,
        &[
            HostTensor::bool_scalar(true),
            then.clone(),
            otherwise.clone(),
        ],
    )
    .unwrap();
    assert!(out[0].shares_storage_with(&then));
    let out = run(&kernel, &[HostTensor::bool_scalar(false), then, otherwise]).unwrap();
    assert_eq!(strings(&out[0]), ["_temp/part"]);
}

#[test]
fn select_elementwise_and_by_row() {
    let condition = HostTensor::from_bools(vec![3], &[true, false, true]).unwrap();
    let then = HostTensor::string_vector(["a", "b", "c"]);
    let otherwise = HostTensor::string_vector(["x", "y", "z"]);
    for v2 in [false, true] {
        let out = run(
            &Kernel::Select { v2 },
            &[condition.clone(), then.clone(), otherwise.clone()],
        )
        .unwrap();
        assert_eq!(strings(&out[0]), ["a", "y", "c"]);
    }
    let rows = HostTensor::from_bools(vec![2], &[false, true]).unwrap();
    let then = HostTensor::from_i32s(vec![2, 2], &[1, 2, 3, 4]).unwrap();
    let otherwise = HostTensor::from_i32s(vec![2, 2], &[5, 6, 7, 8]).unwrap();
    let out = run(
        &Kernel::Select { v2: false },
        &[rows.clone(), then.clone(), otherwise.clone()],
    )
    .unwrap();
    assert_eq!(
        out[0],
        HostTensor::from_i32s(vec![2, 2], &[5, 6, 3, 4]).unwrap()
    );
    let err = run(&Kernel::Select { v2: true }, &[rows, then, otherwise]).unwrap_err();
    assert!(matches!(err, KernelError::Unsupported { .. }), "{err}");
}

#[test]
fn select_rejects_mismatched_branches() {
    let err = run(
        &Kernel::Select { v2: false },
        &[
            HostTensor::bool_scalar(true),
            s("a"),
            HostTensor::bool_scalar(true),
        ],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "input 2 must be string, got bool");
    let err = run(&Kernel::Select { v2: false }, &[s("a"), s("a"), s("b")]).unwrap_err();
    assert_eq!(err.to_string(), "input 0 must be bool, got string");
}

#[test]
fn pack_stacks_along_axis() {
    let out = run(&Kernel::Pack { axis: 0 }, &[s("p0"), s("p1")]).unwrap();
    assert_eq!(out[0].shape(), [2]);
    assert_eq!(strings(&out[0]), ["p0", "p1"]);
    let a = HostTensor::from_i32s(vec![2], &[1, 2]).unwrap();
    let b = HostTensor::from_i32s(vec![2], &[3, 4]).unwrap();
    let out = run(&Kernel::Pack { axis: 0 }, &[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        out[0],
        HostTensor::from_i32s(vec![2, 2], &[1, 2, 3, 4]).unwrap()
    );
    let out = run(&Kernel::Pack { axis: -1 }, &[a.clone(), b.clone()]).unwrap();
    assert_eq!(
        out[0],
        HostTensor::from_i32s(vec![2, 2], &[1, 3, 2, 4]).unwrap()
    );
    let err = run(&Kernel::Pack { axis: 2 }, &[a.clone(), b]).unwrap_err();
    assert_eq!(err.to_string(), "axis 2 is out of range for rank 2");
    let err = run(&Kernel::Pack { axis: 0 }, &[a, s("x")]).unwrap_err();
    assert_eq!(err.to_string(), "input 1 must be int32, got string");
}

#[test]
fn slice_cuts_blocks_like_max_shard_size_plans() {
    let big = HostTensor::from_i32s(vec![3, 4], &(0..12).collect::<Vec<_>>()).unwrap();
    let begin = HostTensor::from_i32s(vec![2], &[1, 1]).unwrap();
    let size = HostTensor::from_i32s(vec![2], &[2, -1]).unwrap();
    let out = run(&Kernel::Slice, &[big.clone(), begin, size]).unwrap();
    assert_eq!(
        out[0],
        HostTensor::from_i32s(vec![2, 3], &[5, 6, 7, 9, 10, 11]).unwrap()
    );
    let zero = HostTensor::from_i32s(vec![2], &[0, 0]).unwrap();
    let all = HostTensor::from_i32s(vec![2], &[3, 4]).unwrap();
    let out = run(&Kernel::Slice, &[big.clone(), zero.clone(), all]).unwrap();
    assert!(
        out[0].shares_storage_with(&big),
        "a whole-tensor slice is not copied"
    );
    let too_far = HostTensor::from_i32s(vec![2], &[4, 1]).unwrap();
    let err = run(&Kernel::Slice, &[big, zero, too_far]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "slice [0, 0 + 4) of dimension 0 is outside [0, 3)"
    );
}

#[test]
fn fill_repeats_a_scalar_over_the_shape() {
    let dims = HostTensor::from_i32s(vec![2], &[2, 3]).unwrap();
    let seven = HostTensor::from_i32s(vec![], &[7]).unwrap();
    let out = run(&Kernel::Fill, &[dims.clone(), seven]).unwrap();
    assert_eq!(out[0], HostTensor::from_i32s(vec![2, 3], &[7; 6]).unwrap());
    let out = run(&Kernel::Fill, &[dims.clone(), s("ab")]).unwrap();
    assert_eq!(out[0].shape(), [2, 3]);
    assert_eq!(
        out[0].strings().unwrap(),
        vec![b"ab".to_vec(); 6].as_slice()
    );
    let empty = HostTensor::from_i32s(vec![2], &[0, 3]).unwrap();
    let out = run(&Kernel::Fill, &[empty, s("x")]).unwrap();
    assert_eq!(out[0].num_elements(), 0);
    let negative = HostTensor::from_i32s(vec![2], &[2, -1]).unwrap();
    let err = run(&Kernel::Fill, &[negative, s("x")]).unwrap_err();
    assert_eq!(err.to_string(), "Fill dimension -1 is negative");
    let vector = HostTensor::from_i32s(vec![2], &[1, 2]).unwrap();
    let err = run(&Kernel::Fill, &[dims, vector]).unwrap_err();
    assert!(err.to_string().contains("scalar"), "{err}");
}

#[test]
fn checkpoint_kernels_need_a_backend() {
    let err = run(
        &Kernel::MergeV2Checkpoints(Default::default()),
        &[HostTensor::string_vector(["a"]), s("b")],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "the run has no checkpoint backend");
    let err = run(
        &Kernel::SaveV2 {
            dtypes: vec![DType::Float],
        },
        &[s("p"), HostTensor::string_vector(["a", "b"]), s("")],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "input 1 must be shape [1], got shape [2]");
}

/// A checkpoint backend that saves nothing and restores `restored` whatever is asked.
struct FixedIo {
    restored: Vec<HostTensor>,
}

impl CheckpointIo for FixedIo {
    fn save(&self, _: &str, _: &[SaveRequest<'_>]) -> Result<(), IoError> {
        Ok(())
    }

    fn restore(&self, _: &str, _: &[RestoreRequest<'_>]) -> Result<Vec<HostTensor>, IoError> {
        Ok(self.restored.clone())
    }

    fn merge(&self, _: &[&str], _: &str, _: MergeFlags) -> Result<(), IoError> {
        Ok(())
    }
}

/// Runs `kernel` outside any plan with `io` as the checkpoint backend.
fn run_with_io(
    kernel: &Kernel,
    io: &dyn CheckpointIo,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, KernelError> {
    let variables = VariableStore::new();
    let cx = KernelCx {
        variables: &variables,
        io: Some(io),
        cluster: None,
        name: "op",
        device: "/job:localhost/replica:0/task:0/device:CPU:0",
    };
    kernel.run(&cx, inputs)
}

/// `SaveV2` checks its tensors against `dtypes` before any IO: their count and dtypes.
#[test]
fn save_v2_rejects_tensors_that_disagree_with_dtypes() {
    let io = FixedIo {
        restored: Vec::new(),
    };
    let save = Kernel::SaveV2 {
        dtypes: vec![DType::Float],
    };
    let header = || {
        vec![
            s("p"),
            HostTensor::string_vector(["a"]),
            HostTensor::string_vector([""]),
        ]
    };
    let float = HostTensor::from_f32s(vec![1], &[1.0]).unwrap();
    let mut two = header();
    two.extend([float.clone(), float.clone()]);
    let err = run_with_io(&save, &io, &two).unwrap_err();
    assert_eq!(err.to_string(), "expected 1 tensors, got 2");
    let err = run_with_io(&save, &io, &header()).unwrap_err();
    assert_eq!(err.to_string(), "expected 1 tensors, got 0");
    let mut int = header();
    int.push(HostTensor::int32_scalar(1));
    let err = run_with_io(&save, &io, &int).unwrap_err();
    assert!(err.to_string().contains("input 3"), "{err}");
    let mut ok = header();
    ok.push(float);
    assert!(run_with_io(&save, &io, &ok).unwrap().is_empty());
}

/// `RestoreV2` checks what the backend returns: one tensor per name, of the asked dtype.
#[test]
fn restore_v2_rejects_what_the_backend_got_wrong() {
    let restore = Kernel::RestoreV2 {
        dtypes: vec![DType::Float],
    };
    let inputs = [
        s("p"),
        HostTensor::string_vector(["a"]),
        HostTensor::string_vector([""]),
    ];
    let none = FixedIo {
        restored: Vec::new(),
    };
    let err = run_with_io(&restore, &none, &inputs).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the checkpoint backend returned 0 tensors for 1 names"
    );
    let int = FixedIo {
        restored: vec![HostTensor::int32_scalar(7)],
    };
    let err = run_with_io(&restore, &int, &inputs).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor `a` in the checkpoint is int32, expected float32"
    );
    let float = HostTensor::from_f32s(vec![1], &[2.0]).unwrap();
    let right = FixedIo {
        restored: vec![float.clone()],
    };
    assert_eq!(run_with_io(&restore, &right, &inputs).unwrap(), [float]);
}

/// TF1 reference variables: `VariableV2` gives a reference (a handle with a `_ref` dtype) and
/// creates nothing; `Assign` writes through it and returns it; a value input given the
/// reference (`Identity`, `Assign`'s `value`) reads the variable; `Assign` refuses a value as
/// its `ref` input, on one line.
#[test]
fn ref_variable_kernels() {
    use saveplan::exec::VarKey;
    let module = saveplan_ir::parse_module(
        "graph {\n  v = VariableV2[dtype=int32, shape=[2]]\n  \
         w = VariableV2[container=\"c\", dtype=int32, shape=[2], shared_name=\"w\"]\n}\n",
    )
    .unwrap();
    let kernel = |name: &str| {
        let graph = &module.graph;
        Kernel::resolve(graph.op(graph.find(name).unwrap())).unwrap()
    };
    let variables = VariableStore::new();
    let cx = KernelCx {
        variables: &variables,
        io: None,
        cluster: None,
        name: "op",
        device: "/job:localhost/replica:0/task:0/device:CPU:0",
    };
    let reference = kernel("v").run(&cx, &[]).unwrap().remove(0);
    assert_eq!(reference.dtype(), DType::Resource);
    assert!(variables.get(&VarKey::new("", "v")).is_err());
    let assign = Kernel::Assign {
        dtype: DType::Int32,
        validate_shape: true,
    };
    let value = HostTensor::from_i32s(vec![2], &[4, 5]).unwrap();
    let out = assign
        .run(&cx, &[reference.clone(), value.clone()])
        .unwrap();
    assert_eq!(out, std::slice::from_ref(&reference));
    assert_eq!(variables.get(&VarKey::new("", "v")).unwrap(), value);
    assert_eq!(
        Kernel::Identity
            .run(&cx, std::slice::from_ref(&reference))
            .unwrap(),
        std::slice::from_ref(&value)
    );
    // `Assign(w, v)`: the value comes from another reference.
    let w = kernel("w").run(&cx, &[]).unwrap().remove(0);
    assign.run(&cx, &[w, reference]).unwrap();
    assert_eq!(variables.get(&VarKey::new("c", "w")).unwrap(), value);
    let err = assign.run(&cx, &[value.clone(), value]).unwrap_err();
    let line = error_chain(&err, ErrorForm::OneLine);
    assert!(!line.contains('\n') && line.contains("input 0"), "{line}");
}

/// `SaveV2` and `RestoreV2` report their inputs' errors in input order, whatever position
/// they are at: every name (input 1) is checked before any spec (input 2), and both before
/// the tensors' count and dtypes.
#[test]
fn save_v2_and_restore_v2_check_their_inputs_in_order() {
    let io = FixedIo {
        restored: Vec::new(),
    };
    let dtypes = vec![DType::Float, DType::Float];
    let save = Kernel::SaveV2 {
        dtypes: dtypes.clone(),
    };
    let restore = Kernel::RestoreV2 { dtypes };
    let bad = || b"\xff".to_vec();
    let strings = |elements: Vec<Vec<u8>>| {
        let len = elements.len() as u64;
        HostTensor::from_strings(vec![len], elements).unwrap()
    };
    let float = HostTensor::from_f32s(vec![1], &[1.0]).unwrap();
    let int = HostTensor::int32_scalar(1);
    // `RestoreV2` of the same names and specs fails alike when a string is bad.
    let check = |names: HostTensor, specs: HostTensor, tensors: &[HostTensor], expected: &str| {
        let head = vec![s("p"), names, specs];
        if expected.ends_with("UTF-8") {
            let err = run_with_io(&restore, &io, &head).unwrap_err();
            assert_eq!(err.to_string(), expected, "RestoreV2");
        }
        let mut inputs = head;
        inputs.extend_from_slice(tensors);
        let err = run_with_io(&save, &io, &inputs).unwrap_err();
        assert_eq!(err.to_string(), expected, "SaveV2");
    };
    // A bad name after a bad spec, a bad dtype and a missing tensor: the name.
    check(
        strings(vec![b"a".to_vec(), bad()]),
        strings(vec![bad(), Vec::new()]),
        std::slice::from_ref(&int),
        "input 1 is not valid UTF-8",
    );
    // A bad spec after a bad dtype: the spec.
    check(
        strings(vec![b"a".to_vec(), b"b".to_vec()]),
        strings(vec![Vec::new(), bad()]),
        &[int.clone(), float.clone()],
        "input 2 is not valid UTF-8",
    );
    // A spec vector of the wrong shape after a bad name: the name.
    check(
        strings(vec![bad(), b"b".to_vec()]),
        strings(vec![Vec::new()]),
        &[float.clone(), float.clone()],
        "input 1 is not valid UTF-8",
    );
    // Valid strings: the count, then the first bad dtype.
    let names = || strings(vec![b"a".to_vec(), b"b".to_vec()]);
    let specs = || strings(vec![Vec::new(), Vec::new()]);
    check(
        names(),
        specs(),
        std::slice::from_ref(&float),
        "expected 2 tensors, got 1",
    );
    let err = run_with_io(
        &save,
        &io,
        &[s("p"), names(), specs(), float.clone(), int.clone()],
    )
    .unwrap_err();
    assert!(err.to_string().contains("input 4"), "{err}");
}
