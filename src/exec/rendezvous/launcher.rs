//! What the launcher tells this process: its connections to the launcher, on which Nagle's
//! algorithm is turned off before `MPI_Finalize` ([`links_without_delay`]), and whether every
//! rank of the job runs on this host, where Open MPI's PCI discovery can be skipped
//! ([`one_host_discovery`]).

use std::net::SocketAddr;

/// Turns Nagle's algorithm off on this process's connections to the node's PMIx server
/// (`mpirun`, or Open MPI's daemon on another node: the addresses Open MPI gives each process
/// in `PMIX_SERVER_URI*`), before `MPI_Finalize`.
///
/// PMIx's client talks to its server over loopback TCP with Nagle's algorithm on, and
/// finalizing sends a few small requests in a row, one the server does not answer: the next
/// is then held until the server's delayed acknowledgement, about 40 ms on Linux, in every
/// rank. With the delay off, `MPI_Finalize` takes about 4 ms instead of 46
/// (`docs/benchmarks.md`). Only the socket option changes ([`crate::process::tcp_without_delay_to`]),
/// and what is not a TCP connection to that server (or a launcher that gives no such address)
/// is left as it is.
#[cfg(feature = "mpi")]
pub(super) fn links_without_delay() {
    let servers = pmix_servers(std::env::vars_os());
    if !servers.is_empty() {
        crate::process::tcp_without_delay_to(&servers);
    }
}

/// hwloc's variable naming the discovery components it runs, and the value that leaves out its
/// PCI discovery (`-pci`, reading every PCI device's configuration space, which on a VM exits
/// to the hypervisor at each read) and the Linux I/O devices found through it (`-linuxio`).
pub(super) const NO_PCI_DISCOVERY: (&str, &str) = ("HWLOC_COMPONENTS", "-pci,-linuxio");

/// The variable to set before `MPI_Init` for its hardware discovery to skip the PCI devices
/// ([`NO_PCI_DISCOVERY`]), when the environment `vars` says that Open MPI's launcher started
/// every rank of the job on this host (`OMPI_COMM_WORLD_LOCAL_SIZE` equal to
/// `OMPI_COMM_WORLD_SIZE`) and the user left hwloc's components to it (no `HWLOC_COMPONENTS`,
/// even empty). Ranks of one host meet through shared memory, so no network card is chosen
/// by where it sits, which is what Open MPI reads the PCI devices for; on several hosts
/// (or under another launcher) it is `None` and the discovery runs.
pub(super) fn one_host_discovery(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Option<(&'static str, &'static str)> {
    let (mut local, mut world) = (None, None);
    for (name, value) in vars {
        let number = || value.to_str().and_then(|value| value.parse::<u64>().ok());
        match name.to_str() {
            Some(name) if name == NO_PCI_DISCOVERY.0 => return None,
            Some("OMPI_COMM_WORLD_LOCAL_SIZE") => local = number(),
            Some("OMPI_COMM_WORLD_SIZE") => world = number(),
            _ => {}
        }
    }
    match (local, world) {
        (Some(local), Some(world)) if local == world => Some(NO_PCI_DISCOVERY),
        _ => None,
    }
}

/// The PMIx servers' TCP addresses among the environment variables `vars`
/// (`PMIX_SERVER_URI*`).
fn pmix_servers(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<SocketAddr> {
    vars.filter(|(name, _)| name.to_string_lossy().starts_with("PMIX_SERVER_URI"))
        .filter_map(|(_, uri)| uri.into_string().ok())
        .flat_map(|uri| pmix_addresses(&uri))
        .collect()
}

/// The TCP addresses in a PMIx server URI (`"<nspace>.<rank>;tcp4://127.0.0.1:45179"`).
fn pmix_addresses(uri: &str) -> Vec<SocketAddr> {
    (uri.split(';'))
        .filter_map(|part| {
            let address =
                (part.strip_prefix("tcp4://")).or_else(|| part.strip_prefix("tcp6://"))?;
            address.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(
        pairs: &[(&str, &str)],
    ) -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
        let pairs: Vec<_> = (pairs.iter())
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        pairs.into_iter()
    }

    #[test]
    fn pci_discovery_is_skipped_only_when_every_rank_is_here_and_the_user_left_hwloc_alone() {
        let one_host = [
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "2"),
        ];
        assert_eq!(
            one_host_discovery(vars(&one_host)),
            Some(("HWLOC_COMPONENTS", "-pci,-linuxio"))
        );
        // Ranks on other hosts too: their network cards are chosen by the PCI topology.
        let two_hosts = [
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        assert_eq!(one_host_discovery(vars(&two_hosts)), None);
        // The user's own choice of components, whatever it is, even empty, stays.
        for theirs in ["", "-pci", "linux,x86"] {
            let mut set = one_host.to_vec();
            set.push(("HWLOC_COMPONENTS", theirs));
            assert_eq!(one_host_discovery(vars(&set)), None, "{theirs:?}");
            set.rotate_right(1);
            assert_eq!(one_host_discovery(vars(&set)), None, "{theirs:?} first");
        }
        // Another launcher, or not launched at all, or sizes that are not numbers.
        assert_eq!(one_host_discovery(vars(&[("PMI_SIZE", "2")])), None);
        assert_eq!(one_host_discovery(vars(&[])), None);
        let odd = [
            ("OMPI_COMM_WORLD_SIZE", "x"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "x"),
        ];
        assert_eq!(one_host_discovery(vars(&odd)), None);
        assert_eq!(one_host_discovery(vars(&one_host[..1])), None);
    }

    #[test]
    fn a_pmix_uri_gives_its_tcp_addresses() {
        let uri = "812646400.0;tcp4://127.0.0.1:45179";
        assert_eq!(pmix_addresses(uri), ["127.0.0.1:45179".parse().unwrap()]);
        let uri = "812646400.0;tcp6://[::1]:58527";
        assert_eq!(pmix_addresses(uri), ["[::1]:58527".parse().unwrap()]);
        assert!(pmix_addresses("812646400.0;usock:/tmp/x").is_empty());
        assert!(pmix_addresses("").is_empty());
        // As `mpirun` sets them, one address under several names, among others.
        let servers = pmix_servers(vars(&[
            ("PMIX_SERVER_URI4", "1.0;tcp4://127.0.0.1:45179"),
            ("PMIX_SERVER_URI41", "1.0;tcp4://127.0.0.1:45179"),
            ("OMPI_MCA_orte_hnp_uri", "1.0;tcp://192.0.2.2:51769"),
            ("PMIX_SECURITY_MODE", "native"),
        ]));
        assert_eq!(servers, ["127.0.0.1:45179".parse().unwrap(); 2]);
    }
}
