//! Who a gateway's request comes from when proxies stand in front of it
//! (`gateway.trusted_proxies`): the client its trusted proxies name in `X-Forwarded-For`, read
//! as nginx's `real_ip_recursive` and Envoy's trusted CIDRs read it. Pure.

use std::net::{IpAddr, SocketAddr};

use crate::capture::Cidr;

/// How many `X-Forwarded-For` entries are read, from the right: more hops than any real chain
/// of proxies, and a bound on the work a header can ask for.
pub const MAX_HOPS: usize = 32;

/// The client of a request whose connection comes from `peer`: `peer` itself unless it is a
/// trusted proxy; then, reading `forwarded_for`'s entries from the right (each proxy appends
/// the address it saw), the first that is not a trusted proxy. When every entry is one, the
/// left-most; an entry that is no address ends the walk at the trusted proxy that passed it on
/// (what it did not check is not believed).
pub fn client_behind<'a>(
    peer: IpAddr,
    forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    trusted: &[Cidr],
) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip.to_canonical()));
    let mut client = peer;
    if !is_trusted(client) {
        return client;
    }
    for entry in forwarded_for.rev().take(MAX_HOPS) {
        let Some(ip) = address(entry.trim()) else {
            return client;
        };
        client = ip;
        if !is_trusted(ip) {
            return client;
        }
    }
    client
}

/// An entry: an IP address, an IPv6 one in brackets, either with a port (some load balancers
/// add one).
fn address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(inner) = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
        return inner.parse().ok();
    }
    entry.parse::<SocketAddr>().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn behind(peer: &str, xff: &str, trusted: &[&str]) -> String {
        let trusted: Vec<Cidr> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        let entries = xff.split(',').filter(|e| !e.trim().is_empty());
        client_behind(peer.parse().unwrap(), entries, &trusted).to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        assert_eq!(behind("198.51.100.9", "1.2.3.4", &[]), "198.51.100.9");
        assert_eq!(
            behind("198.51.100.9", "1.2.3.4", &["10.0.0.0/8"]),
            "198.51.100.9"
        );
    }

    #[test]
    fn a_trusted_peer_names_the_nearest_untrusted_address() {
        let lb = ["10.0.0.0/8"];
        // A client's own claim (1.2.3.4) stands left of what the load balancer saw.
        assert_eq!(
            behind("10.0.0.5", "1.2.3.4, 203.0.113.7", &lb),
            "203.0.113.7"
        );
        // Two trusted hops: the walk goes past both.
        assert_eq!(
            behind("10.0.0.5", "1.2.3.4, 203.0.113.7, 10.1.1.1", &lb),
            "203.0.113.7"
        );
        // Every entry trusted: the left-most; none at all: the peer.
        assert_eq!(behind("10.0.0.5", "10.9.9.9, 10.1.1.1", &lb), "10.9.9.9");
        assert_eq!(behind("10.0.0.5", "", &lb), "10.0.0.5");
        // Ports and brackets as load balancers write them; IPv6 ranges.
        assert_eq!(behind("10.0.0.5", "203.0.113.7:51234", &lb), "203.0.113.7");
        let v6 = ["2001:db8::/32"];
        assert_eq!(behind("2001:db8::1", "[2001:db9::7]", &v6), "2001:db9::7");
        // An IPv4 peer seen on a dual-stack socket is read as IPv4.
        assert_eq!(behind("::ffff:10.0.0.5", "203.0.113.7", &lb), "203.0.113.7");
    }

    #[test]
    fn what_is_no_address_is_not_believed_past_the_proxy_that_passed_it() {
        let lb = ["10.0.0.0/8"];
        assert_eq!(behind("10.0.0.5", "203.0.113.7, unknown", &lb), "10.0.0.5");
        assert_eq!(
            behind("10.0.0.5", "203.0.113.7, garbage, 10.1.1.1", &lb),
            "10.1.1.1"
        );
    }

    #[test]
    fn a_long_chain_is_read_only_so_far() {
        let lb = ["10.0.0.0/8"];
        let chain = vec!["10.0.0.1"; 100].join(", ");
        let xff = format!("203.0.113.7, {chain}");
        assert_eq!(behind("10.0.0.5", &xff, &lb), "10.0.0.1");
    }
}
