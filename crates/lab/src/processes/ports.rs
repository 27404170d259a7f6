//! Ports on 127.0.0.1 for the children the bench, the demos and `up` start.
//!
//! A port found free and then released can be taken before the child binds it: by another
//! program's bind to port 0, or as the source port of any outgoing connection (under a parallel
//! test suite, thousands a second). So a port is *held* instead: bound with `SO_REUSEADDR` and
//! never listening, for as long as its [`Held`] lives. The kernel then hands it to no bind to
//! port 0 and to no outgoing connection, and refuses a bind without `SO_REUSEADDR`; a child
//! that binds it with `SO_REUSEADDR` (std's, tokio's and the proxy's listeners all do) listens
//! on it, because a socket that does not listen does not conflict with one that does.

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

use crate::error::{LabError, io};

/// Ports held for children to listen on; released when dropped. Keep it for as long as the
/// children may bind (again, after a restart) — for a whole run.
#[derive(Debug)]
pub struct Held {
    _sockets: Vec<Socket>,
    addrs: Vec<SocketAddr>,
}

impl Held {
    /// The held addresses, in the order asked for.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

fn hold_addrs(count: usize) -> std::io::Result<Held> {
    let mut sockets = Vec::with_capacity(count);
    let mut addrs = Vec::with_capacity(count);
    for _ in 0..count {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
        let addr = s.local_addr()?.as_socket().ok_or_else(|| {
            std::io::Error::other("a socket bound on 127.0.0.1 has no IP address")
        })?;
        addrs.push(addr);
        sockets.push(s);
    }
    Ok(Held {
        _sockets: sockets,
        addrs,
    })
}

/// `count` distinct ports on 127.0.0.1, held until the [`Held`] is dropped.
pub fn hold(count: usize) -> Result<Held, LabError> {
    hold_addrs(count).map_err(io("cannot find a free port on 127.0.0.1"))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn held_ports_are_distinct_for_a_whole_chain() {
        let held = hold(8).unwrap();
        let mut p: Vec<u16> = held.addrs().iter().map(|a| a.port()).collect();
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), 8);
    }

    /// Held: a bind that does not share the port is refused, so no bind to port 0 and no
    /// connection's source port gets it.
    #[test]
    fn a_held_port_refuses_a_bind_that_does_not_share_it() {
        let held = hold(1).unwrap();
        let addr = held.addrs()[0];
        let plain = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let e = plain.bind(&addr.into()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        drop(held);
        let plain = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        plain.bind(&addr.into()).expect("released when dropped");
    }

    /// What a child does: std's listener (SO_REUSEADDR) binds the held port and serves on it.
    #[test]
    fn a_child_listens_on_a_held_port() {
        let held = hold(1).unwrap();
        let addr = held.addrs()[0];
        let listener = TcpListener::bind(addr).expect("a listener binds a held port");
        let mut client = TcpStream::connect(addr).unwrap();
        let (mut served, _) = listener.accept().unwrap();
        client.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        served.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        // A second listener on the port is still refused.
        assert!(TcpListener::bind(addr).is_err());
    }
}
