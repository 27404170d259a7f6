//! How a sample app reaches a service it calls (`hopwise sample --upstream SERVICE=…`): its
//! proxy's local port for that service (`inventory=127.0.0.1:7004`), or the service's name
//! (`inventory=inventory`, or `inventory=inventory:8080`), which a copy run captured resolves
//! in its own namespace (the hosts file `hopwise up` gives it) at each connection, as any
//! unchanged app would: the namespace's rules then take the connection to the copy's proxy.
//! Pure: parsing and the URI authority.

use std::net::{IpAddr, SocketAddr};

/// Where one callee is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callee {
    /// The proxy's local port for the callee.
    Port(SocketAddr),
    /// A host name (resolved when connecting) and a port (default: the scheme's, 80).
    Name { host: String, port: Option<u16> },
}

impl Callee {
    /// The URI authority the sample connects to: `127.0.0.1:7004`, `inventory`, `inventory:8080`.
    pub fn authority(&self) -> String {
        match self {
            Callee::Port(a) => a.to_string(),
            Callee::Name { host, port: None } => host.clone(),
            Callee::Name {
                host,
                port: Some(p),
            } => format!("{host}:{p}"),
        }
    }
}

impl std::fmt::Display for Callee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.authority())
    }
}

/// `SERVICE=IP:PORT` or `SERVICE=NAME[:PORT]`.
pub fn parse_callee(s: &str) -> Result<(String, Callee), String> {
    let (service, to) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write SERVICE=IP:PORT or SERVICE=NAME[:PORT]"))?;
    if service.is_empty() {
        return Err(format!("`{s}`: no service before `=`"));
    }
    if let Ok(addr) = to.parse::<SocketAddr>() {
        return Ok((service.to_owned(), Callee::Port(addr)));
    }
    let (host, port) = match to.rsplit_once(':') {
        Some((h, p)) => {
            let port = p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("`{to}`: the port is not 1 to 65535"))?;
            (h, Some(port))
        }
        None => (to, None),
    };
    if host.parse::<IpAddr>().is_ok() {
        return Err(format!("`{to}`: an IP address needs its port (IP:PORT)"));
    }
    if !is_host_name(host) {
        return Err(format!(
            "`{to}` is neither IP:PORT nor a host name (letters, digits, `-` and `.`)"
        ));
    }
    Ok((
        service.to_owned(),
        Callee::Name {
            host: host.to_owned(),
            port,
        },
    ))
}

/// A DNS host name: labels of letters, digits and `-` (not at either end), 63 bytes at most,
/// 253 in all.
fn is_host_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_or_a_name_with_or_without_its_port() {
        let (s, c) = parse_callee("inventory=127.0.0.1:7004").unwrap();
        assert_eq!(
            (s.as_str(), c.clone()),
            ("inventory", Callee::Port("127.0.0.1:7004".parse().unwrap()))
        );
        assert_eq!(c.authority(), "127.0.0.1:7004");
        let (_, c) = parse_callee("inventory=inventory").unwrap();
        assert_eq!(c.authority(), "inventory");
        let (_, c) = parse_callee("db=db.shop.local:5432").unwrap();
        assert_eq!(
            c,
            Callee::Name {
                host: "db.shop.local".into(),
                port: Some(5432)
            }
        );
        assert_eq!(
            parse_callee("v6=[::1]:80").unwrap().1.authority(),
            "[::1]:80"
        );
    }

    #[test]
    fn anything_else_is_refused_with_what_to_write() {
        for (bad, says) in [
            ("inventory", "write SERVICE="),
            ("=inventory", "no service"),
            ("a=127.0.0.1", "needs its port"),
            ("a=inventory:0", "1 to 65535"),
            ("a=inventory:http", "1 to 65535"),
            ("a=-bad", "neither"),
            ("a=in ventory", "neither"),
            ("a=", "neither"),
            ("a=x..y", "neither"),
        ] {
            let err = parse_callee(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
