//! `_Send` and `_Recv` (and their host-memory twins): the two ends of an edge a partitioned
//! graph cut between tasks, meeting through the run's [`crate::exec::rendezvous`].

use super::{KernelCx, Transfer};
use crate::exec::error::KernelError;
use crate::exec::rendezvous::{ClusterRun, RendezvousKey};
use crate::exec::tensor::HostTensor;

/// The cluster of the run and the key of `transfer` in it.
pub(crate) fn key<'a>(
    cx: &KernelCx<'a>,
    transfer: &Transfer,
) -> Result<(ClusterRun<'a>, RendezvousKey), KernelError> {
    let cluster = cx.cluster.ok_or_else(|| KernelError::Cluster {
        what: "runs only in one task's partition of a cluster run".to_owned(),
    })?;
    let task_of = |device: &str| {
        cluster.task_of(device).ok_or_else(|| KernelError::Cluster {
            what: format!("device {device:?} is on no task of the cluster"),
        })
    };
    let key = RendezvousKey::new(
        task_of(&transfer.send_device)?,
        task_of(&transfer.recv_device)?,
        transfer.tensor_name.clone(),
    );
    Ok((cluster, key))
}

/// Hands `value` to the receiving task.
pub(super) fn send(
    cx: &KernelCx<'_>,
    transfer: &Transfer,
    value: &HostTensor,
) -> Result<Vec<HostTensor>, KernelError> {
    if value.dtype() != transfer.dtype {
        return Err(KernelError::InputDType {
            input: 0,
            expected: transfer.dtype,
            got: value.dtype(),
        });
    }
    let (cluster, key) = key(cx, transfer)?;
    cluster.rendezvous.send(&key, value.clone())?;
    Ok(Vec::new())
}

/// Waits for the value the sending task hands over.
pub(super) fn recv(cx: &KernelCx<'_>, transfer: &Transfer) -> Result<Vec<HostTensor>, KernelError> {
    let (cluster, key) = key(cx, transfer)?;
    received(transfer, cluster.rendezvous.recv(&key)?)
}

/// The outputs of `transfer`'s receive, given the value that arrived: it must be of the
/// dtype the receive declares.
pub(crate) fn received(
    transfer: &Transfer,
    value: HostTensor,
) -> Result<Vec<HostTensor>, KernelError> {
    if value.dtype() != transfer.dtype {
        return Err(KernelError::invalid(format!(
            "received {} for {}, expected {}",
            value.dtype(),
            transfer.tensor_name,
            transfer.dtype
        )));
    }
    Ok(vec![value])
}
