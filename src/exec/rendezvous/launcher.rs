//! This process's connections to the launcher: Nagle's algorithm turned off on them before
//! `MPI_Finalize` ([`links_without_delay`]).

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

    #[test]
    fn a_pmix_uri_gives_its_tcp_addresses() {
        let uri = "812646400.0;tcp4://127.0.0.1:45179";
        assert_eq!(pmix_addresses(uri), ["127.0.0.1:45179".parse().unwrap()]);
        let uri = "812646400.0;tcp6://[::1]:58527";
        assert_eq!(pmix_addresses(uri), ["[::1]:58527".parse().unwrap()]);
        assert!(pmix_addresses("812646400.0;usock:/tmp/x").is_empty());
        assert!(pmix_addresses("").is_empty());
        // As `mpirun` sets them, one address under several names, among others.
        let vars = [
            ("PMIX_SERVER_URI4", "1.0;tcp4://127.0.0.1:45179"),
            ("PMIX_SERVER_URI41", "1.0;tcp4://127.0.0.1:45179"),
            ("OMPI_MCA_orte_hnp_uri", "1.0;tcp://192.0.2.2:51769"),
            ("PMIX_SECURITY_MODE", "native"),
        ];
        let vars = vars.map(|(name, value)| (name.into(), value.into()));
        let servers = pmix_servers(vars.into_iter());
        assert_eq!(servers, ["127.0.0.1:45179".parse().unwrap(); 2]);
    }
}
