//! Free ports on 127.0.0.1: the bench, the demos and `up` all take their ports here.

use std::net::{SocketAddr, TcpListener};

use crate::error::{LabError, io};

/// `count` distinct ports on 127.0.0.1 that were free a moment ago (bound together, then
/// released).
pub fn free_addrs(count: usize) -> std::io::Result<Vec<SocketAddr>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|l| l.local_addr()).collect()
}

/// [`free_addrs`], as the lab's error.
pub fn free_ports(count: usize) -> Result<Vec<SocketAddr>, LabError> {
    free_addrs(count).map_err(io("cannot find a free port on 127.0.0.1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports(6).unwrap();
        let mut ports: Vec<u16> = p.iter().map(|a| a.port()).collect();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 6);
    }

    #[test]
    fn free_ports_are_distinct_for_a_whole_chain() {
        let mut p: Vec<u16> = free_ports(8)
            .unwrap_or_default()
            .iter()
            .map(|a| a.port())
            .collect();
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), 8);
    }
}
