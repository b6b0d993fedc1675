//! `SaverDef` ↔ [`SaverDef`]: TensorFlow's saver description as the plain data of
//! `saveplan_ir`, so that code outside `export/` never handles the protobuf message.

use saveplan_ir::SaverDef;
use saveplan_proto::tensorflow as pb;

/// Converts a `SaverDef` message; every field is kept.
pub fn import_saver_def(saver_def: &pb::SaverDef) -> SaverDef {
    SaverDef {
        filename_tensor_name: saver_def.filename_tensor_name.clone(),
        save_tensor_name: saver_def.save_tensor_name.clone(),
        restore_op_name: saver_def.restore_op_name.clone(),
        max_to_keep: saver_def.max_to_keep,
        sharded: saver_def.sharded,
        keep_checkpoint_every_n_hours: saver_def.keep_checkpoint_every_n_hours,
        version: saver_def.version,
    }
}

/// Converts a [`SaverDef`] into its message; every field is kept.
pub fn saver_def(saver_def: &SaverDef) -> pb::SaverDef {
    pb::SaverDef {
        filename_tensor_name: saver_def.filename_tensor_name.clone(),
        save_tensor_name: saver_def.save_tensor_name.clone(),
        restore_op_name: saver_def.restore_op_name.clone(),
        max_to_keep: saver_def.max_to_keep,
        sharded: saver_def.sharded,
        keep_checkpoint_every_n_hours: saver_def.keep_checkpoint_every_n_hours,
        version: saver_def.version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips() {
        let message = pb::SaverDef {
            filename_tensor_name: "save/Const:0".to_owned(),
            save_tensor_name: "save/control_dependency:0".to_owned(),
            restore_op_name: "save/restore_all".to_owned(),
            max_to_keep: 5,
            sharded: true,
            keep_checkpoint_every_n_hours: 10000.0,
            version: pb::saver_def::CheckpointFormatVersion::V1 as i32,
        };
        assert_eq!(saver_def(&import_saver_def(&message)), message);
        assert_eq!(
            saver_def(&SaverDef::v2("a:0", "b:0", "c")).version,
            pb::saver_def::CheckpointFormatVersion::V2 as i32
        );
    }
}
