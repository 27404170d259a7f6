//! This replica's name, where `Status` says which replica a proxy is connected to and where the
//! replicas' records of their proxies are merged. Replicas listening on an unspecified address
//! (`0.0.0.0:7900`, `[::]:7900`) would all share that name, so it is the host's name instead.

use std::net::SocketAddr;

/// `<hostname>:<port>` when `addr`'s IP is unspecified and the host's name is known, else `addr`.
pub(super) fn name(addr: SocketAddr, hostname: Option<&str>) -> String {
    match hostname.map(str::trim).filter(|h| !h.is_empty()) {
        Some(host) if addr.ip().is_unspecified() => format!("{host}:{}", addr.port()),
        _ => addr.to_string(),
    }
}

/// The host's name, as the kernel holds it (Linux; `None` elsewhere or if unreadable).
pub(super) fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn an_unspecified_address_is_named_after_the_host() {
        assert_eq!(name(addr("0.0.0.0:7900"), Some("node-1\n")), "node-1:7900");
        assert_eq!(name(addr("[::]:7901"), Some("node-2")), "node-2:7901");
    }

    #[test]
    fn a_specific_address_is_its_own_name() {
        assert_eq!(name(addr("10.0.0.5:7900"), Some("node-1")), "10.0.0.5:7900");
        assert_eq!(name(addr("[::1]:7900"), Some("node-1")), "[::1]:7900");
    }

    #[test]
    fn without_a_host_name_the_address_stays() {
        assert_eq!(name(addr("0.0.0.0:7900"), None), "0.0.0.0:7900");
        assert_eq!(name(addr("0.0.0.0:7900"), Some(" \n")), "0.0.0.0:7900");
    }
}
