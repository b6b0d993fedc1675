//! The copies a save or restore does not make: a restore into variables hands out views into
//! the data file's memory map (the variable and `Session::values` share them, nothing is copied
//! into a buffer of its own), mapped and owned tensors with the same elements are equal, and
//! the restores of one run share the bundle they open.

use crate::support::session::{generated_values, spec_session_on};

use saveplan::exec::{
    Backend, BundleIo, CheckpointIo, HostTensor, RestoreRequest, RunIo, SaveRequest,
};
use saveplan_ir::DType;

/// After a restore, every whole fixed-width tensor is a mapped view, `Session::values` shares
/// it with its variable (pointer identity of the storage), and the values are the saved ones;
/// on every backend and for one and two tasks.
#[test]
fn restores_hand_out_mapped_views_shared_with_the_variables() {
    for case in ["trace/g1_single_cpu.json", "trace/g3_two_tasks.json"] {
        for backend in Backend::available() {
            let session = spec_session_on(case, backend);
            let values = generated_values(&session, 5);
            session.assign(values.clone()).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ckpt");
            let prefix = prefix.to_str().unwrap();
            session.save(prefix).unwrap();
            session.restore(prefix).unwrap();
            let restored = session.values().unwrap();
            assert_eq!(restored, values, "{case} on {backend}");
            let mut mapped = 0;
            for (key, tensor) in session.restored_tensors() {
                let [part] = tensor.parts.as_slice() else {
                    continue;
                };
                let value = &restored[key];
                if part.region.is_some() || value.bytes().is_none_or(<[u8]>::is_empty) {
                    continue;
                }
                let held = session.variables().get(&part.variable).unwrap();
                assert!(
                    value.shares_storage_with(&held),
                    "{case} on {backend}: {key}"
                );
                assert!(
                    !value.shares_storage_with(&values[key]),
                    "{case} on {backend}: {key} came from the file"
                );
                if cfg!(unix) {
                    assert!(value.is_mapped(), "{case} on {backend}: {key}");
                }
                mapped += 1;
            }
            assert!(mapped > 0, "{case}: no whole fixed-width tensor checked");
        }
    }
}

/// A mapped tensor equals an owned one with the same dtype, shape and bytes, and its bytes move
/// out as a copy.
#[test]
fn mapped_and_owned_tensors_compare_by_elements() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix = prefix.to_str().unwrap();
    let owned = HostTensor::from_f32s(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    save_one(prefix, &owned);
    let restored = restore_one(&BundleIo::default(), prefix);
    assert_eq!(restored.is_mapped(), cfg!(unix));
    assert_eq!(restored, owned);
    assert_ne!(
        restored,
        HostTensor::from_f32s(vec![2, 2], &[1.0, 2.0, 3.0, 5.0]).unwrap()
    );
    assert_eq!(restored.into_bytes(), owned.into_bytes());
}

/// The restores of one run ([`RunIo`]) read through the reader the first one opened (the same
/// map, so the same addresses); separate restores open the bundle again, and a save in the
/// run makes the next restore open it again.
#[test]
fn restores_of_one_run_share_the_opened_bundle() {
    if !cfg!(unix) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix = prefix.to_str().unwrap();
    let tensor = HostTensor::from_i32s(vec![4], &[1, 2, 3, 4]).unwrap();
    save_one(prefix, &tensor);
    let address = |tensor: &HostTensor| tensor.bytes().unwrap().as_ptr();

    let io = BundleIo::default();
    let run = RunIo::new(&io);
    let first = restore_one(&run, prefix);
    let second = restore_one(&run, prefix);
    assert_eq!(address(&first), address(&second));

    let apart = restore_one(&io, prefix);
    assert_ne!(address(&first), address(&apart));

    let other = dir.path().join("other");
    run.save(
        other.to_str().unwrap(),
        &[SaveRequest {
            name: "t",
            shape_and_slice: "",
            tensor: &tensor,
        }],
    )
    .unwrap();
    let after_save = restore_one(&run, prefix);
    assert_ne!(address(&first), address(&after_save));
    assert_eq!(after_save, tensor);
}

/// Saves `tensor` under key `t` at `prefix`.
fn save_one(prefix: &str, tensor: &HostTensor) {
    let request = SaveRequest {
        name: "t",
        shape_and_slice: "",
        tensor,
    };
    BundleIo::default().save(prefix, &[request]).unwrap();
}

/// Restores key `t` from `prefix` through `io`.
fn restore_one(io: &dyn CheckpointIo, prefix: &str) -> HostTensor {
    let request = RestoreRequest {
        name: "t",
        shape_and_slice: "",
        dtype: stored_dtype(prefix),
    };
    io.restore(prefix, &[request]).unwrap().remove(0)
}

/// The stored dtype of key `t` at `prefix`.
fn stored_dtype(prefix: &str) -> DType {
    let reader = saveplan::bundle::BundleReader::open(prefix).unwrap();
    reader.entry("t").unwrap().dtype
}

/// A restore of tensors of one shape makes that shape once: tensors in a row with the same
/// shape share its storage, and a tensor of another shape has its own.
#[test]
fn restored_tensors_of_one_shape_share_it() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let prefix = prefix.to_str().unwrap();
    let pair = HostTensor::from_f32s(vec![2], &[1.0, 2.0]).unwrap();
    let triple = HostTensor::from_f32s(vec![3], &[1.0, 2.0, 3.0]).unwrap();
    let tensors = [("a", &pair), ("b", &pair), ("c", &triple), ("d", &pair)];
    let requests: Vec<SaveRequest<'_>> = tensors
        .iter()
        .map(|&(name, tensor)| SaveRequest {
            name,
            shape_and_slice: "",
            tensor,
        })
        .collect();
    BundleIo::default().save(prefix, &requests).unwrap();
    let reads: Vec<RestoreRequest<'_>> = tensors
        .iter()
        .map(|&(name, _)| RestoreRequest {
            name,
            shape_and_slice: "",
            dtype: DType::Float,
        })
        .collect();
    let restored = BundleIo::default().restore(prefix, &reads).unwrap();
    for ((name, expected), got) in tensors.iter().zip(&restored) {
        assert_eq!(got, *expected, "{name}");
    }
    let shape = |index: usize| restored[index].shape().as_ptr();
    assert_eq!(shape(0), shape(1), "a and b in a row");
    assert_ne!(shape(1), shape(2), "c has another shape");
    assert_ne!(shape(2), shape(3), "d follows c");
}
